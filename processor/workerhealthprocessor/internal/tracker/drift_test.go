package tracker

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/plog"

	"github.com/workerwatch/workerwatch/internal/contract"
	"github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/mapping"
	"github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/state"
)

type driftWant struct {
	missing, orphaned []string
}

func (h *harness) drift(id string) driftWant {
	w := h.worker(id)
	return driftWant{missing: append([]string{}, w.Missing()...), orphaned: append([]string{}, w.Orphaned()...)}
}

func TestDrift(t *testing.T) {
	sec := time.Second
	none := driftWant{missing: []string{}, orphaned: []string{}}
	type dstep struct {
		do      func(h *harness)
		advance time.Duration
		want    driftWant
	}
	wClaim := func(run string) func(*harness) {
		return func(h *harness) { h.logs(wl("w1", "workerwatch.run.claimed", run, nil)) }
	}
	wFinish := func(run string) func(*harness) {
		return func(h *harness) {
			h.logs(wl("w1", "workerwatch.run.finished", run, map[string]any{"cicd.pipeline.result": "success"}))
		}
	}
	sClaim := func(run string) func(*harness) {
		return func(h *harness) { h.logs(sl("w1", "workerwatch.run.claimed", run)) }
	}
	sFinish := func(run string) func(*harness) {
		return func(h *harness) { h.logs(sl("w1", "workerwatch.run.finished", run)) }
	}
	schedAlive := func(h *harness) { h.metrics(pendingMetrics(0)) }
	active := func(n int64) func(*harness) {
		return func(h *harness) { h.metrics(activeMetrics(n)) }
	}

	tests := []struct {
		name  string
		runs  int // distinct runs claimed (default 1)
		steps []dstep
	}{
		{
			name: "missing after the grace period, cleared when the worker claims",
			steps: []dstep{
				{do: both(hb, sClaim("r1")), advance: 2 * sec, want: none},
				{do: hb, advance: 2 * sec, want: driftWant{missing: []string{"r1"}, orphaned: []string{}}},
				{do: wClaim("r1"), advance: sec, want: none},
			},
		},
		{
			name: "orphaned after the grace period while the scheduler reports",
			steps: []dstep{
				// The scheduler knows w1 (it assigned and ended r1 earlier).
				{do: both(schedAlive, sClaim("r1"), sFinish("r1"), wClaim("r2")), advance: 3 * sec, want: driftWant{missing: []string{}, orphaned: []string{"r2"}}},
				{do: both(schedAlive, sFinish("r2"), wFinish("r2")), advance: sec, want: none},
			},
		},
		{
			// The worker was killed and restarted: its runs' end events never
			// came. Its own active count (0, then 1) lets go of the phantoms,
			// oldest first, once the disagreement outlasts the grace period.
			name: "runs the worker no longer counts are let go after the grace period",
			runs: 2,
			steps: []dstep{
				{do: both(sClaim("r2"), wClaim("r2")), advance: sec, want: none},
				{do: both(sClaim("r3"), wClaim("r3"), active(2)), advance: sec, want: none},
				// Its count drops to 1: not yet longer than the grace period.
				{do: active(1), advance: 2 * sec, want: none},
				{do: active(1), advance: 2 * sec, want: none},
				// Now it is: r2 (the oldest) is let go; the scheduler still
				// lists it, which becomes "missing" after its own grace.
				{do: active(1), advance: 3 * sec, want: none},
				// A count that matches changes nothing more.
				{do: active(1), advance: 4 * sec, want: driftWant{missing: []string{"r2"}, orphaned: []string{}}},
			},
		},
		{
			// A worker that makes its own work (or is scheduled elsewhere)
			// has no scheduler view to disagree with.
			name: "no orphans for a worker the scheduler never named",
			steps: []dstep{
				{do: both(schedAlive, wClaim("r2")), advance: 4 * sec, want: none},
			},
		},
		{
			name: "no orphans without any scheduler telemetry",
			steps: []dstep{
				{do: wClaim("r2"), advance: 4 * sec, want: none},
			},
		},
		{
			name: "late scheduler claim within the grace period is not drift",
			steps: []dstep{
				{do: both(schedAlive, wClaim("r1")), advance: 2 * sec, want: none},
				{do: sClaim("r1"), advance: 5 * sec, want: none},
			},
		},
		{
			name: "a finish the scheduler learns late is not drift; grace counts from the worker's end",
			steps: []dstep{
				{do: both(sClaim("r1"), wClaim("r1")), advance: 10 * sec, want: none},
				{do: wFinish("r1"), advance: 2 * sec, want: none},
				{do: sFinish("r1"), advance: 5 * sec, want: none},
			},
		},
		{
			name: "duplicated events are idempotent",
			steps: []dstep{
				{do: both(sClaim("r1"), sClaim("r1"), wClaim("r1"), wClaim("r1")), advance: 5 * sec, want: none},
				{do: both(wFinish("r1"), wFinish("r1"), sFinish("r1"), sFinish("r1")), advance: 5 * sec, want: none},
			},
		},
		{
			name: "reordered: end before claim on both sides leaves nothing held",
			steps: []dstep{
				{do: both(schedAlive, wFinish("r1"), wClaim("r1"), sFinish("r1"), sClaim("r1")), advance: 5 * sec, want: none},
			},
		},
		{
			name: "a late duplicate claim long after the end does not resurrect the run",
			steps: []dstep{
				{do: both(sClaim("r1"), wClaim("r1"), wFinish("r1"), sFinish("r1")), advance: 20 * sec, want: none},
				{do: both(sClaim("r1"), wClaim("r1")), advance: 5 * sec, want: none},
			},
		},
		{
			name: "a release on both sides ends the run",
			steps: []dstep{
				{do: both(sClaim("r1"), wClaim("r1")), advance: sec, want: none},
				{do: func(h *harness) {
					h.logs(wl("w1", "workerwatch.run.released", "r1", nil))
					h.logs(sl("w1", "workerwatch.run.released", "r1"))
				}, advance: 5 * sec, want: none},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testCfg()
			cfg.Lost.After = time.Minute
			h := newHarness(t, cfg)
			for i, s := range tt.steps {
				if s.do != nil {
					s.do(h)
				}
				h.advance(s.advance)
				h.eval()
				require.Equal(t, s.want, h.drift("w1"), "step %d", i)
			}
			w := h.worker("w1")
			runs := int64(max(tt.runs, 1))
			assert.LessOrEqual(t, w.Claims[mapping.SideWorker], runs, "a run is claimed once")
			assert.LessOrEqual(t, w.Claims[mapping.SideScheduler], runs)
		})
	}
}

