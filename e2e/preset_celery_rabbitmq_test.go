//go:build e2e

package e2e

// The Celery preset on a real rabbitmq-server (Debian's 3.10.8): the
// celery receiver's AMQP transport (its own named queue bound to the
// celeryev topic exchange; queue lengths by passive declare), a worker
// with -E only, tasks that succeed, raise, exit their child and hit the
// hard time limit, tasks waiting in a queue no worker consumes, and a
// collector SIGKILLed and restarted while tasks run: none lost.

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/workerwatch/workerwatch/internal/contract"
	"github.com/workerwatch/workerwatch/internal/freeport"
)

// startRabbitMQ starts rabbitmq-server on free loopback ports (AMQP,
// Erlang distribution, epmd) with its files in a temporary directory, and
// returns its AMQP URL.
func startRabbitMQ(t *testing.T) string {
	bin := need(t, "rabbitmq-server", "/usr/sbin/rabbitmq-server")
	ctl := need(t, "rabbitmqctl", "/usr/sbin/rabbitmqctl")
	dir, err := os.MkdirTemp("", "ww-rabbitmq-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = os.RemoveAll(dir) })
	// Debian's wrapper runs the broker as the rabbitmq user.
	if err := os.Chmod(dir, 0o777); err != nil {
		t.Fatal(err)
	}
	writeFile(t, filepath.Join(dir, "enabled_plugins"), "[].\n")
	_ = os.Chmod(filepath.Join(dir, "enabled_plugins"), 0o666)
	amqpPort, epmdPort := freeport.Port(t), freeport.Port(t)
	env := []string{
		fmt.Sprintf("RABBITMQ_NODENAME=ww%d@localhost", os.Getpid()),
		"RABBITMQ_NODE_IP_ADDRESS=127.0.0.1",
		fmt.Sprintf("RABBITMQ_NODE_PORT=%d", amqpPort),
		fmt.Sprintf("RABBITMQ_DIST_PORT=%d", freeport.Port(t)),
		fmt.Sprintf("ERL_EPMD_PORT=%d", epmdPort),
		"ERL_EPMD_ADDRESS=127.0.0.1",
		"RABBITMQ_MNESIA_BASE=" + filepath.Join(dir, "mnesia"),
		"RABBITMQ_LOG_BASE=" + filepath.Join(dir, "log"),
		"RABBITMQ_PID_FILE=" + filepath.Join(dir, "pid"),
		"RABBITMQ_ENABLED_PLUGINS_FILE=" + filepath.Join(dir, "enabled_plugins"),
		"RABBITMQ_CONFIG_FILE=" + filepath.Join(dir, "rabbitmq"),
		"HOME=" + dir,
	}
	p := start(t, "celery-rabbitmq", env, bin)
	// The broker runs under su as another user: stop it with its own tool
	// (run before the start helper's SIGTERM to the wrapper).
	t.Cleanup(func() {
		// The broker's own log (boot steps with their times) is in dir,
		// which is removed: keep it next to the others when the test failed.
		if t.Failed() {
			logs, _ := filepath.Glob(filepath.Join(dir, "log", "*.log"))
			for _, l := range logs {
				if b, err := os.ReadFile(l); err == nil {
					_ = os.WriteFile(filepath.Join(logDir, "celery-rabbitmq-"+filepath.Base(l)), b, 0o644)
				}
			}
		}
		cmd := exec.Command(ctl, "shutdown")
		cmd.Env = append(os.Environ(), env...)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Logf("rabbitmqctl shutdown: %v\n%s", err, out)
		}
		// The broker started an epmd daemon on our epmd port: stop it too.
		if epmd, err := exec.LookPath("epmd"); err == nil {
			if out, err := exec.Command(epmd, "-port", strconv.Itoa(epmdPort), "-kill").CombinedOutput(); err != nil {
				t.Logf("epmd -kill: %v\n%s", err, out)
			}
		}
	})
	waitListening(t, p, fmt.Sprintf("127.0.0.1:%d", amqpPort))
	return fmt.Sprintf("amqp://guest:guest@127.0.0.1:%d//", amqpPort)
}

