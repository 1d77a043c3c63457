package celeryreceiver

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component/componentstatus"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/metric/metricdata/metricdatatest"

	"github.com/workerwatch/workerwatch/internal/contract"
	"github.com/workerwatch/workerwatch/internal/freeport"
	"github.com/workerwatch/workerwatch/internal/redistest"
	"github.com/workerwatch/workerwatch/receiver/celeryreceiver/internal/metadatatest"
)

func lastStatus(h *statusHost) (componentstatus.Status, string) {
	e := h.last()
	if e == nil {
		return componentstatus.StatusNone, ""
	}
	msg := ""
	if e.Err() != nil {
		msg = e.Err().Error()
	}
	return e.Status(), msg
}

// A broker that is down at start, then up: a recoverable error, then OK;
// the receiver starts either way and reads events once it is up.
func TestBrokerDownThenUp(t *testing.T) {
	port := freeport.Port(t)
	s := startReceiver(t, testConfig(fmt.Sprintf("redis://127.0.0.1:%d/0", port)))
	waitFor(t, 20*time.Second, "a recoverable error while the broker is down", func() bool {
		st, msg := lastStatus(s.host)
		return st == componentstatus.StatusRecoverableError && strings.Contains(msg, "connect")
	})
	srv := redistest.StartOn(t, port)
	waitFor(t, 20*time.Second, "OK once the broker is up", func() bool {
		st, _ := lastStatus(s.host)
		return st == componentstatus.StatusOK
	})
	publish(t, srv, loadRecorded(t, "redis-run.tsv")[:2])
	waitFor(t, 20*time.Second, "the events after the broker came up", func() bool { return s.logs.LogRecordCount() > 0 })
	// The broker goes away again: reported, and back when it returns.
	srv.Stop()
	waitFor(t, 30*time.Second, "a recoverable error after the broker stopped", func() bool {
		st, _ := lastStatus(s.host)
		return st == componentstatus.StatusRecoverableError
	})
	redistest.StartOn(t, port)
	waitFor(t, 30*time.Second, "OK after the broker returned", func() bool {
		st, _ := lastStatus(s.host)
		return st == componentstatus.StatusOK
	})
}

// Wrong credentials: a recoverable error naming the refusal, no crash;
// the right ones (password from the config, not the URL) connect.
func TestBrokerCredentials(t *testing.T) {
	srv := redistest.Start(t, "--requirepass", "s3cret")
	bad := startReceiver(t, testConfig(fmt.Sprintf("redis://:wrong@%s/0", srv.Addr)))
	waitFor(t, 20*time.Second, "a refusal reported", func() bool {
		st, msg := lastStatus(bad.host)
		return st == componentstatus.StatusRecoverableError && (strings.Contains(msg, "WRONGPASS") || strings.Contains(msg, "invalid"))
	})
	cfg := testConfig(fmt.Sprintf("redis://%s/0", srv.Addr))
	cfg.Password = "s3cret"
	good := startReceiver(t, cfg)
	waitFor(t, 20*time.Second, "OK with the right password", func() bool {
		st, _ := lastStatus(good.host)
		return st == componentstatus.StatusOK
	})
}

// A worker restarted under the same hostname (a new main pid): the runs
// its earlier incarnation started are let go on both views; a task id
// started again by another worker while one holds it is a redelivery.
func TestIncarnationsAndRedelivery(t *testing.T) {
	r, err := newReceiver(receiverSettings(), testConfig("redis://127.0.0.1:1/0"))
	if err != nil {
		t.Fatal(err)
	}
	out := &logsOut{}
	now := time.Now()
	for _, ev := range []event{
		{Type: "worker-online", Hostname: "a@h", PID: 10, Freq: 2, Timestamp: 1},
		{Type: "task-received", Hostname: "a@h", PID: 10, UUID: "t1", Name: "x"},
		{Type: "task-started", Hostname: "a@h", PID: 10, UUID: "t1"},
		{Type: "task-received", Hostname: "a@h", PID: 10, UUID: "t2", Name: "x"},
		{Type: "task-started", Hostname: "a@h", PID: 10, UUID: "t2"},
		// t2 is redelivered to b@h (visibility timeout) and started there.
		{Type: "task-received", Hostname: "b@h", PID: 20, UUID: "t2", Name: "x"},
		{Type: "task-started", Hostname: "b@h", PID: 20, UUID: "t2"},
		// a@h is SIGKILLed and restarted: a new pid.
		{Type: "worker-online", Hostname: "a@h", PID: 11, Freq: 2},
	} {
		r.apply(&ev, now, out)
	}
	recs := records([]plog.Logs{out.ld})
	var released, redelivered []string
	for _, rc := range recs {
		if rc.event == contract.EventReleased && rc.attrs[attrReleaseReason] == releaseRestarted {
			released = append(released, rc.service+":"+rc.attrs[contract.AttrRunID].(string))
		}
		if rc.attrs[attrRedelivered] == true {
			redelivered = append(redelivered, rc.service+":"+rc.attrs[contract.AttrRunID].(string))
		}
	}
	sort.Strings(released)
	// t1 on both views; t2, which b@h runs again, on a@h's view only (its
	// copy died with it; the broker's claim is b@h's).
	if strings.Join(released, ",") != "celery-broker:t1,celery-worker:t1,celery-worker:t2" {
		t.Errorf("released: %v", released)
	}
	sort.Strings(redelivered)
	if strings.Join(redelivered, ",") != "celery-broker:t2,celery-worker:t2" {
		t.Errorf("redelivered: %v", redelivered)
	}
}

// Malformed input is counted and skipped, never a crash: every one of
// these messages counts once as malformed and makes no record.
func TestMalformed(t *testing.T) {
	tel := componenttest.NewTelemetry()
	t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
	r, err := newReceiver(metadatatest.NewSettings(tel), testConfig("redis://127.0.0.1:1/0"))
	if err != nil {
		t.Fatal(err)
	}
	sink := new(consumertest.LogsSink)
	r.logs = sink
	msgs := []string{
		"", "{", `{"body": "!!!", "properties": {"body_encoding": "base64"}}`,
		`{"body": "bm90IGpzb24=", "properties": {"body_encoding": "base64"}}`, `{"body": "W3sidHlwZSI6IDF9XQ==", "properties": {"body_encoding": "base64"}}`,
		`{"body": "e30=", "properties": {"body_encoding": "base64"}}`,
	}
	for _, p := range msgs {
		r.handleEnvelope([]byte(p))
	}
	metadatatest.AssertEqualReceiverCeleryMessagesMalformed(t, tel,
		[]metricdata.DataPoint[int64]{{Value: int64(len(msgs))}}, metricdatatest.IgnoreTimestamp())
	if n := sink.LogRecordCount(); n != 0 {
		t.Errorf("%d records from malformed messages", n)
	}
}

// The first pipeline's Shutdown stops the receiver for both (the
// collector's shared-component convention): the collector stops that
// pipeline's exporters right after, and a receiver still delivering into
// it failed there (CI run 100: "database not open" from the logs
// exporter's queue). The second call does nothing.
func TestFirstShutdownStopsBothPipelines(t *testing.T) {
	port := freeport.Port(t) // nothing listens: the start still succeeds
	cfg := testConfig(fmt.Sprintf("redis://127.0.0.1:%d/0", port))
	s := startReceiver(t, cfg)
	require.NoError(t, s.r.Shutdown(context.Background()))
	sharedMu.Lock()
	_, still := shared[cfg]
	sharedMu.Unlock()
	require.False(t, still, "the first Shutdown stopped and released the shared receiver")
	require.NoError(t, s.r.Shutdown(context.Background()))
}
