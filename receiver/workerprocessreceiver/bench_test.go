//go:build linux && !race

package workerprocessreceiver

// Benchmarks of the cost per scrape against the contrib hostmetrics process
// scraper and against the floor of reading stat + statm of the same processes.
// Built without -race (a benchmark measures the code as shipped, and the
// hostmetrics receiver's dependencies would be compiled again with -race by
// `make unit` for nothing).
//
//	go test -run '^$' -bench 'BenchmarkScrape' -benchtime 30x ./receiver/workerprocessreceiver/
//
// Setup "tree50": about 1,000 idle unrelated processes (sleep) plus one worker
// tree of 50 processes (a root and 49 children, all running the executable
// "wwbench"). Setup "host": the whole host as one worker tree (from pid 1).
// CPU is the benchmark process's own user+system time (getrusage), so the
// receivers' goroutines, GC and pdata building are all included, the same way
// for both receivers. Reported: cpu-us/scrape, procs/scrape, cpu-us/proc.

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/open-telemetry/opentelemetry-collector-contrib/receiver/hostmetricsreceiver"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/receiver"
	"go.opentelemetry.io/collector/receiver/receivertest"

	"github.com/workerwatch/workerwatch/internal/procfs"
)

const (
	benchIdle     = 1000
	benchTree     = 50
	benchExe      = "wwbench"
	benchInterval = 100 * time.Millisecond
)

type benchEnv struct {
	idle    []*exec.Cmd
	root    *exec.Cmd
	rootPid int
	pids    []int32 // the worker tree
	pidFile string
	dir     string
}

var (
	envOnce sync.Once
	env     *benchEnv
)

func init() {
	if os.Getenv("WPR_HELPER") == "benchroot" {
		// The worker root: 49 children running the same executable, then idle.
		self, _ := os.Executable()
		var kids []*exec.Cmd
		for i := 0; i < benchTree-1; i++ {
			c := exec.Command(self, "-test.run=^$", "bench-child")
			c.Env = append(os.Environ(), "WPR_HELPER=benchidle")
			c.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
			if err := c.Start(); err != nil {
				os.Exit(2)
			}
			kids = append(kids, c)
		}
		fmt.Println("ready")
		_, _ = io.Copy(io.Discard, os.Stdin)
		for _, k := range kids {
			_ = k.Process.Kill()
		}
		os.Exit(0)
	}
	if os.Getenv("WPR_HELPER") == "benchidle" {
		time.Sleep(time.Hour)
		os.Exit(0)
	}
}

// setupBenchEnv spawns the idle processes and the worker tree once per test binary run.
func setupBenchEnv(b *testing.B) *benchEnv {
	envOnce.Do(func() {
		e := &benchEnv{dir: b.TempDir()}
		for i := 0; i < benchIdle; i++ {
			c := exec.Command("sleep", "3600")
			c.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
			require.NoError(b, c.Start())
			e.idle = append(e.idle, c)
		}
		// A copy of the test binary under a short name, so that comm is the
		// same for the whole tree and the hostmetrics filter can match it.
		exe := filepath.Join(e.dir, benchExe)
		self, err := os.ReadFile(os.Args[0])
		require.NoError(b, err)
		require.NoError(b, os.WriteFile(exe, self, 0o755))
		e.root = exec.Command(exe, "-test.run=^$", "bench-root")
		e.root.Env = append(os.Environ(), "WPR_HELPER=benchroot")
		e.root.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
		stdin, err := e.root.StdinPipe()
		require.NoError(b, err)
		_ = stdin
		out, err := e.root.StdoutPipe()
		require.NoError(b, err)
		require.NoError(b, e.root.Start())
		buf := make([]byte, 6)
		_, err = io.ReadFull(out, buf)
		require.NoError(b, err)
		e.rootPid = e.root.Process.Pid
		e.pidFile = filepath.Join(e.dir, "worker.pid")
		require.NoError(b, os.WriteFile(e.pidFile, []byte(strconv.Itoa(e.rootPid)), 0o644))
		r := procfs.NewReader("/proc")
		e.pids = append(e.pids, int32(e.rootPid))
		e.pids, _ = r.Children(int32(e.rootPid), int32(e.rootPid), e.pids)
		require.Len(b, e.pids, benchTree)
		env = e
	})
	return env
}

