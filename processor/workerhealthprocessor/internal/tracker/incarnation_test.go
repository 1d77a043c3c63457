package tracker

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/pmetric"

	"github.com/workerwatch/workerwatch/internal/contract"
)

// root is one scrape of a worker's tree with its root's incarnation, as the
// worker_process receiver states it (internal/contract: process.pid,
// process.creation.time; a root that ended: present 0, process.exit.time
// and the code or signal).
type root struct {
	worker  string
	pid     int64
	started time.Time
	mem     int64 // the main role's memory; -1: not sent
	present int64
	exitAt  time.Time
	code    int64 // -1: not stated
	signal  int64 // 0: not stated
}

func (r root) metrics() pmetric.Metrics {
	x := tree{Worker: r.worker, Present: r.present}
	if r.mem >= 0 {
		x.Roles = map[string]int64{"main": r.mem}
	}
	md := x.Metrics()
	a := md.ResourceMetrics().At(0).Resource().Attributes()
	a.PutInt(contract.AttrPID, r.pid)
	a.PutStr(contract.AttrProcessCreationTime, r.started.UTC().Format("2006-01-02T15:04:05.000Z07:00"))
	if !r.exitAt.IsZero() {
		a.PutStr(contract.AttrProcessExitTime, r.exitAt.UTC().Format(time.RFC3339Nano))
		if r.code >= 0 {
			a.PutInt(contract.AttrProcessExitCode, r.code)
		}
		if r.signal > 0 {
			a.PutInt(contract.AttrProcessExitSignal, r.signal)
		}
	}
	return md
}

// live is a live root's scrape with mem bytes in its main role.
func live(pid int64, started time.Time, mem int64) pmetric.Metrics {
	return root{worker: "w1", pid: pid, started: started, mem: mem, present: 1, code: -1}.metrics()
}

// memoryReasons are w1's memory reasons now.
func (h *harness) memoryReasons() []contract.Reason {
	var out []contract.Reason
	for _, r := range h.worker("w1").Reasons {
		if r.Code == contract.CodeMemory || r.Code == contract.CodeMemoryAtStart {
			out = append(out, r)
		}
	}
	return out
}

// latchMemory drives w1 (root pid, started) over the soft limit (1000) for
// the unhealthy samples (3), then under it: unhealthy, latched.
func (h *harness) latchMemory(pid int64, started time.Time) {
	for range 3 {
		h.metrics(live(pid, started, 1500))
		h.advance(time.Second)
		h.eval()
	}
	h.metrics(live(pid, started, 900))
	h.eval()
	require.Equal(h.t, contract.Unhealthy, h.state("w1"), "%v", h.codes("w1"))
}

// TestIncarnationFreshEvidence: a new root process of the worker starts its
// memory episode afresh; the old one's latch does not follow it.
func TestIncarnationFreshEvidence(t *testing.T) {
	h := newHarness(t, testCfg())
	startedA := t0.Add(-time.Hour)
	h.latchMemory(100, startedA)
	rs := h.memoryReasons()
	require.Len(t, rs, 1)
	assert.Equal(t, "100@"+startedA.Format("2006-01-02T15:04:05.000Z07:00"), rs[0].Incarnation)
	assert.Equal(t, int64(100), h.snap("w1").Incarnation.PID)

	// A restart: pid 200, under the limit from its first sample.
	startedB := t0.Add(time.Minute)
	h.advance(time.Second)
	h.metrics(live(200, startedB, 600))
	h.eval()
	assert.Empty(t, h.memoryReasons(), "the new process inherits no memory latch")
	assert.NotEqual(t, contract.Unhealthy, h.state("w1"))
	inc := h.snap("w1").Incarnation
	require.NotNil(t, inc)
	assert.Equal(t, contract.IncarnationTree, inc.Source)
	assert.Equal(t, int64(200), inc.PID)
	assert.Equal(t, startedB.Truncate(time.Millisecond), inc.Started.Time())
}

