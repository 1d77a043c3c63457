//go:build !race

// Built without -race: these tests drive the Prometheus exporter (Prometheus's
// own packages among its dependencies), whose dependency graph `make unit`
// would otherwise compile a second time, with -race, for no race in this
// module's code. `make unit` runs them in its pass without -race (Makefile,
// "unit").

package workerhealthextension

import (
	"bufio"
	"context"
	"debug/elf"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/metrics"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/golang/snappy"
	"github.com/open-telemetry/opentelemetry-collector-contrib/exporter/prometheusexporter"
	"github.com/open-telemetry/opentelemetry-collector-contrib/exporter/prometheusremotewriteexporter"
	"github.com/prometheus/prometheus/prompb"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/confmap"
	"go.opentelemetry.io/collector/confmap/confmaptest"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/exporter/exportertest"
	"go.opentelemetry.io/collector/extension/extensiontest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/processor"
	"go.opentelemetry.io/collector/processor/processortest"

	"github.com/workerwatch/workerwatch/extension/filestorage"
	"github.com/workerwatch/workerwatch/extension/workerhealthextension/internal/history"
	"github.com/workerwatch/workerwatch/internal/contract"
	"github.com/workerwatch/workerwatch/internal/fleetload"
	"github.com/workerwatch/workerwatch/internal/freeport"
	"github.com/workerwatch/workerwatch/processor/workerhealthprocessor"
)

// The density measurement (issue 24, docs/scaling.md "Memory per worker"):
// what one gateway shard holds per worker, split by component, fed what an
// agent forwards for every worker every 10 s: its tree sample (the worker
// on the resource, workerwatch.worker.present = 1, the main role's memory
// and CPU, the CPU limit), a heartbeat, and a run claimed and started (the
// scheduler's claim too; the previous round's run finishes on both sides).
// The components are the distribution's own, configured from the shipped
// deploy/collector/gateway-static.yaml as a single gateway (the processor
// and exporter sections as shipped, checkpoint on), in process, with the
// evaluation every second instead of 10 s so that a run takes seconds.
//
// Each configuration runs in its own child process (this test binary run
// again), so its live heap and RSS start from the same base:
//
//	tracker      the processor (its state, the checkpoint), snapshots dropped
//	view         + the extension, history off (history::window: 0)
//	history      + the shipped history (30 min at 10 s), every ring full
//	exporter     + the Prometheus exporter of
//	               deploy/collector/prometheus-exporter.overlay.yaml
//	               (pass-through tree metrics and the processor's series),
//	               history on
//	exporter-nh  the same with history off
//	sparse       exporter-nh as a worker steady for 5 minutes is exported:
//	             the state set's current state only, no drift gauge at 0
//	rw           history on, sparse, with the remote-write exporter of
//	             deploy/collector/gateway-static.yaml (as shipped) in place
//	             of the Prometheus exporter, sending to a receiver in the parent
//	rw-nh        the same with history off
//
// WORKERWATCH_DENSITY_CONFIGS=exporter-nh,sparse runs only those;
// WORKERWATCH_DENSITY_RUNS=40 has each worker hold 40 runs instead of the
// shipped share at 100,000 workers (four; within the limits' caps);
// WORKERWATCH_DENSITY_MEMPROFILERATE=0 runs each child with the heap
// profiler off (runtime.MemProfileRate);
// WORKERWATCH_DENSITY_HEAPPROFILE=DIR has each child write the Go heap's
// profile, taken when its live heap is read, to DIR/CONFIG-N.heap (`go tool
// pprof -sample_index=inuse_space -top`: what holds the memory).
//
//	WORKERWATCH_DENSITY=10000,100000 WORKERWATCH_DENSITY_CONFIGS=tracker,view,history,rw,rw-nh \
//	    go test -count=1 -timeout 40m -run '^TestDensity$' -v ./extension/workerhealthextension/
//
// (the exporter configurations need about 17 GiB at 100,000 workers). Given
// two sizes or more, it also splits each configuration's RSS into a fixed
// part and a cost per worker (marginalTable).
//
// Without WORKERWATCH_DENSITY it runs every configuration at 200 workers
// and checks only that each holds every worker (no figure is gated).
func TestDensity(t *testing.T) {
	if child := os.Getenv("WORKERWATCH_DENSITY_CHILD"); child != "" {
		densityChild(t, child)
		return
	}
	sizes := []int{200}
	spec := os.Getenv("WORKERWATCH_DENSITY")
	measuring := spec != ""
	if measuring {
		sizes = nil
		for f := range strings.SplitSeq(spec, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(f))
			require.NoError(t, err, "WORKERWATCH_DENSITY: a comma-separated list of worker counts")
			sizes = append(sizes, n)
		}
	}
	configs := densityConfigs
	if only := os.Getenv("WORKERWATCH_DENSITY_CONFIGS"); only != "" {
		configs = strings.Split(only, ",")
	}
	bySize := map[int]map[string]densityResult{}
	for _, n := range sizes {
		got := make([]densityResult, len(configs))
		// Each child is its own process and reports its own heap and RSS, so
		// at the smoke size (no figure wanted) they run side by side; when
		// measuring, one at a time, so that no child's RSS is read while
		// another takes the machine's memory and CPU.
		t.Run(strconv.Itoa(n), func(t *testing.T) {
			for i, c := range configs {
				t.Run(c, func(t *testing.T) {
					if !measuring {
						t.Parallel()
					}
					got[i] = runDensityChild(t, c, n)
					require.Equal(t, n, got[i].Workers, "%s at %d workers: every worker tracked and served", c, n)
				})
			}
		})
		if t.Failed() {
			return
		}
		res := map[string]densityResult{}
		for i, c := range configs {
			res[c] = got[i]
		}
		bySize[n] = res
		if _, ok := res["tracker"]; ok {
			t.Logf("RESULT density at %d workers:\n%s", n, densityTable(n, res))
		}
		if a, b, c := res["sparse"], res["rw-nh"], res["rw"]; a.Workers > 0 && b.Workers > 0 && c.Workers > 0 {
			t.Logf("RESULT remote write at %d workers: live heap %.2f -> %.2f KiB per worker history off (%.2fx), %.2f history on; RSS %.2f -> %.2f KiB off, %.2f on",
				n, a.HeapBytes/float64(n)/1024, b.HeapBytes/float64(n)/1024, a.HeapBytes/b.HeapBytes, c.HeapBytes/float64(n)/1024,
				a.RSSBytes/float64(n)/1024, b.RSSBytes/float64(n)/1024, c.RSSBytes/float64(n)/1024)
		}
		if a, b := res["exporter-nh"], res["sparse"]; a.Workers > 0 && b.Workers > 0 {
			t.Logf("RESULT export shape at %d workers, history off: live heap %.2f -> %.2f KiB per worker (%.2fx), page %.1f -> %.1f MB, %.1f -> %.1f series per worker",
				n, a.HeapBytes/float64(n)/1024, b.HeapBytes/float64(n)/1024, a.HeapBytes/b.HeapBytes,
				float64(a.PageBytes)/1e6, float64(b.PageBytes)/1e6, float64(a.PageSeries)/float64(n), float64(b.PageSeries)/float64(n))
		}
	}
	if measuring && len(sizes) > 1 {
		t.Logf("RESULT fixed and per-worker cost, from %d and %d workers:\n%s", slices.Min(sizes), slices.Max(sizes),
			marginalTable(configs, slices.Min(sizes), slices.Max(sizes), bySize))
	}
}

