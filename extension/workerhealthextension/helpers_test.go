package workerhealthextension

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/url"
	"testing"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/extension"
	"go.opentelemetry.io/collector/extension/extensiontest"

	"github.com/workerwatch/workerwatch/extension/workerhealthextension/internal/fleettest"
	"github.com/workerwatch/workerwatch/extension/workerhealthextension/internal/metadata"
	"github.com/workerwatch/workerwatch/internal/contract"
)

// The tests' short names for fleettest's: the source, "now", a minimal
// worker, a snapshot, and a fleet in the proportions a real one shows.
var (
	testSource     = fleettest.Source
	t0             = fleettest.T0
	worker         = fleettest.Worker
	snapshot       = fleettest.Snapshot
	realisticFleet = fleettest.RealisticFleet
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

func settingsForTest() extension.Settings { return extensiontest.NewNopSettings(metadata.Type) }

// publish hands snap to the extension as the processor does and waits until
// it is served (Publish returns before the view is built).
func publish(wh *workerHealth, snap *contract.Snapshot) {
	wh.Publish(snap)
	wh.store.Flush()
}

// boundAddr is the address being served, or nil when not started.
func (wh *workerHealth) boundAddr() net.Addr {
	wh.mu.Lock()
	defer wh.mu.Unlock()
	return wh.addr
}
