//go:build e2e

package e2e

// The worker_health processor's edges through the real binary (issue 11):
// shutdown with a blocked downstream, and its own telemetry without the
// attributes of whichever pipeline was built first.

import (
	"bufio"
	"crypto/rand"
	"fmt"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/workerwatch/workerwatch/internal/freeport"
)

// blackhole accepts connections and reads what arrives, but never answers:
// an HTTP exporter sending to it waits for a response until its context ends.
type blackhole struct {
	ln       net.Listener
	requests atomic.Int64 // request lines seen
}

func startBlackhole(t *testing.T) *blackhole {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	b := &blackhole{ln: ln}
	t.Cleanup(func() { _ = ln.Close() })
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				r := bufio.NewReader(c)
				for {
					line, err := r.ReadString('\n')
					if err != nil {
						return
					}
					if strings.HasPrefix(line, http.MethodPost+" ") {
						b.requests.Add(1)
					}
				}
			}()
		}
	}()
	return b
}

func TestProcessorEdges(t *testing.T) {
	defer parallel(t, 2*time.Second)()
	bin := collectorBinary(t)
	hole := startBlackhole(t)
	health, otlpHTTP := freeport.Addr(t), freeport.Addr(t)
	col := start(t, "processor-edges-collector", []string{
		"PE_HEALTH=" + health, "PE_OTLP_HTTP=" + otlpHTTP,
		"PE_BLACKHOLE=" + hole.ln.Addr().String(), fmt.Sprintf("PE_TELEMETRY_PORT=%d", freeport.Port(t)),
	}, bin, "--config", filepath.Join(repoRoot, "e2e", "testdata", "processor-blocked-downstream.yaml"))
	waitReady(t, col, health)

	// The shared instance's log lines: the service injects the pipeline and
	// signal into each pipeline's logger; the processor drops them (its
	// metrics get the same treatment, tested in the package: this binary's
	// Prometheus reader does not show scope attributes).
	t.Run("its own log lines carry no pipeline or signal attribute", func(t *testing.T) {
		waitLog(t, col, "judging workers", 30*time.Second)
		b, err := os.ReadFile(col.log)
		if err != nil {
			t.Fatal(err)
		}
		var line string
		for _, l := range strings.Split(string(b), "\n") {
			if strings.Contains(l, "judging workers") {
				line = l
			}
		}
		if !strings.Contains(line, `"otelcol.component.id": "worker_health"`) {
			t.Errorf("the component id is missing: %s", line)
		}
		if strings.Contains(line, "otelcol.pipeline.id") || strings.Contains(line, "otelcol.signal") {
			t.Errorf("a per-pipeline attribute on the shared instance's log line: %s", line)
		}
	})

	t.Run("SIGTERM stops the collector while an emission is blocked downstream", func(t *testing.T) {
		eventually(t, 30*time.Second, 100*time.Millisecond, "an emission blocked in the exporter", func() error {
			if hole.requests.Load() == 0 {
				return fmt.Errorf("no request reached the blackhole yet")
			}
			return nil
		})
		if err := col.cmd.Process.Signal(syscall.SIGTERM); err != nil {
			t.Fatal(err)
		}
		began := time.Now()
		select {
		case <-col.done:
		case <-time.After(60 * time.Second):
			t.Fatalf("the collector did not stop within 60s of SIGTERM:\n%s", col.tail())
		}
		t.Logf("e2e: stopped %s after SIGTERM", time.Since(began).Round(time.Millisecond))
		if code := col.cmd.ProcessState.ExitCode(); code != 0 {
			t.Errorf("exit code %d:\n%s", code, col.tail())
		}
		b, _ := os.ReadFile(col.log)
		if strings.Contains(string(b), "panic") {
			t.Errorf("panic in the log:\n%s", col.tail())
		}
	})
}

