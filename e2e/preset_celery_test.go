//go:build e2e

package e2e

// The Celery preset (presets/celery) end to end: Debian's real Celery 5.2.6
// (python3-celery) on a real redis-server, workers started with -E and
// nothing else, the real collector with the preset as shipped (its worker
// selector narrowed to this run's hostnames, its timings shortened), and
// every verdict of the preset README's table asserted through the health
// API, every task accounted for with Celery's own outcome from the result
// backend.

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/workerwatch/workerwatch/internal/contract"
	"github.com/workerwatch/workerwatch/internal/procfs"
)

var celeryDir = filepath.Join(repoRoot, "e2e", "testdata", "celery")

// celeryRun is one run: a redis-server (broker and result backend), the
// collector, and the helpers to start workers and send tasks.
type celeryRun struct {
	t      *testing.T
	python string
	broker string // redis://addr/0
	// backend is Celery's result backend (redis://addr/1), which the
	// receiver reads after a restart (result_backend).
	backend string
	env     []string
	prefix  string // of every hostname of this run
	c       *presetCollector
	// exported counts the OTLP/HTTP log requests the preset's exporter sent.
	exported atomic.Int64
	// exportTo, when set, replaces the counting sink as the exporter's
	// endpoint.
	exportTo string
}

// countingSink is an OTLP/HTTP endpoint that accepts everything and counts
// the logs requests: the preset's OTLP out.
func (r *celeryRun) countingSink() string {
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		_, _ = io.Copy(io.Discard, req.Body)
		if req.URL.Path == "/v1/logs" {
			r.exported.Add(1)
		}
		w.WriteHeader(http.StatusOK)
	}))
	r.t.Cleanup(s.Close)
	return s.URL
}

// celeryRuns numbers the Celery scenarios of this test process.
var celeryRuns atomic.Int32

func newCeleryRun(t *testing.T) *celeryRun {
	python := need(t, "python3", "/usr/bin/python3")
	if err := exec.Command(python, "-c", "import celery, redis").Run(); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("python3-celery / python3-redis missing (scripts/install-test-deps.sh installs them): %v", err)
		}
		t.Skipf("python3-celery / python3-redis missing: %v", err)
	}
	// Each run's hostnames, process logs and collector are its own: the
	// Celery scenarios run side by side (t.Parallel), and a collector's
	// selector takes only its run's workers.
	prefix := fmt.Sprintf("ww%dc%d", os.Getpid(), celeryRuns.Add(1))
	addr := startRedis(t, "celery-redis-"+prefix)
	run := &celeryRun{
		t: t, python: python, broker: "redis://" + addr + "/0",
		prefix: prefix,
	}
	run.backend = "redis://" + addr + "/1"
	run.env = []string{"BROKER=" + run.broker, "BACKEND=" + run.backend, "PYTHONPATH=" + celeryDir}
	return run
}

// host is a worker hostname of this run.
func (r *celeryRun) host(name string) string { return r.prefix + "-" + name + "@e2e" }

// startCollector starts the preset's collector with an overlay: the worker
// selector's id capture narrowed to this run's hostnames, the broker, the
// queues, and the timings of a test.
func (r *celeryRun) startCollector(queues []string, set map[string]any) {
	t := r.t
	preset := filepath.Join(repoRoot, "presets", "celery", "collector.yaml")
	c := newPresetCollector(t, "celery-"+r.prefix, preset, t.TempDir())
	c.exportTo = r.exportTo
	if c.exportTo == "" {
		c.exportTo = r.countingSink()
	}
	defaults := map[string]any{
		"receivers::worker_process::collection_interval": "1s",
		"receivers::celery::broker":                      r.broker,
		"receivers::celery::queues":                      queues,
		"receivers::celery::collection_interval":         "1s",
	}
	if r.backend != "" {
		defaults["receivers::celery::result_backend"] = r.backend
	}
	c.writeOverlay(t, idSelector(t, preset, r.prefix+"-"), defaults, set)
	c.start(t)
	r.c = c
}