func TestDriftDegradesAndRecovers(t *testing.T) {
	cfg := testCfg()
	cfg.Lost.After = time.Minute
	h := newHarness(t, cfg)
	hb(h)
	h.logs(sl("w1", "workerwatch.run.claimed", "r1"))
	h.advance(4 * time.Second)
	h.eval()
	require.Equal(t, degraded, h.state("w1"))
	require.Contains(t, h.codes("w1"), state.CodeMissing)
	h.logs(sl("w1", "workerwatch.run.released", "r1"))
	h.eval()
	h.eval()
	require.Equal(t, healthy, h.state("w1"))
}

// The scheduler's three views.
func TestSchedulerViews(t *testing.T) {
	wClaim := func(run string) plog.Logs { return wl("w1", "workerwatch.run.claimed", run, nil) }
	wStart := func(run string) plog.Logs { return wl("w1", "workerwatch.run.started", run, nil) }
	wFinish := func(run string) plog.Logs {
		return wl("w1", "workerwatch.run.finished", run, map[string]any{"cicd.pipeline.result": "success"})
	}
	sClaim := func(run string) plog.Logs { return sl("w1", "workerwatch.run.claimed", run) }
	claimsOnly := func(c *testConfig) { c.Scheduler.View = contract.ViewClaimsOnly; c.Drift.HealAfter = 20 * sec }
	snapshots := func(c *testConfig) {
		c.Scheduler.View = contract.ViewSnapshots
		c.Scheduler.SnapshotInterval = 2 * sec
	}
	snap := func(runs ...string) plog.Logs { return snapLogs("workersim-scheduler", "w1", runs...) }
	drift := func(missing, orphaned []string) func(*harness) {
		return func(h *harness) {
			w := h.snap("w1")
			assert.Equal(h.t, missing, w.Drift.Missing(), "missing")
			assert.Equal(h.t, orphaned, w.Drift.Orphaned(), "orphaned")
		}
	}
	none := []string{}
	runSteps(t, []stepCase{
		{
			// Before: every finished run stayed missing (OpenFn: 88 of 88).
			name: "claims only: the worker's end closes the scheduler's claim",
			cfg:  claimsOnly,
			steps: seq(
				step{do: feed(hb, sClaim("r1"), wClaim("r1"), wStart("r1")), advance: 2 * sec},
				step{do: feed(hb, wFinish("r1")), advance: 4 * sec, want: healthy, check: func(h *harness) {
					drift(none, none)(h)
					assert.Empty(h.t, h.snap("w1").Runs.Scheduler)
				}},
				// A claim that arrives after the worker's end is closed already.
				step{do: feed(hb, sClaim("r1")), advance: 4 * sec, want: healthy, check: drift(none, none)},
			),
		},
		{
			name: "claims only: a claim the worker never started is missing, then heals after drift.heal_after",
			cfg:  claimsOnly,
			steps: seq(
				step{do: feed(hb, sClaim("r2")), advance: 4 * sec, want: degraded, code: state.CodeMissing, check: drift([]string{"r2"}, none)},
				repeat(15, step{do: hb, advance: sec, want: degraded, code: state.CodeMissing}),
				step{do: hb, advance: sec, check: func(h *harness) {
					drift(none, none)(h)
					assert.Equal(h.t, [2]int64{0, 1}, h.healed(), "one scheduler-side run let go")
				}},
			),
		},
		{
			name: "snapshots: the latest list is the scheduler's side",
			cfg:  snapshots,
			steps: seq(
				step{do: feed(hb, wClaim("r1"), snap("r1", "r2")), advance: 4 * sec, want: degraded, check: drift([]string{"r2"}, none)},
				// r2 is no longer listed: no longer held.
				step{do: feed(hb, snap("r1")), advance: sec, check: drift(none, none)},
				// Nothing listed while the worker still holds r1: orphaned once
				// that lasts the grace period.
				step{do: feed(hb, snap()), advance: 2 * sec, check: drift(none, none)},
				step{do: feed(hb, snap()), advance: 2 * sec, code: state.CodeOrphaned, check: drift(none, []string{"r1"})},
				step{do: feed(hb, snap(), wFinish("r1")), advance: sec, check: drift(none, none)},
			),
		},
		{
			// A run every snapshot lists is held by the scheduler: real
			// drift, never let go by drift.heal_after (that bound is for
			// views nothing else corrects). Fails if heal_after applies to
			// a scheduler whose fresh snapshots list the run.
			name: "snapshots: a run the latest snapshots keep listing stays missing past drift.heal_after",
			cfg:  func(c *testConfig) { snapshots(c); c.Drift.HealAfter = 10 * sec },
			steps: seq(
				repeat(12, step{do: feed(hb, snap("r9")), advance: 2 * sec}),
				step{want: degraded, code: state.CodeMissing, check: func(h *harness) {
					drift([]string{"r9"}, none)(h)
					assert.Equal(h.t, [2]int64{0, 0}, h.healed(), "nothing let go")
				}},
			),
		},
		{
			name: "snapshots: a worker the scheduler stops restating loses its runs after three intervals",
			cfg:  snapshots,
			steps: seq(
				step{do: feed(hb, snap("r1")), advance: 4 * sec, check: drift([]string{"r1"}, none)},
				step{do: hb, advance: 3 * sec, check: drift(none, none)},
				step{check: func(h *harness) { assert.Equal(h.t, [2]int64{0, 1}, h.healed()) }},
			),
		},
		{
			name: "snapshots by count only: drift is the difference of the counts",
			cfg:  snapshots,
			steps: seq(
				step{do: feed(hb, wClaim("r1"), heldMetrics("workersim-scheduler", map[string]int64{"w1": 3})), advance: 4 * sec, want: degraded, code: state.CodeMissing, check: func(h *harness) {
					w := h.snap("w1")
					assert.Equal(h.t, 2, w.Drift.MissingCount())
					assert.Empty(h.t, w.Drift.Missing(), "a count names no run")
					assert.Equal(h.t, 0, w.Drift.OrphanedCount(), "runs a count-only scheduler never names are not orphans")
				}},
				step{do: feed(hb, heldMetrics("workersim-scheduler", map[string]int64{"w1": 1})), advance: sec, check: func(h *harness) {
					assert.Equal(h.t, 0, h.snap("w1").Drift.MissingCount())
				}},
			),
		},
		{
			// Before: in the events view a count or snapshot was ignored.
			name: "events: the held gauge is not the scheduler's side",
			steps: seq(
				step{do: feed(hb, heldMetrics("workersim-scheduler", map[string]int64{"w1": 3})), advance: 4 * sec, want: healthy, check: drift(none, none)},
			),
		},
	})
}

