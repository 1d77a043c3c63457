//go:build e2e

package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/plog/plogotlp"

	"github.com/workerwatch/workerwatch/internal/contract"
	"github.com/workerwatch/workerwatch/internal/freeport"
	"github.com/workerwatch/workerwatch/internal/procfs"
)

// TestReliabilityFlood (issue 14, point 1): the shipped default config
// (config.yaml, the binary's built-in workerwatch:default; only its ports,
// state directory and export target moved) under a flood of distinct worker ids and run ids
// over OTLP/gRPC, as fast as one client sends, while a handful of real
// workers keep sending over OTLP/HTTP:
//   - the simulator's fleet (real processes: tree metrics, runs, heartbeats);
//   - probe workers in this test, one heartbeat request every 500 ms each,
//     every request counted.
//
// Asserted during the flood, the minute after, and again after a restart on
// the same state directory (the checkpoint the flood left):
//   - the collector's RSS stays under the memory_limiter's limit_mib,
//     sampled every 250 ms;
//   - >= 99 % of the real workers' requests are accepted: the probes' exact
//     count, and the collector's own OTLP/HTTP receiver counts (the
//     simulator's items too);
//   - the health API answers for the simulator's workers, and never 404;
//     its p99 is logged (the RESULT table), and is a gate only with
//     WORKERWATCH_STRICT_LATENCY=1, as `make flood` (a measurement outside
//     `make test`) sets: under 50 ms. In `make test` a latency on a loaded
//     2-core machine is a figure, not a pass/fail (issue 19).
//
// `make test` floods 10,000 worker ids and 100,000 run ids, and goes on with
// new ids until the flood has lasted 5 s (WORKERWATCH_FLOOD_MIN_SECONDS) so
// that the probes send during it; `make flood` the
// full 1,000,000 and 10,000,000 (WORKERWATCH_FLOOD_WORKERS, _RUNS). The
// figures are in docs/reliability.md. WORKERWATCH_FLOOD_PPROF=1 adds the
// pprof extension and saves heap profiles (at the flood's peak RSS and at
// the end) to $CACHE/e2e-logs, with their top entries in the log.
//
//	make build && go test -tags e2e -count=1 -v -run TestReliabilityFlood ./e2e/
func TestReliabilityFlood(t *testing.T) {
	// Not parallel: it bounds RSS under the flood (and, in `make flood`, the
	// health API's p99), and the flood takes the machine's CPU; it runs
	// first, alone (docs/e2e.md, "Time").
	bin := collectorBinary(t)
	sim := need(t, "workersim", filepath.Join(binDir, "workersim"))
	workers := envInt("WORKERWATCH_FLOOD_WORKERS", 10000)
	runs := envInt("WORKERWATCH_FLOOD_RUNS", 100000)
	after := time.Duration(envInt("WORKERWATCH_FLOOD_AFTER_SECONDS", 10)) * time.Second
	// The flood lasts at least this long (new ids past the planned ones):
	// 10,000 ids take under a second on a quick machine, shorter than the
	// probes' 500 ms tick plus a process start, and a flood phase without
	// a probe request in it proves nothing (CI run 76 failed on "0 of 0").
	minFlood := envInt("WORKERWATCH_FLOOD_MIN_SECONDS", 5)
	strict := os.Getenv("WORKERWATCH_STRICT_LATENCY") == "1"
	profile := os.Getenv("WORKERWATCH_FLOOD_PPROF") == "1"
	const p99Strict = 50 * time.Millisecond // `make flood` only
	cfgPath := filepath.Join(repoRoot, "config.yaml")
	limitMiB := limitMiBOf(t, cfgPath)
	limit := int64(limitMiB) << 20

	tmp := t.TempDir()
	// The backend of the default config's otlp_http exporter: takes
	// everything (a backend that keeps up).
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/x-protobuf")
		w.WriteHeader(http.StatusOK)
	}))
	defer sink.Close()

	health, grpcAddr, httpAddr, prom, pprofAddr := freeport.Addr(t), freeport.Addr(t), freeport.Addr(t), freeport.Addr(t), freeport.Addr(t)
	telemetry := freeport.Port(t)
	extensions := "[file_storage, worker_health]"
	pprofCfg := ""
	if profile {
		extensions = "[file_storage, worker_health, pprof]"
		pprofCfg = "  pprof:\n    endpoint: " + pprofAddr + "\n"
	}
	// The default config with its listeners moved, watching this run's
	// simulated workers only: merged over config.yaml.
	override := filepath.Join(tmp, "ports.yaml")
	writeFile(t, override, ownFleetSelector(runPrefix)+fmt.Sprintf(`  otlp:
    protocols:
      grpc:
        endpoint: %s
      http:
        endpoint: %s
extensions:
  worker_health:
    endpoint: %s
%sexporters:
  prometheus:
    endpoint: %s
service:
  extensions: %s
  telemetry:
    metrics:
      readers:
        - pull:
            exporter:
              prometheus:
                host: 127.0.0.1
                port: %d
`, grpcAddr, httpAddr, health, pprofCfg, prom, extensions, telemetry))
	colEnv := []string{"WORKERWATCH_STATE_DIR=" + filepath.Join(tmp, "state"), "WORKERWATCH_OTLP_ENDPOINT=" + sink.URL}
	// The built-in configuration (config.yaml, embedded), as the binary runs
	// it when given no --config, with the listeners moved.
	args := []string{"--config=workerwatch:default", "--config=" + override}
	// WORKERWATCH_FLOOD_SET: extra --set flags (space separated), to try a
	// setting against the same flood.
	for _, s := range strings.Fields(os.Getenv("WORKERWATCH_FLOOD_SET")) {
		args = append(args, "--set="+s)
	}
	startCollector := func(name string) *proc {
		col := start(t, name, colEnv, bin, args...)
		waitReady(t, col, health)
		return col
	}
	col := startCollector("rel-flood-collector")

	// The real workers.
	const realWorkers = 4
	fleet := start(t, "rel-flood-fleet", nil, sim, "fleet", "--workers", strconv.Itoa(realWorkers),
		"--id-prefix", runPrefix+"real-", "--seed", "5", "--otlp-endpoint", httpAddr, "--run-rate", "2")
	var realIDs []string
	for i := 1; i <= realWorkers; i++ {
		realIDs = append(realIDs, fmt.Sprintf("%sreal-%d", runPrefix, i))
	}
	eventually(t, 90*time.Second, 500*time.Millisecond, "the real workers healthy", func() error {
		if fleet.exited() {
			t.Fatalf("fleet exited:\n%s", fleet.tail())
		}
		for _, id := range realIDs {
			if code, err := getJSON("http://"+health+"/health/workers/"+id, nil); err != nil || code != 200 {
				return fmt.Errorf("%s: %d %v", id, code, err)
			}
		}
		return nil
	})

	m := newFloodMonitor(health, fmt.Sprintf("http://127.0.0.1:%d/metrics", telemetry), "http://"+prom+"/metrics", realIDs)
	// The Prometheus endpoint is scraped every 15 s with a 10 s timeout, as
	// a Prometheus with its default settings would (a scrape costs the
	// collector memory and CPU too); WORKERWATCH_FLOOD_SCRAPE_SECONDS=0: never.
	m.scrapeEvery = time.Duration(envInt("WORKERWATCH_FLOOD_SCRAPE_SECONDS", 15)) * time.Second
	if os.Getenv("WORKERWATCH_FLOOD_SCRAPE_SECONDS") == "0" {
		m.scrapeEvery = 0
	}
	m.setCollector(col.cmd.Process.Pid)
	probes := startProbes(t, httpAddr, 2, m)
	defer probes.stop()
	m.start()
	defer m.stop()

	// The flood: this binary as the flood client, at nice 10 (a sender on
	// another machine does not take the collector's CPU).
	statsPath := filepath.Join(tmp, "flood.json")
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	m.phase("flood")
	flood := start(t, "rel-flood-client", []string{
		"WW_FLOODER=1", "WW_FLOOD_ADDR=" + grpcAddr, "WW_FLOOD_OUT=" + statsPath,
		fmt.Sprintf("WW_FLOOD_WORKERS=%d", workers), fmt.Sprintf("WW_FLOOD_RUNS=%d", runs),
		"WW_FLOOD_SIGNALS=" + os.Getenv("WORKERWATCH_FLOOD_SIGNALS"), "WW_FLOOD_PASSES=" + os.Getenv("WORKERWATCH_FLOOD_PASSES"),
		"WW_FLOOD_PASS_GAP=" + os.Getenv("WORKERWATCH_FLOOD_PASS_GAP"),
		fmt.Sprintf("WW_FLOOD_MIN_SECONDS=%d", minFlood),
	}, "nice", "-n", "10", self, "-test.run=^$")
	m.floodStats = statsPath
	// A new real worker (a tree, a scheduler) that starts once a third of
	// the flood is sent, when the processor's table is full of flood ids:
	// it must be admitted and judged (200) all the same.
	lateID := runPrefix + "late-1"
	var late *proc
	var lateStart time.Time
	lateOK := make(chan time.Duration, 1)
	var lateLast atomic.Value // the last answer for lateID that was not 200
	lateLast.Store("none")
	var peakProfile string
	var profiledRSS int64
	var profiledAt time.Time
	const lateWithin = 90 * time.Second
	startLate := func() {
		late, lateStart = start(t, "rel-flood-late-fleet", nil, sim, "fleet", "--workers", "1",
			"--id-prefix", runPrefix+"late-", "--seed", "6", "--otlp-endpoint", httpAddr), time.Now()
		go func() {
			for time.Since(lateStart) < lateWithin {
				var w struct {
					State   string `json:"state"`
					Reasons []struct {
						Code string `json:"code"`
					} `json:"reasons"`
				}
				code, err := getJSON("http://"+health+"/health/workers/"+lateID, &w)
				if err == nil && code == 200 {
					lateOK <- time.Since(lateStart)
					return
				}
				lateLast.Store(fmt.Sprintf("%d %s %v %v after %s", code, w.State, w.Reasons, err, time.Since(lateStart).Round(time.Second)))
				time.Sleep(500 * time.Millisecond)
			}
		}()
	}
	for !flood.exited() {
		time.Sleep(250 * time.Millisecond)
		if late == nil && readFloodStats(statsPath).Workers >= int64(workers)/3 {
			startLate()
		}
		// One profile when the RSS first passes 3/4 of the limit, one at
		// each new maximum over the limit (at most one a minute).
		if rss := m.maxRSS("flood"); profile && (peakProfile == "" && rss > limit*3/4 ||
			rss > limit && rss > profiledRSS*11/10 && time.Since(profiledAt) > time.Minute) {
			peakProfile = saveHeapProfile(t, pprofAddr, "flood-peak")
			profiledRSS, profiledAt = rss, time.Now()
		}
		if col.exited() {
			t.Fatalf("collector died during the flood:\n%s", col.tail())
		}
	}
	st := readFloodStats(statsPath)
	if !st.Done {
		t.Fatalf("the flood client did not finish:\n%s", flood.tail())
	}
	t.Logf("e2e: flood sent %d worker ids and %d run ids in %d requests in %.1f s: accepted %d, refused %d, other errors %d (%s)",
		st.Workers, st.Runs, st.Requests, st.Seconds, st.Accepted, st.Refused, st.OtherError, st.FirstError)

	m.phase("after")
	if late == nil {
		// A short flood can end before its progress is written once.
		t.Logf("e2e: the flood ended before a third of it was seen sent; %s starts now", lateID)
		startLate()
	}
	select {
	case d := <-lateOK:
		t.Logf("e2e: %s, a new real worker started during the flood, answered 200 after %s", lateID, d.Round(100*time.Millisecond))
	case <-time.After(max(0, lateWithin-time.Since(lateStart))):
		t.Errorf("%s, a new real worker started during the flood, did not answer 200 within %s (last answer: %s)", lateID, lateWithin, lateLast.Load())
	}
	time.Sleep(after)
	if profile {
		saveHeapProfile(t, pprofAddr, "flood-end")
	}

	// Restart on the same state directory: the checkpoint holds what the
	// flood left.
	m.phase("stopping")
	stopped := time.Now()
	col.stop(t)
	stopTook := time.Since(stopped)
	stateSize := dirSize(filepath.Join(tmp, "state"))
	restarted := time.Now()
	col = startCollector("rel-flood-collector-restarted")
	readyTook := time.Since(restarted)
	m.setCollector(col.cmd.Process.Pid)
	m.phase("restart")
	time.Sleep(max(after, 10*time.Second))
	if profile {
		saveHeapProfile(t, pprofAddr, "restart-end")
	}
	m.stop()
	probes.stop()

	t.Logf("e2e: flood over time (RSS sampled every 250 ms, the rest every 5 s; limit_mib %d):\n%s", limitMiB, m.table())
	t.Logf("e2e: stop took %s, the state directory holds %.1f MiB, ready again %s after the restart",
		stopTook.Round(100*time.Millisecond), float64(stateSize)/(1<<20), readyTook.Round(100*time.Millisecond))
	t.Logf("e2e: RESULT flood %d worker ids, %d run ids (%d requests, %.0f s; accepted %d, refused %d):\n%s",
		st.Workers, st.Runs, st.Requests, st.Seconds, st.Accepted, st.Refused, m.summary(limitMiB))

	for _, ph := range []string{"flood", "after", "restart"} {
		s := m.phaseStats(ph)
		if s.maxRSS >= limit {
			t.Errorf("%s: collector RSS reached %.1f MiB, limit_mib is %d", ph, float64(s.maxRSS)/(1<<20), limitMiB)
		}
		if s.probeSent == 0 || float64(s.probeOK) < 0.99*float64(s.probeSent) {
			t.Errorf("%s: the real workers' requests accepted: %d of %d (want >= 99 %%)", ph, s.probeOK, s.probeSent)
		}
		// The collector's own count over OTLP/HTTP, where only the real
		// workers send (the simulator's included; a refused batch its SDK
		// sent again counts as refused here).
		if s.httpRefused > 0.01*(s.httpAccepted+s.httpRefused) {
			t.Errorf("%s: the collector refused %.0f of %.0f items the real workers sent over OTLP/HTTP (want <= 1 %%)",
				ph, s.httpRefused, s.httpAccepted+s.httpRefused)
		}
		if len(s.latencies) == 0 {
			t.Errorf("%s: no health API probe", ph)
		} else if p := percentile(s.latencies, 0.99); strict && p > p99Strict {
			t.Errorf("%s: health API p99 %s for the real workers (bound %s, WORKERWATCH_STRICT_LATENCY=1)", ph, p, p99Strict)
		} else {
			t.Logf("e2e: %s: health API p99 %s for the real workers (%d requests; a figure, gated only by `make flood`)", ph, p, len(s.latencies))
		}
		if s.notFound > 0 {
			t.Errorf("%s: the health API answered 404 for a real worker %d times", ph, s.notFound)
		}
		if s.probeErr != "" {
			t.Logf("%s: first refused probe: %s", ph, s.probeErr)
		}
	}
	for _, ph := range []string{"flood", "after", "restart"} {
		if st := m.phaseStats(ph).notOKStates; len(st) > 0 {
			t.Logf("e2e: %s: the real workers' answers that were not 200, by code and state: %v", ph, st)
		}
	}
	if peakProfile != "" {
		t.Logf("e2e: heap at the flood's peak: %s", peakProfile)
	}
}

