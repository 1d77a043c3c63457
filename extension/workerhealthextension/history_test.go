package workerhealthextension

import (
	"fmt"
	"runtime"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component"

	"github.com/workerwatch/workerwatch/internal/contract"
)

func TestHistoryRing(t *testing.T) {
	hs := newHistoryStore(time.Minute, 10*time.Second) // 6 samples
	require.Equal(t, 6, hs.size)
	w := worker("w", contract.Healthy)
	at := func(d time.Duration) int64 { return t0.Add(d).UnixMilli() }
	for i := range 10 {
		w.Memory.RSSBytes = int64(i+1) << 20
		hs.record(&w, at(time.Duration(i)*10*time.Second))
	}
	// Two snapshots in one resolution step: the later one is the step's sample.
	w.Memory.RSSBytes = 99 << 20
	hs.record(&w, at(95*time.Second))
	// Out of order: ignored.
	w.Memory.RSSBytes = 1
	hs.record(&w, at(85*time.Second))

	ws := hs.series("w", time.Time{})
	require.Len(t, ws.samples, 6, "the ring keeps window / resolution samples")
	var got []uint32
	for _, s := range ws.samples {
		got = append(got, s.rssKiB>>10)
	}
	assert.Equal(t, []uint32{5, 6, 7, 8, 9, 99}, got, "oldest first, the newest step updated in place")
	assert.Equal(t, 6, cap(hs.byID["w"].samples), "the ring never grows past its size")

	// From a time on only: what the page's window shows.
	assert.Len(t, hs.series("w", t0.Add(70*time.Second)).samples, 3)
	assert.Empty(t, hs.series("nope", time.Time{}).samples)
}

func TestHistoryRingGrowsToItsSize(t *testing.T) {
	hs := newHistoryStore(30*time.Minute, 10*time.Second)
	w := worker("w", contract.Healthy)
	hs.record(&w, t0.UnixMilli())
	assert.Equal(t, 8, cap(hs.byID["w"].samples), "a worker seen once costs 8 samples, not 180")
	for i := 1; i < 500; i++ {
		hs.record(&w, t0.Add(time.Duration(i)*10*time.Second).UnixMilli())
		assert.LessOrEqual(t, cap(hs.byID["w"].samples), 180)
	}
	assert.Len(t, hs.byID["w"].samples, 180)
}

func TestHistoryTransitions(t *testing.T) {
	hs := newHistoryStore(30*time.Minute, 10*time.Second)
	w := worker("w", contract.Unknown)
	w.Since = t0.Add(-time.Hour)
	hs.record(&w, t0.UnixMilli())

	// The processor says the state began before the snapshot that shows it.
	w.State, w.Since = contract.Unhealthy, t0.Add(17*time.Second)
	w.Reasons = []contract.Reason{
		{Code: "memory_over_soft_limit", Value: 600, Threshold: 500},
		{Code: "kills_in_window", Value: 3, Threshold: 2},
		{Code: "drift_missing", Value: 1, Threshold: 0},
		{Code: "over_capacity", Value: 1, Threshold: 0},
	}
	hs.record(&w, t0.Add(20*time.Second).UnixMilli())
	hs.record(&w, t0.Add(30*time.Second).UnixMilli()) // no change, no transition

	ws := hs.series("w", time.Time{})
	require.Len(t, ws.transitions, 2)
	first, second := ws.transitions[0], ws.transitions[1]
	assert.Equal(t, uint8(0), first.from, "first seen")
	assert.Equal(t, contract.Unknown, stateOf(first.to))
	assert.Equal(t, t0.Add(-time.Hour).UnixMilli(), first.at, "the state began when the processor says")
	assert.Equal(t, contract.Unknown, stateOf(second.from))
	assert.Equal(t, contract.Unhealthy, stateOf(second.to))
	assert.Equal(t, t0.Add(17*time.Second).UnixMilli(), second.at, "at the processor's Since")
	require.Equal(t, uint8(transitionReasons), second.nReasons, "at most three reasons")
	assert.Equal(t, "memory_over_soft_limit", second.reasons[0].code)
	assert.InDelta(t, 600.0, second.reasons[0].value, 0)

	// The ring keeps the last 16; the last one is kept even when it is older
	// than the window, because it explains the current state.
	for i := range 40 {
		w.State = contract.AllStates[i%2]
		w.Since = time.Time{}
		hs.record(&w, t0.Add(time.Duration(40+i)*time.Second).UnixMilli())
	}
	all := hs.series("w", time.Time{}).transitions
	require.Len(t, all, historyTransitions)
	assert.Equal(t, t0.Add(79*time.Second).UnixMilli(), all[historyTransitions-1].at, "newest last")
	assert.Equal(t, t0.Add(64*time.Second).UnixMilli(), all[0].at)
	late := hs.series("w", t0.Add(time.Hour)).transitions
	require.Len(t, late, 1)
	assert.Equal(t, t0.Add(79*time.Second).UnixMilli(), late[0].at)
}

