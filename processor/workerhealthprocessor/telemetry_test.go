package workerhealthprocessor

import (
	"context"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/metric/metricdata/metricdatatest"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/workerwatch/workerwatch/internal/contract"
	"github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/metadatatest"
)

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
		h.metrics(tree{Worker: "pod-7", Roles: map[string]int64{"main": 10}, Present: 1, OOM: -1}.Metrics())
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
