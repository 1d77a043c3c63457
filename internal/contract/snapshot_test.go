package contract

import (
	"encoding/json"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// A drift is one pointer in a worker's entry, nil (nothing allocated)
// while there is none; its JSON is the lists and counts as ever, [] for a
// list without runs, and reads back as it was written.
func TestDrift(t *testing.T) {
	assert.Equal(t, unsafe.Sizeof(uintptr(0)), unsafe.Sizeof(Drift{}), "one pointer in every worker's entry")
	none := DriftDetail{Missing: []string{}, Orphaned: nil}
	assert.Zero(t, testing.AllocsPerRun(10, func() { _ = NewDrift(none) }), "no drift: nothing allocated")
	assert.Equal(t, Drift{}, NewDrift(none))

	b, err := json.Marshal(Drift{})
	require.NoError(t, err)
	assert.JSONEq(t, `{"missing":[],"orphaned":[],"missing_count":0,"orphaned_count":0,"over_capacity":0}`, string(b))
	assert.Equal(t, []string{}, Drift{}.Missing())
	assert.Equal(t, []string{}, Drift{}.Orphaned())

	d := NewDrift(DriftDetail{Missing: []string{"r2"}, MissingCount: 3, OverCapacity: 1})
	b, err = json.Marshal(d)
	require.NoError(t, err)
	assert.JSONEq(t, `{"missing":["r2"],"orphaned":[],"missing_count":3,"orphaned_count":0,"over_capacity":1}`, string(b))
	var back Drift
	require.NoError(t, json.Unmarshal(b, &back))
	assert.Equal(t, d.Detail(), back.Detail())
	assert.Equal(t, []string{"r2"}, back.Missing())
	assert.Equal(t, 3, back.MissingCount())
	assert.Equal(t, 0, back.OrphanedCount())
	assert.Equal(t, 1, back.OverCapacity())

	require.NoError(t, json.Unmarshal([]byte(`null`), &back))
	assert.Equal(t, Drift{}, back)
	require.Error(t, json.Unmarshal([]byte(`{"missing":"r1"}`), &back), "not a list")
}

// The three sources are held compactly (72 bytes where three Source values
// were 120), written as the three objects, read back as they were written,
// and given back as they were held, whatever mix of shared prefixes and
// whole lists they came as.
func TestSources(t *testing.T) {
	assert.Equal(t, uintptr(72), unsafe.Sizeof(Sources{}))
	pre := []string{"cicd.worker.id=", "worker_name="}
	tree := Source{Seen: true, LastSeen: Time(5e9), IDs: PrefixedIDs(&pre, "w1")}
	telemetry := Source{Seen: true, LastSeen: Time(6e9), IDs: PrefixedIDs(&pre, "w1")}
	s := NewSources(tree, telemetry, Source{})
	assert.Equal(t, tree, s.Tree())
	assert.Equal(t, telemetry, s.Telemetry())
	assert.Equal(t, Source{}, s.Scheduler())

	b, err := json.Marshal(s)
	require.NoError(t, err)
	want, err := json.Marshal(sourcesJSON{tree, telemetry, Source{}})
	require.NoError(t, err)
	assert.JSONEq(t, string(want), string(b))
	assert.Contains(t, string(b), `"scheduler":{"seen":false,"ids":[]}`)
	var back Sources
	require.NoError(t, json.Unmarshal(b, &back))
	assert.Equal(t, []string{"cicd.worker.id=w1", "worker_name=w1"}, back.Tree().IDs.List())
	assert.Equal(t, Time(6e9), back.Telemetry().LastSeen)
	assert.True(t, back.Telemetry().Seen)
	assert.False(t, back.Scheduler().Seen)

	// A whole list beside prefixed ids, and prefixed ids of another worker
	// id: each source's ids as given.
	for _, c := range [][3]Source{
		{tree, {Seen: true, IDs: IDList("k=v")}, {}},
		{{IDs: IDList("k=v")}, tree, {Seen: true, IDs: PrefixedIDs(&pre, "w2")}},
	} {
		got := NewSources(c[0], c[1], c[2])
		for i, src := range []Source{got.Tree(), got.Telemetry(), got.Scheduler()} {
			assert.Equal(t, c[i].Seen, src.Seen)
			assert.Equal(t, c[i].LastSeen, src.LastSeen)
			assert.Equal(t, c[i].IDs.List(), src.IDs.List())
		}
	}
	require.Error(t, json.Unmarshal([]byte(`{"tree":{"ids":"k=v"}}`), &back), "not a list")

	// Written by hand as encoding/json writes the three Source values:
	// escapes, an id that is not UTF-8, a time without nanoseconds.
	odd := []string{"k=<script>&", "k=\xff\u2028\"\\"}
	for _, c := range [][3]Source{
		{{Seen: true, LastSeen: TimeOf(time.Date(2026, 12, 6, 1, 2, 3, 0, time.UTC)), IDs: PrefixedIDs(&odd, "w\xff")}, {}, {Seen: true, IDs: PrefixedIDs(&odd, "w\xff")}},
		{{IDs: IDList()}, {Seen: true, LastSeen: 1, IDs: IDList("a", "b")}, {Seen: false, LastSeen: 7}},
	} {
		got, err := json.Marshal(NewSources(c[0], c[1], c[2]))
		require.NoError(t, err)
		want, err := json.Marshal(sourcesJSON{c[0], c[1], c[2]})
		require.NoError(t, err)
		assert.Equal(t, string(want), string(got))
	}
}

// An incarnation's source is a byte, written and read as its name; an
// unknown name is an error that names it.
func TestIncarnationSource(t *testing.T) {
	assert.Equal(t, uintptr(48), unsafe.Sizeof(Incarnation{}), "the 48-byte size class")
	in := Incarnation{ID: "4242@2026-12-06T01:02:03.000Z", Source: IncarnationProcess, PID: 4242}
	b, err := json.Marshal(in)
	require.NoError(t, err)
	assert.JSONEq(t, `{"id":"4242@2026-12-06T01:02:03.000Z","source":"telemetry_process","pid":4242}`, string(b))
	var back Incarnation
	require.NoError(t, json.Unmarshal(b, &back))
	assert.Equal(t, in, back)
	for _, s := range []IncarnationSource{0, IncarnationTree, IncarnationProcess, IncarnationServiceInstance} {
		got, ok := ParseIncarnationSource(s.String())
		assert.True(t, ok)
		assert.Equal(t, s, got)
	}
	assert.Empty(t, IncarnationSource(9).String())
	err = json.Unmarshal([]byte(`{"id":"x","source":"pod"}`), &back)
	require.ErrorContains(t, err, `incarnation source "pod"`)
}

// A process's incarnation held without its id is written with the id its
// pid and start time make; an id held is written as it is.
func TestIncarnationName(t *testing.T) {
	started := TimeOf(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))
	in := Incarnation{Source: IncarnationTree, PID: 4242, Started: started}
	assert.Equal(t, "4242@2026-01-02T03:04:05.000Z", in.Name())
	b, err := json.Marshal(in)
	require.NoError(t, err)
	assert.JSONEq(t, `{"id":"4242@2026-01-02T03:04:05.000Z","source":"tree","pid":4242,"started":"2026-01-02T03:04:05Z"}`, string(b))
	var back Incarnation
	require.NoError(t, json.Unmarshal(b, &back))
	assert.Equal(t, "4242@2026-01-02T03:04:05.000Z", back.ID, "read as written")
	assert.Equal(t, "4243", (&Incarnation{Source: IncarnationProcess, PID: 4243}).Name(), "no start time")
	assert.Equal(t, "i-1", (&Incarnation{ID: "i-1", Source: IncarnationServiceInstance}).Name())
	assert.Empty(t, (&Incarnation{}).Name())
}
