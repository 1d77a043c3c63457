package tracker

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/workerwatch/workerwatch/internal/contract"
)

// The cluster's pending count stands in for this shard's own while it is
// fresh (cluster.go at the top sets it).
func TestPendingNow(t *testing.T) {
	cfg := testCfg()
	h := newHarness(t, cfg)
	now := h.clock.Now().UnixNano()
	assert.Equal(t, int64(-1), h.p.tracker.pendingNow(now), "none")
	h.p.tracker.SetClusterPending(5, now)
	assert.Equal(t, int64(5), h.p.tracker.pendingNow(now), "the other shard's figure counts")
	h.metrics(pendingMetrics(9))
	assert.Equal(t, int64(9), h.p.tracker.pendingNow(now), "this shard's own first")
	h.p.tracker.Disown(func(id string) bool { return id != "" }, func(*Worker) {})
	assert.Equal(t, int64(5), h.p.tracker.pendingNow(now), "the empty id moved away: the other shard's figure still counts")
	later := now + int64(cfg.Lost.After) + int64(time.Second)
	assert.Equal(t, int64(-1), h.p.tracker.pendingNow(later), "a stale report no longer counts")
}

// TakeCounts hands the counts since the last call over once.
func TestTakeCounts(t *testing.T) {
	h := newHarness(t, testCfg())
	for _, r := range []string{"r1", "r2", "r3", "r4", "r5"} {
		h.logs(wl("once", contract.EventClaimed, r, nil))
	}
	h.p.mu.Lock()
	defer h.p.mu.Unlock()
	c := h.p.tracker.TakeCounts()
	assert.Equal(t, int64(1), c.Admission.RunsRefused[refusedRunsPerWorker], "a worker seen once holds 4 runs")
	assert.Equal(t, Counts{}, h.p.tracker.TakeCounts(), "reset")
}
