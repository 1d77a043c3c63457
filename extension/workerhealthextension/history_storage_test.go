package workerhealthextension

import (
	"context"
	"encoding/json"
	"net/http"
	"testing"
	"time"

	contribfs "github.com/open-telemetry/opentelemetry-collector-contrib/extension/storage/filestorage"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/extension/extensiontest"
	"go.opentelemetry.io/collector/extension/xextension/storage"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/workerwatch/workerwatch/extension/filestorage"
	"github.com/workerwatch/workerwatch/internal/contract"
)

var storageID = component.MustNewID("file_storage")

// fileStorage starts the distribution's file_storage (contrib's, checked)
// on dir and returns a host that has it.
func fileStorage(t *testing.T, dir string) authHost {
	t.Helper()
	f := filestorage.NewFactory()
	cfg := f.CreateDefaultConfig().(*contribfs.Config)
	cfg.Directory = dir
	ext, err := f.Create(context.Background(), extensiontest.NewNopSettings(f.Type()), cfg)
	require.NoError(t, err)
	host := authHost{Host: componenttest.NewNopHost(), exts: map[component.ID]component.Component{storageID: ext}}
	require.NoError(t, ext.Start(context.Background(), host))
	t.Cleanup(func() { require.NoError(t, ext.Shutdown(context.Background())) })
	return host
}

// historyExt is an extension keeping its history in host's file_storage,
// logging to logs; it is shut down by the caller.
func historyExt(t *testing.T, host component.Host, mutate ...func(*Config)) (*workerHealth, string, *observer.ObservedLogs) {
	t.Helper()
	cfg := createDefaultConfig().(*Config)
	cfg.NetAddr.Endpoint = "127.0.0.1:0"
	id := storageID
	cfg.History.StorageID = &id
	for _, m := range mutate {
		m(cfg)
	}
	require.NoError(t, cfg.Validate())
	set := settingsForTest()
	set.ID = component.MustNewID("worker_health") // the storage file is named after it
	core, logs := observer.New(zap.InfoLevel)
	set.Logger = zap.New(core)
	wh, err := newWorkerHealth(set, cfg)
	require.NoError(t, err)
	require.NoError(t, wh.Start(context.Background(), host))
	return wh, "http://" + wh.boundAddr().String(), logs
}

func historyOf(t *testing.T, base, id string) historyBody {
	t.Helper()
	code, body := get(t, workerURL(base, id)+"/history")
	require.Equal(t, http.StatusOK, code, body)
	var h historyBody
	require.NoError(t, json.Unmarshal([]byte(body), &h))
	return h
}

// The history survives a restart through file_storage: the samples and the
// transitions from before it, then what the processor says after it.
func TestHistorySurvivesRestart(t *testing.T) {
	host := fileStorage(t, t.TempDir())
	now := time.Now().Truncate(10 * time.Second)
	l := leak{id: "openfn-worker-7", start: now.Add(-20 * time.Minute), overAt: now.Add(-9 * time.Minute), soft: 900 << 20, mainSoft: 400 << 20}

	wh, base, _ := historyExt(t, host)
	wh.now = func() time.Time { return now }
	publishHistory(wh, l.start, now, func(at time.Time) []contract.Worker {
		return []contract.Worker{l.at(at), worker("gone", contract.Healthy)}
	})
	before := historyOf(t, base, l.id)
	require.Len(t, before.Samples, 121)
	require.NoError(t, wh.Shutdown(context.Background()))

	// After the restart: nothing served until the processor publishes (the
	// history alone is not a verdict), then the worker as the processor
	// restored it, with its history behind it.
	wh2, base2, logs := historyExt(t, host)
	defer func() { require.NoError(t, wh2.Shutdown(context.Background())) }()
	assert.Equal(t, 1, logs.FilterMessage("worker history read from storage").Len())
	code, _ := get(t, workerURL(base2, l.id)+"/history")
	require.Equal(t, http.StatusNotFound, code)
	later := now.Add(30 * time.Second)
	wh2.now = func() time.Time { return later }
	restored := l.at(later)
	restored.State, restored.Reasons, restored.Since = contract.Unknown, nil, contract.TimeOf(later)
	publish(wh2, snapshot(testSource, later, restored))

	after := historyOf(t, base2, l.id)
	require.Len(t, after.Samples, 122, "the samples from before, then the new one")
	assert.Equal(t, before.Samples, after.Samples[:121])
	assert.True(t, after.Samples[121].Time.Equal(later))
	require.Len(t, after.Transitions, 3)
	assert.Equal(t, before.Transitions, after.Transitions[:2], "first seen, then unhealthy")
	assert.Equal(t, contract.Unhealthy, after.Transitions[2].From)
	assert.Equal(t, contract.Unknown, after.Transitions[2].To)

	// "gone" is not published after the restart: it goes once the window
	// has passed without it, and then from storage too.
	kept := wh2.history.Series("gone", time.Time{})
	assert.NotEmpty(t, kept.Samples, "a restored worker the processor has not reported yet is kept for a window")
}

