package celeryreceiver

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"go.opentelemetry.io/collector/component/componentstatus"
	"go.opentelemetry.io/collector/confmap/confmaptest"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"

	"github.com/workerwatch/workerwatch/internal/contract"
	"github.com/workerwatch/workerwatch/internal/redistest"
)

func testConfig(broker string) *Config {
	cfg := createDefaultConfig().(*Config)
	cfg.Broker = broker
	cfg.CollectionInterval = 100 * time.Millisecond
	cfg.ReconnectInterval = 100 * time.Millisecond
	cfg.Capacity.Concurrency = 2
	return cfg
}

func TestConfigValidate(t *testing.T) {
	ok := testConfig("redis://127.0.0.1:6379/0")
	if err := ok.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		mod  func(*Config)
		key  string
	}{
		{"no broker", func(c *Config) { c.Broker = "" }, "broker: required"},
		{"scheme", func(c *Config) { c.Broker = "sqs://x" }, `broker: scheme "sqs"`},
		{"no host", func(c *Config) { c.Broker = "redis:///0" }, "broker:"},
		{"db", func(c *Config) { c.Broker = "redis://h:1/x" }, "broker: the Redis database"},
		{"tls on plain", func(c *Config) { c.TLS.CAFile = "/ca.pem" }, "tls: set, but broker"},
		{"tls skip verify on plain", func(c *Config) { c.TLS.InsecureSkipVerify = true }, "tls: set, but broker"},
		{"tls cert pem on plain", func(c *Config) { c.TLS.CertPem = "x" }, "tls: set, but broker"},
		{"empty queue", func(c *Config) { c.Queues = []string{"a", ""} }, "queues[1]"},
		{"exchange", func(c *Config) { c.EventExchange = "" }, "event_exchange"},
		{"interval", func(c *Config) { c.CollectionInterval = 0 }, "collection_interval"},
		{"grace", func(c *Config) { c.HeartbeatGrace = 0.5 }, "heartbeat_grace"},
		{"concurrency", func(c *Config) { c.Capacity.Concurrency = -1 }, "capacity.concurrency"},
		{"per worker", func(c *Config) { c.Capacity.PerWorker = map[string]int{"w@h": -2} }, "capacity.per_worker.w@h"},
		{"reconnect", func(c *Config) { c.ReconnectInterval = 0 }, "reconnect_interval"},
		{"tracked", func(c *Config) { c.MaxTrackedTasks = 0 }, "max_tracked_tasks"},
		{"event queue on redis", func(c *Config) { c.EventQueue = "ww" }, "event_queue: only for an amqp://"},
		{"expires", func(c *Config) { c.EventQueueExpires = 0 }, "event_queue_expires"},
		{"max length", func(c *Config) { c.EventQueueMaxLength = 0 }, "event_queue_max_length"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := testConfig("redis://127.0.0.1:6379/0")
			tc.mod(c)
			err := c.Validate()
			if err == nil || !strings.Contains(err.Error(), tc.key) {
				t.Fatalf("want an error naming %q, got %v", tc.key, err)
			}
		})
	}
	for _, u := range []string{"rediss://h:6380/1", "amqp://guest:guest@h:5672//", "amqps://h/vh", "pyamqp://h"} {
		if err := testConfig(u).Validate(); err != nil {
			t.Errorf("%s: %v", u, err)
		}
	}
}

func TestConfigFromYAML(t *testing.T) {
	cm, err := confmaptest.LoadConf("testdata/config.yaml")
	if err != nil {
		t.Fatal(err)
	}
	cfg := createDefaultConfig().(*Config)
	if err := cm.Unmarshal(cfg); err != nil {
		t.Fatal(err)
	}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if cfg.Broker != "amqps://celery.example:5671/prod" || cfg.Username != "watch" || string(cfg.Password) != "secret" ||
		cfg.TLS.CAFile != "/etc/ssl/broker-ca.pem" || len(cfg.Queues) != 2 || cfg.Capacity.PerWorker["big@h1"] != 16 ||
		cfg.Capacity.Concurrency != 4 || cfg.HeartbeatGrace != 3 {
		t.Fatalf("config not read as written: %+v", cfg)
	}
}