// restart checkpoints every worker of h and restores them into a new
// tracker (a collector restart), ten seconds later.
func restart(t *testing.T, h *harness) *harness {
	var recs []Record
	h.p.mu.Lock()
	for w := range h.p.tracker.workers.all() {
		// Through JSON, as the storage keeps them.
		b, err := json.Marshal(h.p.tracker.toCheckpoint(w))
		require.NoError(t, err)
		var rec Record
		require.NoError(t, json.Unmarshal(b, &rec))
		recs = append(recs, rec)
	}
	h.p.mu.Unlock()
	h2 := newHarness(t, testCfg())
	h2.clock.Advance(h.clock.Since(t0) + 10*time.Second)
	for i := range recs {
		h2.p.tracker.RestoreSlot(int32(i), &recs[i], true, h2.clock.Now().UnixNano())
	}
	return h2
}

// TestIncarnationRestored: after a restore, the latch still counts for the
// same process (the collector restarted alone), and not for a new one (the
// collector and the worker restarted together).
func TestIncarnationRestored(t *testing.T) {
	started := t0.Add(-time.Hour)
	h := newHarness(t, testCfg())
	h.latchMemory(100, started)

	same := restart(t, h)
	// Before the process is seen again, its restored latch waits for it:
	// unknown (503), the latch listed with its incarnation.
	same.eval()
	assert.Equal(t, contract.Unknown, same.state("w1"), "%v", same.codes("w1"))
	require.Len(t, same.memoryReasons(), 1)
	// The receiver restated the start time from a boot time a second off.
	same.metrics(live(100, started.Add(time.Second), 900))
	same.eval()
	assert.Equal(t, contract.Unhealthy, same.state("w1"), "the same process: its latch counts (%v)", same.codes("w1"))
	require.Len(t, same.memoryReasons(), 1)

	fresh := restart(t, h)
	fresh.metrics(live(300, t0.Add(2*time.Hour), 900))
	fresh.eval()
	assert.Empty(t, fresh.memoryReasons(), "a new process after the restore inherits no latch")
	assert.NotEqual(t, contract.Unhealthy, fresh.state("w1"))
}

