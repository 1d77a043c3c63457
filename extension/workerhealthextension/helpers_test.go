package workerhealthextension

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/extension"
	"go.opentelemetry.io/collector/extension/extensiontest"

	"github.com/workerwatch/workerwatch/extension/workerhealthextension/internal/metadata"
	"github.com/workerwatch/workerwatch/internal/contract"
)

var (
	testSource = component.MustNewIDWithName("worker_health", "fleet")
	t0         = time.Date(2025, 11, 29, 12, 0, 0, 0, time.UTC)
)

// newTestExt builds an extension on a free loopback port.
func newTestExt(t testing.TB, mutate ...func(*Config)) *workerHealth {
	t.Helper()
	cfg := createDefaultConfig().(*Config)
	cfg.NetAddr.Endpoint = "127.0.0.1:0"
	for _, m := range mutate {
		m(cfg)
	}
	require.NoError(t, cfg.Validate())
	wh, err := newWorkerHealth(extensiontest.NewNopSettings(metadata.Type), cfg)
	require.NoError(t, err)
	return wh
}

// startTestExt starts wh and returns its base URL; it is shut down with t.
func startTestExt(t testing.TB, wh *workerHealth) string {
	t.Helper()
	require.NoError(t, wh.Start(context.Background(), componenttest.NewNopHost()))
	t.Cleanup(func() { require.NoError(t, wh.Shutdown(context.Background())) })
	return "http://" + wh.boundAddr().String()
}

// get fetches base+path and returns the code and body.
func get(t testing.TB, rawURL string) (int, string) {
	t.Helper()
	resp, err := http.Get(rawURL)
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(b)
}

func workerURL(base, id string) string { return base + "/health/workers/" + url.PathEscape(id) }

// worker is a minimal worker in state st.
func worker(id string, st contract.State) contract.Worker {
	return contract.Worker{
		ID:       id,
		State:    st,
		Reasons:  []contract.Reason{},
		Since:    t0.Add(-5 * time.Minute),
		LastSeen: t0.Add(-2 * time.Second),
		Memory:   contract.Memory{RSSBytes: 300 << 20, SoftLimitBytes: 500 << 20},
		Runs:     contract.Runs{Worker: []string{}, Scheduler: []string{}, Capacity: 5},
		Drift:    contract.Drift{Missing: []string{}, Orphaned: []string{}},
	}
}

func snapshot(src component.ID, at time.Time, workers ...contract.Worker) *contract.Snapshot {
	return &contract.Snapshot{Source: src, Time: at, Workers: workers, Fleet: contract.Fleet{Pending: -1}}
}

// realisticFleet is n workers in the proportions a real fleet shows, with
// reasons, memory, runs and drift that match their states. Ids are sorted.
func realisticFleet(n int, at time.Time) *contract.Snapshot {
	ws := make([]contract.Worker, 0, n)
	for i := range n {
		id := fmt.Sprintf("openfn-worker-%05d", i)
		w := worker(id, contract.Healthy)
		w.Name = fmt.Sprintf("ws-worker-%d.pool-%c", i, 'a'+rune(i%3))
		w.Since = at.Add(-time.Duration(i%97+3) * time.Minute)
		w.LastSeen = at.Add(-time.Duration(i%9+1) * time.Second)
		w.Memory.RSSBytes = int64(120+i*53%270) << 20
		runs := i % 4
		for r := range runs {
			w.Runs.Worker = append(w.Runs.Worker, fmt.Sprintf("run-%d-%d", i, r))
			w.Runs.Scheduler = append(w.Runs.Scheduler, fmt.Sprintf("run-%d-%d", i, r))
		}
		switch p := i * 37 % 100; { // a permutation of 0..99: small fleets get every state too
		case p < 85:
		case p < 91:
			w.State = contract.Degraded
			w.Memory.RSSBytes = 430 << 20
			w.Reasons = []contract.Reason{{
				Code: "memory_near_soft_limit", Message: "tree memory above 80% of the soft limit",
				Value: float64(w.Memory.RSSBytes), Threshold: float64(w.Memory.SoftLimitBytes) * 0.8, Since: at.Add(-3 * time.Minute),
			}}
		case p < 95:
			w.State = contract.Unhealthy
			w.Memory.RSSBytes = 612 << 20
			w.Memory.OverSamples = 4
			w.Reasons = []contract.Reason{{
				Code: "memory_over_soft_limit", Message: "tree memory over the soft limit for 4 samples",
				Value: float64(w.Memory.RSSBytes), Threshold: float64(w.Memory.SoftLimitBytes), Since: at.Add(-2 * time.Minute),
			}}
		case p < 97:
			w.State = contract.Stalled
			w.Runs.Worker = []string{}
			w.Drift.Missing = []string{fmt.Sprintf("run-%d-lost", i)}
			w.Runs.Scheduler = w.Drift.Missing
			w.Reasons = []contract.Reason{{
				Code: "no_claim", Message: "work pending, nothing claimed for 10m",
				Value: 600, Threshold: 300, Since: at.Add(-10 * time.Minute),
			}}
		case p < 98:
			w.State = contract.Lost
			w.LastSeen = at.Add(-7 * time.Minute)
			w.Reasons = []contract.Reason{{
				Code: "no_telemetry", Message: "no telemetry and no process for 5m",
				Value: 420, Threshold: 300, Since: at.Add(-7 * time.Minute),
			}}
		default:
			w.State = contract.Unknown
			w.LastSeen = time.Time{}
		}
		ws = append(ws, w)
	}
	s := snapshot(testSource, at, ws...)
	s.Fleet = contract.Fleet{Pending: 12, IdleCapacity: int64(n)}
	return s
}

func settingsForTest() extension.Settings { return extensiontest.NewNopSettings(metadata.Type) }

// publish hands snap to the extension as the processor does and waits until
// it is served (Publish returns before the view is built).
func publish(wh *workerHealth, snap *contract.Snapshot) {
	wh.Publish(snap)
	wh.store.flush()
}

// put is publish for a bare store.
func put(s *store, snap *contract.Snapshot) {
	s.publish(snap)
	s.flush()
}
