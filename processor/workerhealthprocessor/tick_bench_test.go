package workerhealthprocessor

import (
	"context"
	"fmt"
	"testing"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer/consumertest"

	"github.com/workerwatch/workerwatch/internal/contract"
)

// BenchmarkTick is one evaluation at limits.max_workers (10,000 workers,
// each with a tree sample and 2 runs held on both sides) and at 100,000
// (the limit raised): judge every worker, build the derived metrics, the
// snapshot for the health extension, and hand both over. What emit_interval
// is weighed against: an evaluation that takes longer than the interval is
// not published on time (issue 24 point 3).
//
//	go test -run '^$' -bench BenchmarkTick -benchtime 10x ./processor/workerhealthprocessor/
func BenchmarkTick(b *testing.B) {
	for _, n := range []int{10_000, 100_000} {
		b.Run(fmt.Sprintf("workers=%d", n), func(b *testing.B) { benchTick(b, n) })
	}
}

func benchTick(b *testing.B, workers int) {
	cfg := createDefaultConfig().(*Config)
	cfg.Limits.MaxWorkers = workers
	healthID := component.MustNewID("worker_health")
	cfg.HealthExtension = &healthID
	// newHarness takes a *testing.T; its cleanups are the benchmark's.
	h := newHarness(&testing.T{}, cfg)
	b.Cleanup(h.p.tel.Shutdown)
	ctx := context.Background()
	for _, pl := range []*pipeline{{metrics: consumertest.NewNop()}, {logs: consumertest.NewNop()}} {
		if err := h.p.start(ctx, host{ext: map[component.ID]component.Component{healthID: &dropSubscriber{}}}, pl); err != nil {
			b.Fatal(err)
		}
		b.Cleanup(func() {
			if err := h.p.shutdown(ctx, pl); err != nil {
				b.Error(err)
			}
		})
	}
	for i := range workers {
		id := fmt.Sprintf("worker-%06d", i)
		if _, err := h.p.processMetrics(ctx, treeMetrics(id, 1<<20, 0.1, 1)); err != nil {
			b.Fatal(err)
		}
		for r := range 2 {
			run := fmt.Sprintf("run-%06d-%d", i, r)
			_, _ = h.p.processLogs(ctx, sl(id, contract.EventClaimed, run))
			_, _ = h.p.processLogs(ctx, wl(id, contract.EventClaimed, run, nil))
		}
	}
	h.p.tick(ctx)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		h.clock.Advance(cfg.EmitInterval)
		h.p.tick(ctx)
	}
}

// dropSubscriber takes snapshots and keeps none.
type dropSubscriber struct{}

func (dropSubscriber) Start(context.Context, component.Host) error { return nil }
func (dropSubscriber) Shutdown(context.Context) error              { return nil }
func (dropSubscriber) Publish(*contract.Snapshot)                  {}
