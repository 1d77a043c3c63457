package store

import (
	"encoding/json"
	"math"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component"

	"github.com/workerwatch/workerwatch/extension/workerhealthextension/internal/fleettest"
	"github.com/workerwatch/workerwatch/extension/workerhealthextension/internal/history"
	"github.com/workerwatch/workerwatch/internal/contract"
)

func TestStoreEmpty(t *testing.T) {
	v := New(history.New(30*time.Minute, 10*time.Second)).Load()
	require.NotNil(t, v)
	assert.Empty(t, v.ByIDOrder)
	assert.True(t, v.Time.IsZero())
	assert.Equal(t, int64(-1), v.Fleet.Pending)
}

func TestStoreIgnoresOlderSnapshot(t *testing.T) {
	s := New(history.New(30*time.Minute, 10*time.Second))
	put(s, fleettest.Snapshot(fleettest.Source, fleettest.T0, fleettest.Worker("a", contract.Unhealthy)))
	put(s, fleettest.Snapshot(fleettest.Source, fleettest.T0.Add(-time.Second), fleettest.Worker("a", contract.Healthy)))
	assert.Equal(t, contract.Unhealthy, s.Load().Lookup("a").Worker.State)
	put(s, fleettest.Snapshot(fleettest.Source, fleettest.T0.Add(time.Second), fleettest.Worker("a", contract.Healthy)))
	assert.Equal(t, contract.Healthy, s.Load().Lookup("a").Worker.State)
}

func TestStoreMergesSources(t *testing.T) {
	s := New(history.New(30*time.Minute, 10*time.Second))
	other := component.MustNewIDWithName("worker_health", "gpu")
	// The worse judgement of "shared" is in the older snapshot, so only the
	// severity rule (not "fresher wins" or "last wins") keeps it. "tie" has
	// one state in both; the fresher snapshot's copy (named "b") wins.
	tieA, tieB := fleettest.Worker("tie", contract.Lost), fleettest.Worker("tie", contract.Lost)
	tieA.Name, tieB.Name = "a", "b"
	a := fleettest.Snapshot(fleettest.Source, fleettest.T0, fleettest.Worker("a", contract.Healthy), fleettest.Worker("shared", contract.Stalled), tieA)
	a.Fleet = contract.Fleet{Pending: 3, IdleCapacity: 4}
	b := fleettest.Snapshot(other, fleettest.T0.Add(time.Second), fleettest.Worker("b", contract.Degraded), fleettest.Worker("shared", contract.Healthy), tieB)
	b.Fleet = contract.Fleet{Pending: -1, IdleCapacity: 1, IdleWhilePending: true}
	put(s, a)
	put(s, b)

	v := s.Load()
	assert.Equal(t, []string{"a", "b", "shared", "tie"}, entryIDs(v.ByIDOrder))
	// The worse judgement of a worker listed by two processors wins.
	assert.Equal(t, contract.Stalled, v.Lookup("shared").Worker.State)
	// On equal states the fresher snapshot wins, whichever source sorts first.
	assert.Equal(t, "b", v.Lookup("tie").Worker.Name)
	assert.Equal(t, int64(3), v.Fleet.Pending)
	assert.Equal(t, int64(5), v.Fleet.IdleCapacity)
	assert.True(t, v.Fleet.IdleWhilePending)
	assert.Equal(t, 1, v.Fleet.ByState[contract.Stalled])
	assert.Equal(t, fleettest.T0.Add(time.Second), v.Time)
	require.Len(t, v.Sources, 2)
	assert.Equal(t, "worker_health/fleet", v.Sources[0].ID)

	// Page order: worst first, then id.
	assert.Equal(t, []string{"tie", "shared", "b", "a"}, entryIDs(v.WorstFirst))

	// The same with the fresher source sorting first (merged first) and
	// published first.
	tieA.Name, tieB.Name = "older", "fresher"
	s2 := New(history.New(30*time.Minute, 10*time.Second))
	put(s2, fleettest.Snapshot(component.MustNewIDWithName("worker_health", "a"), fleettest.T0.Add(time.Second), tieB))
	put(s2, fleettest.Snapshot(component.MustNewIDWithName("worker_health", "z"), fleettest.T0, tieA))
	assert.Equal(t, "fresher", s2.Load().Lookup("tie").Worker.Name)
}