// marginalTable splits each configuration's RSS into what the process
// holds whatever the fleet and what each worker adds, from the smallest
// and the largest size: a worker costs (RSS(b) - RSS(a)) / (b - a), and the
// rest of RSS(a) is fixed. At 10,000 workers the fixed part is a large
// share of the RSS per worker; the slope is what sizing multiplies.
func marginalTable(configs []string, a, b int, bySize map[int]map[string]densityResult) string {
	var out strings.Builder
	fmt.Fprintf(&out, "  %-12s %14s %18s\n", "config", "fixed MiB", "KiB per worker")
	for _, c := range configs {
		ra, rb := bySize[a][c], bySize[b][c]
		if ra.Workers == 0 || rb.Workers == 0 {
			continue
		}
		per := (rb.RSSBytes - ra.RSSBytes) / float64(b-a)
		fmt.Fprintf(&out, "  %-12s %14.1f %18.2f\n", c, (ra.RSSBytes-per*float64(a))/(1<<20), per/1024)
	}
	return out.String()
}

var densityConfigs = []string{"tracker", "view", "history", "exporter", "exporter-nh", "sparse", "rw", "rw-nh"}

// densityResult is what a child reports: live heap after GC and RSS above
// the child's own base, and what the exporter's page holds.
type densityResult struct {
	Config  string `json:"config"`
	Workers int    `json:"workers"`
	// RecentRuns is how many ended runs a worker's served entry lists
	// when the memory is read, on average (the feeding checks that each
	// worker holds its share).
	RecentRuns float64 `json:"recent_runs"`
	// Runs is how many runs each worker holds in the tracker: the feeding's
	// rounds, at most its share.
	Runs       int     `json:"runs"`
	HeapBytes  float64 `json:"heap_bytes"`
	RSSBytes   float64 `json:"rss_bytes"`
	AnonBytes  float64 `json:"anon_bytes"` // of RSSBytes, anonymous memory (the rest: file pages, the checkpoint's mapped file among them)
	PeakBytes  float64 `json:"peak_bytes"`
	PageBytes  int     `json:"page_bytes"`
	PageSeries int     `json:"page_series"`
	Seconds    float64 `json:"seconds"`
	// CheckpointBytes: the size of the checkpoint's file (file_storage's
	// directory) when the memory is read.
	CheckpointBytes int64 `json:"checkpoint_bytes"`
	// CheckpointMapped: of RSSBytes, the checkpoint file's pages mapped
	// into the process (file_storage maps its bbolt file), from
	// /proc/self/smaps; the rest of the file pages are the binary's own.
	CheckpointMapped int64 `json:"checkpoint_mapped_bytes"`
	// Binary: of RSSBytes, the pages of the (test) binary's own file above
	// the child's base, by its mappings' permissions: "r-xp" its code,
	// "r--p" its read-only data and the tables the runtime reads to walk
	// stacks (the GC's scans, the heap profile's samples), "rw-p" its data.
	// What a process holds whatever its fleet, for the code it runs.
	Binary map[string]int64 `json:"binary_bytes"`
	// BinarySections: the same pages by the ELF section they hold
	// (binarySections): which of the read-only ones are data and which
	// the runtime's tables (.gopclntab: the function table, the stack maps
	// and the pc tables it reads to walk and scan stacks).
	BinarySections map[string]int64 `json:"binary_sections"`
	// Runtime: the Go runtime's memory classes (runtime/metrics) at the
	// reading of the RSS, by name less "/memory/classes/" and ":bytes", above the
	// child's base: what of the anonymous RSS is not live objects (free
	// slots in spans that hold live ones, stacks, the runtime's metadata).
	Runtime map[string]float64 `json:"runtime"`
}