// Real traceback last lines of Celery 5.2.6 / billiard 4.1.0
// (testdata/redis-run.tsv).
func TestClassifyFailure(t *testing.T) {
	for _, tc := range []struct {
		exc, tb               string
		errType, kill, result string
	}{
		{"ExceptionWithTraceback()", "Traceback...\n    raise WorkerLostError(\nbilliard.exceptions.WorkerLostError: Worker exited prematurely: exitcode 1 Job: 2.\n", "WorkerLostError", contract.KillCrash, contract.ResultFailure},
		{"ExceptionWithTraceback()", "...\nbilliard.exceptions.WorkerLostError: Worker exited prematurely: signal 9 (SIGKILL) Job: 3.\n", "WorkerLostError", contract.KillOOM, contract.ResultFailure},
		{"ExceptionWithTraceback()", "...\nbilliard.exceptions.WorkerLostError: Worker exited prematurely: signal 15 (SIGTERM) Job: 3.\n", "WorkerLostError", contract.KillCrash, contract.ResultFailure},
		{"ExceptionWithTraceback()", "...\nbilliard.exceptions.TimeLimitExceeded: TimeLimitExceeded(2,)\n", "TimeLimitExceeded", contract.KillTimeout, contract.ResultTimeout},
		{"SoftTimeLimitExceeded()", "...\nbilliard.exceptions.SoftTimeLimitExceeded: SoftTimeLimitExceeded()\n", "SoftTimeLimitExceeded", "", contract.ResultFailure},
		{"ValueError('boom')", "...\nValueError: boom\n", "ValueError", "", contract.ResultFailure},
		{"ValueError('boom')", "", "ValueError", "", contract.ResultFailure},
		{"", "", "", "", contract.ResultFailure},
	} {
		f := classifyFailure(tc.exc, tc.tb)
		if f.errorType != tc.errType || f.killReason != tc.kill || f.result != tc.result {
			t.Errorf("%q / %q: got %+v", tc.exc, lastLine(tc.tb), f)
		}
	}
}

// publish replays recorded messages on a real Redis, as the worker
// published them.
func publish(t testing.TB, s *redistest.Server, msgs []recorded) {
	c := redisClient(t, s)
	for _, m := range msgs {
		if err := c.Publish(context.Background(), m.channel, m.payload).Err(); err != nil {
			t.Fatal(err)
		}
	}
}

