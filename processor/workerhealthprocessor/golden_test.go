package workerhealthprocessor

import (
	"bufio"
	"context"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/open-telemetry/opentelemetry-collector-contrib/pkg/golden"
	"github.com/open-telemetry/opentelemetry-collector-contrib/pkg/pdatatest/plogtest"
	"github.com/open-telemetry/opentelemetry-collector-contrib/pkg/pdatatest/pmetrictest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pmetric"
)

// update rewrites the golden files from what the processor emits now:
//
//	go test ./processor/workerhealthprocessor -run TestGolden -update
//
// then review the diff of testdata/golden.
var update = flag.Bool("update", false, "rewrite the golden files under testdata/golden")

// goldenCases feed a processor (fake clock, no timers) and evaluate; what the
// evaluations emit is compared with testdata/golden/<name>/expected_*.yaml.
var goldenCases = []struct {
	name string
	feed func(h *harness)
}{
	{
		// One worker through a whole run: every per-worker and fleet series,
		// the three histograms, and its state changes (unknown -> healthy ->
		// unhealthy on an oom kill that counts).
		name: "one_worker",
		feed: func(h *harness) {
			h.metrics(treeMetrics("w1", 10, -1, 1))
			h.metrics(pendingMetrics(2))
			h.logs(workerLogs("worker",
				rec{Worker: "w1", Event: "workerwatch.run.claimed", Run: "r1", TS: t0, Attrs: map[string]any{"workerwatch.worker.capacity": 2}},
				rec{Worker: "w1", Event: "workerwatch.run.started", Run: "r1", TS: t0.Add(time.Second)},
			))
			h.logs(schedLogs(rec{Worker: "w1", Event: "workerwatch.run.claimed", Run: "r1", TS: t0}))
			h.p.tick(context.Background())
			h.advance(time.Second)
			h.logs(workerLogs("worker", rec{
				Worker: "w1", Event: "workerwatch.run.killed", Run: "r1", TS: t0.Add(4 * time.Second),
				Attrs: map[string]any{"workerwatch.kill.reason": "oom", "cicd.pipeline.result": "error"},
			}))
			h.logs(schedLogs(rec{Worker: "w1", Event: "workerwatch.run.finished", Run: "r1", TS: t0.Add(4 * time.Second)}))
			h.traces(stageSpan("w1", "compile", 1e9, 3e9))
			h.p.tick(context.Background())
		},
	},
	{
		// Drift: a run only the scheduler holds (missing) and one only the
		// worker holds (orphaned), past the grace period, on a worker with
		// capacity 1 (over capacity); a second worker is lost.
		name: "drift_and_lost",
		feed: func(h *harness) {
			h.metrics(treeMetrics("w1", 10, -1, 1))
			h.metrics(treeMetrics("w2", 10, -1, 1))
			h.logs(workerLogs("worker",
				rec{Worker: "w1", Event: "workerwatch.run.claimed", Run: "a", Attrs: map[string]any{"workerwatch.worker.capacity": 1}},
				rec{Worker: "w1", Event: "workerwatch.run.claimed", Run: "b"},
			))
			h.logs(schedLogs(
				rec{Worker: "w1", Event: "workerwatch.run.claimed", Run: "a"},
				rec{Worker: "w1", Event: "workerwatch.run.claimed", Run: "c"},
			))
			h.p.tick(context.Background())
			for i := range 6 {
				h.advance(time.Second)
				h.metrics(treeMetrics("w1", 10, -1, 1))
				h.logs(schedLogs(rec{Worker: "w1", Event: "workerwatch.worker.heartbeat"}))
				if i < 5 {
					h.p.evaluate(context.Background()) // its state changes only
				} else {
					h.p.tick(context.Background())
				}
			}
		},
	},
}

// withSinks makes the harness's processor emit into two sinks, as if it
// were in one metrics and one logs pipeline.
func (h *harness) withSinks() (*consumertest.MetricsSink, *consumertest.LogsSink) {
	ms, ls := new(consumertest.MetricsSink), new(consumertest.LogsSink)
	h.p.mu.Lock()
	h.p.targets = append(h.p.targets, &pipeline{metrics: ms}, &pipeline{logs: ls})
	h.p.mu.Unlock()
	return ms, ls
}

