package workerhealthprocessor

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

type driftWant struct {
	missing, orphaned []string
}

func (h *harness) drift(id string) driftWant {
	w := h.worker(id)
	return driftWant{missing: append([]string{}, w.missing...), orphaned: append([]string{}, w.orphaned...)}
}

func TestDrift(t *testing.T) {
	sec := time.Second
	none := driftWant{missing: []string{}, orphaned: []string{}}
	type dstep struct {
		do      func(h *harness)
		advance time.Duration
		want    driftWant
	}
	wClaim := func(run string) func(*harness) {
		return func(h *harness) { h.logs(wl("w1", "workerwatch.run.claimed", run, nil)) }
	}
	wFinish := func(run string) func(*harness) {
		return func(h *harness) {
			h.logs(wl("w1", "workerwatch.run.finished", run, map[string]any{"cicd.pipeline.result": "success"}))
		}
	}
	sClaim := func(run string) func(*harness) {
		return func(h *harness) { h.logs(sl("w1", "workerwatch.run.claimed", run)) }
	}
	sFinish := func(run string) func(*harness) {
		return func(h *harness) { h.logs(sl("w1", "workerwatch.run.finished", run)) }
	}
	schedAlive := func(h *harness) { h.metrics(pendingMetrics(0)) }
	active := func(n int64) func(*harness) {
		return func(h *harness) { h.metrics(activeMetrics(n)) }
	}

	tests := []struct {
		name  string
		runs  int // distinct runs claimed (default 1)
		steps []dstep
	}{
		{
			name: "missing after the grace period, cleared when the worker claims",
			steps: []dstep{
				{do: both(hb, sClaim("r1")), advance: 2 * sec, want: none},
				{do: hb, advance: 2 * sec, want: driftWant{missing: []string{"r1"}, orphaned: []string{}}},
				{do: wClaim("r1"), advance: sec, want: none},
			},
		},
		{
			name: "orphaned after the grace period while the scheduler reports",
			steps: []dstep{
				// The scheduler knows w1 (it assigned and ended r1 earlier).
				{do: both(schedAlive, sClaim("r1"), sFinish("r1"), wClaim("r2")), advance: 3 * sec, want: driftWant{missing: []string{}, orphaned: []string{"r2"}}},
				{do: both(schedAlive, sFinish("r2"), wFinish("r2")), advance: sec, want: none},
			},
		},
		{
			// The worker was killed and restarted: its runs' end events never
			// came. Its own active count (0, then 1) lets go of the phantoms,
			// oldest first, once the disagreement outlasts the grace period.
			name: "runs the worker no longer counts are let go after the grace period",
			runs: 2,
			steps: []dstep{
				{do: both(sClaim("r2"), wClaim("r2")), advance: sec, want: none},
				{do: both(sClaim("r3"), wClaim("r3"), active(2)), advance: sec, want: none},
				// Its count drops to 1: not yet longer than the grace period.
				{do: active(1), advance: 2 * sec, want: none},
				{do: active(1), advance: 2 * sec, want: none},
				// Now it is: r2 (the oldest) is let go; the scheduler still
				// lists it, which becomes "missing" after its own grace.
				{do: active(1), advance: 3 * sec, want: none},
				// A count that matches changes nothing more.
				{do: active(1), advance: 4 * sec, want: driftWant{missing: []string{"r2"}, orphaned: []string{}}},
			},
		},
		{
			// A worker that makes its own work (or is scheduled elsewhere)
			// has no scheduler view to disagree with.
			name: "no orphans for a worker the scheduler never named",
			steps: []dstep{
				{do: both(schedAlive, wClaim("r2")), advance: 4 * sec, want: none},
			},
		},
		{
			name: "no orphans without any scheduler telemetry",
			steps: []dstep{
				{do: wClaim("r2"), advance: 4 * sec, want: none},
			},
		},
		{
			name: "late scheduler claim within the grace period is not drift",
			steps: []dstep{
				{do: both(schedAlive, wClaim("r1")), advance: 2 * sec, want: none},
				{do: sClaim("r1"), advance: 5 * sec, want: none},
			},
		},
		{
			name: "a finish the scheduler learns late is not drift; grace counts from the worker's end",
			steps: []dstep{
				{do: both(sClaim("r1"), wClaim("r1")), advance: 10 * sec, want: none},
				{do: wFinish("r1"), advance: 2 * sec, want: none},
				{do: sFinish("r1"), advance: 5 * sec, want: none},
			},
		},
		{
			name: "duplicated events are idempotent",
			steps: []dstep{
				{do: both(sClaim("r1"), sClaim("r1"), wClaim("r1"), wClaim("r1")), advance: 5 * sec, want: none},
				{do: both(wFinish("r1"), wFinish("r1"), sFinish("r1"), sFinish("r1")), advance: 5 * sec, want: none},
			},
		},
		{
			name: "reordered: end before claim on both sides leaves nothing held",
			steps: []dstep{
				{do: both(schedAlive, wFinish("r1"), wClaim("r1"), sFinish("r1"), sClaim("r1")), advance: 5 * sec, want: none},
			},
		},
		{
			name: "a late duplicate claim long after the end does not resurrect the run",
			steps: []dstep{
				{do: both(sClaim("r1"), wClaim("r1"), wFinish("r1"), sFinish("r1")), advance: 20 * sec, want: none},
				{do: both(sClaim("r1"), wClaim("r1")), advance: 5 * sec, want: none},
			},
		},
		{
			name: "a release on both sides ends the run",
			steps: []dstep{
				{do: both(sClaim("r1"), wClaim("r1")), advance: sec, want: none},
				{do: func(h *harness) {
					h.logs(wl("w1", "workerwatch.run.released", "r1", nil))
					h.logs(sl("w1", "workerwatch.run.released", "r1"))
				}, advance: 5 * sec, want: none},
			},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testCfg()
			cfg.Lost.After = time.Minute
			h := newHarness(t, cfg)
			for i, s := range tt.steps {
				if s.do != nil {
					s.do(h)
				}
				h.advance(s.advance)
				h.eval()
				require.Equal(t, s.want, h.drift("w1"), "step %d", i)
			}
			w := h.worker("w1")
			runs := int64(max(tt.runs, 1))
			assert.LessOrEqual(t, w.claims[srcWorker], runs, "a run is claimed once")
			assert.LessOrEqual(t, w.claims[srcScheduler], runs)
		})
	}
}

