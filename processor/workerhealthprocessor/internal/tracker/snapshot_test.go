package tracker

import (
	"fmt"
	"runtime"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"

	"github.com/workerwatch/workerwatch/internal/contract"
)

// The snapshot: each side's runs sorted, the newest limits.recent_runs ended
// runs newest first, empty lists as [] (not null), every state counted.
func TestSnapshot(t *testing.T) {
	cfg := testCfg()
	cfg.Limits.RecentRuns = 2
	h := newHarness(t, cfg)
	h.metrics(treeMetrics("w1", 10, -1, 1))
	h.logs(wl("w1", contract.EventClaimed, "b", nil))
	h.logs(wl("w1", contract.EventClaimed, "a", nil))
	h.logs(sl("w1", contract.EventClaimed, "a"))
	for _, r := range []string{"r1", "r2", "r3"} {
		h.logs(wl("w1", contract.EventClaimed, r, nil))
		h.advance(sec)
		h.logs(wl("w1", contract.EventFinished, r, map[string]any{"cicd.pipeline.result": "success"}))
	}
	h.eval()
	w := h.snap("w1")
	assert.Equal(t, []string{"a", "b"}, w.Runs.Worker)
	assert.Equal(t, []string{"a"}, w.Runs.Scheduler)
	assert.Equal(t, []string{"r3", "r2"}, recentIDs(w.Runs.Recent.Records()), "newest first, limits.recent_runs")
	assert.Equal(t, "success", w.Runs.Recent.Records()[0].Result)
	assert.NotNil(t, w.Drift.Missing())
	assert.NotNil(t, w.Drift.Orphaned())
	h.p.mu.Lock()
	snap := h.p.tracker.Snapshot(h.clock.Now().UnixNano())
	h.p.mu.Unlock()
	assert.Len(t, snap.Fleet.ByState, len(contract.AllStates))
	assert.Equal(t, 1, snap.Fleet.ByState[w.State])
	assert.Equal(t, int64(-1), snap.Fleet.Pending, "no scheduler report")
}

func recentIDs(rs []contract.RunRecord) []string {
	var out []string
	for _, r := range rs {
		out = append(out, r.ID)
	}
	return out
}

// A snapshot's parts (held runs, roles, recent runs) are in blocks of its
// own: the next snapshot shares none of them, even unchanged, so that a
// snapshot's blocks are freed whole with it (block.go), and what was
// published stays as it was while the next ones are built. Each part is
// capped at its length: appending to one never writes into the next.
func TestSnapshotPartsInBlocksOfItsOwn(t *testing.T) {
	h := newHarness(t, testCfg())
	h.metrics(treeMetrics("w1", 10, -1, 1))
	h.logs(wl("w1", contract.EventClaimed, "a", nil))
	h.logs(sl("w1", contract.EventClaimed, "a"))
	h.logs(wl("w1", contract.EventClaimed, "r1", nil))
	h.advance(sec)
	h.logs(wl("w1", contract.EventFinished, "r1", map[string]any{"cicd.pipeline.result": "success"}))
	h.eval()
	build := func() *contract.Snapshot {
		h.p.mu.Lock()
		defer h.p.mu.Unlock()
		return h.p.tracker.Snapshot(h.clock.Now().UnixNano())
	}
	first := build()
	w1 := first.Workers[0]
	assert.Equal(t, []string{"a"}, w1.Runs.Worker)
	assert.Same(t, &w1.Runs.Worker[0], &w1.Runs.Scheduler[0], "both sides agree: one list")
	assert.Len(t, w1.Memory.Roles, cap(w1.Memory.Roles), "capped")
	assert.Len(t, w1.Runs.Worker, cap(w1.Runs.Worker), "capped")
	assert.NotEmpty(t, w1.Memory.Roles)
	assert.Equal(t, 1, w1.Runs.Recent.Len())

	second := build()
	w2 := second.Workers[0]
	assert.Equal(t, w1.Runs.Worker, w2.Runs.Worker)
	assert.NotSame(t, &w1.Runs.Worker[0], &w2.Runs.Worker[0], "unchanged, but a list of its own")
	assert.NotSame(t, unsafe.StringData(w1.Runs.Worker[0]), unsafe.StringData(w2.Runs.Worker[0]), "the id too")
	assert.Equal(t, w1.Memory.Roles, w2.Memory.Roles)
	assert.NotSame(t, &w1.Memory.Roles[0], &w2.Memory.Roles[0])
	assert.Equal(t, w1.Runs.Recent.Records(), w2.Runs.Recent.Records())

	// The scheduler lets go of a; the worker claims b.
	h.logs(sl("w1", contract.EventFinished, "a"))
	h.logs(wl("w1", contract.EventClaimed, "b", nil))
	third := build()
	w3 := third.Workers[0]
	assert.Equal(t, []string{"a", "b"}, w3.Runs.Worker)
	assert.Empty(t, w3.Runs.Scheduler)
	assert.NotNil(t, w3.Runs.Scheduler, "[] in the JSON, not null")
	assert.Equal(t, []string{"a"}, w2.Runs.Worker, "the published list stays as it was")
	assert.Equal(t, []string{"a"}, w2.Runs.Scheduler)
	assert.Equal(t, []string{"a"}, w1.Runs.Worker)
	runtime.KeepAlive(first)
	runtime.KeepAlive(second)
}

