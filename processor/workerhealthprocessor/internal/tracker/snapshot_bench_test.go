package tracker

import (
	"fmt"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/pmetric"

	"github.com/workerwatch/workerwatch/internal/fleetload"
	"github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/mapping"
)

// BenchmarkSnapshot is the snapshot an evaluation builds for the health
// extension, at 10,000 workers fed four rounds of issue 24's load 10 s apart
// (fleetload.Round: each worker's tree sample with its root's incarnation,
// a heartbeat, a run claimed on both sides and the one before ended): the
// held run, three ended ones listed as recent, a role's memory. Nothing
// changed since the snapshot before it, as for most workers at most
// evaluations; what it allocates is what the extension's view is built
// from, again at every evaluation.
//
//	go test -run '^$' -bench BenchmarkSnapshot -benchmem ./processor/workerhealthprocessor/internal/tracker/
func BenchmarkSnapshot(b *testing.B) {
	h, now := snapshotBenchFleet(b)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		served = h.p.tracker.Snapshot(now)
	}
	served = nil
}

// BenchmarkSnapshotSampled is BenchmarkSnapshot with every worker's tree
// sample applied before each snapshot (not timed): its memory moved, as a
// real worker's does from one sample to the next (fleetload.TreeSample), so
// every worker's roles are listed anew.
func BenchmarkSnapshotSampled(b *testing.B) {
	h, now := snapshotBenchFleet(b)
	b.ReportAllocs()
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		now += int64(time.Second)
		md := pmetric.NewMetrics()
		for i := range snapshotBenchWorkers {
			fleetload.TreeSample(md, fmt.Sprintf("bench-worker-%06d", i), i, pcommon.Timestamp(now))
		}
		h.metrics(md)
		b.StartTimer()
		served = h.p.tracker.Snapshot(now)
	}
	served = nil
}

const snapshotBenchWorkers = 10_000

// snapshotBenchFleet is the tracker of the snapshot benchmarks, fed, with
// its first snapshot built and held; and the time of the last round.
func snapshotBenchFleet(b *testing.B) (*harness, int64) {
	const n = snapshotBenchWorkers
	cfg := &testConfig{
		Config: DefaultConfig(), Scheduler: mapping.DefaultSchedulerConfig(),
		Mapping: mapping.DefaultConfig(), Metrics: mapping.DefaultMetricsConfig(),
	}
	h := newHarness(b, cfg)
	for round := range 4 {
		md, ld := pmetric.NewMetrics(), plog.NewLogs()
		sched := fleetload.Scheduler(ld)
		now := pcommon.NewTimestampFromTime(h.clock.Now())
		for i := range n {
			prev := ""
			if round > 0 {
				prev = fmt.Sprintf("bench-run-%06d-%d", i, round-1)
			}
			fleetload.Round(md, ld, sched, fmt.Sprintf("bench-worker-%06d", i), i, prev, fmt.Sprintf("bench-run-%06d-%d", i, round), now, now)
		}
		h.logs(ld)
		h.metrics(md)
		h.eval()
		h.advance(10 * time.Second)
	}
	now := h.clock.Now().UnixNano()
	snap := h.p.tracker.Snapshot(now)
	if len(snap.Workers) != n || snap.Workers[0].Runs.Recent.Len() != 3 || len(snap.Workers[0].Runs.Worker) != 1 {
		b.Fatalf("%d workers, the first with %d recent runs and %d held: want %d, 3 and 1", len(snap.Workers), snap.Workers[0].Runs.Recent.Len(), len(snap.Workers[0].Runs.Worker), n)
	}
	// Each snapshot held until the next is built, as the health extension
	// holds the one it serves (a local variable would not do: overwritten,
	// it is dead while the next is built).
	served = snap
	return h, now
}
