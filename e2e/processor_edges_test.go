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
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"
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
	t.Parallel()
	bin := collectorBinary(t)
	hole := startBlackhole(t)
	health, otlpHTTP := loopbackAddr(t), loopbackAddr(t)
	col := start(t, "processor-edges-collector", []string{
		"PE_HEALTH=" + health, "PE_OTLP_HTTP=" + otlpHTTP,
		"PE_BLACKHOLE=" + hole.ln.Addr().String(), fmt.Sprintf("PE_TELEMETRY_PORT=%d", freePort(t)),
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
	t.Parallel()
	bin := collectorBinary(t)
	health := loopbackAddr(t)
	col := start(t, "default-config-collector", []string{"WORKERWATCH_STATE_DIR=" + t.TempDir()}, bin,
		"--config", filepath.Join(repoRoot, "config.yaml"),
		"--set=receivers::otlp::protocols::grpc::endpoint="+loopbackAddr(t),
		"--set=receivers::otlp::protocols::http::endpoint="+loopbackAddr(t),
		"--set=extensions::worker_health::endpoint="+health,
		"--set=exporters::prometheus::endpoint="+loopbackAddr(t),
		"--set=exporters::otlp_http::endpoint=http://"+loopbackAddr(t),
		"--set=service::telemetry::metrics::level=none")
	waitLog(t, col, readyLine, 60*time.Second)
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
	t.Parallel()
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
				health, otlp = loopbackAddr(t), loopbackAddr(t)
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
