//go:build e2e

package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/collector/confmap"

	"github.com/workerwatch/workerwatch/internal/freeport"
)

// TestReliabilitySlowClients (issue 14, point 6): every listener of every
// shipped collector config sets header, read, write and idle timeouts and a
// request size limit, and holds to them: 500 connections that send their
// headers slowly (one byte every couple of seconds, never finishing) are all
// closed within the listener's configured timeout.
//
// Each config runs in the real binary as shipped, with only what cannot run
// here changed: listeners moved to free loopback ports, state and output
// files into a temporary directory, export targets to a closed local port,
// /hostfs paths to this host's. The listeners are found in the config
// itself, so a new listener (or a new preset) is covered without a change
// here, and one this test does not know fails it.
//
// What closes a slow client, per listener kind:
//   - HTTP (OTLP/HTTP, the health API, the Prometheus exporter):
//     read_header_timeout;
//   - gRPC (OTLP/gRPC), headers sent slowly after the HTTP/2 handshake:
//     keepalive.server_parameters.max_connection_idle, plus the 5 s grpc-go
//     waits for its GOAWAY ping before it closes;
//   - gRPC, the handshake itself sent slowly: grpc-go's connection timeout,
//     fixed at 120 s (not configurable through the collector's configgrpc);
//   - the collector's own telemetry endpoint: its read timeout, fixed at 5 s
//     by the collector (go.opentelemetry.io/contrib/otelconf).
//
// WORKERWATCH_SLOW_CONNS sets the connections per listener (default 500).
//
//	make slow-clients
func TestReliabilitySlowClients(t *testing.T) {
	if os.Getenv("WORKERWATCH_SLOW_CLIENTS") != "1" {
		// Opt-in (issue 19): thousands of slow connections to every shipped
		// config at once starve the suite's other scenarios on 2 cores (two
		// clean CI runs of the merged wave failed TestScaleShards, TestMakeRun
		// and the OpenFn example beside it). `make slow-clients` runs it alone.
		t.Skip("set WORKERWATCH_SLOW_CLIENTS=1 (make slow-clients): thousands of connections, run alone")
	}
	defer parallel(t, 60*time.Second)()
	bin := collectorBinary(t)
	conns := 500
	if v, err := strconv.Atoi(os.Getenv("WORKERWATCH_SLOW_CONNS")); err == nil && v > 0 {
		conns = v
	}
	var configs []string
	for _, pattern := range []string{"config.yaml", "deploy/collector/*.yaml", "presets/*/*.yaml", "e2e/testdata/*.yaml", "testdata/*.yaml"} {
		m, _ := filepath.Glob(filepath.Join(repoRoot, pattern))
		for _, f := range m {
			// An *.overlay.yaml is a part merged onto a shipped config (the
			// scale test's), not a config of its own.
			if !strings.HasPrefix(filepath.Base(f), "bad-") && !strings.HasSuffix(f, ".overlay.yaml") && isCollectorConfig(f) {
				configs = append(configs, f)
			}
		}
	}
	if len(configs) < 5 {
		t.Fatalf("only %d shipped configs found: %v", len(configs), configs)
	}

	// Every config runs at once; their checks share a budget of open
	// connections (file descriptors of this process), longest checks first.
	var checks []slowCheck
	for _, cfg := range configs {
		rel, _ := filepath.Rel(repoRoot, cfg)
		ls, problems, _ := runShippedConfig(t, bin, cfg)
		for _, p := range problems {
			t.Errorf("%s: %s", rel, p)
		}
		for _, l := range ls {
			checks = append(checks, l.checks()...)
		}
	}
	sort.SliceStable(checks, func(i, j int) bool { return checks[i].bound > checks[j].bound })
	budget := make(chan struct{}, max(1, 8000/conns))
	var wg sync.WaitGroup
	results := make([]slowResult, len(checks))
	for i := range checks {
		wg.Add(1)
		go func() {
			defer wg.Done()
			budget <- struct{}{}
			defer func() { <-budget }()
			results[i] = checks[i].run(conns)
		}()
	}
	wg.Wait()

	var table strings.Builder
	fmt.Fprintf(&table, "%-38s %-40s %-14s %8s %8s %8s %6s\n", "config", "listener", "slow", "bound", "first", "last", "open")
	for i, c := range checks {
		r := results[i]
		first, last := "-", "-"
		if r.open < conns {
			first, last = r.first.Round(100*time.Millisecond).String(), r.last.Round(100*time.Millisecond).String()
		}
		fmt.Fprintf(&table, "%-38s %-40s %-14s %8s %8s %8s %6d\n", c.l.config, c.l.name, c.mode, c.bound, first, last, r.open)
		where := fmt.Sprintf("%s %s (%s, %s)", c.l.config, c.l.name, c.mode, c.l.addr)
		switch {
		case r.err != nil:
			t.Errorf("%s: %v", where, r.err)
		case r.open > 0 && c.l.timeout <= 0:
			t.Errorf("%s: no timeout configured: %d of %d slow connections still open after %s", where, r.open, conns, c.deadline())
		case r.open > 0:
			t.Errorf("%s: %d of %d slow connections still open %s after they started (timeout %s)", where, r.open, conns, c.deadline(), c.bound)
		case r.last < c.bound/2:
			// Every one closed long before any timeout: the listener
			// refused them for another reason, so this did not test the
			// timeout. (A few closed early is the machine: a clean CI run
			// saw the first of 500 handshakes close at 30 s on six
			// configs whose last closed at the 120 s timeout; the first
			// is in the table.)
			t.Errorf("%s: every slow connection was closed by %s, before half its timeout %s", where, r.last, c.bound)
		}
	}
	t.Logf("e2e: RESULT slow clients, %d connections per listener and mode, closed after (first, last):\n%s", conns, table.String())
}