// TestProcessExited: a root that exits with no new incarnation within
// lost.exit_grace is lost at once with process_exited and its signal or
// code; one replaced within the grace is never lost.
func TestProcessExited(t *testing.T) {
	cfg := testCfg()
	cfg.Lost.ExitGrace = 2 * time.Second
	started := t0.Add(-time.Hour)

	t.Run("killed", func(t *testing.T) {
		h := newHarness(t, cfg)
		h.metrics(live(100, started, 500))
		h.eval()
		exitAt := h.clock.Now().Add(-100 * time.Millisecond)
		h.metrics(root{worker: "w1", pid: 100, started: started, mem: -1, present: 0, exitAt: exitAt, code: -1, signal: 9}.metrics())
		due := h.p.tracker.TakeExitDue()
		assert.Equal(t, h.clock.Now().Add(2*time.Second).UnixNano(), due, "the processor evaluates when the grace ends")
		assert.Zero(t, h.p.tracker.TakeExitDue(), "taken")
		h.eval()
		assert.NotEqual(t, contract.Lost, h.state("w1"), "within the grace")
		h.advance(2 * time.Second)
		h.eval()
		require.Equal(t, contract.Lost, h.state("w1"))
		r := h.reason(contract.CodeProcessExited)
		require.NotNil(t, r.Exit)
		assert.Equal(t, contract.ExitSignal, r.Exit.How)
		require.NotNil(t, r.Exit.Signal)
		assert.Equal(t, 9, *r.Exit.Signal)
		assert.Nil(t, r.Exit.Code)
		assert.Equal(t, exitAt.Truncate(time.Nanosecond).UTC(), r.Exit.At.UTC())
		assert.Equal(t, exitAt.UTC(), r.Since.UTC())
		assert.InDelta(t, 2.1, r.Value, 0.001, "seconds since the exit")
		assert.InDelta(t, 2, r.Threshold, 0)
		assert.Equal(t, r.Exit.Incarnation, r.Incarnation)
		assert.Contains(t, r.Message, "signal 9")
		assert.Equal(t, r.Exit.Signal, h.snap("w1").LastExit.Signal)

		// Its telemetry still arriving (a late export) does not revive it.
		h.logs(wl("w1", "workerwatch.worker.heartbeat", "", nil))
		h.eval()
		assert.Equal(t, contract.Lost, h.state("w1"))

		// A new process: back after hysteresis.
		for range 2 {
			h.advance(time.Second)
			h.metrics(live(101, t0.Add(time.Minute), 500))
			h.eval()
		}
		assert.Equal(t, contract.Healthy, h.state("w1"), "%v", h.codes("w1"))
		assert.Equal(t, int64(101), h.snap("w1").Incarnation.PID)
	})
	t.Run("exit code and unknown", func(t *testing.T) {
		for _, c := range []struct {
			code     int64
			how      string
			contains string
		}{{3, contract.ExitCode, "exit code 3"}, {-1, contract.ExitUnknown, "unknown"}} {
			h := newHarness(t, cfg)
			h.metrics(live(100, started, 500))
			h.eval()
			h.metrics(root{worker: "w1", pid: 100, started: started, mem: -1, present: 0, exitAt: h.clock.Now(), code: c.code}.metrics())
			h.advance(3 * time.Second)
			h.eval()
			require.Equal(t, contract.Lost, h.state("w1"))
			r := h.reason(contract.CodeProcessExited)
			assert.Equal(t, c.how, r.Exit.How)
			assert.Contains(t, r.Message, c.contains)
			if c.code >= 0 {
				assert.Equal(t, int(c.code), *r.Exit.Code)
			}
		}
	})
	t.Run("restarted within the grace", func(t *testing.T) {
		h := newHarness(t, cfg)
		h.metrics(live(100, started, 500))
		h.eval()
		h.metrics(root{worker: "w1", pid: 100, started: started, mem: -1, present: 0, exitAt: h.clock.Now(), code: 75}.metrics())
		for range 5 {
			h.advance(time.Second)
			h.metrics(live(102, t0.Add(time.Second), 500))
			h.eval()
			assert.NotEqual(t, contract.Lost, h.state("w1"))
		}
		assert.Equal(t, int64(102), h.snap("w1").Incarnation.PID)
		assert.Equal(t, contract.ExitCode, h.snap("w1").LastExit.How, "how the previous one ended")
	})
	t.Run("main loop blocked", func(t *testing.T) {
		// The process is there, its telemetry silent for 12 lost.after:
		// never lost.
		h := newHarness(t, cfg)
		h.logs(wl("w1", "workerwatch.worker.heartbeat", "", nil))
		for range 60 {
			h.metrics(live(100, started, 500))
			h.advance(time.Second)
			h.eval()
			require.NotEqual(t, contract.Lost, h.state("w1"))
		}
	})
	t.Run("restored", func(t *testing.T) {
		// The collector restarted after the exit it saw: still lost once
		// the grace (counted from the restore) passes, unless the worker
		// came back.
		h := newHarness(t, cfg)
		h.metrics(live(100, started, 500))
		h.eval()
		h.metrics(root{worker: "w1", pid: 100, started: started, mem: -1, present: 0, exitAt: h.clock.Now(), code: -1, signal: 9}.metrics())
		h2 := restart(t, h)
		h2.advance(3 * time.Second)
		h2.eval()
		assert.Equal(t, contract.Lost, h2.state("w1"))
		assert.Equal(t, []string{contract.CodeProcessExited}, h2.codes("w1"))
	})
}