func TestStoreDuplicateAndUnsortedInOneSnapshot(t *testing.T) {
	s := New(history.New(30*time.Minute, 10*time.Second))
	// The worse copy comes first for z and last for m: neither "first wins"
	// nor "last wins" passes, only "worse wins".
	put(s, fleettest.Snapshot(fleettest.Source, fleettest.T0, fleettest.Worker("z", contract.Lost), fleettest.Worker("m", contract.Healthy),
		fleettest.Worker("z", contract.Healthy), fleettest.Worker("m", contract.Degraded)))
	v := s.Load()
	assert.Equal(t, []string{"m", "z"}, entryIDs(v.ByIDOrder))
	assert.Equal(t, contract.Lost, v.Lookup("z").Worker.State)
	assert.Equal(t, contract.Degraded, v.Lookup("m").Worker.State)
	// Ids before, between and after the listed ones are not found.
	for _, id := range []string{"", "a", "n", "zz"} {
		assert.Nil(t, v.Lookup(id), "%q", id)
	}

	// Equal judgements: the first listed stands, three copies or two.
	first, second, third := fleettest.Worker("k", contract.Healthy), fleettest.Worker("k", contract.Healthy), fleettest.Worker("k", contract.Healthy)
	first.Name, second.Name, third.Name = "first", "second", "third"
	put(s, fleettest.Snapshot(fleettest.Source, fleettest.T0.Add(time.Second), fleettest.Worker("z", contract.Healthy), first, second, third))
	v = s.Load()
	assert.Equal(t, []string{"k", "z"}, entryIDs(v.ByIDOrder))
	assert.Equal(t, "first", v.Lookup("k").Worker.Name)
}

func TestStoreNonFiniteEvidence(t *testing.T) {
	s := New(history.New(30*time.Minute, 10*time.Second))
	w := fleettest.Worker("nan", contract.Unhealthy)
	cur := math.Inf(-1)
	w.Reasons = []contract.Reason{{
		Code: "cpu_saturated", Value: math.NaN(), Threshold: math.Inf(1),
		Latched: true, Current: &cur, Recovery: &contract.Recovery{Samples: 1, Needed: 3, Ratio: math.NaN()},
	}}
	put(s, fleettest.Snapshot(fleettest.Source, fleettest.T0, w))
	var got contract.Worker
	require.NoError(t, json.Unmarshal(s.Load().Lookup("nan").JSON(), &got))
	assert.Equal(t, "cpu_saturated", got.Reasons[0].Code)
	assert.Zero(t, got.Reasons[0].Value)
	require.NotNil(t, got.Reasons[0].Current)
	assert.Zero(t, *got.Reasons[0].Current)
	assert.Zero(t, got.Reasons[0].Recovery.Ratio)
	assert.Equal(t, 3, got.Reasons[0].Recovery.Needed)
	assert.True(t, math.IsInf(cur, -1), "the published snapshot's current value is not modified")
	// The published snapshot itself is not modified.
	assert.True(t, math.IsNaN(w.Reasons[0].Value))
}

// TestEntryEncodedWhenFirstAsked: a publish encodes nobody (its cost must
// not grow with the fleet); the first request for a worker encodes it, every
// later one, also from other goroutines at once, gets the same bytes; the
// next snapshot's entry is encoded afresh.
func TestEntryEncodedWhenFirstAsked(t *testing.T) {
	s := New(history.New(30*time.Minute, 10*time.Second))
	put(s, fleettest.Snapshot(fleettest.Source, fleettest.T0, fleettest.Worker("a", contract.Healthy), fleettest.Worker("b", contract.Stalled)))
	v := s.Load()
	for _, e := range v.ByIDOrder {
		assert.Nil(t, e.json.Load(), "%s encoded at publish", e.Worker.ID)
	}
	a := v.Lookup("a")
	var wg sync.WaitGroup
	got := make([][]byte, 8)
	for i := range got {
		wg.Go(func() { got[i] = a.JSON() })
	}
	wg.Wait()
	want, err := json.Marshal(WithEmptyLists(a.Worker))
	require.NoError(t, err)
	for _, b := range got {
		assert.JSONEq(t, string(want), string(b))
	}
	first := a.JSON()
	assert.Same(t, &first[0], &a.JSON()[0], "encoded once, then reused")
	assert.Nil(t, v.Lookup("b").json.Load(), "a worker nobody asked for stays unencoded")

	next := fleettest.Worker("a", contract.Degraded)
	put(s, fleettest.Snapshot(fleettest.Source, fleettest.T0.Add(time.Second), next))
	assert.Contains(t, string(s.Load().Lookup("a").JSON()), `"state":"degraded"`)
}

