package workerhealthprocessor

import (
	"cmp"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/workerwatch/workerwatch/internal/contract"
)

const (
	unknown   = contract.Unknown
	healthy   = contract.Healthy
	degraded  = contract.Degraded
	unhealthy = contract.Unhealthy
	stalled   = contract.Stalled
	lost      = contract.Lost
)

// step: feed input, let time pass, evaluate, check the state and reasons.
type step struct {
	do      func(h *harness)
	advance time.Duration
	want    contract.State
	code    string // a reason code that must be present ("" = none checked)
	noCode  string // a reason code that must be absent
	// check runs last, for anything else the step asserts.
	check func(h *harness)
	// id is the worker the step checks ("" = w1).
	id string
}

// stepCase is one step-table case.
type stepCase struct {
	name  string
	cfg   func(*Config)
	steps []step
	// maxTransitions bounds how often the state may change (flapping).
	maxTransitions int
}

// runSteps runs step-table cases: each step feeds its input, lets time pass,
// evaluates and checks.
func runSteps(t *testing.T, tests []stepCase) {
	t.Helper()
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testCfg()
			if tt.cfg != nil {
				tt.cfg(cfg)
			}
			h := newHarness(t, cfg)
			transitions := 0
			for i, s := range tt.steps {
				if s.do != nil {
					s.do(h)
				}
				h.advance(s.advance)
				transitions += len(h.eval())
				id := cmp.Or(s.id, "w1")
				if s.want != "" {
					require.Equal(t, s.want, h.state(id), "step %d: reasons %v", i, h.codes(id))
				}
				if s.code != "" {
					assert.Contains(t, h.codes(id), s.code, "step %d", i)
				}
				if s.noCode != "" {
					assert.NotContains(t, h.codes(id), s.noCode, "step %d", i)
				}
				if s.check != nil {
					s.check(h)
				}
			}
			if tt.maxTransitions > 0 {
				assert.LessOrEqual(t, transitions, tt.maxTransitions, "the state flapped")
			}
		})
	}
}

func hb(h *harness) { h.logs(wl("w1", "workerwatch.worker.heartbeat", "", nil)) }
func mem(n int64) func(*harness) {
	return func(h *harness) { h.metrics(treeMetrics("w1", n, -1, 1)) }
}

func cpu(fraction float64) func(*harness) {
	return func(h *harness) { h.metrics(treeMetrics("w1", 100, fraction, 1)) }
}

// autoRun numbers runs for steps that need a new run each time.
var autoRun atomic.Int64

func kill(run, reason string) func(*harness) {
	return func(h *harness) {
		id := run
		if id == "" {
			id = fmt.Sprintf("auto-%d", autoRun.Add(1))
		}
		h.logs(wl("w1", "workerwatch.run.claimed", id, nil))
		h.logs(wl("w1", "workerwatch.run.killed", id, map[string]any{"workerwatch.kill.reason": reason, "cicd.pipeline.result": "error"}))
	}
}

func both(fs ...func(*harness)) func(*harness) {
	return func(h *harness) {
		for _, f := range fs {
			f(h)
		}
	}
}

func repeat[T any](n int, s T) []T {
	out := make([]T, n)
	for i := range out {
		out[i] = s
	}
	return out
}

