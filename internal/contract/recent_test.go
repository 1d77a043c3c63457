package contract

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestRecentRunsRoundTrip(t *testing.T) {
	t0 := time.Date(2026, 12, 5, 9, 30, 0, 123456789, time.UTC)
	rs := []RunRecord{
		{ID: "run-3", Attempt: 2, Result: ResultTimeout, KillReason: KillTimeout, Started: t0, Ended: t0.Add(5 * time.Minute), DurationSeconds: 300},
		{ID: "run-2", Result: ResultSuccess, Started: t0.Add(-time.Minute), Ended: t0.Add(-time.Second), DurationSeconds: 59},
		{ID: "run-1"}, // nothing known but its end's absence
		{ID: "ünïcode <&>", Result: "aborted", KillReason: "ooms", Ended: t0},                                         // names outside the tables, an end without a start
		{ID: "", Attempt: 1 << 20, Result: "other", Started: t0.Add(time.Hour), Ended: t0, DurationSeconds: 0},        // an end before the start: no duration
		{ID: "tab\there\u2028\"q\\", Attempt: -1, Started: t0, Ended: t0.Add(time.Nanosecond), DurationSeconds: 1e-9}, // escapes; a duration in exponent form
		{ID: "long", Started: t0, Ended: t0.Add(30 * 24 * time.Hour), DurationSeconds: 30 * 24 * 3600},
	}
	packed := PackRuns(rs)
	assert.Equal(t, rs, packed.Records())
	assert.Equal(t, len(rs), packed.Len())

	// The JSON is the list's, as encoding/json writes []RunRecord.
	want, err := json.Marshal(rs)
	require.NoError(t, err)
	got, err := json.Marshal(packed)
	require.NoError(t, err)
	assert.JSONEq(t, string(want), string(got))
	assert.Equal(t, string(want), string(got), "byte for byte, field order included")

	var back RecentRuns
	require.NoError(t, json.Unmarshal(got, &back))
	assert.Equal(t, packed, back)
}

func TestRecentRunsEmpty(t *testing.T) {
	for _, r := range []RecentRuns{{}, PackRuns(nil), PackRuns([]RunRecord{})} {
		b, err := json.Marshal(r)
		require.NoError(t, err)
		assert.Equal(t, "[]", string(b), "an empty list, never null")
		assert.Equal(t, []RunRecord{}, r.Records())
		assert.Zero(t, r.Len())
	}
	var w Worker
	require.NoError(t, json.Unmarshal([]byte(`{"runs":{"recent":null}}`), &w))
	assert.Zero(t, w.Runs.Recent.Len())
	err := json.Unmarshal([]byte(`{"runs":{"recent":{"id":"x"}}}`), &w)
	require.Error(t, err, "not a list")
}

func TestRunPackerReusesItsBuffer(t *testing.T) {
	var p RunPacker
	p.Add([]byte("a"), 0, ResultSuccess, "", 1, 2)
	a := p.Done()
	p.Add([]byte("b"), 0, ResultFailure, "", 3, 4)
	b := p.Done()
	assert.Equal(t, "a", a.Records()[0].ID, "a list is not changed by the packer's next one")
	assert.Equal(t, "b", b.Records()[0].ID)

	block := make([]byte, 64)
	p.Add([]byte("c"), 0, ResultSuccess, "", 5, 6)
	n := p.Len()
	c := p.DoneInto(block[:n])
	assert.Equal(t, "c", c.Records()[0].ID)
	assert.Same(t, &block[0], unsafe.StringData(c.s), "in the memory given")
	assert.Len(t, c.s, n)
	assert.Equal(t, uintptr(16), unsafe.Sizeof(c), "a string's size in every worker's entry")
	assert.Zero(t, p.Len())
	assert.Zero(t, p.DoneInto(block).Len(), "nothing added: none")
	p.Add([]byte("d"), 0, ResultSuccess, "", 7, 8)
	d := p.DoneInto(nil)
	assert.Equal(t, "d", d.Records()[0].ID, "no memory given: a slice of its own")
}

// What the packing costs the health API's per-worker answer: a worker's
// ten recent runs to JSON as RunRecord values (before the packing) and
// packed, side by side:
//
//	go test -run '^$' -bench RecentRunsJSON -benchmem ./internal/contract/
func BenchmarkRecentRunsJSON(b *testing.B) {
	t0 := time.Date(2026, 12, 5, 9, 30, 0, 123456789, time.UTC)
	rs := make([]RunRecord, 10)
	for i := range rs {
		start := t0.Add(-time.Duration(i) * 10 * time.Second)
		rs[i] = RunRecord{ID: fmt.Sprintf("density-run-%06d-%d", 42, 10-i), Result: ResultSuccess, Started: start, Ended: start.Add(8 * time.Second), DurationSeconds: 8}
	}
	for _, c := range []struct {
		name string
		v    any
	}{{"records", struct {
		Recent []RunRecord `json:"recent"`
	}{rs}}, {"packed", struct {
		Recent RecentRuns `json:"recent"`
	}{PackRuns(rs)}}} {
		b.Run(c.name, func(b *testing.B) {
			b.ReportAllocs()
			for b.Loop() {
				if _, err := json.Marshal(c.v); err != nil {
					b.Fatal(err)
				}
			}
		})
	}
}
