//go:build linux

package main

import (
	"fmt"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/workerwatch/workerwatch/internal/procfs"
)

// The scheduler's views and the dialects (docs/simulator.md): a fleet
// speaking OpenFn's names with a claims-only scheduler, and one whose
// scheduler states what it holds in snapshots; and the busy fault.
func TestViewsAndDialects(t *testing.T) {
	t.Run("openfn dialect, claims only", func(t *testing.T) {
		endpoint, sink := startOTLP(t)
		f := startFleet(t, "--workers", "2", "--faults", "timeout,none", "--seed", "3",
			"--otlp-endpoint", endpoint, "--dialect", "openfn", "--scheduler-view", "claims_only",
			"--run-duration", "300ms", "--run-rate", "8", "--run-timeout", "1s",
			"--poll-interval", "100ms", "--export-interval", "300ms")
		f.waitLine(t, regexp.MustCompile(`^workersim: fleet ready: 2 workers`), 20*time.Second)
		has := func(service, worker, name string, ok func(map[string]any) bool) bool {
			for _, e := range sink.events() {
				if e.service == service && e.worker == worker && e.name == name && (ok == nil || ok(e.attrs)) {
					return true
				}
			}
			return false
		}
		require.Eventually(t, func() bool {
			return has("openfn-worker", "worker-2", "run:complete", func(a map[string]any) bool { return str(a, "reason") == "success" }) &&
				has("openfn-worker", "worker-1", "run:complete", func(a map[string]any) bool {
					return str(a, "reason") == "kill" && str(a, "error_type") == "TimeoutError"
				})
		}, 30*time.Second, 100*time.Millisecond, "OpenFn's run:complete with reason and error_type")
		for _, name := range []string{"claim", "run:start", "step:start", "step:complete"} {
			assert.True(t, has("openfn-worker", "worker-2", name, func(a map[string]any) bool { return str(a, "run_id") != "" }), name)
		}
		assert.True(t, has("lightning", "", "claim", func(a map[string]any) bool { return str(a, "worker_name") == "worker-2" }),
			"Lightning's claims name the worker by worker_name on the record")
		for _, e := range sink.events() {
			if e.service == "lightning" {
				assert.NotEqual(t, "run:complete", e.name, "a claims-only scheduler sends no run end")
			}
			assert.NotContains(t, e.name, "workerwatch.", "only OpenFn's names: %s from %s", e.name, e.service)
		}
		stopFleet(t, f)
	})

	t.Run("snapshots: every run held, per worker, and nothing else", func(t *testing.T) {
		endpoint, sink := startOTLP(t)
		f := startFleet(t, "--workers", "2", "--faults", "none,hang", "--hang-after", "1", "--seed", "5",
			"--otlp-endpoint", endpoint, "--scheduler-view", "snapshots", "--snapshot-interval", "300ms",
			"--run-duration", "2s", "--run-rate", "4", "--poll-interval", "100ms", "--export-interval", "300ms")
		f.waitLine(t, regexp.MustCompile(`^workersim: fleet ready: 2 workers`), 10*time.Second)
		// snaps are the run counts of a worker's snapshots, in order.
		snaps := func(worker string) []int {
			var out []int
			for _, e := range sink.events() {
				if e.service == "workersim-scheduler" && e.name == "workerwatch.scheduler.snapshot" && str(e.attrs, "cicd.worker.id") == worker {
					runs, ok := e.attrs["workerwatch.scheduler.runs"].([]any)
					require.True(t, ok, "the runs are a list, empty included: %v", e.attrs)
					out = append(out, len(runs))
				}
			}
			return out
		}
		require.Eventually(t, func() bool {
			busy, hung := snaps("worker-1"), snaps("worker-2")
			// The hung worker claimed one run (2 s), then nothing: its
			// latest snapshots list nothing.
			return slices.Max(append(busy, 0)) > 0 && slices.Max(append(hung, 0)) == 1 &&
				len(hung) >= 3 && hung[len(hung)-1] == 0
		}, 30*time.Second, 100*time.Millisecond, "snapshots of a busy worker and of one that holds nothing")
		for _, e := range sink.events() {
			if e.service == "workersim-scheduler" {
				assert.Equal(t, "workerwatch.scheduler.snapshot", e.name, "no per-run events in the snapshots view")
			}
		}
		stopFleet(t, f)
	})

	t.Run("two OTLP endpoints: the scheduler uses the first, the workers each in turn", func(t *testing.T) {
		a, sinkA := startOTLP(t)
		b, sinkB := startOTLP(t)
		f := startFleet(t, "--workers", "2", "--seed", "9", "--otlp-endpoint", a+","+b,
			"--run-rate", "4", "--run-duration", "200ms", "--poll-interval", "100ms", "--export-interval", "300ms")
		f.waitLine(t, regexp.MustCompile(`^workersim: fleet ready: 2 workers`), 10*time.Second)
		from := func(s *sinks) map[string]bool {
			out := map[string]bool{}
			for _, e := range s.events() {
				out[e.service+" "+e.worker] = true
			}
			return out
		}
		require.Eventually(t, func() bool {
			return from(sinkA)["workersim-worker worker-1"] && from(sinkB)["workersim-worker worker-2"] && from(sinkA)["workersim-scheduler "]
		}, 30*time.Second, 100*time.Millisecond)
		assert.False(t, from(sinkA)["workersim-worker worker-2"], "worker-2 sends to the second endpoint only")
		assert.False(t, from(sinkB)["workersim-worker worker-1"], "worker-1 sends to the first endpoint only")
		assert.False(t, from(sinkB)["workersim-scheduler "], "the scheduler sends to the first endpoint only")
		stopFleet(t, f)
	})

	t.Run("busy: the main process burns CPU", func(t *testing.T) {
		f := startFleet(t, "--workers", "1", "--faults", "busy", "--busy-fraction", "0.5", "--otlp-endpoint", "",
			"--run-rate", "0")
		f.waitLine(t, regexp.MustCompile(`^workersim: fleet ready: 1 workers`), 10*time.Second)
		pid := f.workerPid(t, "worker-1")
		first := cpuTicks(t, pid)
		// At half a core, a second of CPU takes about 2 s of wall time.
		require.Eventually(t, func() bool { return cpuTicks(t, pid)-first >= 100 }, 60*time.Second, 200*time.Millisecond,
			"the busy worker's main process used a second of CPU")
		stopFleet(t, f)
	})
}

// cpuTicks is a process's user + system time in clock ticks (1/100 s).
func cpuTicks(t *testing.T, pid int) int64 {
	t.Helper()
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	require.NoError(t, err)
	f := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+2:]))
	u, _ := strconv.ParseInt(f[11], 10, 64)
	s, _ := strconv.ParseInt(f[12], 10, 64)
	return u + s
}

// stopFleet stops the fleet with SIGTERM and waits until nothing it started
// is left.
func stopFleet(t *testing.T, f *fleetProc) {
	t.Helper()
	require.NoError(t, f.cmd.Process.Signal(syscall.SIGTERM))
	select {
	case <-f.done:
	case <-time.After(30 * time.Second):
		t.Fatal("fleet did not stop within 30s of SIGTERM")
	}
	for pid := range f.Seen() {
		if slices.Contains(procfs.Pids(), pid) {
			assert.Failf(t, "left behind", "pid %d", pid)
		}
	}
}