func seq(parts ...any) []step {
	var out []step
	for _, p := range parts {
		switch x := p.(type) {
		case step:
			out = append(out, x)
		case []step:
			out = append(out, x...)
		case [][]step:
			for _, y := range x {
				out = append(out, y...)
			}
		}
	}
	return out
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
				}, want: healthy, noCode: codeMemory},
			},
		},
		{
			name: "memory over the soft limit: degraded, then unhealthy after 3 samples, recovers after 3 low samples and 2 evaluations",
			steps: seq(
				step{do: mem(1200), advance: sec, want: degraded, code: codeMemory},
				step{do: mem(1200), advance: sec, want: degraded, code: codeMemory},
				step{do: mem(1200), advance: sec, want: unhealthy, code: codeMemory},
				step{do: mem(500), advance: sec, want: unhealthy, code: codeMemory},
				step{do: mem(500), advance: sec, want: unhealthy},
				step{do: mem(500), advance: sec, want: unhealthy, code: codeRecovering}, // latch cleared, hysteresis 1/2
				step{do: mem(500), advance: sec, want: healthy, noCode: codeMemory},
			),
		},
		{
			name: "memory flapping at the limit never reaches unhealthy and does not flap the state",
			steps: seq(repeat(5, []step{
				{do: mem(1200), advance: sec, want: degraded, code: codeMemory},
				{do: mem(980), advance: sec, want: degraded, code: codeRecovering},
			})),
			maxTransitions: 1,
		},
		{
			name: "unhealthy memory does not recover while samples alternate",
			steps: seq(
				repeat(3, step{do: mem(1500), advance: sec}),
				repeat(6, step{do: both(mem(500), mem(1500)), advance: sec, want: unhealthy, code: codeMemory}),
			),
			maxTransitions: 2,
		},
		{
			name: "over the soft limit when a run starts: unhealthy at once (Scoot), and it recovers",
			steps: seq(
				step{do: mem(1200), advance: sec, want: degraded},
				step{do: func(h *harness) { h.logs(wl("w1", "workerwatch.run.started", "r1", nil)) }, advance: sec, want: unhealthy, code: codeMemoryAtStart},
				repeat(3, step{do: mem(100), advance: sec}),
				step{do: mem(100), advance: sec, want: healthy},
			),
		},
		{
			name: "soft limit as a ratio of the cgroup limit",
			cfg:  func(c *Config) { c.Memory.SoftLimitBytes = 0; c.Memory.SoftLimitRatio = 0.9 },
			steps: seq(
				step{do: func(h *harness) {
					md := treeMetrics("w1", 950, -1, 1)
					m := md.ResourceMetrics().At(0).ScopeMetrics().At(0).Metrics().AppendEmpty()
					m.SetName("workerwatch.cgroup.memory.max")
					m.SetEmptyGauge().DataPoints().AppendEmpty().SetIntValue(1000)
					h.metrics(md)
				}, advance: sec, want: degraded, code: codeMemory},
				repeat(2, step{do: mem(950), advance: sec}),
				step{want: unhealthy, code: codeMemory},
			),
		},
		{
			name: "over the soft limit for a duration",
			cfg:  func(c *Config) { c.Memory.UnhealthySamples = 100; c.Memory.UnhealthyAfter = 5 * time.Second },
			steps: seq(
				step{do: mem(1200), advance: 3 * sec, want: degraded},
				step{do: hb, advance: 3 * sec, want: unhealthy, code: codeMemory},
			),
		},
		{
			name: "K kills that count within the window: unhealthy; recovers when the window passes",
			cfg:  func(c *Config) { c.Lost.After = 2 * time.Minute; c.Limits.WorkerTTL = time.Hour },
			steps: seq(
				step{do: kill("r1", "oom"), advance: sec, want: healthy},
				step{do: kill("r2", "canceled"), advance: sec, want: healthy},
				step{do: kill("r3", "crash"), advance: sec, want: healthy},
				step{do: kill("r4", "timeout"), advance: sec, want: healthy},
				step{do: kill("r5", "oom"), advance: sec, want: unhealthy, code: codeKills},
				step{do: hb, advance: 30 * sec, want: unhealthy, code: codeKills},
				step{do: hb, advance: 30 * sec, want: unhealthy, code: codeRecovering},
				step{do: hb, advance: sec, want: healthy, noCode: codeKills},
			),
		},
		{
			name:  "runs killed by their own limits never make the worker unhealthy",
			cfg:   func(c *Config) { c.Lost.After = 2 * time.Minute; c.Limits.WorkerTTL = time.Hour },
			steps: seq(repeat(20, step{do: both(kill("", "timeout"), kill("", "memory_limit")), advance: sec, want: healthy, noCode: codeKills})),
		},
		{
			name: "main process CPU-saturated (one full core of 4) for 3 samples: degraded; recovers",
			steps: seq(
				step{do: cpu(0.24), advance: sec, want: healthy},
				step{do: cpu(0.25), advance: sec, want: healthy},
				step{do: cpu(0.25), advance: sec, want: degraded, code: codeCPU},
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
				step{do: hb, advance: sec, want: stalled, code: codeNoClaim},
				step{do: func(h *harness) {
					h.logs(sl("w1", "workerwatch.run.claimed", "r1"))
					h.logs(wl("w1", "workerwatch.run.claimed", "r1", nil))
				}, advance: sec, want: stalled, code: codeRecovering},
				step{do: hb, advance: sec, want: healthy},
			),
		},
		{
			name:  "not stalled without pending work",
			steps: seq(repeat(15, step{do: hb, advance: sec, want: healthy})),
		},
		{
			name:  "stalled on free capacity alone when require_pending is false",
			cfg:   func(c *Config) { c.Stalled.RequirePending = false },
			steps: seq(repeat(10, step{do: hb, advance: sec}), step{do: hb, want: stalled, code: codeNoClaim}),
		},
		{
			name: "lost: no telemetry and no live process for T; back when it reports",
			steps: seq(
				// Seen in three intervals: a worker seen once and not again
				// within lost.after is forgotten instead (admission.go).
				step{do: hb, advance: sec, want: healthy},
				step{do: hb, advance: sec, want: healthy},
				step{do: hb, advance: 4 * sec, want: healthy},
				step{advance: 2 * sec, want: lost, code: codeNoTelemetry},
				step{do: hb, advance: sec, want: lost, code: codeRecovering},
				step{do: hb, advance: sec, want: healthy},
			),
		},
		{
			name: "a process that is gone (present=0) does not keep the worker alive",
			steps: seq(
				step{do: mem(100), advance: sec, want: healthy},
				repeat(5, step{do: func(h *harness) { h.metrics(treeMetrics("w1", 0, -1, 0)) }, advance: sec}),
				step{want: lost, code: codeNoTelemetry},
			),
		},
		{
			name: "a worker only the scheduler names: unknown, then lost",
			steps: seq(
				step{do: func(h *harness) { h.logs(sl("w1", "workerwatch.run.claimed", "r1")) }, advance: sec, want: unknown, code: codeNotReported},
				step{advance: 5 * sec, want: lost, code: codeNoTelemetry},
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
				step{do: hb, advance: 3 * sec, want: degraded, code: codeOverCapacity},
				step{do: func(h *harness) {
					h.logs(wl("w1", "workerwatch.run.finished", "r2", map[string]any{"cicd.pipeline.result": "success"}))
					h.logs(sl("w1", "workerwatch.run.finished", "r2"))
				}, advance: sec, want: degraded, code: codeRecovering},
				step{do: hb, advance: sec, want: healthy},
			),
		},
	}
	runSteps(t, tests)
}

