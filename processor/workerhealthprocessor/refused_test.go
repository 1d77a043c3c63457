package workerhealthprocessor

import (
	"context"
	"fmt"
	"runtime"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/pmetric"

	"github.com/workerwatch/workerwatch/internal/fleetload"
)

// refusedBatch is what an agent forwards in one request for `n` workers
// every 10 s (docs/scaling.md, "Memory per worker"; fleetload.Round): each
// worker's tree sample, and its heartbeat, a run claimed and started, and
// the scheduler's claim.
func refusedBatch(prefix string, n, round int) (pmetric.Metrics, plog.Logs) {
	md := pmetric.NewMetrics()
	ld := plog.NewLogs()
	sched := fleetload.Scheduler(ld)
	ts := pcommon.NewTimestampFromTime(t0)
	for i := range n {
		fleetload.Round(md, ld, sched, fmt.Sprintf("%s-%05d", prefix, i), i, "", fmt.Sprintf("%s-run-%05d-%d", prefix, i, round), ts, ts)
	}
	return md, ld
}

// TestRefusedWorkersCostNothing: with limits.max_workers full of real
// workers, what other workers send is refused without anything kept: no
// allocation per refused batch in the processor, no retained heap, and
// their tree metrics dropped before the exporters (issue 24: refused
// workers took RSS from 2.0 to 4.5 GiB). Counts, not timings.
func TestRefusedWorkersCostNothing(t *testing.T) {
	const tracked, refusedPer, batches = 100, 500, 20
	cfg := testCfg()
	cfg.Limits.MaxWorkers = tracked
	h := newHarness(t, cfg)
	md, ld := refusedBatch("real", tracked, 0)
	h.metrics(md)
	h.logs(ld)
	h.eval()
	require.Len(t, h.p.tracker.ByID(), tracked)

	// Each refused batch as a fresh request (the processor drops the
	// refused resources from the metrics it passes on, so one cannot be
	// fed twice); built before measuring.
	type req struct {
		md pmetric.Metrics
		ld plog.Logs
	}
	reqs := make([]req, batches+1)
	for i := range reqs {
		reqs[i].md, reqs[i].ld = refusedBatch("refused", refusedPer, i)
	}
	ctx := context.Background()
	feed := func(r req) {
		out, err := h.p.processMetrics(ctx, r.md)
		require.Error(t, err, "every resource of the batch names a refused worker: nothing is passed on")
		assert.Equal(t, 0, out.ResourceMetrics().Len())
		_, err = h.p.processLogs(ctx, r.ld)
		assert.NoError(t, err)
	}
	feed(reqs[0]) // the pools warm

	before := heapAfterGC()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	for _, r := range reqs[1:] {
		feed(r)
	}
	runtime.ReadMemStats(&m1)
	after := heapAfterGC()

	allocsPerBatch := float64(m1.Mallocs-m0.Mallocs) / batches
	bytesPerBatch := float64(m1.TotalAlloc-m0.TotalAlloc) / batches
	retained := int64(after) - int64(before)
	t.Logf("refused: %d workers a batch (%d metric points, %d log records): %.1f allocations, %.0f bytes allocated a batch; heap after %d batches %+d bytes (the batches themselves freed)",
		refusedPer, 4*refusedPer, 4*refusedPer, allocsPerBatch, bytesPerBatch, batches, retained)
	assert.Len(t, h.p.tracker.ByID(), tracked, "none admitted")
	// A few allocations a batch (a pooled batch refilled after a GC emptied
	// the pool: about 1.4 without -race, about 14 with it, where sync.Pool
	// drops a quarter of what is put back), never one per refused worker or
	// record: the bound is a tenth of the batch's workers.
	assert.Less(t, allocsPerBatch, float64(refusedPer)/10, "allocations per refused batch")
	// Nothing kept: the heap does not grow with the refused batches (it
	// shrinks by the batches themselves, freed).
	assert.Less(t, retained, int64(64<<10), "heap retained after %d refused batches", batches)
}
