//go:build e2e

package e2e

// The BullMQ preset's harness (preset_bullmq_test.go has the scenarios): per
// scenario its own redis-server, real BullMQ workers from
// examples/bullmq-worker with their OpenTelemetry SDK off (they send
// nothing: the collector reads BullMQ's state in Redis), and the real
// collector started with presets/bullmq/collector.yaml; one Prometheus
// scrapes every scenario's collector. Everything on loopback ports picked
// here, everything ended by pid.

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/collector/confmap/confmaptest"

	"github.com/workerwatch/workerwatch/internal/freeport"
)

var (
	bullmqExampleDir = filepath.Join(repoRoot, "examples", "bullmq-worker")
	bullmqPreset     = filepath.Join(repoRoot, "presets", "bullmq", "collector.yaml")
	// bullmqRun tells this run's processes from another run's on the same
	// machine (a second checkout's suite, a CI run beside a developer's):
	// in the workers' command-line marker, which the collectors' selectors
	// match, and in the logs' directory (e2e-logs/bullmq-<pid>/), which the
	// scenarios read. Without it two runs' collectors sampled each other's
	// workers of the same names, and their logs were written into one file.
	bullmqRun = fmt.Sprintf("bullmq-%d", os.Getpid())
)

// bullScenario is one scenario's world: a queue on its own Redis, its workers,
// the queue side, and its own collector running the preset.
type bullScenario struct {
	t    *testing.T
	name string // short and unique: in worker ids, process names and the selector
	dir  string
	node string

	redisURL  string
	redisAddr string
	queue     string
	// otlpSink is where the collector's traces and logs go: nothing listens.
	otlpSink string

	otlpHTTP, otlpGRPC, health, promExp string
	telemetryPort                       int
	stateDir                            string
	// set: preset keys this scenario overrides ("a::b::c" paths), beside
	// the selector.
	set map[string]any
	// allowErrors: collector error lines this scenario causes on purpose.
	allowErrors []string
	// bindFailed: the collector starts that found a port taken (retried).
	bindFailed []int
	collector  *proc
	restarts   int

	e env // health API and Prometheus base URLs, for the fleet test's helpers
}

// newBullScenarios picks every scenario's ports at once: each collector's
// Prometheus endpoint must be known before the shared Prometheus starts.
func newBullScenarios(t *testing.T, names []string) (scenarios []*bullScenario, promWeb string) {
	promWeb = freeport.Addr(t)
	for _, n := range names {
		s := &bullScenario{
			name:     n,
			queue:    "jobs", // each scenario has its own Redis
			otlpHTTP: freeport.Addr(t), otlpGRPC: freeport.Addr(t), health: freeport.Addr(t), promExp: freeport.Addr(t),
			otlpSink:      freeport.Addr(t), // redisAddr: picked by begin
			telemetryPort: freeport.Port(t),
		}
		s.e.health = "http://" + s.health
		scenarios = append(scenarios, s)
	}
	return scenarios, promWeb
}

// begin binds the scenario to its (parallel) subtest and starts its Redis.
func (s *bullScenario) begin(t *testing.T, prom string) {
	s.t = t
	s.e.prom = prom
	s.dir = t.TempDir()
	s.stateDir = filepath.Join(s.dir, "state")
	s.node = need(t, "node")
	if _, err := os.Stat(filepath.Join(bullmqExampleDir, "node_modules", "bullmq")); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("examples/bullmq-worker/node_modules missing (scripts/install-test-deps.sh runs npm ci)")
		}
		t.Skipf("examples/bullmq-worker/node_modules missing: run npm ci there")
	}
	// noeviction is what BullMQ requires (its docs: keys must never be
	// evicted). Its port is picked now, not with the others when the group
	// began: a scenario may start minutes later (startRedis).
	addr := startRedis(t, s.proc("redis"), "--maxmemory-policy", "noeviction")
	s.redisAddr = addr
	s.redisURL = "redis://" + addr
}