// TestMain is generated; the bench processes are killed when the test binary
// exits through Pdeathsig (they die with their parent thread's process).

func cpuNow() time.Duration {
	var ru syscall.Rusage
	_ = syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func reportCPU(b *testing.B, cpu time.Duration, scrapes int, procs float64) {
	if procs == 0 {
		b.Fatal("the scrape read no process: the worker was not found, so this would measure nothing")
	}
	per := float64(cpu.Microseconds()) / float64(scrapes)
	b.ReportMetric(per, "cpu-us/scrape")
	b.ReportMetric(procs, "procs/scrape")
	if procs > 0 {
		b.ReportMetric(per/procs, "cpu-us/proc")
	}
}

func benchWorkerConfig(e *benchEnv, wholeHost bool) *Config {
	cfg := createDefaultConfig().(*Config)
	cfg.CollectionInterval = benchInterval
	cfg.InitialDelay = 0
	// WORKERWATCH_BENCH_PROCESS_EVENTS=off|auto measures with or without the
	// proc connector (default auto: what a user gets).
	if os.Getenv("WORKERWATCH_BENCH_PROCESS_EVENTS") != "" {
		cfg.ProcessEvents = os.Getenv("WORKERWATCH_BENCH_PROCESS_EVENTS")
	}
	// WORKERWATCH_BENCH_MAX_OPEN_FILES=0 measures reading every file by
	// path (no held files).
	if v := os.Getenv("WORKERWATCH_BENCH_MAX_OPEN_FILES"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil {
			panic("WORKERWATCH_BENCH_MAX_OPEN_FILES: " + err.Error())
		}
		cfg.MaxOpenFiles = n
	}
	if wholeHost {
		pf := filepath.Join(e.dir, "init.pid")
		_ = os.WriteFile(pf, []byte("1"), 0o644)
		cfg.Workers = []WorkerConfig{{ID: "host", Selector: SelectorConfig{PIDFile: pf}}}
	} else {
		cfg.Workers = []WorkerConfig{{ID: "bench", Selector: SelectorConfig{Executable: benchExe}}}
	}
	return cfg
}

// runReceiver starts a receiver, lets it scrape b.N times and reports the
// process CPU per delivered scrape. The consumer signals each delivery on a
// channel: polling a sink would itself burn CPU in the measured process (a
// 1 ms poll costs a few ms per 100 ms interval, which would be charged to
// the receivers).
func runReceiver(b *testing.B, f receiver.Factory, cfg any, countProcs func(pmetric.Metrics) float64) {
	delivered := make(chan pmetric.Metrics, 1024)
	next, err := consumer.NewMetrics(func(_ context.Context, md pmetric.Metrics) error {
		delivered <- md
		return nil
	})
	require.NoError(b, err)
	set := receivertest.NewNopSettings(f.Type())
	rcv, err := f.CreateMetrics(context.Background(), set, cfg, next)
	require.NoError(b, err)
	require.NoError(b, rcv.Start(context.Background(), componenttest.NewNopHost()))
	defer func() { require.NoError(b, rcv.Shutdown(context.Background())) }()
	wait := func() pmetric.Metrics {
		select {
		case md := <-delivered:
			return md
		case <-time.After(time.Minute):
			b.Fatal("no scrape delivered within a minute")
			return pmetric.Metrics{}
		}
	}
	// Warm up: the first scrapes discover, fill caches and grow buffers.
	for i := 0; i < 3; i++ {
		wait()
	}
	b.ResetTimer()
	c0 := cpuNow()
	var last pmetric.Metrics
	for i := 0; i < b.N; i++ {
		last = wait()
	}
	cpu := cpuNow() - c0
	b.StopTimer()
	reportCPU(b, cpu, b.N, countProcs(last))
}

func countWorkerProcs(md pmetric.Metrics) float64 {
	return sumValues(md, "bench", "workerwatch.process.count", nil) + sumValues(md, "host", "workerwatch.process.count", nil)
}

func countHostmetricsProcs(md pmetric.Metrics) float64 {
	return float64(md.ResourceMetrics().Len())
}

func hostmetricsConfig(b *testing.B, names []string) any {
	f := hostmetricsreceiver.NewFactory()
	cfg := f.CreateDefaultConfig()
	proc := map[string]any{"mute_process_all_errors": true}
	if names != nil {
		proc["include"] = map[string]any{"names": names, "match_type": "strict"}
	}
	cm := confmap.NewFromStringMap(map[string]any{
		"collection_interval": benchInterval.String(),
		"initial_delay":       "0s",
		"scrapers":            map[string]any{"process": proc},
	})
	require.NoError(b, cm.Unmarshal(cfg))
	return cfg
}

func benchFloor(b *testing.B, pids []int32) {
	r := procfs.NewReader("/proc")
	// The paths are built before the clock starts: the floor is the opens
	// and reads.
	paths := make([]string, 0, 2*len(pids))
	for _, p := range pids {
		paths = append(paths, "/proc/"+strconv.Itoa(int(p))+"/stat", "/proc/"+strconv.Itoa(int(p))+"/statm")
	}
	b.ReportAllocs()
	b.ResetTimer()
	c0 := cpuNow()
	for i := 0; i < b.N; i++ {
		for _, p := range paths {
			_, _ = r.ReadFile(p)
		}
	}
	reportCPU(b, cpuNow()-c0, b.N, float64(len(pids)))
}

func benchDirect(b *testing.B, cfg *Config) {
	s := newTestScraper(b, cfg)
	ctx := context.Background()
	for i := 0; i < 3; i++ { // warm up: discovery, buffers, member maps
		_, err := s.scrape(ctx)
		require.NoError(b, err)
	}
	b.ReportAllocs()
	b.ResetTimer()
	c0 := cpuNow()
	var procs int64
	for i := 0; i < b.N; i++ {
		if _, err := s.scrape(ctx); err != nil {
			b.Fatal(err)
		}
		procs = s.read
	}
	reportCPU(b, cpuNow()-c0, b.N, float64(procs))
}

// hostPids lists the host's processes other than kernel threads.
func hostPids(b testing.TB) []int32 {
	r := procfs.NewReader("/proc")
	all, err := r.Pids(nil)
	require.NoError(b, err)
	var pids []int32
	var st procfs.Stat
	for _, p := range all {
		if r.ReadStat(p, &st) == nil && !st.KernelThread() {
			pids = append(pids, p)
		}
	}
	return pids
}

func BenchmarkScrape(b *testing.B) {
	e := setupBenchEnv(b)
	b.Run("tree50/workerprocess-direct", func(b *testing.B) { benchDirect(b, benchWorkerConfig(e, false)) })
	b.Run("tree50/workerprocess-receiver", func(b *testing.B) {
		runReceiver(b, NewFactory(), benchWorkerConfig(e, false), countWorkerProcs)
	})
	b.Run("tree50/hostmetrics-process", func(b *testing.B) {
		runReceiver(b, hostmetricsreceiver.NewFactory(), hostmetricsConfig(b, []string{benchExe}), countHostmetricsProcs)
	})
	b.Run("tree50/floor-stat-statm", func(b *testing.B) { benchFloor(b, e.pids) })

	b.Run("host/workerprocess-direct", func(b *testing.B) { benchDirect(b, benchWorkerConfig(e, true)) })
	b.Run("host/workerprocess-receiver", func(b *testing.B) {
		runReceiver(b, NewFactory(), benchWorkerConfig(e, true), countWorkerProcs)
	})
	b.Run("host/hostmetrics-process", func(b *testing.B) {
		runReceiver(b, hostmetricsreceiver.NewFactory(), hostmetricsConfig(b, nil), countHostmetricsProcs)
	})
	b.Run("host/floor-stat-statm", func(b *testing.B) { benchFloor(b, hostPids(b)) })
}
