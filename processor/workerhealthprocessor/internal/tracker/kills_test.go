package tracker

import (
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/state"
)

func TestKills(t *testing.T) {
	win := func(c *testConfig) { c.Lost.After = 2 * time.Minute; c.Limits.WorkerTTL = time.Hour }
	oomTree := func(n int64) tree { return tree{Worker: "w1", Roles: map[string]int64{"main": 10}, Present: 1, OOM: n} }
	exits := func(main, child int64) tree {
		return tree{Worker: "w1", Roles: map[string]int64{"main": 10}, Present: 1, OOM: -1, Exited: map[string]int64{"main": main, "child": child}}
	}
	started := func(run string) plog.Logs { return wl("w1", "workerwatch.run.started", run, nil) }
	finished := func(run string) plog.Logs {
		return wl("w1", "workerwatch.run.finished", run, map[string]any{"cicd.pipeline.result": "success"})
	}
	kills := func(reason string, n int64) func(*harness) {
		return func(h *harness) { assert.Equal(h.t, n, h.snap("w1").Runs.Kills[reason], reason) }
	}
	runSteps(t, []stepCase{
		{
			// Before: the cgroup's OOM kills were not read at all.
			name: "the OOM killer in the worker's cgroup: unhealthy at 3, the value is the real count, since fixed",
			cfg:  win,
			steps: seq(
				step{do: feed(hb, oomTree(7)), advance: sec, want: healthy, check: kills("oom", 0)}, // a baseline, not kills
				step{do: feed(hb, oomTree(9)), advance: sec, want: healthy, check: kills("oom", 2)},
				step{do: feed(hb, oomTree(10)), advance: sec, want: unhealthy, code: state.CodeKills, check: func(h *harness) {
					r := h.reason(state.CodeKills)
					assert.InDelta(h.t, 3, r.Value, 0)
					assert.InDelta(h.t, 3, r.Threshold, 0)
					assert.Equal(h.t, t0.Add(sec), r.Since)
				}},
				// Before: value stayed kills.count and since moved with the ring.
				step{do: feed(hb, oomTree(14)), advance: sec, want: unhealthy, check: func(h *harness) {
					r := h.reason(state.CodeKills)
					assert.InDelta(h.t, 7, r.Value, 0, "every kill in the window")
					assert.Equal(h.t, t0.Add(sec), r.Since, "the episode's start does not move")
				}},
				// The first two kills slide out of the window (1m), five
				// still count: the same episode, its start unmoved. Fails
				// with since = the oldest kill in the window at each
				// evaluation (t0+2s here).
				step{do: feed(hb, oomTree(14)), advance: 58 * sec, want: unhealthy, check: func(h *harness) {
					r := h.reason(state.CodeKills)
					assert.InDelta(h.t, 5, r.Value, 0, "the kills still in the window")
					assert.Equal(h.t, t0.Add(sec), r.Since, "the episode's start does not move")
				}},
			),
		},
		{
			name: "the main process exiting three times: unhealthy (worker_exit)",
			cfg:  win,
			steps: seq(
				step{do: feed(hb, exits(0, 0)), advance: sec, want: healthy},
				step{do: feed(hb, exits(2, 0)), advance: sec, want: healthy},
				step{do: feed(hb, exits(3, 2)), advance: 5 * sec, want: unhealthy, code: state.CodeKills, check: func(h *harness) {
					kills("worker_exit", 3)(h)
					kills("child_exit", 0)(h) // children die with their root
				}},
			),
		},
		{
			name: "child exits with a run ending around them are the runs'; without, child_exit",
			cfg:  win,
			steps: seq(
				step{do: feed(hb, exits(0, 0), started("r1"), started("r2"), started("r3")), advance: sec},
				// r1's child exits, its end arrives a second after the sample.
				step{do: feed(hb, exits(0, 1)), advance: sec},
				step{do: feed(hb, finished("r1")), advance: 4 * sec, want: healthy, check: kills("child_exit", 0)},
				// Three children die, no run ends.
				step{do: feed(hb, exits(0, 4)), advance: 4 * sec, want: unhealthy, code: state.CodeKills, check: kills("child_exit", 3)},
			),
		},
		{
			// openfn helper's finding: OpenFn starts a run's time limit at
			// the hand-over to a child, so a run killed before it started
			// still has its child killed.
			name: "a run killed before it started explains its child's exit",
			cfg:  win,
			steps: seq(
				step{do: feed(hb, exits(0, 0)), advance: sec},
				step{
					do: feed(hb, exits(0, 1), wl("w1", "workerwatch.run.claimed", "k1", nil),
						wl("w1", "workerwatch.run.killed", "k1", map[string]any{"workerwatch.kill.reason": "timeout"})), advance: 5 * sec,
					want: healthy, check: kills("child_exit", 0),
				},
			),
		},
		{
			// bullmq helper's finding: a graceful restart (the pool closed,
			// then the main process) was 1 worker_exit + 2 child_exit.
			name: "children that exit just before their root are the root's exit",
			cfg:  win,
			steps: seq(
				step{do: feed(hb, exits(0, 0)), advance: sec},
				step{do: feed(hb, exits(0, 2)), advance: sec},
				step{do: feed(hb, exits(1, 2)), advance: 5 * sec, want: healthy, check: func(h *harness) {
					kills("worker_exit", 1)(h)
					kills("child_exit", 0)(h)
				}},
			),
		},
		{
			// openfn helper's finding: on a loaded host the run's end came
			// seconds after the tree showed its child's exit.
			name: "a run end arriving late within kills.exit_window still explains its child's exit",
			cfg: func(c *testConfig) {
				win(c)
				c.Kills.ExitWindow = 15 * time.Second
			},
			steps: seq(
				step{do: feed(hb, exits(0, 0), started("r1"), started("r2"), started("r3")), advance: sec},
				step{do: feed(hb, exits(0, 3)), advance: 10 * sec},
				step{do: feed(hb, finished("r1"), finished("r2"), finished("r3")), advance: 10 * sec, want: healthy, check: kills("child_exit", 0)},
			),
		},
		{
			// Found by TestJudgeOpenFn on a loaded host: a worker whose runs
			// die at their memory limit 4 times a second ends more runs
			// within kills.exit_window than the 64 ends kept, so exits
			// whose end was pushed out counted as child_exit (3 of 388:
			// unhealthy). Fails with the ring of 64.
			name: "a worker ending runs faster than 64 per exit window still has each child exit explained by its run's end",
			cfg: func(c *testConfig) {
				win(c)
				c.Kills.ExitWindow = 15 * time.Second
			},
			steps: func() []step {
				var s []step
				s = append(s, step{do: feed(hb, exits(0, 0)), advance: sec})
				for i := 1; i <= 25; i++ {
					ends := []any{hb, exits(0, int64(5*i))}
					for j := range 5 {
						run := fmt.Sprintf("fast-%d-%d", i, j)
						ends = append(ends, started(run), finished(run))
					}
					s = append(s, step{do: feed(ends...), advance: sec})
				}
				return append(s, step{do: feed(hb, exits(0, 125)), advance: 20 * sec, want: healthy, check: kills("child_exit", 0)})
			}(),
		},
		{
			name: "each reason's effect is configurable",
			cfg: func(c *testConfig) {
				win(c)
				c.Kills.Effects = map[string]string{"timeout": "degraded"}
			},
			steps: seq(
				step{do: both(kill("", "timeout"), kill("", "timeout")), advance: sec, want: healthy},
				step{do: kill("", "timeout"), advance: sec, want: degraded, code: state.CodeKills},
			),
		},
	})
}