// Lost events leave no permanent drift (before: nothing ever cleared them).
func TestDriftHeals(t *testing.T) {
	wClaim := func(run string) plog.Logs { return wl("w1", "workerwatch.run.claimed", run, nil) }
	wFinish := func(run string) plog.Logs {
		return wl("w1", "workerwatch.run.finished", run, map[string]any{"cicd.pipeline.result": "success"})
	}
	sClaim := func(run string) plog.Logs { return sl("w1", "workerwatch.run.claimed", run) }
	sFinish := func(run string) plog.Logs { return sl("w1", "workerwatch.run.finished", run) }
	heal := func(c *testConfig) { c.Drift.HealAfter = 20 * sec; c.Limits.WorkerTTL = time.Hour }
	codes := func(missing, orphaned int) func(*harness) {
		return func(h *harness) {
			w := h.snap("w1")
			assert.Len(h.t, w.Drift.Missing(), missing, "missing %v", w.Drift.Missing())
			assert.Len(h.t, w.Drift.Orphaned(), orphaned, "orphaned %v", w.Drift.Orphaned())
		}
	}
	runSteps(t, []stepCase{
		{
			name: "the scheduler's end was lost: missing until drift.heal_after after the worker's end",
			cfg:  heal,
			steps: seq(
				step{do: feed(hb, sClaim("r1"), wClaim("r1")), advance: sec},
				step{do: feed(hb, wFinish("r1")), advance: 4 * sec, want: degraded, check: codes(1, 0)},
				repeat(15, step{do: hb, advance: sec, check: codes(1, 0)}),
				step{do: hb, advance: sec, want: degraded, code: state.CodeRecovering, check: codes(0, 0)},
				step{do: hb, advance: sec, want: healthy, check: func(h *harness) { assert.Equal(h.t, [2]int64{0, 1}, h.healed()) }},
			),
		},
		{
			name: "the worker's end was lost (no runs.active): orphaned until drift.heal_after after the scheduler's end",
			cfg:  heal,
			steps: seq(
				step{do: feed(hb, sClaim("r1"), wClaim("r1")), advance: sec},
				step{do: feed(hb, sFinish("r1")), advance: 4 * sec, want: degraded, check: codes(0, 1)},
				repeat(15, step{do: feed(hb, pendingMetrics(0)), advance: sec, check: codes(0, 1)}),
				step{do: feed(hb, pendingMetrics(0)), advance: sec, check: func(h *harness) {
					codes(0, 0)(h)
					assert.Equal(h.t, [2]int64{1, 0}, h.healed())
				}},
			),
		},
		{
			name: "both ends lost: the worker's count lets its side go, then the scheduler's heals",
			cfg:  heal,
			steps: seq(
				step{do: feed(hb, sClaim("r1"), wClaim("r1"), activeMetrics(1)), advance: sec, want: healthy},
				// The count drops at t+1 (first judged at t+5); the worker's
				// side is let go at t+9, once that outlasted the grace period.
				step{do: feed(hb, activeMetrics(0)), advance: 4 * sec},
				step{do: feed(hb, activeMetrics(0)), advance: 4 * sec, want: healthy, check: codes(0, 0)},
				// The scheduler still holds it: missing, the truth for now.
				step{do: feed(hb, activeMetrics(0)), advance: 4 * sec, want: degraded, check: codes(1, 0)},
				repeat(15, step{do: feed(hb, activeMetrics(0)), advance: sec, check: codes(1, 0)}),
				// drift.heal_after after the worker's side was let go.
				step{do: feed(hb, activeMetrics(0)), advance: sec, check: func(h *harness) {
					codes(0, 0)(h)
					assert.Equal(h.t, [2]int64{1, 1}, h.healed())
				}},
			),
		},
		{
			// openfn helper's finding: with a claims-only scheduler, the
			// worker's own count letting a run go is the worker's end, and
			// that closes the scheduler's claim (no missing for heal_after).
			name: "claims only: the worker's count letting its side go closes the scheduler's claim too",
			cfg:  func(c *testConfig) { heal(c); c.Scheduler.View = contract.ViewClaimsOnly },
			steps: seq(
				step{do: feed(hb, sClaim("r1"), wClaim("r1"), activeMetrics(1)), advance: sec, want: healthy},
				step{do: feed(hb, activeMetrics(0)), advance: 4 * sec},
				step{do: feed(hb, activeMetrics(0)), advance: 4 * sec, check: codes(0, 0)},
				repeat(5, step{do: feed(hb, activeMetrics(0)), advance: sec, want: healthy, check: func(h *harness) {
					codes(0, 0)(h)
					w := h.snap("w1")
					assert.Empty(h.t, w.Runs.Scheduler)
					assert.Empty(h.t, w.Runs.Recent.Records(), "a run let go is not a recent run: its end was never seen")
				}}),
			),
		},
		{
			// Before (openfn helper's finding): never-started runs counted
			// twice, as missing and again as capacity excess.
			name: "runs already missing do not count again as over capacity",
			steps: seq(
				step{
					do: feed(wl("w1", "workerwatch.worker.heartbeat", "", map[string]any{"workerwatch.worker.capacity": 2}),
						sClaim("a"), sClaim("b"), sClaim("c"), sClaim("r1"), wClaim("r1")), advance: 4 * sec,
					want: degraded, code: state.CodeMissing, noCode: state.CodeOverCapacity,
				},
				step{do: hb, advance: 4 * sec, want: degraded, code: state.CodeMissing, noCode: state.CodeOverCapacity, check: func(h *harness) {
					assert.Equal(h.t, 0, h.snap("w1").Drift.OverCapacity())
				}},
				// Claims that keep getting lost: young ones (not yet missing)
				// are not the worker's load either.
				repeat(8, step{do: func(h *harness) {
					hb(h)
					h.logs(sClaim(fmt.Sprintf("lost-%d", autoRun.Add(1))))
				}, advance: sec, noCode: state.CodeOverCapacity}),
			),
		},
		{
			// bullmq helper's finding: a short run never listed by a
			// snapshot, whose end was lost, stayed orphaned for good.
			name: "a run the scheduler never named, whose end was lost, heals after drift.heal_after",
			cfg: func(c *testConfig) {
				heal(c)
				c.Scheduler.View = contract.ViewSnapshots
				c.Scheduler.SnapshotInterval = 2 * sec
			},
			steps: seq(
				step{do: feed(hb, snapLogs("workersim-scheduler", "w1"), wClaim("short")), advance: 4 * sec, want: degraded, check: codes(0, 1)},
				repeat(15, step{do: feed(hb, snapLogs("workersim-scheduler", "w1")), advance: sec, check: codes(0, 1)}),
				step{do: feed(hb, snapLogs("workersim-scheduler", "w1")), advance: sec, check: func(h *harness) {
					codes(0, 0)(h)
					assert.Equal(h.t, [2]int64{1, 0}, h.healed())
				}},
			),
		},
		{
			name: "a worker no scheduler knows keeps its run however long it lasts",
			cfg:  heal,
			steps: seq(
				step{do: feed(hb, wClaim("long")), advance: sec},
				repeat(40, step{do: hb, advance: sec, check: func(h *harness) {
					assert.Equal(h.t, []string{"long"}, h.snap("w1").Runs.Worker)
				}}),
			),
		},
		{
			// bullmq helper's finding: a worker whose own telemetry never
			// arrives has no view to disagree with.
			name: "no missing drift for a worker only the scheduler names",
			steps: seq(
				step{do: feed(sClaim("a")), advance: 4 * sec, want: unknown, noCode: state.CodeMissing},
			),
		},
	})
}

