//go:build linux

package workerprocessreceiver

import (
	"context"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/metric/metricdata/metricdatatest"

	"github.com/workerwatch/workerwatch/receiver/workerprocessreceiver/internal/metadatatest"
)

// The receiver's internal telemetry after two scrapes of a real 7-process
// tree: processes read, none vanished, one histogram point per scrape, and
// the held files as the scraper counts them.
func TestInternalTelemetry(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns processes")
	}
	startRealTree(t, "tel")
	tt := componenttest.NewTelemetry()
	t.Cleanup(func() { require.NoError(t, tt.Shutdown(context.Background())) })
	cfg := realConfig()
	require.NoError(t, cfg.Validate())
	s, err := newWorkerScraper(metadatatest.NewSettings(tt), cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.shutdown(context.Background())) })

	for i := 0; i < 2; i++ {
		_, err = s.scrape(context.Background())
		require.NoError(t, err)
	}
	require.Positive(t, s.files.Open())
	metadatatest.AssertEqualWorkerProcessProcessesRead(t, tt, []metricdata.DataPoint[int64]{{Value: 14}}, metricdatatest.IgnoreTimestamp())
	metadatatest.AssertEqualWorkerProcessProcessesVanished(t, tt, []metricdata.DataPoint[int64]{{Value: 0}}, metricdatatest.IgnoreTimestamp())
	metadatatest.AssertEqualWorkerProcessOpenFiles(t, tt, []metricdata.DataPoint[int64]{{Value: int64(s.files.Open())}}, metricdatatest.IgnoreTimestamp())
	metadatatest.AssertEqualWorkerProcessDiscoveryScans(t, tt, []metricdata.DataPoint[int64]{{Value: 1}}, metricdatatest.IgnoreTimestamp())
	got, err := tt.GetMetric("otelcol_worker_process_scrape_duration")
	require.NoError(t, err)
	h := got.Data.(metricdata.Histogram[float64])
	require.Len(t, h.DataPoints, 1)
	require.Equal(t, uint64(2), h.DataPoints[0].Count)
}
