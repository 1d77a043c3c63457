//go:build e2e

// Package e2e runs the real otelcol-workerwatch binary against the simulated
// fleet, a real Prometheus and a real Jaeger, all on loopback, and asserts
// through their query APIs. Run it with `make e2e` (needs `make build` and
// scripts/install-test-deps.sh); `go test ./...` skips it (build tag e2e).
package e2e

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/workerwatch/workerwatch/internal/freeport"
)

// paths of what the suite runs; bin/ is filled by `make build`.
var (
	repoRoot, _ = filepath.Abs("..")
	binDir      = filepath.Join(repoRoot, "bin")
	cacheDir    = cmp.Or(os.Getenv("CACHE"), filepath.Join(os.Getenv("HOME"), ".cache", "workerwatch"))
)

// runPrefix makes the ids of this run's simulated workers (and the
// selectors that find their processes) unique on the host: another session's
// `workersim worker --id worker-1` (a make run, another checkout's suite) is
// never taken for ours. A pid is unique among running processes.
var runPrefix = fmt.Sprintf("e%d-", os.Getpid())

// need returns the path of an executable the suite cannot run without. Missing
// tools skip the suite locally, but fail it in CI where .ci/run installs them.
func need(t testing.TB, name string, candidates ...string) string {
	t.Helper()
	for _, c := range candidates {
		if st, err := os.Stat(c); err == nil && !st.IsDir() {
			return c
		}
	}
	if p, err := exec.LookPath(name); err == nil {
		return p
	}
	if os.Getenv("CI") == "true" {
		t.Fatalf("%s not found (make deps installs it)", name)
	}
	t.Skipf("%s not found; run make deps", name)
	return ""
}

// proc is a process the suite started; its output goes to a log file kept in
// the test's log directory so a failure can be read afterwards.
type proc struct {
	name string
	cmd  *exec.Cmd
	log  string
	done chan struct{}
}

var logDir = func() string {
	d := filepath.Join(cacheDir, "e2e-logs")
	_ = os.MkdirAll(d, 0o755)
	return d
}()

func start(t testing.TB, name string, env []string, bin string, args ...string) *proc {
	t.Helper()
	logPath := filepath.Join(logDir, name+".log")
	f, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = f, f
	cmd.Env = append(os.Environ(), env...)
	// Own process group: stop() can signal everything it started.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		t.Fatalf("start %s: %v", name, err)
	}
	p := &proc{name: name, cmd: cmd, log: logPath, done: make(chan struct{})}
	go func() { _ = cmd.Wait(); f.Close(); close(p.done) }()
	t.Logf("e2e: started %s pid=%d (log %s)", name, cmd.Process.Pid, logPath)
	t.Cleanup(func() { p.stop(t) })
	return p
}

// stopDeadline is how long a process may take to exit after SIGTERM before
// the test fails and kills its group: a bound on a shutdown that completes
// at all, not on its speed. 20 s failed a soak collector on the loaded
// 2-core machine (load average 50 to 70, issue 19); the time taken is
// logged when it is over 5 s.
const stopDeadline = 2 * time.Minute

// stop sends SIGTERM and waits up to stopDeadline, then kills the whole group.
func (p *proc) stop(t testing.TB) { p.stopWithin(t, stopDeadline) }

// stopWithin sends SIGTERM and waits up to d, then kills the whole group.
func (p *proc) stopWithin(t testing.TB, d time.Duration) {
	select {
	case <-p.done:
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	sent := time.Now()
	select {
	case <-p.done:
		if took := time.Since(sent); took > 5*time.Second {
			t.Logf("e2e: %s stopped %.1fs after SIGTERM", p.name, took.Seconds())
		}
	case <-time.After(d):
		t.Errorf("%s did not stop within %s of SIGTERM; killing its group", p.name, d)
		_ = syscall.Kill(-p.cmd.Process.Pid, syscall.SIGKILL)
		<-p.done
	}
}

func (p *proc) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

func (p *proc) tail() string {
	b, _ := os.ReadFile(p.log)
	if len(b) > 4000 {
		b = b[len(b)-4000:]
	}
	return string(b)
}

// eventually polls cond every interval until it returns nil or the deadline
// passes; the last error explains the failure.
func eventually(t testing.TB, within, every time.Duration, what string, cond func() error) {
	t.Helper()
	deadline := time.Now().Add(within)
	var err error
	for {
		if err = cond(); err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s: not true within %s: %v", what, within, err)
		}
		time.Sleep(every)
	}
}

var httpClient = &http.Client{Timeout: 10 * time.Second}

// getJSON GETs u into v and returns the status code.
func getJSON(u string, v any) (int, error) {
	resp, err := httpClient.Get(u)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, err
	}
	if v != nil {
		if err := json.Unmarshal(b, v); err != nil {
			return resp.StatusCode, fmt.Errorf("decode %s: %w: %.200s", u, err, b)
		}
	}
	return resp.StatusCode, nil
}

// httpGet GETs u and returns the body; anything but 200 is an error.
func httpGet(u string) (string, error) {
	resp, err := httpClient.Get(u)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return "", fmt.Errorf("GET %s: %d", u, resp.StatusCode)
	}
	return string(b), err
}

