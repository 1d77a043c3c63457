package tracker

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/workerwatch/workerwatch/internal/contract"
	"github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/state"
)

func TestCPU(t *testing.T) {
	cpuOf := func(util, limit float64) tree {
		return tree{Worker: "w1", Roles: map[string]int64{"main": 10}, Present: 1, OOM: -1, CPUMain: util, CPULimit: limit}
	}
	runSteps(t, []stepCase{
		{
			// Before: utilization x the collector host's CPUs (4 in the
			// test config): half of one pinned CPU read as 2 cores.
			name:  "pinned to one CPU, half of it busy: not saturated",
			steps: seq(repeat(6, step{do: feed(hb, cpuOf(0.5, 1)), advance: sec, want: healthy, noCode: state.CodeCPU})),
		},
		{
			name: "one full core of 16: saturated, with cores as the evidence",
			steps: seq(
				repeat(2, step{do: feed(hb, cpuOf(1.0/16, 16)), advance: sec, want: healthy}),
				step{do: feed(hb, cpuOf(1.0/16, 16)), advance: sec, want: degraded, code: state.CodeCPU, check: func(h *harness) {
					r := h.reason(state.CodeCPU)
					assert.InDelta(h.t, 1, r.Value, 1e-9)
					assert.InDelta(h.t, 0.9, r.Threshold, 1e-9)
					assert.Equal(h.t, contract.CPU{MainCores: 1, LimitCPUs: 16}, h.snap("w1").CPU)
				}},
			),
		},
		{
			// A pod limited to 1 CPU on a 16-core node at 6 % of its core:
			// before, 16 x 0.06 = 0.96 cores, saturated.
			name:  "a pod limited to one CPU at 6 % of it: not saturated",
			steps: seq(repeat(6, step{do: feed(hb, cpuOf(0.06, 1)), advance: sec, want: healthy, noCode: state.CodeCPU})),
		},
		{
			name: "below one core, saturation is a share of the limit: at its half-core quota it is saturated",
			steps: seq(
				repeat(2, step{do: feed(hb, cpuOf(0.95, 0.5)), advance: sec}),
				step{do: feed(hb, cpuOf(0.95, 0.5)), advance: sec, want: degraded, code: state.CodeCPU, check: func(h *harness) {
					assert.InDelta(h.t, 0.45, h.reason(state.CodeCPU).Threshold, 1e-9)
				}},
			),
		},
		{
			name:  "without the worker's CPU limit the rule does not judge",
			steps: seq(repeat(5, step{do: feed(hb, cpuOf(1, 0)), advance: sec, want: healthy, noCode: state.CodeCPU})),
		},
	})
}
