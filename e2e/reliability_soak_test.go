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

	"github.com/workerwatch/workerwatch/internal/freeport"
)

// TestReliabilitySoak runs the shipped default config (config.yaml, ports
// moved to free loopback ports, traces and logs to a receiving collector)
// with a simulated fleet of 100 workers for WORKERWATCH_SOAK_MINUTES
// (default 2; `make soak` runs 30), samples the collector's RSS and CPU from
// /proc and its Go heap and tracked state from its own metrics, and writes
// them as CSV (WORKERWATCH_SOAK_CSV, default $CACHE/e2e-logs/soak.csv).
//
// What it fails on is what a run of any length shows, on any machine:
//   - the collector keeps running;
//   - its RSS stays under the default config's memory_limiter limit_mib
//     (512 MiB), at every sample;
//   - its tracked state stays within the documented bounds at every sample:
//     workers tracked never more than the fleet (100), runs tracked never
//     more than the fleet's share (100 x limits.max_runs_per_worker, 256);
//   - no table filled: no worker and no run event refused;
//   - those figures were read at all: some sample shows workers tracked;
//   - at the end the health API knows the whole fleet, and the default
//     config's trace export reached the backend.
//
// Memory growth is a figure, not a gate: a 2-minute window cannot tell a
// leak from the heap settling (RSS +8.7 % and +5.6 % in two 2-minute runs of
// a config whose 30-minute runs stay flat). The test fits a least-squares
// slope to RSS and to the Go heap after warm-up (the first third of the
// run, at least 30 s), logs it as a RESULT line and, with
// WORKERWATCH_SOAK_RESULT set (`make soak`), writes it to that file.
//
//	make build && go test -tags e2e -count=1 -v -run TestReliabilitySoak ./e2e/
func TestReliabilitySoak(t *testing.T) {
	// Independent of the other scenarios (own ports, directories, processes):
	// runs beside them (docs/e2e.md, "Time").
	defer parallel(t, 130*time.Second)()
	bin := collectorBinary(t)
	sim := need(t, "workersim", filepath.Join(binDir, "workersim"))
	total := envMinutes("WORKERWATCH_SOAK_MINUTES", 2)
	const (
		workers           = 100
		limitMiB          = 512 // config.yaml, memory_limiter.limit_mib
		maxRunsPerWorker  = 256 // processor default, limits.max_runs_per_worker (docs/processor.md)
		maxRunsTrackedAll = workers * maxRunsPerWorker
	)
	every := 2 * time.Second
	if total > 10*time.Minute {
		every = 15 * time.Second
	}
	warmup := max(total/3, 30*time.Second)
	csvPath := cmp.Or(os.Getenv("WORKERWATCH_SOAK_CSV"), filepath.Join(logDir, "soak.csv"))

	tmp := t.TempDir()
	be := startBackend(t, "rel-soak-backend", freeport.Addr(t), tmp)
	health, grpc, httpAddr, prom := freeport.Addr(t), freeport.Addr(t), freeport.Addr(t), freeport.Addr(t)
	telemetry := freeport.Port(t)
	// This run's simulated workers only (another session's are not ours),
	// and the collector's own metrics on a free port.
	prefix := runPrefix + "soak-"
	overlay := filepath.Join(tmp, "own-fleet.yaml")
	writeFile(t, overlay, ownFleetSelector(prefix)+fmt.Sprintf(`service:
  telemetry:
    metrics:
      readers:
        - pull:
            exporter:
              prometheus:
                host: 127.0.0.1
                port: %d
`, telemetry))
	col := start(t, "rel-soak-collector", []string{
		"WORKERWATCH_STATE_DIR=" + filepath.Join(tmp, "state"),
		"WORKERWATCH_OTLP_ENDPOINT=http://" + be.addr,
	}, bin, "--config", filepath.Join(repoRoot, "config.yaml"), "--config", overlay,
		"--set=extensions::worker_health::endpoint="+health,
		"--set=receivers::otlp::protocols::grpc::endpoint="+grpc,
		"--set=receivers::otlp::protocols::http::endpoint="+httpAddr,
		"--set=exporters::prometheus::endpoint="+prom)
	waitReady(t, col, health)
	telemetryURL := fmt.Sprintf("http://127.0.0.1:%d/metrics", telemetry)
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
		at                 time.Duration
		rss                int64
		heap               float64 // bytes, -1 when the scrape failed
		cpu, rate          float64
		workers, runs      float64
		refusedW, refusedR float64
	}
	var samples []sample
	pid := col.cmd.Process.Pid
	began := time.Now()
	first, err := readProcUsage(pid)
	if err != nil {
		t.Fatal(err)
	}
	prev := sample{rss: first.rss}
	var maxRSS int64
	var maxWorkers, maxRuns float64
	for time.Since(began) < total {
		time.Sleep(every)
		if col.exited() {
			t.Fatalf("collector exited during the soak:\n%s", col.tail())
		}
		u, err := readProcUsage(pid)
		if err != nil {
			t.Fatal(err)
		}
		s := sample{at: time.Since(began), rss: u.rss, cpu: u.cpu - first.cpu, heap: -1}
		s.rate = (s.cpu - prev.cpu) / (s.at - prev.at).Seconds()
		if txt, err := httpGet(telemetryURL); err == nil {
			s.heap, _ = metricSum(txt, "otelcol_process_runtime_heap_alloc_bytes")
			s.workers, _ = metricSum(txt, "otelcol_processor_worker_health_workers_tracked")
			s.runs, _ = metricSum(txt, "otelcol_processor_worker_health_runs_tracked")
			s.refusedW, _ = metricSum(txt, "otelcol_processor_worker_health_workers_refused")
			s.refusedR, _ = metricSum(txt, "otelcol_processor_worker_health_runs_refused")
		} else {
			t.Logf("e2e: soak: the collector's own metrics at %.0fs: %v", s.at.Seconds(), err)
		}
		samples = append(samples, s)
		prev = s
		maxRSS, maxWorkers, maxRuns = max(maxRSS, s.rss), max(maxWorkers, s.workers), max(maxRuns, s.runs)
		switch {
		case s.rss >= limitMiB<<20:
			t.Errorf("at %.0fs: collector RSS %.1f MiB, limit_mib %d", s.at.Seconds(), float64(s.rss)/(1<<20), limitMiB)
		case s.workers > workers:
			t.Errorf("at %.0fs: %.0f workers tracked, the fleet is %d", s.at.Seconds(), s.workers, workers)
		case s.runs > maxRunsTrackedAll:
			t.Errorf("at %.0fs: %.0f runs tracked, more than %d workers x %d", s.at.Seconds(), s.runs, workers, maxRunsPerWorker)
		case s.refusedW > 0 || s.refusedR > 0:
			t.Errorf("at %.0fs: a table filled: %.0f workers and %.0f run events refused", s.at.Seconds(), s.refusedW, s.refusedR)
		}
	}

	var csv strings.Builder
	csv.WriteString("elapsed_s,rss_mib,heap_mib,cpu_s,cpu_cores,workers_tracked,runs_tracked\n")
	for _, s := range samples {
		// The collector's own metrics unread (a scrape timed out): empty.
		heap, workers, runs := "", "", ""
		if s.heap >= 0 {
			heap, workers, runs = fmt.Sprintf("%.1f", s.heap/(1<<20)), fmt.Sprintf("%.0f", s.workers), fmt.Sprintf("%.0f", s.runs)
		}
		fmt.Fprintf(&csv, "%.0f,%.1f,%s,%.2f,%.3f,%s,%s\n", s.at.Seconds(), float64(s.rss)/(1<<20), heap,
			s.cpu, s.rate, workers, runs)
	}
	if err := os.WriteFile(csvPath, []byte(csv.String()), 0o644); err != nil {
		t.Error(err)
	}
	t.Logf("e2e: soak samples (%s):\n%s", csvPath, csv.String())

	// The figures: least-squares slopes after warm-up, in MiB per hour.
	var xs, rss, hx, heap []float64
	var after []sample
	for _, s := range samples {
		if s.at < warmup {
			continue
		}
		after = append(after, s)
		xs, rss = append(xs, s.at.Hours()), append(rss, float64(s.rss)/(1<<20))
		if s.heap >= 0 {
			hx, heap = append(hx, s.at.Hours()), append(heap, s.heap/(1<<20))
		}
	}
	if len(after) < 3 {
		t.Fatalf("too few samples after warm-up: %d", len(after))
	}
	// The tracked-state checks above read the collector's own metrics; a
	// scrape that never worked (or a metric renamed) reads 0 and would pass
	// them all. The health API knew the fleet before the first sample, so
	// any sample that read them shows workers tracked.
	if maxWorkers == 0 {
		t.Errorf("no sample read a worker tracked from %s: the tracked-state checks read nothing", telemetryURL)
	}
	rssSlope, rssMean := leastSquaresSlope(xs, rss)
	heapSlope, heapMean := leastSquaresSlope(hx, heap)
	cpuAfter := (after[len(after)-1].cpu - after[0].cpu) / (after[len(after)-1].at - after[0].at).Seconds()
	result := fmt.Sprintf("soak %s, %d workers, %d samples every %s after a warm-up of %s: "+
		"RSS mean %.1f MiB, slope %+.2f MiB/h; Go heap mean %.1f MiB, slope %+.2f MiB/h; "+
		"RSS max %.1f MiB (limit_mib %d); workers tracked max %.0f; runs tracked max %.0f; CPU %.3f cores",
		total, workers, len(after), every, warmup, rssMean, rssSlope, heapMean, heapSlope,
		float64(maxRSS)/(1<<20), limitMiB, maxWorkers, maxRuns, cpuAfter)
	t.Logf("e2e: RESULT %s", result)
	if out := os.Getenv("WORKERWATCH_SOAK_RESULT"); out != "" {
		line := fmt.Sprintf("%s %s\n", time.Now().UTC().Format(time.RFC3339), result)
		if err := os.WriteFile(out, []byte(line), 0o644); err != nil {
			t.Error(err)
		}
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

// leastSquaresSlope fits y = a + b x and returns b and the mean of y.
func leastSquaresSlope(x, y []float64) (slope, mean float64) {
	n := float64(len(x))
	if n < 2 {
		return 0, 0
	}
	var sx, sy, sxx, sxy float64
	for i := range x {
		sx, sy, sxx, sxy = sx+x[i], sy+y[i], sxx+x[i]*x[i], sxy+x[i]*y[i]
	}
	d := n*sxx - sx*sx
	if d == 0 {
		return 0, sy / n
	}
	return (n*sxy - sx*sy) / d, sy / n
}