func runDensityChild(t *testing.T, config string, n int) densityResult {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run", "^TestDensity$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), fmt.Sprintf("WORKERWATCH_DENSITY_CHILD=%s:%d", config, n))
	if strings.HasPrefix(config, "rw") {
		// The remote-write receiver runs here, in the parent, as Prometheus
		// runs beside a gateway: in the child its code, its connections'
		// buffers and the garbage of decoding every request were counted in
		// the collector's RSS (about 2 MiB at 10,000 workers).
		cmd.Env = append(cmd.Env, "WORKERWATCH_DENSITY_RW="+newRemoteWriteSink(t, n).srv.URL)
	}
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "density child %s:%d:\n%s", config, n, out)
	sc := bufio.NewScanner(strings.NewReader(string(out)))
	for sc.Scan() {
		if _, js, ok := strings.Cut(sc.Text(), "DENSITY "); ok {
			var r densityResult
			require.NoError(t, json.Unmarshal([]byte(js), &r))
			t.Logf("density child %s:%d: %s", config, n, js)
			return r
		}
	}
	t.Fatalf("density child %s:%d printed no result:\n%s", config, n, out)
	return densityResult{}
}

// densityTable is the per-worker split: each component is the difference
// between two configurations; a row whose configurations did not run
// (WORKERWATCH_DENSITY_CONFIGS) is left out.
func densityTable(n int, r map[string]densityResult) string {
	per := func(v float64) string { return fmt.Sprintf("%8.2f", v/float64(n)/1024) }
	var b strings.Builder
	fmt.Fprintf(&b, "  %-34s %12s %12s %12s\n", "KiB per worker", "live heap", "RSS", "anon. RSS")
	ran := func(names ...string) bool {
		for _, c := range names {
			if _, ok := r[c]; !ok {
				return false
			}
		}
		return true
	}
	row := func(name, a, c string) {
		if c == "" && ran(a) {
			x := r[a]
			fmt.Fprintf(&b, "  %-34s %12s %12s %12s\n", name, per(x.HeapBytes), per(x.RSSBytes), per(x.AnonBytes))
		} else if c != "" && ran(a, c) {
			fmt.Fprintf(&b, "  %-34s %12s %12s %12s\n", name, per(r[a].HeapBytes-r[c].HeapBytes),
				per(r[a].RSSBytes-r[c].RSSBytes), per(r[a].AnonBytes-r[c].AnonBytes))
		}
	}
	row("tracker (processor, checkpoint)", "tracker", "")
	row("extension view", "view", "tracker")
	row("history (30 min at 10 s, full)", "history", "view")
	row("pass-through + exporter series", "exporter", "history")
	row("total, history on", "exporter", "")
	row("total, history off", "exporter-nh", "")
	row("pass-through + remote write", "rw", "history")
	row("total, remote write, history on", "rw", "")
	row("total, remote write, history off", "rw-nh", "")
	if ran("exporter", "exporter-nh") {
		fmt.Fprintf(&b, "  peak RSS above base, history on: %.1f MiB (%.2f KiB per worker); off: %.1f MiB\n",
			r["exporter"].PeakBytes/(1<<20), r["exporter"].PeakBytes/float64(n)/1024, r["exporter-nh"].PeakBytes/(1<<20))
		ex := r["exporter"]
		fmt.Fprintf(&b, "  exporter page: %.1f MB, %d series (%.1f per worker)\n",
			float64(ex.PageBytes)/1e6, ex.PageSeries, float64(ex.PageSeries)/float64(n))
	}
	if ran("rw", "rw-nh") {
		fmt.Fprintf(&b, "  peak RSS above base, remote write, history on: %.1f MiB; off: %.1f MiB\n",
			r["rw"].PeakBytes/(1<<20), r["rw-nh"].PeakBytes/(1<<20))
	}
	tr := r["tracker"]
	fmt.Fprintf(&b, "  checkpoint file (tracker): %.1f MiB (%.2f KiB per worker), of its pages in the RSS %.1f MiB (%.2f KiB per worker)\n",
		float64(tr.CheckpointBytes)/(1<<20), float64(tr.CheckpointBytes)/float64(n)/1024,
		float64(tr.CheckpointMapped)/(1<<20), float64(tr.CheckpointMapped)/float64(n)/1024)
	if x, ok := r["rw-nh"]; ok {
		fmt.Fprintf(&b, "  the binary's pages in the RSS (rw-nh): code %.1f MiB, read-only data and tables %.1f MiB, data %.1f MiB\n",
			float64(x.Binary["r-xp"])/(1<<20), float64(x.Binary["r--p"])/(1<<20), float64(x.Binary["rw-p"])/(1<<20))
		fmt.Fprintf(&b, "    by section: .text %.1f MiB, .rodata %.1f MiB, .gopclntab %.1f MiB, the others %.1f MiB\n",
			float64(x.BinarySections[".text"])/(1<<20), float64(x.BinarySections[".rodata"])/(1<<20), float64(x.BinarySections[".gopclntab"])/(1<<20),
			float64(sumExcept(x.BinarySections, ".text", ".rodata", ".gopclntab"))/(1<<20))
	}
	fmt.Fprintf(&b, "  runs a worker holds (tracker): %d (one held, the others ended), of them listed as recent: %.1f\n", tr.Runs, tr.RecentRuns)
	return b.String()
}

