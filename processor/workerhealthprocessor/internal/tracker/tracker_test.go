package tracker

import (
	"runtime"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/workerwatch/workerwatch/internal/contract"
	"github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/mapping"
	"github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/state"
)

// apply: a worker's own record names it and gives its capacity (seen once),
// its tree confirms it; a scheduler's record confirms a worker too, without
// making it fresh (nothing of its own seen).
func TestApply(t *testing.T) {
	h := newHarness(t, testCfg())
	h.logs(wl("w1", contract.EventClaimed, "r1", map[string]any{"workerwatch.worker.capacity": 3}))
	w := h.worker("w1")
	require.NotNil(t, w)
	assert.Equal(t, int32(3), w.Capacity)
	assert.Equal(t, state.EvidenceOnce, w.Evidence, "its own records only")
	assert.True(t, w.Fresh)
	assert.Equal(t, int64(1), w.Claims[mapping.SideWorker])
	h.metrics(treeMetrics("w1", 10, -1, 1))
	assert.Equal(t, state.EvidenceConfirmed, w.Evidence, "its tree confirms it")

	h.logs(sl("w2", contract.EventClaimed, "r2"))
	w2 := h.worker("w2")
	require.NotNil(t, w2)
	assert.Equal(t, state.EvidenceConfirmed, w2.Evidence)
	assert.True(t, w2.SchedKnown)
	assert.False(t, w2.Fresh, "a scheduler's record is not the worker's own")
	assert.Equal(t, int64(1), w2.Claims[mapping.SideScheduler])
}

// The worker is kept per worker (100,000 on a shard): it stays within the
// allocator's 576-byte size class. The runtime puts an 8-byte header before
// every object over 512 bytes that holds pointers (Go 1.22 on), so the struct
// may take 568 of them. (It was 1,136 bytes, in the 1,152 class, before its
// rarely used parts went behind pointers: docs/processor.md, "Bounds"; then
// 888, in the 896 class, before its small counts went to 32 bits and the
// drift times and the kills' log behind pointers; then 752, in the 768 class,
// before the memory episode went behind a pointer that is nil while the
// worker is under its soft limit; then 696, 704 with the header, before the
// CPU episode went behind one too, the drift counts and the admission's
// evaluation to 32 bits, the incarnation became the one pointer to its health
// API view, the sums of the series sent 32-bit and the kill counts went into
// the kills' book.) A field that grows it past that costs 64 bytes a worker:
// move what most workers never use behind a pointer, as Recycle, the kills'
// book, Drift's named runs and the memory and CPU episodes are, and keep
// small counts in 32 bits next to the bools.
//
// Measured as the allocator counts it (the bytes of heap objects allocated,
// runtime.MemStats.TotalAlloc, over n workers), not from unsafe.Sizeof:
// the header is the runtime's rule, not this package's, and a struct of 576
// bytes takes the 640-byte class.
func TestWorkerSize(t *testing.T) {
	const class, n = 576, 10_000
	ws := make([]*Worker, n)
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for i := range ws {
		ws[i] = new(Worker)
	}
	runtime.ReadMemStats(&after)
	runtime.KeepAlive(ws)
	assert.LessOrEqual(t, (after.TotalAlloc-before.TotalAlloc)/n, uint64(class), "bytes a worker takes (a struct of %d bytes)", unsafe.Sizeof(Worker{}))
}