// isCollectorConfig: a YAML file with a service section (e2e/testdata also
// holds files of other kinds).
func isCollectorConfig(path string) bool {
	b, err := os.ReadFile(path)
	return err == nil && strings.Contains("\n"+string(b), "\nservice:")
}

// slowListener is one listening socket of a running shipped config.
type slowListener struct {
	config, name string // file (relative to the repository) and component path
	kind         string // "http", "grpc" or "telemetry"
	addr         string
	timeout      time.Duration // what the config says closes a slow client
}

// slowCheck is one way of being slow against one listener.
type slowCheck struct {
	l     slowListener
	mode  string // "headers" or "grpc-handshake"
	bound time.Duration
}

// grpcHandshakeTimeout is grpc-go's connection timeout (server.go
// defaultServerOptions.connectionTimeout): the HTTP/2 handshake must be done
// within it. configgrpc does not expose it.
const grpcHandshakeTimeout = 120 * time.Second

// grpcGoAwayWait is how long grpc-go waits for the ping after its first
// GOAWAY before it closes an idle connection (http2_server.go).
const grpcGoAwayWait = 5 * time.Second

// telemetryReadTimeout is the collector's own telemetry endpoint's read
// timeout (otelconf's Prometheus server; not configurable).
const telemetryReadTimeout = 5 * time.Second

// unbounded is how long connections to a listener with no timeout
// configured are watched before they are reported as still open.
const unbounded = 30 * time.Second

func (l slowListener) checks() []slowCheck {
	timeout := l.timeout
	if timeout <= 0 {
		timeout = unbounded
	}
	switch l.kind {
	case "grpc":
		return []slowCheck{
			{l: l, mode: "grpc-handshake", bound: grpcHandshakeTimeout},
			{l: l, mode: "headers", bound: timeout + grpcGoAwayWait},
		}
	default:
		return []slowCheck{{l: l, mode: "headers", bound: timeout}}
	}
}

// deadline is the bound plus room for a loaded machine: timers fire late
// when two cores run a dozen collectors.
// deadline: the timeout plus a margin for the server's accept loop and
// timers on a loaded machine (500 connections per listener, every shipped
// config at once, beside other scenarios: at 5 s over, a third of the
// connections to a 5 s listener were still being closed). A listener
// without a timeout keeps them open however long the test waits; one
// closing them early is caught by the first-close check.
func (c slowCheck) deadline() time.Duration { return c.bound + max(30*time.Second, c.bound/4) }

type slowResult struct {
	first, last time.Duration // earliest and latest close, from each connection's start
	open        int           // still open at the deadline
	err         error
}

