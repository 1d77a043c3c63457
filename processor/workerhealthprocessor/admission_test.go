package workerhealthprocessor

import (
	"context"
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/metric/metricdata/metricdatatest"

	"github.com/workerwatch/workerwatch/internal/contract"
	"github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/metadatatest"
	"github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/state"
)

func (h *harness) evidenceOf(id string) (state.Evidence, bool) {
	h.p.mu.Lock()
	defer h.p.mu.Unlock()
	w := h.p.tracker.workers[id]
	if w == nil {
		return 0, false
	}
	return w.Evidence, true
}

func (h *harness) counts() admissionCounts {
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
		rec{worker: "bogus-4", event: contract.EventHeartbeat},
		rec{worker: "bogus-4", event: contract.EventClaimed, run: "r1"},
	))
	assert.Equal(t, int64(1), h.counts().workersRefused[refusedMaxWorkers])
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
	assert.Equal(t, int64(2), h.counts().workersEvicted[state.EvidenceOnce])

	// All confirmed: a new confirmed worker is refused, none is pushed out.
	h.metrics(treeMetrics("real-2", 10, -1, 1))
	h.metrics(treeMetrics("real-3", 10, -1, 1))
	h.metrics(treeMetrics("real-4", 10, -1, 1))
	assert.Equal(t, int64(4), h.counts().workersEvicted[state.EvidenceOnce], "bogus-2 and bogus-3 made room too")
	assert.Equal(t, int64(2), h.counts().workersRefused[refusedMaxWorkers], "bogus-4, then real-4")
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
	assert.Equal(t, int64(1), h.counts().workersRefused[refusedMaxUnconfirmed], "c")
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
	assert.Equal(t, int64(2), h.counts().workersExpired[state.EvidenceOnce], "b and c: no record for lost.after")
}

// A worker seen once changes state silently and is not exported; seen
// again, its state so far is announced, once.
func TestSeenOnceIsAnnouncedWhenSeenAgain(t *testing.T) {
	h := newHarness(t, testCfg())
	h.logs(wl("w1", contract.EventHeartbeat, "", nil))
	assert.Empty(t, h.eval(), "no transition while seen once")
	h.p.mu.Lock()
	md := h.p.tracker.buildMetrics(t0.UnixNano(), h.clock.Now().UnixNano())
	h.p.mu.Unlock()
	assert.NotContains(t, metricsByWorker(md), "w1")
	assert.Equal(t, healthy, h.state("w1"), "judged all the same (the API shows it)")
	h.advance(sec)
	h.logs(wl("w1", contract.EventHeartbeat, "", nil))
	assert.Empty(t, h.eval(), "the next interval: still seen once")
	h.advance(sec)
	h.logs(wl("w1", contract.EventHeartbeat, "", nil))
	trs := h.eval()
	require.Len(t, trs, 1)
	assert.Equal(t, transition{worker: "w1", from: unknown, to: healthy, reasons: trs[0].reasons, at: h.clock.Now().UnixNano()}, trs[0])
	assert.Empty(t, h.eval())
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
	assert.Equal(t, int64(2), h.counts().runsRefused[refusedRunsPerWorker])
	for _, w := range []string{"t1", "t2"} {
		h.metrics(treeMetrics(w, 10, -1, 1))
		for r := range 12 {
			h.logs(wl(w, contract.EventClaimed, fmt.Sprintf("r%d", r), nil))
		}
	}
	h.p.mu.Lock()
	total := h.p.tracker.runCount
	n1, n2 := h.p.tracker.workers["t1"].Table.Len(), h.p.tracker.workers["t2"].Table.Len()
	h.p.mu.Unlock()
	assert.Equal(t, 20, total, "limits.max_runs")
	assert.Equal(t, 10, n1, "t1: its share, 20 runs over 2 workers")
	assert.Equal(t, 6, n2, "t2: what is left of the 20, below its share (8)")
	c := h.counts()
	assert.Positive(t, c.runsRefused[refusedRunsTotal])
	// t2 ends a run: its own ended run makes room at the total.
	h.logs(wl("t2", contract.EventFinished, "r0", nil))
	h.logs(wl("t2", contract.EventClaimed, "new", nil))
	h.p.mu.Lock()
	assert.True(t, hasRun(&h.p.tracker.workers["t2"].Table, "new"))
	assert.Equal(t, 20, h.p.tracker.runCount)
	h.p.mu.Unlock()
}

// A flood through the processor's own input path (as over OTLP): 100,000
// worker ids with 10 run ids each, records only, while real workers report.
// The state stays bounded and the real workers stay tracked and exported;
// a new real worker arrives in the middle of it and is tracked.
func TestFloodStaysBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("a flood of 100,000 ids")
	}
	cfg := testCfg()
	h := newHarness(t, cfg)
	report := func(n int) {
		for i := range n {
			h.metrics(treeMetrics(fmt.Sprintf("real-%d", i), 10, -1, 1))
		}
	}
	report(50)
	h.eval()
	base := heapAfterGC()
	for i := range 100_000 {
		recs := make([]rec, 10)
		for r := range recs {
			recs[r] = rec{worker: fmt.Sprintf("flood-%d", i), event: contract.EventClaimed, run: fmt.Sprintf("run-%d-%d", i, r)}
		}
		h.logs(workerLogs("flood", recs...))
		if i%10_000 == 0 {
			h.advance(sec)
			report(50)
			h.eval()
		}
		if i == 50_000 {
			h.metrics(treeMetrics("newcomer", 10, -1, 1))
		}
	}
	h.eval()
	grown := int64(heapAfterGC()) - int64(base)
	h.p.mu.Lock()
	defer h.p.mu.Unlock()
	tr := h.p.tracker
	n := tr.tracked()
	t.Logf("after the flood: %v workers by evidence, %d runs, heap +%.1f MiB, refused %v",
		n, tr.runCount, float64(grown)/(1<<20), tr.counts.workersRefused)
	assert.LessOrEqual(t, n[state.EvidenceOnce], int64(cfg.Limits.MaxUnconfirmedWorkers))
	assert.LessOrEqual(t, tr.runCount, cfg.Limits.MaxUnconfirmedWorkers*maxRunsSeenOnce)
	assert.Equal(t, int64(51), n[state.EvidenceConfirmed], "every real worker, the newcomer too")
	assert.Less(t, grown, int64(20<<20), "bounded: about a thousand workers seen once with 4 runs each")
	md := tr.buildMetrics(t0.UnixNano(), h.clock.Now().UnixNano())
	assert.Len(t, metricsByWorker(md), 52, "the real workers and the fleet resource: no flood id is exported")
	runtime.KeepAlive(h)
}

