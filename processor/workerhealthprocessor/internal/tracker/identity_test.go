package tracker

import (
	"encoding/json"
	"fmt"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/plog"

	"github.com/workerwatch/workerwatch/internal/contract"
	"github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/state"
)

func TestIdentity(t *testing.T) {
	hbNamed := named("w1", rec{Worker: "x", Event: "workerwatch.worker.heartbeat"})
	liveTree := func(mem int64) tree {
		return tree{Worker: "w1", Roles: map[string]int64{"main": mem / 2, "child": mem / 2}, Present: 1, OOM: -1}
	}
	runSteps(t, []stepCase{
		{
			// Before: worker_id_attribute applied to the tree too, so the tree
			// never joined and no memory rule could fire (rss 0).
			name: "the tree joins a worker named by another attribute, and its memory counts",
			cfg:  openfnLike,
			steps: seq(
				repeat(3, step{do: feed(hbNamed, liveTree(1500)), advance: sec}),
				step{want: unhealthy, code: state.CodeMemory, check: func(h *harness) {
					w := h.snap("w1")
					assert.Equal(t, int64(1500), w.Memory.RSSBytes)
					assert.Equal(t, []string{"cicd.worker.id=w1"}, w.Sources.Tree().IDs.List())
					assert.Equal(t, []string{"worker_name=w1"}, w.Sources.Telemetry().IDs.List())
					assert.False(t, w.Sources.Scheduler().Seen)
					h.p.mu.Lock()
					assert.Equal(t, 1, h.p.tracker.workers.len(), "one worker, not two")
					h.p.mu.Unlock()
				}},
			),
		},
		{
			// Before: the unjoined tree did not keep the worker alive: lost
			// after lost.after while its run hung with the process there.
			name: "a live process is evidence of life: a silent worker with its process is not lost",
			cfg:  openfnLike,
			steps: seq(
				step{do: feed(hbNamed, liveTree(100)), advance: sec, want: healthy},
				repeat(70, step{do: feed(liveTree(100)), advance: sec, want: healthy, noCode: state.CodeNoTelemetry}),
				repeat(5, step{do: feed(tree{Worker: "w1", Present: 0, OOM: -1}), advance: sec}),
				step{want: lost, code: state.CodeNoTelemetry},
			),
		},
		{
			// openfn helper's finding: with a pulled scheduler a claim exists
			// because the worker just asked for work.
			name: "a claims-only scheduler's claims are a sign of life: unknown, not lost",
			cfg:  func(c *testConfig) { c.Scheduler.View = contract.ViewClaimsOnly },
			steps: seq(
				repeat(10, step{do: func(h *harness) {
					h.logs(sl("w1", "workerwatch.run.claimed", fmt.Sprintf("c-%d", autoRun.Add(1))))
				}, advance: sec, want: unknown, code: state.CodeNotReported, noCode: state.CodeNoTelemetry}),
			),
		},
		{
			// Before (openfn helper's finding, e2e bad input: a worker only
			// Lightning names showed over_capacity 14): its claims never
			// end, so they added up to capacity excess until heal_after.
			name: "a claims-only scheduler alone is no measure of load: no over capacity",
			cfg: func(c *testConfig) {
				c.Scheduler.View = contract.ViewClaimsOnly
				c.Capacity.Default = 2
			},
			steps: seq(
				repeat(12, step{do: func(h *harness) {
					h.logs(sl("w1", "workerwatch.run.claimed", fmt.Sprintf("c-%d", autoRun.Add(1))))
				}, advance: sec, noCode: state.CodeOverCapacity, check: func(h *harness) {
					assert.Equal(h.t, 0, h.snap("w1").Drift.OverCapacity())
				}}),
			),
		},
		{
			// bullmq helper's finding: a queue that states only connected
			// workers names a live worker in every snapshot.
			name: "sign_of_life any: a snapshot naming the worker keeps it from lost",
			cfg: func(c *testConfig) {
				c.Scheduler.View = contract.ViewSnapshots
				c.Scheduler.SignOfLife = "any"
			},
			steps: seq(repeat(10, step{do: feed(snapLogs("workersim-scheduler", "w1", "j1")), advance: sec, want: unknown, noCode: state.CodeNoTelemetry})),
		},
		{
			name: "sign_of_life none: even a claims-only scheduler's claims do not keep the worker from lost",
			cfg: func(c *testConfig) {
				c.Scheduler.View = contract.ViewClaimsOnly
				c.Scheduler.SignOfLife = "none"
			},
			steps: seq(
				repeat(5, step{do: func(h *harness) {
					h.logs(sl("w1", "workerwatch.run.claimed", fmt.Sprintf("c-%d", autoRun.Add(1))))
				}, advance: sec}),
				step{do: func(h *harness) { h.logs(sl("w1", "workerwatch.run.claimed", "c-last")) }, want: lost, code: state.CodeNoTelemetry},
			),
		},
		{
			name: "by default a snapshot is not a sign of life",
			cfg:  func(c *testConfig) { c.Scheduler.View = contract.ViewSnapshots },
			steps: seq(
				repeat(5, step{do: feed(snapLogs("workersim-scheduler", "w1", "j1")), advance: sec}),
				step{do: feed(snapLogs("workersim-scheduler", "w1", "j1")), want: lost, code: state.CodeNoTelemetry},
			),
		},
		{
			name: "several id attributes: the first present names the worker",
			cfg:  func(c *testConfig) { c.Mapping.WorkerIDAttributes = []string{"worker_name", "host.name"} },
			steps: seq(
				step{do: feed(named("w1", rec{Worker: "x", Event: "workerwatch.worker.heartbeat"}), liveTree(100)), advance: sec, want: healthy},
				step{check: func(h *harness) {
					h.p.mu.Lock()
					defer h.p.mu.Unlock()
					assert.Equal(t, 1, h.p.tracker.workers.len())
				}},
			),
		},
	})
}

