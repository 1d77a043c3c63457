//go:build e2e

package e2e

// Helpers of the reliability tests (reliability_*_test.go, docs/reliability.md):
// a receiving backend collector whose files are counted by id, an OTLP/HTTP
// sender that knows exactly what the collector accepted, the collector's own
// metrics, and process RSS/CPU from /proc.

import (
	"bufio"
	"bytes"
	"debug/elf"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/plog/plogotlp"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/pdata/ptrace/ptraceotlp"

	"github.com/workerwatch/workerwatch/internal/procfs"
)

// relIDKey is the attribute every span and log record of the outage test
// carries: a unique id the backend's files are counted by.
const relIDKey = "workerwatch.test.id"

func collectorBinary(t testing.TB) string {
	return need(t, "otelcol-workerwatch", filepath.Join(binDir, "otelcol-workerwatch"))
}

func telemetrygenBinary(t testing.TB) string {
	return need(t, "telemetrygen", filepath.Join(binDir, "telemetrygen")) // make build
}

// backend is a second otelcol-workerwatch (testdata/reliability-backend.yaml):
// OTLP/HTTP in, JSON lines out.
type backend struct {
	p                    *proc
	addr                 string
	tracesFile, logsFile string
}

func startBackend(t testing.TB, name, addr, dir string) *backend {
	t.Helper()
	b := &backend{
		addr:       addr,
		tracesFile: filepath.Join(dir, name+"-traces.jsonl"),
		logsFile:   filepath.Join(dir, name+"-logs.jsonl"),
	}
	b.p = start(t, name, []string{
		"REL_BACKEND_OTLP=" + addr, "REL_BACKEND_TRACES=" + b.tracesFile,
		"REL_BACKEND_LOGS=" + b.logsFile,
	}, collectorBinary(t),
		"--config", filepath.Join(repoRoot, "e2e", "testdata", "reliability-backend.yaml"))
	waitListening(t, b.p, addr)
	return b
}

// idCounts counts the spans and log records carrying relIDKey, by id, in the
// backend files given (a partly written last line is skipped).
func idCounts(files ...string) (spans, logs map[string]int, err error) {
	spans, logs = map[string]int{}, map[string]int{}
	var tu ptrace.JSONUnmarshaler
	var lu plog.JSONUnmarshaler
	for _, f := range files {
		fh, err := os.Open(f)
		if os.IsNotExist(err) {
			continue
		}
		if err != nil {
			return nil, nil, err
		}
		sc := bufio.NewScanner(fh)
		sc.Buffer(make([]byte, 1<<20), 256<<20)
		for sc.Scan() {
			line := sc.Bytes()
			if len(bytes.TrimSpace(line)) == 0 {
				continue
			}
			if bytes.Contains(line, []byte(`"resourceSpans"`)) {
				td, err := tu.UnmarshalTraces(line)
				if err != nil {
					continue
				}
				for i := 0; i < td.ResourceSpans().Len(); i++ {
					ss := td.ResourceSpans().At(i).ScopeSpans()
					for j := 0; j < ss.Len(); j++ {
						sp := ss.At(j).Spans()
						for k := 0; k < sp.Len(); k++ {
							if v, ok := sp.At(k).Attributes().Get(relIDKey); ok {
								spans[v.Str()]++
							}
						}
					}
				}
			} else if bytes.Contains(line, []byte(`"resourceLogs"`)) {
				ld, err := lu.UnmarshalLogs(line)
				if err != nil {
					continue
				}
				for i := 0; i < ld.ResourceLogs().Len(); i++ {
					sl := ld.ResourceLogs().At(i).ScopeLogs()
					for j := 0; j < sl.Len(); j++ {
						lr := sl.At(j).LogRecords()
						for k := 0; k < lr.Len(); k++ {
							if v, ok := lr.At(k).Attributes().Get(relIDKey); ok {
								logs[v.Str()]++
							}
						}
					}
				}
			}
		}
		fh.Close()
		if err := sc.Err(); err != nil {
			return nil, nil, fmt.Errorf("%s: %w", f, err)
		}
	}
	return spans, logs, nil
}