func TestHistoryRoles(t *testing.T) {
	hs := newHistoryStore(30*time.Minute, 10*time.Second)
	w := worker("w", contract.Healthy)
	for i, r := range []string{"child", "main", "npm", "runner", "extra"} {
		w.Memory.Roles = append(w.Memory.Roles, contract.RoleMemory{Role: r, RSSBytes: int64(i+1) << 20, SoftLimitBytes: int64(i+1) << 21})
	}
	hs.record(&w, t0.UnixMilli())
	ws := hs.series("w", time.Time{})
	assert.Equal(t, []string{"child", "main", "npm", "runner"}, ws.roles, "four role slots; a fifth role is left out")
	s := ws.samples[0]
	assert.Equal(t, uint8(0b1111), s.roleMask)
	assert.Equal(t, uint32(2<<10), s.roleRSS[1])
	assert.Equal(t, uint32(4<<10), s.roleSoft[1])

	// A later sample without a role: its bit is clear, nothing is drawn for it.
	w.Memory.Roles = w.Memory.Roles[1:2]
	hs.record(&w, t0.Add(10*time.Second).UnixMilli())
	assert.Equal(t, uint8(0b10), hs.series("w", time.Time{}).samples[1].roleMask)
}

// The history follows what the API serves: only the served copy of a
// worker two processors list is recorded, and a worker that leaves the view
// leaves the history.
func TestHistoryFollowsTheView(t *testing.T) {
	s := newStore(newHistoryStore(30*time.Minute, 10*time.Second))
	other := component.MustNewIDWithName("worker_health", "other")
	put(s, snapshot(testSource, t0, worker("a", contract.Healthy), worker("both", contract.Healthy)))
	put(s, snapshot(other, t0.Add(time.Second), worker("both", contract.Lost)))
	ws := s.history.series("both", time.Time{})
	require.Len(t, ws.samples, 1)
	assert.Equal(t, contract.Lost, stateOf(ws.samples[0].state), "the worse copy, as served")

	put(s, snapshot(testSource, t0.Add(10*time.Second), worker("both", contract.Healthy)))
	assert.Empty(t, s.history.series("a", time.Time{}).samples, "a left the view")
	assert.NotEmpty(t, s.history.series("both", time.Time{}).samples)
}

// TestHistoryMemory measures what the history costs per worker at 10,000
// workers with every ring full (issue 16: <= 16 KiB for 30 minutes at 10 s):
// 180 samples with four roles, 16 transitions with three reasons each.
//
//	go test -run TestHistoryMemory -v ./extension/workerhealthextension/
func TestHistoryMemory(t *testing.T) {
	const n = 10_000
	hs := newHistoryStore(30*time.Minute, 10*time.Second)
	ws := make([]contract.Worker, n)
	for i := range ws {
		w := worker(fmt.Sprintf("openfn-worker-%05d", i), contract.Healthy)
		for _, r := range []string{"child", "main", "npm", "runner"} {
			w.Memory.Roles = append(w.Memory.Roles, contract.RoleMemory{Role: r, RSSBytes: 100 << 20, SoftLimitBytes: 400 << 20})
		}
		w.Reasons = []contract.Reason{{Code: "memory_over_soft_limit"}, {Code: "kills_in_window"}, {Code: "drift_missing"}}
		ws[i] = w
	}
	ids := make([]string, n) // the ids are the view's, not the history's
	for i := range ws {
		ids[i] = ws[i].ID
	}
	runtime.GC()
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	for step := range hs.size + 20 {
		at := t0.Add(time.Duration(step) * 10 * time.Second).UnixMilli()
		for i := range ws {
			w := &ws[i]
			w.Memory.RSSBytes += 4096
			w.State = contract.AllStates[step/10%2] // a transition every 10 samples: 18, the ring keeps 16
			hs.record(w, at)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	perWorker := float64(after.HeapAlloc-before.HeapAlloc) / n
	t.Logf("history of %d workers with full rings: %.0f bytes per worker (%.1f KiB), %.1f MiB in all",
		n, perWorker, perWorker/1024, float64(after.HeapAlloc-before.HeapAlloc)/(1<<20))
	for _, h := range hs.byID {
		require.Len(t, h.samples, hs.size)
		require.Len(t, h.trans, historyTransitions)
	}
	assert.LessOrEqual(t, perWorker, 16.0*1024)
	runtime.KeepAlive(ids)
}