// run opens n connections to the listener, each sending its request (or
// HTTP/2 handshake) one byte every couple of seconds without ever finishing
// it, and waits until all are closed by the server or the deadline passes.
func (c slowCheck) run(n int) slowResult {
	prefix, trickle := c.bytes()
	every := 2 * time.Second
	if c.mode == "grpc-handshake" {
		// Slow enough that the handshake (preface + SETTINGS, 33 bytes)
		// cannot finish within grpc-go's 120 s.
		every = 5 * time.Second
	}
	type conn struct {
		c      net.Conn
		start  time.Time
		closed chan time.Duration
	}
	var cs []*conn
	defer func() {
		for _, x := range cs {
			x.c.Close()
		}
	}()
	for range n {
		nc, err := net.DialTimeout("tcp", c.l.addr, 10*time.Second)
		if err != nil {
			return slowResult{err: fmt.Errorf("connection %d of %d: %w", len(cs)+1, n, err)}
		}
		x := &conn{c: nc, start: time.Now(), closed: make(chan time.Duration, 1)}
		cs = append(cs, x)
		// The server closing the connection ends this read (EOF or reset);
		// whatever it sends first (a SETTINGS frame, a 408) is skipped.
		go func() {
			_, _ = io.Copy(io.Discard, x.c)
			x.closed <- time.Since(x.start)
		}()
		if _, err := nc.Write(prefix); err != nil {
			x.closed <- time.Since(x.start)
		}
	}
	// One byte per connection every `every`, never the end of the headers.
	stop := make(chan struct{})
	defer close(stop)
	go func() {
		tick := time.NewTicker(every)
		defer tick.Stop()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			case <-tick.C:
			}
			b := []byte{trickle[i%len(trickle)]}
			for _, x := range cs {
				_ = x.c.SetWriteDeadline(time.Now().Add(time.Second))
				_, _ = x.c.Write(b) // a closed one is seen by its reader
			}
		}
	}()
	var r slowResult
	r.first = time.Duration(1<<63 - 1)
	for _, x := range cs {
		left := time.Until(x.start.Add(c.deadline()))
		select {
		case d := <-x.closed:
			r.first, r.last = min(r.first, d), max(r.last, d)
		case <-time.After(max(left, 0)):
			r.open++
		}
	}
	return r
}

// bytes returns what a slow client sends at once and then byte by byte.
func (c slowCheck) bytes() (prefix, trickle []byte) {
	switch {
	case c.mode == "grpc-handshake":
		// The client preface, an empty SETTINGS frame, then a HEADERS frame
		// header: all of it slowly.
		return nil, slices.Concat([]byte(http2Preface), h2Frame(0x4, 0, 0), h2Frame(0x1, 1, 1000))
	case c.l.kind == "grpc":
		// The handshake at once, then a HEADERS frame without END_HEADERS
		// whose header block (a literal header with a 1000-byte name) comes
		// one CONTINUATION frame of one byte at a time: the request's
		// headers never end.
		hdr := slices.Concat([]byte(http2Preface), h2Frame(0x4, 0, 0),
			h2Frame(0x1, 1, 4), []byte{0x00, 0x7f, 0xe9, 0x06}) // literal, new name of length 1000
		return hdr, slices.Concat(h2Frame(0x9, 1, 1), []byte{'x'})
	default:
		return []byte("POST /v1/traces HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Slow: "), []byte("a")
	}
}

const http2Preface = "PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"

// h2Frame is an HTTP/2 frame header (RFC 9113 4.1) without flags (so no
// END_HEADERS) announcing length bytes.
func h2Frame(typ byte, stream uint32, length int) []byte {
	return []byte{
		byte(length >> 16), byte(length >> 8), byte(length), typ, 0,
		byte(stream >> 24), byte(stream >> 16), byte(stream >> 8), byte(stream),
	}
}

