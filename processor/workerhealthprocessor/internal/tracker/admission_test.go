package tracker

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/workerwatch/workerwatch/internal/contract"
	"github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/state"
)

func (h *harness) evidenceOf(id string) (state.Evidence, bool) {
	h.p.mu.Lock()
	defer h.p.mu.Unlock()
	w := h.p.tracker.workers.get(id)
	if w == nil {
		return 0, false
	}
	return w.Evidence, true
}

func (h *harness) counts() AdmissionCounts {
	h.p.mu.Lock()
	defer h.p.mu.Unlock()
	return h.p.tracker.counts
}

// Issue 14.2: ids with nothing but their own records never push out
// confirmed workers, and a new real worker (its tree, or named by the
// scheduler) is tracked even when the cap is full of such ids.
func TestAdmissionAtTheCap(t *testing.T) {
	cfg := testCfg()
	cfg.Limits.MaxWorkers = 6
	cfg.Limits.MaxUnconfirmedWorkers = 4
	h := newHarness(t, cfg)
	for i := range 2 {
		h.metrics(treeMetrics(fmt.Sprintf("real-%d", i), 10, -1, 1))
	}
	for i := range 4 {
		h.logs(wl(fmt.Sprintf("bogus-%d", i), contract.EventHeartbeat, "", nil))
	}
	// Full: another id with records only is refused, once per resource.
	h.logs(workerLogs("worker",
		rec{Worker: "bogus-4", Event: contract.EventHeartbeat},
		rec{Worker: "bogus-4", Event: contract.EventClaimed, Run: "r1"},
	))
	assert.Equal(t, int64(1), h.counts().WorkersRefused[refusedMaxWorkers])
	_, tracked := h.evidenceOf("bogus-4")
	assert.False(t, tracked)

	// A new worker with a tree takes the place of the least recently
	// mentioned one seen once; one the scheduler names, the next.
	h.metrics(treeMetrics("real-new", 10, -1, 1))
	h.logs(sl("sched-named", contract.EventClaimed, "s1"))
	for _, id := range []string{"real-0", "real-1", "real-new", "sched-named"} {
		ev, ok := h.evidenceOf(id)
		assert.True(t, ok, id)
		assert.Equal(t, state.EvidenceConfirmed, ev, id)
	}
	for i, want := range []bool{false, false, true, true} {
		_, ok := h.evidenceOf(fmt.Sprintf("bogus-%d", i))
		assert.Equal(t, want, ok, "bogus-%d", i)
	}
	assert.Equal(t, int64(2), h.counts().WorkersEvicted[state.EvidenceOnce])

	// All confirmed: a new confirmed worker is refused, none is pushed out.
	h.metrics(treeMetrics("real-2", 10, -1, 1))
	h.metrics(treeMetrics("real-3", 10, -1, 1))
	h.metrics(treeMetrics("real-4", 10, -1, 1))
	assert.Equal(t, int64(4), h.counts().WorkersEvicted[state.EvidenceOnce], "bogus-2 and bogus-3 made room too")
	assert.Equal(t, int64(2), h.counts().WorkersRefused[refusedMaxWorkers], "bogus-4, then real-4")
	for _, id := range []string{"real-0", "real-1", "real-new", "sched-named", "real-2", "real-3"} {
		_, ok := h.evidenceOf(id)
		assert.True(t, ok, id)
	}
	_, ok := h.evidenceOf("real-4")
	assert.False(t, ok, "refused: every tracked worker is confirmed")
}