func entryIDs(es []*Entry) []string {
	out := make([]string, 0, len(es))
	for _, e := range es {
		out = append(out, e.Worker.ID)
	}
	return out
}

func TestStoreNilListsEncodeEmpty(t *testing.T) {
	s := New(history.New(30*time.Minute, 10*time.Second))
	put(s, fleettest.Snapshot(fleettest.Source, fleettest.T0, contract.Worker{ID: "bare", State: contract.Unknown}))
	body := string(s.Load().Lookup("bare").JSON())
	assert.Contains(t, body, `"reasons":[]`)
	assert.Contains(t, body, `"runs":{"worker":[],"scheduler":[],"capacity":0,"recent":[],"kills":{}}`)
	assert.Contains(t, body, `"roles":[]`)
	assert.Contains(t, body, `"tree":{"seen":false,"ids":[]}`)
	assert.Contains(t, body, `"drift":{"missing":[],"orphaned":[],"missing_count":0,"orphaned_count":0,"over_capacity":0}`)
}

// TestPublishDoesNotWaitForTheIndex: the processor's tick only hands the
// snapshot over. While a slow index of one snapshot is under way, Publish
// returns at once, readers keep the last complete view, a snapshot older
// than one handed over is dropped, and the newest is the one served.
func TestPublishDoesNotWaitForTheIndex(t *testing.T) {
	s := New(history.New(30*time.Minute, 10*time.Second))
	gate := make(chan struct{})
	indexed := make(chan time.Time, 8)
	s.index = func(snap *contract.Snapshot) *SourceIndex {
		indexed <- snap.Time
		<-gate
		return indexSnapshot(snap)
	}
	returned := func(snap *contract.Snapshot) {
		t.Helper()
		done := make(chan struct{})
		go func() { s.Publish(snap); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			close(gate) // let the drain go so the test ends
			t.Fatalf("Publish of %s waited for the index of another snapshot", snap.Time)
		}
	}

	returned(fleettest.Snapshot(fleettest.Source, fleettest.T0, fleettest.Worker("a", contract.Healthy)))
	require.Equal(t, fleettest.T0, <-indexed, "the first snapshot is being indexed")
	returned(fleettest.Snapshot(fleettest.Source, fleettest.T0.Add(2*time.Second), fleettest.Worker("a", contract.Lost), fleettest.Worker("b", contract.Healthy)))
	returned(fleettest.Snapshot(fleettest.Source, fleettest.T0.Add(time.Second), fleettest.Worker("a", contract.Degraded)))
	assert.True(t, s.Load().Time.IsZero(), "readers keep the last complete view while one is built")
	assert.Empty(t, s.Load().ByIDOrder)

	close(gate)
	s.Flush()
	v := s.Load()
	assert.Equal(t, fleettest.T0.Add(2*time.Second), v.Time)
	assert.Equal(t, contract.Lost, v.Lookup("a").Worker.State, "the newest snapshot is served")
	assert.Equal(t, []string{"a", "b"}, entryIDs(v.ByIDOrder))
	assert.Equal(t, fleettest.T0.Add(2*time.Second), <-indexed, "the older of the two waiting snapshots was never indexed")
	assert.Empty(t, indexed)
}

// The history follows what the API serves: only the served copy of a
// worker two processors list is recorded, and a worker that leaves the view
// leaves the history.
func TestHistoryFollowsTheView(t *testing.T) {
	s := New(history.New(30*time.Minute, 10*time.Second))
	other := component.MustNewIDWithName("worker_health", "other")
	put(s, fleettest.Snapshot(fleettest.Source, fleettest.T0, fleettest.Worker("a", contract.Healthy), fleettest.Worker("both", contract.Healthy)))
	put(s, fleettest.Snapshot(other, fleettest.T0.Add(time.Second), fleettest.Worker("both", contract.Lost)))
	ws := s.history.Series("both", time.Time{})
	require.Len(t, ws.Samples, 1)
	assert.Equal(t, contract.Lost, history.StateOf(ws.Samples[0].State), "the worse copy, as served")

	put(s, fleettest.Snapshot(fleettest.Source, fleettest.T0.Add(10*time.Second), fleettest.Worker("both", contract.Healthy)))
	assert.Empty(t, s.history.Series("a", time.Time{}).Samples, "a left the view")
	assert.NotEmpty(t, s.history.Series("both", time.Time{}).Samples)
}

// put publishes snap and waits until it is served.
func put(s *Store, snap *contract.Snapshot) {
	s.Publish(snap)
	s.Flush()
}
