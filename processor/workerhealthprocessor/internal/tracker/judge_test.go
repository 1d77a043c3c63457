package tracker

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/workerwatch/workerwatch/internal/contract"
	"github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/state"
)

// The judgement rules of issue 12, each as a step table: every case fails
// against the judgement before it (commit 2341973), as noted per case.

const sec = time.Second

// TestTruthTable walks docs/health-rules.md, "Which evidence makes which
// state", row by row: each case holds exactly its row's evidence and checks
// the state and the reasons listed (every rule that holds, worst first; a
// lost worker's only reason is its silence). Row 2 (restored evidence
// enough for unhealthy) is TestRestoreAfterRestart's w2.
func TestTruthTable(t *testing.T) {
	// The stalled rule on free capacity alone, within 3 s.
	stallFast := func(c *testConfig) { c.Stalled.After = 3 * sec; c.Stalled.RequirePending = false }
	// A sample of w1's tree: memory (1000 is the soft limit) and the main
	// process's share of its 4 CPUs (0.25 = one full core: saturated).
	sample := func(mem int64, cpu float64) func(*harness) {
		return both(hb, func(h *harness) { h.metrics(treeMetrics("w1", mem, cpu, 1)) })
	}
	codes := func(want ...string) func(*harness) {
		return func(h *harness) { assert.Equal(h.t, want, h.codes("w1")) }
	}
	runSteps(t, []stepCase{
		{
			name: "row 1: no sign of life for lost.after: lost, whatever else held",
			cfg:  stallFast,
			steps: seq(
				repeat(3, step{do: sample(1200, 0.25), advance: sec}),
				step{want: unhealthy},
				step{advance: 5 * sec, want: lost, check: codes(state.CodeNoTelemetry)},
			),
		},
		{
			name: "row 3: a sign of life (a claims-only scheduler's claims) and nothing of its own: unknown, not lost",
			cfg:  func(c *testConfig) { stallFast(c); c.Scheduler.View = contract.ViewClaimsOnly },
			steps: seq(
				step{do: func(h *harness) { h.logs(sl("w1", "workerwatch.run.claimed", "r0")) }, advance: sec},
				repeat(8, step{do: func(h *harness) { h.logs(sl("w1", "workerwatch.run.claimed", fmt.Sprintf("r%d", autoRun.Add(1)))) }, advance: sec}),
				step{want: unknown, check: codes(state.CodeNotReported)},
			),
		},
		{
			name: "row 4: a memory latch with the stalled rule and a saturated CPU: unhealthy, every reason listed worst first",
			cfg:  stallFast,
			steps: seq(
				repeat(2, step{do: sample(1200, 0.25), advance: sec}),
				step{do: sample(1200, 0.25), advance: sec, want: unhealthy, check: codes(state.CodeMemory, state.CodeNoClaim, state.CodeCPU)},
			),
		},
		{
			name: "row 5: the stalled rule and a saturated CPU, no latch: stalled, the degraded reason listed",
			cfg:  stallFast,
			steps: seq(
				repeat(2, step{do: sample(100, 0.25), advance: sec}),
				step{do: sample(100, 0.25), advance: sec, want: stalled, check: codes(state.CodeNoClaim, state.CodeCPU)},
			),
		},
		{
			name: "row 6: a saturated CPU, no latch, nothing pending: degraded",
			steps: seq(
				repeat(2, step{do: sample(100, 0.25), advance: sec}),
				step{do: sample(100, 0.25), advance: sec, want: degraded, check: codes(state.CodeCPU)},
			),
		},
		{
			name:  "row 7: nothing holds: healthy, no reason",
			steps: seq(repeat(6, step{do: sample(100, 0.01), advance: sec, want: healthy, check: codes()})),
		},
	})
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
	snap := h.p.tracker.Snapshot(h.clock.Now().UnixNano())
	assert.True(t, snap.Fleet.IdleWhilePending)
	assert.Equal(t, int64(2), snap.Fleet.IdleCapacity)
	assert.Equal(t, int64(3), snap.Fleet.Pending)
}