// A value that does not decode costs that worker its history, with one
// warning naming the key; the others are read, and the collector starts.
func TestHistoryStorageCorruptValue(t *testing.T) {
	dir := t.TempDir()
	host := fileStorage(t, dir)
	wh, _, _ := historyExt(t, host)
	publishHistory(wh, t0, t0.Add(time.Minute), func(time.Time) []contract.Worker {
		return []contract.Worker{worker("good", contract.Healthy), worker("bad", contract.Healthy)}
	})
	require.NoError(t, wh.Shutdown(context.Background()))

	// Garble one key through the same storage client (the worker's header,
	// "w/<id>", internal/history/storage.go).
	se := host.exts[storageID].(storage.Extension)
	c, err := se.GetClient(context.Background(), component.KindExtension, wh.id, "history")
	require.NoError(t, err)
	require.NoError(t, c.Set(context.Background(), "w/bad", []byte{1, 0xff}))
	require.NoError(t, c.Close(context.Background()))

	wh2, _, logs := historyExt(t, host)
	defer func() { require.NoError(t, wh2.Shutdown(context.Background())) }()
	warn := logs.FilterMessage("cannot read the worker history from storage; that part starts empty")
	require.Equal(t, 1, warn.Len())
	assert.Equal(t, "w/bad", warn.All()[0].ContextMap()["key"])
	assert.Len(t, wh2.history.Series("good", time.Time{}).Samples, 7)
	bad := wh2.history.Series("bad", time.Time{})
	assert.Empty(t, bad.Samples)
	assert.Empty(t, bad.Transitions)
}

// A history kept at another resolution is replayed into the new ring.
func TestHistoryStorageOtherShape(t *testing.T) {
	host := fileStorage(t, t.TempDir())
	wh, _, _ := historyExt(t, host)
	publishHistory(wh, t0, t0.Add(10*time.Minute), func(time.Time) []contract.Worker {
		return []contract.Worker{worker("w", contract.Healthy)}
	})
	require.NoError(t, wh.Shutdown(context.Background()))

	wh2, _, _ := historyExt(t, host, func(c *Config) { c.History.Resolution = time.Minute })
	n := len(wh2.history.Series("w", time.Time{}).Samples)
	assert.Equal(t, 11, n, "61 samples at 10 s are 11 one-minute steps")
	require.NoError(t, wh2.Shutdown(context.Background()))
}

func TestHistoryStorageMisconfigured(t *testing.T) {
	for name, host := range map[string]component.Host{
		"missing":       componenttest.NewNopHost(),
		"not a storage": authHost{Host: componenttest.NewNopHost(), exts: map[component.ID]component.Component{storageID: newTestExt(t)}},
	} {
		t.Run(name, func(t *testing.T) {
			cfg := createDefaultConfig().(*Config)
			cfg.NetAddr.Endpoint = "127.0.0.1:0"
			id := storageID
			cfg.History.StorageID = &id
			wh, err := newWorkerHealth(settingsForTest(), cfg)
			require.NoError(t, err)
			err = wh.Start(context.Background(), host)
			require.ErrorContains(t, err, "history::storage_id")
			require.ErrorContains(t, err, `"file_storage"`)
			require.NoError(t, wh.Shutdown(context.Background()))
		})
	}
}