// sparseStates is what the processor exports for a worker steady for
// longer than its stateZerosFor (5 minutes, longer than this run): the state
// set's 0 points and the drift gauges' (a worker without drift for that
// long has none) dropped on the way to the exporter, the current state's 1
// kept (processor/workerhealthprocessor/emit.go).
type sparseStates struct{ next consumer.Metrics }

func (s sparseStates) Capabilities() consumer.Capabilities {
	return consumer.Capabilities{MutatesData: true}
}

func (s sparseStates) ConsumeMetrics(ctx context.Context, md pmetric.Metrics) error {
	rms := md.ResourceMetrics()
	for i := 0; i < rms.Len(); i++ {
		sms := rms.At(i).ScopeMetrics()
		for j := 0; j < sms.Len(); j++ {
			ms := sms.At(j).Metrics()
			for k := 0; k < ms.Len(); k++ {
				m := ms.At(k)
				if m.Name() != contract.MetricState && m.Name() != contract.MetricDrift {
					continue
				}
				m.Gauge().DataPoints().RemoveIf(func(dp pmetric.NumberDataPoint) bool { return dp.IntValue() == 0 })
			}
			ms.RemoveIf(func(m pmetric.Metric) bool {
				return m.Type() == pmetric.MetricTypeGauge && m.Gauge().DataPoints().Len() == 0
			})
		}
	}
	return s.next.ConsumeMetrics(ctx, md)
}

// densitySub stands between the processor and the extension: it keeps the
// last snapshot (to know an evaluation happened, and to fill the history
// with it) and forwards it, or drops it when there is no extension
// (configuration "tracker"). Before the heap is read it lets go of it
// (release): a snapshot is the extension's to hold, as in the collector,
// not the test's (holding one here counted about 1.5 KiB a worker that no
// component holds, in the tracker's figure).
type densitySub struct {
	component.StartFunc
	component.ShutdownFunc
	next     *workerHealth
	mu       sync.Mutex
	last     *contract.Snapshot
	released bool
}

func (s *densitySub) Publish(snap *contract.Snapshot) {
	s.mu.Lock()
	if !s.released {
		s.last = snap
	}
	s.mu.Unlock()
	if s.next != nil {
		s.next.Publish(snap)
	}
}

func (s *densitySub) latest() *contract.Snapshot {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.last
}

// release stops keeping snapshots.
func (s *densitySub) release() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.last, s.released = nil, true
}

type densityHost struct {
	exts map[component.ID]component.Component
}

func (h densityHost) GetExtensions() map[component.ID]component.Component { return h.exts }

// gatewaySection is one component's section of the shipped
// gateway-static.yaml.
func gatewaySection(t *testing.T, kind, name string) *confmap.Conf {
	t.Helper()
	return deploySection(t, "gateway-static.yaml", kind, name)
}

// deploySection is one component's section of a file of deploy/collector.
func deploySection(t *testing.T, file, kind, name string) *confmap.Conf {
	t.Helper()
	conf, err := confmaptest.LoadConf(filepath.Join("..", "..", "deploy", "collector", file))
	require.NoError(t, err)
	key := kind + "::" + name
	require.True(t, conf.IsSet(key), "%s has no %s", file, key)
	sec, err := conf.Sub(key)
	require.NoError(t, err)
	return sec
}

func vmStatus(key string) float64 {
	raw, _ := os.ReadFile("/proc/self/status")
	for l := range strings.SplitSeq(string(raw), "\n") {
		if v, ok := strings.CutPrefix(l, key+":"); ok {
			kb, _ := strconv.ParseFloat(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 64)
			return kb * 1024
		}
	}
	return 0
}

// memoryClasses are the runtime's /memory/classes/ metrics that hold
// resident memory (those released to the OS left out), keyed by the part
// of the name between "/memory/classes/" and ":bytes".
func memoryClasses() map[string]float64 {
	var samples []metrics.Sample
	for _, d := range metrics.All() {
		name, ok := strings.CutPrefix(d.Name, "/memory/classes/")
		if !ok || name == "total:bytes" || strings.Contains(name, "released") {
			continue
		}
		samples = append(samples, metrics.Sample{Name: d.Name})
	}
	metrics.Read(samples)
	out := make(map[string]float64, len(samples))
	for _, s := range samples {
		if s.Value.Kind() == metrics.KindUint64 {
			out[strings.TrimSuffix(strings.TrimPrefix(s.Name, "/memory/classes/"), ":bytes")] = float64(s.Value.Uint64())
		}
	}
	return out
}