// Every reason carries its evidence.
func TestReasonEvidence(t *testing.T) {
	h := newHarness(t, testCfg())
	for i := 0; i < 3; i++ {
		mem(1500)(h)
		h.advance(time.Second)
	}
	h.eval()
	w := h.worker("w1")
	require.Equal(t, unhealthy, w.state)
	r := w.reasons[0]
	assert.Equal(t, codeMemory, r.Code)
	assert.Equal(t, 1500.0, r.Value)
	assert.Equal(t, 1000.0, r.Threshold)
	assert.Equal(t, t0, r.Since)
	assert.NotEmpty(t, r.Message)
}

func TestTransitionsAreReported(t *testing.T) {
	h := newHarness(t, testCfg())
	h.metrics(treeMetrics("w1", 10, -1, 1)) // confirmed: announced at once (admission.go)
	trs := h.eval()
	require.Len(t, trs, 1)
	assert.Equal(t, transition{worker: "w1", from: unknown, to: healthy, reasons: trs[0].reasons, at: t0.UnixNano()}, trs[0])
	assert.Empty(t, h.eval(), "no transition without a change")
	ld := buildLogs(trs)
	lr := ld.ResourceLogs().At(0).ScopeLogs().At(0).LogRecords().At(0)
	assert.Equal(t, contract.EventStateChange, lr.EventName())
	from, _ := lr.Attributes().Get("workerwatch.worker.state.from")
	to, _ := lr.Attributes().Get("workerwatch.worker.state.to")
	assert.Equal(t, "unknown", from.Str())
	assert.Equal(t, "healthy", to.Str())
	assert.Equal(t, "worker w1: unknown -> healthy ()", lr.Body().Str())
}
