//go:build e2e

package e2e

// The OpenFn preset's world (preset_openfn_test.go has the scenarios): the
// real collector running presets/openfn/collector.yaml, the Lightning
// stand-in and hosts of OpenFn's real engine from examples/openfn-worker, on
// loopback ports picked here. Each worker claims from its own Lightning
// queue (OpenFn's queues), so what each worker runs is exactly what its
// scenario enqueued.

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/workerwatch/workerwatch/internal/freeport"
)

var (
	openfnDir    = filepath.Join(repoRoot, "examples", "openfn-worker")
	openfnPreset = filepath.Join(repoRoot, "presets", "openfn", "collector.yaml")
)

// openfnTimings are the only keys of the preset the scenarios change: its
// intervals and waits, shortened so the suite runs in minutes, and the main
// role's soft limit, so a leak crosses it in a few dozen runs. Everything
// else (the tree, the mapping, the scheduler view, the kill effects,
// drift.grace) is the preset as shipped. docs/e2e.md lists them with the
// bounds they give.
//
// stalled.after stays the preset's 5 minutes except where a scenario is
// about it (ofStalledAfter): each worker here claims from its own queue,
// while Lightning's pending count is fleet-wide (OpenFn's workers normally
// share their queues), so one worker's backlog would make the idle others
// "stalled".
var openfnTimings = map[string]any{
	"receivers::worker_process::collection_interval":                   "1s",
	"receivers::worker_process::discovery_interval":                    "5s",
	"processors::worker_health::emit_interval":                         "1s",
	"processors::worker_health::lost::after":                           "8s",
	"processors::worker_health::drift::heal_after":                     "150s",
	"processors::worker_health::memory::roles::main::soft_limit_bytes": ofMainLimit,
}

const (
	ofMainLimit = 256 << 20
	// ofLostAfterMs is run_timeout_ms of the runs whose claim reply is
	// dropped: Lightning marks them lost 10 s (its grace) after that, before
	// drift.heal_after (150 s) lets an unclosed claim go, as in production
	// (300 s + 10 s against 6m).
	ofLostAfterMs = 100000
)

// The worker's settings in every scenario: two runs at a time, a 128 MB heap
// per child, quick claims. A claim waits 60 s for its reply: on a loaded
// machine a reply can take seconds, and a claim that gives up loses the
// runs Lightning assigned it (what ofDropEnv does on purpose).
var ofWorkerEnv = []string{
	"WORKER_CAPACITY=2", "WORKER_MAX_RUN_MEMORY_MB=128", "WORKER_MAX_RUN_DURATION_SECONDS=60",
	"WORKER_BACKOFF=0.2/1", "WORKER_CLAIM_TIMEOUT_SECONDS=60",
}

// ofDropEnv is for workers whose claim replies Lightning drops: their claims
// give up after 10 s (ws-worker's default is an hour).
const ofDropEnv = "WORKER_CLAIM_TIMEOUT_SECONDS=10"

// ofWait is how long a scenario waits for what the machine's speed alone
// decides (a worker starting, runs finishing): generous, these are not
// bounds the product promises.
const ofWait = 3 * time.Minute

// ofWorld is one scenario group: its collector, its Lightning, its workers.
type ofWorld struct {
	name      string
	c         *presetCollector
	e         env
	node      string
	lightning string

	mu     sync.Mutex
	starts map[string]int // worker id -> processes started with it
}

func newOFWorld(t *testing.T, name, promTargets string) *ofWorld {
	return &ofWorld{name: name, c: newPresetCollector(t, name, openfnPreset, promTargets), starts: map[string]int{}}
}

// ofStalledAfter is stalled.after where a scenario waits for stalled.
var ofStalledAfter = map[string]any{"processors::worker_health::stalled::after": "10s"}

// begin starts the world's collector and Lightning, with the preset's
// timings shortened (openfnTimings, then set); t is the group's test, which
// outlives every scenario of the group.
func (w *ofWorld) begin(t *testing.T, prom string, set map[string]any) {
	w.e.prom = prom
	w.node = need(t, "node")
	if _, err := os.Stat(filepath.Join(openfnDir, "node_modules", "@openfn", "engine-multi")); err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatalf("examples/openfn-worker/node_modules missing (scripts/install-test-deps.sh runs npm ci)")
		}
		t.Skipf("examples/openfn-worker/node_modules missing: run npm ci there")
	}
	timings := maps.Clone(openfnTimings)
	maps.Copy(timings, set)
	w.c.prepare(t, w.name, timings)
	w.c.start(t)
	w.e.health = "http://" + w.c.health
	addr := freeport.Addr(t)
	w.lightning = "http://" + addr
	l := start(t, w.name+"-lightning", []string{
		"LIGHTNING_LISTEN=" + addr, "LIGHTNING_GRACE_SECONDS=10",
		"OTEL_EXPORTER_OTLP_ENDPOINT=http://" + w.c.otlpHTTP,
	},
		w.node, filepath.Join(openfnDir, "lightning.js"))
	waitListening(t, l, addr)
}