func liveHeap() float64 {
	var m runtime.MemStats
	runtime.GC()
	runtime.GC()
	runtime.ReadMemStats(&m)
	return float64(m.HeapAlloc)
}

func densityChild(t *testing.T, spec string) {
	config, ns, _ := strings.Cut(spec, ":")
	n, err := strconv.Atoi(ns)
	require.NoError(t, err)
	ctx := context.Background()
	if v := os.Getenv("WORKERWATCH_DENSITY_MEMPROFILERATE"); v != "" {
		// Another heap profiler rate (0: off), to see what its samples'
		// stack walks add to the binary's pages in the RSS.
		rate, err := strconv.Atoi(v)
		require.NoError(t, err, "WORKERWATCH_DENSITY_MEMPROFILERATE")
		runtime.MemProfileRate = rate
	}
	began := time.Now()
	debug.FreeOSMemory()
	baseHeap, baseRSS, baseAnon := liveHeap(), vmStatus("VmRSS"), vmStatus("RssAnon")
	baseClasses := memoryClasses()
	baseBinary := binaryRSS(t, smapsRSS(t))
	baseSections := binarySections(t)

	withExt := config != "tracker"
	withExporter := strings.HasPrefix(config, "exporter") || config == "sparse"
	remoteWrite := strings.HasPrefix(config, "rw")
	fullHistory := config == "history" || config == "exporter" || config == "rw"

	exts := map[component.ID]component.Component{}
	sub := &densitySub{}
	subID := component.MustNewID("worker_health")
	exts[subID] = sub
	if withExt {
		sub.next = newTestExt(t, func(c *Config) {
			if !fullHistory {
				c.History.Window = 0 // off
			}
		})
		require.NoError(t, sub.next.Start(ctx, densityHost{exts: exts}))
		defer func() { require.NoError(t, sub.next.Shutdown(ctx)) }()
	}
	fsf := filestorage.NewFactory()
	fsCfg := fsf.CreateDefaultConfig()
	fsConf := gatewaySection(t, "extensions", "file_storage")
	stateDir := t.TempDir()
	require.NoError(t, fsConf.Merge(confmap.NewFromStringMap(map[string]any{"directory": stateDir})))
	require.NoError(t, fsConf.Unmarshal(fsCfg))
	fsID := component.MustNewID("file_storage")
	fs, err := fsf.Create(ctx, extensiontest.NewNopSettings(fsf.Type()), fsCfg)
	require.NoError(t, err)
	require.NoError(t, fs.Start(ctx, densityHost{exts: exts}))
	defer func() { require.NoError(t, fs.Shutdown(ctx)) }()
	exts[fsID] = fs
	host := densityHost{exts: exts}

	var metricsNext consumer.Metrics = consumertest.NewNop()
	promAddr := ""
	if withExporter {
		ef := prometheusexporter.NewFactory()
		eCfg := ef.CreateDefaultConfig()
		promAddr = freeport.Addr(t)
		eConf := deploySection(t, "prometheus-exporter.overlay.yaml", "exporters", "prometheus")
		require.NoError(t, eConf.Merge(confmap.NewFromStringMap(map[string]any{"endpoint": promAddr})))
		require.NoError(t, eConf.Unmarshal(eCfg))
		exp, err := ef.CreateMetrics(ctx, exportertest.NewNopSettings(ef.Type()), eCfg)
		require.NoError(t, err)
		require.NoError(t, exp.Start(ctx, host))
		defer func() { require.NoError(t, exp.Shutdown(ctx)) }()
		metricsNext = exp
		if config == "sparse" {
			metricsNext = sparseStates{next: exp}
		}
	}
	rw := os.Getenv("WORKERWATCH_DENSITY_RW") // the parent's remoteWriteSink
	if remoteWrite {
		require.NotEmpty(t, rw, "config %s: the parent runs the remote-write receiver", config)
		t.Cleanup(func() { remoteWriteLeft(t, rw+"?done") }) // after the exporter's shutdown
		ef := prometheusremotewriteexporter.NewFactory()
		eCfg := ef.CreateDefaultConfig()
		eConf := gatewaySection(t, "exporters", "prometheus_remote_write")
		require.NoError(t, eConf.Merge(confmap.NewFromStringMap(map[string]any{"endpoint": rw})))
		require.NoError(t, eConf.Unmarshal(eCfg))
		exp, err := ef.CreateMetrics(ctx, exportertest.NewNopSettings(ef.Type()), eCfg)
		require.NoError(t, err)
		require.NoError(t, exp.Start(ctx, host))
		defer func() { require.NoError(t, exp.Shutdown(ctx)) }()
		metricsNext = sparseStates{next: exp}
	}

	pf := workerhealthprocessor.NewFactory()
	pCfg := pf.CreateDefaultConfig().(*workerhealthprocessor.Config)
	require.NoError(t, gatewaySection(t, "processors", "worker_health").Unmarshal(pCfg))
	pCfg.EmitInterval = time.Second // the evaluation every second: the run takes seconds
	// The runs a worker of a full shard holds (its share of max_runs at
	// the shipped max_workers): what every worker holds here (below).
	fullShare := max(1, pCfg.Limits.MaxRuns/pCfg.Limits.MaxWorkers)
	pCfg.Limits.MaxWorkers = max(pCfg.Limits.MaxWorkers, n)
	require.NoError(t, pCfg.Validate())
	pSet := processortest.NewNopSettings(pf.Type())
	mp, err := pf.CreateMetrics(ctx, pSet, pCfg, metricsNext)
	require.NoError(t, err)
	lp, err := pf.CreateLogs(ctx, pSet, pCfg, consumertest.NewNop())
	require.NoError(t, err)
	for _, c := range []component.Component{mp, lp} {
		require.NoError(t, c.Start(ctx, host))
	}
	defer func() {
		for _, c := range []component.Component{mp, lp} {
			require.NoError(t, c.Shutdown(ctx))
		}
	}()

	// As many rounds as it takes for every worker to hold what minutes of
	// a run every 10 s leave it on a full shard: its share of the runs (the
	// held one and the ended ones remembered for drift) at the shipped
	// max_workers (fullShare: four), whatever the size measured, the smoke
	// run too. A smaller fleet's workers may keep more (the share is
	// max_runs / workers tracked, docs/processor.md), at most max_runs runs
	// in all: that is a fixed budget of the shard's (docs/scaling.md,
	// "Memory per worker"), not what a worker costs. Three rounds (two
	// ended runs at 10,000, one held at 100,000) were what the figures
	// before 2026-12-05 measured (results/density.md, "steady state").
	runs := fullShare
	if v := os.Getenv("WORKERWATCH_DENSITY_RUNS"); v != "" {
		// Another count of runs a worker (what a run costs: two counts).
		var err error
		runs, err = strconv.Atoi(v)
		require.NoError(t, err, "WORKERWATCH_DENSITY_RUNS")
	}
	// A run claimed at each round, the one before ended; the processor
	// keeps at most its share.
	rounds := min(pCfg.Limits.MaxRunsPerWorker, max(1, pCfg.Limits.MaxRuns/n), runs)
	res := densityResult{Config: config}
	var snap *contract.Snapshot
	for round := range rounds {
		feedDensityRound(t, mp, lp, n, round)
		// An evaluation that began after the whole round was fed (ingest
		// is synchronous): at 100,000 workers a round takes longer than an
		// evaluation interval, and one that ran while it was fed had only
		// part of it (two thirds of the workers a run short).
		fed := time.Now()
		require.Eventually(t, func() bool {
			snap = sub.latest()
			return snap != nil && snap.Time.After(fed) && len(snap.Workers) == n
		}, 2*time.Minute, 50*time.Millisecond, "an evaluation of all %d workers after round %d", n, round)
	}
	served := len(snap.Workers)
	// At least: where max_runs / workers has a remainder, some workers
	// keep one more.
	wantRecent := min(rounds-1, pCfg.Limits.RecentRuns)
	recent := 0
	for _, w := range snap.Workers {
		got := w.Runs.Recent.Len()
		require.GreaterOrEqual(t, got, wantRecent, "worker %s: its recent runs after %d rounds", w.ID, rounds)
		recent += got
	}
	res.RecentRuns = float64(recent) / float64(len(snap.Workers))
	res.Runs = rounds
	if withExt {
		sub.next.store.Flush()
		if fullHistory {
			// Fill every ring: the last evaluation again at every step of the
			// window, as the evaluations of 30 minutes would.
			hc := sub.next.cfg.History
			for step := 1; step <= history.Size(hc.Window, hc.Resolution)+1; step++ {
				s := *snap
				s.Time = snap.Time.Add(time.Duration(step) * hc.Resolution)
				sub.next.Publish(&s)
				sub.next.store.Flush()
			}
		}
		served = len(sub.next.store.Load().ByIDOrder)
	}
	res.Workers = served
	sub.release()
	snap = nil // let go of it before the heap is read (the closure above keeps the variable)
	if withExporter {
		// Wait for an emission after the last round, then scrape as Prometheus does.
		time.Sleep(2 * pCfg.EmitInterval)
		res.PageBytes, res.PageSeries = scrapeSize(t, "http://"+promAddr+"/metrics")
	}
	if remoteWrite {
		// Every worker's state series received (all were sent at the
		// evaluation that first judged them).
		require.Eventually(t, func() bool { return remoteWriteLeft(t, rw) == 0 }, 2*time.Minute, 50*time.Millisecond, "remote write: a state series of every worker received")
	}
	// The least of a few readings: an evaluation, its emission or its
	// checkpoint in flight holds buffers that are not per-worker state.
	res.HeapBytes = liveHeap()
	for range 6 {
		time.Sleep(170 * time.Millisecond)
		res.HeapBytes = min(res.HeapBytes, liveHeap())
	}
	res.HeapBytes -= baseHeap
	if dir := os.Getenv("WORKERWATCH_DENSITY_HEAPPROFILE"); dir != "" {
		writeHeapProfile(t, filepath.Join(dir, fmt.Sprintf("%s-%d.heap", config, n)))
	}
	// The RSS too: the least of a few readings, each after the runtime
	// returned what it could (an evaluation every second here, and one in
	// flight at a reading holds a snapshot's worth more). Twelve over about
	// four evaluations: the emitter pauses between its pieces
	// (processor.md#emission-pauses), so an emission is in flight for more
	// of each second, and six readings could all fall in one (0.3-0.8 KiB
	// a worker more at 100,000: docs/results/density.md).
	res.RSSBytes = -1
	for range 12 {
		debug.FreeOSMemory()
		if rss := vmStatus("VmRSS") - baseRSS; res.RSSBytes < 0 || rss < res.RSSBytes {
			res.RSSBytes, res.AnonBytes = rss, vmStatus("RssAnon")-baseAnon
			res.Runtime = memoryClasses()
			maps := smapsRSS(t)
			res.CheckpointMapped = mappedRSS(maps, stateDir)
			res.Binary = binaryRSS(t, maps)
			res.BinarySections = binarySections(t)
		}
		time.Sleep(170 * time.Millisecond)
	}
	res.PeakBytes = vmStatus("VmHWM") - baseRSS
	for k, v := range baseClasses {
		res.Runtime[k] -= v
	}
	for k, v := range baseBinary {
		res.Binary[k] -= v
	}
	for k, v := range baseSections {
		res.BinarySections[k] -= v
	}
	res.Seconds = time.Since(began).Seconds()
	res.CheckpointBytes = dirSize(t, stateDir)
	js, err := json.Marshal(res)
	require.NoError(t, err)
	fmt.Printf("DENSITY %s\n", js)
}

