package history

import (
	"fmt"
	"runtime"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/workerwatch/workerwatch/extension/workerhealthextension/internal/fleettest"
	"github.com/workerwatch/workerwatch/internal/contract"
)

func TestHistoryRing(t *testing.T) {
	hs := New(time.Minute, 10*time.Second) // 6 samples
	require.Equal(t, 6, hs.size)
	w := fleettest.Worker("w", contract.Healthy)
	at := func(d time.Duration) int64 { return fleettest.T0.Add(d).UnixMilli() }
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

	ws := hs.Series("w", time.Time{})
	require.Len(t, ws.Samples, 6, "the ring keeps window / resolution samples")
	var got []uint32
	for _, s := range ws.Samples {
		got = append(got, s.RSSKiB>>10)
	}
	assert.Equal(t, []uint32{5, 6, 7, 8, 9, 99}, got, "oldest first, the newest step updated in place")
	assert.Equal(t, 1, cap(hs.byID["w"].chunks), "the ring never grows past its size (6 slots: one chunk)")

	// From a time on only: what the page's window shows.
	assert.Len(t, hs.Series("w", fleettest.T0.Add(70*time.Second)).Samples, 3)
	assert.Empty(t, hs.Series("nope", time.Time{}).Samples)
}

func TestHistoryRingGrowsToItsSize(t *testing.T) {
	hs := New(30*time.Minute, 10*time.Second)
	w := fleettest.Worker("w", contract.Healthy)
	hs.record(&w, fleettest.T0.UnixMilli())
	assert.Equal(t, 1, cap(hs.byID["w"].chunks), "a worker seen once costs one chunk of 8 slots, not 180")
	for i := 1; i < 500; i++ {
		hs.record(&w, fleettest.T0.Add(time.Duration(i)*10*time.Second).UnixMilli())
		assert.LessOrEqual(t, cap(hs.byID["w"].chunks), 23)
	}
	assert.Equal(t, 180, hs.byID["w"].n)
}

func TestHistoryTransitions(t *testing.T) {
	hs := New(30*time.Minute, 10*time.Second)
	w := fleettest.Worker("w", contract.Unknown)
	w.Since = contract.TimeOf(fleettest.T0.Add(-time.Hour))
	hs.record(&w, fleettest.T0.UnixMilli())

	// The processor says the state began before the snapshot that shows it.
	w.State, w.Since = contract.Unhealthy, contract.TimeOf(fleettest.T0.Add(17*time.Second))
	w.Reasons = []contract.Reason{
		{Code: "memory_over_soft_limit", Value: 600, Threshold: 500},
		{Code: "kills_in_window", Value: 3, Threshold: 2},
		{Code: "drift_missing", Value: 1, Threshold: 0},
		{Code: "over_capacity", Value: 1, Threshold: 0},
	}
	hs.record(&w, fleettest.T0.Add(20*time.Second).UnixMilli())
	hs.record(&w, fleettest.T0.Add(30*time.Second).UnixMilli()) // no change, no transition

	ws := hs.Series("w", time.Time{})
	require.Len(t, ws.Transitions, 2)
	first, second := ws.Transitions[0], ws.Transitions[1]
	assert.Equal(t, uint8(0), first.From, "first seen")
	assert.Equal(t, contract.Unknown, StateOf(first.To))
	assert.Equal(t, fleettest.T0.Add(-time.Hour).UnixMilli(), first.At, "the state began when the processor says")
	assert.Equal(t, contract.Unknown, StateOf(second.From))
	assert.Equal(t, contract.Unhealthy, StateOf(second.To))
	assert.Equal(t, fleettest.T0.Add(17*time.Second).UnixMilli(), second.At, "at the processor's Since")
	require.Equal(t, uint8(TransitionReasons), second.NReasons, "at most three reasons")
	assert.Equal(t, "memory_over_soft_limit", second.Reasons[0].Code)
	assert.InDelta(t, 600.0, second.Reasons[0].Value, 0)

	// The ring keeps the last 16; the last one is kept even when it is older
	// than the window, because it explains the current state.
	for i := range 40 {
		w.State = contract.AllStates[i%2]
		w.Since = contract.TimeOf(time.Time{})
		hs.record(&w, fleettest.T0.Add(time.Duration(40+i)*time.Second).UnixMilli())
	}
	all := hs.Series("w", time.Time{}).Transitions
	require.Len(t, all, Transitions)
	assert.Equal(t, fleettest.T0.Add(79*time.Second).UnixMilli(), all[Transitions-1].At, "newest last")
	assert.Equal(t, fleettest.T0.Add(64*time.Second).UnixMilli(), all[0].At)
	late := hs.Series("w", fleettest.T0.Add(time.Hour)).Transitions
	require.Len(t, late, 1)
	assert.Equal(t, fleettest.T0.Add(79*time.Second).UnixMilli(), late[0].At)
}

