package workerhealthprocessor

import (
	"context"
	"fmt"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/open-telemetry/opentelemetry-collector-contrib/connector/spanmetricsconnector"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/connector/connectortest"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/processor/processorhelper"
	"go.opentelemetry.io/collector/processor/processortest"

	"github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/metadata"
	"github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/state"
)

const (
	benchWorkers        = 10
	benchSpansPerWorker = 100
)

// benchTraces: benchWorkers resources of benchSpansPerWorker spans each.
// lifecycle=false: ordinary spans (http requests) of worker processes;
// lifecycle=true: every span is a finished run with its id and result.
func benchTraces(lifecycle bool) ptrace.Traces {
	td := ptrace.NewTraces()
	now := time.Now()
	for w := 0; w < benchWorkers; w++ {
		rs := td.ResourceSpans().AppendEmpty()
		rs.Resource().Attributes().PutStr("service.name", "worker")
		rs.Resource().Attributes().PutStr("cicd.worker.id", fmt.Sprintf("worker-%d", w))
		spans := rs.ScopeSpans().AppendEmpty().Spans()
		for i := 0; i < benchSpansPerWorker; i++ {
			sp := spans.AppendEmpty()
			sp.SetTraceID(pcommon.TraceID{byte(w), byte(i), 1})
			sp.SetSpanID(pcommon.SpanID{byte(w), byte(i), 2})
			sp.SetKind(ptrace.SpanKindInternal)
			sp.SetStartTimestamp(pcommon.NewTimestampFromTime(now))
			sp.SetEndTimestamp(pcommon.NewTimestampFromTime(now.Add(time.Duration(i) * time.Millisecond)))
			if lifecycle {
				sp.SetName("run")
				sp.Attributes().PutStr("cicd.pipeline.run.id", fmt.Sprintf("run-%d-%d", w, i))
				sp.Attributes().PutStr("cicd.pipeline.result", "success")
			} else {
				sp.SetName("http.request")
				sp.Attributes().PutStr("http.request.method", "GET")
				sp.Attributes().PutStr("url.path", "/api/run")
			}
		}
	}
	return td
}

// runIDs returns the run id attribute values of a batch, to rename in place.
func runIDs(td ptrace.Traces) []pcommon.Value {
	var ids []pcommon.Value
	for i := 0; i < td.ResourceSpans().Len(); i++ {
		spans := td.ResourceSpans().At(i).ScopeSpans().At(0).Spans()
		for j := 0; j < spans.Len(); j++ {
			if v, ok := spans.At(j).Attributes().Get("cicd.pipeline.run.id"); ok {
				ids = append(ids, v)
			}
		}
	}
	return ids
}

// renameRuns gives every run of the batch an id no earlier batch used.
func renameRuns(ids []pcommon.Value, batch int) {
	for k, v := range ids {
		v.SetStr("run-" + strconv.Itoa(batch) + "-" + strconv.Itoa(k))
	}
}

// newBenchProcessor is the processor behind its processorhelper wrapper, as
// in a pipeline, with the benchmark's workers confirmed by a tree sample
// each (a fleet's steady state: not workers seen once, internal/tracker/admission.go).
func newBenchProcessor(b *testing.B) consumer.Traces {
	cfg := createDefaultConfig().(*Config)
	set := processortest.NewNopSettings(metadata.Type)
	f := &factory{instances: map[*Config]*healthProcessor{}}
	p, err := f.get(set, cfg)
	require.NoError(b, err)
	tp, err := processorhelper.NewTraces(context.Background(), set, cfg, consumertest.NewNop(), p.processTraces, lifecycle(p, &pipeline{}, false)...)
	require.NoError(b, err)
	require.NoError(b, tp.Start(context.Background(), componenttest.NewNopHost()))
	b.Cleanup(func() { require.NoError(b, tp.Shutdown(context.Background())) })
	for w := 0; w < benchWorkers; w++ {
		_, err := p.processMetrics(context.Background(), treeMetrics(fmt.Sprintf("worker-%d", w), 1<<20, 0.1, 1))
		require.NoError(b, err)
	}
	return tp
}

