package workerhealthextension

import (
	"encoding/json"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component"

	"github.com/workerwatch/workerwatch/extension/workerhealthextension/internal/history"
	"github.com/workerwatch/workerwatch/internal/contract"
)

func TestStoreEmpty(t *testing.T) {
	v := newStore(history.New(30*time.Minute, 10*time.Second)).load()
	require.NotNil(t, v)
	assert.Empty(t, v.byIDOrder)
	assert.True(t, v.time.IsZero())
	assert.Equal(t, int64(-1), v.fleet.Pending)
}

func TestStoreIgnoresOlderSnapshot(t *testing.T) {
	s := newStore(history.New(30*time.Minute, 10*time.Second))
	put(s, snapshot(testSource, t0, worker("a", contract.Unhealthy)))
	put(s, snapshot(testSource, t0.Add(-time.Second), worker("a", contract.Healthy)))
	assert.Equal(t, contract.Unhealthy, s.load().byID["a"].w.State)
	put(s, snapshot(testSource, t0.Add(time.Second), worker("a", contract.Healthy)))
	assert.Equal(t, contract.Healthy, s.load().byID["a"].w.State)
}

func TestStoreMergesSources(t *testing.T) {
	s := newStore(history.New(30*time.Minute, 10*time.Second))
	other := component.MustNewIDWithName("worker_health", "gpu")
	// The worse judgement of "shared" is in the older snapshot, so only the
	// severity rule (not "fresher wins" or "last wins") keeps it. "tie" has
	// one state in both; the fresher snapshot's copy (named "b") wins.
	tieA, tieB := worker("tie", contract.Lost), worker("tie", contract.Lost)
	tieA.Name, tieB.Name = "a", "b"
	a := snapshot(testSource, t0, worker("a", contract.Healthy), worker("shared", contract.Stalled), tieA)
	a.Fleet = contract.Fleet{Pending: 3, IdleCapacity: 4}
	b := snapshot(other, t0.Add(time.Second), worker("b", contract.Degraded), worker("shared", contract.Healthy), tieB)
	b.Fleet = contract.Fleet{Pending: -1, IdleCapacity: 1, IdleWhilePending: true}
	put(s, a)
	put(s, b)

	v := s.load()
	assert.Equal(t, []string{"a", "b", "shared", "tie"}, entryIDs(v.byIDOrder))
	// The worse judgement of a worker listed by two processors wins.
	assert.Equal(t, contract.Stalled, v.byID["shared"].w.State)
	// On equal states the fresher snapshot wins, whichever source sorts first.
	assert.Equal(t, "b", v.byID["tie"].w.Name)
	assert.Equal(t, int64(3), v.fleet.Pending)
	assert.Equal(t, int64(5), v.fleet.IdleCapacity)
	assert.True(t, v.fleet.IdleWhilePending)
	assert.Equal(t, 1, v.fleet.ByState[contract.Stalled])
	assert.Equal(t, t0.Add(time.Second), v.time)
	require.Len(t, v.sources, 2)
	assert.Equal(t, "worker_health/fleet", v.sources[0].ID)

	// Page order: worst first, then id.
	assert.Equal(t, []string{"tie", "shared", "b", "a"}, entryIDs(v.worstFirst))

	// The same with the fresher source sorting first (merged first) and
	// published first.
	tieA.Name, tieB.Name = "older", "fresher"
	s2 := newStore(history.New(30*time.Minute, 10*time.Second))
	put(s2, snapshot(component.MustNewIDWithName("worker_health", "a"), t0.Add(time.Second), tieB))
	put(s2, snapshot(component.MustNewIDWithName("worker_health", "z"), t0, tieA))
	assert.Equal(t, "fresher", s2.load().byID["tie"].w.Name)
}

func TestStoreDuplicateAndUnsortedInOneSnapshot(t *testing.T) {
	s := newStore(history.New(30*time.Minute, 10*time.Second))
	// The worse copy comes first for z and last for m: neither "first wins"
	// nor "last wins" passes, only "worse wins".
	put(s, snapshot(testSource, t0, worker("z", contract.Lost), worker("m", contract.Healthy),
		worker("z", contract.Healthy), worker("m", contract.Degraded)))
	v := s.load()
	assert.Equal(t, []string{"m", "z"}, entryIDs(v.byIDOrder))
	assert.Equal(t, contract.Lost, v.byID["z"].w.State)
	assert.Equal(t, contract.Degraded, v.byID["m"].w.State)
}

