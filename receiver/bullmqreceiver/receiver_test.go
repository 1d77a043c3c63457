package bullmqreceiver

import (
	"context"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componentstatus"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/receiver/receivertest"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/workerwatch/workerwatch/internal/contract"
	"github.com/workerwatch/workerwatch/internal/redistest"
	"github.com/workerwatch/workerwatch/receiver/bullmqreceiver/internal/metadata"
)

// rec is one record as the tests read it.
type rec struct {
	worker string // the resource's worker (the worker's side), "" on the scheduler's
	sched  bool
	event  string
	attrs  map[string]any
}

func (r rec) str(k string) string { s, _ := r.attrs[k].(string); return s }

func TestAttemptOf(t *testing.T) {
	for run, want := range map[string]int{"7": 1, "7#2": 2, "7#13": 13, "7#x": 1, "7#1": 1, "8#2": 1} {
		assert.Equal(t, want, attemptOf("7", run), run)
	}
	// Read once per record, it builds no string, even for a long custom job
	// id (a UUID; a concatenation of over 32 bytes allocates).
	id := "6f1c2a9e-3b7d-4c55-9a0e-2d8f41b7c3aa"
	run := id + "#3"
	assert.Equal(t, 3, attemptOf(id, run))
	assert.Zero(t, testing.AllocsPerRun(100, func() { attemptOf(id, run) }))
}

func records(sink *consumertest.LogsSink) []rec {
	var out []rec
	for _, ld := range sink.AllLogs() {
		rls := ld.ResourceLogs()
		for i := 0; i < rls.Len(); i++ {
			rl := rls.At(i)
			ra := rl.Resource().Attributes()
			sn, sched := ra.Get(contract.AttrServiceName)
			w, _ := ra.Get(contract.AttrWorkerID)
			for j := 0; j < rl.ScopeLogs().Len(); j++ {
				lrs := rl.ScopeLogs().At(j).LogRecords()
				for k := 0; k < lrs.Len(); k++ {
					lr := lrs.At(k)
					r := rec{sched: sched && sn.Str() != "", event: lr.EventName(), attrs: lr.Attributes().AsRaw()}
					if !r.sched {
						r.worker = w.Str()
					}
					out = append(out, r)
				}
			}
		}
	}
	return out
}

// lastSnapshot is the runs of the latest snapshot of worker w in queue q.
func lastSnapshot(rs []rec, q, w string) ([]string, bool) {
	for i := len(rs) - 1; i >= 0; i-- {
		r := rs[i]
		if r.sched && r.event == contract.EventSchedulerSnapshot && r.str(attrQueue) == q && r.str(contract.AttrWorkerID) == w {
			var out []string
			for _, v := range r.attrs[contract.AttrSchedulerRuns].([]any) {
				out = append(out, v.(string))
			}
			return out, true
		}
	}
	return nil, false
}

func find(rs []rec, worker, event, run string) *rec {
	for i := range rs {
		r := rs[i]
		if r.worker == worker && r.event == event && r.str(contract.AttrRunID) == run {
			return &rs[i]
		}
	}
	return nil
}

type harness struct {
	t       *testing.T
	cfg     *Config
	rcv     *bullReceiver
	logs    *consumertest.LogsSink
	metrics *consumertest.MetricsSink
	host    *statusHost
	logObs  *observer.ObservedLogs
}

func startReceiver(t *testing.T, cfg *Config, ext map[component.ID]component.Component) *harness {
	t.Helper()
	require.NoError(t, cfg.Validate())
	h := &harness{
		t: t, cfg: cfg, logs: new(consumertest.LogsSink), metrics: new(consumertest.MetricsSink),
		host: &statusHost{Host: componenttest.NewNopHost(), ext: ext},
	}
	set := receivertest.NewNopSettings(metadata.Type)
	core, obs := observer.New(zap.InfoLevel)
	set.Logger = zap.New(core)
	h.logObs = obs
	f := NewFactory()
	lr, err := f.CreateLogs(context.Background(), set, cfg, h.logs)
	require.NoError(t, err)
	mr, err := f.CreateMetrics(context.Background(), set, cfg, h.metrics)
	require.NoError(t, err)
	require.NoError(t, lr.Start(context.Background(), h.host))
	require.NoError(t, mr.Start(context.Background(), h.host))
	h.rcv = lr.(*bullReceiver)
	t.Cleanup(func() {
		require.NoError(t, lr.Shutdown(context.Background()))
		require.NoError(t, mr.Shutdown(context.Background()))
	})
	return h
}