// TestStaleEvaluationIsNoPause: an evaluation whose time is older than the
// last one's (two evaluations racing, one of which read the clock before it
// waited for the lock) must not move the last evaluation back, or the next
// one measures a gap that never was and restarts the lost clock: found by a
// fresh CI run, where TestRestoredSilenceCountsFromTheRestore's worker stayed
// unknown.
func TestStaleEvaluationIsNoPause(t *testing.T) {
	c := testCfg()
	c.EmitInterval = time.Second
	h := newHarness(t, c)
	h.metrics(treeMetrics("w1", 100, -1, 1))
	h.eval()
	stale := h.clock.Now().UnixNano()
	for range 4 {
		h.advance(sec)
		h.eval()
	}
	h.p.mu.Lock()
	_, _ = h.p.tracker.evaluate(stale) // 4 s late
	h.p.mu.Unlock()
	h.advance(2 * sec) // 6 s of silence, lost.after 5 s
	h.eval()
	h.p.mu.Lock()
	pause := h.p.tracker.TakePause()
	h.p.mu.Unlock()
	assert.Zero(t, pause, "no pause: the evaluations were never more than 2 s apart")
	assert.Equal(t, contract.Lost, h.state("w1"), "the silence counts")
}

// A pause of the collector's own (a VM paused, the process starved): the
// first evaluation after it finds every worker silent for the whole gap,
// though the workers' records only wait in the senders' queues. Silence
// counts from the resume, as from a restore; the same silence witnessed by
// evaluations on time is `lost` (and a missing claim `stalled`) as always.
func TestPauseIsNoSilence(t *testing.T) {
	everySecond := func(c *testConfig) { c.EmitInterval = time.Second }
	pending := func(h *harness) { h.metrics(pendingMetrics(5)) }
	paused := func(want time.Duration) func(h *harness) {
		return func(h *harness) {
			h.p.mu.Lock()
			defer h.p.mu.Unlock()
			assert.Equal(h.t, int64(want), h.p.tracker.TakePause(), "the pause, for the processor's log")
		}
	}
	runSteps(t, []stepCase{
		{
			name: "lost counts from the resume",
			cfg:  everySecond,
			steps: seq(
				repeat(3, step{do: hb, advance: sec, want: healthy}),
				// Evaluated 20 s after the last one: lost.after (5 s)
				// passed while the collector was not running.
				step{advance: 20 * sec, want: healthy, check: paused(20 * sec)},
				repeat(4, step{advance: sec, want: healthy, check: paused(0)}),
				step{advance: sec, want: lost, code: state.CodeNoTelemetry},
			),
		},
		{
			name: "the same silence, witnessed, is lost",
			cfg:  everySecond,
			steps: seq(
				repeat(3, step{do: hb, advance: sec, want: healthy}), // silent for 1 s at the last
				repeat(3, step{advance: sec, want: healthy}),
				step{advance: sec, want: lost, code: state.CodeNoTelemetry, check: paused(0)},
			),
		},
		{
			name: "a gap shorter than three intervals and half of lost.after is no pause",
			cfg:  everySecond,
			steps: seq(
				repeat(3, step{do: hb, advance: sec, want: healthy}),
				step{advance: 2 * sec, want: healthy, check: paused(0)},
				step{advance: 2 * sec, want: lost, check: paused(0)},
			),
		},
		{
			name: "stalled counts from the resume",
			cfg:  everySecond,
			steps: seq(
				repeat(5, step{do: both(hb, pending), advance: sec, want: healthy}),
				step{do: both(hb, pending), advance: 20 * sec, want: healthy, check: paused(20 * sec)},
				repeat(9, step{do: both(hb, pending), advance: sec, want: healthy}),
				step{do: both(hb, pending), advance: sec, want: stalled, code: state.CodeNoClaim},
			),
		},
	})
}

