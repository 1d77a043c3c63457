//go:build e2e

package e2e

import (
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"github.com/workerwatch/workerwatch/internal/freeport"
)

// TestMain lets the test binary double as the churn test's worker (with
// WW_CHURNER set it forks and reaps children instead of running tests) and
// as the flood test's client (WW_FLOODER).
// Otherwise the suite runs beside bystanders it must leave alone
// (reliability_bystander_test.go).
func TestMain(m *testing.M) {
	if os.Getenv("WW_CHURNER") != "" {
		os.Exit(churnMain())
	}
	if os.Getenv("WW_FLOODER") != "" {
		os.Exit(floodMain())
	}
	if os.Getenv("WORKERWATCH_OPENLOOP") != "" {
		os.Exit(openLoopMain())
	}
	os.Exit(withBystanders(m.Run))
}

// churnMain is the churner worker (`<test binary> churn-worker --id ID`):
// on SIGUSR1 it starts WW_CHURN_RATE children a second for
// WW_CHURN_DURATION, each `/bin/sleep WW_CHURN_LIFE` (`/bin/true` when the
// life is 0), reaps every one, writes "<started> <failed>" to WW_CHURN_OUT,
// then waits for SIGTERM. The count is exact: a child counts once its fork
// succeeded.
func churnMain() int {
	rate, _ := strconv.Atoi(os.Getenv("WW_CHURN_RATE"))
	dur, _ := time.ParseDuration(os.Getenv("WW_CHURN_DURATION"))
	life := os.Getenv("WW_CHURN_LIFE")
	if rate <= 0 || dur <= 0 {
		fmt.Fprintln(os.Stderr, "churner: WW_CHURN_RATE and WW_CHURN_DURATION needed")
		return 2
	}
	sig := make(chan os.Signal, 4)
	signal.Notify(sig, syscall.SIGUSR1, syscall.SIGTERM, syscall.SIGINT)
	if s := <-sig; s != syscall.SIGUSR1 {
		return 0
	}
	var wg sync.WaitGroup
	started, failed := 0, 0
	tick := time.NewTicker(time.Second / time.Duration(rate))
	end := time.Now().Add(dur)
	for time.Now().Before(end) {
		<-tick.C
		cmd := exec.Command("/bin/true")
		if life != "" && life != "0" {
			cmd = exec.Command("/bin/sleep", life)
		}
		if err := cmd.Start(); err != nil {
			failed++
			continue
		}
		started++
		wg.Add(1)
		go func() { _ = cmd.Wait(); wg.Done() }()
	}
	tick.Stop()
	wg.Wait()
	if err := os.WriteFile(os.Getenv("WW_CHURN_OUT"), fmt.Appendf(nil, "%d %d", started, failed), 0o644); err != nil {
		fmt.Fprintln(os.Stderr, "churner:", err)
		return 1
	}
	for s := range sig {
		if s != syscall.SIGUSR1 {
			return 0
		}
	}
	return 0
}