// polled waits for the receiver's first poll (its first status).
func (h *harness) polled() {
	eventually(h.t, 10*time.Second, "first poll", func() error {
		if h.host.last() == nil {
			return fmt.Errorf("no status yet")
		}
		return nil
	})
}

func testConfig(addr string, queues ...string) *Config {
	cfg := createDefaultConfig().(*Config)
	cfg.Endpoint = addr
	cfg.Queues = queues
	cfg.PollInterval = 100 * time.Millisecond
	return cfg
}

// TestReceiverReadsBullMQState: the snapshot per worker (a connected worker
// holding nothing included), run starts and ends from the events stream,
// a failure's reason, a stall naming the worker that held the job and its
// second attempt as a run of its own, and the queue's counts.
func TestReceiverReadsBullMQState(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer c.Close()
	b := &bull{c: c, prefix: "bull", queue: "jobs"}
	b.add(ctx, t, "0") // the queue exists before the receiver starts
	b.connectWorker(t, srv.Addr, "w1")
	b.connectWorker(t, srv.Addr, "w2")
	b.connectWorker(t, srv.Addr, "idle")
	h := startReceiver(t, testConfig(srv.Addr, "jobs"), nil)
	h.polled()

	checkLifecycle(ctx, t, h, b, 10*time.Second)
}

// TestReceiverBadInput: a key of the wrong type and a queue that does not
// exist each get a recoverable status and one log line naming the queue and
// the key, and the good queue keeps being read; wrong credentials and an
// unreachable Redis get a recoverable status, never a crash.
func TestReceiverBadInput(t *testing.T) {
	srv := redistest.Start(t, "--requirepass", "secret")
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: srv.Addr, Password: "secret"})
	defer c.Close()
	good := &bull{c: c, prefix: "bull", queue: "good"}
	good.add(ctx, t, "1")
	require.NoError(t, c.Set(ctx, "bull:broken:active", "not a list", 0).Err())
	require.NoError(t, c.HSet(ctx, "bull:broken:meta", "x", "1").Err())

	cfg := testConfig(srv.Addr, "broken", "good", "missing")
	cfg.Password = "secret"
	h := startReceiver(t, cfg, nil)
	good.activate(ctx, t, "1", "w1")
	eventually(t, 10*time.Second, "the good queue read", func() error {
		if got, _ := lastSnapshot(records(h.logs), "good", "w1"); !slices.Equal(got, []string{"1"}) {
			return fmt.Errorf("good/w1: %v", got)
		}
		return nil
	})
	eventually(t, 10*time.Second, "a recoverable status naming both bad queues", func() error {
		ev := h.host.last()
		if ev == nil || ev.Status() != componentstatus.StatusRecoverableError {
			return fmt.Errorf("status %v", ev)
		}
		msg := ev.Err().Error()
		for _, s := range []string{`queue "broken", key "bull:broken:active": WRONGTYPE`, `queue "missing", key "bull:missing:meta": no such queue`} {
			if !strings.Contains(msg, s) {
				return fmt.Errorf("%q lacks %q", msg, s)
			}
		}
		return nil
	})
	time.Sleep(5 * cfg.PollInterval) // more polls: still one line per queue
	for _, q := range []string{"broken", "missing"} {
		lines := h.logObs.FilterMessage("Cannot read a BullMQ queue (the other queues are read)").FilterField(zap.String("queue", q)).All()
		assert.Len(t, lines, 1, "one log line for queue %s", q)
	}
	lines := h.logObs.FilterField(zap.String("key", "bull:broken:active")).All()
	assert.Len(t, lines, 1)

	// Wrong credentials: recoverable, named, no records.
	bad := testConfig(srv.Addr, "good")
	bad.Password = "wrong"
	hb := startReceiver(t, bad, nil)
	eventually(t, 10*time.Second, "wrong credentials reported", func() error {
		ev := hb.host.last()
		if ev == nil || ev.Status() != componentstatus.StatusRecoverableError || !strings.Contains(ev.Err().Error(), "WRONGPASS") {
			return fmt.Errorf("status %v", ev)
		}
		return nil
	})
	assert.Zero(t, hb.logs.LogRecordCount())

	// Unreachable Redis.
	un := testConfig("127.0.0.1:1", "good")
	un.Timeout = 500 * time.Millisecond
	hu := startReceiver(t, un, nil)
	eventually(t, 10*time.Second, "unreachable Redis reported", func() error {
		ev := hu.host.last()
		if ev == nil || ev.Status() != componentstatus.StatusRecoverableError || !strings.Contains(ev.Err().Error(), "127.0.0.1:1") {
			return fmt.Errorf("status %v", ev)
		}
		return nil
	})
}