// runShippedConfig starts the config (rewritten to run here, see the test's
// comment) and returns its listeners, and what it lacks: a listener without
// one of the required limits, or one this test does not know.
func runShippedConfig(t *testing.T, bin, path string) ([]slowListener, []string, *proc) {
	t.Helper()
	rel, _ := filepath.Rel(repoRoot, path)
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	retrieved, err := confmap.NewRetrievedFromYAML(raw)
	if err != nil {
		t.Fatalf("%s: %v", rel, err)
	}
	anyCfg, err := retrieved.AsRaw()
	if err != nil {
		t.Fatalf("%s: %v", rel, err)
	}
	cfg, _ := anyCfg.(map[string]any)
	tmp := t.TempDir()
	var ls []slowListener
	var problems []string
	listen := func(name, kind string, c map[string]any, timeout time.Duration) {
		addr := freeport.Addr(t)
		c["endpoint"] = addr
		ls = append(ls, slowListener{config: rel, name: name, kind: kind, addr: addr, timeout: timeout})
	}
	service := mapAt(cfg, "service")
	used := map[string]bool{}
	for _, id := range listAt(service, "extensions") {
		used["extensions::"+id] = true
	}
	for _, p := range mapAt(service, "pipelines") {
		for _, part := range []string{"receivers", "exporters"} {
			pm, _ := p.(map[string]any)
			for _, id := range listAt(pm, part) {
				used[part+"::"+id] = true
			}
		}
	}
	for _, part := range []string{"extensions", "receivers", "exporters"} {
		for id, v := range mapAt(cfg, part) {
			if !used[part+"::"+id] {
				continue
			}
			c, _ := v.(map[string]any)
			if c == nil {
				c = map[string]any{}
				mapAt(cfg, part)[id] = c
			}
			name := part + "::" + id
			switch typ, _, _ := strings.Cut(id, "/"); part + "::" + typ {
			case "extensions::worker_health", "exporters::prometheus":
				timeout, missing := httpLimits(c)
				problems = append(problems, prefixed(name, missing)...)
				listen(name, "http", c, timeout)
			case "receivers::otlp":
				protocols, _ := c["protocols"].(map[string]any)
				for proto, pv := range protocols {
					pc, _ := pv.(map[string]any)
					if pc == nil {
						pc = map[string]any{}
						protocols[proto] = pc
					}
					pname := name + "::protocols::" + proto
					switch proto {
					case "http":
						timeout, missing := httpLimits(pc)
						problems = append(problems, prefixed(pname, missing)...)
						listen(pname, "http", pc, timeout)
					case "grpc":
						timeout, missing := grpcLimits(pc)
						problems = append(problems, prefixed(pname, missing)...)
						listen(pname, "grpc", pc, timeout)
					}
				}
			case "extensions::file_storage":
				c["directory"] = filepath.Join(tmp, "state-"+strings.ReplaceAll(id, "/", "-"))
			case "exporters::file":
				c["path"] = filepath.Join(tmp, strings.ReplaceAll(id, "/", "-")+".jsonl")
			case "receivers::worker_process":
				if _, ok := c["proc_root"]; ok {
					c["proc_root"] = "/proc"
				}
				if _, ok := c["cgroup_root"]; ok {
					c["cgroup_root"] = "/sys/fs/cgroup"
				}
			case "extensions::bearertokenauth", "receivers::hostmetrics", "exporters::debug":
			case "receivers::bullmq", "receivers::celery":
				// Clients of a broker, never a listener: pointed at a closed
				// loopback port (their status is an error; nothing crashes).
				closed := freeport.Addr(t)
				for k, v := range map[string]string{"endpoint": closed, "broker": "redis://" + closed + "/0", "result_backend": ""} {
					if _, ok := c[k]; ok {
						c[k] = v
					}
				}
			case "exporters::otlp", "exporters::otlp_grpc":
				c["endpoint"] = freeport.Addr(t) // nothing listens: never someone else's
			case "exporters::otlphttp", "exporters::otlp_http":
				c["endpoint"] = "http://" + freeport.Addr(t)
			case "exporters::prometheus_remote_write":
				c["endpoint"] = "http://" + freeport.Addr(t) + "/api/v1/write" // nothing listens
			case "exporters::load_balancing":
				// The shards: one that nobody listens at.
				c["resolver"] = map[string]any{"static": map[string]any{"hostnames": []any{freeport.Addr(t)}}}
			default:
				problems = append(problems, fmt.Sprintf("%s: a component this test does not know; if it listens, add it here", name))
			}
		}
	}
	telemetry := mapAt(mapAt(service, "telemetry"), "metrics")
	if lvl, _ := telemetry["level"].(string); lvl != "none" {
		readers, _ := telemetry["readers"].([]any)
		if len(readers) == 0 {
			readers = []any{map[string]any{"pull": map[string]any{"exporter": map[string]any{"prometheus": map[string]any{}}}}}
		}
		for i, r := range readers {
			p := mapAt(mapAt(mapAt(r.(map[string]any), "pull"), "exporter"), "prometheus")
			if p == nil {
				continue
			}
			port := freeport.Port(t)
			p["host"], p["port"] = "127.0.0.1", port
			ls = append(ls, slowListener{
				config: rel, name: fmt.Sprintf("service::telemetry::metrics::readers::%d", i),
				kind: "telemetry", addr: fmt.Sprintf("127.0.0.1:%d", port), timeout: telemetryReadTimeout,
			})
		}
		if service["telemetry"] == nil {
			service["telemetry"] = map[string]any{}
		}
		tm := service["telemetry"].(map[string]any)
		if tm["metrics"] == nil {
			tm["metrics"] = map[string]any{}
		}
		tm["metrics"].(map[string]any)["readers"] = readers
	}

	// YAML is a superset of JSON: the rewritten config is written as JSON.
	out, err := json.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	name := "rel-slow-" + strings.NewReplacer("/", "-", ".yaml", "").Replace(rel)
	file := filepath.Join(tmp, name+".yaml")
	writeFile(t, file, string(out))
	col := start(t, name, slowConfigEnv(t, tmp), bin, "--config", file)
	waitLog(t, col, readyLine, startDeadline)
	return ls, problems, col
}

