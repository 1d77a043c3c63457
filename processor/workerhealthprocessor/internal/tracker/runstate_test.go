package tracker

import (
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/plog"

	"github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/state"
)

func TestResultFromEitherEnd(t *testing.T) {
	started := func(run string) plog.Logs { return wl("w1", "workerwatch.run.started", run, nil) }
	end := func(run, result string) plog.Logs {
		if result == "" {
			return wl("w1", "workerwatch.run.finished", run, nil)
		}
		return wl("w1", "workerwatch.run.finished", run, map[string]any{"cicd.pipeline.result": result})
	}
	result := func(run, want string) func(*harness) {
		return func(h *harness) {
			for _, r := range h.snap("w1").Runs.Recent.Records() {
				if r.ID == run {
					assert.Equal(h.t, want, r.Result, run)
					return
				}
			}
			h.t.Errorf("run %s not among the recent runs", run)
		}
	}
	runSteps(t, []stepCase{{
		// Before: the first end won, so a BullMQ job whose span (no result)
		// came before the worker's record (completed, failed) had none.
		name: "a run ended twice takes the result of whichever end has one",
		steps: seq(
			step{do: feed(hb, started("r1"), started("r2")), advance: sec},
			step{do: feed(hb, end("r1", ""), end("r2", "failure")), advance: sec},
			step{do: feed(hb, end("r1", "success"), end("r2", "")), advance: sec, want: healthy, check: func(h *harness) {
				result("r1", "success")(h)
				result("r2", "failure")(h)
			}},
			// A later end does not overwrite a known result.
			step{do: feed(hb, end("r2", "success")), advance: sec, check: result("r2", "failure")},
		),
	}})
}

// At the per-worker cap the oldest run neither side holds makes room, held
// runs are kept whatever their age, and the bookkeeping of the order stays
// bounded by the cap however many runs pass through.
func TestRunEvictionAtTheCap(t *testing.T) {
	cfg := testCfg()
	cfg.Limits.MaxRunsPerWorker = 4
	h := newHarness(t, cfg)
	claim := func(r string) { h.logs(wl("a", "workerwatch.run.claimed", r, nil)) }
	finish := func(r string) {
		h.logs(wl("a", "workerwatch.run.finished", r, map[string]any{"cicd.pipeline.result": "success"}))
	}
	claim("held") // the oldest, and still held
	for _, r := range []string{"r1", "r2", "r3"} {
		claim(r)
		finish(r)
	}
	claim("r4") // evicts r1: the oldest that ended, not "held"
	h.p.mu.Lock()
	runs := &h.p.tracker.workers.get("a").Table
	assert.True(t, hasRun(runs, "held"))
	assert.False(t, hasRun(runs, "r1"))
	assert.True(t, hasRun(runs, "r2"))
	assert.True(t, hasRun(runs, "r4"))
	h.p.mu.Unlock()

	for i := 0; i < 1000; i++ {
		r := "x" + strconv.Itoa(i)
		claim(r)
		finish(r)
	}
	h.p.mu.Lock()
	w := h.p.tracker.workers.get("a")
	assert.True(t, hasRun(&w.Table, "held"))
	assert.Equal(t, 4, w.Table.Len())
	assert.LessOrEqual(t, len(w.Order), 2*4+8, "order is compacted")
	assert.Zero(t, h.p.tracker.counts.RunsRefused, "ended runs always made room")
	h.p.mu.Unlock()
}

// An evicted run's memory serves the next run: the runs still tracked keep
// their own ids.
func TestRunIDsSurviveReuse(t *testing.T) {
	cfg := testCfg()
	cfg.Limits.MaxRunsPerWorker = 3
	tr := New(cfg.tracker())
	w := tr.get("w", 1, state.EvidenceConfirmed)
	ids := []string{"a-long-run-id-0001", "b", "c-run", "d-another-long-id", "e", "f"}
	runs := make([]*state.Run, len(ids))
	for i, id := range ids {
		r := tr.run(w, id)
		require.NotNil(t, r)
		runs[i] = r
		if i == 0 {
			r.Flags |= state.RunWorkerHeld // held: never evicted
		} else {
			r.Flags |= state.RunWorkerEnded
		}
	}
	assert.Equal(t, 3, w.Table.Len())
	// The oldest ended run's memory serves each new run: d takes b's, e
	// takes c's, f takes d's.
	assert.Same(t, runs[1], runs[3])
	assert.Same(t, runs[2], runs[4])
	assert.Same(t, runs[3], runs[5])
	for _, id := range []string{"a-long-run-id-0001", "e", "f"} {
		assert.True(t, hasRun(&w.Table, id), id)
	}
	for r := range w.Table.All() {
		assert.Same(t, r, w.Table.Get(string(r.ID()), state.RunHash(string(r.ID()))), "found by its id")
	}
}