// A killed run's span and its killed record travel through different
// pipelines: whichever arrives first, the kill is counted, and only once.
func TestKillCountedWhateverArrivesFirst(t *testing.T) {
	runSpan := func(run string) ptrace.Traces {
		td := ptrace.NewTraces()
		rs := td.ResourceSpans().AppendEmpty()
		rs.Resource().Attributes().PutStr("cicd.worker.id", "w1")
		sp := rs.ScopeSpans().AppendEmpty().Spans().AppendEmpty()
		sp.SetName("run")
		sp.SetStartTimestamp(pcommon.NewTimestampFromTime(t0))
		sp.SetEndTimestamp(pcommon.NewTimestampFromTime(t0.Add(4 * time.Second)))
		sp.Attributes().PutStr("cicd.pipeline.run.id", run)
		sp.Attributes().PutStr("cicd.pipeline.result", "timeout")
		return td
	}
	killed := func(run string) plog.Logs {
		return wl("w1", "workerwatch.run.killed", run, map[string]any{"workerwatch.kill.reason": "timeout", "cicd.pipeline.result": "timeout"})
	}
	h := newHarness(t, testCfg())
	h.traces(runSpan("span-first"))
	h.logs(killed("span-first"))
	h.logs(killed("log-first"))
	h.traces(runSpan("log-first"))
	h.logs(killed("log-first")) // a duplicate
	h.p.mu.Lock()
	defer h.p.mu.Unlock()
	assert.Equal(t, int64(2), h.p.tracker.workers.get("w1").kills.ByReason()[state.KillIndex("timeout")])
}