// TestReceiverResumesStream: with a storage extension, a receiver started
// again reads the events it missed (no job outcome lost); past the stream's
// retention it says so, counts the gap and restates the active jobs.
func TestReceiverResumesStream(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer c.Close()
	b := &bull{c: c, prefix: "bull", queue: "jobs"}
	b.add(ctx, t, "1")
	b.add(ctx, t, "2")
	stID := component.MustNewID("file_storage")
	st := newMemStorage()
	ext := map[component.ID]component.Component{stID: st}
	cfg := testConfig(srv.Addr, "jobs")
	cfg.StorageID = &stID

	h1 := startReceiver(t, cfg, ext)
	h1.polled()
	b.activate(ctx, t, "1", "w1")
	eventually(t, 10*time.Second, "job 1 started", func() error {
		if find(records(h1.logs), "w1", contract.EventStarted, "1") == nil {
			return fmt.Errorf("no start")
		}
		return nil
	})
	require.NoError(t, h1.rcv.Shutdown(ctx))
	require.NoError(t, h1.rcv.Shutdown(ctx))

	// While the receiver is down: job 1 ends, job 2 runs and fails.
	b.finish(ctx, t, "1", "")
	b.activate(ctx, t, "2", "w1")
	b.finish(ctx, t, "2", "boom")

	cfg2 := *cfg
	h2 := startReceiver(t, &cfg2, ext)
	eventually(t, 10*time.Second, "the missed outcomes read", func() error {
		rs := records(h2.logs)
		if r := find(rs, "w1", contract.EventFinished, "1"); r == nil || r.str(contract.AttrResult) != contract.ResultSuccess {
			for _, e := range h2.logObs.All() {
				t.Log(e.Message, e.ContextMap())
			}
			return fmt.Errorf("job 1: %+v in %+v", r, rs)
		}
		if r := find(rs, "w1", contract.EventFinished, "2"); r == nil || r.str(contract.AttrResult) != contract.ResultFailure {
			return fmt.Errorf("job 2: %+v", r)
		}
		return nil
	})
	require.NoError(t, h2.rcv.Shutdown(ctx))
	require.NoError(t, h2.rcv.Shutdown(ctx))

	// Past retention: the stream trimmed beyond the kept position.
	b.add(ctx, t, "3")
	b.activate(ctx, t, "3", "w2")
	for i := 0; i < 5; i++ {
		require.NoError(t, c.XAdd(ctx, &redis.XAddArgs{Stream: b.key("events"), Values: []any{"event", "progress", "jobId", "3"}}).Err())
	}
	require.NoError(t, c.XTrimMaxLen(ctx, b.key("events"), 2).Err())
	cfg3 := *cfg
	h3 := startReceiver(t, &cfg3, ext)
	eventually(t, 10*time.Second, "the gap said and job 3 restated", func() error {
		if h3.logObs.FilterMessageSnippet("trimmed past the kept position").Len() != 1 {
			return fmt.Errorf("no gap log line")
		}
		rs := records(h3.logs)
		if got, _ := lastSnapshot(rs, "jobs", "w2"); !slices.Equal(got, []string{"3"}) {
			return fmt.Errorf("w2: %v", got)
		}
		if find(rs, "w2", contract.EventStarted, "3") == nil {
			return fmt.Errorf("job 3's start not restated")
		}
		return nil
	})
}