func TestRules(t *testing.T) {
	sec := time.Second
	tests := []stepCase{
		{
			name: "unknown until the first evaluation, then healthy",
			steps: []step{
				{do: func(h *harness) {
					hb(h)
					require.Equal(h.t, unknown, h.state("w1"))
				}, want: healthy, noCode: state.CodeMemory},
			},
		},
		{
			name: "memory over the soft limit: degraded, then unhealthy after 3 samples, recovers after 3 low samples and 2 evaluations",
			steps: seq(
				step{do: mem(1200), advance: sec, want: degraded, code: state.CodeMemory},
				step{do: mem(1200), advance: sec, want: degraded, code: state.CodeMemory},
				step{do: mem(1200), advance: sec, want: unhealthy, code: state.CodeMemory},
				step{do: mem(500), advance: sec, want: unhealthy, code: state.CodeMemory},
				step{do: mem(500), advance: sec, want: unhealthy},
				step{do: mem(500), advance: sec, want: unhealthy, code: state.CodeRecovering}, // latch cleared, hysteresis 1/2
				step{do: mem(500), advance: sec, want: healthy, noCode: state.CodeMemory},
			),
		},
		{
			name: "memory flapping at the limit never reaches unhealthy and does not flap the state",
			steps: seq(repeat(5, []step{
				{do: mem(1200), advance: sec, want: degraded, code: state.CodeMemory},
				{do: mem(980), advance: sec, want: degraded, code: state.CodeRecovering},
			})),
			maxTransitions: 1,
		},
		{
			name: "unhealthy memory does not recover while samples alternate",
			steps: seq(
				repeat(3, step{do: mem(1500), advance: sec}),
				repeat(6, step{do: both(mem(500), mem(1500)), advance: sec, want: unhealthy, code: state.CodeMemory}),
			),
			maxTransitions: 2,
		},
		{
			name: "over the soft limit when a run starts: unhealthy at once (Scoot), and it recovers",
			steps: seq(
				step{do: mem(1200), advance: sec, want: degraded},
				step{do: func(h *harness) { h.logs(wl("w1", "workerwatch.run.started", "r1", nil)) }, advance: sec, want: unhealthy, code: state.CodeMemoryAtStart},
				repeat(3, step{do: mem(100), advance: sec}),
				step{do: mem(100), advance: sec, want: healthy},
			),
		},
		{
			name: "soft limit as a ratio of the cgroup limit",
			cfg:  func(c *testConfig) { c.Memory.SoftLimitBytes = 0; c.Memory.SoftLimitRatio = 0.9 },
			steps: seq(
				step{do: func(h *harness) {
					md := treeMetrics("w1", 950, -1, 1)
					m := md.ResourceMetrics().At(0).ScopeMetrics().At(0).Metrics().AppendEmpty()
					m.SetName("workerwatch.cgroup.memory.max")
					m.SetEmptyGauge().DataPoints().AppendEmpty().SetIntValue(1000)
					h.metrics(md)
				}, advance: sec, want: degraded, code: state.CodeMemory},
				repeat(2, step{do: mem(950), advance: sec}),
				step{want: unhealthy, code: state.CodeMemory},
			),
		},
		{
			name: "over the soft limit for a duration",
			cfg:  func(c *testConfig) { c.Memory.UnhealthySamples = 100; c.Memory.UnhealthyAfter = 5 * time.Second },
			steps: seq(
				step{do: mem(1200), advance: 3 * sec, want: degraded},
				step{do: hb, advance: 3 * sec, want: unhealthy, code: state.CodeMemory},
			),
		},
		{
			name: "K kills that count within the window: unhealthy; recovers when the window passes",
			cfg:  func(c *testConfig) { c.Lost.After = 2 * time.Minute; c.Limits.WorkerTTL = time.Hour },
			steps: seq(
				step{do: kill("r1", "oom"), advance: sec, want: healthy},
				step{do: kill("r2", "canceled"), advance: sec, want: healthy},
				step{do: kill("r3", "crash"), advance: sec, want: healthy},
				step{do: kill("r4", "timeout"), advance: sec, want: healthy},
				step{do: kill("r5", "oom"), advance: sec, want: unhealthy, code: state.CodeKills},
				step{do: hb, advance: 30 * sec, want: unhealthy, code: state.CodeKills},
				step{do: hb, advance: 30 * sec, want: unhealthy, code: state.CodeRecovering},
				step{do: hb, advance: sec, want: healthy, noCode: state.CodeKills},
			),
		},
		{
			name:  "runs killed by their own limits never make the worker unhealthy",
			cfg:   func(c *testConfig) { c.Lost.After = 2 * time.Minute; c.Limits.WorkerTTL = time.Hour },
			steps: seq(repeat(20, step{do: both(kill("", "timeout"), kill("", "memory_limit")), advance: sec, want: healthy, noCode: state.CodeKills})),
		},
		{
			name: "main process CPU-saturated (one full core of 4) for 3 samples: degraded; recovers",
			steps: seq(
				step{do: cpu(0.24), advance: sec, want: healthy},
				step{do: cpu(0.25), advance: sec, want: healthy},
				step{do: cpu(0.25), advance: sec, want: degraded, code: state.CodeCPU},
				step{do: cpu(0.2), advance: sec, want: degraded}, // between recovery and saturation: holds
				repeat(3, step{do: cpu(0.1), advance: sec}),
				step{do: cpu(0.1), advance: sec, want: healthy},
			),
		},
		{
			name: "stalled: alive, work pending, no claim for T; a claim recovers it",
			steps: seq(
				step{do: both(hb, func(h *harness) { h.metrics(pendingMetrics(5)) }), advance: sec, want: healthy},
				repeat(8, step{do: both(hb, func(h *harness) { h.metrics(pendingMetrics(5)) }), advance: sec}),
				step{do: hb, advance: sec, want: stalled, code: state.CodeNoClaim},
				step{do: func(h *harness) {
					h.logs(sl("w1", "workerwatch.run.claimed", "r1"))
					h.logs(wl("w1", "workerwatch.run.claimed", "r1", nil))
				}, advance: sec, want: stalled, code: state.CodeRecovering},
				step{do: hb, advance: sec, want: healthy},
			),
		},
		{
			name:  "not stalled without pending work",
			steps: seq(repeat(15, step{do: hb, advance: sec, want: healthy})),
		},
		{
			name:  "stalled on free capacity alone when require_pending is false",
			cfg:   func(c *testConfig) { c.Stalled.RequirePending = false },
			steps: seq(repeat(10, step{do: hb, advance: sec}), step{do: hb, want: stalled, code: state.CodeNoClaim}),
		},
		{
			name: "lost: no telemetry and no live process for T; back when it reports",
			steps: seq(
				// Seen in three intervals: a worker seen once and not again
				// within lost.after is forgotten instead (admission.go).
				step{do: hb, advance: sec, want: healthy},
				step{do: hb, advance: sec, want: healthy},
				step{do: hb, advance: 4 * sec, want: healthy},
				step{advance: 2 * sec, want: lost, code: state.CodeNoTelemetry},
				step{do: hb, advance: sec, want: lost, code: state.CodeRecovering},
				step{do: hb, advance: sec, want: healthy},
			),
		},
		{
			name: "a process that is gone (present=0) does not keep the worker alive",
			steps: seq(
				step{do: mem(100), advance: sec, want: healthy},
				repeat(5, step{do: func(h *harness) { h.metrics(treeMetrics("w1", 0, -1, 0)) }, advance: sec}),
				step{want: lost, code: state.CodeNoTelemetry},
			),
		},
		{
			name: "a worker only the scheduler names: unknown, then lost",
			steps: seq(
				step{do: func(h *harness) { h.logs(sl("w1", "workerwatch.run.claimed", "r1")) }, advance: sec, want: unknown, code: state.CodeNotReported},
				step{advance: 5 * sec, want: lost, code: state.CodeNoTelemetry},
			),
		},
		{
			name: "over capacity once it lasts the grace period",
			steps: seq(
				step{do: func(h *harness) {
					h.logs(wl("w1", "workerwatch.worker.heartbeat", "", map[string]any{"workerwatch.worker.capacity": 1}))
					for _, r := range []string{"r1", "r2"} {
						h.logs(sl("w1", "workerwatch.run.claimed", r))
						h.logs(wl("w1", "workerwatch.run.claimed", r, nil))
					}
				}, advance: sec, want: healthy},
				step{do: hb, advance: 3 * sec, want: degraded, code: state.CodeOverCapacity},
				step{do: func(h *harness) {
					h.logs(wl("w1", "workerwatch.run.finished", "r2", map[string]any{"cicd.pipeline.result": "success"}))
					h.logs(sl("w1", "workerwatch.run.finished", "r2"))
				}, advance: sec, want: degraded, code: state.CodeRecovering},
				step{do: hb, advance: sec, want: healthy},
			),
		},
	}
	runSteps(t, tests)
}