// worker starts `python3 -m celery -A tasks worker -E` on queue with
// concurrency c: the preset asks nothing more of a worker.
func (r *celeryRun) worker(name, queue string, c int, extra ...string) *proc {
	return r.workerEnv(name, queue, c, nil, extra...)
}

// workerEnv is worker with extra environment (the app's transport options).
func (r *celeryRun) workerEnv(name, queue string, c int, env []string, extra ...string) *proc {
	args := append([]string{
		"-m", "celery", "-A", "tasks", "worker", "-E", "-c", strconv.Itoa(c), "-Q", queue,
		"-n", r.host(name), "--loglevel=INFO",
	}, extra...)
	p := start(r.t, "celery-"+r.prefix+"-"+name, append(slices.Clone(r.env), env...), r.python, args...)
	waitLog(r.t, p, r.host(name)+" ready", startDeadline)
	return p
}

// send sends count tasks to queue and returns their ids; seconds, if
// given, is the task's seconds argument.
func (r *celeryRun) send(queue, task string, count int, seconds ...string) []string {
	out, err := r.client(append([]string{"send", queue, task, strconv.Itoa(count)}, seconds...)...)
	if err != nil {
		r.t.Fatalf("send %s: %v\n%s", task, err, out)
	}
	return strings.Fields(out)
}

func (r *celeryRun) client(args ...string) (string, error) {
	cmd := exec.Command(r.python, append([]string{filepath.Join(celeryDir, "client.py")}, args...)...)
	cmd.Env = append(os.Environ(), r.env...)
	b, err := cmd.CombinedOutput()
	return string(b), err
}

// states reads Celery's own outcome of each task from the result backend.
func (r *celeryRun) states(ids []string) map[string][2]string {
	out, err := r.client(append([]string{"states"}, ids...)...)
	if err != nil {
		r.t.Fatalf("states: %v\n%s", err, out)
	}
	var m map[string][2]string
	if err := json.Unmarshal([]byte(out), &m); err != nil {
		r.t.Fatalf("states: %v\n%s", err, out)
	}
	return m
}

// health reads a worker from the health API.
func (r *celeryRun) health(host string) (int, contract.Worker, error) {
	var w contract.Worker
	code, err := getJSON("http://"+r.c.health+"/health/workers/"+host, &w)
	return code, w, err
}

// mainPID is the pid of a worker's main process.
func mainPID(p *proc) int { return p.cmd.Process.Pid }

// procState is the state letter of /proc/<pid>/stat (R, S, T...), read
// by the receiver's own parser; "" when it cannot be read.
func procState(pid int) string {
	st, err := procfs.StatOf(pid)
	if err != nil {
		return ""
	}
	return string(st.State)
}

func recentRun(w contract.Worker, id string) (contract.RunRecord, bool) {
	for _, rr := range w.Runs.Recent.Records() {
		if rr.ID == id {
			return rr, true
		}
	}
	return contract.RunRecord{}, false
}