// startDeadline bounds how long a server we started may take to accept
// connections or log that it is ready: a bound on a start that completes
// at all, not on its speed. A server that exits fails the wait at once
// (waitListening, waitLog). 60 s
// failed RabbitMQ on CI (the Erlang VM booting while the parallel
// scenarios loaded both cores: its log showed the broker started, after
// the deadline); the time taken is logged when it is over 10 s.
const startDeadline = 4 * time.Minute

// waitListening waits until addr accepts TCP connections, and fails at once
// if p exits first.
func waitListening(t testing.TB, p *proc, addr string) {
	t.Helper()
	began := time.Now()
	eventually(t, startDeadline, 200*time.Millisecond, p.name+" listening on "+addr, func() error {
		if p.exited() {
			t.Fatalf("%s exited early:\n%s", p.name, p.tail())
		}
		c, err := net.DialTimeout("tcp", addr, time.Second)
		if err != nil {
			return err
		}
		return c.Close()
	})
	if took := time.Since(began); took > 10*time.Second {
		t.Logf("e2e: %s took %.1fs to listen on %s (a loaded machine; the bound is %s)", p.name, took.Seconds(), addr, startDeadline)
	}
}

// startRedis starts a redis-server of the test's own (no persistence, its
// files in a temporary directory, args appended) on a loopback port picked
// now, and returns its address once it answers PING: a port that accepts
// may be another test's server (one took a BullMQ scenario's Redis port, its
// worker then read "H" as a reply type). Redis exits when its port is taken
// meanwhile: another port then, up to 3.
func startRedis(t *testing.T, name string, args ...string) string {
	t.Helper()
	bin := need(t, "redis-server", "/usr/bin/redis-server")
	dir := t.TempDir()
	for attempt := 1; ; attempt++ {
		addr := freeport.Addr(t)
		port := addr[strings.LastIndexByte(addr, ':')+1:]
		pname := name
		if attempt > 1 {
			pname = fmt.Sprintf("%s-%d", name, attempt)
		}
		all := append([]string{
			"--port", port, "--bind", "127.0.0.1", "--dir", dir,
			"--save", "", "--appendonly", "no", "--daemonize", "no", "--logfile", "",
		}, args...)
		p := start(t, pname, nil, bin, all...)
		if redisPong(t, p, addr) {
			return addr
		}
		if attempt == 3 {
			t.Fatalf("%s: redis-server exited on 3 ports in a row:\n%s", name, p.tail())
		}
		t.Logf("e2e: %s exited (its port %s taken?), another port:\n%s", p.name, port, p.tail())
	}
}

// redisPong waits until the redis-server p answers PING on addr (true) or
// exits (false), within startDeadline.
func redisPong(t *testing.T, p *proc, addr string) bool {
	t.Helper()
	c := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1})
	defer c.Close()
	up := false
	eventually(t, startDeadline, 200*time.Millisecond, p.name+" answering PING on "+addr, func() error {
		if p.exited() {
			return nil
		}
		ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
		defer cancel()
		err := c.Ping(ctx).Err()
		up = err == nil
		return err
	})
	return up
}

// readyLine is what the collector logs once every component has started
// (receivers last): a line a receiver logs at Start is in the log by then.
const readyLine = "Everything is ready. Begin running and processing data."

// waitLog waits until p's log contains s.
func waitLog(t testing.TB, p *proc, s string, within time.Duration) {
	t.Helper()
	eventually(t, within, 200*time.Millisecond, p.name+" logged "+s, func() error {
		if p.exited() {
			t.Fatalf("%s exited:\n%s", p.name, p.tail())
		}
		b, err := os.ReadFile(p.log)
		if err == nil && !strings.Contains(string(b), s) {
			err = fmt.Errorf("not in %s yet", p.log)
		}
		return err
	})
}

// promQuery runs an instant PromQL query and returns the vector's samples.
type promSample struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"`
}

func (s promSample) float() float64 {
	var f float64
	if str, ok := s.Value[1].(string); ok {
		f, _ = strconv.ParseFloat(str, 64) // a malformed sample reads as 0
	}
	return f
}

func promQuery(base, q string) ([]promSample, error) {
	var out struct {
		Status string `json:"status"`
		Error  string `json:"error"`
		Data   struct {
			ResultType string       `json:"resultType"`
			Result     []promSample `json:"result"`
		} `json:"data"`
	}
	code, err := getJSON(base+"/api/v1/query?query="+url.QueryEscape(q), &out)
	if err != nil {
		return nil, err
	}
	if code != 200 || out.Status != "success" {
		return nil, fmt.Errorf("query %q: HTTP %d %s", q, code, out.Error)
	}
	return out.Data.Result, nil
}

// alertActive reports whether the alert is pending or firing for the worker.
func alertActive(prom, name, id string) error {
	var out struct {
		Data struct {
			Alerts []struct {
				Labels map[string]string `json:"labels"`
				State  string            `json:"state"`
			} `json:"alerts"`
		} `json:"data"`
	}
	if _, err := getJSON(prom+"/api/v1/alerts", &out); err != nil {
		return err
	}
	for _, a := range out.Data.Alerts {
		if a.Labels["alertname"] == name && a.Labels["cicd_worker_id"] == id {
			return nil
		}
	}
	return fmt.Errorf("%s not pending or firing for %s among %d alerts", name, id, len(out.Data.Alerts))
}
