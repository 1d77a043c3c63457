//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/workerwatch/workerwatch/internal/freeport"
)

// TestReliabilityOutageAndRestart: the backend (a second collector) is down
// for a while and the workerwatch collector is SIGKILLed and restarted, then
// stopped with SIGTERM and restarted, during the outage; every span and log record the collector accepted (HTTP 200)
// arrives at the backend once it is back, counted by id (at-least-once:
// duplicates are counted and logged, not failed). docs/reliability.md.
//
//	make build && go test -tags e2e -count=1 -v -run TestReliabilityOutageAndRestart ./e2e/
func TestReliabilityOutageAndRestart(t *testing.T) {
	// Independent of the other scenarios (own ports, directories, processes):
	// runs beside them (docs/e2e.md, "Time").
	defer parallel(t, 20*time.Second)()
	bin := collectorBinary(t)
	tmp := t.TempDir()
	backendAddr := freeport.Addr(t)
	otlpHTTP, otlpGRPC, health, telemetry := freeport.Addr(t), freeport.Addr(t), freeport.Addr(t), freeport.Port(t)
	env := []string{
		"REL_OTLP_HTTP=" + otlpHTTP, "REL_OTLP_GRPC=" + otlpGRPC, "REL_HEALTH=" + health,
		"REL_STATE_DIR=" + filepath.Join(tmp, "state"), "REL_BACKEND=http://" + backendAddr,
		fmt.Sprintf("REL_TELEMETRY_PORT=%d", telemetry),
	}
	args := []string{"--config", filepath.Join(repoRoot, "e2e", "testdata", "reliability.yaml")}
	// Negative control (docs/reliability.md): WORKERWATCH_REL_PROCESSORS=memory_limiter,worker_health,batch
	// puts the batch processor back in front of the queue; a SIGKILL then loses what it holds.
	if ps := os.Getenv("WORKERWATCH_REL_PROCESSORS"); ps != "" {
		args = append(args, "--set=service::pipelines::traces::processors=["+ps+"]",
			"--set=service::pipelines::logs::processors=["+ps+"]")
	}
	startCollector := func(name string) *proc {
		p := start(t, name, env, bin, args...)
		waitReady(t, p, health)
		return p
	}

	b1 := startBackend(t, "rel-backend-1", backendAddr, tmp)
	col := startCollector("rel-collector-1")

	// The sender: `requests` OTLP requests per signal of `per` items each,
	// paced, every one retried until accepted.
	const requests, per = 300, 20
	s := newSender(otlpHTTP, per)
	var sent atomic.Int64
	senderDone := make(chan error, 1)
	go func() {
		deadline := time.Now().Add(3 * time.Minute)
		for seq := 0; seq < requests; seq++ {
			if err := s.post("/v1/traces", s.traces(seq), deadline); err != nil {
				senderDone <- err
				return
			}
			if err := s.post("/v1/logs", s.logs(seq), deadline); err != nil {
				senderDone <- err
				return
			}
			sent.Add(1)
			time.Sleep(20 * time.Millisecond)
		}
		senderDone <- nil
	}()
	waitSent := func(n int64) {
		eventually(t, 60*time.Second, 20*time.Millisecond, fmt.Sprintf("%d requests sent", n), func() error {
			if got := sent.Load(); got < n {
				return fmt.Errorf("%d sent", got)
			}
			return nil
		})
	}

	// 1. Outage: the backend stops (a third of the data already through).
	waitSent(requests / 3)
	b1.p.stop(t)
	outageStart := time.Now()
	t.Logf("e2e: backend stopped after %d requests per signal", sent.Load())

	// 2. The collector is SIGKILLed mid-stream during the outage and restarted
	//    on the same state directory; the sender retries what was refused.
	waitSent(requests / 2)
	if err := col.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-col.done
	t.Logf("e2e: collector SIGKILLed after %d requests per signal", sent.Load())
	col = startCollector("rel-collector-2")

	if err := <-senderDone; err != nil {
		t.Fatal(err)
	}
	t.Logf("e2e: sender done: %d requests per signal accepted, %d posts in all (retries %d)",
		requests, s.attempts, s.attempts-2*requests)

	// While the backend is still down the data sits in the persistent queue.
	eventually(t, 20*time.Second, 250*time.Millisecond, "data held in the exporter queue", func() error {
		txt, err := httpGet(fmt.Sprintf("http://127.0.0.1:%d/metrics", telemetry))
		if err != nil {
			return err
		}
		q, _ := metricSum(txt, "otelcol_exporter_queue_size", `exporter="otlp_http/backend"`)
		if q <= 0 {
			return fmt.Errorf("otelcol_exporter_queue_size %v", q)
		}
		t.Logf("e2e: exporter queue holds %.0f bytes during the outage", q)
		return nil
	})

	// 3. A graceful restart too (SIGTERM) while the backend is still down: the
	//    exporter logs "Exporting failed. Dropping data." for the batches it
	//    was retrying ("interrupted due to shutdown"), but the persistent
	//    queue keeps them for the next start.
	col.stop(t)
	shutdownDrops := 0
	for _, l := range errorLines(col.log) {
		if strings.Contains(l, "interrupted due to shutdown") {
			shutdownDrops++
		}
	}
	t.Logf("e2e: collector stopped with SIGTERM during the outage (%d 'Dropping data ... interrupted due to shutdown' lines)", shutdownDrops)
	col = startCollector("rel-collector-3")

	// 4. Recovery: the backend comes back (new output files, same address).
	b2 := startBackend(t, "rel-backend-2", backendAddr, tmp)
	t.Logf("e2e: backend back after an outage of %.1fs", time.Since(outageStart).Seconds())
	recovery := time.Now()
	wantSpans, wantLogs := requests*per, requests*per
	var spans, logs map[string]int
	eventually(t, 90*time.Second, 500*time.Millisecond, "every span and log record at the backend", func() error {
		var err error
		spans, logs, err = idCounts(b1.tracesFile, b1.logsFile, b2.tracesFile, b2.logsFile)
		if err != nil {
			return err
		}
		if len(spans) != wantSpans || len(logs) != wantLogs {
			return fmt.Errorf("distinct spans %d/%d, log records %d/%d", len(spans), wantSpans, len(logs), wantLogs)
		}
		return nil
	})
	for id := range spans {
		if !strings.HasPrefix(id, "s-") {
			t.Errorf("unexpected span id %q", id)
		}
	}
	t.Logf("e2e: RESULT outage + SIGKILL + SIGTERM restarts: spans %d/%d distinct (%d duplicates), log records %d/%d distinct (%d duplicates); all delivered %.1fs after the backend returned",
		len(spans), wantSpans, duplicates(spans), len(logs), wantLogs, duplicates(logs), time.Since(recovery).Seconds())
	if lines := errorLines(col.log); len(lines) > 0 {
		t.Logf("e2e: error lines of the restarted collector (informational): %d, first: %.300s", len(lines), lines[0])
	}
}
