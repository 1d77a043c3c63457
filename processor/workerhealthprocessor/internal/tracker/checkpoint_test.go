package tracker

import (
	"encoding/json"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/workerwatch/workerwatch/internal/contract"
)

// Without a storage nothing queues workers for a checkpoint (the queue
// would hold every worker ever seen, forgotten ones too).
func TestNoCheckpointQueueWithoutStorage(t *testing.T) {
	h := newHarness(t, testCfg())
	for i := range 100 {
		h.logs(wl(fmt.Sprintf("w%d", i), contract.EventHeartbeat, "", nil))
	}
	h.advance(time.Minute)
	h.eval()
	h.p.mu.Lock()
	defer h.p.mu.Unlock()
	assert.Zero(t, h.p.tracker.workers.len())
	assert.Empty(t, h.p.tracker.cp.dirty)
}

// The per-rule checkpoint records are embedded in Record and written as one
// flat JSON object, the format of version 2 (worker_health.v2/): the keys
// are those a checkpoint written before the records were split holds, each
// once (a key repeated by two records would be dropped by encoding/json).
func TestCheckpointRecordKeys(t *testing.T) {
	h := newHarness(t, testCfg())
	h.metrics(treeMetrics("w1", 10, -1, 1))
	h.logs(wl("w1", "workerwatch.run.claimed", "r1", map[string]any{"workerwatch.worker.capacity": 2}))
	h.logs(sl("w1", "workerwatch.run.claimed", "r1"))
	for _, r := range []string{"r1", "r2", "r3"} { // 3 kills that count: kill_since
		h.logs(wl("w1", "workerwatch.run.killed", r, map[string]any{"workerwatch.kill.reason": "oom"}))
	}
	h.eval()
	h.p.mu.Lock()
	rec := h.p.tracker.toCheckpoint(h.p.tracker.workers.get("w1"))
	h.p.mu.Unlock()
	b, err := json.Marshal(&rec)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m))
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	assert.Equal(t, []string{
		"alive", "cap", "cgmax", "claims", "ev", "first", "id", "kill_log", "kill_since", "kills", "last_claim",
		"mem", "mention", "roles", "rss", "runs", "sched", "sched_known", "sources", "transitions",
	}, keys)
	var back Record
	require.NoError(t, json.Unmarshal(b, &back))
	assert.Equal(t, rec, back, "a record reads back as written")
}
