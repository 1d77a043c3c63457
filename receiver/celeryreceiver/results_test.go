package celeryreceiver

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/open-telemetry/opentelemetry-collector-contrib/extension/storage/filestorage"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componentstatus"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/extension/extensiontest"
	"go.opentelemetry.io/collector/receiver/receivertest"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/metric/metricdata/metricdatatest"
	"go.uber.org/zap/zaptest"

	"github.com/workerwatch/workerwatch/internal/contract"
	"github.com/workerwatch/workerwatch/internal/redistest"
	"github.com/workerwatch/workerwatch/receiver/celeryreceiver/internal/metadata"
	"github.com/workerwatch/workerwatch/receiver/celeryreceiver/internal/metadatatest"
)

// extHost is a host with extensions.
type extHost struct {
	component.Host
	ext map[component.ID]component.Component
}

func (h extHost) GetExtensions() map[component.ID]component.Component { return h.ext }

// publishEvents publishes events as kombu's Redis transport does: a JSON
// envelope with the body base64-encoded, on /0.celeryev/<routing key>.
func publishEvents(t *testing.T, srv *redistest.Server, evs ...map[string]any) {
	t.Helper()
	body, err := json.Marshal(evs)
	if err != nil {
		t.Fatal(err)
	}
	env, _ := json.Marshal(map[string]any{
		"body": base64.StdEncoding.EncodeToString(body), "content-encoding": "utf-8",
		"content-type": "application/json", "headers": map[string]any{"hostname": "w1@host"},
		"properties": map[string]any{"body_encoding": "base64", "delivery_mode": 1},
	})
	if err := redisClient(t, srv).Publish(context.Background(), "/0.celeryev/task.multi", string(env)).Err(); err != nil {
		t.Fatal(err)
	}
}

func taskEvent(typ, id string, ts time.Time) map[string]any {
	return map[string]any{
		"type": typ, "uuid": id, "hostname": "w1@host", "pid": 4242, "clock": 1,
		"timestamp": float64(ts.UnixNano()) / 1e9, "name": "tasks.work", "retries": 0,
	}
}

// storeMeta writes a result as Celery 5.2.6's Redis backend does
// (KeyValueStoreBackend._store_result: json of _get_result_meta, SETEX).
func storeMeta(t *testing.T, srv *redistest.Server, meta map[string]any) {
	t.Helper()
	raw, _ := json.Marshal(meta)
	if err := redisClient(t, srv).Set(context.Background(), resultKeyPrefix+meta["task_id"].(string), raw, 24*time.Hour).Err(); err != nil {
		t.Fatal(err)
	}
}

func dateDone(ts time.Time) string { return ts.UTC().Format("2006-01-02T15:04:05.000000") }

type resultHarness struct {
	logs *consumertest.LogsSink
	rcv  *celeryReceiver
	tel  *componenttest.Telemetry
}

func startWithStorage(t *testing.T, cfg *Config, host component.Host) *resultHarness {
	t.Helper()
	tel := componenttest.NewTelemetry()
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	set := receivertest.NewNopSettings(metadata.Type)
	set.TelemetrySettings = tel.NewTelemetrySettings()
	set.Logger = zaptest.NewLogger(t)
	set.ID = component.NewID(metadata.Type) // the same id across restarts, as in a collector
	h := &resultHarness{logs: new(consumertest.LogsSink), tel: tel}
	lr, err := NewFactory().CreateLogs(context.Background(), set, cfg, h.logs)
	if err != nil {
		t.Fatal(err)
	}
	h.rcv = lr.(*celeryReceiver)
	if err := lr.Start(context.Background(), host); err != nil {
		t.Fatal(err)
	}
	return h
}

// ends are the worker-view run ends of run.
func ends(h *resultHarness, run string) []rec {
	var out []rec
	for _, r := range records(h.logs.AllLogs()) {
		if r.service == serviceWorker && r.attrs[contract.AttrRunID] == run &&
			(r.event == contract.EventFinished || r.event == contract.EventKilled) {
			out = append(out, r)
		}
	}
	return out
}

