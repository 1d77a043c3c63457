package workerhealthextension

import (
	"encoding/json"
	"errors"
	"net/http"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componentstatus"
	"go.opentelemetry.io/collector/pipeline"

	"github.com/workerwatch/workerwatch/extension/workerhealthextension/internal/fleettest"
)

func TestLivezReadyz(t *testing.T) {
	var now time.Time
	wh := newTestExt(t, func(c *Config) { c.RecoveryDuration = time.Minute })
	wh.status.now = func() time.Time { return now }
	base := startTestExt(t, wh)

	probe := func(path string) (int, probeResult) {
		t.Helper()
		code, body := get(t, base+path)
		var res probeResult
		require.NoError(t, json.Unmarshal([]byte(body), &res), body)
		return code, res
	}
	expect := func(live, ready int, why string) {
		t.Helper()
		code, res := probe("/livez")
		assert.Equal(t, live, code, "livez %s: %+v", why, res)
		code, res = probe("/readyz")
		assert.Equal(t, ready, code, "readyz %s: %+v", why, res)
	}

	exporter := componentstatus.NewInstanceID(component.MustNewID("otlp"), component.KindExporter,
		pipeline.NewID(pipeline.SignalMetrics))
	receiver := componentstatus.NewInstanceID(component.MustNewID("worker_process"), component.KindReceiver,
		pipeline.NewID(pipeline.SignalMetrics))
	// Each event is recorded at the extension's clock's time: set it first.
	event := func(st componentstatus.Status, at time.Time, err error) *componentstatus.Event {
		now = at
		return componentstatus.NewEvent(st, componentstatus.WithError(err))
	}

	now = t0
	wh.Changed(exporter, event(componentstatus.StatusStarting, t0, nil))
	wh.Changed(receiver, event(componentstatus.StatusStarting, t0, nil))
	expect(200, 503, "before pipelines are ready")
	_, res := probe("/readyz")
	assert.Contains(t, res.Reasons, "pipelines are not started yet")

	wh.Changed(exporter, event(componentstatus.StatusOK, t0, nil))
	wh.Changed(receiver, event(componentstatus.StatusOK, t0, nil))
	require.NoError(t, wh.Ready())
	expect(200, 200, "all ok")
	_, res = probe("/readyz")
	assert.Equal(t, "ok", res.Status)
	assert.Empty(t, res.Reasons)
	require.Len(t, res.Components, 2)
	assert.Equal(t, "exporter", res.Components[0].Kind)
	assert.Equal(t, []string{"metrics"}, res.Components[0].Pipelines)
	assert.Equal(t, "ok", res.Components[0].Status)

	// A recoverable error inside recovery_duration: still ready. Repeated
	// error events do not restart the clock.
	boom := errors.New("backend unreachable")
	wh.Changed(exporter, event(componentstatus.StatusRecoverableError, t0.Add(time.Second), boom))
	now = t0.Add(30 * time.Second)
	wh.Changed(exporter, event(componentstatus.StatusRecoverableError, now, boom))
	expect(200, 200, "recoverable error within recovery_duration")

	now = t0.Add(62 * time.Second)
	expect(200, 503, "recoverable error past recovery_duration")
	_, res = probe("/readyz")
	require.Len(t, res.Reasons, 1)
	assert.Contains(t, res.Reasons[0], "exporter otlp in recoverable_error for 1m1s")
	assert.Contains(t, res.Reasons[0], "backend unreachable")

	_, res = probe("/readyz")
	require.NotNil(t, res.Components[0].ErrorSince)
	assert.True(t, t0.Add(time.Second).Equal(*res.Components[0].ErrorSince), "the first error event starts the episode")
	assert.Equal(t, "backend unreachable", res.Components[0].Error)

	// Recovery makes it ready again at once, and ends the episode.
	wh.Changed(exporter, event(componentstatus.StatusOK, now, nil))
	expect(200, 200, "recovered")
	_, res = probe("/readyz")
	assert.Equal(t, "ok", res.Components[0].Status)
	assert.Nil(t, res.Components[0].ErrorSince)
	assert.Empty(t, res.Components[0].Error)

	// A permanent error also counts after recovery_duration.
	wh.Changed(receiver, event(componentstatus.StatusPermanentError, now, errors.New("cannot read /proc")))
	expect(200, 200, "permanent error just now")
	now = now.Add(2 * time.Minute)
	expect(200, 503, "permanent error for 2m")

	// Fatal: not live, not ready.
	wh.Changed(receiver, event(componentstatus.StatusFatalError, now, errors.New("panic")))
	expect(503, 503, "fatal")
	_, res = probe("/livez")
	assert.Equal(t, "fail", res.Status)
	assert.Contains(t, res.Reasons[0], "receiver worker_process failed fatally: panic")
}

func TestReadyzShutdownAndZeroRecovery(t *testing.T) {
	wh := newTestExt(t, func(c *Config) { c.RecoveryDuration = 0 })
	base := startTestExt(t, wh)
	require.NoError(t, wh.Ready())
	code, _ := get(t, base+"/readyz")
	assert.Equal(t, http.StatusOK, code)

	// recovery_duration 0: any error is not ready at once.
	id := componentstatus.NewInstanceID(component.MustNewID("otlp"), component.KindExporter)
	wh.Changed(id, componentstatus.NewRecoverableErrorEvent(errors.New("x")))
	code, _ = get(t, base+"/readyz")
	assert.Equal(t, http.StatusServiceUnavailable, code)
	wh.Changed(id, componentstatus.NewEvent(componentstatus.StatusOK))

	// Shutting down: not ready (take it out of the load balancer) but live
	// (do not restart what is already stopping).
	require.NoError(t, wh.NotReady())
	code, body := get(t, base+"/readyz")
	assert.Equal(t, http.StatusServiceUnavailable, code)
	assert.Contains(t, body, "shutting down")
	code, _ = get(t, base+"/livez")
	assert.Equal(t, http.StatusOK, code)

	// Nil events from a misbehaving caller are ignored.
	wh.Changed(nil, nil)
	wh.Changed(id, nil)
	code, body = get(t, base+"/livez")
	assert.Equal(t, http.StatusOK, code)
	assert.Contains(t, body, `"status":"ok"`)
}

// TestReadyzServesTheRestoredFleet: the processors publish what their
// checkpoint restored during Start, before the collector calls Ready, and
// the view is built in the background. /readyz says 200 only once that view
// is served, so a scheduler asking at the first 200 finds every restored
// worker (a restart under load once answered an empty fleet: e2e
// TestProcessorFloodBounds). The fleet is large enough that its index takes
// far longer than the calls after Ready.
func TestReadyzServesTheRestoredFleet(t *testing.T) {
	wh := newTestExt(t)
	base := startTestExt(t, wh)
	const n = 20000
	snap := fleettest.RealisticFleet(n, time.Now())
	last := snap.Workers[n-1].ID
	wh.Publish(snap)
	require.NoError(t, wh.Ready())
	// The count, not the map (assert.Len would print 20,000 entries).
	if got := len(wh.store.Load().ByIDOrder); got != n {
		t.Errorf("%d of the %d restored workers in the view when Ready returned", got, n)
	}
	code, _ := get(t, base+"/readyz")
	assert.Equal(t, http.StatusOK, code)
	code, body := get(t, workerURL(base, last))
	assert.Equal(t, http.StatusOK, code, body)
}
