package celeryreceiver // import "github.com/workerwatch/workerwatch/receiver/celeryreceiver"

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/extension/xextension/storage"
	"go.uber.org/zap"
)

// Celery's Redis result backend (celery/backends/base.py,
// KeyValueStoreBackend) stores each finished task under
// "celery-task-meta-<task id>": JSON with status, result, traceback,
// date_done (UTC, isoformat without a zone) and task_id; with
// result_extended also name, worker, retries and queue.
const resultKeyPrefix = "celery-task-meta-"

// attrFromResultBackend marks a run end read from the result backend.
const attrFromResultBackend = "celery.task.from_result_backend"

// stateKey is the storage key of the kept state.
const stateKey = "celery_state"

type resultMeta struct {
	Status    string          `json:"status"`
	Result    json.RawMessage `json:"result"`
	Traceback *string         `json:"traceback"`
	DateDone  *string         `json:"date_done"`
	TaskID    string          `json:"task_id"`
	Name      string          `json:"name"`
	Worker    string          `json:"worker"`
	Retries   int64           `json:"retries"`
}

// keptState is what the storage extension keeps across restarts.
type keptState struct {
	// LastEvent is the latest event time seen (unix nanoseconds).
	LastEvent int64 `json:"last_event"`
	// Open are the runs started and not ended.
	Open map[string]keptTask `json:"open"`
}

type keptTask struct {
	Worker  string `json:"worker"`
	PID     int64  `json:"pid"`
	Name    string `json:"name,omitempty"`
	Retries int64  `json:"retries,omitempty"`
}

// backend is the result catch-up's state; nil when result_backend is off.
type backend struct {
	client *redis.Client
	store  storage.Client
	// ended: task ids whose run end was emitted (by an event or the
	// catch-up), bounded by max_tracked_tasks, so none ends twice.
	ended      map[string]struct{}
	endedOrder []string
	// lastEvent is the latest event time seen; resumeFrom the one at the
	// latest disconnection (or loaded from storage): results done after it
	// may have been missed.
	lastEvent  time.Time
	resumeFrom time.Time
	// pending: a catch-up is due (the broker just (re)connected).
	pending bool
}

func newBackend(cfg *Config) (*backend, error) {
	if cfg.ResultBackend == "" {
		return nil, nil
	}
	opts, err := redis.ParseURL(cfg.ResultBackend)
	if err != nil {
		return nil, fmt.Errorf("result_backend: %w", err)
	}
	return &backend{client: newRedisClient(opts, "workerwatch-celery-results"), ended: map[string]struct{}{}}, nil
}

// openStorage gets the storage client and loads the kept state. r.mu is
// held.
func (r *celeryReceiver) openStorage(ctx context.Context, host component.Host) error {
	if r.cfg.StorageID == nil || r.backend == nil {
		return nil
	}
	ext, ok := host.GetExtensions()[*r.cfg.StorageID]
	if !ok {
		return fmt.Errorf("storage: extension %q not found (list it under service.extensions)", r.cfg.StorageID)
	}
	se, ok := ext.(storage.Extension)
	if !ok {
		return fmt.Errorf("storage: extension %q is not a storage extension", r.cfg.StorageID)
	}
	st, err := se.GetClient(ctx, component.KindReceiver, r.set.ID, "")
	if err != nil {
		return fmt.Errorf("storage: %w", err)
	}
	r.backend.store = st
	raw, err := st.Get(ctx, stateKey)
	if err != nil || len(raw) == 0 {
		return nil
	}
	var ks keptState
	if err := json.Unmarshal(raw, &ks); err != nil {
		r.logger.Warn("celery: the kept state is not readable; starting without it", zap.Error(err))
		return nil
	}
	if ks.LastEvent > 0 {
		r.backend.lastEvent = time.Unix(0, ks.LastEvent)
		r.backend.resumeFrom = r.backend.lastEvent
	}
	for _, id := range slices.Sorted(maps.Keys(ks.Open)) {
		k := ks.Open[id]
		r.track(id, &taskState{worker: k.Worker, pid: k.PID, name: k.Name, retries: k.Retries, started: true})
	}
	return nil
}

