//go:build e2e

package e2e

// Helpers for the presets' end-to-end tests (preset_*_test.go): the real
// collector started with a shipped preset (presets/<system>/collector.yaml)
// on loopback ports picked here, plus an overlay that narrows the preset's
// worker selectors to one scenario's processes (scenarios run in parallel on
// one host) and shortens its timings for the test; and one Prometheus
// scraping every scenario's collector.

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.opentelemetry.io/collector/confmap/confmaptest"

	"github.com/workerwatch/workerwatch/internal/freeport"
)

// presetCollector is one scenario's collector running a preset.
type presetCollector struct {
	name, preset                        string
	otlpHTTP, otlpGRPC, health, promExp string
	telemetryPort                       int
	stateDir, overlay                   string
	promTargets                         string // the shared Prometheus's file_sd directory
	exportTo                            string // OTLP/HTTP base URL of the preset's traces and logs exporter
	p                                   *proc
	logs                                []string // of every start that got ready
	starts                              int
}

// newPresetCollector picks the collector's ports; promTargets is the shared
// Prometheus's target directory (startPrometheus), where the collector's
// Prometheus endpoint is written when it starts.
func newPresetCollector(t *testing.T, name, preset, promTargets string) *presetCollector {
	c := &presetCollector{name: name, preset: preset, promTargets: promTargets}
	c.pickPorts(t)
	return c
}

func (c *presetCollector) pickPorts(t *testing.T) {
	c.otlpHTTP, c.otlpGRPC, c.health, c.promExp = freeport.Addr(t), freeport.Addr(t), freeport.Addr(t), freeport.Addr(t)
	c.telemetryPort = freeport.Port(t)
}

// prepare gives the collector its state directory and its overlay: the
// preset's worker selectors narrowed to command lines ending in
// `--scenario <scenario>`, and the keys of set ("a::b::c" paths, as the
// collector's --set) replaced.
func (c *presetCollector) prepare(t *testing.T, scenario string, set map[string]any) {
	conf, err := confmaptest.LoadConf(c.preset)
	if err != nil {
		t.Fatal(err)
	}
	workers, ok := conf.Get("receivers::worker_process::workers").([]any)
	if !ok || len(workers) == 0 {
		t.Fatalf("%s: no receivers.worker_process.workers", c.preset)
	}
	for _, w := range workers {
		sel := w.(map[string]any)["selector"].(map[string]any)
		re, _ := sel["cmdline"].(string)
		if re == "" {
			t.Fatalf("%s: a worker selector without cmdline: %v", c.preset, sel)
		}
		sel["cmdline"] = "(?:" + re + ").*--scenario " + regexp.QuoteMeta(scenario) + "$"
	}
	c.writeOverlay(t, workers, set)
}

// writeOverlay gives the collector a new state directory and its overlay:
// workers as receivers.worker_process.workers, and the keys of each set
// ("a::b::c" paths) replaced, a later set's over an earlier one's.
func (c *presetCollector) writeOverlay(t *testing.T, workers []any, sets ...map[string]any) {
	dir := t.TempDir()
	c.stateDir = filepath.Join(dir, "state")
	overlay := map[string]any{}
	put(overlay, "receivers::worker_process::workers", workers)
	for _, set := range sets {
		for k, v := range set {
			put(overlay, k, v)
		}
	}
	b, err := json.Marshal(overlay)
	if err != nil {
		t.Fatal(err)
	}
	c.overlay = filepath.Join(dir, "overlay.json") // JSON is YAML
	writeFile(t, c.overlay, string(b))
}

// idSelector is the first worker selector of the config at path, its id
// capture `(?P<id>\S+)` narrowed to the ids starting with prefix, alone (the
// config's other selectors are left out: other scenarios run those workers),
// for workers whose command line cannot name a scenario.
func idSelector(t *testing.T, path, prefix string) []any {
	t.Helper()
	conf, err := confmaptest.LoadConf(path)
	if err != nil {
		t.Fatal(err)
	}
	workers, ok := conf.Get("receivers::worker_process::workers").([]any)
	if !ok || len(workers) == 0 {
		t.Fatalf("%s: no receivers.worker_process.workers", path)
	}
	w := workers[0].(map[string]any)
	sel := w["selector"].(map[string]any)
	re, _ := sel["cmdline"].(string)
	if !strings.Contains(re, `(?P<id>\S+)`) {
		t.Fatalf("%s: the first worker selector has no id capture: %s", path, re)
	}
	sel["cmdline"] = strings.Replace(re, `(?P<id>\S+)`, `(?P<id>`+regexp.QuoteMeta(prefix)+`\S+)`, 1)
	return []any{w}
}

// put sets path ("a::b::c") in the nested map m.
func put(m map[string]any, path string, v any) {
	keys := strings.Split(path, "::")
	for _, k := range keys[:len(keys)-1] {
		next, ok := m[k].(map[string]any)
		if !ok {
			next = map[string]any{}
			m[k] = next
		}
		m = next
	}
	m[keys[len(keys)-1]] = v
}

