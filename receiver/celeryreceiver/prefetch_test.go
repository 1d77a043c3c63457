package celeryreceiver

import (
	"context"
	"slices"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/metric/metricdata/metricdatatest"

	"github.com/workerwatch/workerwatch/internal/contract"
	"github.com/workerwatch/workerwatch/receiver/celeryreceiver/internal/metadatatest"
)

func applyAll(r *celeryReceiver, now time.Time, evs []event) *logsOut {
	out := &logsOut{}
	r.mu.Lock()
	defer r.mu.Unlock()
	for i := range evs {
		r.apply(&evs[i], now, out)
	}
	return out
}

// Flower's prefetch time (task-received to task-started, by the worker's
// clock) and prefetched count, per worker and task name; ETA tasks are
// left out, as Flower does.
func TestPrefetch(t *testing.T) {
	r, err := newReceiver(receiverSettings(), testConfig("redis://127.0.0.1:1/0"))
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	eta := "2026-12-02T01:00:00+00:00"
	applyAll(r, now, []event{
		{Type: "worker-online", Hostname: "a@h", PID: 10, Freq: 2, Timestamp: 100},
		{Type: "task-received", Hostname: "a@h", PID: 10, UUID: "t1", Name: "long", Timestamp: 100},
		{Type: "task-started", Hostname: "a@h", PID: 10, UUID: "t1", Timestamp: 100.25},
		{Type: "task-received", Hostname: "a@h", PID: 10, UUID: "t2", Name: "ok", Timestamp: 101},
		{Type: "task-received", Hostname: "a@h", PID: 10, UUID: "t3", Name: "ok", Timestamp: 101.5},
		{Type: "task-received", Hostname: "a@h", PID: 10, UUID: "t4", Name: "ok", Timestamp: 101.5, ETA: &eta},
	})
	pts := metricPoints([]pmetric.Metrics{r.collect(now)})
	want := map[string]float64{
		"celery-worker/celery.task.prefetch.time/long":      0.25,
		"celery-worker/celery.worker.tasks.prefetched/ok":   2, // t4 has an ETA
		"celery-worker/celery.worker.tasks.prefetched/long": 0,
	}
	for k, v := range want {
		if got, ok := pts[k]; !ok || got != v {
			t.Errorf("%s = %v (%v), want %v", k, got, ok, v)
		}
	}
	if _, ok := pts["celery-worker/celery.task.prefetch.time/ok"]; ok {
		t.Errorf("prefetch time of ok before any started: %v", pts)
	}

	// t1 ends at 115; t2 starts then (14 s after it was received); t3 is
	// still prefetched; the ETA task's start is no prefetch.
	applyAll(r, now, []event{
		{Type: "task-succeeded", Hostname: "a@h", PID: 10, UUID: "t1", Timestamp: 115},
		{Type: "task-started", Hostname: "a@h", PID: 10, UUID: "t2", Timestamp: 115},
		{Type: "task-started", Hostname: "a@h", PID: 10, UUID: "t4", Timestamp: 200},
	})
	pts = metricPoints([]pmetric.Metrics{r.collect(now)})
	want = map[string]float64{
		"celery-worker/celery.task.prefetch.time/long":      0.25,
		"celery-worker/celery.task.prefetch.time/ok":        14,
		"celery-worker/celery.worker.tasks.prefetched/ok":   1,
		"celery-worker/celery.worker.tasks.prefetched/long": 0,
	}
	for k, v := range want {
		if got, ok := pts[k]; !ok || got != v {
			t.Errorf("%s = %v (%v), want %v", k, got, ok, v)
		}
	}

	// A restart under the same hostname: the old incarnation's prefetched
	// task is no longer counted.
	applyAll(r, now, []event{{Type: "worker-online", Hostname: "a@h", PID: 11, Freq: 2, Timestamp: 300}})
	pts = metricPoints([]pmetric.Metrics{r.collect(now)})
	if got := pts["celery-worker/celery.worker.tasks.prefetched/ok"]; got != 0 {
		t.Errorf("prefetched ok after the restart = %v, want 0", got)
	}
}