// Each scheduler source has its own view and its own id attributes
// (scheduler.sources): the same record sequence (a claim from the
// scheduler; the worker's claim, start and end) closes the run for a worker
// a claims-only source names, and leaves it missing for a worker an
// events-view source names (that scheduler's end never came). Fails if one
// view applied to every source.
func TestSchedulerViewPerSource(t *testing.T) {
	cfg := testCfg()
	cfg.Scheduler.View = contract.ViewEvents // workersim-scheduler's
	cfg.Scheduler.Sources = []mapping.SchedulerSource{{ServiceName: "lightning", View: contract.ViewClaimsOnly, WorkerIDAttributes: []string{"worker_name"}}}
	h := newHarness(t, cfg)
	lightning := func(worker, run string) plog.Logs {
		ld := plog.NewLogs()
		rl := ld.ResourceLogs().AppendEmpty()
		rl.Resource().Attributes().PutStr("service.name", "lightning")
		lr := rl.ScopeLogs().AppendEmpty().LogRecords().AppendEmpty()
		fillRec(lr, rec{Event: "workerwatch.run.claimed", Run: run})
		lr.Attributes().PutStr("worker_name", worker)
		return ld
	}
	for _, w := range []string{"lw", "ew"} {
		if w == "lw" {
			h.logs(lightning(w, w+"-r1"))
		} else {
			h.logs(sl(w, "workerwatch.run.claimed", w+"-r1"))
		}
		h.logs(wl(w, "workerwatch.run.claimed", w+"-r1", nil))
		h.logs(wl(w, "workerwatch.run.started", w+"-r1", nil))
	}
	h.advance(sec)
	h.eval()
	for _, w := range []string{"lw", "ew"} {
		h.logs(wl(w, "workerwatch.run.finished", w+"-r1", map[string]any{"cicd.pipeline.result": "success"}))
	}
	h.advance(4 * sec)
	h.eval()
	lw, ew := h.snap("lw"), h.snap("ew")
	assert.Equal(t, []string{"cicd.worker.id=lw"}, lw.Sources.Telemetry().IDs.List())
	assert.Equal(t, []string{"worker_name=lw"}, lw.Sources.Scheduler().IDs.List(), "lightning names it by worker_name")
	assert.Empty(t, lw.Drift.Missing(), "claims only: the worker's end closed lightning's claim")
	assert.Empty(t, lw.Runs.Scheduler)
	assert.Equal(t, []string{"ew-r1"}, ew.Drift.Missing(), "events: the scheduler's end never came")
	assert.Equal(t, degraded, h.state("ew"))
	assert.Equal(t, healthy, h.state("lw"))
}