// TestReceiverDiscoversQueues: with no queues listed, every queue under the
// prefix is read.
func TestReceiverDiscoversQueues(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer c.Close()
	for _, q := range []string{"a", "b"} {
		b := &bull{c: c, prefix: "bull", queue: q}
		b.add(ctx, t, "1")
		b.activate(ctx, t, "1", "w-"+q)
	}
	h := startReceiver(t, testConfig(srv.Addr), nil)
	eventually(t, 10*time.Second, "both queues read", func() error {
		rs := records(h.logs)
		for _, q := range []string{"a", "b"} {
			if got, _ := lastSnapshot(rs, q, "w-"+q); !slices.Equal(got, []string{"1"}) {
				return fmt.Errorf("%s: %v", q, got)
			}
		}
		return nil
	})
}

func TestConfigValidate(t *testing.T) {
	cfg := createDefaultConfig().(*Config)
	require.NoError(t, cfg.Validate())
	for name, tc := range map[string]struct {
		mut  func(*Config)
		want string
	}{
		"no endpoint":      {func(c *Config) { c.Endpoint = "" }, "endpoint: must be set"},
		"bad endpoint":     {func(c *Config) { c.Endpoint = "redis://x" }, "endpoint:"},
		"sentinel no addr": {func(c *Config) { c.Sentinel.MasterName = "m" }, "sentinel.addresses:"},
		"cluster db":       {func(c *Config) { c.Cluster.Enabled = true; c.DB = 2 }, "db: Redis Cluster"},
		"queue pattern":    {func(c *Config) { c.Queues = []string{"a*"} }, "queues[0]:"},
		"queue twice":      {func(c *Config) { c.Queues = []string{"a", "a"} }, "queues[1]:"},
		"poll":             {func(c *Config) { c.PollInterval = time.Millisecond }, "poll_interval:"},
		"prefix":           {func(c *Config) { c.Prefix = "b*" }, "prefix:"},
		"service":          {func(c *Config) { c.ServiceName = "" }, "service_name:"},
		"max events":       {func(c *Config) { c.MaxEventsPerPoll = 0 }, "max_events_per_poll:"},
	} {
		t.Run(name, func(t *testing.T) {
			c := createDefaultConfig().(*Config)
			tc.mut(c)
			require.ErrorContains(t, c.Validate(), tc.want)
		})
	}
}

// TestReceiverMaxActiveJobs: past max_active_jobs no partial snapshot is
// stated (it would show the jobs left out as taken away), said once; the
// counts go on.
func TestReceiverMaxActiveJobs(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer c.Close()
	b := &bull{c: c, prefix: "bull", queue: "jobs"}
	for _, id := range []string{"1", "2"} {
		b.add(ctx, t, id)
		b.activate(ctx, t, id, "w1")
	}
	cfg := testConfig(srv.Addr, "jobs")
	cfg.MaxActiveJobs = 1
	h := startReceiver(t, cfg, nil)
	eventually(t, 10*time.Second, "the warning and the counts", func() error {
		if h.logObs.FilterMessageSnippet("More active jobs than max_active_jobs").Len() != 1 {
			return fmt.Errorf("no warning")
		}
		if len(h.metrics.AllMetrics()) < 2 {
			return fmt.Errorf("no metrics")
		}
		return nil
	})
	for _, r := range records(h.logs) {
		assert.NotEqual(t, contract.EventSchedulerSnapshot, r.event, "a partial snapshot: %+v", r)
	}
}

