package workerhealthextension

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"io"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/extension/extensiontest"

	"github.com/workerwatch/workerwatch/extension/workerhealthextension/internal/metadata"
)

// TestWrkLoad is the load test behind the performance targets; it runs only
// when asked, without -race:
//
//	WORKERHEALTH_WRK=1 go test -run TestWrkLoad -v ./extension/workerhealthextension/
//
// It serves 10,000 workers, times /health/workers, then runs
// `wrk -t1 -c8 -d30s` against /health/workers/{id} with random ids from the
// fleet (testdata/wrk/random_ids.lua). WORKERHEALTH_WRK_DURATION overrides 30s,
// WORKERHEALTH_WRK_SCRIPT the Lua script. WORKERHEALTH_WRK_LIVE=1 runs it as in a
// running collector: every worker with 30 minutes of history, and a new
// snapshot published every 5 s during the run.
func TestWrkLoad(t *testing.T) {
	if os.Getenv("WORKERHEALTH_WRK") != "1" {
		t.Skip("set WORKERHEALTH_WRK=1 to run the wrk load test")
	}
	wrk, err := exec.LookPath("wrk")
	require.NoError(t, err, "wrk is required (apt-get install wrk)")
	duration := cmp.Or(os.Getenv("WORKERHEALTH_WRK_DURATION"), "30s")

	// A real metrics SDK, as in a collector, so the per-request telemetry
	// (otelhttp and the extension's own counter) is part of the cost.
	cfg := createDefaultConfig().(*Config)
	cfg.NetAddr.Endpoint = "127.0.0.1:0"
	set := extensiontest.NewNopSettings(metadata.Type)
	tel := componenttest.NewTelemetry()
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	set.MeterProvider = tel.NewTelemetrySettings().MeterProvider
	wh, err := newWorkerHealth(set, cfg)
	require.NoError(t, err)

	fleet := realisticFleet(10_000, time.Now())
	if os.Getenv("WORKERHEALTH_WRK_LIVE") == "1" {
		// As in a running collector: every worker's history full, and a
		// new snapshot every 5 s while wrk runs (indexed and recorded by
		// the background goroutine, beside the requests).
		fillHistory(wh, fleet)
		stop := make(chan struct{})
		done := make(chan struct{})
		t.Cleanup(func() { close(stop); <-done })
		go func() {
			defer close(done)
			s, tick := fleet, time.NewTicker(5*time.Second)
			defer tick.Stop()
			for i := 0; ; i++ {
				select {
				case <-stop:
					return
				case <-tick.C:
					s = nextEvaluation(s, i)
					wh.Publish(s)
				}
			}
		}()
	}
	start := time.Now()
	wh.Publish(fleet)
	returned := time.Since(start)
	wh.store.Flush()
	t.Logf("publish of 10,000 workers: Publish returned after %s, served after %s", returned, time.Since(start))
	base := startTestExt(t, wh)

	// /health/workers for the whole fleet, end to end over HTTP.
	var took []time.Duration
	for range 20 {
		start := time.Now()
		resp, err := http.Get(base + "/health/workers")
		require.NoError(t, err)
		n, _ := io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		took = append(took, time.Since(start))
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.Greater(t, n, int64(1_000_000))
	}
	slices.Sort(took)
	t.Logf("GET /health/workers (10,000 workers): median %s, max %s", took[len(took)/2], took[len(took)-1])
	assert.Less(t, took[len(took)/2], 50*time.Millisecond, "median /health/workers")

	ids := filepath.Join(t.TempDir(), "ids.txt")
	var b strings.Builder
	for _, w := range fleet.Workers {
		b.WriteString(url.PathEscape(w.ID))
		b.WriteByte('\n')
	}
	require.NoError(t, os.WriteFile(ids, []byte(b.String()), 0o600))

	script, err := filepath.Abs(cmp.Or(os.Getenv("WORKERHEALTH_WRK_SCRIPT"), filepath.Join("testdata", "wrk", "random_ids.lua")))
	require.NoError(t, err)
	cmd := exec.Command(wrk, "-t1", "-c8", "-d"+duration, "--latency", "-s", script, base, "--", ids)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	require.NoError(t, cmd.Run(), out.String())
	t.Logf("wrk output:\n%s", out.String())

	res := map[string]float64{}
	sc := bufio.NewScanner(&out)
	for sc.Scan() {
		if k, v, ok := strings.Cut(sc.Text(), " "); ok && strings.HasPrefix(k, "ww_") {
			f, err := strconv.ParseFloat(v, 64)
			require.NoError(t, err)
			res[k] = f
		}
	}
	require.Contains(t, res, "ww_rps", "the Lua script's summary is missing")
	assert.GreaterOrEqual(t, res["ww_rps"], 5000.0, "requests/s")
	assert.Less(t, res["ww_p99_ms"], 5.0, "p99 latency (ms)")
	assert.Zero(t, res["ww_unexpected"], "responses other than 200/503")
	assert.Zero(t, res["ww_socket_errors"], "socket errors")
}