// TestResultBackendCatchUp: tasks start, the receiver stops, the tasks
// end while it is down (their events lost: Redis pub/sub keeps none), the
// results are written as Celery writes them; the receiver started again
// (its state in a real file_storage) ends each run exactly once with
// Celery's outcome, a late end event included.
func TestResultBackendCatchUp(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	url := fmt.Sprintf("redis://%s/0", srv.Addr)

	sf := filestorage.NewFactory()
	scfg := sf.CreateDefaultConfig().(*filestorage.Config)
	scfg.Directory = t.TempDir()
	stID := component.MustNewID("file_storage")
	st, err := sf.Create(ctx, extensiontest.NewNopSettings(sf.Type()), scfg)
	if err != nil {
		t.Fatal(err)
	}
	host := extHost{Host: componenttest.NewNopHost(), ext: map[component.ID]component.Component{stID: st}}
	if err := st.Start(ctx, host); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = st.Shutdown(ctx) })

	cfg := testConfig(url)
	cfg.ResultBackend = url
	cfg.StorageID = &stID
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}

	sh := &statusHost{Host: host}
	h1 := startWithStorage(t, cfg, sh)
	waitFor(t, 20*time.Second, "subscribed", func() bool {
		e := sh.last()
		return e != nil && e.Status() == componentstatus.StatusOK
	})
	t0 := time.Now()
	ok, lost, quick := "aaaa0000-0000-0000-0000-000000000001", "bbbb0000-0000-0000-0000-000000000002", "cccc0000-0000-0000-0000-000000000003"
	publishEvents(t, srv,
		taskEvent("task-received", ok, t0), taskEvent("task-started", ok, t0),
		taskEvent("task-received", lost, t0), taskEvent("task-started", lost, t0),
		taskEvent("task-received", quick, t0), taskEvent("task-started", quick, t0),
		taskEvent("task-succeeded", quick, t0.Add(10*time.Millisecond)))
	waitFor(t, 20*time.Second, "the ended task seen", func() bool { return len(ends(h1, quick)) == 1 })
	// quick's result was written before its end event (Celery stores it
	// first): the catch-up must not end it again.
	storeMeta(t, srv, map[string]any{
		"status": "SUCCESS", "result": 1, "traceback": nil, "children": []any{},
		"date_done": dateDone(t0.Add(5 * time.Millisecond)), "task_id": quick,
	})
	if err := h1.rcv.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}

	// While the collector is down: ok succeeds, lost's child is SIGKILLed,
	// other (never seen start) runs with result_extended, and one without
	// a worker, one older than the last event.
	down := time.Now().Add(time.Second)
	storeMeta(t, srv, map[string]any{
		"status": "SUCCESS", "result": 42, "traceback": nil, "children": []any{},
		"date_done": dateDone(down), "task_id": ok,
	})
	storeMeta(t, srv, map[string]any{
		"status": "FAILURE", "children": []any{}, "date_done": dateDone(down), "task_id": lost,
		"result": map[string]any{
			"exc_type": "WorkerLostError", "exc_module": "billiard.exceptions",
			"exc_message": []any{"Worker exited prematurely: signal 9 (SIGKILL) Job: 3."},
		},
		// Request.on_failure (celery/worker/request.py) stores a lost
		// worker's failure without a traceback: only exc_type/exc_message.
		"traceback": nil,
	})
	other, noWorker, old := "dddd0000-0000-0000-0000-000000000004", "eeee0000-0000-0000-0000-000000000005", "ffff0000-0000-0000-0000-000000000006"
	storeMeta(t, srv, map[string]any{
		"status": "FAILURE", "children": []any{}, "date_done": dateDone(down), "task_id": other,
		"result":    map[string]any{"exc_type": "ValueError", "exc_module": "builtins", "exc_message": []any{"boom"}},
		"traceback": "Traceback (most recent call last):\nValueError: boom\n",
		"name":      "tasks.work", "worker": "w2@host", "retries": 0, "queue": "celery", "args": []any{}, "kwargs": map[string]any{},
	})
	storeMeta(t, srv, map[string]any{
		"status": "SUCCESS", "result": 1, "traceback": nil, "children": []any{},
		"date_done": dateDone(down), "task_id": noWorker,
	})
	storeMeta(t, srv, map[string]any{
		"status": "SUCCESS", "result": 1, "traceback": nil, "children": []any{},
		"date_done": dateDone(t0.Add(-time.Hour)), "task_id": old, "worker": "w1@host",
	})

	cfg2 := *cfg
	h2 := startWithStorage(t, &cfg2, host)
	t.Cleanup(func() { _ = h2.rcv.Shutdown(ctx) })
	waitFor(t, 20*time.Second, "the missed ends read from the result backend", func() bool {
		return len(ends(h2, ok)) > 0 && len(ends(h2, lost)) > 0 && len(ends(h2, other)) > 0
	})
	// A late end event of ok (as if delivered after the catch-up) and a
	// marker event: ok is not ended twice.
	marker := "99990000-0000-0000-0000-000000000009"
	publishEvents(t, srv, taskEvent("task-succeeded", ok, down), taskEvent("task-started", marker, down))
	waitFor(t, 20*time.Second, "the marker", func() bool {
		for _, r := range records(h2.logs.AllLogs()) {
			if r.event == contract.EventStarted && r.attrs[contract.AttrRunID] == marker {
				return true
			}
		}
		return false
	})
	if e := ends(h2, ok); len(e) != 1 || e[0].worker != "w1@host" || e[0].event != contract.EventFinished ||
		e[0].attrs[contract.AttrResult] != contract.ResultSuccess || e[0].attrs[attrFromResultBackend] != true {
		t.Errorf("ok: %+v", e)
	}
	if e := ends(h2, lost); len(e) != 1 || e[0].worker != "w1@host" || e[0].event != contract.EventKilled ||
		e[0].attrs[contract.AttrKillReason] != contract.KillOOM || e[0].attrs[contract.AttrErrorType] != "WorkerLostError" {
		t.Errorf("lost: %+v", e)
	}
	if e := ends(h2, other); len(e) != 1 || e[0].worker != "w2@host" || e[0].event != contract.EventFinished ||
		e[0].attrs[contract.AttrResult] != contract.ResultFailure || e[0].attrs[contract.AttrErrorType] != "ValueError" {
		t.Errorf("other: %+v", e)
	}
	for _, id := range []string{quick, noWorker, old} {
		if e := ends(h2, id); len(e) != 0 {
			t.Errorf("%s ended again or without cause: %+v", id, e)
		}
	}
	if len(ends(h1, quick)) != 1 {
		t.Errorf("quick: %+v", ends(h1, quick))
	}
	// The broker view also ends the recovered runs.
	brokerEnds := 0
	for _, r := range records(h2.logs.AllLogs()) {
		if r.service == serviceBroker && r.event == contract.EventFinished && (r.attrs[contract.AttrRunID] == ok || r.attrs[contract.AttrRunID] == lost) {
			brokerEnds++
		}
	}
	if brokerEnds != 2 {
		t.Errorf("broker ends: %d, want 2", brokerEnds)
	}
	// Counted: ok, lost and other recovered; noWorker read but not
	// attributable (no worker in its result).
	metadatatest.AssertEqualReceiverCeleryResultsRecovered(t, h2.tel,
		[]metricdata.DataPoint[int64]{{Value: 3}}, metricdatatest.IgnoreTimestamp())
	metadatatest.AssertEqualReceiverCeleryResultsUnattributed(t, h2.tel,
		[]metricdata.DataPoint[int64]{{Value: 1}}, metricdatatest.IgnoreTimestamp())
}

func TestResultBackendValidate(t *testing.T) {
	cfg := testConfig("redis://127.0.0.1:6379/0")
	cfg.ResultBackend = "rpc://"
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "result_backend") {
		t.Errorf("rpc:// result_backend: %v", err)
	}
	cfg = testConfig("redis://127.0.0.1:6379/0")
	cfg.ResultBackend = "redis://127.0.0.1:6379/1"
	cfg.ResultScanLimit = 0
	if err := cfg.Validate(); err == nil || !strings.Contains(err.Error(), "result_scan_limit") {
		t.Errorf("result_scan_limit 0: %v", err)
	}
}