// startWorker starts a host of the real engine named id, claiming from its
// own queue (named id too). Its command line ends with the world's scenario
// marker, which the collector's overlay selects.
func (w *ofWorld) startWorker(t *testing.T, id string, env ...string) *proc {
	w.mu.Lock()
	w.starts[id]++
	name := fmt.Sprintf("%s-%s-%d", w.name, id, w.starts[id])
	w.mu.Unlock()
	full := append([]string{
		"WORKER_NAME=" + id, "WORKER_QUEUES=" + id, "WORKER_LIGHTNING_SERVICE_URL=" + w.lightning,
		"OTEL_EXPORTER_OTLP_ENDPOINT=http://" + w.c.otlpHTTP, "WORKER_REPO_DIR=" + filepath.Join(t.TempDir(), "repo"),
	},
		append(slices.Clone(ofWorkerEnv), env...)...)
	p := start(t, name, full, w.node, filepath.Join(openfnDir, "worker.js"), "--scenario", w.name)
	// A worker stops within 5 s of SIGTERM (runs in flight, the engine, the
	// SDK's flush): more on a loaded machine.
	t.Cleanup(func() { p.stopWithin(t, ofWait) })
	waitLog(t, p, "started: engine-multi", startDeadline)
	return p
}

// ofRun is a run as Lightning (the stand-in) holds it: the ground truth.
type ofRun struct {
	ID           string `json:"id"`
	Job          string `json:"job"`
	Queue        string `json:"queue"`
	State        string `json:"state"`
	ErrorType    string `json:"error_type"`
	WorkerName   string `json:"worker_name"`
	ReplyDropped bool   `json:"reply_dropped"`
	ClaimedAt    int64  `json:"claimed_at"` // Unix ms
}

// ofControlClient waits up to ofWait for the Lightning stand-in: one Node
// process, which on a loaded machine can be starved for more than the
// suite's usual 10 s (every group's Lightning timed out at once at a load
// average of 65 on 2 cores); its answer is the ground truth, not a bound.
var ofControlClient = &http.Client{Timeout: ofWait}

func (w *ofWorld) control(t *testing.T, path string, body, out any) {
	t.Helper()
	var resp *http.Response
	var err error
	if body == nil {
		resp, err = ofControlClient.Get(w.lightning + path)
	} else {
		b, _ := json.Marshal(body)
		resp, err = ofControlClient.Post(w.lightning+path, "application/json", bytes.NewReader(b))
	}
	if err != nil {
		t.Fatalf("lightning %s: %v", path, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("lightning %s: HTTP %d", path, resp.StatusCode)
	}
	if out != nil {
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			t.Fatalf("lightning %s: %v", path, err)
		}
	}
}

// enqueue puts count runs of job in queue and returns their ids.
func (w *ofWorld) enqueue(t *testing.T, queue, job string, count int, params, options map[string]any) []string {
	t.Helper()
	var out struct{ IDs []string }
	w.control(t, "/_control/enqueue", map[string]any{
		"queue": queue, "job": job, "count": count,
		"params": params, "options": options,
	}, &out)
	if len(out.IDs) != count {
		t.Fatalf("enqueued %d runs, want %d", len(out.IDs), count)
	}
	return out.IDs
}

// dropClaimReplies makes Lightning claim runs for worker on its next n
// claims but never answer them: those runs never start.
func (w *ofWorld) dropClaimReplies(t *testing.T, worker string, n int) {
	w.control(t, "/_control/drop-claim-replies", map[string]any{"worker_name": worker, "count": n}, nil)
}

func (w *ofWorld) runs(t *testing.T) map[string]ofRun {
	var all []ofRun
	w.control(t, "/_control/runs", nil, &all)
	m := make(map[string]ofRun, len(all))
	for _, r := range all {
		m[r.ID] = r
	}
	return m
}

var ofFinal = []string{"success", "fail", "crash", "kill", "cancel", "exception", "lost"}

// waitFinal waits until Lightning holds every run of ids in a final state.
func (w *ofWorld) waitFinal(t *testing.T, ids []string) map[string]ofRun {
	t.Helper()
	var runs map[string]ofRun
	eventually(t, ofWait, 500*time.Millisecond, fmt.Sprintf("%d runs final at Lightning", len(ids)), func() error {
		runs = w.runs(t)
		for _, id := range ids {
			if r := runs[id]; !slices.Contains(ofFinal, r.State) {
				return fmt.Errorf("%s is %q", id, r.State)
			}
		}
		return nil
	})
	return runs
}

// sendSignal sends sig to p's main process.
func sendSignal(t *testing.T, p *proc, sig syscall.Signal) {
	if err := p.cmd.Process.Signal(sig); err != nil {
		t.Fatal(err)
	}
}

// ofRunnerPattern is the engine's child processes' command line.
const ofRunnerPattern = `engine-multi/dist/worker/child/runner\.js`