// Issue 14.1: incoming metrics of workers the processor does not track, has
// seen once, or names by a malformed id are dropped and counted, so the
// exporters downstream hold per-worker series for at most max_workers
// workers; metrics without a worker id, and the scheduler's, pass.
func TestUntrackedMetricsAreDropped(t *testing.T) {
	for _, drop := range []bool{true, false} {
		t.Run(fmt.Sprintf("drop_untracked_metrics=%v", drop), func(t *testing.T) {
			tt := componenttest.NewTelemetry()
			t.Cleanup(func() { require.NoError(t, tt.Shutdown(context.Background())) })
			cfg := testCfg()
			cfg.Limits.MaxWorkers = 3
			cfg.Limits.DropUntrackedMetrics = drop
			ctx := context.Background()
			sink := new(consumertest.MetricsSink)
			mp, err := NewFactory().CreateMetrics(ctx, metadatatest.NewSettings(tt), cfg, sink)
			require.NoError(t, err)
			require.NoError(t, mp.Start(ctx, componenttest.NewNopHost()))
			t.Cleanup(func() { require.NoError(t, mp.Shutdown(ctx)) })

			batch := func(mds ...pmetric.Metrics) pmetric.Metrics {
				md := pmetric.NewMetrics()
				for _, x := range mds {
					x.ResourceMetrics().MoveAndAppendTo(md.ResourceMetrics())
				}
				return md
			}
			noID := pmetric.NewMetrics()
			noID.ResourceMetrics().AppendEmpty().ScopeMetrics().AppendEmpty().Metrics().AppendEmpty().SetEmptyGauge().DataPoints().AppendEmpty()
			// Two confirmed workers (3 points each) pass; a worker seen once
			// (1), a malformed id (1) are dropped; the scheduler's and a
			// resource without a worker id pass.
			require.NoError(t, mp.ConsumeMetrics(ctx, batch(treeMetrics("tree", 10, -1, 1), treeMetrics("tree2", 10, -1, 1))))
			require.NoError(t, mp.ConsumeMetrics(ctx, batch(workerActive("once", 2), workerActive("bad\xff", 1), pendingMetrics(5), noID)))
			// At max_workers (3), all confirmed: a new worker is refused, its
			// metrics (3 points) dropped.
			require.NoError(t, mp.ConsumeMetrics(ctx, batch(treeMetrics("tree3", 10, -1, 1))))
			require.NoError(t, mp.ConsumeMetrics(ctx, batch(treeMetrics("full", 10, -1, 1), workerActive("tree", 1))))
			var got []string
			for _, md := range sink.AllMetrics() {
				for id := range metricsByWorker(md) {
					got = append(got, id)
				}
			}
			if !drop {
				assert.ElementsMatch(t, []string{"tree", "tree2", "once", "bad\xff", "", "tree3", "full", "tree"}, got, "everything passes")
				return
			}
			assert.ElementsMatch(t, []string{"tree", "tree2", "", "tree3", "tree"}, got)
			metadatatest.AssertEqualProcessorWorkerHealthDroppedMetricPoints(t, tt,
				[]metricdata.DataPoint[int64]{{Value: 5}}, metricdatatest.IgnoreTimestamp())

			// A batch with nothing left is not passed on at all.
			n := len(sink.AllMetrics())
			require.NoError(t, mp.ConsumeMetrics(ctx, workerActive("once-more", 1)))
			assert.Len(t, sink.AllMetrics(), n)
		})
	}
}

// workerActive is worker's own count of the runs it holds.
func workerActive(worker string, n int64) pmetric.Metrics {
	md := activeMetrics(n)
	md.ResourceMetrics().At(0).Resource().Attributes().PutStr(contract.AttrWorkerID, worker)
	return md
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
	assert.Len(t, h.p.tracker.workers, 2)
	// Issue 14.7: counted once per resource naming it (it was counted
	// twice: the resource's sign of life and its record).
	assert.Equal(t, int64(1), h.p.tracker.counts.workersRefused[refusedMaxWorkers], "c, once")
	assert.Equal(t, int64(1), h.p.tracker.counts.runsRefused[refusedRunsPerWorker])
	assert.True(t, hasRun(&h.p.tracker.workers["a"].Table, "r5"))
	h.p.mu.Unlock()

	// Workers are forgotten after the TTL.
	h.advance(2 * time.Minute)
	h.eval()
	h.p.mu.Lock()
	assert.Empty(t, h.p.tracker.workers)
	assert.Equal(t, int64(2), h.p.tracker.counts.workersExpired[state.EvidenceOnce])
	h.p.mu.Unlock()
}
