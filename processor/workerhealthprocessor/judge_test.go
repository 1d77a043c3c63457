package workerhealthprocessor

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/metric/metricdata/metricdatatest"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/workerwatch/workerwatch/internal/contract"
	"github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/metadatatest"
)

// The judgement rules of issue 12, each as a step table: every case fails
// against the judgement before it (commit 2341973), as noted per case.

const sec = time.Second

// openfnLike: a worker named by worker_name on its records, its tree by
// cicd.worker.id (the receiver's), as with OpenFn.
func openfnLike(c *Config) { c.Mapping.WorkerIDAttributes = []string{"worker_name"} }

// named are a worker's own records naming it by worker_name on the resource.
func named(id string, recs ...rec) plog.Logs {
	ld := workerLogs("ws-worker", recs...)
	for i := 0; i < ld.ResourceLogs().Len(); i++ {
		a := ld.ResourceLogs().At(i).Resource().Attributes()
		a.Remove("cicd.worker.id")
		a.PutStr("worker_name", id)
	}
	return ld
}

func feed(fs ...any) func(*harness) {
	return func(h *harness) {
		for _, f := range fs {
			switch x := f.(type) {
			case plog.Logs:
				h.logs(x)
			case pmetric.Metrics:
				h.metrics(x)
			case tree:
				h.metrics(x.metrics())
			case func(*harness):
				x(h)
			}
		}
	}
}

func TestIdentity(t *testing.T) {
	hbNamed := named("w1", rec{worker: "x", event: "workerwatch.worker.heartbeat"})
	liveTree := func(mem int64) tree {
		return tree{worker: "w1", roles: map[string]int64{"main": mem / 2, "child": mem / 2}, present: 1, oom: -1}
	}
	runSteps(t, []stepCase{
		{
			// Before: worker_id_attribute applied to the tree too, so the tree
			// never joined and no memory rule could fire (rss 0).
			name: "the tree joins a worker named by another attribute, and its memory counts",
			cfg:  openfnLike,
			steps: seq(
				repeat(3, step{do: feed(hbNamed, liveTree(1500)), advance: sec}),
				step{want: unhealthy, code: codeMemory, check: func(h *harness) {
					w := h.snap("w1")
					assert.Equal(t, int64(1500), w.Memory.RSSBytes)
					assert.Equal(t, []string{"cicd.worker.id=w1"}, w.Sources.Tree.IDs)
					assert.Equal(t, []string{"worker_name=w1"}, w.Sources.Telemetry.IDs)
					assert.False(t, w.Sources.Scheduler.Seen)
					h.p.mu.Lock()
					assert.Len(t, h.p.tracker.workers, 1, "one worker, not two")
					h.p.mu.Unlock()
				}},
			),
		},
		{
			// Before: the unjoined tree did not keep the worker alive: lost
			// after lost.after while its run hung with the process there.
			name: "a live process is evidence of life: a silent worker with its process is not lost",
			cfg:  openfnLike,
			steps: seq(
				step{do: feed(hbNamed, liveTree(100)), advance: sec, want: healthy},
				repeat(70, step{do: feed(liveTree(100)), advance: sec, want: healthy, noCode: codeNoTelemetry}),
				repeat(5, step{do: feed(tree{worker: "w1", present: 0, oom: -1}), advance: sec}),
				step{want: lost, code: codeNoTelemetry},
			),
		},
		{
			// openfn helper's finding: with a pulled scheduler a claim exists
			// because the worker just asked for work.
			name: "a claims-only scheduler's claims are a sign of life: unknown, not lost",
			cfg:  func(c *Config) { c.Scheduler.View = contract.ViewClaimsOnly },
			steps: seq(
				repeat(10, step{do: func(h *harness) {
					h.logs(sl("w1", "workerwatch.run.claimed", fmt.Sprintf("c-%d", autoRun.Add(1))))
				}, advance: sec, want: unknown, code: codeNotReported, noCode: codeNoTelemetry}),
			),
		},
		{
			// Before (openfn helper's finding, e2e bad input: a worker only
			// Lightning names showed over_capacity 14): its claims never
			// end, so they added up to capacity excess until heal_after.
			name: "a claims-only scheduler alone is no measure of load: no over capacity",
			cfg: func(c *Config) {
				c.Scheduler.View = contract.ViewClaimsOnly
				c.Capacity.Default = 2
			},
			steps: seq(
				repeat(12, step{do: func(h *harness) {
					h.logs(sl("w1", "workerwatch.run.claimed", fmt.Sprintf("c-%d", autoRun.Add(1))))
				}, advance: sec, noCode: codeOverCapacity, check: func(h *harness) {
					assert.Equal(h.t, 0, h.snap("w1").Drift.OverCapacity)
				}}),
			),
		},
		{
			// bullmq helper's finding: a queue that states only connected
			// workers names a live worker in every snapshot.
			name: "sign_of_life any: a snapshot naming the worker keeps it from lost",
			cfg: func(c *Config) {
				c.Scheduler.View = contract.ViewSnapshots
				c.Scheduler.SignOfLife = "any"
			},
			steps: seq(repeat(10, step{do: feed(snapLogs("workersim-scheduler", "w1", "j1")), advance: sec, want: unknown, noCode: codeNoTelemetry})),
		},
		{
			name: "sign_of_life none: even a claims-only scheduler's claims do not keep the worker from lost",
			cfg: func(c *Config) {
				c.Scheduler.View = contract.ViewClaimsOnly
				c.Scheduler.SignOfLife = "none"
			},
			steps: seq(
				repeat(5, step{do: func(h *harness) {
					h.logs(sl("w1", "workerwatch.run.claimed", fmt.Sprintf("c-%d", autoRun.Add(1))))
				}, advance: sec}),
				step{do: func(h *harness) { h.logs(sl("w1", "workerwatch.run.claimed", "c-last")) }, want: lost, code: codeNoTelemetry},
			),
		},
		{
			name: "by default a snapshot is not a sign of life",
			cfg:  func(c *Config) { c.Scheduler.View = contract.ViewSnapshots },
			steps: seq(
				repeat(5, step{do: feed(snapLogs("workersim-scheduler", "w1", "j1")), advance: sec}),
				step{do: feed(snapLogs("workersim-scheduler", "w1", "j1")), want: lost, code: codeNoTelemetry},
			),
		},
		{
			name: "several id attributes: the first present names the worker",
			cfg:  func(c *Config) { c.Mapping.WorkerIDAttributes = []string{"worker_name", "host.name"} },
			steps: seq(
				step{do: feed(named("w1", rec{worker: "x", event: "workerwatch.worker.heartbeat"}), liveTree(100)), advance: sec, want: healthy},
				step{check: func(h *harness) {
					h.p.mu.Lock()
					defer h.p.mu.Unlock()
					assert.Len(t, h.p.tracker.workers, 1)
				}},
			),
		},
	})
}