func TestDriftDegradesAndRecovers(t *testing.T) {
	cfg := testCfg()
	cfg.Lost.After = time.Minute
	h := newHarness(t, cfg)
	hb(h)
	h.logs(sl("w1", "workerwatch.run.claimed", "r1"))
	h.advance(4 * time.Second)
	h.eval()
	require.Equal(t, degraded, h.state("w1"))
	require.Contains(t, h.codes("w1"), codeMissing)
	h.logs(sl("w1", "workerwatch.run.released", "r1"))
	h.eval()
	h.eval()
	require.Equal(t, healthy, h.state("w1"))
}

func TestFleetIdleWhilePending(t *testing.T) {
	cfg := testCfg()
	cfg.Capacity.Default = 2
	cfg.Stalled.After = 0
	h := newHarness(t, cfg)
	// 5 evaluations: a records-only worker counts in the fleet from its
	// third interval (admission.go), then fleet.idle_intervals (3).
	for i := 0; i < 5; i++ {
		hb(h)
		h.metrics(pendingMetrics(3))
		h.eval()
		h.advance(time.Second)
	}
	h.p.mu.Lock()
	defer h.p.mu.Unlock()
	snap := h.p.tracker.snapshot(h.clock.Now().UnixNano())
	assert.True(t, snap.Fleet.IdleWhilePending)
	assert.Equal(t, int64(2), snap.Fleet.IdleCapacity)
	assert.Equal(t, int64(3), snap.Fleet.Pending)
}