func TestStoreNonFiniteEvidence(t *testing.T) {
	s := newStore(history.New(30*time.Minute, 10*time.Second))
	w := worker("nan", contract.Unhealthy)
	w.Reasons = []contract.Reason{{Code: "cpu_saturated", Value: math.NaN(), Threshold: math.Inf(1)}}
	put(s, snapshot(testSource, t0, w))
	var got contract.Worker
	require.NoError(t, json.Unmarshal(s.load().byID["nan"].json, &got))
	assert.Equal(t, "cpu_saturated", got.Reasons[0].Code)
	assert.Zero(t, got.Reasons[0].Value)
	// The published snapshot itself is not modified.
	assert.True(t, math.IsNaN(w.Reasons[0].Value))
}

func TestPublishNilIgnored(t *testing.T) {
	wh := newTestExt(t)
	wh.Publish(nil)
	assert.Empty(t, wh.store.load().byIDOrder)
}

func entryIDs(es []*entry) []string {
	out := make([]string, 0, len(es))
	for _, e := range es {
		out = append(out, e.w.ID)
	}
	return out
}

func TestStoreNilListsEncodeEmpty(t *testing.T) {
	s := newStore(history.New(30*time.Minute, 10*time.Second))
	put(s, snapshot(testSource, t0, contract.Worker{ID: "bare", State: contract.Unknown}))
	body := string(s.load().byID["bare"].json)
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
	s := newStore(history.New(30*time.Minute, 10*time.Second))
	gate := make(chan struct{})
	indexed := make(chan time.Time, 8)
	s.index = func(snap *contract.Snapshot) *sourceIndex {
		indexed <- snap.Time
		<-gate
		return indexSnapshot(snap)
	}
	returned := func(snap *contract.Snapshot) {
		t.Helper()
		done := make(chan struct{})
		go func() { s.publish(snap); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			close(gate) // let the drain go so the test ends
			t.Fatalf("Publish of %s waited for the index of another snapshot", snap.Time)
		}
	}

	returned(snapshot(testSource, t0, worker("a", contract.Healthy)))
	require.Equal(t, t0, <-indexed, "the first snapshot is being indexed")
	returned(snapshot(testSource, t0.Add(2*time.Second), worker("a", contract.Lost), worker("b", contract.Healthy)))
	returned(snapshot(testSource, t0.Add(time.Second), worker("a", contract.Degraded)))
	assert.True(t, s.load().time.IsZero(), "readers keep the last complete view while one is built")
	assert.Empty(t, s.load().byID)

	close(gate)
	s.flush()
	v := s.load()
	assert.Equal(t, t0.Add(2*time.Second), v.time)
	assert.Equal(t, contract.Lost, v.byID["a"].w.State, "the newest snapshot is served")
	assert.Equal(t, []string{"a", "b"}, entryIDs(v.byIDOrder))
	assert.Equal(t, t0.Add(2*time.Second), <-indexed, "the older of the two waiting snapshots was never indexed")
	assert.Empty(t, indexed)
}

// The history follows what the API serves: only the served copy of a
// worker two processors list is recorded, and a worker that leaves the view
// leaves the history.
func TestHistoryFollowsTheView(t *testing.T) {
	s := newStore(history.New(30*time.Minute, 10*time.Second))
	other := component.MustNewIDWithName("worker_health", "other")
	put(s, snapshot(testSource, t0, worker("a", contract.Healthy), worker("both", contract.Healthy)))
	put(s, snapshot(other, t0.Add(time.Second), worker("both", contract.Lost)))
	ws := s.history.Series("both", time.Time{})
	require.Len(t, ws.Samples, 1)
	assert.Equal(t, contract.Lost, history.StateOf(ws.Samples[0].State), "the worse copy, as served")

	put(s, snapshot(testSource, t0.Add(10*time.Second), worker("both", contract.Healthy)))
	assert.Empty(t, s.history.Series("a", time.Time{}).Samples, "a left the view")
	assert.NotEmpty(t, s.history.Series("both", time.Time{}).Samples)
}