func TestGolden(t *testing.T) {
	for _, tc := range goldenCases {
		t.Run(tc.name, func(t *testing.T) {
			h := newHarness(t, testCfg())
			ms, ls := h.withSinks()
			tc.feed(h)
			dir := filepath.Join("testdata", "golden", tc.name)
			require.NotEmpty(t, ms.AllMetrics())
			for i, md := range ms.AllMetrics() {
				file := filepath.Join(dir, "expected_metrics_"+string(rune('0'+i))+".yaml")
				if *update {
					// A copy: the writer sorts what it writes.
					c := pmetric.NewMetrics()
					md.CopyTo(c)
					require.NoError(t, os.MkdirAll(dir, 0o755))
					require.NoError(t, golden.WriteMetricsToFile(file, c, golden.SkipMetricTimestampNormalization()))
				}
				want, err := golden.ReadMetrics(file)
				require.NoError(t, err)
				require.NoError(t, pmetrictest.CompareMetrics(want, md,
					pmetrictest.IgnoreResourceMetricsOrder(), pmetrictest.IgnoreMetricDataPointsOrder()), file)
			}
			for i, ld := range ls.AllLogs() {
				file := filepath.Join(dir, "expected_logs_"+string(rune('0'+i))+".yaml")
				if *update {
					require.NoError(t, os.MkdirAll(dir, 0o755))
					require.NoError(t, golden.WriteLogsToFile(file, ld))
				}
				want, err := golden.ReadLogs(file)
				require.NoError(t, err)
				require.NoError(t, plogtest.CompareLogs(want, ld), file)
			}
			// No stale golden file of an emission that no longer happens.
			files, err := filepath.Glob(filepath.Join(dir, "expected_*.yaml"))
			require.NoError(t, err)
			assert.Len(t, files, len(ms.AllMetrics())+len(ls.AllLogs()), "golden files of %s", dir)
		})
	}
}

// TestEmittedMetricsTable checks docs/processor.md's "Emitted metrics" table
// against the golden files: every metric there is a row, with its type and
// unit, and every row is a metric the processor emits.
func TestEmittedMetricsTable(t *testing.T) {
	type row struct{ typ, unit string }
	emitted := map[string]row{}
	files, err := filepath.Glob(filepath.Join("testdata", "golden", "*", "expected_metrics_*.yaml"))
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range files {
		md, err := golden.ReadMetrics(f)
		require.NoError(t, err)
		rms := md.ResourceMetrics()
		for i := 0; i < rms.Len(); i++ {
			sms := rms.At(i).ScopeMetrics()
			for j := 0; j < sms.Len(); j++ {
				ms := sms.At(j).Metrics()
				for k := 0; k < ms.Len(); k++ {
					m := ms.At(k)
					typ := map[pmetric.MetricType]string{
						pmetric.MetricTypeGauge: "gauge", pmetric.MetricTypeSum: "sum", pmetric.MetricTypeHistogram: "histogram",
					}[m.Type()]
					if m.Type() == pmetric.MetricTypeSum && m.Sum().IsMonotonic() {
						typ = "sum, monotonic"
					}
					emitted[m.Name()] = row{typ, m.Unit()}
				}
			}
		}
	}

	doc, err := os.Open(filepath.Join("..", "..", "docs", "processor.md"))
	require.NoError(t, err)
	defer doc.Close()
	// | `name` | type | `unit` | attributes | meaning |
	line := regexp.MustCompile("^\\| `([a-z_.]+)` \\| ([a-z, ]+)(?: \\([a-z ]+\\))? \\| `([^`]+)` \\|")
	documented := map[string]row{}
	in := false
	sc := bufio.NewScanner(doc)
	for sc.Scan() {
		switch s := sc.Text(); {
		case strings.HasPrefix(s, "## "):
			in = s == "## Emitted metrics"
		case in:
			if m := line.FindStringSubmatch(s); m != nil {
				documented[m[1]] = row{m[2], m[3]}
			}
		}
	}
	require.NoError(t, sc.Err())
	assert.Equal(t, emitted, documented, "docs/processor.md, Emitted metrics: name, type and unit of every metric the goldens hold")
	names := make([]string, 0, len(emitted))
	for n := range emitted {
		names = append(names, n)
	}
	slices.Sort(names)
	t.Logf("emitted: %v", names)
}