// duplicates returns how many deliveries beyond the first there were.
func duplicates(m map[string]int) (extra int) {
	for _, n := range m {
		extra += n - 1
	}
	return extra
}

// otlpSender posts OTLP/HTTP protobuf requests of `per` spans or log records,
// each with a unique relIDKey, and retries a request until the collector
// accepts it (HTTP 200): what it counts as sent is exactly what was accepted.
type otlpSender struct {
	base     string // http://host:port
	per      int
	client   *http.Client
	attempts int // requests posted, including retries
}

func newSender(addr string, per int) *otlpSender {
	return &otlpSender{base: "http://" + addr, per: per, client: &http.Client{Timeout: 5 * time.Second}}
}

func (s *otlpSender) traces(seq int) []byte {
	td := ptrace.NewTraces()
	rs := td.ResourceSpans().AppendEmpty()
	rs.Resource().Attributes().PutStr("service.name", "reliability-sender")
	rs.Resource().Attributes().PutStr("cicd.worker.id", "rel-worker")
	sp := rs.ScopeSpans().AppendEmpty().Spans()
	now := time.Now()
	for i := 0; i < s.per; i++ {
		span := sp.AppendEmpty()
		n := seq*s.per + i
		var tid [16]byte
		var sid [8]byte
		copy(tid[:], fmt.Sprintf("rel-trace-%06d", seq))
		copy(sid[:], fmt.Sprintf("%08d", n))
		span.SetTraceID(pcommon.TraceID(tid))
		span.SetSpanID(pcommon.SpanID(sid))
		span.SetName("reliability")
		span.SetStartTimestamp(pcommon.NewTimestampFromTime(now))
		span.SetEndTimestamp(pcommon.NewTimestampFromTime(now.Add(time.Millisecond)))
		span.Attributes().PutStr(relIDKey, fmt.Sprintf("s-%d", n))
	}
	b, _ := ptraceotlp.NewExportRequestFromTraces(td).MarshalProto()
	return b
}

func (s *otlpSender) logs(seq int) []byte {
	ld := plog.NewLogs()
	rl := ld.ResourceLogs().AppendEmpty()
	rl.Resource().Attributes().PutStr("service.name", "reliability-sender")
	rl.Resource().Attributes().PutStr("cicd.worker.id", "rel-worker")
	lr := rl.ScopeLogs().AppendEmpty().LogRecords()
	now := pcommon.NewTimestampFromTime(time.Now())
	for i := 0; i < s.per; i++ {
		r := lr.AppendEmpty()
		n := seq*s.per + i
		r.SetTimestamp(now)
		r.Body().SetStr("reliability record")
		r.Attributes().PutStr(relIDKey, fmt.Sprintf("l-%d", n))
	}
	b, _ := plogotlp.NewExportRequestFromLogs(ld).MarshalProto()
	return b
}

// post sends one request until it is accepted or the deadline passes.
func (s *otlpSender) post(path string, body []byte, deadline time.Time) error {
	var last error
	for time.Now().Before(deadline) {
		s.attempts++
		resp, err := s.client.Post(s.base+path, "application/x-protobuf", bytes.NewReader(body))
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			err = fmt.Errorf("HTTP %d", resp.StatusCode)
		}
		last = err
		time.Sleep(100 * time.Millisecond)
	}
	return fmt.Errorf("%s not accepted before the deadline: %v", path, last)
}

// metricSum sums the samples of metric name whose label set contains every
// `k="v"` of match (Prometheus text format; no exemplars).
func metricSum(text, name string, match ...string) (sum float64, found bool) {
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, name) {
			continue
		}
		rest := line[len(name):]
		if rest == "" || (rest[0] != '{' && rest[0] != ' ') {
			continue
		}
		ok := true
		for _, m := range match {
			if !strings.Contains(rest, m) {
				ok = false
				break
			}
		}
		if !ok {
			continue
		}
		fields := strings.Fields(rest[strings.LastIndex(rest, "}")+1:])
		if len(fields) == 0 {
			continue
		}
		v, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			continue
		}
		sum += v
		found = true
	}
	return sum, found
}

