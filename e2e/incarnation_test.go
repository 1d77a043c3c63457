//go:build e2e

package e2e

// Incarnations and exits (issue 21) through the real binary, the real
// simulator and its real processes, with the shipped config.yaml (only
// ports, the state directory and the workers' selector overlaid):
//
//   - the collector and a fresh fleet with the same ids restarted together:
//     the fresh worker-1 (no fault now) never inherits its predecessor's
//     memory verdict, and is never unhealthy, not even before its first
//     sample; the collector alone restarted while the leak worker
//     runs on: the same verdict as before the restart;
//   - a worker's root SIGKILLed: 503, lost, process_exited with signal 9
//     (the delay from the exit logged against issue 21's goal of 5 s); a root its
//     supervisor restarts: a new incarnation, never lost; a main loop
//     blocked for 60 s (SIGSTOP): never lost, and reporting again after.
//
//	make build && go test -tags e2e -count=1 -v -run 'TestIncarnation' ./e2e/

import (
	"encoding/json"
	"fmt"
	"path/filepath"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/workerwatch/workerwatch/internal/contract"
	"github.com/workerwatch/workerwatch/internal/freeport"
)

// boundExitToLost bounds the verdict's own delay from a root's exit to lost
// (since - exit.at), the documented rule (docs/health-rules.md, "An
// incarnation that ended") for the shipped config, times the suite's load
// factor (judgeLoadFactor, 3): lost.exit_grace (2 s, the default) + the
// receiver's follow-up scrape after an exit (1 s) + the evaluation the
// processor runs at the grace's end (counted as 1 s); 12 s. Issue 21's goal
// of 5 s is the figure logged (a RESULT line), not a gate: it is the
// machine's speed. The wall-clock bound stays the goal times the factor.
const boundExitToLost = judgeLoadFactor * (2*time.Second + time.Second + time.Second)

// startIncarnation starts a collector with the shipped config.yaml itself
// (its intervals, rules, history, limits and memory_limiter: the verdicts a
// user of `make run` gets) and an overlay of what must differ for a test on
// a shared machine: free ports for every listener, the state directory, and
// the simulated workers' selector narrowed to the ids starting with prefix
// (the Node.js selector is left out: other scenarios run Node workers).
func startIncarnation(t *testing.T, name, prefix, stateDir string, j *judge) *judge {
	t.Helper()
	if j == nil {
		j = &judge{
			name: name, prefix: prefix, health: freeport.Addr(t), otlp: freeport.Addr(t),
			schedAdr: freeport.Addr(t), telemetry: freeport.Port(t),
		}
	}
	shipped := filepath.Join(repoRoot, "config.yaml")
	overlay := map[string]any{}
	put(overlay, "receivers::worker_process::workers", idSelector(t, shipped, prefix))
	put(overlay, "extensions::worker_health::endpoint", j.health)
	put(overlay, "receivers::otlp::protocols::http::endpoint", j.otlp)
	put(overlay, "receivers::otlp::protocols::grpc::endpoint", freeport.Addr(t))
	put(overlay, "exporters::prometheus::endpoint", freeport.Addr(t))
	put(overlay, "service::telemetry::metrics::readers", []any{map[string]any{"pull": map[string]any{"exporter": map[string]any{
		"prometheus": map[string]any{"host": "127.0.0.1", "port": j.telemetry},
	}}}})
	b, err := json.Marshal(overlay)
	if err != nil {
		t.Fatal(err)
	}
	over := filepath.Join(t.TempDir(), "overlay.json")
	writeFile(t, over, string(b))
	// The otlp_http exporter's backend: a free port nobody listens on (the
	// shipped config retries there quietly, as in `make run` without one).
	j.env = []string{"WORKERWATCH_STATE_DIR=" + stateDir, "WORKERWATCH_OTLP_ENDPOINT=http://" + freeport.Addr(t)}
	j.args = []string{"--config", shipped, "--config", over}
	j.col = start(t, name+"-collector", j.env, collectorBinary(t), j.args...)
	waitReady(t, j.col, j.health)
	return j
}