func newBenchSpanmetrics(b *testing.B) consumer.Traces {
	f := spanmetricsconnector.NewFactory()
	c, err := f.CreateTracesToMetrics(context.Background(), connectortest.NewNopSettings(f.Type()), f.CreateDefaultConfig(), consumertest.NewNop())
	require.NoError(b, err)
	require.NoError(b, c.Start(context.Background(), componenttest.NewNopHost()))
	b.Cleanup(func() { require.NoError(b, c.Shutdown(context.Background())) })
	return c
}

// BenchmarkSpans compares, side by side on the same batches, the processor
// against the contrib spanmetrics connector. ns/span is the figure to read.
//
//	go test -run '^$' -bench BenchmarkSpans -benchmem ./processor/workerhealthprocessor/
func BenchmarkSpans(b *testing.B) {
	for _, kind := range []struct {
		name      string
		lifecycle bool
	}{{"passthrough", false}, {"lifecycle", true}} {
		td := benchTraces(kind.lifecycle)
		spans := td.SpanCount()
		for _, impl := range []struct {
			name string
			make func(*testing.B) consumer.Traces
		}{{"worker_health", newBenchProcessor}, {"spanmetrics", newBenchSpanmetrics}} {
			b.Run(kind.name+"/"+impl.name, func(b *testing.B) {
				c := impl.make(b)
				ctx := context.Background()
				ids := runIDs(td)
				b.ReportAllocs()
				b.ResetTimer()
				for i := 0; i < b.N; i++ {
					if len(ids) > 0 {
						// Every batch is new runs: the same ids again would
						// measure only duplicate handling. Renaming is not
						// part of what is measured.
						b.StopTimer()
						renameRuns(ids, i)
						b.StartTimer()
					}
					if err := c.ConsumeTraces(ctx, td); err != nil {
						b.Fatal(err)
					}
				}
				b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N*spans), "ns/span")
			})
		}
	}
}

// heapAfterGC is the live heap.
func heapAfterGC() uint64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// TestStateSize measures the state kept per worker (100,000 workers, each
// with a memory sample, a CPU sample and a heartbeat) and per tracked run
// (held on both sides). Goals: 2 KiB per worker, 256 B per run.
func TestStateSize(t *testing.T) {
	if testing.Short() {
		t.Skip("allocates ~100k workers")
	}
	const workers = 100_000
	const runsPerWorker = 4
	cfg := createDefaultConfig().(*Config)
	cfg.Limits.MaxWorkers = workers
	cfg.Memory.SoftLimitBytes = 1 << 30
	h := newHarness(t, cfg)
	ids := make([]string, workers)
	for i := range ids {
		ids[i] = fmt.Sprintf("worker-%06d", i)
	}
	base := heapAfterGC()
	for _, id := range ids {
		h.metrics(treeMetrics(id, 1<<20, 0.1, 1))
		h.logs(wl(id, "workerwatch.worker.heartbeat", "", map[string]any{"workerwatch.worker.capacity": 5}))
	}
	h.eval() // reasons, drift slices: the steady state
	withWorkers := heapAfterGC()
	for i, id := range ids[:workers/10] {
		for r := 0; r < runsPerWorker; r++ {
			run := fmt.Sprintf("run-%08d-%d", i, r)
			h.logs(sl(id, "workerwatch.run.claimed", run))
			h.logs(wl(id, "workerwatch.run.claimed", run, nil))
		}
	}
	withRuns := heapAfterGC()
	// Cross-check: drop every run table and see what is freed.
	h.p.mu.Lock()
	for _, w := range h.p.tracker.ByID() {
		w.Table, w.Order = state.RunTable{}, nil // order also points at the runs
	}
	h.p.mu.Unlock()
	withoutRuns := heapAfterGC()
	perWorker := float64(withWorkers-base) / workers
	perRun := max(float64(withRuns-withWorkers), float64(withRuns-withoutRuns)) / (workers / 10 * runsPerWorker)
	t.Logf("state: %.0f B per worker (goal 2048), %.0f B per tracked run (goal 256)", perWorker, perRun)
	require.Less(t, perWorker, 2048.0)
	require.Less(t, perRun, 256.0)
	runtime.KeepAlive(h)
}