// overlay writes a config that narrows the preset's worker selectors to this
// scenario's workers (their command line ends with `--scenario <name>.<pid>`):
// scenarios run in parallel on one host, and a collector must not sample
// another scenario's workers. Everything else comes from the preset as shipped.
func (s *bullScenario) overlay() string {
	conf, err := confmaptest.LoadConf(bullmqPreset)
	if err != nil {
		s.t.Fatal(err)
	}
	workers, ok := conf.Get("receivers::worker_process::workers").([]any)
	if !ok || len(workers) == 0 {
		s.t.Fatalf("%s: no receivers.worker_process.workers", bullmqPreset)
	}
	for _, w := range workers {
		sel := w.(map[string]any)["selector"].(map[string]any)
		re, _ := sel["cmdline"].(string)
		if re == "" {
			s.t.Fatalf("%s: a worker selector without cmdline: %v", bullmqPreset, sel)
		}
		sel["cmdline"] = "(?:" + re + ").*--scenario " + regexp.QuoteMeta(s.marker()) + "$"
	}
	over := map[string]any{"receivers": map[string]any{"worker_process": map[string]any{"workers": workers}}}
	for k, v := range s.set {
		put(over, k, v)
	}
	b, err := json.Marshal(over)
	if err != nil {
		s.t.Fatal(err)
	}
	path := filepath.Join(s.dir, "overlay.json") // JSON is YAML
	writeFile(s.t, path, string(b))
	return path
}

// startCollector starts the real binary with the preset (and the overlay) on
// the scenario's ports and state directory, and waits until it is ready.
// Ports are picked when the test starts and a scenario may start minutes
// later (the scenarios run -parallel at a time): a port taken meanwhile (by
// another test's outgoing connection) makes the first start pick new ones
// for the listeners nothing else knows yet (not the Prometheus exporter's,
// which the shared Prometheus scrapes); a restart tries the same again.
func (s *bullScenario) startCollector() {
	first := s.restarts == 0
	for attempt := 1; ; attempt++ {
		s.restarts++
		p := start(s.t, s.proc(fmt.Sprintf("collector-%d", s.restarts)), []string{
			"WORKERWATCH_HEALTH_ENDPOINT=" + s.health,
			"WORKERWATCH_OTLP_HTTP_ENDPOINT=" + s.otlpHTTP,
			"WORKERWATCH_OTLP_GRPC_ENDPOINT=" + s.otlpGRPC,
			"WORKERWATCH_PROMETHEUS_ENDPOINT=" + s.promExp,
			fmt.Sprintf("WORKERWATCH_TELEMETRY_PORT=%d", s.telemetryPort),
			"WORKERWATCH_STATE_DIR=" + s.stateDir,
			// Nothing listens there: traces and logs queue on disk, unread.
			"WORKERWATCH_OTLP_ENDPOINT=http://" + s.otlpSink,
			"BULLMQ_REDIS_ENDPOINT=" + s.redisAddr,
		}, collectorBinary(s.t), "--config", bullmqPreset, "--config", s.overlay())
		var exited bool
		eventually(s.t, time.Minute, 200*time.Millisecond, p.name+" ready", func() error {
			if exited = p.exited(); exited {
				return nil
			}
			code, err := getJSON("http://"+s.health+"/readyz", nil)
			if err == nil && code != 200 {
				err = fmt.Errorf("/readyz %d", code)
			}
			return err
		})
		if !exited {
			s.collector = p
			return
		}
		if attempt >= 5 || !logHas(p, "address already in use") || logHas(p, s.promExp+": bind") {
			s.t.Fatalf("%s exited:\n%s", p.name, p.tail())
		}
		s.t.Logf("e2e: %s: a port was taken before it bound it; again", p.name)
		s.bindFailed = append(s.bindFailed, s.restarts)
		if first {
			s.otlpHTTP, s.otlpGRPC, s.health = freeport.Addr(s.t), freeport.Addr(s.t), freeport.Addr(s.t)
			s.telemetryPort = freeport.Port(s.t)
			s.e.health = "http://" + s.health
		} else {
			time.Sleep(time.Second)
		}
	}
}

// proc names a process of the scenario (its log is e2e-logs/<name>.log).
func (s *bullScenario) proc(what string) string { return bullmqRun + "/" + s.name + "-" + what }

// marker ends the command line of the scenario's workers: this run's, this
// scenario's.
func (s *bullScenario) marker() string { return s.name + "." + strconv.Itoa(os.Getpid()) }

// nodeEnv is the environment every program of the example gets: the
// OpenTelemetry SDK off (no bullmq-otel, none of the example's records), so
// the workers send nothing but what BullMQ itself keeps in Redis.
func (s *bullScenario) nodeEnv(extra ...string) []string {
	return append([]string{
		"REDIS_URL=" + s.redisURL, "QUEUE=" + s.queue,
		"OTEL_EXPORTER_OTLP_ENDPOINT=http://" + s.otlpHTTP,
		"OTEL_SDK_DISABLED=true",
	}, extra...)
}

// redis is a client of the scenario's Redis, for the test's own ground
// truth (BullMQ's completed and failed sets) and bad input.
func (s *bullScenario) redis() *redis.Client {
	c := redis.NewClient(&redis.Options{Addr: s.redisAddr})
	s.t.Cleanup(func() { _ = c.Close() })
	return c
}

