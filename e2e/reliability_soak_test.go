//go:build e2e

package e2e

import (
	"cmp"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
)

// TestReliabilitySoak runs the shipped default config (config.yaml, ports
// moved to free loopback ports, traces and logs to a receiving collector)
// with a simulated fleet of 100 workers for WORKERWATCH_SOAK_MINUTES
// (default 2; `scripts/soak.sh 30` for the full soak), samples the
// collector's RSS and CPU from /proc, writes them as CSV
// (WORKERWATCH_SOAK_CSV, default $CACHE/e2e-logs/soak.csv) and requires the
// RSS growth after warm-up (the first third, at least 30 s) under 5 %:
// median RSS of the last fifth of the run against the first fifth after
// warm-up.
//
//	make build && go test -tags e2e -count=1 -v -run TestReliabilitySoak ./e2e/
func TestReliabilitySoak(t *testing.T) {
	// Independent of the other scenarios (own ports, directories, processes):
	// runs beside them (docs/e2e.md, "Time").
	t.Parallel()
	bin := collectorBinary(t)
	sim := need(t, "workersim", filepath.Join(binDir, "workersim"))
	total := envMinutes("WORKERWATCH_SOAK_MINUTES", 2)
	const workers = 100
	// Short runs sample often: the medians of the two windows compared then
	// have enough samples to ride over GC sawtooth (about +-5 % of RSS).
	every := 2 * time.Second
	if total > 10*time.Minute {
		every = 15 * time.Second
	}
	warmup := max(total/3, 30*time.Second)
	csvPath := cmp.Or(os.Getenv("WORKERWATCH_SOAK_CSV"), filepath.Join(logDir, "soak.csv"))

	tmp := t.TempDir()
	be := startBackend(t, "rel-soak-backend", loopbackAddr(t), tmp)
	health, grpc, httpAddr, prom := loopbackAddr(t), loopbackAddr(t), loopbackAddr(t), loopbackAddr(t)
	// This run's simulated workers only (another session's are not ours).
	prefix := runPrefix + "soak-"
	overlay := filepath.Join(tmp, "own-fleet.yaml")
	writeFile(t, overlay, ownFleetSelector(prefix))
	col := start(t, "rel-soak-collector", []string{
		"WORKERWATCH_STATE_DIR=" + filepath.Join(tmp, "state"),
		"WORKERWATCH_OTLP_ENDPOINT=http://" + be.addr,
	}, bin, "--config", filepath.Join(repoRoot, "config.yaml"), "--config", overlay,
		"--set=extensions::worker_health::endpoint="+health,
		"--set=receivers::otlp::protocols::grpc::endpoint="+grpc,
		"--set=receivers::otlp::protocols::http::endpoint="+httpAddr,
		"--set=exporters::prometheus::endpoint="+prom,
		"--set=service::telemetry::metrics::level=none")
	waitReady(t, col, health)
	start(t, "rel-soak-fleet", nil, sim, "fleet", "--workers", strconv.Itoa(workers), "--seed", "11",
		"--id-prefix", prefix, "--otlp-endpoint", httpAddr)
	eventually(t, 120*time.Second, time.Second, "all workers known to the health API", func() error {
		var fleet struct {
			Count int `json:"count"`
		}
		if _, err := getJSON("http://"+health+"/health/workers", &fleet); err != nil {
			return err
		}
		if fleet.Count < workers {
			return fmt.Errorf("%d workers", fleet.Count)
		}
		return nil
	})

	type sample struct {
		at        time.Duration
		rss       int64
		cpu, rate float64
	}
	var samples []sample
	pid := col.cmd.Process.Pid
	began := time.Now()
	first, err := readProcUsage(pid)
	if err != nil {
		t.Fatal(err)
	}
	prev := sample{rss: first.rss}
	for time.Since(began) < total {
		time.Sleep(every)
		if col.exited() {
			t.Fatalf("collector exited during the soak:\n%s", col.tail())
		}
		u, err := readProcUsage(pid)
		if err != nil {
			t.Fatal(err)
		}
		s := sample{at: time.Since(began), rss: u.rss, cpu: u.cpu - first.cpu}
		s.rate = (s.cpu - prev.cpu) / (s.at - prev.at).Seconds()
		samples = append(samples, s)
		prev = s
	}

	var csv strings.Builder
	csv.WriteString("elapsed_s,rss_mib,cpu_s,cpu_cores\n")
	for _, s := range samples {
		fmt.Fprintf(&csv, "%.0f,%.1f,%.2f,%.3f\n", s.at.Seconds(), float64(s.rss)/(1<<20), s.cpu, s.rate)
	}
	if err := os.WriteFile(csvPath, []byte(csv.String()), 0o644); err != nil {
		t.Error(err)
	}
	t.Logf("e2e: soak samples (%s):\n%s", csvPath, csv.String())

	var after []sample
	for _, s := range samples {
		if s.at >= warmup {
			after = append(after, s)
		}
	}
	n := max(len(after)/5, 1)
	if len(after) < 2*n {
		t.Fatalf("too few samples after warm-up: %d", len(after))
	}
	rssOf := func(ss []sample) []float64 {
		var out []float64
		for _, s := range ss {
			out = append(out, float64(s.rss))
		}
		return out
	}
	early, late := median(rssOf(after[:n])), median(rssOf(after[len(after)-n:]))
	growth := late/early - 1
	cpuAfter := (after[len(after)-1].cpu - after[0].cpu) / (after[len(after)-1].at - after[0].at).Seconds()
	t.Logf("e2e: RESULT soak %s, %d workers: RSS after warm-up (%s) %.1f MiB -> %.1f MiB (%+.1f%%), collector CPU %.3f cores on average after warm-up",
		total, workers, warmup, early/(1<<20), late/(1<<20), 100*growth, cpuAfter)
	if growth >= 0.05 {
		t.Errorf("RSS grew %.1f%% after warm-up (limit 5%%)", 100*growth)
	}
	var fleet struct {
		Count int `json:"count"`
	}
	if _, err := getJSON("http://"+health+"/health/workers", &fleet); err != nil || fleet.Count < workers {
		t.Errorf("health API at the end: %d workers, %v", fleet.Count, err)
	}
	if st, err := os.Stat(be.tracesFile); err != nil || st.Size() == 0 {
		t.Errorf("no traces reached the backend through the default config's otlp_http exporter: %v", err)
	}
}
