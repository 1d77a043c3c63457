package tracker

import (
	"testing"

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
	assert.NotNil(t, w.Drift.Missing)
	assert.NotNil(t, w.Drift.Orphaned)
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
