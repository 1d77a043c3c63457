package tracker

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/workerwatch/workerwatch/internal/contract"
	"github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/state"
)

func TestRoleMemory(t *testing.T) {
	roles := func(c *testConfig) {
		c.Memory.SoftLimitBytes = 0
		c.Memory.Roles = map[string]state.RoleMemoryRule{"main": {SoftLimitBytes: 600}}
	}
	tr := func(main, child int64) tree {
		return tree{Worker: "w1", Roles: map[string]int64{"main": main, "child": child}, Present: 1, OOM: -1}
	}
	runSteps(t, []stepCase{
		{
			// Before: only the tree had a limit.
			name: "the main role over its own limit: degraded, unhealthy after 3 samples, with the role named",
			cfg:  roles,
			steps: seq(
				step{do: feed(hb, tr(700, 100)), advance: sec, want: degraded, code: state.CodeMemory},
				step{do: feed(hb, tr(700, 100)), advance: sec, want: degraded},
				step{do: feed(hb, tr(700, 100)), advance: sec, want: unhealthy, check: func(h *harness) {
					r := h.reason(state.CodeMemory)
					assert.Equal(h.t, "main", r.Role)
					assert.InDelta(h.t, 700, r.Value, 0)
					assert.InDelta(h.t, 600, r.Threshold, 0)
					m := h.snap("w1").Memory
					assert.Equal(h.t, []contract.RoleMemory{
						{Role: "child", RSSBytes: 100},
						{Role: "main", RSSBytes: 700, SoftLimitBytes: 600, OverSamples: 3},
					}, m.Roles)
					assert.Equal(h.t, int64(800), m.RSSBytes)
				}},
				repeat(3, step{do: feed(hb, tr(100, 100)), advance: sec}),
				step{do: feed(hb, tr(100, 100)), advance: sec, want: healthy},
			),
		},
		{
			name:  "big children with no tree limit leave the worker healthy",
			cfg:   roles,
			steps: seq(repeat(5, step{do: feed(hb, tr(100, 5000)), advance: sec, want: healthy})),
		},
		{
			name: "the main role over its limit when a run starts: unhealthy at once",
			cfg:  roles,
			steps: seq(
				step{do: feed(hb, tr(700, 0)), advance: sec, want: degraded},
				step{do: feed(wl("w1", "workerwatch.run.started", "r1", nil)), advance: sec, want: unhealthy, check: func(h *harness) {
					r := h.reason(state.CodeMemoryAtStart)
					assert.Equal(h.t, "main", r.Role)
				}},
			),
		},
		{
			// Before: with 25 samples over the limit only the at-run-start
			// reason was listed.
			name: "every active reason is listed: persistently over and over at a run's start",
			steps: seq(
				step{do: mem(1200), advance: sec, want: degraded},
				step{do: func(h *harness) { h.logs(wl("w1", "workerwatch.run.started", "r1", nil)) }, advance: sec, want: unhealthy},
				repeat(25, step{do: mem(1200), advance: sec}),
				step{want: unhealthy, code: state.CodeMemory, check: func(h *harness) {
					assert.Contains(h.t, h.codes("w1"), state.CodeMemoryAtStart)
				}},
			),
		},
	})
}