// mappedRSS is the resident bytes of the mappings (smapsRSS) of files
// under dir.
func mappedRSS(maps map[mapping]int64, dir string) int64 {
	var sum int64
	for m, rss := range maps {
		if strings.HasPrefix(m.path, dir) {
			sum += rss
		}
	}
	return sum
}

// binaryRSS is the resident bytes of the process's own executable's
// mappings (of maps, smapsRSS), by their permissions.
func binaryRSS(t *testing.T, maps map[mapping]int64) map[string]int64 {
	t.Helper()
	exe, err := os.Readlink("/proc/self/exe")
	require.NoError(t, err)
	out := map[string]int64{}
	for m, rss := range maps {
		if m.path == exe {
			out[m.perms] += rss
		}
	}
	return out
}

// binarySections is the resident bytes of the process's own executable's
// mappings by the ELF section each page holds (a page shared by two
// sections counts for the first): /proc/self/pagemap says which pages are
// present (its present bit needs no privilege), the mapping's file offset
// where in the file each one is.
func binarySections(t *testing.T) map[string]int64 {
	t.Helper()
	exe, err := os.Readlink("/proc/self/exe")
	require.NoError(t, err)
	f, err := elf.Open(exe)
	require.NoError(t, err)
	defer f.Close()
	maps, err := os.ReadFile("/proc/self/maps")
	require.NoError(t, err)
	pm, err := os.Open("/proc/self/pagemap")
	require.NoError(t, err)
	defer pm.Close()
	page := uint64(os.Getpagesize())
	out := map[string]int64{}
	for l := range strings.SplitSeq(string(maps), "\n") {
		fs := strings.Fields(l)
		if len(fs) < 6 || fs[5] != exe {
			continue
		}
		lo, hi, _ := strings.Cut(fs[0], "-")
		start, err1 := strconv.ParseUint(lo, 16, 64)
		end, err2 := strconv.ParseUint(hi, 16, 64)
		off, err3 := strconv.ParseUint(fs[2], 16, 64)
		require.NoError(t, errors.Join(err1, err2, err3), "/proc/self/maps: %q", l)
		entries := make([]byte, (end-start)/page*8)
		_, err = pm.ReadAt(entries, int64(start/page*8))
		require.NoError(t, err, "/proc/self/pagemap")
		for i := range (end - start) / page {
			if binary.LittleEndian.Uint64(entries[i*8:])&(1<<63) == 0 {
				continue // not present
			}
			at := off + i*page // the page's place in the file
			name := "other"
			for _, sec := range f.Sections {
				if sec.Type != elf.SHT_NOBITS && sec.Size > 0 && sec.Offset < at+page && at < sec.Offset+sec.Size {
					name = sec.Name
					break
				}
			}
			out[name] += int64(page)
		}
	}
	return out
}