// A block is sized from what the snapshot before took: a snapshot as large
// as the one before takes one block, and one that grows a few more, not one
// for every piece.
func TestBlockSizedFromTheSnapshotBefore(t *testing.T) {
	var b block[byte]
	blocks := func(pieces int) int {
		n, prev := 0, []byte(nil)
		b.reset()
		for range pieces {
			p := b.take(10)
			// Not right after the piece before: a new block (addresses compared
			// as numbers; a pointer past a block's end is not one to hold).
			if prev == nil || uintptr(unsafe.Pointer(unsafe.SliceData(p))) != uintptr(unsafe.Pointer(unsafe.SliceData(prev)))+uintptr(len(prev)) {
				n++
			}
			prev = p
		}
		return n
	}
	assert.Equal(t, 9, blocks(1000), "the first: no size to go by (64 elements, then as many as so far)")
	assert.Equal(t, 1, blocks(1000), "as large as the one before: one block")
	assert.Equal(t, 1, blocks(1050), "a little larger")
	assert.Equal(t, 2, blocks(2000), "twice as large")
	assert.Equal(t, 1, blocks(10), "smaller")
	assert.Nil(t, b.take(0))
}

// What a snapshot allocates when nothing changed does not grow with the
// workers: a fleet of 30 costs the allocations of a fleet of one (the
// snapshot, its array, its counts), none a worker.
func TestSnapshotAllocationsPerFleet(t *testing.T) {
	allocs := func(n int) float64 {
		h := newHarness(t, testCfg())
		for i := range n {
			id := fmt.Sprintf("w%d", i)
			h.metrics(treeMetrics(id, 10, -1, 1))
			h.logs(wl(id, contract.EventClaimed, "a", nil))
			h.logs(sl(id, contract.EventClaimed, "a"))
			h.logs(wl(id, contract.EventClaimed, "r1", nil))
			h.logs(wl(id, contract.EventFinished, "r1", map[string]any{"cicd.pipeline.result": "success"}))
		}
		h.eval()
		now := h.clock.Now().UnixNano()
		h.p.mu.Lock()
		defer h.p.mu.Unlock()
		served = h.p.tracker.Snapshot(now)
		defer func() { served = nil }()
		// Each held (served, in memory the collector reads) while the next is built.
		return testing.AllocsPerRun(20, func() { served = h.p.tracker.Snapshot(now) })
	}
	one, many := allocs(1), allocs(30)
	assert.Equal(t, one, many, "allocations a snapshot: %v for one worker, %v for 30", one, many)
}

// served is the snapshot a test's health extension would serve.
var served *contract.Snapshot