// The built-in default configuration starts without a deprecation warning
// (issue 11: the Prometheus exporter's resource_to_telemetry_conversion
// logged one at every start). Its listeners are moved to free ports.
func TestDefaultConfigWithoutDeprecatedSettings(t *testing.T) {
	defer parallel(t, 3*time.Second)()
	bin := collectorBinary(t)
	health := freeport.Addr(t)
	col := start(t, "default-config-collector", []string{"WORKERWATCH_STATE_DIR=" + t.TempDir()}, bin,
		"--config", filepath.Join(repoRoot, "config.yaml"),
		"--set=receivers::otlp::protocols::grpc::endpoint="+freeport.Addr(t),
		"--set=receivers::otlp::protocols::http::endpoint="+freeport.Addr(t),
		"--set=extensions::worker_health::endpoint="+health,
		"--set=exporters::prometheus::endpoint="+freeport.Addr(t),
		"--set=exporters::otlp_http::endpoint=http://"+freeport.Addr(t),
		"--set=service::telemetry::metrics::level=none")
	waitLog(t, col, readyLine, startDeadline)
	waitReady(t, col, health)
	b, err := os.ReadFile(col.log)
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(strings.ToLower(l), "deprecat") {
			t.Errorf("a deprecation warning at start: %s", l)
		}
	}
}

// claimsJSON is an OTLP/HTTP JSON logs request: workers w0..w(n-1), each
// claiming runs r0..r(runs-1).
func claimsJSON(workers, runs int) string {
	var rls []string
	for w := range workers {
		var recs []string
		for r := range runs {
			recs = append(recs, fmt.Sprintf(`{"eventName":"workerwatch.run.claimed","attributes":[{"key":"cicd.pipeline.run.id","value":{"stringValue":"run-%d-%d-with-a-longer-id"}}]}`, w, r))
		}
		rls = append(rls, fmt.Sprintf(`{"resource":{"attributes":[{"key":"cicd.worker.id","value":{"stringValue":"worker-%04d"}}]},"scopeLogs":[{"logRecords":[%s]}]}`,
			w, strings.Join(recs, ",")))
	}
	return `{"resourceLogs":[` + strings.Join(rls, ",") + `]}`
}

func postJSON(u, body string) error {
	resp, err := httpClient.Post(u, "application/json", strings.NewReader(body))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("POST %s: %s", u, resp.Status)
	}
	return nil
}

// A corrupt state file never keeps the collector from starting (issue 14.3):
// the processor's bbolt file under file_storage, truncated, overwritten with
// random bytes, or emptied, is moved aside, logged once with its path, and
// the processor starts with no workers. Before: the truncated file faulted
// inside bbolt (exit 2), random bytes refused to start ("file size too small
// 4096", no path), the empty file started silently.
func TestCorruptStateFile(t *testing.T) {
	defer parallel(t, 7*time.Second)()
	bin := collectorBinary(t)
	for _, tc := range []struct {
		name    string
		corrupt func(path string) error
	}{
		{"truncated", func(path string) error { return os.Truncate(path, 8192) }},
		{"random bytes", func(path string) error {
			b := make([]byte, 4096)
			if _, err := rand.Read(b); err != nil {
				return err
			}
			return os.WriteFile(path, b, 0o600)
		}},
		{"empty", func(path string) error { return os.Truncate(path, 0) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			state := t.TempDir()
			run := func(name string) (p *proc, health, otlp string) {
				health, otlp = freeport.Addr(t), freeport.Addr(t)
				p = start(t, name, []string{"PE_HEALTH=" + health, "PE_OTLP_HTTP=" + otlp, "PE_STATE_DIR=" + state},
					bin, "--config", filepath.Join(repoRoot, "e2e", "testdata", "processor-state.yaml"))
				waitReady(t, p, health)
				return p, health, otlp
			}
			first, health, otlp := run("corrupt-state-first-" + strings.ReplaceAll(tc.name, " ", "-"))
			if err := postJSON("http://"+otlp+"/v1/logs", claimsJSON(300, 5)); err != nil {
				t.Fatal(err)
			}
			eventually(t, 30*time.Second, 200*time.Millisecond, "300 workers on the API", func() error {
				var list struct {
					Workers []any `json:"workers"`
				}
				if _, err := getJSON("http://"+health+"/health/workers", &list); err != nil {
					return err
				}
				if len(list.Workers) != 300 {
					return fmt.Errorf("%d workers", len(list.Workers))
				}
				return nil
			})
			first.stop(t) // the final checkpoint
			path := filepath.Join(state, "processor_worker_health_")
			st, err := os.Stat(path)
			if err != nil {
				t.Fatal(err)
			}
			t.Logf("e2e: checkpoint file %d bytes", st.Size())
			if err := tc.corrupt(path); err != nil {
				t.Fatal(err)
			}

			second, health, _ := run("corrupt-state-second-" + strings.ReplaceAll(tc.name, " ", "-"))
			var list struct {
				Workers []any `json:"workers"`
			}
			if _, err := getJSON("http://"+health+"/health/workers", &list); err != nil {
				t.Fatal(err)
			}
			if len(list.Workers) != 0 {
				t.Errorf("%d workers after the corrupt checkpoint, want none", len(list.Workers))
			}
			b, _ := os.ReadFile(second.log)
			var said []string
			for _, l := range strings.Split(string(b), "\n") {
				if strings.Contains(l, "storage file is corrupt") {
					said = append(said, l)
				}
			}
			if len(said) != 1 || !strings.Contains(said[0], `"file": "`+path+`"`) {
				t.Errorf("want one log line naming %s, got %d:\n%s", path, len(said), strings.Join(said, "\n"))
			}
			backups, _ := filepath.Glob(path + ".*.backup")
			if len(backups) != 1 {
				t.Errorf("want the corrupt file moved aside once, found %v", backups)
			}
			second.stop(t)
			if code := second.cmd.ProcessState.ExitCode(); code != 0 {
				t.Errorf("exit code %d after SIGTERM:\n%s", code, second.tail())
			}
		})
	}
}

