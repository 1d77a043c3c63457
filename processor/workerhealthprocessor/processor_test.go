package workerhealthprocessor

import (
	"context"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/processor/processortest"

	"github.com/workerwatch/workerwatch/internal/contract"
	"github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/metadata"
)

// One instance behind three pipelines: shared state, emission into the
// metrics and logs pipelines only, the timer stopped by the first Shutdown,
// the instance dropped by the last.
func TestSharedInstanceLifecycle(t *testing.T) {
	clock := clockwork.NewFakeClockAt(t0)
	f := newFactory(withClock(clock))
	cfg := testCfg()
	healthID := component.MustNewID("worker_health")
	cfg.HealthExtension = &healthID
	set := processortest.NewNopSettings(metadata.Type)
	ctx := context.Background()
	tSink, mSink, lSink := new(consumertest.TracesSink), new(consumertest.MetricsSink), new(consumertest.LogsSink)
	tp, err := f.CreateTraces(ctx, set, cfg, tSink)
	require.NoError(t, err)
	mp, err := f.CreateMetrics(ctx, set, cfg, mSink)
	require.NoError(t, err)
	lp, err := f.CreateLogs(ctx, set, cfg, lSink)
	require.NoError(t, err)

	sub := &subscriber{}
	h := host{ext: map[component.ID]component.Component{healthID: sub}}
	for _, c := range []component.Component{tp, mp, lp} {
		require.NoError(t, c.Start(ctx, h))
	}
	require.NotNil(t, sub.last(), "published at start")

	// Spans in the traces pipeline change the state the others emit.
	td := ptrace.NewTraces()
	rs := td.ResourceSpans().AppendEmpty()
	rs.Resource().Attributes().PutStr("cicd.worker.id", "w1")
	sp := rs.ScopeSpans().AppendEmpty().Spans().AppendEmpty()
	sp.SetName("http.request")
	require.NoError(t, tp.ConsumeTraces(ctx, td))
	require.Equal(t, 1, tSink.SpanCount(), "passed through")
	require.NoError(t, mp.ConsumeMetrics(ctx, treeMetrics("w2", 10, -1, 1)))
	require.Len(t, mSink.AllMetrics(), 1, "passed through")

	require.NoError(t, clock.BlockUntilContext(ctx, 1))
	clock.Advance(cfg.EmitInterval)
	require.Eventually(t, func() bool { return len(lSink.AllLogs()) == 1 && len(mSink.AllMetrics()) == 2 }, 5*time.Second, 5*time.Millisecond)
	assert.Equal(t, 1, lSink.LogRecordCount(), "w2's first transition; w1 was seen once (by its spans)")
	assert.NotContains(t, metricsByWorker(mSink.AllMetrics()[1]), "w1", "a worker seen once is not exported")

	// w1's spans again, two intervals later: it is announced and exported.
	clock.Advance(cfg.EmitInterval)
	require.Eventually(t, func() bool { return len(mSink.AllMetrics()) == 3 }, 5*time.Second, 5*time.Millisecond)
	require.NoError(t, tp.ConsumeTraces(ctx, td))
	clock.Advance(cfg.EmitInterval)
	require.Eventually(t, func() bool { return len(lSink.AllLogs()) == 2 && len(mSink.AllMetrics()) == 4 }, 5*time.Second, 5*time.Millisecond)
	assert.Equal(t, 2, lSink.LogRecordCount(), "w1's state announced once seen again")
	assert.Equal(t, 2, tSink.SpanCount(), "nothing emitted into traces")
	// Each worker's series in the emission after its first judgement: w2's
	// in the first, w1's in the third; w2, unchanged since, is not sent
	// again within resend_interval.
	byWorker := metricsByWorker(mSink.AllMetrics()[3])
	for i, w := range map[int]string{1: "w2", 3: "w1"} {
		byWorker := metricsByWorker(mSink.AllMetrics()[i])
		for _, n := range []string{contract.MetricState, contract.MetricStateTransitions, contract.MetricRunsHeld, contract.MetricClaims} {
			assert.Contains(t, byWorker[w], n, "%s on the resource of %s", n, w)
		}
		assert.NotContains(t, byWorker[w], contract.MetricDrift, "%s never had drift: no drift gauge (docs/telemetry.md)", w)
	}
	assert.NotContains(t, byWorker, "w2", "unchanged since the first emission")
	for _, n := range []string{contract.MetricFleetWorkers, contract.MetricFleetIdle} {
		assert.Contains(t, byWorker[""], n, "%s on the fleet resource", n)
	}
	require.Eventually(t, func() bool {
		s := sub.last()
		return len(s.Workers) == 2 && s.Workers[0].State == contract.Healthy
	}, 5*time.Second, 5*time.Millisecond)

	// The first Shutdown stops the timer: the collector shuts every
	// pipeline down together, and the traces pipeline's exporter may already
	// be gone while the metrics pipeline's wrapper still runs.
	require.NoError(t, tp.Shutdown(ctx))
	require.NoError(t, clock.BlockUntilContext(ctx, 0))
	require.NoError(t, mp.Shutdown(ctx))
	// The last one drops the instance: a new pipeline build with the same
	// config gets a fresh one, which publishes at start and knows none of the
	// old instance's workers.
	require.NoError(t, lp.Shutdown(ctx))
	mp2, err := f.CreateMetrics(ctx, set, cfg, consumertest.NewNop())
	require.NoError(t, err)
	sub2 := &subscriber{}
	h.ext[healthID] = sub2
	require.NoError(t, mp2.Start(ctx, h))
	require.NotNil(t, sub2.last())
	assert.Empty(t, sub2.last().Workers, "a fresh instance")
	require.NoError(t, mp2.Shutdown(ctx))
}