func TestPresetCeleryRabbitMQ(t *testing.T) {
	defer parallel(t, 100*time.Second)() // its own broker, collector, hostnames and logs (newCeleryRun)
	r := newCeleryRun(t)
	amqpURL := startRabbitMQ(t)
	r.broker = amqpURL
	// This scenario proves the named event queue alone: no result_backend.
	r.backend = ""
	for i, e := range r.env {
		if strings.HasPrefix(e, "BROKER=") {
			r.env[i] = "BROKER=" + amqpURL
		}
	}
	const q, idle = "q-rmq", "q-idle"
	// A named event queue: the events published while the collector
	// restarts wait in it.
	r.startCollector([]string{q, idle}, map[string]any{"receivers::celery::event_queue": r.prefix + "-events"})
	host := r.host("rmq")
	pw := r.worker("rmq", q, 2)
	// The worker declared the celeryev exchange when it started; the
	// receiver binds its queue within a second: once the worker's heartbeat
	// is read, every later event is.
	eventually(t, time.Minute, time.Second, "the worker's heartbeats read from RabbitMQ", func() error {
		_, w, err := r.health(host)
		if err != nil {
			return err
		}
		if !w.Sources.Telemetry().Seen {
			return fmt.Errorf("not seen yet")
		}
		return nil
	})

	want := map[string][2]string{} // id -> result, kill reason
	for task, w := range map[string][2]string{
		"ok": {contract.ResultSuccess, ""}, "boom": {contract.ResultFailure, ""},
		"exit_child": {contract.ResultFailure, contract.KillCrash}, "hard_limit": {contract.ResultTimeout, contract.KillTimeout},
	} {
		for _, id := range r.send(q, task, 1) {
			want[id] = w
		}
	}
	waiting := r.send(idle, "ok", 3)
	eventually(t, 3*time.Minute, time.Second, "every task's end read from RabbitMQ", func() error {
		code, w, err := r.health(host)
		if err != nil {
			return err
		}
		for id, wr := range want {
			rr, ok := recentRun(w, id)
			if !ok || rr.Result != wr[0] || rr.KillReason != wr[1] {
				return fmt.Errorf("run %s: %+v, want %v", id, rr, wr)
			}
		}
		if code != 200 || w.State != contract.Healthy {
			return fmt.Errorf("%d %s %v", code, w.State, w.Reasons)
		}
		return nil
	})
	eventually(t, time.Minute, time.Second, "3 tasks pending in q-idle (passive declare)", func() error {
		m, err := httpGet("http://" + r.c.promExp + "/metrics")
		if err != nil {
			return err
		}
		g := regexp.MustCompile(`(?m)^workerwatch_scheduler_runs_pending\{[^}]*messaging_destination_name="` + idle + `"[^}]*\} (\S+)$`).FindStringSubmatch(m)
		if g == nil || g[1] != "3" {
			return fmt.Errorf("%v\n%s", g, grepLines(m, "pending"))
		}
		return nil
	})
	// Flower's worker view over AMQP: online, its heartbeat age within a
	// few heartbeat intervals (freq 2 s; 30 s is a wide bound), its
	// heartbeats counted by type.
	onWorker := `cicd_worker_id="` + host + `"`
	eventually(t, time.Minute, time.Second, "the worker online with a fresh heartbeat, from RabbitMQ", func() error {
		m, err := httpGet("http://" + r.c.promExp + "/metrics")
		if err != nil {
			return err
		}
		online, ok1 := metricSum(m, "celery_worker_online_ratio", onWorker)
		age, ok2 := metricSum(m, "celery_worker_heartbeat_age_seconds", onWorker)
		hb, ok3 := metricSum(m, "celery_events_total", onWorker, `celery_event_type="worker-heartbeat"`)
		if !ok1 || !ok2 || !ok3 || online != 1 || age < 0 || age > 30 || hb < 1 {
			return fmt.Errorf("online %v age %v heartbeats %v\n%s", online, age, hb, grepLines(m, "celery_worker"))
		}
		return nil
	})
	// The collector is SIGKILLed; tasks run while it is down; it starts
	// again: it reads every one of them from its queue (none lost), and the
	// kill counts from before are kept.
	r.c.kill(t)
	during := map[string][2]string{}
	for _, id := range r.send(q, "ok", 2) {
		during[id] = [2]string{contract.ResultSuccess, ""}
	}
	for _, id := range r.send(q, "exit_child", 1) {
		during[id] = [2]string{contract.ResultFailure, contract.KillCrash}
	}
	duringIDs := make([]string, 0, len(during))
	for id := range during {
		duringIDs = append(duringIDs, id)
	}
	eventually(t, 2*time.Minute, time.Second, "the tasks run while the collector is down ended, by Celery", func() error {
		for id, st := range r.states(duringIDs) {
			if st[0] != "SUCCESS" && st[0] != "FAILURE" {
				return fmt.Errorf("%s: %s", id, st[0])
			}
		}
		return nil
	})
	r.c.start(t)
	eventually(t, 2*time.Minute, time.Second, "every task run while the collector was down, read after its restart", func() error {
		_, w, err := r.health(host)
		if err != nil {
			return err
		}
		for id, wr := range during {
			rr, ok := recentRun(w, id)
			if !ok || rr.Result != wr[0] || rr.KillReason != wr[1] {
				return fmt.Errorf("run %s: %+v, want %v", id, rr, wr)
			}
		}
		if w.Runs.Kills[contract.KillCrash] != 2 {
			return fmt.Errorf("crash kills %d, want 2 (one before the restart, one while down)", w.Runs.Kills[contract.KillCrash])
		}
		return nil
	})
	for id, wr := range during {
		want[id] = wr
	}
	ids := make([]string, 0, len(want))
	for id := range want {
		ids = append(ids, id)
	}
	states := r.states(append(ids, waiting...))
	for _, id := range waiting {
		if states[id][0] != "PENDING" {
			t.Errorf("a task of the unconsumed queue: Celery says %v", states[id])
		}
	}
	t.Logf("e2e: RabbitMQ run, Celery's outcome: %v", states)
	// The worker stops (warm shutdown): its worker-offline is read from
	// RabbitMQ, and it is offline.
	pw.stop(t)
	eventually(t, time.Minute, time.Second, "the worker's worker-offline read from RabbitMQ", func() error {
		m, err := httpGet("http://" + r.c.promExp + "/metrics")
		if err != nil {
			return err
		}
		off, ok1 := metricSum(m, "celery_events_total", onWorker, `celery_event_type="worker-offline"`)
		online, ok2 := metricSum(m, "celery_worker_online_ratio", onWorker)
		if !ok1 || !ok2 || off != 1 || online != 0 {
			return fmt.Errorf("worker-offline %v online %v\n%s", off, online, grepLines(m, "celery_"))
		}
		return nil
	})
	if lines := r.c.errorLines(); len(lines) > 0 {
		t.Errorf("collector errors:\n%s", strings.Join(lines, "\n"))
	}
}
