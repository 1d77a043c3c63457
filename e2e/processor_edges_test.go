//go:build e2e

package e2e

// The worker_health processor's edges through the real binary (issue 11):
// shutdown with a blocked downstream, and its own telemetry without the
// attributes of whichever pipeline was built first.

import (
	"bufio"
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