// sumExcept is the sum of m's values but those of names.
func sumExcept(m map[string]int64, names ...string) int64 {
	var n int64
	for k, v := range m {
		if !slices.Contains(names, k) {
			n += v
		}
	}
	return n
}

type mapping struct{ start, path, perms string }

// smapsRSS is the resident bytes of each mapping of /proc/self/smaps.
func smapsRSS(t *testing.T) map[mapping]int64 {
	t.Helper()
	raw, err := os.ReadFile("/proc/self/smaps")
	require.NoError(t, err)
	out := map[mapping]int64{}
	var cur mapping
	for l := range strings.SplitSeq(string(raw), "\n") {
		f := strings.Fields(l)
		switch {
		case len(f) >= 5 && strings.Contains(f[0], "-"): // a mapping's first line
			cur = mapping{start: f[0], perms: f[1]}
			if len(f) >= 6 {
				cur.path = f[5]
			}
		case len(f) == 3 && f[0] == "Rss:":
			kb, err := strconv.ParseInt(f[1], 10, 64)
			require.NoError(t, err)
			out[cur] += kb << 10
		}
	}
	return out
}

// dirSize is the bytes of the files in dir.
func dirSize(t *testing.T, dir string) int64 {
	t.Helper()
	entries, err := os.ReadDir(dir)
	require.NoError(t, err)
	var n int64
	for _, e := range entries {
		info, err := e.Info()
		require.NoError(t, err)
		n += info.Size()
	}
	return n
}