// startIncarnationFleet starts a collector as startIncarnation does, with a
// fresh state directory, and a simulated fleet of n workers (no faults) that
// writes each worker's pid file, sends to it every 500 ms and claims from its
// scheduler address; the env reads both.
func startIncarnationFleet(t *testing.T, name, prefix string, n int) (*judge, env) {
	t.Helper()
	pidDir := t.TempDir()
	j := startIncarnation(t, name, prefix, filepath.Join(t.TempDir(), "state"), nil)
	sim := need(t, "workersim", filepath.Join(binDir, "workersim"))
	start(t, name+"-fleet", nil, sim, "fleet", "--workers", strconv.Itoa(n), "--otlp-endpoint", j.otlp, "--id-prefix", prefix,
		"--scheduler-addr", j.schedAdr, "--export-interval", "500ms", "--pid-dir", pidDir)
	return j, env{health: "http://" + j.health, pidDir: pidDir}
}

// memoryReasons are a worker's memory reasons; each must be on the firing
// side of its threshold, or say it is latched (issue 21, point 2).
func memoryReasons(t *testing.T, w contract.Worker) []contract.Reason {
	t.Helper()
	var out []contract.Reason
	for _, r := range w.Reasons {
		if r.Code != contract.CodeMemory && r.Code != contract.CodeMemoryAtStart {
			continue
		}
		out = append(out, r)
		if r.Value <= r.Threshold && !r.Latched {
			t.Errorf("%s: %s shows %.0f against %.0f without being latched: %+v", w.ID, r.Code, r.Value, r.Threshold, r)
		}
		if r.Latched && (r.Current == nil || r.Recovery == nil) {
			t.Errorf("%s: latched %s without its current value and recovery: %+v", w.ID, r.Code, r)
		}
	}
	return out
}