// TestRecordedRun replays a real Celery 5.2.6 run (one worker with -E, six
// tasks: one succeeds, one raises, one exits its child, one SIGKILLs its
// child, one hits the hard and one the soft time limit) on a real
// redis-server, and checks every record and metric the processor reads.
func TestRecordedRun(t *testing.T) {
	srv := redistest.Start(t)
	cfg := testConfig(fmt.Sprintf("redis://%s/0", srv.Addr))
	cfg.Queues = []string{"celery", "other"}
	s := startReceiver(t, cfg)
	waitFor(t, 20*time.Second, "status OK", func() bool {
		e := s.host.last()
		return e != nil && e.Status() == componentstatus.StatusOK
	})
	c := redisClient(t, srv)
	ctx := context.Background()
	// Queue lengths: kombu's lists, a priority level included.
	if err := c.RPush(ctx, "celery", "a", "b", "c").Err(); err != nil {
		t.Fatal(err)
	}
	if err := c.RPush(ctx, "celery\x06\x166", "d").Err(); err != nil {
		t.Fatal(err)
	}
	msgs := loadRecorded(t, "redis-run.tsv")
	publish(t, srv, msgs)
	// Every message of the run arrives: the last one is worker-offline.
	waitFor(t, 20*time.Second, "the recorded run's records", func() bool {
		s.r.mu.Lock()
		defer s.r.mu.Unlock()
		w := s.r.workers["w1@host"]
		return w != nil && w.offline
	})
	recs := records(s.logs.AllLogs())
	type key struct{ svc, event, run string }
	got := map[key]rec{}
	heartbeats := 0
	for _, r := range recs {
		if r.event == contract.EventHeartbeat {
			heartbeats++
			if r.worker != "w1@host" || r.attrs[contract.AttrCapacity] != int64(2) {
				t.Errorf("heartbeat: %+v", r)
			}
			continue
		}
		run, _ := r.attrs[contract.AttrRunID].(string)
		if r.service == serviceBroker && r.attrs[contract.AttrWorkerID] != "w1@host" {
			t.Errorf("broker record without the worker: %+v", r)
		}
		got[key{r.service, r.event, run[:4]}] = r
	}
	if heartbeats != 14 { // worker-online + 13 worker-heartbeat
		t.Errorf("heartbeat records: %d, want 14", heartbeats)
	}
	for _, run := range []string{"acae", "4341", "001a", "bc36", "c69b", "ab71"} {
		if r, ok := got[key{serviceWorker, contract.EventStarted, run}]; !ok {
			t.Errorf("%s: no started record", run)
		} else if r.attrs[contract.AttrRunAttempt] != int64(1) {
			t.Errorf("%s: attempt %v, want 1 (no retry: Celery's retries + 1)", run, r.attrs[contract.AttrRunAttempt])
		}
		if _, ok := got[key{serviceBroker, contract.EventClaimed, run}]; !ok {
			t.Errorf("%s: no broker claim", run)
		}
		if _, ok := got[key{serviceBroker, contract.EventFinished, run}]; !ok {
			t.Errorf("%s: no broker end", run)
		}
	}
	ends := []struct {
		run, event, result, errType, kill string
	}{
		{"acae", contract.EventFinished, contract.ResultSuccess, "", ""},
		{"4341", contract.EventFinished, contract.ResultFailure, "ValueError", ""},
		{"001a", contract.EventKilled, contract.ResultFailure, "WorkerLostError", contract.KillCrash},
		{"bc36", contract.EventKilled, contract.ResultFailure, "WorkerLostError", contract.KillOOM},
		{"c69b", contract.EventKilled, contract.ResultTimeout, "TimeLimitExceeded", contract.KillTimeout},
		{"ab71", contract.EventFinished, contract.ResultFailure, "SoftTimeLimitExceeded", ""},
	}
	for _, e := range ends {
		r, ok := got[key{serviceWorker, e.event, e.run}]
		if !ok {
			t.Errorf("%s: no %s record", e.run, e.event)
			continue
		}
		et, _ := r.attrs[contract.AttrErrorType].(string)
		kr, _ := r.attrs[contract.AttrKillReason].(string)
		if r.attrs[contract.AttrResult] != e.result || et != e.errType || kr != e.kill {
			t.Errorf("%s: got %v, want %+v", e.run, r.attrs, e)
		}
	}
	if r := got[key{serviceWorker, contract.EventFinished, "acae"}]; r.attrs[attrTaskRuntime] == nil || r.attrs[attrTaskName] != "tasks.ok" {
		t.Errorf("success record: %v", r.attrs)
	}
	// Metrics: pending per queue on the broker resource; the worker's own.
	var last map[string]float64
	defer func() {
		if t.Failed() {
			t.Logf("metrics: %v", last)
		}
	}()
	waitFor(t, 20*time.Second, "pending 4 on celery, 0 on other, and the worker's metrics", func() bool {
		m := metricPoints(s.metrics.AllMetrics())
		last = m
		return m["celery-broker/workerwatch.scheduler.runs.pending/celery"] == 4 &&
			m["celery-broker/workerwatch.scheduler.runs.pending/other"] == 0 &&
			m["celery-worker/celery.events/task-failed"] == 5 &&
			m["celery-worker/workerwatch.worker.capacity/"] == 2 &&
			m["celery-broker/celery.worker.online/w1@host"] == 0
	})
	m := metricPoints(s.metrics.AllMetrics())
	if m["celery-worker/celery.worker.tasks.processed/"] != 6 {
		t.Errorf("processed: %v", m["celery-worker/celery.worker.tasks.processed/"])
	}
	if v, ok := m["celery-worker/workerwatch.worker.runs.active/"]; !ok || v != 0 {
		t.Errorf("runs.active (the last heartbeat's active): %v %v", v, ok)
	}
	if m["celery-broker/celery.worker.heartbeat.age/w1@host"] <= 0 {
		t.Errorf("heartbeat age: %v", m["celery-broker/celery.worker.heartbeat.age/w1@host"])
	}
}

// metricPoints: the latest value per service/metric/attribute value.
func metricPoints(mds []pmetric.Metrics) map[string]float64 {
	out := map[string]float64{}
	for _, md := range mds {
		for i := 0; i < md.ResourceMetrics().Len(); i++ {
			rm := md.ResourceMetrics().At(i)
			svc, _ := rm.Resource().Attributes().Get("service.name")
			for j := 0; j < rm.ScopeMetrics().Len(); j++ {
				ms := rm.ScopeMetrics().At(j).Metrics()
				for k := 0; k < ms.Len(); k++ {
					mt := ms.At(k)
					var dps pmetric.NumberDataPointSlice
					if mt.Type() == pmetric.MetricTypeGauge {
						dps = mt.Gauge().DataPoints()
					} else {
						dps = mt.Sum().DataPoints()
					}
					for p := 0; p < dps.Len(); p++ {
						dp := dps.At(p)
						attr := ""
						dp.Attributes().Range(func(_ string, v pcommon.Value) bool { attr = v.AsString(); return false })
						v := dp.DoubleValue()
						if dp.ValueType() == pmetric.NumberDataPointValueTypeInt {
							v = float64(dp.IntValue())
						}
						out[svc.Str()+"/"+mt.Name()+"/"+attr] = v
					}
				}
			}
		}
	}
	return out
}