func TestPresetCelery(t *testing.T) {
	defer parallel(t, 215*time.Second)() // its own broker, collector, hostnames and logs (newCeleryRun)
	r := newCeleryRun(t)
	const qMain, qLeak, qBlock, qKill, qRecycle = "q-main", "q-leak", "q-block", "q-kill", "q-recycle"
	r.startCollector([]string{qMain, qLeak, qBlock, qKill, qRecycle}, map[string]any{
		"processors::worker_health::stalled::after":                        "20s",
		"processors::worker_health::lost::after":                           "15s",
		"processors::worker_health::memory::roles::main::soft_limit_bytes": 150 << 20,
		"processors::worker_health::hysteresis::recover_evaluations":       2,
	})
	hMain, hLeak, hBlock, hKill := r.host("main"), r.host("leak"), r.host("block"), r.host("kill")
	r.worker("main", qMain, 2)
	r.worker("leak", qLeak, 1)
	pBlock := r.worker("block", qBlock, 2)
	t.Cleanup(func() { _ = syscall.Kill(mainPID(pBlock), syscall.SIGCONT) })
	pKill := r.worker("kill", qKill, 1)
	// Pool children replaced past 64 MiB (worker_max_memory_per_child, in KiB).
	hRecycle := r.host("recycle")
	r.worker("recycle", qRecycle, 1, "--max-memory-per-child=65536")

	// 1. Tasks that succeed, raise, exit their child, are SIGKILLed, hit the
	// hard and the soft time limit, on one worker.
	want := map[string]struct{ celery, exc, result, kill string }{}
	add := func(task, celery, exc, result, kill string, n int) {
		for _, id := range r.send(qMain, task, n) {
			want[id] = struct{ celery, exc, result, kill string }{celery, exc, result, kill}
		}
	}
	add("ok", "SUCCESS", "", contract.ResultSuccess, "", 3)
	add("boom", "FAILURE", "ValueError", contract.ResultFailure, "", 1)
	add("exit_child", "FAILURE", "WorkerLostError", contract.ResultFailure, contract.KillCrash, 1)
	add("sigkill_self", "FAILURE", "WorkerLostError", contract.ResultFailure, contract.KillOOM, 1)
	add("hard_limit", "FAILURE", "TimeLimitExceeded", contract.ResultTimeout, contract.KillTimeout, 1)
	add("soft_limit", "FAILURE", "SoftTimeLimitExceeded", contract.ResultFailure, "", 1)
	ids := make([]string, 0, len(want))
	for id := range want {
		ids = append(ids, id)
	}
	slices.Sort(ids)
	eventually(t, 3*time.Minute, time.Second, "every task of worker main ended, by Celery", func() error {
		for id, st := range r.states(ids) {
			if st[0] != "SUCCESS" && st[0] != "FAILURE" {
				return fmt.Errorf("%s: %s", id, st[0])
			}
		}
		return nil
	})
	for id, st := range r.states(ids) {
		if w := want[id]; st[0] != w.celery || st[1] != w.exc {
			t.Errorf("Celery's outcome of %s: %v, want %s %s", id, st, w.celery, w.exc)
		}
	}
	checkMain := func(phase string) {
		eventually(t, 2*time.Minute, time.Second, phase+": worker main's runs and kills", func() error {
			code, w, err := r.health(hMain)
			if err != nil {
				return err
			}
			for _, id := range ids {
				rr, ok := recentRun(w, id)
				if !ok {
					return fmt.Errorf("run %s not in recent runs", id)
				}
				if rr.Result != want[id].result || rr.KillReason != want[id].kill {
					return fmt.Errorf("run %s: %s/%s, want %s/%s", id, rr.Result, rr.KillReason, want[id].result, want[id].kill)
				}
				if want[id].result == contract.ResultSuccess && rr.DurationSeconds <= 0 {
					return fmt.Errorf("run %s: no runtime", id)
				}
			}
			if w.Runs.Kills[contract.KillCrash] != 1 || w.Runs.Kills[contract.KillOOM] != 1 || w.Runs.Kills[contract.KillTimeout] != 1 {
				return fmt.Errorf("kills %v, want crash, oom, timeout once each", w.Runs.Kills)
			}
			if code != 200 || w.State != contract.Healthy {
				return fmt.Errorf("%d %s %v, want 200 healthy", code, w.State, w.Reasons)
			}
			if w.Runs.Capacity != 2 {
				return fmt.Errorf("capacity %d, want 2", w.Runs.Capacity)
			}
			return nil
		})
	}
	checkMain("before the collector restart")
	// The tree by role: the prefork pool's children (same command line as
	// the main process) are role pool by position.
	eventually(t, time.Minute, time.Second, "worker main's pool memory", func() error {
		m, err := httpGet("http://" + r.c.promExp + "/metrics")
		if err != nil {
			return err
		}
		re := regexp.MustCompile(`(?m)^workerwatch_process_count\{[^}]*cicd_worker_id="` + regexp.QuoteMeta(hMain) + `"[^}]*workerwatch_process_role="pool"[^}]*\} (\S+)$`)
		if g := re.FindStringSubmatch(m); g == nil || g[1] != "2" {
			return fmt.Errorf("pool processes: %v\n%s", g, grepLines(m, "workerwatch_process_count"))
		}
		if !strings.Contains(m, `workerwatch_process_role="pool"`) || !strings.Contains(m, "process_memory_usage_bytes{") {
			return fmt.Errorf("no pool memory")
		}
		return nil
	})

	// 2. The main process leaks (16 MiB per task, in a signal handler of
	// the main process): unhealthy, memory over the main role's limit.
	leakIDs := r.send(qLeak, "leak_main", 12)
	eventually(t, 3*time.Minute, time.Second, "worker leak unhealthy for its main process's memory", func() error {
		code, w, err := r.health(hLeak)
		if err != nil {
			return err
		}
		for _, rs := range w.Reasons {
			if rs.Code == "memory_over_soft_limit" && rs.Role == contract.RoleMain && code == 503 && w.State == contract.Unhealthy {
				return nil
			}
		}
		return fmt.Errorf("%d %s %v", code, w.State, w.Reasons)
	})

	// 3. A blocked main process: a task SIGSTOPs it; tasks then wait in its
	// queue while it has a free slot: stalled (503), never lost.
	stopID := r.send(qBlock, "stop_parent", 1)
	eventually(t, time.Minute, 500*time.Millisecond, "worker block's main process stopped", func() error {
		if s := procState(mainPID(pBlock)); s != "T" {
			return fmt.Errorf("state %q", s)
		}
		return nil
	})
	blockedAt := time.Now()
	waiting := r.send(qBlock, "ok", 3)
	var stalledAfter time.Duration
	eventually(t, 3*time.Minute, time.Second, "worker block stalled with no_claim", func() error {
		code, w, err := r.health(hBlock)
		if err != nil {
			return err
		}
		if w.State == contract.Lost {
			t.Fatalf("a blocked main process (its tree alive) was judged lost: %v", w.Reasons)
		}
		if code == 503 && w.State == contract.Stalled {
			stalledAfter = time.Since(blockedAt)
			return nil
		}
		return fmt.Errorf("%d %s %v", code, w.State, w.Reasons)
	})
	// stalled.after counts from the worker's last start of a task: an idle
	// worker is stalled as soon as work waits for it once it has been idle
	// that long.
	t.Logf("e2e: blocked main process: stalled %s after it stopped, with tasks waiting (stalled.after 20s since its last start)", stalledAfter.Round(time.Second))
	// Flower's view: offline after 2 x freq without a heartbeat. The gauge's
	// unit "1" is the Prometheus exporter's _ratio suffix.
	eventually(t, time.Minute, time.Second, "celery_worker_online 0 for the blocked worker", func() error {
		metrics, err := httpGet("http://" + r.c.promExp + "/metrics")
		if err != nil {
			return err
		}
		online := regexp.MustCompile(`(?m)^celery_worker_online(_ratio)?\{[^}]*cicd_worker_id="` + regexp.QuoteMeta(hBlock) + `"[^}]*\} (\S+)$`).FindStringSubmatch(metrics)
		if online == nil || online[2] != "0" {
			return fmt.Errorf("%v", online)
		}
		return nil
	})
	if s := procState(mainPID(pBlock)); s != "T" {
		t.Fatalf("the blocked main process is %q, not stopped", s)
	}
	if err := syscall.Kill(mainPID(pBlock), syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	eventually(t, 3*time.Minute, time.Second, "worker block healthy once it runs again", func() error {
		code, w, err := r.health(hBlock)
		if err != nil {
			return err
		}
		if code != 200 || w.State != contract.Healthy {
			return fmt.Errorf("%d %s %v", code, w.State, w.Reasons)
		}
		return nil
	})

	// 3b. Children recycled by worker_max_memory_per_child after every
	// task: no event at all; the tree counts the pool children that exited,
	// no kill; 5 recycles for 5 tasks is a recycle loop (degraded,
	// pool_recycle_loop; it may still take work).
	// A child that lived less than a scrape interval (these tasks take
	// 0.1 s) is seen by the proc connector only, in the default role
	// (child): its position is unknown without a scrape. So pool + child
	// exits count the recycled children, and also whatever else the worker
	// ran: its start-up banner runs `uname -p` (Python's
	// platform.platform()), which exits after the collector first saw the
	// worker when the machine is loaded (6 exits, not 5, beside the suite
	// at a load average of 29). The tasks' exits are counted from the
	// worker's count once it is steady.
	recycleExits := func() (float64, string, error) {
		m, err := httpGet("http://" + r.c.promExp + "/metrics")
		if err != nil {
			return 0, "", err
		}
		var exits float64
		for _, g := range regexp.MustCompile(`(?m)^workerwatch_process_exited_total\{[^}]*cicd_worker_id="`+regexp.QuoteMeta(hRecycle)+`"[^}]*workerwatch_process_role="(pool|child)"[^}]*\} (\S+)$`).FindAllStringSubmatch(m, -1) {
			var v float64
			_, _ = fmt.Sscan(g[2], &v)
			exits += v
		}
		return exits, grepLines(m, "workerwatch_process_exited_total"), nil
	}
	// Steady: unchanged for longer than kills.exit_window (15 s), after
	// which an exit no run explains is a child_exit kill (the processor's
	// rule; `uname -p` is one). The tasks' kills are counted from there too.
	before, last, changed := 0.0, -1.0, time.Now()
	eventually(t, 2*time.Minute, time.Second, "worker recycle's exits steady before its tasks", func() error {
		v, _, err := recycleExits()
		if err != nil {
			return err
		}
		if v != last {
			last, changed = v, time.Now()
		}
		before = v
		if time.Since(changed) < 20*time.Second {
			return fmt.Errorf("exits %v for %s", v, time.Since(changed).Round(time.Second))
		}
		return nil
	})
	_, wBefore, err := r.health(hRecycle)
	if err != nil {
		t.Fatal(err)
	}
	killsBefore := wBefore.Runs.Kills[contract.KillChildExit]
	if before != 0 || killsBefore != 0 {
		t.Logf("e2e: worker recycle before its tasks: %v exits, %d child_exit kills (its start-up's)", before, killsBefore)
	}
	growIDs := r.send(qRecycle, "grow", 5)
	eventually(t, 3*time.Minute, time.Second, "5 pool children of worker recycle replaced: a recycle loop", func() error {
		exits, lines, err := recycleExits()
		if err != nil {
			return err
		}
		if exits-before != 5 {
			return fmt.Errorf("pool and child exits since the tasks were sent: %v\n%s", exits-before, lines)
		}
		code, w, err := r.health(hRecycle)
		if err != nil {
			return err
		}
		loop := false
		for _, rs := range w.Reasons {
			loop = loop || (rs.Code == "pool_recycle_loop" && rs.Value == 5)
		}
		if code != 200 || w.State != contract.Degraded || !loop {
			return fmt.Errorf("%d %s %v kills %v", code, w.State, w.Reasons, w.Runs.Kills)
		}
		if w.Runs.Kills[contract.KillChildExit] != killsBefore {
			return fmt.Errorf("recycles counted as child_exit kills: %v (%d before the tasks)", w.Runs.Kills, killsBefore)
		}
		for _, id := range growIDs {
			if rr, ok := recentRun(w, id); !ok || rr.Result != contract.ResultSuccess || rr.KillReason != "" {
				return fmt.Errorf("run %s: %+v", id, rr)
			}
		}
		return nil
	})

	// 4. The collector restarts mid-run: the verdicts and kill counts of
	// worker main survive (checkpoint), and tasks after it are read.
	r.c.stop(t)
	r.c.start(t)
	checkMain("after the collector restart")
	more := r.send(qMain, "ok", 2)
	eventually(t, 2*time.Minute, time.Second, "tasks after the collector restart", func() error {
		_, w, err := r.health(hMain)
		if err != nil {
			return err
		}
		for _, id := range more {
			if rr, ok := recentRun(w, id); !ok || rr.Result != contract.ResultSuccess {
				return fmt.Errorf("run %s: %+v", id, rr)
			}
		}
		return nil
	})

	// 4b. The collector SIGKILLed while tasks run, and they finish (and one
	// more is sent, runs and fails) while it is down: Redis pub/sub keeps
	// none of their events; after the restart the receiver reads Celery's
	// result backend (result_backend) and every task has Celery's outcome.
	longIDs := r.send(qMain, "long", 2)
	eventually(t, 2*time.Minute, time.Second, "the long tasks started", func() error {
		_, w, err := r.health(hMain)
		if err != nil {
			return err
		}
		for _, id := range longIDs {
			if !slices.Contains(w.Runs.Worker, id) {
				return fmt.Errorf("run %s not held: %v", id, w.Runs.Worker)
			}
		}
		return nil
	})
	r.c.kill(t)
	downIDs := append(slices.Clone(longIDs), r.send(qMain, "boom", 1)...)
	eventually(t, 2*time.Minute, time.Second, "the tasks done while the collector is down", func() error {
		st := r.states(downIDs)
		for _, id := range downIDs {
			if s := st[id][0]; s != "SUCCESS" && s != "FAILURE" {
				return fmt.Errorf("%s: %v", id, st[id])
			}
		}
		return nil
	})
	r.c.start(t)
	eventually(t, 2*time.Minute, time.Second, "the outcomes missed while the collector was down", func() error {
		_, w, err := r.health(hMain)
		if err != nil {
			return err
		}
		for i, id := range downIDs {
			want := contract.ResultSuccess
			if i == len(downIDs)-1 {
				want = contract.ResultFailure
			}
			if rr, ok := recentRun(w, id); !ok || rr.Result != want {
				return fmt.Errorf("run %s: %+v (want %s)", id, rr, want)
			}
		}
		return nil
	})

	// 4c. Flower's prefetch time and prefetched count: worker kill (-c 1)
	// runs a 30 s task and prefetches the two sent after it; they wait at
	// the worker until it ends.
	r.send(qKill, "long", 1, "30")
	okSent := time.Now()
	okIDs := r.send(qKill, "ok", 2)
	okOnKill := []string{`celery_task_name="tasks.ok"`, `cicd_worker_id="` + hKill + `"`}
	eventually(t, time.Minute, 500*time.Millisecond, "2 ok tasks prefetched by worker kill", func() error {
		m, err := httpGet("http://" + r.c.promExp + "/metrics")
		if err != nil {
			return err
		}
		if v, ok := metricSum(m, "celery_worker_tasks_prefetched", okOnKill...); !ok || v != 2 {
			return fmt.Errorf("%v %v\n%s", v, ok, grepLines(m, "prefetch"))
		}
		return nil
	})
	eventually(t, 2*time.Minute, time.Second, "the prefetched tasks ran", func() error {
		for id, st := range r.states(okIDs) {
			if st[0] != "SUCCESS" {
				return fmt.Errorf("%s: %v", id, st)
			}
		}
		return nil
	})
	okWait := time.Since(okSent)
	eventually(t, time.Minute, time.Second, "worker kill's prefetch time", func() error {
		m, err := httpGet("http://" + r.c.promExp + "/metrics")
		if err != nil {
			return err
		}
		if v, ok := metricSum(m, "celery_worker_tasks_prefetched", okOnKill...); !ok || v != 0 {
			return fmt.Errorf("prefetched %v %v\n%s", v, ok, grepLines(m, "prefetch"))
		}
		// The ok tasks waited for the 30 s task: more than a second, less
		// than from their send to their SUCCESS.
		v, ok := metricSum(m, "celery_task_prefetch_time_seconds", okOnKill...)
		if !ok || v <= 1 || v >= okWait.Seconds() {
			return fmt.Errorf("prefetch time %v %v, want in (1, %.1f)\n%s", v, ok, okWait.Seconds(), grepLines(m, "prefetch"))
		}
		t.Logf("e2e: prefetch time of the ok tasks %.1f s (sent to done %.1f s)", v, okWait.Seconds())
		return nil
	})

	// 5. A worker SIGKILLed while it runs a task: lost once its tree is gone
	// (its orphaned pool child finishes the task first), then restarted
	// under the same hostname: a new incarnation, healthy, the task let go.
	longID := r.send(qKill, "long", 1)[0]
	eventually(t, time.Minute, 500*time.Millisecond, "the long task started on worker kill", func() error {
		_, w, err := r.health(hKill)
		if err != nil {
			return err
		}
		if !slices.Contains(w.Runs.Worker, longID) {
			return fmt.Errorf("held %v", w.Runs.Worker)
		}
		return nil
	})
	if err := pKill.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	killedAt := time.Now()
	eventually(t, 3*time.Minute, time.Second, "worker kill lost", func() error {
		code, w, err := r.health(hKill)
		if err != nil {
			return err
		}
		if code == 503 && w.State == contract.Lost {
			return nil
		}
		return fmt.Errorf("%d %s %v", code, w.State, w.Reasons)
	})
	t.Logf("e2e: SIGKILLed worker: lost %s after the kill (process_exited: lost.exit_grace 2s after its root exited)", time.Since(killedAt).Round(time.Second))
	r.worker("kill", qKill, 1)
	eventually(t, 2*time.Minute, time.Second, "worker kill healthy again, its task let go, worker_exit counted", func() error {
		code, w, err := r.health(hKill)
		if err != nil {
			return err
		}
		if slices.Contains(w.Runs.Worker, longID) {
			return fmt.Errorf("still holds %s", longID)
		}
		if w.Runs.Kills[contract.KillWorkerExit] < 1 {
			return fmt.Errorf("kills %v", w.Runs.Kills)
		}
		if code != 200 || w.State != contract.Healthy {
			return fmt.Errorf("%d %s %v", code, w.State, w.Reasons)
		}
		return nil
	})

	// Every task of the run, with Celery's own outcome.
	all := slices.Concat(ids, leakIDs, stopID, waiting, growIDs, more, okIDs, []string{longID})
	final := r.states(all)
	for _, id := range slices.Concat(leakIDs, stopID, waiting, growIDs, more, okIDs) {
		if final[id][0] != "SUCCESS" {
			t.Errorf("task %s: Celery says %v, want SUCCESS", id, final[id])
		}
	}
	// The SIGKILLed worker's task: its orphaned child stores SUCCESS in the
	// result backend (the child writes results), while no event ever says
	// it ended; without a result, Celery leaves it PENDING.
	if s := final[longID][0]; s != "SUCCESS" && s != "PENDING" {
		t.Errorf("the killed worker's task: Celery says %v", final[longID])
	}
	t.Logf("e2e: every task, Celery's outcome: %v", final)
	if r.exported.Load() == 0 {
		t.Errorf("the preset exported no logs over OTLP")
	}
	if lines := r.c.errorLines(); len(lines) > 0 {
		t.Errorf("collector errors:\n%s", strings.Join(lines, "\n"))
	}
}

// grepLines keeps the lines of text containing s.
func grepLines(text, s string) string {
	var out []string
	for _, l := range strings.Split(text, "\n") {
		if strings.Contains(l, s) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
