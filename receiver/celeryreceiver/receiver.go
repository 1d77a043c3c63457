package celeryreceiver // import "github.com/workerwatch/workerwatch/receiver/celeryreceiver"

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"errors"
	"math"
	"slices"
	"sort"
	"sync"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componentstatus"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/receiver"
	"go.uber.org/zap"

	"github.com/workerwatch/workerwatch/internal/contract"
	"github.com/workerwatch/workerwatch/receiver/celeryreceiver/internal/metadata"
)

// service.name values of the two views this receiver emits.
const (
	serviceWorker = "celery-worker"
	serviceBroker = "celery-broker"
)

// Attributes of the records, beyond the contract's (docs/telemetry.md).
const (
	attrTaskName      = "celery.task.name"
	attrTaskRetries   = "celery.task.retries"
	attrTaskRuntime   = "celery.task.runtime"
	attrTaskFailure   = "celery.task.failure"
	attrRedelivered   = "celery.task.redelivered"
	attrReleaseReason = "celery.task.release_reason"
	attrEventType     = "celery.event.type"
	attrWorkerActive  = "celery.worker.active"
	attrWorkerDone    = "celery.worker.processed"
	attrWorkerFreq    = "celery.worker.freq"
	attrWorkerPID     = "celery.worker.pid"
)

// Values of attrReleaseReason.
const (
	releaseRetried   = "retried"
	releaseRejected  = "rejected"
	releaseRestarted = "worker_restarted"
)

// maxText bounds the failure text copied onto a record.
const maxText = 1024

// transport is a broker's side: the event stream and the queue lengths.
type transport interface {
	// consume connects, reports the connection with brokerState(nil) and
	// reads the event stream until an error or ctx's end (each message to
	// handleEnvelope for Redis, handleBody for AMQP); runBroker retries it.
	consume(ctx context.Context) error
	// queueLengths reads the messages waiting in each queue.
	queueLengths(ctx context.Context, queues []string) (map[string]int64, error)
	close() error
}

type workerState struct {
	pid       int64
	freq      float64
	last      time.Time // collector's clock, latest event
	offline   bool
	hasHB     bool
	active    int64
	processed int64
	events    map[string]int64
	fresh     bool // an event since the last metrics emission
	// prefetch: the latest prefetch time (task-received to task-started,
	// the worker's clock) by task name; prefetchNames: the names whose
	// prefetched count is emitted (0 included), at most maxNames.
	prefetch      map[string]float64
	prefetchNames map[string]struct{}
}

// maxNames bounds the task names (and event types) kept per worker.
const maxNames = 64

type taskState struct {
	worker  string
	pid     int64
	name    string
	retries int64
	started bool
	// redelivered: received again while this holder still had it.
	redelivered bool
	// received: the task-received event's time (the worker's clock); eta:
	// the task has an ETA or countdown (its wait is not a prefetch).
	received time.Time
	eta      bool
}

type celeryReceiver struct {
	cfg    *Config
	broker parsedBroker
	set    receiver.Settings
	logger *zap.Logger

	logs    consumer.Logs
	metrics consumer.Metrics
	tb      *metadata.TelemetryBuilder
	mb      *metadata.MetricsBuilder

	mu      sync.Mutex
	workers map[string]*workerState
	tasks   map[string]*taskState
	order   []string // task ids in arrival order, for max_tracked_tasks
	pending map[string]int64
	// copies: the hosts still running an earlier copy of a task id that
	// another worker started again (a duplicate execution), whose end is
	// that worker's own.
	copies map[string][]string

	tr      transport
	host    component.Host
	cancel  context.CancelFunc
	wg      sync.WaitGroup
	started int
	// stopped: Shutdown has run. The first pipeline's Shutdown stops the
	// receiver for both, as the collector's shared components do: the
	// collector stops a pipeline's exporters soon after its receiver node,
	// and a receiver still delivering into that pipeline failed there
	// ("database not open" from the logs exporter's queue, CI run 100).
	stopped bool
	forget  func()
	now     func() time.Time
	// brokerDown is the last broker error reported as status ("" = up).
	brokerDown string
	// backend is the result backend catch-up (nil: result_backend off).
	backend *backend
}