// procUsage is a process's resident memory and CPU time (user+system).
type procUsage struct {
	rss int64   // bytes
	cpu float64 // seconds
}

// readProcUsage reads a process's stat through the product's /proc reader.
func readProcUsage(pid int) (procUsage, error) {
	st, err := procfs.StatOf(pid)
	if err != nil {
		return procUsage{}, err
	}
	return procUsage{rss: st.RSSBytes(), cpu: st.CPUSeconds()}, nil
}

// residentSplit is a process's resident memory split the way the kernel
// counts it (/proc/<pid>/status): anon is the heap, the stacks and the Go
// runtime's own memory, what the memory_limiter (heap) and GOMEMLIMIT (the
// runtime's total) bound; file is pages mapped from files, here the
// executable's own code and read-only data: clean, shared by every process
// of the same binary, dropped by the kernel under memory pressure, and at
// most the size of the executable's loaded segments (mappedSize). How many
// of those pages are resident depends on the kernel as much as on the
// program: the same binary shows 86 MiB of them run from ext4 on Linux 6.18
// (whole large folios are mapped at a fault) and 53 MiB run from tmpfs.
type residentSplit struct {
	anon, file int64 // bytes
}

func readResidentSplit(pid int) (residentSplit, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return residentSplit{}, err
	}
	var r residentSplit
	for _, l := range strings.Split(string(b), "\n") {
		f := strings.Fields(l)
		if len(f) < 2 {
			continue
		}
		kib, _ := strconv.ParseInt(f[1], 10, 64)
		switch f[0] {
		case "RssAnon:":
			r.anon = kib << 10
		case "RssFile:", "RssShmem:":
			r.file += kib << 10
		}
	}
	return r, nil
}

// mappedSize is the size of an executable's loaded segments (the ELF
// PT_LOAD program headers' file sizes): the most of it that can be
// resident as file pages.
func mappedSize(t testing.TB, path string) int64 {
	t.Helper()
	f, err := elf.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var n int64
	for _, p := range f.Progs {
		if p.Type == elf.PT_LOAD {
			n += int64(p.Filesz)
		}
	}
	return n
}

func median(xs []float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	if len(s)%2 == 1 {
		return s[len(s)/2]
	}
	return (s[len(s)/2-1] + s[len(s)/2]) / 2
}

// errorLines returns the collector log lines logged at error level.
func errorLines(path string) []string {
	b, _ := os.ReadFile(path)
	var out []string
	for _, l := range strings.Split(string(b), "\n") {
		if strings.Contains(l, "\terror\t") || strings.Contains(l, `"level":"error"`) {
			out = append(out, l)
		}
	}
	return out
}

// waitReady waits for the worker_health extension's /readyz.
func waitReady(t testing.TB, p *proc, healthAddr string) {
	t.Helper()
	eventually(t, 60*time.Second, 200*time.Millisecond, p.name+" ready", func() error {
		if p.exited() {
			t.Fatalf("%s exited:\n%s", p.name, p.tail())
		}
		code, err := getJSON("http://"+healthAddr+"/readyz", nil)
		if err == nil && code != 200 {
			err = fmt.Errorf("/readyz %d", code)
		}
		return err
	})
}

// envMinutes reads a duration in minutes (fractions allowed) from the environment.
func envMinutes(name string, def float64) time.Duration {
	if v := os.Getenv(name); v != "" {
		if f, err := strconv.ParseFloat(v, 64); err == nil && f > 0 {
			return time.Duration(f * float64(time.Minute))
		}
	}
	return time.Duration(def * float64(time.Minute))
}

// ownFleetSelector is the worker_process receiver's part of a config laid
// over config.yaml (a second --config; lists replace lists): config.yaml's
// selector of simulated workers, narrowed to the ids that start with prefix,
// so the collector watches this run's fleet and no other session's.
func ownFleetSelector(prefix string) string {
	return fmt.Sprintf(`receivers:
  worker_process:
    workers:
      - selector:
          cmdline: 'workersim worker --id (?P<id>%s\S*)( |$)'
        name: "{env:WORKER_NAME}"
        roles:
          - name: run
            cmdline: 'workersim run-child'
`, regexp.QuoteMeta(prefix))
}