// Workers seen once are at most limits.max_unconfirmed_workers; those seen
// again in a later interval are promoted to "records" and take no slot of
// them; workers seen once and not again are forgotten after lost.after.
func TestSeenOnceIsBoundedAndForgotten(t *testing.T) {
	cfg := testCfg() // lost.after 5s, worker_ttl 1m
	cfg.Limits.MaxUnconfirmedWorkers = 2
	h := newHarness(t, cfg)
	h.logs(wl("a", contract.EventHeartbeat, "", nil))
	h.logs(wl("b", contract.EventHeartbeat, "", nil))
	h.logs(wl("c", contract.EventHeartbeat, "", nil))
	assert.Equal(t, int64(1), h.counts().WorkersRefused[refusedMaxUnconfirmed], "c")
	h.eval()
	h.advance(sec)
	h.logs(wl("a", contract.EventHeartbeat, "", nil)) // the next interval: still seen once
	ev, _ := h.evidenceOf("a")
	assert.Equal(t, state.EvidenceOnce, ev, "a batch may straddle one evaluation")
	h.eval()
	h.advance(sec)
	h.logs(wl("a", contract.EventHeartbeat, "", nil)) // the one after
	ev, _ = h.evidenceOf("a")
	assert.Equal(t, state.EvidenceRecords, ev)
	h.logs(wl("c", contract.EventHeartbeat, "", nil)) // a's slot is free
	_, ok := h.evidenceOf("c")
	assert.True(t, ok)

	for range 6 {
		h.advance(sec)
		h.logs(wl("a", contract.EventHeartbeat, "", nil))
		h.eval()
	}
	_, okA := h.evidenceOf("a")
	_, okB := h.evidenceOf("b")
	assert.True(t, okA, "seen again: kept")
	assert.False(t, okB, "seen once, not again within lost.after: forgotten")
	assert.Equal(t, int64(2), h.counts().WorkersExpired[state.EvidenceOnce], "b and c: no record for lost.after")
}

// A worker keeps the low 32 bits of the evaluation it was admitted in,
// compared by difference: next to the 32-bit wrap of the tracker's count it
// is still seen once in its interval and the next, and promoted in the one
// after (Admitted+2 would wrap to 0 and promote it at once).
func TestSeenOnceAcrossTheWrap(t *testing.T) {
	h := newHarness(t, testCfg())
	h.p.tracker.evals = 1<<32 - 2 // admitted two evaluations before the low 32 bits wrap
	h.logs(wl("a", contract.EventHeartbeat, "", nil))
	h.logs(wl("a", contract.EventHeartbeat, "", nil))
	ev, _ := h.evidenceOf("a")
	assert.Equal(t, state.EvidenceOnce, ev, "the same interval: seen once")
	h.eval()
	h.advance(sec)
	h.logs(wl("a", contract.EventHeartbeat, "", nil))
	ev, _ = h.evidenceOf("a")
	assert.Equal(t, state.EvidenceOnce, ev, "the next interval: still seen once")
	h.eval()
	h.advance(sec)
	h.logs(wl("a", contract.EventHeartbeat, "", nil))
	ev, _ = h.evidenceOf("a")
	assert.Equal(t, state.EvidenceRecords, ev, "the one after, past the wrap")
}

// Runs: at most 4 for a worker seen once; limits.max_runs in all, a
// worker's share of it otherwise; the worker's own ended runs make room.
func TestRunBounds(t *testing.T) {
	cfg := testCfg()
	cfg.Limits.MaxRuns = 20
	h := newHarness(t, cfg)
	for r := range 6 {
		h.logs(wl("once", contract.EventClaimed, fmt.Sprintf("r%d", r), nil))
	}
	assert.Equal(t, int64(2), h.counts().RunsRefused[refusedRunsPerWorker])
	for _, w := range []string{"t1", "t2"} {
		h.metrics(treeMetrics(w, 10, -1, 1))
		for r := range 12 {
			h.logs(wl(w, contract.EventClaimed, fmt.Sprintf("r%d", r), nil))
		}
	}
	h.p.mu.Lock()
	total := h.p.tracker.runCount
	n1, n2 := h.p.tracker.workers.get("t1").Table.Len(), h.p.tracker.workers.get("t2").Table.Len()
	h.p.mu.Unlock()
	assert.Equal(t, 20, total, "limits.max_runs")
	assert.Equal(t, 10, n1, "t1: its share, 20 runs over 2 workers")
	assert.Equal(t, 6, n2, "t2: what is left of the 20, below its share (8)")
	c := h.counts()
	assert.Positive(t, c.RunsRefused[refusedRunsTotal])
	// t2 ends a run: its own ended run makes room at the total.
	h.logs(wl("t2", contract.EventFinished, "r0", nil))
	h.logs(wl("t2", contract.EventClaimed, "new", nil))
	h.p.mu.Lock()
	assert.True(t, hasRun(&h.p.tracker.workers.get("t2").Table, "new"))
	assert.Equal(t, 20, h.p.tracker.runCount)
	h.p.mu.Unlock()
}