// saveState writes the kept state (every collection_interval and at
// shutdown).
func (r *celeryReceiver) saveState(ctx context.Context) {
	if r.backend == nil || r.backend.store == nil {
		return
	}
	r.mu.Lock()
	ks := keptState{Open: map[string]keptTask{}}
	if !r.backend.lastEvent.IsZero() {
		ks.LastEvent = r.backend.lastEvent.UnixNano()
	}
	for id, t := range r.tasks {
		if t.started {
			ks.Open[id] = keptTask{Worker: t.worker, PID: t.pid, Name: t.name, Retries: t.retries}
		}
	}
	r.mu.Unlock()
	raw, err := json.Marshal(ks)
	if err == nil {
		err = r.backend.store.Set(ctx, stateKey, raw)
	}
	if err != nil {
		r.logger.Warn("celery: keeping the state failed", zap.Error(err))
	}
}

// seen notes an event's time. r.mu is held.
func (b *backend) seen(ts time.Time) {
	if b != nil && ts.After(b.lastEvent) {
		b.lastEvent = ts
	}
}

// markEnded records id as ended; false if it already was. r.mu is held.
func (r *celeryReceiver) markEnded(id string) bool {
	b := r.backend
	if b == nil {
		return true
	}
	if _, dup := b.ended[id]; dup {
		return false
	}
	b.ended[id] = struct{}{}
	b.endedOrder = append(b.endedOrder, id)
	for len(b.endedOrder) > r.cfg.MaxTrackedTasks {
		delete(b.ended, b.endedOrder[0])
		b.endedOrder = b.endedOrder[1:]
	}
	return true
}

// connected is called when the broker's event stream is (re)subscribed.
func (r *celeryReceiver) connected() {
	if r.backend == nil {
		return
	}
	r.mu.Lock()
	r.backend.pending = true
	r.mu.Unlock()
}

// disconnected: results done from now on may be missed.
func (r *celeryReceiver) disconnected() {
	if r.backend == nil {
		return
	}
	r.mu.Lock()
	if !r.backend.lastEvent.IsZero() && (r.backend.resumeFrom.IsZero() || r.backend.resumeFrom.After(r.backend.lastEvent)) {
		r.backend.resumeFrom = r.backend.lastEvent
	}
	r.mu.Unlock()
}

// catchUp reads the result backend once after a (re)connection and ends
// the runs whose end event was missed: the runs it holds open whose result
// is final, and the results done after resumeFrom. A failed read is
// retried at the next tick.
func (r *celeryReceiver) catchUp(ctx context.Context) {
	b := r.backend
	if b == nil {
		return
	}
	r.mu.Lock()
	due := b.pending
	from := b.resumeFrom
	r.mu.Unlock()
	if !due {
		return
	}
	metas, err := r.readResults(ctx)
	if err != nil {
		r.logger.Warn("celery: reading the result backend failed; retrying at the next collection",
			zap.Error(err))
		return
	}
	out := &logsOut{}
	recovered, unattributed := 0, 0
	r.mu.Lock()
	b.pending = false
	if b.resumeFrom.Equal(from) {
		b.resumeFrom = time.Time{}
	}
	for _, m := range metas {
		final := m.Status == "SUCCESS" || m.Status == "FAILURE" || m.Status == "REVOKED"
		if !final || m.TaskID == "" {
			continue
		}
		if _, dup := b.ended[m.TaskID]; dup {
			continue
		}
		done := parseDateDone(m.DateDone)
		t := r.tasks[m.TaskID]
		if t == nil || !t.started {
			if from.IsZero() || done.IsZero() || !done.After(from) {
				continue
			}
			if m.Worker == "" {
				unattributed++
				continue
			}
			t = &taskState{worker: m.Worker, name: m.Name, retries: m.Retries}
			r.tasks[m.TaskID] = t
		}
		if done.IsZero() {
			done = r.now()
		}
		r.endFromResult(m, t, done, out)
		recovered++
	}
	r.mu.Unlock()
	if recovered > 0 {
		r.tb.ReceiverCeleryResultsRecovered.Add(ctx, int64(recovered))
	}
	if unattributed > 0 {
		r.tb.ReceiverCeleryResultsUnattributed.Add(ctx, int64(unattributed))
	}
	r.logger.Info("celery: result backend read after (re)connection",
		zap.Int("results", len(metas)), zap.Int("runs_ended", recovered), zap.Int("without_worker", unattributed))
	if out.n > 0 && r.logs != nil {
		if err := r.logs.ConsumeLogs(ctx, out.ld); err != nil {
			r.logger.Debug("celery: the logs pipeline refused records", zap.Error(err))
		}
	}
}