// TestReceiverRetry: a failed attempt BullMQ retries ends that run (a
// failure, bullmq.job.state retrying) and the next attempt is a run of its
// own; a stall (the same `waiting` entry, then `stalled`) does not end the
// run of the worker that held the job.
func TestReceiverRetry(t *testing.T) {
	srv := redistest.Start(t)
	ctx := context.Background()
	c := redis.NewClient(&redis.Options{Addr: srv.Addr})
	defer c.Close()
	b := &bull{c: c, prefix: "bull", queue: "jobs"}
	b.add(ctx, t, "1")
	b.add(ctx, t, "2")
	h := startReceiver(t, testConfig(srv.Addr, "jobs"), nil)
	h.polled()
	b.activate(ctx, t, "1", "w1")
	b.activate(ctx, t, "2", "w1")
	b.retry(ctx, t, "1", "boom")
	b.stall(ctx, t, "2")
	b.activate(ctx, t, "1", "w1")
	b.finish(ctx, t, "1", "")
	eventually(t, 10*time.Second, "the retried attempt ended, the next one a run of its own", func() error {
		rs := records(h.logs)
		r := find(rs, "w1", contract.EventFinished, "1")
		if r == nil || r.str(contract.AttrResult) != contract.ResultFailure || r.str(attrJobState) != "retrying" || r.str(attrJobFailedReason) != "boom" {
			return fmt.Errorf("attempt 1: %+v", r)
		}
		if r := find(rs, "w1", contract.EventFinished, "1#2"); r == nil || r.str(contract.AttrResult) != contract.ResultSuccess {
			return fmt.Errorf("attempt 2: %+v", r)
		}
		return nil
	})
	// Each record says its attempt's number.
	for run, want := range map[string]int64{"1": 1, "1#2": 2} {
		for _, ev := range []string{contract.EventStarted, contract.EventFinished} {
			r := find(records(h.logs), "w1", ev, run)
			require.NotNil(t, r, "%s of %s", ev, run)
			assert.Equal(t, want, r.attrs[contract.AttrRunAttempt], "%s of %s: the attempt", ev, run)
		}
	}
	rs := records(h.logs)
	assert.Nil(t, find(rs, "w1", contract.EventFinished, "2"), "the stalled job's run ended on w1")
	assert.Nil(t, find(rs, "w1", contract.EventReleased, "2"), "the stalled job's run released on w1")
}