// TestIncarnationFreshFleet: issue 21's first case, and its counterpart.
func TestIncarnationFreshFleet(t *testing.T) {
	defer parallel(t, 75*time.Second)()
	prefix := runPrefix + "inc-"
	id := prefix + "1"
	state := filepath.Join(t.TempDir(), "state")
	sim := need(t, "workersim", filepath.Join(binDir, "workersim"))
	j := startIncarnation(t, "inc-fresh", prefix, state, nil)
	fleetArgs := func(faults string) []string {
		return []string{
			"fleet", "--workers", "2", "--faults", faults, "--otlp-endpoint", j.otlp, "--id-prefix", prefix,
			"--scheduler-addr", j.schedAdr, "--export-interval", "500ms",
		}
	}
	fleet := start(t, "inc-fresh-fleet-leak", nil, sim, fleetArgs("leak,none")...)

	var before contract.Worker
	eventually(t, 180*time.Second, 500*time.Millisecond, id+" unhealthy from memory", func() error {
		w, err := j.worker(id)
		if err != nil {
			return err
		}
		if w.State != contract.Unhealthy || len(memoryReasons(t, w)) == 0 {
			return fmt.Errorf("state %s %v", w.State, reasonCodes(w))
		}
		before = w
		return nil
	})
	if before.Incarnation == nil || before.Incarnation.Source != contract.IncarnationTree || before.Incarnation.PID == 0 {
		t.Fatalf("the leak worker's incarnation: %+v", before.Incarnation)
	}
	t.Logf("e2e: %s unhealthy, incarnation %s, reasons %+v", id, before.Incarnation.ID, before.Reasons)

	// The collector alone restarted while the leak worker runs on: the same
	// incarnation, and its restored evidence still counts (unknown until
	// its first sample, then unhealthy; never may take work meanwhile).
	j.col.stop(t)
	startIncarnation(t, "inc-fresh-2", prefix, state, j)
	restarted := time.Now()
	eventually(t, 60*time.Second, 250*time.Millisecond, id+" judged again after the collector's restart", func() error {
		w, err := j.worker(id)
		if err != nil {
			return err
		}
		if w.State.MayTakeWork() {
			t.Fatalf("%s may take work after the collector's restart: %s %+v", id, w.State, w.Reasons)
		}
		if w.State != contract.Unhealthy || len(memoryReasons(t, w)) == 0 {
			return fmt.Errorf("state %s %v", w.State, reasonCodes(w))
		}
		if w.Incarnation == nil || w.Incarnation.ID != before.Incarnation.ID {
			return fmt.Errorf("incarnation %+v, before %s", w.Incarnation, before.Incarnation.ID)
		}
		return nil
	})
	t.Logf("e2e: the collector restarted alone: %s unhealthy again (same incarnation) %.1fs after", id, time.Since(restarted).Seconds())

	// The collector and a fresh fleet with the same ids restarted together
	// (no fault now): the fresh worker-1 is a new incarnation and never
	// unhealthy from memory; its memory reasons (none expected) are never on
	// the wrong side of their threshold.
	fleet.stop(t)
	j.col.stop(t)
	startIncarnation(t, "inc-fresh-3", prefix, state, j)
	start(t, "inc-fresh-fleet-none", nil, sim, fleetArgs("none,none")...)
	began := time.Now()
	// judged: the fresh incarnation's own verdict, one that may take work.
	// Healthy, or degraded for another reason than memory (the old fleet's
	// scheduler may have stopped with claims on worker-1 that nobody closes:
	// drift until drift.heal_after, which is true and not this test's point).
	judged := false
	var last contract.Worker
	for time.Since(began) < 45*time.Second || !judged {
		if time.Since(began) > 120*time.Second {
			t.Fatalf("the fresh %s was never judged on its own evidence; last %s %+v %v", id, last.State, last.Incarnation, reasonCodes(last))
		}
		w, err := j.worker(id)
		if err == nil {
			last = w
			if rs := memoryReasons(t, w); len(rs) > 0 && w.Incarnation != nil && w.Incarnation.ID != before.Incarnation.ID {
				t.Fatalf("the fresh %s (incarnation %s) has a memory reason %.1fs after the restart: %s %+v",
					id, w.Incarnation.ID, time.Since(began).Seconds(), w.State, rs)
			}
			// Not even before its first sample, when the API still shows
			// the restored incarnation: its latch waits for its process.
			if w.State == contract.Unhealthy {
				t.Fatalf("%s is unhealthy %.1fs after the restart (incarnation %+v): %+v", id, time.Since(began).Seconds(), w.Incarnation, w.Reasons)
			}
			if w.State.MayTakeWork() {
				if w.Incarnation == nil || w.Incarnation.ID == before.Incarnation.ID {
					t.Fatalf("the fresh %s may take work with the old incarnation: %+v", id, w.Incarnation)
				}
				judged = true
			}
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Logf("e2e: the fresh %s %s (%v), never unhealthy from memory, over %.1fs", id, last.State, reasonCodes(last), time.Since(began).Seconds())
}

// TestIncarnationExit: a root killed, a root restarted by its supervisor,
// a main loop blocked.
func TestIncarnationExit(t *testing.T) {
	defer parallel(t, 65*time.Second)() // its longest subtest
	prefix := runPrefix + "exit-"
	_, e := startIncarnationFleet(t, "inc-exit", prefix, 3)
	killed, restarted, blocked := prefix+"1", prefix+"2", prefix+"3"
	for _, id := range []string{killed, restarted, blocked} {
		// Healthy may come first from the worker's own telemetry (its
		// service.instance.id) and its tree at the receiver's next
		// discovery: wait for both, one life (the pid file's process).
		eventually(t, 90*time.Second, 250*time.Millisecond, id+" healthy, its incarnation the pid file's process", func() error {
			w, err := worker(e, id)
			if err != nil {
				return err
			}
			if w.State != contract.Healthy {
				return fmt.Errorf("state %s %v", w.State, reasonCodes(w))
			}
			if pid := pidOfOrZero(e, id); w.Incarnation == nil || w.Incarnation.PID != int64(pid) {
				return fmt.Errorf("incarnation %+v, pid file %d", w.Incarnation, pid)
			}
			return nil
		})
	}

	t.Run("SIGKILL", func(t *testing.T) {
		defer parallel(t, 2*time.Second)()
		pid := pidOf(t, e, killed)
		if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
			t.Fatal(err)
		}
		at := time.Now()
		var w contract.Worker
		eventually(t, judgeLoadFactor*5*time.Second, 100*time.Millisecond, killed+" lost, process_exited", func() error {
			var err error
			if w, err = worker(e, killed); err != nil {
				return err
			}
			if w.State != contract.Lost {
				return fmt.Errorf("state %s %v", w.State, reasonCodes(w))
			}
			return nil
		})
		took := time.Since(at)
		requireCode(t, e, killed, 503)
		if len(w.Reasons) != 1 || w.Reasons[0].Code != contract.CodeProcessExited || w.Reasons[0].Exit == nil {
			t.Fatalf("reasons %+v", w.Reasons)
		}
		ex := w.Reasons[0].Exit
		if ex.How != contract.ExitSignal || ex.Signal == nil || *ex.Signal != 9 {
			t.Fatalf("exit %+v, want signal 9", ex)
		}
		// On the verdict's own figures: from the exit the kernel reported
		// to the state's start.
		if d := w.Since.Sub(ex.At); d < 0 || d > boundExitToLost {
			t.Errorf("lost %v after the exit (exit at %v, lost since %v), bound %v", d, ex.At, w.Since, boundExitToLost)
		}
		t.Logf("RESULT e2e: SIGKILL to lost (process_exited, signal 9): %.1fs by the wall clock, %.1fs by the verdict (goal 5 s)",
			took.Seconds(), w.Since.Sub(ex.At).Seconds())
	})

	t.Run("supervisor restart", func(t *testing.T) {
		defer parallel(t, 30*time.Second)()
		old := pidOf(t, e, restarted)
		if err := syscall.Kill(old, syscall.SIGUSR1); err != nil {
			t.Fatal(err)
		}
		began := time.Now()
		newIncarnation := false
		for time.Since(began) < 30*time.Second || !newIncarnation {
			if time.Since(began) > 90*time.Second {
				t.Fatalf("%s: no new incarnation after the restart", restarted)
			}
			w, err := worker(e, restarted)
			if err == nil {
				if w.State == contract.Lost {
					t.Fatalf("%s lost %.1fs after a supervisor's restart: %+v", restarted, time.Since(began).Seconds(), w.Reasons)
				}
				if w.Incarnation != nil && w.Incarnation.PID != int64(old) && w.Incarnation.PID == int64(pidOfOrZero(e, restarted)) {
					newIncarnation = true
				}
			}
			time.Sleep(100 * time.Millisecond)
		}
	})

	t.Run("main loop blocked", func(t *testing.T) {
		defer parallel(t, 65*time.Second)()
		pid := pidOf(t, e, blocked)
		if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = syscall.Kill(pid, syscall.SIGCONT) }()
		for began := time.Now(); time.Since(began) < 60*time.Second; time.Sleep(250 * time.Millisecond) {
			if w, err := worker(e, blocked); err == nil && w.State == contract.Lost {
				t.Fatalf("%s lost while its main loop is blocked, %.1fs in: %+v", blocked, time.Since(began).Seconds(), w.Reasons)
			}
		}
		if err := syscall.Kill(pid, syscall.SIGCONT); err != nil {
			t.Fatal(err)
		}
		// Awake: its own telemetry again, and still never lost. (Its
		// verdict otherwise is the other rules': runs whose children ended
		// while it was stopped may count as kills.)
		resumed := time.Now()
		eventually(t, 60*time.Second, 250*time.Millisecond, blocked+" reports again", func() error {
			w, err := worker(e, blocked)
			switch {
			case err != nil:
				return err
			case w.State == contract.Lost:
				t.Fatalf("%s lost after it resumed: %+v", blocked, w.Reasons)
			case !w.Sources.Telemetry().LastSeen.Time().After(resumed):
				return fmt.Errorf("its telemetry last seen %v", w.Sources.Telemetry().LastSeen)
			}
			return nil
		})
	})
}