// A worker whose telemetry and tree never meet is reported once, with the
// ids seen and a counter; a deployment with one source reports nothing.
func TestUnjoinedWorkers(t *testing.T) {
	cfg := testCfg()
	cfg.Identity.JoinWithin = 10 * time.Second
	h := newHarness(t, cfg)
	for range 12 {
		// The tree says pod-7, the worker's telemetry w7: they never meet.
		h.metrics(tree{Worker: "pod-7", Roles: map[string]int64{"main": 10}, Present: 1, OOM: -1}.Metrics())
		h.logs(wl("w7", "workerwatch.worker.heartbeat", "", nil))
		h.advance(sec)
		uj := h.evalUnjoined()
		if len(uj) > 0 {
			require.Len(t, uj, 2)
			assert.Equal(t, Unjoined{Worker: "pod-7", Origin: "tree", IDs: []string{"cicd.worker.id=pod-7"}, Others: []string{"telemetry cicd.worker.id=w7"}}, uj[0])
			assert.Equal(t, "w7", uj[1].Worker)
			assert.Equal(t, "telemetry", uj[1].Origin)
			assert.Contains(t, uj[0].Message(), "named only by its tree")
		}
	}
	h.p.mu.Lock()
	assert.Equal(t, int64(2), h.p.tracker.unjoinedN, "each reported once")
	h.p.mu.Unlock()

	// Only a tree, no telemetry anywhere: nothing to join, nothing reported.
	h2 := newHarness(t, cfg)
	for range 15 {
		h2.metrics(tree{Worker: "pod-1", Roles: map[string]int64{"main": 10}, Present: 1, OOM: -1}.Metrics())
		h2.advance(sec)
		uj := h2.evalUnjoined()
		assert.Empty(t, uj)
	}
}

// A worker whose name is its id (the worker_process receiver's default for
// a worker configured with a name only) keeps one string for both, after a
// checkpoint's restore too; another name is its own copy, not the bytes of
// the record it came in.
func TestNameSharesTheID(t *testing.T) {
	h := newHarness(t, testCfg())
	named := func(id, name string) plog.Logs {
		ld := wl(id, contract.EventHeartbeat, "", nil)
		ld.ResourceLogs().At(0).Resource().Attributes().PutStr(contract.AttrWorkerName, name)
		return ld
	}
	h.logs(named("w-same", "w-same"))
	h.logs(named("w-other", "builder 7"))
	h.eval()
	h.p.mu.Lock()
	defer h.p.mu.Unlock()
	same, other := h.p.tracker.workers.get("w-same"), h.p.tracker.workers.get("w-other")
	assert.Equal(t, "w-same", same.Name)
	assert.Same(t, unsafe.StringData(same.id), unsafe.StringData(same.Name), "the name is the id's string")
	assert.Equal(t, "builder 7", other.Name)
	assert.NotSame(t, unsafe.StringData(other.id), unsafe.StringData(other.Name))

	rec := h.p.tracker.toCheckpoint(same)
	b, err := json.Marshal(&rec)
	require.NoError(t, err)
	var back Record
	require.NoError(t, json.Unmarshal(b, &back))
	restored := h.p.tracker.fromCheckpoint(&back, h.clock.Now().UnixNano())
	assert.Equal(t, "w-same", restored.Name)
	assert.Same(t, unsafe.StringData(restored.id), unsafe.StringData(restored.Name), "restored: the name is the id's string")
}