// writeHeapProfile writes the heap's profile after a GC, so that its in-use
// figures are the live heap's.
func writeHeapProfile(t *testing.T, path string) {
	t.Helper()
	runtime.GC()
	f, err := os.Create(path)
	require.NoError(t, err)
	defer f.Close()
	require.NoError(t, pprof.WriteHeapProfile(f))
}

// scrapeSize scrapes the exporter as Prometheus would (its shipped
// write_timeout may cut a slow page: up to three tries) and returns the
// page's bytes and series; -1, -1 if no try succeeded.
func scrapeSize(t *testing.T, u string) (int, int) {
	t.Helper()
	client := &http.Client{Timeout: 2 * time.Minute}
	for try := range 3 {
		resp, err := client.Get(u)
		if err != nil {
			t.Logf("scrape %d: %v", try, err)
			continue
		}
		body, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil || resp.StatusCode != http.StatusOK {
			t.Logf("scrape %d: %d %v", try, resp.StatusCode, err)
			continue
		}
		series := 0
		for l := range strings.SplitSeq(string(body), "\n") {
			if l != "" && !strings.HasPrefix(l, "#") {
				series++
			}
		}
		return len(body), series
	}
	return -1, -1
}

// feedDensityRound sends one round of every worker's records, 500 workers
// a request as an agent's batch would carry.
func feedDensityRound(t *testing.T, mp processor.Metrics, lp processor.Logs, n, round int) {
	t.Helper()
	ctx := context.Background()
	const per = 500
	now := pcommon.NewTimestampFromTime(time.Now())
	for from := 0; from < n; from += per {
		md := pmetric.NewMetrics()
		ld := plog.NewLogs()
		sched := fleetload.Scheduler(ld)
		for i := from; i < min(n, from+per); i++ {
			prev := ""
			if round > 0 {
				prev = fmt.Sprintf("density-run-%06d-%d", i, round-1)
			}
			fleetload.Round(md, ld, sched, fmt.Sprintf("density-worker-%06d", i), i, prev, fmt.Sprintf("density-run-%06d-%d", i, round), now, now)
		}
		require.NoError(t, lp.ConsumeLogs(ctx, ld))
		require.NoError(t, mp.ConsumeMetrics(ctx, md))
	}
}

// remoteWriteSink is the remote-write receiver of the rw configurations,
// run by the parent: it decodes each request (snappy, then the
// WriteRequest) and marks the workers whose state series arrived; a GET
// answers how many have not yet (remoteWriteLeft).
type remoteWriteSink struct {
	srv  *httptest.Server
	mu   sync.Mutex
	seen []bool
	left int
}

func newRemoteWriteSink(t *testing.T, n int) *remoteWriteSink {
	t.Helper()
	s := &remoteWriteSink{seen: make([]bool, n), left: n}
	s.srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method == http.MethodGet {
			if r.URL.Query().Has("done") {
				// The child is done: close the exporter's idle connections,
				// which would outlive its test (goleak).
				s.srv.Config.SetKeepAlivesEnabled(false)
			}
			s.mu.Lock()
			defer s.mu.Unlock()
			fmt.Fprint(w, s.left)
			return
		}
		raw, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		body, err := snappy.Decode(nil, raw)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var req prompb.WriteRequest
		if err := req.Unmarshal(body); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		for _, series := range req.Timeseries {
			var name, id string
			for _, l := range series.Labels {
				switch l.Name {
				case "__name__":
					name = l.Value
				case "cicd_worker_id":
					id = l.Value
				}
			}
			if name != "workerwatch_worker_state_ratio" {
				continue
			}
			if i, err := strconv.Atoi(strings.TrimPrefix(id, "density-worker-")); err == nil && i < len(s.seen) && !s.seen[i] {
				s.seen[i] = true
				s.left--
			}
		}
		w.WriteHeader(http.StatusNoContent)
	}))
	t.Cleanup(s.srv.Close)
	return s
}

// remoteWriteLeft asks the parent's remoteWriteSink at url how many
// workers' state series it has yet to receive.
func remoteWriteLeft(t *testing.T, url string) int {
	t.Helper()
	// No connection kept: it would outlive the child's test (goleak).
	client := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}, Timeout: 10 * time.Second}
	resp, err := client.Get(url)
	require.NoError(t, err)
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	left, err := strconv.Atoi(string(raw))
	require.NoError(t, err, "the remote-write receiver's answer %q", raw)
	return left
}
