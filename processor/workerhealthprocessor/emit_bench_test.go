//go:build !race

// Built without -race: the benchmark drives contrib's Prometheus exporter,
// whose dependency graph `make unit` would otherwise compile a second time
// with -race (Makefile, "unit"). Benchmarks are not part of `make unit`.

package workerhealthprocessor

import (
	"context"
	"fmt"
	"os"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/open-telemetry/opentelemetry-collector-contrib/exporter/prometheusexporter"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/exporter/exportertest"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/processor/processortest"

	"github.com/workerwatch/workerwatch/internal/contract"
	"github.com/workerwatch/workerwatch/internal/freeport"
	"github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/metadata"
)

// BenchmarkSteadyEmission: one evaluation of a steady fleet of 10,000
// workers (each sends its tree sample every emit_interval, nothing
// changes) and its emission into contrib's Prometheus exporter, as a
// gateway runs it, with every worker's series sent at every evaluation
// (resend_interval 0, as before it) and with the default resend_interval
// (1m), side by side. The feeding of the tree samples is not timed.
// points/op is the data points the exporter took per evaluation.
// WORKERWATCH_EMIT_WORKERS sets another fleet size (100000: issue 24
// point 3, the exporter taking every evaluation's output in time).
//
//	go test -run '^$' -bench BenchmarkSteadyEmission -benchtime 30x ./processor/workerhealthprocessor/
func BenchmarkSteadyEmission(b *testing.B) { benchEmission(b, false) }

// BenchmarkBusyEmission is BenchmarkSteadyEmission for a busy fleet, issue
// 24's load: every worker ends a run and claims and starts the next in
// every interval (the scheduler's end and claim too), so its claims change
// at every evaluation and the rest of its series seldom. With
// resend_interval only the changed groups of series are sent
// (seriesGroups): points/op is the count to compare. It is an average
// over the evaluations run, and the resends of the whole fleet spread
// over a minute of them: compare counts of the same -benchtime (the
// figure in docs/processor.md is 10x).
//
//	go test -run '^$' -bench BenchmarkBusyEmission -benchtime 10x ./processor/workerhealthprocessor/
func BenchmarkBusyEmission(b *testing.B) { benchEmission(b, true) }

func benchEmission(b *testing.B, busy bool) {
	workers := emitWorkers(b)
	trees := make([]pmetric.Metrics, workers)
	for i := range trees {
		trees[i] = treeMetrics(fmt.Sprintf("worker-%06d", i), 1<<28, 0.1, 1)
	}
	for _, resend := range []time.Duration{0, time.Minute} {
		b.Run("resend_interval="+resend.String(), func(b *testing.B) {
			ctx := context.Background()
			cfg := createDefaultConfig().(*Config)
			cfg.ResendInterval = resend
			cfg.Limits.MaxWorkers = max(cfg.Limits.MaxWorkers, workers)
			clock := clockwork.NewFakeClockAt(t0)
			p, err := newHealthProcessor(processortest.NewNopSettings(metadata.Type), cfg, withClock(clock))
			require.NoError(b, err)
			b.Cleanup(p.tel.Shutdown)
			exp := newBenchPrometheus(b)
			counted := &pointCounter{next: exp}
			p.targets = []*pipeline{{metrics: counted}}
			cycle := 0
			feed := func() {
				for _, md := range trees {
					_, err := p.processMetrics(ctx, md)
					require.NoError(b, err)
				}
				if busy {
					runs(p, workers, cycle)
					cycle++
				}
				clock.Advance(cfg.EmitInterval)
			}
			// Seen in two intervals (past seen-once), judged and sent once.
			for range 3 {
				feed()
				p.tick(ctx)
			}
			counted.points.Store(0)
			b.ResetTimer()
			for range b.N {
				b.StopTimer()
				feed()
				b.StartTimer()
				p.tick(ctx)
			}
			b.StopTimer()
			b.ReportMetric(float64(counted.points.Load())/float64(b.N), "points/op")
		})
	}
}