// checkLifecycle runs the jobs' lifecycle of TestReceiverReadsBullMQState
// (and of TestReceiverCluster) on b's queue "jobs", job 0 added and workers
// w1, w2 and idle connected before h's receiver started: the snapshot per
// worker, run starts and ends from the events stream, a failure's reason, a
// stall naming the worker that held the job and its second attempt as a run
// of its own, and the queue's counts.
func checkLifecycle(ctx context.Context, t *testing.T, h *harness, b *bull, within time.Duration) {
	t.Helper()
	for i := 1; i <= 5; i++ {
		b.add(ctx, t, strconv.Itoa(i))
	}
	require.NoError(t, b.c.ZAdd(ctx, b.key("delayed"), redis.Z{Score: 1, Member: "d1"}).Err())
	require.NoError(t, b.c.ZAdd(ctx, b.key("prioritized"), redis.Z{Score: 1, Member: "p1"}).Err())
	b.activate(ctx, t, "1", "w1")
	b.activate(ctx, t, "2", "w1")
	b.activate(ctx, t, "3", "w2")
	eventually(t, within, "snapshot lists w1's two jobs, w2's one, idle's none", func() error {
		rs := records(h.logs)
		for w, want := range map[string][]string{"w1": {"1", "2"}, "w2": {"3"}, "idle": nil} {
			got, ok := lastSnapshot(rs, "jobs", w)
			if !ok || !slices.Equal(got, want) {
				return fmt.Errorf("%s: %v (stated %v), want %v (status %v)", w, got, ok, want, h.host.last())
			}
		}
		return nil
	})
	rs := records(h.logs)
	for _, x := range [][2]string{{"w1", "1"}, {"w1", "2"}, {"w2", "3"}} {
		assert.NotNil(t, find(rs, x[0], contract.EventStarted, x[1]), "start of %v", x)
	}

	b.finish(ctx, t, "1", "")
	b.finish(ctx, t, "3", "Unexpected exit code: null signal: SIGABRT")
	// Job 2's lock lapses: BullMQ moves it back, w2 runs it again.
	b.stall(ctx, t, "2")
	b.activate(ctx, t, "2", "w2")
	b.finish(ctx, t, "2", "")
	eventually(t, within, "ends, the stall, the second attempt", func() error {
		rs := records(h.logs)
		if r := find(rs, "w1", contract.EventFinished, "1"); r == nil || r.str(contract.AttrResult) != contract.ResultSuccess {
			return fmt.Errorf("job 1's end on w1: %+v", r)
		}
		if r := find(rs, "w2", contract.EventFinished, "3"); r == nil || r.str(contract.AttrResult) != contract.ResultFailure ||
			r.str(attrJobFailedReason) != "Unexpected exit code: null signal: SIGABRT" {
			return fmt.Errorf("job 3's failure on w2: %+v", r)
		}
		var stalled *rec
		for i := range rs {
			if rs[i].sched && rs[i].event == contract.EventRunStalled {
				stalled = &rs[i]
			}
		}
		if stalled == nil || stalled.str(contract.AttrWorkerID) != "w1" || stalled.str(contract.AttrRunID) != "2" {
			return fmt.Errorf("stalled record naming w1 and run 2: %+v", stalled)
		}
		if find(rs, "w2", contract.EventStarted, "2#2") == nil || find(rs, "w2", contract.EventFinished, "2#2") == nil {
			return fmt.Errorf("second attempt 2#2 on w2 not started and ended")
		}
		if find(rs, "w1", contract.EventFinished, "2") != nil {
			return fmt.Errorf("w1's run 2 ended: it must stay held on w1 (it may still run it)")
		}
		if got, _ := lastSnapshot(rs, "jobs", "w1"); len(got) != 0 {
			return fmt.Errorf("w1 still listed with %v", got)
		}
		return nil
	})

	// Counts, as BullMQ's own gauge names them.
	eventually(t, within, "queue counts", func() error {
		all := h.metrics.AllMetrics()
		if len(all) == 0 {
			return fmt.Errorf("no metrics")
		}
		md := all[len(all)-1]
		got := map[string]int64{}
		ms := md.ResourceMetrics().At(0).ScopeMetrics().At(0).Metrics()
		for i := 0; i < ms.Len(); i++ {
			m := ms.At(i)
			dps := m.Gauge().DataPoints()
			for j := 0; j < dps.Len(); j++ {
				st, _ := dps.At(j).Attributes().Get("bullmq.queue.jobs.state")
				key := m.Name() + "/" + st.Str()
				got[key] = dps.At(j).IntValue()
			}
		}
		want := map[string]int64{
			"bullmq.queue.jobs/waiting": 3, "bullmq.queue.jobs/prioritized": 1, "bullmq.queue.jobs/delayed": 1,
			"bullmq.queue.jobs/active": 0, "bullmq.queue.jobs/completed": 2, "bullmq.queue.jobs/failed": 1,
			"bullmq.queue.workers/": 3,
		}
		for k, v := range want {
			if got[k] != v {
				return fmt.Errorf("%s = %d, want %d (all %v)", k, got[k], v, got)
			}
		}
		return nil
	})
	assert.Equal(t, componentstatus.StatusOK, h.host.last().Status())
}
