package workerhealthextension

import (
	"context"
	"net/http"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/metric/metricdata/metricdatatest"

	"github.com/workerwatch/workerwatch/extension/workerhealthextension/internal/metadatatest"
	"github.com/workerwatch/workerwatch/internal/contract"
)

func TestTelemetry(t *testing.T) {
	tel := componenttest.NewTelemetry()
	t.Cleanup(func() { require.NoError(t, tel.Shutdown(context.Background())) })
	cfg := createDefaultConfig().(*Config)
	cfg.NetAddr.Endpoint = "127.0.0.1:0"
	wh, err := newWorkerHealth(metadatatest.NewSettings(tel), cfg)
	require.NoError(t, err)
	base := startTestExt(t, wh)

	publish(wh, snapshot(testSource, t0, worker("a", contract.Healthy), worker("b", contract.Lost)))
	for _, p := range []string{"/health/workers/a", "/health/workers/a", "/health/workers/b", "/health/workers/zz", "/nope"} {
		get(t, base+p)
	}

	metadatatest.AssertEqualWorkerHealthPublishes(t, tel, []metricdata.DataPoint[int64]{{Value: 1}},
		metricdatatest.IgnoreTimestamp(), metricdatatest.IgnoreExemplars())
	dp := func(route string, code, n int) metricdata.DataPoint[int64] {
		return metricdata.DataPoint[int64]{Value: int64(n), Attributes: attribute.NewSet(
			attribute.String("endpoint", route), attribute.Int("http.response.status_code", code))}
	}
	metadatatest.AssertEqualWorkerHealthRequests(t, tel, []metricdata.DataPoint[int64]{
		dp(routeWorker, http.StatusOK, 2),
		dp(routeWorker, http.StatusServiceUnavailable, 1),
		dp(routeWorker, http.StatusNotFound, 1),
		dp(routeNotFound, http.StatusNotFound, 1),
	}, metricdatatest.IgnoreTimestamp(), metricdatatest.IgnoreExemplars())
}
