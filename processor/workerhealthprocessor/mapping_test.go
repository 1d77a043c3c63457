package workerhealthprocessor

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/confmap/confmaptest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/metric/metricdata/metricdatatest"

	"github.com/workerwatch/workerwatch/internal/contract"
	"github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/mapping"
	"github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/metadatatest"
	"github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/state"
)

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

// Malformed records are counted and skipped; the rest of the batch applies
// and the data passes through unchanged.
func TestMalformedRecords(t *testing.T) {
	h := newHarness(t, testCfg())
	huge := strings.Repeat("x", 10_000)
	ld := workerLogs("worker",
		rec{Worker: "w1", Event: "workerwatch.run.claimed"},                                                      // no run id
		rec{Worker: "w1", Event: "workerwatch.run.claimed", Attrs: map[string]any{"cicd.pipeline.run.id": 42}},   // wrong type
		rec{Worker: "w1", Event: "workerwatch.run.claimed", Attrs: map[string]any{"cicd.pipeline.run.id": huge}}, // huge
		rec{Worker: "w1", Event: "workerwatch.run.claimed", Run: "ok"},
		rec{Worker: "w1", Event: "not.a.lifecycle.event"},
	)
	// A resource whose worker id has the wrong type.
	bad := ld.ResourceLogs().AppendEmpty()
	bad.Resource().Attributes().PutInt("cicd.worker.id", 7)
	bad.ScopeLogs().AppendEmpty().LogRecords().AppendEmpty().SetEventName("workerwatch.run.claimed")
	// A scheduler record without a worker id.
	sch := schedLogs(rec{Worker: "w1", Event: "workerwatch.run.claimed", Run: "s1"})
	sch.ResourceLogs().At(0).ScopeLogs().At(0).LogRecords().At(0).Attributes().Remove("cicd.worker.id")
	sch.ResourceLogs().MoveAndAppendTo(ld.ResourceLogs())

	before := ld.ResourceLogs().Len()
	out, err := h.p.processLogs(context.Background(), ld)
	require.NoError(t, err)
	assert.Equal(t, before, out.ResourceLogs().Len(), "passes through unchanged")

	// Metrics with NaN and negative values, a span run without a run id.
	md := treeMetrics("w1", -5, -1, 1)
	h.metrics(md)
	td := ptrace.NewTraces()
	rs := td.ResourceSpans().AppendEmpty()
	rs.Resource().Attributes().PutStr("cicd.worker.id", "w1")
	rs.ScopeSpans().AppendEmpty().Spans().AppendEmpty().SetName("run")
	h.traces(td)

	h.p.mu.Lock()
	malformed := h.p.tracker.TakeCounts().Malformed
	w := h.p.tracker.Worker("w1")
	okRun := hasRun(&w.Table, "ok")
	h.p.mu.Unlock()
	assert.Equal(t, int64(6), malformed)
	assert.True(t, okRun, "the valid record after the malformed ones applied")
	assert.Equal(t, 1, w.Table.Len())
	assert.True(t, h.snap("w1").Memory.SampledAt.IsZero(), "a negative memory sample is ignored")
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
	assert.Contains(t, recentIDs(w.Runs.Recent.Records()), "j4", "a span named process <queue> is a run")
	h.p.mu.Lock()
	defer h.p.mu.Unlock()
	assert.Equal(t, int64(5), h.p.tracker.Fleet(h.clock.Now().UnixNano()).Pending, "waiting + prioritized only")
	assert.Equal(t, int64(1), h.p.tracker.TakeCounts().Malformed)
}

func recentIDs(rs []contract.RunRecord) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.ID)
	}
	return out
}

// OpenFn's events, as its worker would send them, through the example mapping.
func TestOpenFnMapping(t *testing.T) {
	cfg := loadOpenFn(t)
	cfg.Memory.SoftLimitBytes = 1000
	h := newHarness(t, cfg)
	send := func(event, run string, attrs map[string]any) {
		ld := workerLogs("ws-worker", rec{Worker: "", Event: event, Run: "", Attrs: attrs})
		lr := ld.ResourceLogs().At(0).ScopeLogs().At(0).LogRecords().At(0)
		lr.Attributes().PutStr("worker_name", "openfn-1")
		if run != "" {
			lr.Attributes().PutStr("run_id", run)
		}
		lr.SetTimestamp(pcommon.NewTimestampFromTime(h.clock.Now()))
		ld.ResourceLogs().At(0).Resource().Attributes().Remove("cicd.worker.id")
		h.logs(ld)
	}
	send("run:start", "a", nil)
	h.advance(2 * time.Second)
	send("run:complete", "a", map[string]any{"reason": "success"})
	for i, et := range []string{"OOMError", "TimeoutError", "OOMError"} {
		run := string(rune('b' + i))
		send("run:start", run, nil)
		send("run:complete", run, map[string]any{"reason": "kill", "error_type": et})
	}
	h.eval()
	w := h.worker("openfn-1")
	require.NotNil(t, w)
	assert.Equal(t, int64(2), w.KillsByReason()[state.KillIndex("memory_limit")])
	assert.Equal(t, int64(1), w.KillsByReason()[state.KillIndex("timeout")])
	assert.Equal(t, healthy, w.State, "runs killed by their own limits are the runs' fault")
	assert.NotContains(t, h.codes("openfn-1"), state.CodeKills)
	for _, run := range []string{"e", "f", "g"} {
		send("run:start", run, nil)
		send("run:complete", run, map[string]any{"reason": "crash", "error_type": "ExitError"})
	}
	h.eval()
	assert.Equal(t, int64(3), w.KillsByReason()[state.KillIndex("crash")])
	assert.Equal(t, unhealthy, w.State, "3 crashes within the window are the worker's")
	assert.Contains(t, h.codes("openfn-1"), state.CodeKills)
	assert.Equal(t, int64(7), w.Claims[mapping.SideWorker], "run:start counts as the claim")
	h.p.mu.Lock()
	defer h.p.mu.Unlock()
	assert.Equal(t, uint64(1), h.p.tracker.Hists().ByResult(state.ResultIndex("success")).Count())
	assert.Equal(t, uint64(6), h.p.tracker.Hists().ByResult(state.ResultIndex("error")).Count())
}

func loadOpenFn(t *testing.T) *Config {
	cm, err := confmaptest.LoadConf(filepath.Join("testdata", "openfn.yaml"))
	require.NoError(t, err)
	sub, err := cm.Sub("worker_health/openfn")
	require.NoError(t, err)
	cfg := testCfg()
	require.NoError(t, sub.Unmarshal(cfg))
	return cfg
}