// A worker whose telemetry and tree never meet is reported once, with the
// ids seen and a counter; a deployment with one source reports nothing.
func TestUnjoinedWorkers(t *testing.T) {
	cfg := testCfg()
	cfg.Identity.JoinWithin = 10 * time.Second
	h := newHarness(t, cfg)
	for range 12 {
		// The tree says pod-7, the worker's telemetry w7: they never meet.
		h.metrics(tree{worker: "pod-7", roles: map[string]int64{"main": 10}, present: 1, oom: -1}.metrics())
		h.logs(wl("w7", "workerwatch.worker.heartbeat", "", nil))
		h.advance(sec)
		uj := h.evalUnjoined()
		if len(uj) > 0 {
			require.Len(t, uj, 2)
			assert.Equal(t, unjoined{worker: "pod-7", origin: "tree", ids: []string{"cicd.worker.id=pod-7"}, others: []string{"telemetry cicd.worker.id=w7"}}, uj[0])
			assert.Equal(t, "w7", uj[1].worker)
			assert.Equal(t, "telemetry", uj[1].origin)
			assert.Contains(t, uj[0].message(), "named only by its tree")
		}
	}
	h.p.mu.Lock()
	assert.Equal(t, int64(2), h.p.tracker.unjoinedN, "each reported once")
	h.p.mu.Unlock()

	// Only a tree, no telemetry anywhere: nothing to join, nothing reported.
	h2 := newHarness(t, cfg)
	for range 15 {
		h2.metrics(tree{worker: "pod-1", roles: map[string]int64{"main": 10}, present: 1, oom: -1}.metrics())
		h2.advance(sec)
		uj := h2.evalUnjoined()
		assert.Empty(t, uj)
	}
}

// What the tracker finds reaches the operator: through the processor's own
// evaluation (tick), each unjoined worker is one warning naming its ids and
// the ids only another source has, and a count in workers_unjoined; runs let
// go in runs_healed by the side let go.
func TestUnjoinedAndHealedReachTheOperator(t *testing.T) {
	tt := componenttest.NewTelemetry()
	t.Cleanup(func() { require.NoError(t, tt.Shutdown(context.Background())) })
	set := metadatatest.NewSettings(tt)
	core, logs := observer.New(zap.WarnLevel)
	set.Logger = zap.New(core)
	cfg := testCfg()
	cfg.Identity.JoinWithin = 10 * sec
	cfg.Scheduler.View = contract.ViewClaimsOnly
	cfg.Drift.HealAfter = 5 * sec
	h := newHarness(t, cfg)
	p, err := newHealthProcessor(set, cfg, withClock(h.clock))
	require.NoError(t, err)
	t.Cleanup(p.tel.Shutdown)
	h.p = p
	ctx := context.Background()
	for range 12 {
		// The tree says pod-7, the worker's telemetry w7: they never meet.
		h.metrics(tree{worker: "pod-7", roles: map[string]int64{"main": 10}, present: 1, oom: -1}.metrics())
		h.logs(wl("w7", "workerwatch.worker.heartbeat", "", nil))
		// w8, joined: its scheduler's claim of a run it never names is let
		// go after heal_after.
		h.logs(wl("w8", "workerwatch.worker.heartbeat", "", nil))
		h.logs(sl("w8", "workerwatch.run.claimed", "lost-1"))
		h.advance(sec)
		p.tick(ctx)
	}
	warns := logs.FilterMessageSnippet("is named only by its").All()
	require.Len(t, warns, 2, "one line per unjoined worker, once")
	assert.Equal(t, "worker pod-7 is named only by its tree ([cicd.worker.id=pod-7]); its other sources may use other ids", warns[0].Message)
	assert.Equal(t, []any{"telemetry cicd.worker.id=w7"}, warns[0].ContextMap()["named_only_by_another_source"])
	metadatatest.AssertEqualProcessorWorkerHealthWorkersUnjoined(t, tt,
		[]metricdata.DataPoint[int64]{{Value: 2}}, metricdatatest.IgnoreTimestamp())
	metadatatest.AssertEqualProcessorWorkerHealthRunsHealed(t, tt,
		[]metricdata.DataPoint[int64]{{Value: 1, Attributes: attribute.NewSet(attribute.String(contract.AttrSource, contract.SourceScheduler))}},
		metricdatatest.IgnoreTimestamp())
}