// floodJSON is one OTLP/HTTP JSON logs request from workers first..first+n-1
// (made-up ids), each claiming runs run ids, and the metrics request of the
// same ids (a runs.active gauge each, as the worker's own SDK would send).
func floodJSON(first, n, runs int) (logs, metrics string) {
	var rls, rms []string
	for w := first; w < first+n; w++ {
		res := fmt.Sprintf(`{"attributes":[{"key":"cicd.worker.id","value":{"stringValue":"flood-%d"}}]}`, w)
		var recs []string
		for r := range runs {
			recs = append(recs, fmt.Sprintf(`{"eventName":"workerwatch.run.claimed","attributes":[{"key":"cicd.pipeline.run.id","value":{"stringValue":"flood-%d-%d"}}]}`, w, r))
		}
		rls = append(rls, `{"resource":`+res+`,"scopeLogs":[{"logRecords":[`+strings.Join(recs, ",")+`]}]}`)
		rms = append(rms, `{"resource":`+res+`,"scopeMetrics":[{"metrics":[{"name":"workerwatch.worker.runs.active","gauge":{"dataPoints":[{"asInt":"1"}]}}]}]}`)
	}
	return `{"resourceLogs":[` + strings.Join(rls, ",") + `]}`, `{"resourceMetrics":[` + strings.Join(rms, ",") + `]}`
}

// schedulerClaimJSON: the scheduler (service.name scheduler) assigns run to worker.
func schedulerClaimJSON(worker, run string) string {
	return fmt.Sprintf(`{"resourceLogs":[{"resource":{"attributes":[{"key":"service.name","value":{"stringValue":"scheduler"}}]},"scopeLogs":[{"logRecords":[{"eventName":"workerwatch.run.claimed","attributes":[{"key":"cicd.worker.id","value":{"stringValue":%q}},{"key":"cicd.pipeline.run.id","value":{"stringValue":%q}}]}]}]}]}`, worker, run)
}