func TestDerivedMetricsShape(t *testing.T) {
	h := newHarness(t, testCfg())
	h.metrics(treeMetrics("w1", 10, -1, 1)) // its tree: confirmed, exported
	h.logs(workerLogs("worker",
		rec{Worker: "w1", Event: "workerwatch.run.claimed", Run: "r1", TS: t0},
		rec{Worker: "w1", Event: "workerwatch.run.started", Run: "r1", TS: t0.Add(time.Second)},
		rec{
			Worker: "w1", Event: "workerwatch.run.killed", Run: "r1", TS: t0.Add(4 * time.Second),
			Attrs: map[string]any{"workerwatch.kill.reason": "oom", "cicd.pipeline.result": "error"},
		},
	))
	h.traces(stageSpan("w1", "compile", 1e9, 3e9))
	h.eval()
	h.p.mu.Lock()
	md := buildMetrics(h.p.tracker, t0.UnixNano(), h.clock.Now().UnixNano())
	h.p.mu.Unlock()
	byWorker := metricsByWorker(md)
	byName := byWorker["w1"]
	for n, m := range byWorker[""] {
		byName[n] = m
	}
	st := byName[contract.MetricState].Gauge().DataPoints()
	require.Equal(t, len(contract.AllStates), st.Len())
	ones := 0
	for i := 0; i < st.Len(); i++ {
		ones += int(st.At(i).IntValue())
	}
	assert.Equal(t, 1, ones, "exactly one state is current")
	k := byName[contract.MetricKills].Sum().DataPoints().At(0)
	v, _ := k.Attributes().Get(contract.AttrKillReason)
	assert.Equal(t, "oom", v.Str())
	d := byName[contract.MetricRunDuration].Histogram().DataPoints().At(0)
	assert.Equal(t, uint64(1), d.Count())
	assert.InDelta(t, 3.0, d.Sum(), 1e-9)
	assert.Equal(t, uint64(1), byName[contract.MetricStageDuration].Histogram().DataPoints().At(0).Count())
	assert.Equal(t, uint64(1), byName[contract.MetricClaimToStart].Histogram().DataPoints().At(0).Count())
}