// start starts the real binary with the preset and the overlay on the
// collector's ports and state directory, and waits until it is ready. A
// port picked free can be taken before the collector binds it (by another
// test's outgoing connections): the first start then picks new ports, a
// restart (whose senders know its ports) tries the same ones again.
func (c *presetCollector) start(t *testing.T) {
	first := c.starts == 0
	for attempt := 1; ; attempt++ {
		c.starts++
		writeFile(t, filepath.Join(c.promTargets, c.name+".json"), fmt.Sprintf(`[{"targets": [%q]}]`, c.promExp))
		p := start(t, fmt.Sprintf("%s-collector-%d", c.name, c.starts), []string{
			"WORKERWATCH_HEALTH_ENDPOINT=" + c.health,
			"WORKERWATCH_OTLP_HTTP_ENDPOINT=" + c.otlpHTTP,
			"WORKERWATCH_OTLP_GRPC_ENDPOINT=" + c.otlpGRPC,
			"WORKERWATCH_PROMETHEUS_ENDPOINT=" + c.promExp,
			fmt.Sprintf("WORKERWATCH_TELEMETRY_PORT=%d", c.telemetryPort),
			"WORKERWATCH_STATE_DIR=" + c.stateDir,
			"WORKERWATCH_OTLP_ENDPOINT=" + c.exportTo,
		}, collectorBinary(t), "--config", c.preset, "--config", c.overlay)
		var exited bool
		eventually(t, time.Minute, 200*time.Millisecond, p.name+" ready", func() error {
			if exited = p.exited(); exited {
				return nil
			}
			code, err := getJSON("http://"+c.health+"/readyz", nil)
			if err == nil && code != 200 {
				err = fmt.Errorf("/readyz %d", code)
			}
			return err
		})
		if !exited {
			c.p = p
			c.logs = append(c.logs, p.log)
			return
		}
		if attempt >= 5 || !logHas(p, "address already in use") {
			t.Fatalf("%s exited:\n%s", p.name, p.tail())
		}
		t.Logf("e2e: %s: a port was taken before it bound it; again", p.name)
		if first {
			c.pickPorts(t)
		} else {
			time.Sleep(time.Second)
		}
	}
}

// otlpSink is an OTLP/HTTP endpoint that accepts everything and keeps
// nothing: where a preset's traces and logs exporter sends in tests that
// assert through the health API and Prometheus only.
func otlpSink(t *testing.T) string {
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		_, _ = io.Copy(io.Discard, r.Body)
		w.WriteHeader(http.StatusOK)
	}))
	t.Cleanup(s.Close)
	return s.URL
}

// errorLines are the error-level lines of every start's log.
func (c *presetCollector) errorLines() []string {
	var out []string
	for _, l := range c.logs {
		out = append(out, errorLines(l)...)
	}
	return out
}

// kill SIGKILLs the collector and waits until it is gone.
func (c *presetCollector) kill(t *testing.T) {
	if err := c.p.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	<-c.p.done
}

// stop stops the collector with SIGTERM (a clean shutdown: the checkpoint is
// written) and waits until it is gone.
func (c *presetCollector) stop(t *testing.T) { c.p.stop(t) }

// startPrometheus starts one Prometheus scraping, every second, every
// target written into the directory it returns (file_sd: a JSON file per
// collector, re-read when it changes).
func startPrometheus(t *testing.T, name string) (url, targets string) {
	promBin := need(t, "prometheus", "/usr/bin/prometheus")
	dir := t.TempDir()
	targets = filepath.Join(dir, "targets")
	if err := os.MkdirAll(targets, 0o755); err != nil {
		t.Fatal(err)
	}
	cfg := filepath.Join(dir, "prometheus.yml")
	writeFile(t, cfg, fmt.Sprintf(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: %s
    file_sd_configs:
      - files: [%q]
        refresh_interval: 1s
`, name, filepath.Join(targets, "*.json")))
	web := freeport.Addr(t)
	p := start(t, name+"-prometheus", nil, promBin, "--config.file="+cfg,
		"--storage.tsdb.path="+filepath.Join(dir, "data"), "--web.listen-address="+web)
	waitListening(t, p, web)
	return "http://" + web, targets
}

// logHas reports whether p's log contains s.
func logHas(p *proc, s string) bool {
	b, _ := os.ReadFile(p.log)
	return strings.Contains(string(b), s)
}

// promValue runs an instant query that must return at most one sample and
// returns its value (ok false when it returned none).
func promValue(base, q string) (v float64, ok bool, err error) {
	res, err := promQuery(base, q)
	if err != nil {
		return 0, false, err
	}
	switch len(res) {
	case 0:
		return 0, false, nil
	case 1:
		return res[0].float(), true, nil
	}
	return 0, false, fmt.Errorf("%q: %d samples, want at most one", q, len(res))
}

// presetVerdictBound is how long a verdict may take to show in Prometheus
// once what causes it happened: a batch of the sender's SDK, two
// evaluations, a scrape; generous for a loaded 2-core machine.
const presetVerdictBound = 30 * time.Second

// promEquals waits until the query returns exactly want (no sample counts as
// 0), within presetVerdictBound.
func promEquals(t *testing.T, prom, q string, want float64) {
	t.Helper()
	promEqualsWithin(t, prom, q, want, presetVerdictBound)
}

// promEqualsWithin is promEquals with its own bound.
func promEqualsWithin(t *testing.T, prom, q string, want float64, within time.Duration) {
	t.Helper()
	eventually(t, within, time.Second, fmt.Sprintf("PromQL %s == %g", q, want), func() error {
		v, _, err := promValue(prom, q)
		if err == nil && v != want {
			err = fmt.Errorf("got %g", v)
		}
		return err
	})
}