// Evidence that was wrong before (issue 12, "Why" point 7).
func TestEvidence(t *testing.T) {
	t.Run("drift_missing has a since and a threshold in runs", func(t *testing.T) {
		h := newHarness(t, testCfg())
		hb(h)
		h.logs(sl("w1", "workerwatch.run.claimed", "r1"))
		h.advance(5 * sec)
		hb(h)
		h.eval()
		r := h.reason(state.CodeMissing)
		assert.Equal(t, t0, r.Since, "when the disagreement began")
		assert.InDelta(t, 1, r.Value, 0)
		assert.InDelta(t, 1, r.Threshold, 0, "a run count, not the grace in seconds")
	})
	t.Run("recent runs and kills by reason are in the snapshot", func(t *testing.T) {
		h := newHarness(t, testCfg())
		h.logs(workerLogs("worker",
			rec{Worker: "w1", Event: "workerwatch.run.started", Run: "r1", TS: t0},
			rec{Worker: "w1", Event: "workerwatch.run.finished", Run: "r1", TS: t0.Add(2 * sec), Attrs: map[string]any{"cicd.pipeline.result": "success"}},
		))
		h.advance(sec)
		h.logs(workerLogs("worker",
			rec{Worker: "w1", Event: "workerwatch.run.started", Run: "r2", TS: t0.Add(sec)},
			rec{Worker: "w1", Event: "workerwatch.run.killed", Run: "r2", TS: t0.Add(4 * sec), Attrs: map[string]any{"cicd.pipeline.result": "timeout", "workerwatch.kill.reason": "timeout"}},
		))
		h.eval()
		w := h.snap("w1")
		assert.Equal(t, []contract.RunRecord{
			{ID: "r2", Result: "timeout", KillReason: "timeout", Started: t0.Add(sec), Ended: t0.Add(4 * sec), DurationSeconds: 3},
			{ID: "r1", Result: "success", Started: t0, Ended: t0.Add(2 * sec), DurationSeconds: 2},
		}, w.Runs.Recent.Records())
		assert.Equal(t, map[string]int64{"timeout": 1}, w.Runs.Kills)
		assert.True(t, w.Memory.SampledAt.IsZero(), "no memory sample: zero time")
	})
}

func TestLimits(t *testing.T) {
	cfg := testCfg()
	cfg.Limits.MaxWorkers = 2
	cfg.Limits.MaxUnconfirmedWorkers = 2
	cfg.Limits.MaxRunsPerWorker = 3
	h := newHarness(t, cfg)
	for _, w := range []string{"a", "b", "c"} {
		h.logs(wl(w, "workerwatch.worker.heartbeat", "", nil))
	}
	for _, r := range []string{"r1", "r2", "r3", "r4"} {
		h.logs(wl("a", "workerwatch.run.claimed", r, nil))
	}
	// Ended runs make room.
	h.logs(wl("a", "workerwatch.run.finished", "r1", nil))
	h.logs(wl("a", "workerwatch.run.claimed", "r5", nil))
	h.p.mu.Lock()
	assert.Equal(t, 2, h.p.tracker.workers.len())
	// Issue 14.7: counted once per resource naming it (it was counted
	// twice: the resource's sign of life and its record).
	assert.Equal(t, int64(1), h.p.tracker.counts.WorkersRefused[refusedMaxWorkers], "c, once")
	assert.Equal(t, int64(1), h.p.tracker.counts.RunsRefused[refusedRunsPerWorker])
	assert.True(t, hasRun(&h.p.tracker.workers.get("a").Table, "r5"))
	h.p.mu.Unlock()

	// Workers are forgotten after the TTL.
	h.advance(2 * time.Minute)
	h.eval()
	h.p.mu.Lock()
	assert.Zero(t, h.p.tracker.workers.len())
	assert.Equal(t, int64(2), h.p.tracker.counts.WorkersExpired[state.EvidenceOnce])
	h.p.mu.Unlock()
}