// TestTelemetryIncarnation: a worker with no tree takes its incarnation from
// its telemetry's service.instance.id, and says so; a new instance starts
// its evidence afresh.
func TestTelemetryIncarnation(t *testing.T) {
	h := newHarness(t, testCfg())
	send := func(instance string) {
		ld := wl("w1", "workerwatch.worker.heartbeat", "", nil)
		ld.ResourceLogs().At(0).Resource().Attributes().PutStr(contract.AttrServiceInstanceID, instance)
		h.logs(ld)
	}
	send("w1-a")
	h.eval()
	inc := h.snap("w1").Incarnation
	require.NotNil(t, inc)
	assert.Equal(t, contract.IncarnationServiceInstance, inc.Source)
	assert.Equal(t, "w1-a", inc.ID)
	send("w1-b")
	assert.Equal(t, "w1-b", h.snap("w1").Incarnation.ID)

	// A tree then speaks for the worker: the telemetry's instance no more.
	h.metrics(live(100, t0, 500))
	send("w1-c")
	assert.Equal(t, contract.IncarnationTree, h.snap("w1").Incarnation.Source)
}

// TestTelemetryBeforeTree: a worker's telemetry reaches the collector before
// the receiver's discovery finds its tree (a loaded machine, a long
// discovery_interval). The tree's root, started before the telemetry was
// first seen, is the same life: its pid and start time are adopted, and its
// first sight stays. A root that started after that is a new incarnation.
func TestTelemetryBeforeTree(t *testing.T) {
	send := func(h *harness, instance string) {
		ld := wl("w1", "workerwatch.worker.heartbeat", "", nil)
		ld.ResourceLogs().At(0).Resource().Attributes().PutStr(contract.AttrServiceInstanceID, instance)
		h.logs(ld)
	}
	t.Run("the same process", func(t *testing.T) {
		h := newHarness(t, testCfg())
		started := t0.Add(-time.Second)
		send(h, "w1-100")
		first := h.snap("w1").Incarnation.FirstSeen
		h.advance(10 * time.Second)
		h.metrics(live(100, started, 500))
		inc := h.snap("w1").Incarnation
		require.NotNil(t, inc)
		assert.Equal(t, contract.IncarnationTree, inc.Source)
		assert.Equal(t, int64(100), inc.PID)
		assert.Equal(t, "100@"+started.UTC().Format("2006-01-02T15:04:05.000Z07:00"), inc.Name())
		assert.Equal(t, first, inc.FirstSeen, "the same life keeps its first sight")
	})
	t.Run("a later process", func(t *testing.T) {
		h := newHarness(t, testCfg())
		send(h, "w1-100")
		h.advance(10 * time.Second)
		h.metrics(live(200, t0.Add(5*time.Second), 500))
		inc := h.snap("w1").Incarnation
		require.NotNil(t, inc)
		assert.Equal(t, int64(200), inc.PID)
		assert.Equal(t, h.clock.Now().UTC().Truncate(time.Millisecond), inc.FirstSeen.Time().Truncate(time.Millisecond), "a new incarnation, first seen now")
	})
}

// A scrape of the current incarnation costs what one without a pid does:
// its ID is formatted only when the incarnation is new (state.Incarnation.Name),
// not on every sample.
func TestCurrentIncarnationCostsNothing(t *testing.T) {
	started := t0.Add(-time.Hour)
	h := newHarness(t, testCfg())
	withPID := live(100, started, 10)
	h.metrics(withPID)
	require.Equal(t, "100@"+started.UTC().Format("2006-01-02T15:04:05.000Z07:00"), h.snap("w1").Incarnation.Name())
	h2 := newHarness(t, testCfg())
	plain := tree{Worker: "w1", Roles: map[string]int64{"main": 10}, Present: 1}.Metrics()
	h2.metrics(plain)
	assert.Equal(t, testing.AllocsPerRun(50, func() { h2.metrics(plain) }),
		testing.AllocsPerRun(50, func() { h.metrics(withPID) }))
}