// TestReliabilityProcessChurn: a worker forks and reaps ~200 children a
// second under the worker_process receiver (1 s interval). Children living
// 2.5 s (longer than the interval, with margin for a late scrape on a loaded machine): the started/exited counters must be
// within 5 % of the exact count. Children that start and exit between two
// scrapes (/bin/true): counted exactly through the kernel's process events
// (process_events: auto; needs CAP_NET_ADMIN, root here), so within 5 % too.
// Where the collector logged that process events are unavailable, the
// receiver documents a lower bound (one per parent and interval); the test
// then checks it is a lower bound and reports the ratio.
// Also: no error log line, CPU time monotonic, the collector's CPU reported.
// The short-lived phase runs twice: on the machine as it is, and with a busy
// loop pinned (taskset) to each CPU of the test, so that the collector
// competes for every core (issue 14.8: events were lost exactly when hosts
// are loaded); the loops are this test's own processes, ended by pid.
// WORKERWATCH_CHURN_SECONDS sets each phase's length (default 15; 60 for
// the full run); WORKERWATCH_CHURN_PROCESS_EVENTS=off measures sampling alone.
//
//	make build && go test -tags e2e -count=1 -v -run TestReliabilityProcessChurn ./e2e/
func TestReliabilityProcessChurn(t *testing.T) {
	// Not parallel: the proc connector loses events on a loaded machine (issue
	// 14.8), so it runs first, alone (docs/e2e.md, "Time").
	bin := collectorBinary(t)
	self, err := os.Executable()
	if err != nil {
		t.Fatal(err)
	}
	secs := 15
	if v, err := strconv.Atoi(os.Getenv("WORKERWATCH_CHURN_SECONDS")); err == nil && v > 0 {
		secs = v
	}
	const rate = 200
	tmp := t.TempDir()
	promAddr := freeport.Addr(t)
	telemetryPort := freeport.Port(t)
	args := []string{"--config", filepath.Join(repoRoot, "e2e", "testdata", "reliability-churn.yaml")}
	// WORKERWATCH_CHURN_PROCESS_EVENTS=off measures sampling alone (the
	// receiver's lower bound) where process events would be available.
	mode := os.Getenv("WORKERWATCH_CHURN_PROCESS_EVENTS")
	if mode != "" {
		args = append(args, "--set=receivers::worker_process::process_events="+mode)
	}
	col := start(t, "rel-churn-collector", []string{"REL_PROM_EXPORTER=" + promAddr, fmt.Sprintf("REL_CHURN_TELEMETRY_PORT=%d", telemetryPort)}, bin, args...)
	eventsLost := func() float64 {
		txt, err := httpGet(fmt.Sprintf("http://127.0.0.1:%d/metrics", telemetryPort))
		if err != nil {
			return -1
		}
		v, _ := metricSum(txt, "otelcol_worker_process_events_lost")
		return v
	}
	waitListening(t, col, promAddr)
	metricsURL := "http://" + promAddr + "/metrics"
	// The receiver subscribes at Start and logs once at info when it cannot.
	// The Prometheus exporter listens before the receivers start: read the
	// log once every component has started.
	waitLog(t, col, readyLine, startDeadline)
	logText, _ := os.ReadFile(col.log)
	events := mode != "off" && !strings.Contains(string(logText), "process events unavailable")
	t.Logf("e2e: process events (proc connector) available: %v", events)

	// urgent: the churner runs at nice -10, so that it keeps its rate while
	// busy loops hold every CPU and the collector (nice 0) competes with them.
	phase := func(t *testing.T, id, life string, exact, urgent bool) {
		out := filepath.Join(tmp, id+".count")
		ch := start(t, "rel-churner-"+id, []string{
			"WW_CHURNER=1", fmt.Sprintf("WW_CHURN_RATE=%d", rate),
			fmt.Sprintf("WW_CHURN_DURATION=%ds", secs), "WW_CHURN_LIFE=" + life, "WW_CHURN_OUT=" + out,
		},
			self, "churn-worker", "--id", id)
		if urgent {
			if err := syscall.Setpriority(syscall.PRIO_PROCESS, ch.cmd.Process.Pid, -10); err != nil {
				t.Logf("e2e: cannot raise the churner's priority (%v): it may start fewer children", err)
			}
		}
		wid := fmt.Sprintf(`cicd_worker_id=%q`, id)
		eventually(t, 30*time.Second, 200*time.Millisecond, id+" present", func() error {
			txt, err := httpGet(metricsURL)
			if err != nil {
				return err
			}
			if v, _ := metricSum(txt, "workerwatch_worker_present_ratio", wid); v != 1 {
				return fmt.Errorf("present %v", v)
			}
			return nil
		})
		before, _ := readProcUsage(col.cmd.Process.Pid)
		chBefore, _ := readProcUsage(ch.cmd.Process.Pid)
		lostBefore := eventsLost()
		if err := ch.cmd.Process.Signal(syscall.SIGUSR1); err != nil {
			t.Fatal(err)
		}
		began := time.Now()

		// Every second until the churner is done: CPU time series monotonic.
		lastCPU := map[string]float64{}
		decreases := 0
		checkCPU := func() {
			txt, err := httpGet(metricsURL)
			if err != nil {
				return
			}
			for _, line := range strings.Split(txt, "\n") {
				if !strings.HasPrefix(line, "process_cpu_time_seconds_total{") || !strings.Contains(line, wid) {
					continue
				}
				i := strings.LastIndex(line, "}")
				f := strings.Fields(line[i+1:])
				if len(f) == 0 {
					continue
				}
				v, err := strconv.ParseFloat(f[0], 64)
				if err != nil {
					continue
				}
				key := line[:i+1]
				if prev, ok := lastCPU[key]; ok && v < prev {
					decreases++
					t.Errorf("CPU time went down: %s %v -> %v", key, prev, v)
				}
				lastCPU[key] = v
			}
		}
		var truth, failed int
		eventually(t, time.Duration(secs)*time.Second+60*time.Second, time.Second, id+" churn done", func() error {
			checkCPU()
			b, err := os.ReadFile(out)
			if err != nil {
				return err
			}
			_, err = fmt.Sscan(string(b), &truth, &failed)
			return err
		})
		churned := time.Since(began)
		after, _ := readProcUsage(col.cmd.Process.Pid)
		chAfter, _ := readProcUsage(ch.cmd.Process.Pid)

		// Counters settle within a few scrapes once the last child is reaped:
		// started == exited, unchanged over three reads a second apart (with
		// process events, short-lived children keep started == exited at
		// every scrape, so equality alone does not mean the tail is in).
		var started, exited float64
		same := 0
		eventually(t, 20*time.Second, time.Second, id+" counters settled", func() error {
			checkCPU()
			txt, err := httpGet(metricsURL)
			if err != nil {
				return err
			}
			prev := started
			started, _ = metricSum(txt, "workerwatch_process_started_total", wid)
			exited, _ = metricSum(txt, "workerwatch_process_exited_total", wid)
			if started != exited {
				same = 0
				return fmt.Errorf("started %v exited %v", started, exited)
			}
			if started != prev {
				same = 0
			}
			if same++; same < 3 {
				return fmt.Errorf("started %v: waiting for it to stay the same", started)
			}
			return nil
		})
		cpu := after.cpu - before.cpu
		t.Logf("e2e: RESULT churn %s (life %ss, %d s): children started %d (%.0f/s, %d fork failures); receiver counted started %.0f (%.1f%%), exited %.0f (%.1f%%); "+
			"collector CPU %.2f s = %.1f%% of one core (churner itself %.1f%%); process events lost %.0f; CPU time series %d, decreases %d",
			id, life, secs, truth, float64(truth)/churned.Seconds(), failed, started, 100*started/float64(truth),
			exited, 100*exited/float64(truth), cpu, 100*cpu/churned.Seconds(),
			100*(chAfter.cpu-chBefore.cpu)/churned.Seconds(), eventsLost()-lostBefore, len(lastCPU), decreases)
		// The churn must be real: at least a quarter of the asked rate, in
		// both phases (a load factor of 4: on a 2-core machine kept busy by
		// something else the churner gets a share of a core, issue 19; it was
		// half the rate on the machine as it is). The rate reached is logged
		// in the RESULT line.
		least := rate * secs / 4
		if truth < least {
			t.Errorf("churner started only %d children in %d s (at least %d expected)", truth, secs, least)
		}
		if len(lastCPU) == 0 {
			t.Error("no process_cpu_time_seconds_total series for " + id)
		}
		if exact {
			for name, v := range map[string]float64{"started": started, "exited": exited} {
				if d := (v - float64(truth)) / float64(truth); d > 0.05 || d < -0.05 {
					t.Errorf("%s %.0f not within 5%% of %d", name, v, truth)
				}
			}
		} else if started <= 0 || started > float64(truth)*1.05 {
			t.Errorf("short-lived children: started %.0f is not a lower bound (0 < n <= %d)", started, truth)
		}
		ch.stop(t)
	}

	t.Run("children living longer than the interval are counted within 5%", func(t *testing.T) {
		phase(t, "churn-long", "2.5", true, false)
	})
	if events {
		t.Run("children shorter than the interval are counted within 5% (process events)", func(t *testing.T) {
			phase(t, "churn-short", "0", true, false)
		})
		t.Run("the same with every CPU kept busy (process events under load)", func(t *testing.T) {
			busyLoops(t)
			phase(t, "churn-loaded", "0", true, true)
		})
	} else {
		t.Run("children shorter than the interval: a documented lower bound (no process events)", func(t *testing.T) {
			phase(t, "churn-short", "0", false, false)
		})
	}
	if lines := errorLines(col.log); len(lines) > 0 {
		t.Errorf("collector logged %d error lines, first: %.400s", len(lines), lines[0])
	}
}

// busyLoops starts one busy loop pinned with taskset to each CPU this test
// may run on (the machine's cores, unless restricted), so that everything
// else, the collector included, competes for every core until the test
// ends; they are stopped by pid (process group) when the test ends.
func busyLoops(t *testing.T) {
	t.Helper()
	taskset, err := exec.LookPath("taskset")
	if err != nil {
		t.Fatalf("taskset (util-linux) is needed for the loaded churn test: %v", err)
	}
	var set unix.CPUSet
	if err := unix.SchedGetaffinity(0, &set); err != nil {
		t.Fatal(err)
	}
	n := 0
	for cpu := 0; n < set.Count(); cpu++ {
		if !set.IsSet(cpu) {
			continue
		}
		n++
		start(t, fmt.Sprintf("rel-churn-busy-cpu%d", cpu), nil, taskset, "-c", strconv.Itoa(cpu), "sh", "-c", "while :; do :; done")
	}
	t.Logf("e2e: %d busy loops pinned, one per CPU", n)
}