// endFromResult emits a run end with the event path's mapping. r.mu is
// held.
func (r *celeryReceiver) endFromResult(m resultMeta, t *taskState, ts time.Time, out *logsOut) {
	var e runEnd
	switch m.Status {
	case "SUCCESS":
		e = succeeded(nil)
	case "REVOKED":
		e = revoked(false)
	case "FAILURE":
		var exc struct {
			Type    string          `json:"exc_type"`
			Module  string          `json:"exc_module"`
			Message json.RawMessage `json:"exc_message"`
		}
		_ = json.Unmarshal(m.Result, &exc)
		exception := exc.Type
		if exc.Module != "" && exc.Type != "" {
			exception = exc.Module + "." + exc.Type
		}
		if msg := excMessage(exc.Message); msg != "" {
			exception += ": " + msg
		}
		tb := ""
		if m.Traceback != nil {
			tb = *m.Traceback
		}
		e = classifyFailure(exception, tb)
	default:
		return
	}
	r.end(m.TaskID, t.worker, ts, out, e, true)
}

// excMessage: exc_message is a list of the exception's args (or a string).
func excMessage(raw json.RawMessage) string {
	if len(raw) == 0 {
		return ""
	}
	var s string
	if json.Unmarshal(raw, &s) == nil {
		return s
	}
	var args []any
	if json.Unmarshal(raw, &args) == nil {
		parts := make([]string, 0, len(args))
		for _, a := range args {
			parts = append(parts, fmt.Sprint(a))
		}
		return strings.Join(parts, ", ")
	}
	return ""
}

// parseDateDone reads date_done: datetime.utcnow().isoformat() (no zone),
// or with one.
func parseDateDone(s *string) time.Time {
	if s == nil || *s == "" {
		return time.Time{}
	}
	for _, layout := range []string{"2006-01-02T15:04:05.999999999", time.RFC3339Nano} {
		if t, err := time.Parse(layout, *s); err == nil {
			return t
		}
	}
	return time.Time{}
}

// readResults SCANs the result keys (at most result_scan_limit) and reads
// them with MGET in batches.
func (r *celeryReceiver) readResults(ctx context.Context) ([]resultMeta, error) {
	c := r.backend.client
	rctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	var keys []string
	var cursor uint64
	for {
		batch, next, err := c.Scan(rctx, cursor, resultKeyPrefix+"*", 1000).Result()
		if err != nil {
			return nil, fmt.Errorf("result_backend: SCAN: %w", err)
		}
		keys = append(keys, batch...)
		cursor = next
		if cursor == 0 || len(keys) >= r.cfg.ResultScanLimit {
			break
		}
	}
	if len(keys) > r.cfg.ResultScanLimit {
		keys = keys[:r.cfg.ResultScanLimit]
	}
	var out []resultMeta
	for i := 0; i < len(keys); i += 500 {
		j := min(i+500, len(keys))
		vals, err := c.MGet(rctx, keys[i:j]...).Result()
		if err != nil {
			return nil, fmt.Errorf("result_backend: MGET: %w", err)
		}
		for _, v := range vals {
			s, ok := v.(string)
			if !ok {
				continue
			}
			var m resultMeta
			if err := json.Unmarshal([]byte(s), &m); err != nil {
				r.malformed("result backend value is not JSON", err)
				continue
			}
			out = append(out, m)
		}
	}
	return out, nil
}