func newReceiver(set receiver.Settings, cfg *Config) (*celeryReceiver, error) {
	p, err := cfg.parseBroker()
	if err != nil {
		return nil, err
	}
	tb, err := metadata.NewTelemetryBuilder(set.TelemetrySettings)
	if err != nil {
		return nil, err
	}
	b, err := newBackend(cfg)
	if err != nil {
		return nil, err
	}
	return &celeryReceiver{
		backend: b,
		cfg:     cfg, broker: p, set: set, logger: set.Logger, tb: tb,
		mb:      metadata.NewMetricsBuilder(cfg.MetricsBuilderConfig, set),
		workers: map[string]*workerState{}, tasks: map[string]*taskState{}, pending: map[string]int64{},
		copies: map[string][]string{},
		now:    time.Now,
	}, nil
}

// Start connects to the broker in the background: a broker that is down or
// refuses the credentials is reported as the component's status and retried
// every reconnect_interval, never a failed start.
func (r *celeryReceiver) Start(ctx context.Context, host component.Host) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.started++
	if r.started > 1 {
		return nil
	}
	r.host = host
	if err := r.openStorage(ctx, host); err != nil {
		return err
	}
	tr, err := r.newTransport()
	if err != nil {
		return err
	}
	r.tr = tr
	runCtx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	r.wg.Add(2)
	go func() { defer r.wg.Done(); r.runBroker(runCtx) }()
	go func() { defer r.wg.Done(); r.tick(runCtx) }()
	return nil
}

func (r *celeryReceiver) newTransport() (transport, error) {
	if r.broker.kind == brokerAMQP {
		return newAMQP(r)
	}
	return newRedis(r)
}