// The scheduler's three views.
func TestSchedulerViews(t *testing.T) {
	wClaim := func(run string) plog.Logs { return wl("w1", "workerwatch.run.claimed", run, nil) }
	wStart := func(run string) plog.Logs { return wl("w1", "workerwatch.run.started", run, nil) }
	wFinish := func(run string) plog.Logs {
		return wl("w1", "workerwatch.run.finished", run, map[string]any{"cicd.pipeline.result": "success"})
	}
	sClaim := func(run string) plog.Logs { return sl("w1", "workerwatch.run.claimed", run) }
	claimsOnly := func(c *Config) { c.Scheduler.View = contract.ViewClaimsOnly; c.Drift.HealAfter = 20 * sec }
	snapshots := func(c *Config) {
		c.Scheduler.View = contract.ViewSnapshots
		c.Scheduler.SnapshotInterval = 2 * sec
	}
	snap := func(runs ...string) plog.Logs { return snapLogs("workersim-scheduler", "w1", runs...) }
	drift := func(missing, orphaned []string) func(*harness) {
		return func(h *harness) {
			w := h.snap("w1")
			assert.Equal(h.t, missing, w.Drift.Missing, "missing")
			assert.Equal(h.t, orphaned, w.Drift.Orphaned, "orphaned")
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
				step{do: feed(hb, sClaim("r2")), advance: 4 * sec, want: degraded, code: codeMissing, check: drift([]string{"r2"}, none)},
				repeat(15, step{do: hb, advance: sec, want: degraded, code: codeMissing}),
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
				step{do: feed(hb, snap()), advance: 2 * sec, code: codeOrphaned, check: drift(none, []string{"r1"})},
				step{do: feed(hb, snap(), wFinish("r1")), advance: sec, check: drift(none, none)},
			),
		},
		{
			// A run every snapshot lists is held by the scheduler: real
			// drift, never let go by drift.heal_after (that bound is for
			// views nothing else corrects). Fails if heal_after applies to
			// a scheduler whose fresh snapshots list the run.
			name: "snapshots: a run the latest snapshots keep listing stays missing past drift.heal_after",
			cfg:  func(c *Config) { snapshots(c); c.Drift.HealAfter = 10 * sec },
			steps: seq(
				repeat(12, step{do: feed(hb, snap("r9")), advance: 2 * sec}),
				step{want: degraded, code: codeMissing, check: func(h *harness) {
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
				step{do: feed(hb, wClaim("r1"), heldMetrics("workersim-scheduler", map[string]int64{"w1": 3})), advance: 4 * sec, want: degraded, code: codeMissing, check: func(h *harness) {
					w := h.snap("w1")
					assert.Equal(h.t, 2, w.Drift.MissingCount)
					assert.Empty(h.t, w.Drift.Missing, "a count names no run")
					assert.Equal(h.t, 0, w.Drift.OrphanedCount, "runs a count-only scheduler never names are not orphans")
				}},
				step{do: feed(hb, heldMetrics("workersim-scheduler", map[string]int64{"w1": 1})), advance: sec, check: func(h *harness) {
					assert.Equal(h.t, 0, h.snap("w1").Drift.MissingCount)
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
	heal := func(c *Config) { c.Drift.HealAfter = 20 * sec; c.Limits.WorkerTTL = time.Hour }
	codes := func(missing, orphaned int) func(*harness) {
		return func(h *harness) {
			w := h.snap("w1")
			assert.Len(h.t, w.Drift.Missing, missing, "missing %v", w.Drift.Missing)
			assert.Len(h.t, w.Drift.Orphaned, orphaned, "orphaned %v", w.Drift.Orphaned)
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
				step{do: hb, advance: sec, want: degraded, code: codeRecovering, check: codes(0, 0)},
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
			cfg:  func(c *Config) { heal(c); c.Scheduler.View = contract.ViewClaimsOnly },
			steps: seq(
				step{do: feed(hb, sClaim("r1"), wClaim("r1"), activeMetrics(1)), advance: sec, want: healthy},
				step{do: feed(hb, activeMetrics(0)), advance: 4 * sec},
				step{do: feed(hb, activeMetrics(0)), advance: 4 * sec, check: codes(0, 0)},
				repeat(5, step{do: feed(hb, activeMetrics(0)), advance: sec, want: healthy, check: func(h *harness) {
					codes(0, 0)(h)
					w := h.snap("w1")
					assert.Empty(h.t, w.Runs.Scheduler)
					assert.Empty(h.t, w.Runs.Recent, "a run let go is not a recent run: its end was never seen")
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
					want: degraded, code: codeMissing, noCode: codeOverCapacity,
				},
				step{do: hb, advance: 4 * sec, want: degraded, code: codeMissing, noCode: codeOverCapacity, check: func(h *harness) {
					assert.Equal(h.t, 0, h.snap("w1").Drift.OverCapacity)
				}},
				// Claims that keep getting lost: young ones (not yet missing)
				// are not the worker's load either.
				repeat(8, step{do: func(h *harness) {
					hb(h)
					h.logs(sClaim(fmt.Sprintf("lost-%d", autoRun.Add(1))))
				}, advance: sec, noCode: codeOverCapacity}),
			),
		},
		{
			// bullmq helper's finding: a short run never listed by a
			// snapshot, whose end was lost, stayed orphaned for good.
			name: "a run the scheduler never named, whose end was lost, heals after drift.heal_after",
			cfg: func(c *Config) {
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
				step{do: feed(sClaim("a")), advance: 4 * sec, want: unknown, noCode: codeMissing},
			),
		},
	})
}

func TestKills(t *testing.T) {
	win := func(c *Config) { c.Lost.After = 2 * time.Minute; c.Limits.WorkerTTL = time.Hour }
	oomTree := func(n int64) tree { return tree{worker: "w1", roles: map[string]int64{"main": 10}, present: 1, oom: n} }
	exits := func(main, child int64) tree {
		return tree{worker: "w1", roles: map[string]int64{"main": 10}, present: 1, oom: -1, exited: map[string]int64{"main": main, "child": child}}
	}
	started := func(run string) plog.Logs { return wl("w1", "workerwatch.run.started", run, nil) }
	finished := func(run string) plog.Logs {
		return wl("w1", "workerwatch.run.finished", run, map[string]any{"cicd.pipeline.result": "success"})
	}
	kills := func(reason string, n int64) func(*harness) {
		return func(h *harness) { assert.Equal(h.t, n, h.snap("w1").Runs.Kills[reason], reason) }
	}
	runSteps(t, []stepCase{
		{
			// Before: the cgroup's OOM kills were not read at all.
			name: "the OOM killer in the worker's cgroup: unhealthy at 3, the value is the real count, since fixed",
			cfg:  win,
			steps: seq(
				step{do: feed(hb, oomTree(7)), advance: sec, want: healthy, check: kills("oom", 0)}, // a baseline, not kills
				step{do: feed(hb, oomTree(9)), advance: sec, want: healthy, check: kills("oom", 2)},
				step{do: feed(hb, oomTree(10)), advance: sec, want: unhealthy, code: codeKills, check: func(h *harness) {
					r := h.reason(codeKills)
					assert.InDelta(h.t, 3, r.Value, 0)
					assert.InDelta(h.t, 3, r.Threshold, 0)
					assert.Equal(h.t, t0.Add(sec), r.Since)
				}},
				// Before: value stayed kills.count and since moved with the ring.
				step{do: feed(hb, oomTree(14)), advance: sec, want: unhealthy, check: func(h *harness) {
					r := h.reason(codeKills)
					assert.InDelta(h.t, 7, r.Value, 0, "every kill in the window")
					assert.Equal(h.t, t0.Add(sec), r.Since, "the episode's start does not move")
				}},
				// The first two kills slide out of the window (1m), five
				// still count: the same episode, its start unmoved. Fails
				// with since = the oldest kill in the window at each
				// evaluation (t0+2s here).
				step{do: feed(hb, oomTree(14)), advance: 58 * sec, want: unhealthy, check: func(h *harness) {
					r := h.reason(codeKills)
					assert.InDelta(h.t, 5, r.Value, 0, "the kills still in the window")
					assert.Equal(h.t, t0.Add(sec), r.Since, "the episode's start does not move")
				}},
			),
		},
		{
			name: "the main process exiting three times: unhealthy (worker_exit)",
			cfg:  win,
			steps: seq(
				step{do: feed(hb, exits(0, 0)), advance: sec, want: healthy},
				step{do: feed(hb, exits(2, 0)), advance: sec, want: healthy},
				step{do: feed(hb, exits(3, 2)), advance: 5 * sec, want: unhealthy, code: codeKills, check: func(h *harness) {
					kills("worker_exit", 3)(h)
					kills("child_exit", 0)(h) // children die with their root
				}},
			),
		},
		{
			name: "child exits with a run ending around them are the runs'; without, child_exit",
			cfg:  win,
			steps: seq(
				step{do: feed(hb, exits(0, 0), started("r1"), started("r2"), started("r3")), advance: sec},
				// r1's child exits, its end arrives a second after the sample.
				step{do: feed(hb, exits(0, 1)), advance: sec},
				step{do: feed(hb, finished("r1")), advance: 4 * sec, want: healthy, check: kills("child_exit", 0)},
				// Three children die, no run ends.
				step{do: feed(hb, exits(0, 4)), advance: 4 * sec, want: unhealthy, code: codeKills, check: kills("child_exit", 3)},
			),
		},
		{
			// openfn helper's finding: OpenFn starts a run's time limit at
			// the hand-over to a child, so a run killed before it started
			// still has its child killed.
			name: "a run killed before it started explains its child's exit",
			cfg:  win,
			steps: seq(
				step{do: feed(hb, exits(0, 0)), advance: sec},
				step{
					do: feed(hb, exits(0, 1), wl("w1", "workerwatch.run.claimed", "k1", nil),
						wl("w1", "workerwatch.run.killed", "k1", map[string]any{"workerwatch.kill.reason": "timeout"})), advance: 5 * sec,
					want: healthy, check: kills("child_exit", 0),
				},
			),
		},
		{
			// bullmq helper's finding: a graceful restart (the pool closed,
			// then the main process) was 1 worker_exit + 2 child_exit.
			name: "children that exit just before their root are the root's exit",
			cfg:  win,
			steps: seq(
				step{do: feed(hb, exits(0, 0)), advance: sec},
				step{do: feed(hb, exits(0, 2)), advance: sec},
				step{do: feed(hb, exits(1, 2)), advance: 5 * sec, want: healthy, check: func(h *harness) {
					kills("worker_exit", 1)(h)
					kills("child_exit", 0)(h)
				}},
			),
		},
		{
			// openfn helper's finding: on a loaded host the run's end came
			// seconds after the tree showed its child's exit.
			name: "a run end arriving late within kills.exit_window still explains its child's exit",
			cfg: func(c *Config) {
				win(c)
				c.Kills.ExitWindow = 15 * time.Second
			},
			steps: seq(
				step{do: feed(hb, exits(0, 0), started("r1"), started("r2"), started("r3")), advance: sec},
				step{do: feed(hb, exits(0, 3)), advance: 10 * sec},
				step{do: feed(hb, finished("r1"), finished("r2"), finished("r3")), advance: 10 * sec, want: healthy, check: kills("child_exit", 0)},
			),
		},
		{
			// Found by TestJudgeOpenFn on a loaded host: a worker whose runs
			// die at their memory limit 4 times a second ends more runs
			// within kills.exit_window than the 64 ends kept, so exits
			// whose end was pushed out counted as child_exit (3 of 388:
			// unhealthy). Fails with the ring of 64.
			name: "a worker ending runs faster than 64 per exit window still has each child exit explained by its run's end",
			cfg: func(c *Config) {
				win(c)
				c.Kills.ExitWindow = 15 * time.Second
			},
			steps: func() []step {
				var s []step
				s = append(s, step{do: feed(hb, exits(0, 0)), advance: sec})
				for i := 1; i <= 25; i++ {
					ends := []any{hb, exits(0, int64(5*i))}
					for j := range 5 {
						run := fmt.Sprintf("fast-%d-%d", i, j)
						ends = append(ends, started(run), finished(run))
					}
					s = append(s, step{do: feed(ends...), advance: sec})
				}
				return append(s, step{do: feed(hb, exits(0, 125)), advance: 20 * sec, want: healthy, check: kills("child_exit", 0)})
			}(),
		},
		{
			name: "each reason's effect is configurable",
			cfg: func(c *Config) {
				win(c)
				c.Kills.Effects = map[string]string{"timeout": "degraded"}
			},
			steps: seq(
				step{do: both(kill("", "timeout"), kill("", "timeout")), advance: sec, want: healthy},
				step{do: kill("", "timeout"), advance: sec, want: degraded, code: codeKills},
			),
		},
	})
}

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
			for _, r := range h.snap("w1").Runs.Recent {
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

func TestRoleMemory(t *testing.T) {
	roles := func(c *Config) {
		c.Memory.SoftLimitBytes = 0
		c.Memory.Roles = map[string]RoleMemoryRule{"main": {SoftLimitBytes: 600}}
	}
	tr := func(main, child int64) tree {
		return tree{worker: "w1", roles: map[string]int64{"main": main, "child": child}, present: 1, oom: -1}
	}
	runSteps(t, []stepCase{
		{
			// Before: only the tree had a limit.
			name: "the main role over its own limit: degraded, unhealthy after 3 samples, with the role named",
			cfg:  roles,
			steps: seq(
				step{do: feed(hb, tr(700, 100)), advance: sec, want: degraded, code: codeMemory},
				step{do: feed(hb, tr(700, 100)), advance: sec, want: degraded},
				step{do: feed(hb, tr(700, 100)), advance: sec, want: unhealthy, check: func(h *harness) {
					r := h.reason(codeMemory)
					assert.Equal(h.t, "main", r.Role)
					assert.InDelta(h.t, 700, r.Value, 0)
					assert.InDelta(h.t, 600, r.Threshold, 0)
					m := h.snap("w1").Memory
					assert.Equal(h.t, []contract.RoleMemory{
						{Role: "child", RSSBytes: 100},
						{Role: "main", RSSBytes: 700, SoftLimitBytes: 600, OverSamples: 3},
					}, m.Roles)
					assert.Equal(h.t, int64(800), m.RSSBytes)
				}},
				repeat(3, step{do: feed(hb, tr(100, 100)), advance: sec}),
				step{do: feed(hb, tr(100, 100)), advance: sec, want: healthy},
			),
		},
		{
			name:  "big children with no tree limit leave the worker healthy",
			cfg:   roles,
			steps: seq(repeat(5, step{do: feed(hb, tr(100, 5000)), advance: sec, want: healthy})),
		},
		{
			name: "the main role over its limit when a run starts: unhealthy at once",
			cfg:  roles,
			steps: seq(
				step{do: feed(hb, tr(700, 0)), advance: sec, want: degraded},
				step{do: feed(wl("w1", "workerwatch.run.started", "r1", nil)), advance: sec, want: unhealthy, check: func(h *harness) {
					r := h.reason(codeMemoryAtStart)
					assert.Equal(h.t, "main", r.Role)
				}},
			),
		},
		{
			// Before: with 25 samples over the limit only the at-run-start
			// reason was listed.
			name: "every active reason is listed: persistently over and over at a run's start",
			steps: seq(
				step{do: mem(1200), advance: sec, want: degraded},
				step{do: func(h *harness) { h.logs(wl("w1", "workerwatch.run.started", "r1", nil)) }, advance: sec, want: unhealthy},
				repeat(25, step{do: mem(1200), advance: sec}),
				step{want: unhealthy, code: codeMemory, check: func(h *harness) {
					assert.Contains(h.t, h.codes("w1"), codeMemoryAtStart)
				}},
			),
		},
	})
}

func TestCPU(t *testing.T) {
	cpuOf := func(util, limit float64) tree {
		return tree{worker: "w1", roles: map[string]int64{"main": 10}, present: 1, oom: -1, cpuMain: util, cpuLimit: limit}
	}
	runSteps(t, []stepCase{
		{
			// Before: utilization x the collector host's CPUs (4 in the
			// test config): half of one pinned CPU read as 2 cores.
			name:  "pinned to one CPU, half of it busy: not saturated",
			steps: seq(repeat(6, step{do: feed(hb, cpuOf(0.5, 1)), advance: sec, want: healthy, noCode: codeCPU})),
		},
		{
			name: "one full core of 16: saturated, with cores as the evidence",
			steps: seq(
				repeat(2, step{do: feed(hb, cpuOf(1.0/16, 16)), advance: sec, want: healthy}),
				step{do: feed(hb, cpuOf(1.0/16, 16)), advance: sec, want: degraded, code: codeCPU, check: func(h *harness) {
					r := h.reason(codeCPU)
					assert.InDelta(h.t, 1, r.Value, 1e-9)
					assert.InDelta(h.t, 0.9, r.Threshold, 1e-9)
					assert.Equal(h.t, contract.CPU{MainCores: 1, LimitCPUs: 16}, h.snap("w1").CPU)
				}},
			),
		},
		{
			// A pod limited to 1 CPU on a 16-core node at 6 % of its core:
			// before, 16 x 0.06 = 0.96 cores, saturated.
			name:  "a pod limited to one CPU at 6 % of it: not saturated",
			steps: seq(repeat(6, step{do: feed(hb, cpuOf(0.06, 1)), advance: sec, want: healthy, noCode: codeCPU})),
		},
		{
			name: "below one core, saturation is a share of the limit: at its half-core quota it is saturated",
			steps: seq(
				repeat(2, step{do: feed(hb, cpuOf(0.95, 0.5)), advance: sec}),
				step{do: feed(hb, cpuOf(0.95, 0.5)), advance: sec, want: degraded, code: codeCPU, check: func(h *harness) {
					assert.InDelta(h.t, 0.45, h.reason(codeCPU).Threshold, 1e-9)
				}},
			),
		},
		{
			name:  "without the worker's CPU limit the rule does not judge",
			steps: seq(repeat(5, step{do: feed(hb, cpuOf(1, 0)), advance: sec, want: healthy, noCode: codeCPU})),
		},
	})
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
		r := h.reason(codeMissing)
		assert.Equal(t, t0, r.Since, "when the disagreement began")
		assert.InDelta(t, 1, r.Value, 0)
		assert.InDelta(t, 1, r.Threshold, 0, "a run count, not the grace in seconds")
	})
	t.Run("recent runs and kills by reason are in the snapshot", func(t *testing.T) {
		h := newHarness(t, testCfg())
		h.logs(workerLogs("worker",
			rec{worker: "w1", event: "workerwatch.run.started", run: "r1", ts: t0},
			rec{worker: "w1", event: "workerwatch.run.finished", run: "r1", ts: t0.Add(2 * sec), attrs: map[string]any{"cicd.pipeline.result": "success"}},
		))
		h.advance(sec)
		h.logs(workerLogs("worker",
			rec{worker: "w1", event: "workerwatch.run.started", run: "r2", ts: t0.Add(sec)},
			rec{worker: "w1", event: "workerwatch.run.killed", run: "r2", ts: t0.Add(4 * sec), attrs: map[string]any{"cicd.pipeline.result": "timeout", "workerwatch.kill.reason": "timeout"}},
		))
		h.eval()
		w := h.snap("w1")
		assert.Equal(t, []contract.RunRecord{
			{ID: "r2", Result: "timeout", KillReason: "timeout", Started: t0.Add(sec), Ended: t0.Add(4 * sec), DurationSeconds: 3},
			{ID: "r1", Result: "success", Started: t0, Ended: t0.Add(2 * sec), DurationSeconds: 2},
		}, w.Runs.Recent)
		assert.Equal(t, map[string]int64{"timeout": 1}, w.Runs.Kills)
		assert.True(t, w.Memory.SampledAt.IsZero(), "no memory sample: zero time")
	})
}

// Mapping keys the BullMQ preset needs: kill reasons from failure text, run
// spans by name prefix, pending from some points of a gauge; and snapshot
// records that cannot say "none" are malformed.
func TestMappingForOtherSystems(t *testing.T) {
	cfg := testCfg()
	cfg.Mapping.WorkerIDAttributes = []string{"bullmq.worker.name"}
	cfg.Mapping.FailureReasonAttribute = "bullmq.job.failed.reason"
	cfg.Mapping.KillReasonPatterns = []KillReasonPattern{
		{Pattern: `signal: SIGABRT$`, Reason: "memory_limit"},
		{Pattern: `signal: SIGKILL$`, Reason: "oom"},
	}
	cfg.Mapping.RunSpanNamePrefixes = []string{"process "}
	cfg.Metrics.Pending = "bullmq.queue.jobs"
	cfg.Metrics.PendingAttribute = "bullmq.queue.jobs.state"
	cfg.Metrics.PendingValues = []string{"waiting", "prioritized"}
	cfg.Scheduler.ServiceNames = []string{"bullmq-queue"}
	cfg.Scheduler.View = contract.ViewSnapshots
	require.NoError(t, cfg.Validate())
	h := newHarness(t, cfg)

	failed := func(run, reason string) plog.Logs {
		ld := plog.NewLogs()
		lr := ld.ResourceLogs().AppendEmpty().ScopeLogs().AppendEmpty().LogRecords().AppendEmpty()
		lr.SetEventName("workerwatch.run.finished")
		lr.Attributes().PutStr("bullmq.worker.name", "bw1")
		lr.Attributes().PutStr("cicd.pipeline.run.id", run)
		lr.Attributes().PutStr("cicd.pipeline.result", "failure")
		lr.Attributes().PutStr("bullmq.job.failed.reason", reason)
		return ld
	}
	h.logs(failed("j1", "Unexpected exit code: null signal: SIGABRT"))
	h.logs(failed("j2", "Unexpected exit code: null signal: SIGKILL"))
	h.logs(failed("j3", "job threw on purpose"))

	td := ptrace.NewTraces()
	sp := td.ResourceSpans().AppendEmpty().ScopeSpans().AppendEmpty().Spans().AppendEmpty()
	sp.SetName("process emails")
	sp.SetStartTimestamp(pcommon.NewTimestampFromTime(t0))
	sp.SetEndTimestamp(pcommon.NewTimestampFromTime(t0.Add(sec)))
	sp.Attributes().PutStr("bullmq.worker.name", "bw1")
	sp.Attributes().PutStr("cicd.pipeline.run.id", "j4")
	h.traces(td)

	md := pmetric.NewMetrics()
	rm := md.ResourceMetrics().AppendEmpty()
	rm.Resource().Attributes().PutStr("service.name", "bullmq-queue")
	dps := rm.ScopeMetrics().AppendEmpty().Metrics().AppendEmpty()
	dps.SetName("bullmq.queue.jobs")
	g := dps.SetEmptyGauge().DataPoints()
	for state, n := range map[string]int64{"waiting": 4, "prioritized": 1, "active": 7, "delayed": 9} {
		dp := g.AppendEmpty()
		dp.SetIntValue(n)
		dp.Attributes().PutStr("bullmq.queue.jobs.state", state)
	}
	h.metrics(md)

	// A snapshot without its runs attribute cannot say "none": malformed.
	bad := snapLogs("bullmq-queue", "bw1")
	bad.ResourceLogs().At(0).ScopeLogs().At(0).LogRecords().At(0).Attributes().Remove("workerwatch.scheduler.runs")
	h.logs(bad)

	h.eval()
	w := h.snap("bw1")
	assert.Equal(t, map[string]int64{"memory_limit": 1, "oom": 1}, w.Runs.Kills)
	assert.Contains(t, recentIDs(w.Runs.Recent), "j4", "a span named process <queue> is a run")
	h.p.mu.Lock()
	defer h.p.mu.Unlock()
	assert.Equal(t, int64(5), h.p.tracker.pending, "waiting + prioritized only")
	assert.Equal(t, int64(1), h.p.tracker.malformed)
}

func recentIDs(rs []contract.RunRecord) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.ID)
	}
	return out
}

// Counters and histograms are consistent across a restart with a
// checkpoint (docs/processor.md, "Emitted metrics"): before, kills and
// claims continued from the checkpoint while transitions and histograms
// started over from 0, each with the new start time.
func TestCumulativeAcrossRestart(t *testing.T) {
	store := &memStorage{}
	storageID := component.MustNewID("file_storage")
	cfg := testCfg()
	cfg.StorageID = &storageID
	cfg.Lost.After = time.Minute
	ctx := context.Background()
	hst := host{ext: map[component.ID]component.Component{storageID: store}}

	h1 := newHarness(t, cfg)
	pl1 := &pipeline{}
	require.NoError(t, h1.p.start(ctx, hst, pl1))
	started := h1.clock.Now()
	h1.logs(workerLogs("worker",
		rec{worker: "w1", event: "workerwatch.run.claimed", run: "r1", ts: t0},
		rec{worker: "w1", event: "workerwatch.run.started", run: "r1", ts: t0.Add(sec)},
		rec{worker: "w1", event: "workerwatch.run.killed", run: "r1", ts: t0.Add(3 * sec), attrs: map[string]any{"workerwatch.kill.reason": "timeout", "cicd.pipeline.result": "timeout"}},
	))
	// Its tree confirms it at once (admission.go): checkpointed whenever
	// the timer (driven by the fake clock too) evaluates.
	h1.metrics(treeMetrics("w1", 100, -1, 1))
	h1.advance(sec)
	h1.p.tick(ctx)
	require.Equal(t, healthy, h1.state("w1"))
	require.NoError(t, h1.p.shutdown(ctx, pl1))

	h2 := newHarness(t, cfg)
	h2.clock.Advance(time.Hour)
	// A new process starts an hour later (the harness's clock starts at t0).
	h2.p.startTime = h2.clock.Now().UnixNano()
	h2.p.tracker.start = h2.p.startTime
	pl2 := &pipeline{}
	require.NoError(t, h2.p.start(ctx, hst, pl2))
	defer func() { require.NoError(t, h2.p.shutdown(ctx, pl2)) }()
	h2.metrics(treeMetrics("w1", 100, -1, 1))
	h2.logs(workerLogs("worker",
		rec{worker: "w1", event: "workerwatch.run.started", run: "r2", ts: t0.Add(time.Hour)},
		rec{worker: "w1", event: "workerwatch.run.finished", run: "r2", ts: t0.Add(time.Hour + 2*sec), attrs: map[string]any{"cicd.pipeline.result": "success"}},
	))
	h2.eval()
	h2.p.mu.Lock()
	md := h2.p.tracker.buildMetrics(h2.p.startTime, h2.clock.Now().UnixNano())
	h2.p.mu.Unlock()
	byWorker := metricsByWorker(md)

	sum := func(m pmetric.Metric, attr, value string) (int64, pcommon.Timestamp) {
		dps := m.Sum().DataPoints()
		for i := 0; i < dps.Len(); i++ {
			if v, ok := dps.At(i).Attributes().Get(attr); ok && v.Str() == value {
				return dps.At(i).IntValue(), dps.At(i).StartTimestamp()
			}
		}
		return 0, 0
	}
	start := pcommon.NewTimestampFromTime(started)
	kills, killsStart := sum(byWorker["w1"][contract.MetricKills], contract.AttrKillReason, "timeout")
	assert.Equal(t, int64(1), kills, "kills continue")
	assert.Equal(t, start, killsStart)
	claims, claimsStart := sum(byWorker["w1"][contract.MetricClaims], contract.AttrSource, contract.SourceWorker)
	assert.Equal(t, int64(2), claims, "claims continue: r1 before the restart, r2 (its start is its claim) after")
	assert.Equal(t, start, claimsStart)
	trans, transStart := sum(byWorker["w1"][contract.MetricStateTransitions], contract.AttrState, "healthy")
	assert.Equal(t, int64(2), trans, "transitions continue: healthy before the restart and after it")
	assert.Equal(t, start, transStart, "from the first start")
	durations := byWorker[""][contract.MetricRunDuration].Histogram().DataPoints()
	var total uint64
	for i := 0; i < durations.Len(); i++ {
		total += durations.At(i).Count()
		assert.Equal(t, start, durations.At(i).StartTimestamp(), "histograms from the first start")
	}
	assert.Equal(t, uint64(2), total, "the run before the restart and the one after")
}

// openfn helper's finding: a restart longer than lost.after made idle
// workers lost at once (their restored last sign of life was old). Silence
// the processor did not witness counts from the restore.
func TestRestoredSilenceCountsFromTheRestore(t *testing.T) {
	store := &memStorage{}
	storageID := component.MustNewID("file_storage")
	cfg := testCfg()
	cfg.StorageID = &storageID
	ctx := context.Background()
	hst := host{ext: map[component.ID]component.Component{storageID: store}}
	h1 := newHarness(t, cfg)
	pl1 := &pipeline{}
	require.NoError(t, h1.p.start(ctx, hst, pl1))
	h1.metrics(treeMetrics("w1", 100, -1, 1))
	h1.advance(sec)
	h1.p.tick(ctx)
	require.NoError(t, h1.p.shutdown(ctx, pl1))

	// Down for longer than lost.after (5 s in the test config).
	h2 := newHarness(t, cfg)
	h2.clock.Advance(20 * sec)
	pl2 := &pipeline{}
	require.NoError(t, h2.p.start(ctx, hst, pl2))
	defer func() { require.NoError(t, h2.p.shutdown(ctx, pl2)) }()
	h2.eval()
	assert.Equal(t, unknown, h2.state("w1"), "not lost for silence nobody witnessed")
	h2.advance(6 * sec)
	h2.eval()
	assert.Equal(t, lost, h2.state("w1"), "lost after lost.after of silence since the restore")
}

// TestTruthTable walks docs/health-rules.md, "Which evidence makes which
// state", row by row: each case holds exactly its row's evidence and checks
// the state and the reasons listed (every rule that holds, worst first; a
// lost worker's only reason is its silence). Row 2 (restored evidence
// enough for unhealthy) is TestRestoreAfterRestart's w2.
func TestTruthTable(t *testing.T) {
	// The stalled rule on free capacity alone, within 3 s.
	stallFast := func(c *Config) { c.Stalled.After = 3 * sec; c.Stalled.RequirePending = false }
	// A sample of w1's tree: memory (1000 is the soft limit) and the main
	// process's share of its 4 CPUs (0.25 = one full core: saturated).
	sample := func(mem int64, cpu float64) func(*harness) {
		return both(hb, func(h *harness) { h.metrics(treeMetrics("w1", mem, cpu, 1)) })
	}
	codes := func(want ...string) func(*harness) {
		return func(h *harness) { assert.Equal(h.t, want, h.codes("w1")) }
	}
	runSteps(t, []stepCase{
		{
			name: "row 1: no sign of life for lost.after: lost, whatever else held",
			cfg:  stallFast,
			steps: seq(
				repeat(3, step{do: sample(1200, 0.25), advance: sec}),
				step{want: unhealthy},
				step{advance: 5 * sec, want: lost, check: codes(codeNoTelemetry)},
			),
		},
		{
			name: "row 3: a sign of life (a claims-only scheduler's claims) and nothing of its own: unknown, not lost",
			cfg:  func(c *Config) { stallFast(c); c.Scheduler.View = contract.ViewClaimsOnly },
			steps: seq(
				step{do: func(h *harness) { h.logs(sl("w1", "workerwatch.run.claimed", "r0")) }, advance: sec},
				repeat(8, step{do: func(h *harness) { h.logs(sl("w1", "workerwatch.run.claimed", fmt.Sprintf("r%d", autoRun.Add(1)))) }, advance: sec}),
				step{want: unknown, check: codes(codeNotReported)},
			),
		},
		{
			name: "row 4: a memory latch with the stalled rule and a saturated CPU: unhealthy, every reason listed worst first",
			cfg:  stallFast,
			steps: seq(
				repeat(2, step{do: sample(1200, 0.25), advance: sec}),
				step{do: sample(1200, 0.25), advance: sec, want: unhealthy, check: codes(codeMemory, codeNoClaim, codeCPU)},
			),
		},
		{
			name: "row 5: the stalled rule and a saturated CPU, no latch: stalled, the degraded reason listed",
			cfg:  stallFast,
			steps: seq(
				repeat(2, step{do: sample(100, 0.25), advance: sec}),
				step{do: sample(100, 0.25), advance: sec, want: stalled, check: codes(codeNoClaim, codeCPU)},
			),
		},
		{
			name: "row 6: a saturated CPU, no latch, nothing pending: degraded",
			steps: seq(
				repeat(2, step{do: sample(100, 0.25), advance: sec}),
				step{do: sample(100, 0.25), advance: sec, want: degraded, check: codes(codeCPU)},
			),
		},
		{
			name:  "row 7: nothing holds: healthy, no reason",
			steps: seq(repeat(6, step{do: sample(100, 0.01), advance: sec, want: healthy, check: codes()})),
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
	cfg.Scheduler.Sources = []SchedulerSource{{ServiceName: "lightning", View: contract.ViewClaimsOnly, WorkerIDAttributes: []string{"worker_name"}}}
	require.NoError(t, cfg.Validate())
	h := newHarness(t, cfg)
	lightning := func(worker, run string) plog.Logs {
		ld := plog.NewLogs()
		rl := ld.ResourceLogs().AppendEmpty()
		rl.Resource().Attributes().PutStr("service.name", "lightning")
		lr := rl.ScopeLogs().AppendEmpty().LogRecords().AppendEmpty()
		fillRec(lr, rec{event: "workerwatch.run.claimed", run: run})
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
	assert.Equal(t, []string{"cicd.worker.id=lw"}, lw.Sources.Telemetry.IDs)
	assert.Equal(t, []string{"worker_name=lw"}, lw.Sources.Scheduler.IDs, "lightning names it by worker_name")
	assert.Empty(t, lw.Drift.Missing, "claims only: the worker's end closed lightning's claim")
	assert.Empty(t, lw.Runs.Scheduler)
	assert.Equal(t, []string{"ew-r1"}, ew.Drift.Missing, "events: the scheduler's end never came")
	assert.Equal(t, degraded, h.state("ew"))
	assert.Equal(t, healthy, h.state("lw"))
}