// Issues 14.1 and 14.2 through the binary, with the default config (its
// worker table cut to 600 so the flood fills it): a flood of made-up worker
// ids (records and their own metrics) leaves the processor's state, its
// exported series and its checkpoint bounded, a real worker the scheduler
// names in the middle of it is tracked although the table is full, and a
// restart on the same state brings back the real workers only.
func TestProcessorFloodBounds(t *testing.T) {
	defer parallel(t, 15*time.Second)()
	bin := collectorBinary(t)
	state := t.TempDir()
	health, otlp, prom := freeport.Addr(t), freeport.Addr(t), freeport.Addr(t)
	telemetry := freeport.Port(t)
	run := func(name string) *proc {
		p := start(t, name, []string{
			"WORKERWATCH_STATE_DIR=" + state, "PE_HEALTH=" + health, "PE_OTLP_GRPC=" + freeport.Addr(t),
			"PE_OTLP_HTTP=" + otlp, "PE_PROM=" + prom, "PE_BACKEND=" + freeport.Addr(t),
		}, bin, "--config", filepath.Join(repoRoot, "config.yaml"),
			"--config", filepath.Join(repoRoot, "e2e", "testdata", "processor-flood.overlay.yaml"),
			fmt.Sprintf("--set=service::telemetry::metrics::readers=[{pull: {exporter: {prometheus: {host: 127.0.0.1, port: %d}}}}]", telemetry),
			// A table the flood fills, so the newcomer arrives when it is full.
			"--set=processors::worker_health::limits::max_workers=600")
		waitReady(t, p, health)
		return p
	}
	own := func(name string, labels ...string) float64 {
		body, err := httpGet(fmt.Sprintf("http://127.0.0.1:%d/metrics", telemetry))
		if err != nil {
			t.Fatal(err)
		}
		v, _ := metricSum(body, name, labels...)
		return v
	}
	col := run("processor-flood-first")
	post := func(path, body string) {
		if err := postJSON("http://"+otlp+path, body); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 3 {
		post("/v1/logs", schedulerClaimJSON(fmt.Sprintf("real-%d", i), fmt.Sprintf("real-run-%d", i)))
	}
	const ids, per, runs = 20000, 200, 5
	for first := 0; first < ids; first += per {
		logs, metrics := floodJSON(first, per, runs)
		post("/v1/logs", logs)
		post("/v1/metrics", metrics)
		if first == ids/2 {
			post("/v1/logs", schedulerClaimJSON("newcomer", "newcomer-run"))
		}
	}
	eventually(t, 30*time.Second, 500*time.Millisecond, "the newcomer on the health API", func() error {
		var w struct {
			State string `json:"state"`
		}
		code, err := getJSON("http://"+health+"/health/workers/newcomer", &w)
		if err == nil && code == http.StatusNotFound {
			err = fmt.Errorf("404")
		}
		return err
	})
	once := own("otelcol_processor_worker_health_workers_tracked", `evidence="seen_once"`)
	confirmed := own("otelcol_processor_worker_health_workers_tracked", `evidence="tree_or_scheduler"`)
	refused := own("otelcol_processor_worker_health_workers_refused")
	dropped := own("otelcol_processor_worker_health_dropped_metric_points")
	runsTracked := own("otelcol_processor_worker_health_runs_tracked")
	t.Logf("e2e: after %d made-up ids with %d runs each: tracked %v seen once, %v confirmed; %v refused; %v runs tracked; %v of their metric points dropped",
		ids, runs, once, confirmed, refused, runsTracked, dropped)
	if once+confirmed > 600 {
		t.Errorf("%v workers tracked, limits.max_workers is 600", once+confirmed)
	}
	if confirmed != 5 {
		t.Errorf("%v confirmed workers tracked, want the 3 real ones, the newcomer and the receiver's no-process", confirmed)
	}
	// Refused once per resource naming an id (its logs and its metrics).
	if refused < ids-600 || dropped < ids {
		t.Errorf("refused %v, dropped %v: want at least %d and %d", refused, dropped, ids-600, ids)
	}
	body, err := httpGet("http://" + prom + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	if n := strings.Count(body, `cicd_worker_id="flood-`); n > 0 {
		t.Errorf("%d series of made-up ids on the Prometheus endpoint", n)
	}
	col.stop(t)

	var size int64
	_ = filepath.Walk(state, func(_ string, fi os.FileInfo, _ error) error {
		if fi != nil && !fi.IsDir() && strings.HasPrefix(fi.Name(), "processor_worker_health") {
			size += fi.Size()
		}
		return nil
	})
	t.Logf("e2e: the processor's state file after the flood: %d bytes", size)
	if size > 1<<20 {
		t.Errorf("the checkpoint is %d bytes after a flood of ids seen once", size)
	}

	run("processor-flood-second")
	var list struct {
		Workers []struct {
			ID string `json:"id"`
		} `json:"workers"`
	}
	if _, err := getJSON("http://"+health+"/health/workers", &list); err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, w := range list.Workers {
		got = append(got, w.ID)
	}
	slices.Sort(got)
	if want := []string{"newcomer", "no-process", "real-0", "real-1", "real-2"}; !slices.Equal(got, want) {
		t.Errorf("restored %v, want %v", got, want)
	}
}
