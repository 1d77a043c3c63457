package tracker

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"go.opentelemetry.io/collector/pdata/plog"

	"github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/state"
)

// The recycle rule composed into the worker: children that exit right
// after their run ends (a pool replacing its child per run) make the worker
// degraded with pool_recycle_loop once recycle.min_exits of them, for at
// least recycle.per_run_ratio of the runs, fall in recycle.window; it is off
// by default; a killed run's child is a kill, not a recycle; the window
// forgets.
func TestRecycle(t *testing.T) {
	on := func(c *testConfig) {
		c.Lost.After = 2 * time.Minute
		c.Limits.WorkerTTL = time.Hour
		c.Recycle = state.RecycleRule{Window: time.Minute, MinExits: 3, PerRunRatio: 0.9}
	}
	exits := func(child int64) tree {
		return tree{Worker: "w1", Roles: map[string]int64{"main": 10}, Present: 1, OOM: -1, Exited: map[string]int64{"main": 0, "child": child}}
	}
	run := func(id string) []any {
		return []any{
			wl("w1", "workerwatch.run.started", id, nil),
			wl("w1", "workerwatch.run.finished", id, map[string]any{"cicd.pipeline.result": "success"}),
		}
	}
	// n runs, each followed by its child's exit (the tree's cumulative
	// child exits reach from+n).
	recycled := func(from, n int64) []step {
		var s []step
		for i := range n {
			in := append([]any{hb}, run(fmt.Sprintf("r%d", from+i))...)
			s = append(s, step{do: feed(in...), advance: sec}, step{do: feed(hb, exits(from+i+1)), advance: sec})
		}
		return s
	}
	killed := func(id string) plog.Logs {
		return wl("w1", "workerwatch.run.killed", id, map[string]any{"workerwatch.kill.reason": "timeout", "cicd.pipeline.result": "timeout"})
	}
	runSteps(t, []stepCase{
		{
			name: "a child replaced after each of 3 runs: degraded, pool_recycle_loop",
			cfg:  on,
			steps: seq(
				step{do: feed(hb, exits(0)), advance: sec},
				recycled(0, 3),
				step{do: feed(hb), advance: 4 * sec, want: degraded, code: state.CodeRecycleLoop, check: func(h *harness) {
					r := h.reason(state.CodeRecycleLoop)
					assert.InDelta(h.t, 3, r.Value, 0)
					assert.InDelta(h.t, 3, r.Threshold, 0)
					assert.Equal(h.t, int64(0), h.snap("w1").Runs.Kills["child_exit"], "recycles are no kills")
				}},
				// The window (1m) slides past them: healthy again.
				step{do: feed(hb), advance: time.Minute, noCode: state.CodeRecycleLoop},
				step{do: feed(hb), advance: sec, want: healthy}, // after hysteresis
			),
		},
		{
			name: "off by default",
			cfg: func(c *testConfig) {
				on(c)
				c.Recycle = state.DefaultRecycleRule()
			},
			steps: seq(
				step{do: feed(hb, exits(0)), advance: sec},
				recycled(0, 3),
				step{do: feed(hb), advance: 4 * sec, want: healthy, noCode: state.CodeRecycleLoop},
			),
		},
		{
			name: "runs that keep their child dilute it below per_run_ratio",
			cfg:  on,
			steps: seq(
				step{do: feed(hb, exits(0)), advance: sec},
				recycled(0, 3),
				step{do: feed(append([]any{hb}, run("keeps")...)...), advance: 4 * sec, want: healthy, noCode: state.CodeRecycleLoop},
			),
		},
		{
			name: "killed runs' children are kills, not recycles",
			cfg: func(c *testConfig) {
				on(c)
				c.Kills.Effects = map[string]string{"timeout": "none"}
			},
			steps: seq(
				step{do: feed(hb, exits(0)), advance: sec},
				step{do: feed(hb, wl("w1", "workerwatch.run.started", "k1", nil), killed("k1")), advance: sec},
				step{do: feed(hb, exits(1)), advance: sec},
				step{do: feed(hb, wl("w1", "workerwatch.run.started", "k2", nil), killed("k2")), advance: sec},
				step{do: feed(hb, exits(2)), advance: sec},
				step{do: feed(hb, wl("w1", "workerwatch.run.started", "k3", nil), killed("k3")), advance: sec},
				step{do: feed(hb, exits(3)), advance: 4 * sec, want: healthy, noCode: state.CodeRecycleLoop},
			),
		},
	})
}