// runs has each of the workers end its run of the previous cycle and claim
// and start this cycle's, and the scheduler end and assign them.
func runs(p *healthProcessor, workers, cycle int) {
	ctx := context.Background()
	var own, sched []rec
	for i := range workers {
		w := fmt.Sprintf("worker-%06d", i)
		prev, run := fmt.Sprintf("run-%06d-%d", i, cycle-1), fmt.Sprintf("run-%06d-%d", i, cycle)
		if cycle > 0 {
			own = append(own, rec{Worker: w, Event: contract.EventFinished, Run: prev, Attrs: map[string]any{contract.AttrResult: contract.ResultSuccess}})
			sched = append(sched, rec{Worker: w, Event: contract.EventFinished, Run: prev})
		}
		own = append(own, rec{Worker: w, Event: contract.EventClaimed, Run: run}, rec{Worker: w, Event: contract.EventStarted, Run: run})
		sched = append(sched, rec{Worker: w, Event: contract.EventClaimed, Run: run})
	}
	for _, ld := range []plog.Logs{workerLogs("bench-worker", own...), schedLogs(sched...)} {
		if _, err := p.processLogs(ctx, ld); err != nil {
			panic(err)
		}
	}
}

// newBenchPrometheus is contrib's Prometheus exporter with its default
// config on a free loopback port.
func newBenchPrometheus(b *testing.B) consumer.Metrics {
	f := prometheusexporter.NewFactory()
	cfg := f.CreateDefaultConfig().(*prometheusexporter.Config)
	cfg.ServerConfig.NetAddr.Endpoint = freeport.Addr(b)
	exp, err := f.CreateMetrics(context.Background(), exportertest.NewNopSettings(f.Type()), cfg)
	require.NoError(b, err)
	require.NoError(b, exp.Start(context.Background(), componenttest.NewNopHost()))
	b.Cleanup(func() { require.NoError(b, exp.Shutdown(context.Background())) })
	return exp
}

// pointCounter counts the data points it passes on.
type pointCounter struct {
	next   consumer.Metrics
	points atomic.Int64
}

func (c *pointCounter) Capabilities() consumer.Capabilities { return c.next.Capabilities() }

func (c *pointCounter) ConsumeMetrics(ctx context.Context, md pmetric.Metrics) error {
	c.points.Add(int64(md.DataPointCount()))
	return c.next.ConsumeMetrics(ctx, md)
}

// BenchmarkEmissionHeld: what an evaluation's metrics hold while they wait
// for the emitter, per worker, every series of a fleet just judged (10,000
// workers; WORKERWATCH_EMIT_WORKERS sets another size): the rows the
// processor keeps (collectRows) against the same emission as pdata, as it
// kept it before the emitter rendered pieces as it sent them
// (buildMetrics). A memory figure, not a time: held-B/worker is the live
// heap the one emission adds, read after a GC.
//
//	go test -run '^$' -bench BenchmarkEmissionHeld -benchtime 3x ./processor/workerhealthprocessor/
func BenchmarkEmissionHeld(b *testing.B) {
	workers := emitWorkers(b)
	ctx := context.Background()
	cfg := createDefaultConfig().(*Config)
	cfg.Limits.MaxWorkers = max(cfg.Limits.MaxWorkers, workers)
	clock := clockwork.NewFakeClockAt(t0)
	p, err := newHealthProcessor(processortest.NewNopSettings(metadata.Type), cfg, withClock(clock))
	require.NoError(b, err)
	b.Cleanup(p.tel.Shutdown)
	for range 2 { // seen in two intervals: past seen-once
		for i := range workers {
			_, err := p.processMetrics(ctx, treeMetrics(fmt.Sprintf("worker-%06d", i), 1<<28, 0.1, 1))
			require.NoError(b, err)
		}
		clock.Advance(cfg.EmitInterval)
	}
	liveHeap := func() uint64 {
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	held := func(b *testing.B, build func() any) {
		var most uint64
		for b.Loop() {
			p.mu.Lock()
			before := liveHeap()
			kept := build()
			after := liveHeap()
			p.mu.Unlock()
			runtime.KeepAlive(kept)
			most = max(most, after-min(after, before))
		}
		b.ReportMetric(float64(most)/float64(workers), "held-B/worker")
	}
	now := clock.Now().UnixNano()
	b.Run("rows", func(b *testing.B) {
		held(b, func() any {
			rows, fleet := collectRows(p.tracker, p.startTime, now, nil)
			return []any{rows, fleet}
		})
	})
	b.Run("pdata", func(b *testing.B) {
		held(b, func() any { return buildMetrics(p.tracker, p.startTime, now) })
	})
}

// emitWorkers is the fleet size of the emission benchmarks: 10,000, or
// WORKERWATCH_EMIT_WORKERS.
func emitWorkers(b *testing.B) int {
	v := os.Getenv("WORKERWATCH_EMIT_WORKERS")
	if v == "" {
		return 10_000
	}
	n, err := strconv.Atoi(v)
	require.NoError(b, err, "WORKERWATCH_EMIT_WORKERS")
	return n
}