// envInt reads a positive integer from the environment.
func envInt(name string, def int) int {
	if v, err := strconv.Atoi(os.Getenv(name)); err == nil && v > 0 {
		return v
	}
	return def
}

// limitMiBOf reads the memory_limiter's limit_mib from a config.
func limitMiBOf(t *testing.T, path string) int {
	t.Helper()
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s+limit_mib: (\d+)`).FindSubmatch(raw)
	if m == nil {
		t.Fatal("no limit_mib in " + path)
	}
	n, _ := strconv.Atoi(string(m[1]))
	return n
}

func readFloodStats(path string) floodStats {
	var st floodStats
	if b, err := os.ReadFile(path); err == nil {
		_ = json.Unmarshal(b, &st)
	}
	return st
}

func dirSize(dir string) int64 {
	var n int64
	_ = filepath.Walk(dir, func(_ string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() {
			n += info.Size()
		}
		return nil
	})
	return n
}

// saveHeapProfile saves the collector's heap profile (pprof extension) and
// logs its top entries by in-use bytes.
func saveHeapProfile(t *testing.T, addr, name string) string {
	t.Helper()
	resp, err := http.Get("http://" + addr + "/debug/pprof/heap")
	if err != nil {
		t.Logf("e2e: heap profile %s: %v", name, err)
		return ""
	}
	defer resp.Body.Close()
	path := filepath.Join(logDir, "rel-flood-"+name+".pb.gz")
	b, _ := io.ReadAll(resp.Body)
	if err := os.WriteFile(path, b, 0o644); err != nil {
		t.Logf("e2e: heap profile %s: %v", name, err)
		return ""
	}
	out, err := exec.Command("go", "tool", "pprof", "-top", "-nodecount=25", "-sample_index=inuse_space", collectorBinary(t), path).CombinedOutput()
	if err != nil {
		t.Logf("e2e: go tool pprof %s: %v", path, err)
	}
	t.Logf("e2e: heap profile %s (%s):\n%s", name, path, out)
	out, _ = exec.Command("go", "tool", "pprof", "-top", "-cum", "-nodecount=40", "-sample_index=inuse_space", collectorBinary(t), path).CombinedOutput()
	t.Logf("e2e: heap profile %s, cumulative:\n%s", name, out)
	return path
}

// floodMonitor samples the collector and the health API during the flood.
type floodMonitor struct {
	health, telemetry, prom string
	realIDs                 []string
	floodStats              string
	scrapeEvery             time.Duration

	series atomic.Int64 // series on the Prometheus endpoint at the last scrape, -1 failed

	mu      sync.Mutex
	pid     int
	current string
	began   time.Time
	phases  map[string]*phaseStats
	rows    []string
	stopped chan struct{}
	done    sync.WaitGroup
}

type phaseStats struct {
	maxRSS, maxAnon int64
	latencies       []time.Duration
	// livez: the same collector's /livez, polled alongside: it reads no
	// worker state, so what it takes is the machine's scheduling and the
	// collector's GC, not the health API's work (a control for latencies).
	livez               []time.Duration
	notFound, unhealthy int
	notOKStates         map[string]int // the state in each answer that was not 200
	probeSent, probeOK  int
	probeErr            string
	httpAccepted        float64 // the collector's OTLP/HTTP receiver, items
	httpRefused         float64
	firstHTTP           *[2]float64
}

func newFloodMonitor(health, telemetry, prom string, realIDs []string) *floodMonitor {
	return &floodMonitor{
		health: health, telemetry: telemetry, prom: prom, realIDs: realIDs,
		current: "warm-up", began: time.Now(), phases: map[string]*phaseStats{}, stopped: make(chan struct{}),
	}
}

func (m *floodMonitor) setCollector(pid int) {
	m.mu.Lock()
	m.pid = pid
	m.mu.Unlock()
}

func (m *floodMonitor) phase(name string) {
	m.mu.Lock()
	m.current = name
	m.mu.Unlock()
}

func (m *floodMonitor) stats() *phaseStats { return m.statsOf(m.current) }

func (m *floodMonitor) statsOf(phase string) *phaseStats {
	s := m.phases[phase]
	if s == nil {
		s = &phaseStats{}
		m.phases[phase] = s
	}
	return s
}

// answerPhase is the phase a health API request's answer counts in: the one
// it was sent in, and none when it was sent or answered while the collector
// was stopping or starting again ("stopping" lasts until the restarted one
// is ready: a request sent before that may meet a collector that has not
// restored its workers yet, and is no figure of the restart). The caller
// holds mu.
func (m *floodMonitor) answerPhase(sent string) (*phaseStats, bool) {
	if sent == "stopping" || m.current == "stopping" {
		return nil, false
	}
	return m.statsOf(sent), true
}

func (m *floodMonitor) currentPhase() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.current
}

func (m *floodMonitor) phaseStats(name string) phaseStats {
	m.mu.Lock()
	defer m.mu.Unlock()
	if s := m.phases[name]; s != nil {
		return *s
	}
	return phaseStats{}
}

func (m *floodMonitor) maxRSS(name string) int64 { return m.phaseStats(name).maxRSS }

func (m *floodMonitor) probe(ok bool, err string) {
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.stats()
	s.probeSent++
	if ok {
		s.probeOK++
	} else if s.probeErr == "" {
		s.probeErr = err
	}
}

func (m *floodMonitor) start() {
	loop := func(every time.Duration, f func()) {
		m.done.Add(1)
		go func() {
			defer m.done.Done()
			tick := time.NewTicker(every)
			defer tick.Stop()
			for {
				select {
				case <-m.stopped:
					return
				case <-tick.C:
					f()
				}
			}
		}()
	}
	loop(250*time.Millisecond, m.sampleRSS)
	loop(250*time.Millisecond, m.sampleHealth)
	loop(5*time.Second, m.sampleRow)
	m.series.Store(-1)
	if m.scrapeEvery > 0 {
		loop(m.scrapeEvery, m.scrape)
	}
}

var scrapeClient = &http.Client{Timeout: 10 * time.Second}

// scrape reads the Prometheus endpoint as a Prometheus would and counts the
// series.
func (m *floodMonitor) scrape() {
	resp, err := scrapeClient.Get(m.prom)
	if err != nil {
		m.series.Store(-1)
		return
	}
	defer resp.Body.Close()
	n := int64(0)
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		m.series.Store(-1)
		return
	}
	for _, l := range bytes.Split(b, []byte("\n")) {
		if len(l) > 0 && l[0] != '#' {
			n++
		}
	}
	m.series.Store(n)
}

func (m *floodMonitor) stop() {
	select {
	case <-m.stopped:
		return
	default:
	}
	close(m.stopped)
	m.done.Wait()
}

func (m *floodMonitor) sampleRSS() {
	m.mu.Lock()
	pid := m.pid
	m.mu.Unlock()
	rss, err := procfs.RSS(pid)
	if err != nil {
		return
	}
	split, _ := readResidentSplit(pid)
	m.mu.Lock()
	s := m.stats()
	s.maxRSS = max(s.maxRSS, rss)
	s.maxAnon = max(s.maxAnon, split.anon)
	m.mu.Unlock()
}

var floodClient = &http.Client{Timeout: 5 * time.Second}

// sampleHealth asks the health API for each real worker, and /livez once
// at a random place among them: the first request after the monitor's
// tickers fire meets this process's own sampling, and a control always
// asked last would miss that.
func (m *floodMonitor) sampleHealth() {
	livezAt := rand.IntN(len(m.realIDs) + 1)
	for i, id := range m.realIDs {
		if i == livezAt {
			m.sampleLivez()
		}
		sent, t0 := m.currentPhase(), time.Now()
		resp, err := floodClient.Get("http://" + m.health + "/health/workers/" + id)
		d := time.Since(t0)
		code, state := 0, "no answer"
		if err == nil {
			var w struct {
				State string `json:"state"`
			}
			_ = json.NewDecoder(resp.Body).Decode(&w)
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			code, state = resp.StatusCode, w.State
		}
		m.mu.Lock()
		if s, ok := m.answerPhase(sent); ok {
			s.latencies = append(s.latencies, d)
			switch {
			case code == http.StatusNotFound:
				s.notFound++
			case code != http.StatusOK:
				s.unhealthy++
				if s.notOKStates == nil {
					s.notOKStates = map[string]int{}
				}
				s.notOKStates[fmt.Sprintf("%d %s", code, state)]++
			}
		}
		m.mu.Unlock()
	}
	if livezAt == len(m.realIDs) {
		m.sampleLivez()
	}
}

func (m *floodMonitor) sampleLivez() {
	sent, t0 := m.currentPhase(), time.Now()
	resp, err := floodClient.Get("http://" + m.health + "/livez")
	d := time.Since(t0)
	if err == nil {
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	m.mu.Lock()
	if s, ok := m.answerPhase(sent); ok {
		s.livez = append(s.livez, d)
	}
	m.mu.Unlock()
}

// sampleRow adds a row of the table: RSS, Go heap, workers tracked, the
// series on the Prometheus endpoint (scraped as a Prometheus would, which
// costs the collector too), the flood's progress, the real workers'.
func (m *floodMonitor) sampleRow() {
	m.mu.Lock()
	pid, ph := m.pid, m.current
	m.mu.Unlock()
	rss, _ := procfs.RSS(pid)
	var heap, tracked, accepted, refused float64
	if txt, err := httpGet(m.telemetry); err == nil {
		heap, _ = metricSum(txt, "otelcol_process_runtime_heap_alloc_bytes")
		tracked, _ = metricSum(txt, "otelcol_processor_worker_health_workers_tracked")
		for _, sig := range []string{"spans", "metric_points", "log_records"} {
			a, _ := metricSum(txt, "otelcol_receiver_accepted_"+sig, `transport="http"`)
			r, _ := metricSum(txt, "otelcol_receiver_refused_"+sig, `transport="http"`)
			accepted, refused = accepted+a, refused+r
		}
	}
	series := m.series.Load()
	st := readFloodStats(m.floodStats)
	m.mu.Lock()
	defer m.mu.Unlock()
	s := m.stats()
	if s.firstHTTP == nil {
		s.firstHTTP = &[2]float64{accepted, refused}
	}
	s.httpAccepted, s.httpRefused = accepted-s.firstHTTP[0], refused-s.firstHTTP[1]
	m.rows = append(m.rows, fmt.Sprintf("%6.0f %-8s %8.1f %8.1f %8.0f %8d %9d %9d %8d %6d/%-6d",
		time.Since(m.began).Seconds(), ph, float64(rss)/(1<<20), heap/(1<<20), tracked, series,
		st.Workers, st.Runs, st.Refused, s.probeOK, s.probeSent))
}

func (m *floodMonitor) table() string {
	m.mu.Lock()
	defer m.mu.Unlock()
	return fmt.Sprintf("%6s %-8s %8s %8s %8s %8s %9s %9s %8s %13s\n%s", "t(s)", "phase", "RSS MiB", "heap MiB",
		"tracked", "series", "flood ids", "run ids", "refused", "probes ok", strings.Join(m.rows, "\n"))
}

func (m *floodMonitor) summary(limitMiB int) string {
	var b strings.Builder
	fmt.Fprintf(&b, "| %-8s | %-22s | %-14s | %-24s | %-28s | %-22s | %-14s | %-10s |\n", "phase", "max RSS (limit)", "max anon. RSS",
		"probe requests accepted", "OTLP/HTTP items acc./refused", "health p50 / p99 / max", "/livez p99", "not 200")
	for _, ph := range []string{"warm-up", "flood", "after", "restart"} {
		s := m.phaseStats(ph)
		fmt.Fprintf(&b, "| %-8s | %-22s | %-14s | %-24s | %-28s | %-22s | %-14s | %-10s |\n", ph,
			fmt.Sprintf("%.1f MiB (%d MiB)", float64(s.maxRSS)/(1<<20), limitMiB),
			fmt.Sprintf("%.1f MiB", float64(s.maxAnon)/(1<<20)),
			fmt.Sprintf("%d/%d (%.2f %%)", s.probeOK, s.probeSent, 100*float64(s.probeOK)/float64(max(1, s.probeSent))),
			fmt.Sprintf("%.0f / %.0f", s.httpAccepted, s.httpRefused),
			fmt.Sprintf("%s / %s / %s", percentile(s.latencies, 0.5).Round(time.Millisecond/10),
				percentile(s.latencies, 0.99).Round(time.Millisecond/10), percentile(s.latencies, 1).Round(time.Millisecond/10)),
			percentile(s.livez, 0.99).Round(time.Millisecond/10).String(),
			fmt.Sprintf("%d (404: %d)", s.notFound+s.unhealthy, s.notFound))
	}
	return b.String()
}

func percentile(ds []time.Duration, q float64) time.Duration {
	if len(ds) == 0 {
		return 0
	}
	s := slices.Clone(ds)
	slices.Sort(s)
	i := int(q*float64(len(s))+0.5) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// probes are real workers in this test: each sends one heartbeat log record
// over OTLP/HTTP every 500 ms and counts exactly what was accepted (HTTP 200).
type probes struct {
	stopOnce sync.Once
	stopped  chan struct{}
	wg       sync.WaitGroup
}

func startProbes(t *testing.T, httpAddr string, n int, m *floodMonitor) *probes {
	t.Helper()
	p := &probes{stopped: make(chan struct{})}
	client := &http.Client{Timeout: 5 * time.Second}
	for i := 1; i <= n; i++ {
		id := fmt.Sprintf("probe-%d", i)
		p.wg.Add(1)
		go func() {
			defer p.wg.Done()
			tick := time.NewTicker(500 * time.Millisecond)
			defer tick.Stop()
			for {
				select {
				case <-p.stopped:
					return
				case <-tick.C:
				}
				ld := plog.NewLogs()
				rl := ld.ResourceLogs().AppendEmpty()
				rl.Resource().Attributes().PutStr("service.name", "probe-worker")
				rl.Resource().Attributes().PutStr(contract.AttrWorkerID, id)
				lr := rl.ScopeLogs().AppendEmpty().LogRecords().AppendEmpty()
				lr.SetTimestamp(pcommon.NewTimestampFromTime(time.Now()))
				lr.SetEventName(contract.EventHeartbeat)
				body, _ := plogotlp.NewExportRequestFromLogs(ld).MarshalProto()
				resp, err := client.Post("http://"+httpAddr+"/v1/logs", "application/x-protobuf", bytes.NewReader(body))
				if err != nil {
					m.probe(false, err.Error())
					continue
				}
				_, _ = io.Copy(io.Discard, resp.Body)
				resp.Body.Close()
				m.probe(resp.StatusCode == http.StatusOK, resp.Status)
			}
		}()
	}
	return p
}

func (p *probes) stop() {
	p.stopOnce.Do(func() { close(p.stopped) })
	p.wg.Wait()
}
