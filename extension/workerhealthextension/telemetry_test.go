package workerhealthextension

import (
	"context"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
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

// The endpoint label's values in docs/http-api.md are the router's routes,
// all of them and no others.
func TestEndpointLabelValuesDocumented(t *testing.T) {
	b, err := os.ReadFile(filepath.Join("..", "..", "docs", "http-api.md"))
	require.NoError(t, err)
	var row string
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "| `otelcol_worker_health_requests` |") {
			row = line
		}
	}
	require.NotEmpty(t, row, "the requests metric's row in docs/http-api.md")
	_, list, ok := strings.Cut(row, "(the route: ")
	require.True(t, ok, row)
	list, _, _ = strings.Cut(list, ";")
	var documented []string
	for _, v := range strings.Split(list, ", ") {
		documented = append(documented, strings.Trim(v, "`"))
	}
	routes := []string{routeWorker, routeHistory, routeWorkers, routeFleet, routeWorkerPg, routePage, routeLivez, routeReadyz, routeNotFound}
	assert.ElementsMatch(t, routes, documented)
	// Every route is what routeOf names some path.
	for _, p := range []string{"/health/workers/a", "/health/workers/a/history", "/health/workers", "/health/fleet", "/workers/a", "/", "/livez", "/readyz", "/nope"} {
		assert.Contains(t, routes, routeOf(p), p)
	}
}