func TestHistoryRoles(t *testing.T) {
	hs := New(30*time.Minute, 10*time.Second)
	w := fleettest.Worker("w", contract.Healthy)
	for i, r := range []string{"child", "main", "npm", "runner", "extra"} {
		w.Memory.Roles = append(w.Memory.Roles, contract.RoleMemory{Role: r, RSSBytes: int64(i+1) << 20, SoftLimitBytes: int64(i+1) << 21})
	}
	hs.record(&w, fleettest.T0.UnixMilli())
	ws := hs.Series("w", time.Time{})
	assert.Equal(t, []string{"child", "main", "npm", "runner"}, ws.Roles, "four role slots; a fifth role is left out")
	s := ws.Samples[0]
	assert.Equal(t, uint8(0b1111), s.RoleMask)
	assert.Equal(t, uint32(2<<10), s.RoleRSS[1])
	assert.Equal(t, uint32(4<<10), s.RoleSoft[1])

	// A later sample without a role: its bit is clear, nothing is drawn for it.
	w.Memory.Roles = w.Memory.Roles[1:2]
	hs.record(&w, fleettest.T0.Add(10*time.Second).UnixMilli())
	assert.Equal(t, uint8(0b10), hs.Series("w", time.Time{}).Samples[1].RoleMask)
}

// TestHistoryMemory measures what the history costs per worker at 10,000
// workers with every ring full (issue 16: <= 16 KiB for 30 minutes at 10 s;
// issue 24, samples packed: <= 6 KiB): 180 samples with four roles, 16
// transitions with three reasons each.
//
//	go test -run TestHistoryMemory -v ./extension/workerhealthextension/internal/history/
func TestHistoryMemory(t *testing.T) {
	const n = 10_000
	hs := New(30*time.Minute, 10*time.Second)
	ws := make([]contract.Worker, n)
	for i := range ws {
		w := fleettest.Worker(fmt.Sprintf("openfn-worker-%05d", i), contract.Healthy)
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
		at := fleettest.T0.Add(time.Duration(step) * 10 * time.Second).UnixMilli()
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
	for _, h := range hs.byID {
		require.Equal(t, hs.size, h.n)
		require.Len(t, h.trans, Transitions)
	}
	// The same samples as the ring held them before they were packed
	// (issue 24): 64 bytes a slot, in the same run for the ratio.
	plain := make([][]Sample, 0, n)
	runtime.GC()
	runtime.ReadMemStats(&before)
	for _, h := range hs.byID {
		plain = append(plain, h.inTimeOrder(hs.size))
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	plainSamples := float64(after.HeapAlloc-before.HeapAlloc) / n
	var packed float64
	for _, h := range hs.byID {
		packed += float64(h.chunkBytes())
	}
	packed /= n
	t.Logf("history of %d workers with full rings: %.0f bytes per worker (%.1f KiB), %.1f MiB in all; "+
		"samples packed %.0f bytes per worker against %.0f as 64-byte slots (%.2fx smaller); history per worker with slots %.1f KiB (%.2fx)",
		n, perWorker, perWorker/1024, perWorker*n/(1<<20), packed, plainSamples, plainSamples/packed,
		(perWorker-packed+plainSamples)/1024, (perWorker-packed+plainSamples)/perWorker)
	assert.LessOrEqual(t, perWorker, 6.0*1024)
	runtime.KeepAlive(plain)
	runtime.KeepAlive(ids)
}

// BenchmarkRecord is one step of 1,000 workers' histories (one role each),
// rings full after the first 180 iterations: what the drain goroutine adds
// per evaluation (docs/results/density.md).
func BenchmarkRecord(b *testing.B) {
	hs := New(30*time.Minute, 10*time.Second)
	w := fleettest.Worker("w", contract.Healthy)
	w.Memory.Roles = []contract.RoleMemory{{Role: "main", RSSBytes: 100 << 20}}
	ws := make([]contract.Worker, 1000)
	for i := range ws {
		ws[i] = w
		ws[i].ID = strconv.Itoa(i)
	}
	b.ResetTimer()
	for step := 0; step < b.N; step++ {
		at := fleettest.T0.Add(time.Duration(step) * 10 * time.Second).UnixMilli()
		for j := range ws {
			ws[j].Memory.RSSBytes += 4096
			hs.record(&ws[j], at)
		}
	}
}