// runBroker consumes the event stream until ctx ends, reporting each
// failure and reconnecting every reconnect_interval (every second while
// RabbitMQ's event exchange is not declared yet: the first worker with -E
// declares it any moment, and its first events come right after).
func (r *celeryReceiver) runBroker(ctx context.Context) {
	for ctx.Err() == nil {
		err := r.tr.consume(ctx)
		if ctx.Err() != nil {
			return
		}
		r.brokerState(err)
		wait := r.cfg.ReconnectInterval
		if errors.Is(err, errNoExchange) && wait > time.Second {
			wait = time.Second
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// Shutdown stops both loops and closes the connections, at the first call
// (either pipeline's); later calls do nothing.
func (r *celeryReceiver) Shutdown(context.Context) error {
	r.mu.Lock()
	first := !r.stopped
	r.stopped = true
	cancel, tr := r.cancel, r.tr
	r.mu.Unlock()
	if !first {
		return nil
	}
	if r.forget != nil {
		r.forget()
	}
	if cancel != nil {
		cancel()
	}
	var err error
	if tr != nil {
		err = tr.close()
	}
	r.wg.Wait()
	if b := r.backend; b != nil {
		r.saveState(context.Background())
		if b.store != nil {
			err = errors.Join(err, b.store.Close(context.Background()))
		}
		err = errors.Join(err, b.client.Close())
	}
	r.tb.Shutdown()
	return err
}

// brokerState reports the broker connection as the component's status,
// once per change (err nil: connected).
func (r *celeryReceiver) brokerState(err error) {
	r.mu.Lock()
	host := r.host
	was := r.brokerDown
	if err == nil {
		r.brokerDown = ""
	} else {
		r.brokerDown = err.Error()
	}
	now := r.brokerDown
	r.mu.Unlock()
	if err != nil {
		r.tb.ReceiverCeleryBrokerErrors.Add(context.Background(), 1)
		r.disconnected()
	} else {
		r.connected()
	}
	if was == now && err != nil {
		return
	}
	if err != nil {
		r.logger.Warn("celery broker unreachable; retrying", zap.String("broker", r.broker.u.Redacted()),
			zap.Duration("every", r.cfg.ReconnectInterval), zap.Error(err))
		if host != nil {
			componentstatus.ReportStatus(host, componentstatus.NewRecoverableErrorEvent(err))
		}
		return
	}
	if was != "" {
		r.logger.Info("celery broker connected", zap.String("broker", r.broker.u.Redacted()))
	}
	if host != nil {
		componentstatus.ReportStatus(host, componentstatus.NewEvent(componentstatus.StatusOK))
	}
}

// handleEnvelope reads a kombu message as the Redis transport publishes it:
// JSON with the event body base64-encoded under "body".
func (r *celeryReceiver) handleEnvelope(payload []byte) {
	var env struct {
		Body       string `json:"body"`
		Properties struct {
			BodyEncoding string `json:"body_encoding"`
		} `json:"properties"`
	}
	if err := json.Unmarshal(payload, &env); err != nil || env.Body == "" {
		r.malformed("not a kombu envelope", err)
		return
	}
	if env.Properties.BodyEncoding != "base64" {
		r.handleBody([]byte(env.Body))
		return
	}
	body, err := base64.StdEncoding.DecodeString(env.Body)
	if err != nil {
		r.malformed("envelope body is not base64", err)
		return
	}
	r.handleBody(body)
}

func (r *celeryReceiver) malformed(what string, err error) {
	r.tb.ReceiverCeleryMessagesMalformed.Add(context.Background(), 1)
	r.logger.Debug("celery: skipped a malformed message", zap.String("why", what), zap.Error(err))
}

// event is the part of a Celery event the receiver reads.
type event struct {
	Type       string   `json:"type"`
	Hostname   string   `json:"hostname"`
	Timestamp  float64  `json:"timestamp"`
	PID        int64    `json:"pid"`
	Freq       float64  `json:"freq"`
	Active     *int64   `json:"active"`
	Processed  *int64   `json:"processed"`
	UUID       string   `json:"uuid"`
	Name       string   `json:"name"`
	Retries    int64    `json:"retries"`
	Runtime    *float64 `json:"runtime"`
	Exception  string   `json:"exception"`
	Traceback  string   `json:"traceback"`
	Terminated bool     `json:"terminated"`
	ETA        *string  `json:"eta"`
}

// handleBody reads one event, or a batch of them (task.multi: a JSON array).
func (r *celeryReceiver) handleBody(body []byte) {
	r.tb.ReceiverCeleryMessages.Add(context.Background(), 1)
	var evs []event
	if len(body) > 0 && body[0] == '[' {
		if err := json.Unmarshal(body, &evs); err != nil {
			r.malformed("event batch is not JSON", err)
			return
		}
	} else {
		evs = make([]event, 1)
		if err := json.Unmarshal(body, &evs[0]); err != nil {
			r.malformed("event is not JSON", err)
			return
		}
	}
	var out logsOut
	r.mu.Lock()
	now := r.now()
	for i := range evs {
		r.apply(&evs[i], now, &out)
	}
	r.mu.Unlock()
	if out.n > 0 && r.logs != nil {
		if err := r.logs.ConsumeLogs(context.Background(), out.ld); err != nil {
			r.logger.Debug("celery: the logs pipeline refused records", zap.Error(err))
		}
	}
}

// logsOut collects the records of one message, one resource per worker
// and one for the broker's view; the zero value is empty and allocates
// nothing until the first record (a task-received makes none).
type logsOut struct {
	ld plog.Logs
	// res: the record slice of each resource, by worker ("": the broker's).
	// A message is one worker's (two resources at most); a catch-up has one
	// per worker whose runs it ends.
	res []resLogs
	n   int
}

type resLogs struct {
	worker string
	sl     plog.LogRecordSlice
}

// record appends a record with eventName to the worker's resource (worker
// != "") or the broker's (worker == "").
func (o *logsOut) record(worker, eventName string, ts time.Time) pcommon.Map {
	var sl plog.LogRecordSlice
	found := false
	for _, rs := range o.res {
		if rs.worker == worker {
			sl, found = rs.sl, true
			break
		}
	}
	if !found {
		if len(o.res) == 0 {
			o.ld = plog.NewLogs()
		}
		rl := o.ld.ResourceLogs().AppendEmpty()
		attrs := rl.Resource().Attributes()
		if worker == "" {
			attrs.PutStr(contract.AttrServiceName, serviceBroker)
		} else {
			attrs.PutStr(contract.AttrServiceName, serviceWorker)
			attrs.PutStr(contract.AttrWorkerID, worker)
		}
		s := rl.ScopeLogs().AppendEmpty()
		s.Scope().SetName(metadata.ScopeName)
		sl = s.LogRecords()
		o.res = append(o.res, resLogs{worker, sl})
	}
	lr := sl.AppendEmpty()
	lr.SetEventName(eventName)
	lr.SetTimestamp(pcommon.NewTimestampFromTime(ts))
	lr.SetObservedTimestamp(pcommon.NewTimestampFromTime(time.Now()))
	o.n++
	attrs := lr.Attributes()
	attrs.PutStr(contract.AttrEventName, eventName)
	return attrs
}

// brokerRecord is a record of the broker's view naming the worker.
func (o *logsOut) brokerRecord(worker, eventName, run string, ts time.Time) pcommon.Map {
	a := o.record("", eventName, ts)
	a.PutStr(contract.AttrWorkerID, worker)
	a.PutStr(contract.AttrRunID, run)
	return a
}

func eventTime(ev *event, now time.Time) time.Time {
	if ev.Timestamp <= 0 || math.IsNaN(ev.Timestamp) || math.IsInf(ev.Timestamp, 0) || ev.Timestamp > 1e11 {
		return now
	}
	sec, frac := math.Modf(ev.Timestamp)
	return time.Unix(int64(sec), int64(frac*1e9))
}

// apply reads one event into the state and the records. r.mu is held.
func (r *celeryReceiver) apply(ev *event, now time.Time, out *logsOut) {
	if ev.Type == "" || ev.Hostname == "" || len(ev.Hostname) > 255 {
		r.malformed("event without type or hostname", errors.New(ev.Type))
		return
	}
	host := ev.Hostname
	ts := eventTime(ev, now)
	r.backend.seen(ts)
	w := r.workers[host]
	if w == nil {
		w = &workerState{events: map[string]int64{}}
		r.workers[host] = w
	}
	// A new main process under the same hostname is a new incarnation: the
	// runs the previous one started can no longer end (Celery leaves them
	// STARTED); both views let them go.
	if ev.PID > 0 && w.pid > 0 && ev.PID != w.pid {
		r.endIncarnation(host, w.pid, ts, out)
		w.hasHB, w.active, w.processed = false, 0, 0
	}
	if ev.PID > 0 {
		w.pid = ev.PID
	}
	if len(w.events) < maxNames || w.events[ev.Type] > 0 {
		w.events[ev.Type]++
	}
	w.fresh = true
	if ev.Type == "worker-offline" {
		w.offline = true
		w.last = now
		return
	}
	w.offline = false
	w.last = now
	switch ev.Type {
	case "worker-online", "worker-heartbeat":
		if ev.Freq > 0 {
			w.freq = ev.Freq
		}
		if ev.Active != nil {
			w.active, w.hasHB = *ev.Active, true
		}
		if ev.Processed != nil {
			w.processed = *ev.Processed
		}
		a := out.record(host, contract.EventHeartbeat, ts)
		a.PutStr(attrEventType, ev.Type)
		if c := r.cfg.capacity(host); c > 0 {
			a.PutInt(contract.AttrCapacity, int64(c))
		}
		a.PutInt(attrWorkerActive, w.active)
		a.PutInt(attrWorkerDone, w.processed)
		a.PutDouble(attrWorkerFreq, w.freq)
		a.PutInt(attrWorkerPID, w.pid)
	case "task-received":
		if ev.UUID == "" {
			return
		}
		if t, ok := r.tasks[ev.UUID]; ok && (t.worker != host || t.pid != w.pid || t.started) {
			// The same task id delivered again while another worker (or
			// incarnation) holds it, or while it runs: a duplicate
			// execution (the Redis transport's visibility_timeout restore
			// re-queues a task still running).
			if !t.redelivered {
				r.tb.ReceiverCeleryTasksRedelivered.Add(context.Background(), 1)
			}
			t.redelivered = true
			return
		}
		r.track(ev.UUID, &taskState{
			worker: host, pid: w.pid, name: ev.Name, retries: ev.Retries,
			received: ts, eta: ev.ETA != nil && *ev.ETA != "",
		})
		w.notePrefetchName(ev.Name)
	case "task-started":
		if ev.UUID == "" {
			return
		}
		t := r.tasks[ev.UUID]
		redelivered := false
		if t == nil {
			t = &taskState{worker: host, pid: w.pid}
			r.track(ev.UUID, t)
		} else if t.redelivered || (t.started && (t.worker != host || t.pid != w.pid)) {
			if !t.redelivered {
				r.tb.ReceiverCeleryTasksRedelivered.Add(context.Background(), 1)
			}
			redelivered = true
			if t.started && t.worker != host {
				r.addCopy(ev.UUID, t.worker)
			}
		} else if !t.started && !t.eta && !t.received.IsZero() {
			w.notePrefetch(t.name, ts.Sub(t.received))
		}
		t.worker, t.pid, t.started, t.redelivered = host, w.pid, true, false
		a := out.record(host, contract.EventStarted, ts)
		a.PutStr(contract.AttrRunID, ev.UUID)
		r.taskAttrs(a, t)
		if redelivered {
			a.PutBool(attrRedelivered, true)
		}
		b := out.brokerRecord(host, contract.EventClaimed, ev.UUID, ts)
		r.taskAttrs(b, t)
		if c := r.cfg.capacity(host); c > 0 {
			b.PutInt(contract.AttrCapacity, int64(c))
		}
		if redelivered {
			b.PutBool(attrRedelivered, true)
		}
	case "task-succeeded":
		r.end(ev.UUID, host, ts, out, succeeded(ev.Runtime), false)
	case "task-failed":
		r.end(ev.UUID, host, ts, out, classifyFailure(ev.Exception, ev.Traceback), false)
	case "task-revoked":
		r.end(ev.UUID, host, ts, out, revoked(ev.Terminated), false)
	case "task-retried":
		r.release(ev.UUID, host, ts, out, releaseRetried)
	case "task-rejected":
		r.release(ev.UUID, host, ts, out, releaseRejected)
	}
}

func (r *celeryReceiver) taskAttrs(a pcommon.Map, t *taskState) {
	if t.name != "" {
		a.PutStr(attrTaskName, t.name)
	}
	a.PutInt(attrTaskRetries, t.retries)
	// The attempt: Celery's retries so far, plus one. A retry is the same
	// task id run again (docs/health-rules.md, "Attempts").
	a.PutInt(contract.AttrRunAttempt, t.retries+1)
}

// end closes a run on both views: a kill when e names a kill reason.
// fromBackend marks an end read from the result backend. r.mu is held.
func (r *celeryReceiver) end(id, host string, ts time.Time, out *logsOut, e runEnd, fromBackend bool) {
	if id == "" {
		return
	}
	t := r.tasks[id]
	// An earlier copy of a task another worker runs again: its own worker's
	// run ends; the task is the other worker's, and stays tracked.
	earlierCopy := r.endCopy(id, host, t)
	if !earlierCopy {
		delete(r.tasks, id)
		if !r.markEnded(id) {
			// Already ended (by its end event or the result backend catch-up).
			return
		}
	}
	if t == nil {
		t = &taskState{worker: host}
	}
	r.endRecord(id, host, ts, out, e, fromBackend, t)
	// The broker's claim closes for the worker that held it; an earlier
	// copy's worker held one too (its ack of the earlier delivery): left
	// open, that worker showed drift_missing on a run it had ended until
	// drift.heal_after.
	if earlierCopy || t.worker == host {
		b := out.brokerRecord(host, contract.EventFinished, id, ts)
		b.PutStr(contract.AttrResult, e.result)
	}
}

// endRecord is a run's end on its worker's view. r.mu is held.
func (r *celeryReceiver) endRecord(id, host string, ts time.Time, out *logsOut, e runEnd, fromBackend bool, t *taskState) {
	name := contract.EventFinished
	if e.killReason != "" {
		name = contract.EventKilled
	}
	a := out.record(host, name, ts)
	a.PutStr(contract.AttrRunID, id)
	r.taskAttrs(a, t)
	a.PutStr(contract.AttrResult, e.result)
	if e.runtime != nil {
		a.PutDouble(attrTaskRuntime, *e.runtime)
	}
	if e.errorType != "" {
		a.PutStr(contract.AttrErrorType, e.errorType)
	}
	if e.killReason != "" {
		a.PutStr(contract.AttrKillReason, e.killReason)
	}
	if e.failed {
		text := e.text
		if len(text) > maxText {
			text = text[:maxText]
		}
		a.PutStr(attrTaskFailure, text)
	}
	if fromBackend {
		a.PutBool(attrFromResultBackend, true)
	}
}

// maxCopies bounds the task ids whose earlier copies are remembered.
const maxCopies = 1024

// addCopy remembers that host runs an earlier copy of task id, which
// another worker started again. r.mu is held.
func (r *celeryReceiver) addCopy(id, host string) {
	if slices.Contains(r.copies[id], host) {
		return
	}
	if _, ok := r.copies[id]; !ok && len(r.copies) >= maxCopies {
		for k := range r.copies { // drop any one: duplicates are rare
			delete(r.copies, k)
			break
		}
	}
	r.copies[id] = append(r.copies[id], host)
}

// endCopy reports whether host's end of task id is that of an earlier
// copy (t, the task, is held by another worker, or has ended), and
// forgets the copy. r.mu is held.
func (r *celeryReceiver) endCopy(id, host string, t *taskState) bool {
	hosts := r.copies[id]
	i := slices.Index(hosts, host)
	if i < 0 || (t != nil && t.worker == host) {
		return false
	}
	hosts = slices.Delete(hosts, i, i+1)
	if len(hosts) == 0 {
		delete(r.copies, id)
	} else {
		r.copies[id] = hosts
	}
	return true
}

// notePrefetch keeps the latest prefetch time of a task name.
func (w *workerState) notePrefetch(name string, d time.Duration) {
	if w.prefetch == nil {
		w.prefetch = map[string]float64{}
	}
	if _, ok := w.prefetch[name]; !ok && len(w.prefetch) >= maxNames {
		return
	}
	w.prefetch[name] = max(d.Seconds(), 0)
}

// notePrefetchName adds a task name to those whose prefetched count is
// emitted.
func (w *workerState) notePrefetchName(name string) {
	if w.prefetchNames == nil {
		w.prefetchNames = map[string]struct{}{}
	}
	if len(w.prefetchNames) < maxNames {
		w.prefetchNames[name] = struct{}{}
	}
}

// release gives a run back on both views (a retry, a rejection, a
// restart). r.mu is held.
func (r *celeryReceiver) release(id, host string, ts time.Time, out *logsOut, reason string) {
	if id == "" {
		return
	}
	t := r.tasks[id]
	delete(r.tasks, id)
	a := out.record(host, contract.EventReleased, ts)
	a.PutStr(contract.AttrRunID, id)
	a.PutStr(attrReleaseReason, reason)
	if t != nil {
		r.taskAttrs(a, t)
	}
	b := out.brokerRecord(host, contract.EventReleased, id, ts)
	b.PutStr(attrReleaseReason, reason)
}

// endIncarnation lets go of the runs an earlier main process of the worker
// held. r.mu is held.
func (r *celeryReceiver) endIncarnation(host string, pid int64, ts time.Time, out *logsOut) {
	ids := make([]string, 0)
	for id, t := range r.tasks {
		if t.worker == host && t.pid == pid {
			ids = append(ids, id)
		}
	}
	sort.Strings(ids)
	for _, id := range ids {
		if !r.tasks[id].started {
			delete(r.tasks, id)
			continue
		}
		r.release(id, host, ts, out, releaseRestarted)
	}
	// Its copies of tasks another worker runs again end with it, on its own
	// view only (the broker's claim is the other worker's).
	copies := make([]string, 0)
	for id, hosts := range r.copies {
		if slices.Contains(hosts, host) {
			copies = append(copies, id)
		}
	}
	sort.Strings(copies)
	for _, id := range copies {
		r.endCopy(id, host, nil)
		a := out.record(host, contract.EventReleased, ts)
		a.PutStr(contract.AttrRunID, id)
		a.PutStr(attrReleaseReason, releaseRestarted)
	}
	r.logger.Info("celery worker restarted under the same hostname: a new incarnation",
		zap.String("worker", host), zap.Int64("old_pid", pid), zap.Int("runs_let_go", len(ids)+len(copies)))
}

// track adds a task, forgetting the oldest past max_tracked_tasks.
func (r *celeryReceiver) track(id string, t *taskState) {
	r.tasks[id] = t
	r.order = append(r.order, id)
	if len(r.order) > 2*r.cfg.MaxTrackedTasks {
		// Compact: keep the ids still tracked, in order.
		kept := r.order[:0]
		for _, o := range r.order {
			if _, ok := r.tasks[o]; ok {
				kept = append(kept, o)
			}
		}
		r.order = kept
	}
	for len(r.tasks) > r.cfg.MaxTrackedTasks && len(r.order) > 0 {
		delete(r.tasks, r.order[0])
		r.order = r.order[1:]
	}
}