// slowConfigEnv is the environment the shipped configs read (as the deploy/
// manifests set it), pointing nowhere that anyone listens.
func slowConfigEnv(t *testing.T, tmp string) []string {
	return []string{
		"GATEWAY_ENDPOINT=" + freeport.Addr(t), "TRACES_ENDPOINT=" + freeport.Addr(t),
		"LOGS_ENDPOINT=http://" + freeport.Addr(t), "K8S_NODE_NAME=node-a", "POD_NAME=worker-0",
		"WORKERWATCH_API_TOKEN=t0ken", "WORKERWATCH_STATE_DIR=" + filepath.Join(tmp, "state"),
		"WORKERWATCH_OTLP_ENDPOINT=http://" + freeport.Addr(t),
		// A gateway shard's name on its ring (deploy/collector/gateway*.yaml).
		"WORKERWATCH_SELF=gw-1.example.internal:4317",
	}
}

// httpLimits checks that an HTTP server config (confighttp.ServerConfig)
// bounds slow and large requests, and returns its header timeout.
func httpLimits(c map[string]any) (time.Duration, []string) {
	var missing []string
	need := func(key string, v any) time.Duration {
		d, err := time.ParseDuration(fmt.Sprint(v))
		if v == nil || err != nil || d <= 0 {
			missing = append(missing, fmt.Sprintf("%s must be set to a positive duration (got %v)", key, v))
		}
		return d
	}
	header := need("read_header_timeout", c["read_header_timeout"])
	need("read_timeout", c["read_timeout"])
	need("write_timeout", c["write_timeout"])
	need("keepalive::idle_timeout", mapAt(c, "keepalive")["idle_timeout"])
	if n, err := strconv.ParseInt(fmt.Sprint(c["max_request_body_size"]), 10, 64); err != nil || n <= 0 {
		missing = append(missing, fmt.Sprintf("max_request_body_size must be set (got %v)", c["max_request_body_size"]))
	}
	return header, missing
}

// grpcLimits checks the same of a gRPC server config (configgrpc) and
// returns its idle timeout.
func grpcLimits(c map[string]any) (time.Duration, []string) {
	var missing []string
	sp := mapAt(mapAt(c, "keepalive"), "server_parameters")
	var idle time.Duration
	for _, key := range []string{"max_connection_idle", "max_connection_age", "max_connection_age_grace"} {
		d, err := time.ParseDuration(fmt.Sprint(sp[key]))
		if sp[key] == nil || err != nil || d <= 0 {
			missing = append(missing, fmt.Sprintf("keepalive::server_parameters::%s must be set to a positive duration (got %v)", key, sp[key]))
		}
		if key == "max_connection_idle" {
			idle = d
		}
	}
	if n, err := strconv.Atoi(fmt.Sprint(c["max_recv_msg_size_mib"])); err != nil || n <= 0 {
		missing = append(missing, fmt.Sprintf("max_recv_msg_size_mib must be set (got %v)", c["max_recv_msg_size_mib"]))
	}
	return idle, missing
}

func prefixed(name string, problems []string) []string {
	out := make([]string, len(problems))
	for i, p := range problems {
		out[i] = name + ": " + p
	}
	return out
}

// mapAt returns m[key] as a map (nil when absent or not a map).
func mapAt(m map[string]any, key string) map[string]any {
	v, _ := m[key].(map[string]any)
	return v
}

// listAt returns m[key] as a list of strings.
func listAt(m map[string]any, key string) []string {
	var out []string
	l, _ := m[key].([]any)
	for _, v := range l {
		if s, ok := v.(string); ok {
			out = append(out, s)
		}
	}
	return out
}