// Duplicate execution: the Redis transport's restore re-queues a task a
// worker still runs; a second worker receives and runs it. The counter
// counts it once, the second start carries celery.task.redelivered, and
// each worker's copy ends on its own worker's view (the broker's claim
// ends with the worker that holds it), whichever copy ends first. The same
// worker receiving a task it still runs is a duplicate too.
func TestDuplicateExecution(t *testing.T) {
	for _, firstEnds := range []string{"a@h", "b@h"} {
		t.Run("first ends "+firstEnds, func(t *testing.T) {
			tel := componenttest.NewTelemetry()
			t.Cleanup(func() { _ = tel.Shutdown(context.Background()) })
			cfg := testConfig("redis://127.0.0.1:1/0")
			cfg.ResultBackend = "redis://127.0.0.1:1/1" // the ends are deduplicated
			r, err := newReceiver(metadatatest.NewSettings(tel), cfg)
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() { _ = r.backend.client.Close() })
			now := time.Now()
			second := "b@h"
			if firstEnds == "b@h" {
				second = "a@h"
			}
			out := applyAll(r, now, []event{
				{Type: "worker-online", Hostname: "a@h", PID: 10, Freq: 2},
				{Type: "worker-online", Hostname: "b@h", PID: 20, Freq: 2},
				{Type: "task-received", Hostname: "a@h", PID: 10, UUID: "t1", Name: "long"},
				{Type: "task-started", Hostname: "a@h", PID: 10, UUID: "t1"},
				{Type: "task-received", Hostname: "b@h", PID: 20, UUID: "t1", Name: "long"},
				{Type: "task-started", Hostname: "b@h", PID: 20, UUID: "t1"},
				{Type: "task-succeeded", Hostname: firstEnds, UUID: "t1"},
				{Type: "task-succeeded", Hostname: second, UUID: "t1"},
				// The same worker receives a task it still runs.
				{Type: "task-received", Hostname: "a@h", PID: 10, UUID: "t2", Name: "long"},
				{Type: "task-started", Hostname: "a@h", PID: 10, UUID: "t2"},
				{Type: "task-received", Hostname: "a@h", PID: 10, UUID: "t2", Name: "long"},
				{Type: "task-started", Hostname: "a@h", PID: 10, UUID: "t2"},
			})
			var got []string
			for _, rc := range records([]plog.Logs{out.ld}) {
				if rc.event == contract.EventHeartbeat {
					continue
				}
				s := rc.service + "/" + rc.event + "/" + rc.worker
				if rc.service == serviceBroker {
					s += rc.attrs[contract.AttrWorkerID].(string)
				}
				s += "/" + rc.attrs[contract.AttrRunID].(string)
				if rc.attrs[attrRedelivered] == true {
					s += "/redelivered"
				}
				got = append(got, s)
			}
			slices.Sort(got)
			want := []string{
				"celery-broker/" + contract.EventClaimed + "/a@h/t1",
				"celery-broker/" + contract.EventClaimed + "/a@h/t2",
				"celery-broker/" + contract.EventClaimed + "/a@h/t2/redelivered",
				"celery-broker/" + contract.EventClaimed + "/b@h/t1/redelivered",
				// Each copy's end closes the broker's claim for its own
				// worker: the earlier copy's too (left open, that worker
				// showed drift_missing until drift.heal_after).
				"celery-broker/" + contract.EventFinished + "/a@h/t1",
				"celery-broker/" + contract.EventFinished + "/b@h/t1",
				"celery-worker/" + contract.EventFinished + "/a@h/t1",
				"celery-worker/" + contract.EventFinished + "/b@h/t1",
				"celery-worker/" + contract.EventStarted + "/a@h/t1",
				"celery-worker/" + contract.EventStarted + "/a@h/t2",
				"celery-worker/" + contract.EventStarted + "/a@h/t2/redelivered",
				"celery-worker/" + contract.EventStarted + "/b@h/t1/redelivered",
			}
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("records:\n got %q\nwant %q", got, want)
			}
			metadatatest.AssertEqualReceiverCeleryTasksRedelivered(t, tel, []metricdata.DataPoint[int64]{{Value: 2}},
				metricdatatest.IgnoreTimestamp())
			if len(r.copies) != 0 {
				t.Errorf("copies left: %v", r.copies)
			}
		})
	}
}

// A worker running an earlier copy of a duplicated task restarts: its copy
// is released on its own view (worker_restarted), the broker's claim stays
// the other worker's, and the other worker's end closes both views.
func TestDuplicateCopyRestarted(t *testing.T) {
	r, err := newReceiver(receiverSettings(), testConfig("redis://127.0.0.1:1/0"))
	if err != nil {
		t.Fatal(err)
	}
	out := applyAll(r, time.Now(), []event{
		{Type: "worker-online", Hostname: "a@h", PID: 10, Freq: 2},
		{Type: "worker-online", Hostname: "b@h", PID: 20, Freq: 2},
		{Type: "task-received", Hostname: "a@h", PID: 10, UUID: "t1", Name: "long"},
		{Type: "task-started", Hostname: "a@h", PID: 10, UUID: "t1"},
		{Type: "task-received", Hostname: "b@h", PID: 20, UUID: "t1", Name: "long"},
		{Type: "task-started", Hostname: "b@h", PID: 20, UUID: "t1"},
		{Type: "worker-online", Hostname: "a@h", PID: 11, Freq: 2},
		{Type: "task-succeeded", Hostname: "b@h", UUID: "t1"},
	})
	var got []string
	for _, rc := range records([]plog.Logs{out.ld}) {
		if rc.event == contract.EventReleased || rc.event == contract.EventFinished {
			w := rc.worker
			if rc.service == serviceBroker {
				w = rc.attrs[contract.AttrWorkerID].(string)
			}
			got = append(got, rc.service+"/"+rc.event+"/"+w)
		}
	}
	slices.Sort(got)
	want := []string{
		"celery-broker/" + contract.EventFinished + "/b@h",
		"celery-worker/" + contract.EventFinished + "/b@h",
		"celery-worker/" + contract.EventReleased + "/a@h",
	}
	if !slices.Equal(got, want) {
		t.Errorf("records:\n got %q\nwant %q", got, want)
	}
	if len(r.copies) != 0 {
		t.Errorf("copies left: %v", r.copies)
	}
}