// bullWorkerStop is how long a worker may take from SIGTERM to its exit:
// BullMQ's close waits for its running jobs (worker.js forces it after 5 s),
// then the SDK flushes (at most 5 s); on a loaded machine (a load of 40 on 2
// cores was seen) that took more than 20 s.
const bullWorkerStop = time.Minute

// startWorker starts a BullMQ worker (examples/bullmq-worker/worker.js) named
// id and waits until BullMQ says it is ready. With matched=false its command
// line lacks the scenario's marker, so the preset's selector does not find it.
func (s *bullScenario) startWorker(id string, matched bool, env ...string) *proc {
	args := []string{filepath.Join(bullmqExampleDir, "worker.js")}
	if matched {
		args = append(args, "--scenario", s.marker())
	}
	p := start(s.t, s.proc("worker-"+id), s.nodeEnv(append([]string{"WORKER_NAME=" + id}, env...)...), s.node, args...)
	// BullMQ's sandboxed children outlive a worker killed with SIGKILL (one
	// busy child went on spinning at init, and ignored SIGTERM): after the
	// worker's own stop, end what is left of its process group.
	s.t.Cleanup(func() {
		p.stopWithin(s.t, bullWorkerStop)
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
	})
	waitLog(s.t, p, " ready (pid ", startDeadline)
	return p
}

// add enqueues count jobs with data and returns their ids.
func (s *bullScenario) add(count int, data string) []string {
	s.t.Helper()
	cmd := exec.Command(s.node, filepath.Join(bullmqExampleDir, "producer.js"), "add", "--count", strconv.Itoa(count), data)
	cmd.Env = append(os.Environ(), s.nodeEnv()...)
	out, err := cmd.Output()
	if err != nil {
		var stderr string
		if ee := (*exec.ExitError)(nil); errors.As(err, &ee) {
			stderr = string(ee.Stderr)
		}
		s.t.Fatalf("producer add %s: %v %s", data, err, stderr)
	}
	ids := strings.Fields(string(out))
	if len(ids) != count {
		s.t.Fatalf("producer added %d jobs, want %d: %q", len(ids), count, out)
	}
	return ids
}

// steady starts a producer adding one job with data every everyMs.
func (s *bullScenario) steady(everyMs int, data string) *proc {
	return start(s.t, s.proc("producer"), s.nodeEnv(), s.node,
		filepath.Join(bullmqExampleDir, "producer.js"), "steady", "--every-ms", strconv.Itoa(everyMs), data)
}

// logLines returns the lines of p's log that contain substr.
func logLines(p *proc, substr string) []string {
	f, err := os.Open(p.log)
	if err != nil {
		return nil
	}
	defer f.Close()
	var out []string
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		if strings.Contains(sc.Text(), substr) {
			out = append(out, sc.Text())
		}
	}
	return out
}

// startSharedPrometheus starts one Prometheus on web scraping every
// scenario's collector every second.
func startSharedPrometheus(t *testing.T, web string, scenarios []*bullScenario) string {
	promBin := need(t, "prometheus", "/usr/bin/prometheus")
	dir := t.TempDir()
	var targets []string
	for _, s := range scenarios {
		targets = append(targets, fmt.Sprintf("%q", s.promExp))
	}
	cfg := filepath.Join(dir, "prometheus.yml")
	writeFile(t, cfg, fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: workerwatch-bullmq
    static_configs:
      - targets: [%s]
`, strings.Join(targets, ", ")))
	p := start(t, bullmqRun+"/prometheus", nil, promBin, "--config.file="+cfg,
		"--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+web)
	waitListening(t, p, web)
	return "http://" + web
}

// promSeries is one series of a range query.
type promSeries struct {
	Metric map[string]string `json:"metric"`
	Values [][2]any          `json:"values"`
}

// promRange runs a PromQL range query.
func promRange(base, q string, from, to time.Time, step time.Duration) ([]promSeries, error) {
	var out struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			Result []promSeries `json:"result"`
		} `json:"data"`
	}
	u := fmt.Sprintf("%s/api/v1/query_range?query=%s&start=%.3f&end=%.3f&step=%gs", base, url.QueryEscape(q),
		float64(from.UnixNano())/1e9, float64(to.UnixNano())/1e9, step.Seconds())
	code, err := getJSON(u, &out)
	if err != nil {
		return nil, err
	}
	if code != 200 || out.Status != "success" {
		return nil, fmt.Errorf("range query %q: HTTP %d %s", q, code, out.Error)
	}
	return out.Data.Result, nil
}
