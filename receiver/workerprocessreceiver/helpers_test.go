//go:build linux

package workerprocessreceiver

import (
	"context"
	"flag"
	"fmt"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"

	"github.com/open-telemetry/opentelemetry-collector-contrib/pkg/golden"
	"github.com/open-telemetry/opentelemetry-collector-contrib/pkg/pdatatest/pmetrictest"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/receiver/receivertest"

	"github.com/workerwatch/workerwatch/receiver/workerprocessreceiver/internal/metadata"
)

var update = flag.Bool("update", false, "rewrite golden files")

// metricsText renders metrics as sorted lines "resource | metric unit type |
// attributes = value", without timestamps: what the security tests search.
func metricsText(md pmetric.Metrics) string {
	var lines []string
	attrs := func(m pcommon.Map) string {
		var kv []string
		m.Range(func(k string, v pcommon.Value) bool {
			kv = append(kv, k+"="+v.AsString())
			return true
		})
		sort.Strings(kv)
		return strings.Join(kv, ",")
	}
	for i := 0; i < md.ResourceMetrics().Len(); i++ {
		rm := md.ResourceMetrics().At(i)
		res := attrs(rm.Resource().Attributes())
		for j := 0; j < rm.ScopeMetrics().Len(); j++ {
			ms := rm.ScopeMetrics().At(j).Metrics()
			for k := 0; k < ms.Len(); k++ {
				m := ms.At(k)
				var dps pmetric.NumberDataPointSlice
				kind := m.Type().String()
				switch m.Type() {
				case pmetric.MetricTypeGauge:
					dps = m.Gauge().DataPoints()
				case pmetric.MetricTypeSum:
					dps = m.Sum().DataPoints()
					kind = fmt.Sprintf("Sum(monotonic=%v,%s)", m.Sum().IsMonotonic(), m.Sum().AggregationTemporality())
				}
				for d := 0; d < dps.Len(); d++ {
					dp := dps.At(d)
					var v string
					if dp.ValueType() == pmetric.NumberDataPointValueTypeDouble {
						v = fmt.Sprintf("%.4f", dp.DoubleValue())
					} else {
						v = strconv.FormatInt(dp.IntValue(), 10)
					}
					lines = append(lines, fmt.Sprintf("%s | %s %s %s | %s = %s", res, m.Name(), m.Unit(), kind, attrs(dp.Attributes()), v))
				}
			}
		}
	}
	sort.Strings(lines)
	return strings.Join(lines, "\n") + "\n"
}

// compareGolden compares md with testdata/golden/<name>.yaml (contrib
// pkg/golden); -update rewrites the file from md, to be reviewed as a diff.
// The fixture's scrapes are deterministic (its /proc is fixed, the clock
// injected), so every value is compared; the timestamps and the order of
// resources, metrics and points are not part of what the receiver promises.
func compareGolden(t *testing.T, name string, md pmetric.Metrics) {
	t.Helper()
	path := filepath.Join("testdata", "golden", name+".yaml")
	if *update {
		require.NoError(t, golden.WriteMetricsToFile(path, md))
	}
	want, err := golden.ReadMetrics(path)
	require.NoError(t, err)
	require.NoError(t, pmetrictest.CompareMetrics(want, md,
		pmetrictest.IgnoreStartTimestamp(),
		pmetrictest.IgnoreTimestamp(),
		pmetrictest.IgnoreResourceMetricsOrder(),
		pmetrictest.IgnoreMetricsOrder(),
		pmetrictest.IgnoreMetricDataPointsOrder(),
	))
}

// values returns the values of one metric's data points for a worker that
// carry every attribute in want, in order.
func values(md pmetric.Metrics, workerID, metric string, want map[string]string) []float64 {
	var out []float64
	for i := 0; i < md.ResourceMetrics().Len(); i++ {
		rm := md.ResourceMetrics().At(i)
		id, _ := rm.Resource().Attributes().Get("cicd.worker.id")
		if id.AsString() != workerID {
			continue
		}
		ms := rm.ScopeMetrics().At(0).Metrics()
		for k := 0; k < ms.Len(); k++ {
			m := ms.At(k)
			if m.Name() != metric {
				continue
			}
			var dps pmetric.NumberDataPointSlice
			if m.Type() == pmetric.MetricTypeGauge {
				dps = m.Gauge().DataPoints()
			} else {
				dps = m.Sum().DataPoints()
			}
		next:
			for d := 0; d < dps.Len(); d++ {
				dp := dps.At(d)
				for ak, av := range want {
					v, ok := dp.Attributes().Get(ak)
					if !ok || v.AsString() != av {
						continue next
					}
				}
				if dp.ValueType() == pmetric.NumberDataPointValueTypeDouble {
					out = append(out, dp.DoubleValue())
				} else {
					out = append(out, float64(dp.IntValue()))
				}
			}
		}
	}
	return out
}

// findValue returns the value of the first matching data point.
func findValue(md pmetric.Metrics, workerID, metric string, want map[string]string) (float64, bool) {
	if v := values(md, workerID, metric, want); len(v) > 0 {
		return v[0], true
	}
	return 0, false
}

// sumValues sums one metric of a worker over all data points matching the filter.
func sumValues(md pmetric.Metrics, workerID, metric string, want map[string]string) float64 {
	var total float64
	for _, v := range values(md, workerID, metric, want) {
		total += v
	}
	return total
}

func newTestScraper(t testing.TB, cfg *Config) *workerScraper {
	t.Helper()
	require.NoError(t, cfg.Validate())
	s, err := newWorkerScraper(receivertest.NewNopSettings(metadata.Type), cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, s.shutdown(context.Background())) })
	return s
}
