package workerhealthprocessor

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componentstatus"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/workerwatch/workerwatch/internal/contract"
)

// started is a harness whose processor checkpoints to store.
func started(t *testing.T, cfg *Config, store *memStorage, opts ...option) *harness {
	t.Helper()
	id := component.MustNewID("file_storage")
	cfg.StorageID = &id
	h := newHarness(t, cfg, opts...)
	pl := &pipeline{}
	require.NoError(t, h.p.start(context.Background(), host{ext: map[component.ID]component.Component{id: store}}, pl))
	t.Cleanup(func() { require.NoError(t, h.p.shutdown(context.Background(), pl)) })
	return h
}

func (h *harness) checkpoint() {
	h.p.cpMu.Lock()
	defer h.p.cpMu.Unlock()
	h.p.writeCheckpoint(context.Background())
}

// Issue 14.1: the checkpoint is written incrementally, one record per
// worker, only those that changed; a forgotten worker's record is deleted;
// workers seen once are not written. (The whole state was rewritten as one
// value at every evaluation: 227 MB every 5 s after a flood.)
func TestCheckpointWritesOnlyWhatChanged(t *testing.T) {
	store := &memStorage{}
	h := started(t, testCfg(), store)
	for _, w := range []string{"a", "b", "c"} {
		h.metrics(treeMetrics(w, 10, -1, 1))
	}
	h.logs(wl("once", contract.EventHeartbeat, "", nil))
	h.checkpoint()
	assert.Equal(t, map[string]int{cpSlotKey(0): 1, cpSlotKey(1): 1, cpSlotKey(2): 1, cpMetaKey: 1}, store.written())

	h.metrics(treeMetrics("b", 20, -1, 1))
	h.checkpoint()
	w := store.written()
	assert.Len(t, w, 1, "only b's record: %v", w)
	h.checkpoint()
	assert.Empty(t, store.written(), "nothing changed, nothing written")

	// a and c go quiet and are forgotten after worker_ttl; b reports.
	for range 7 {
		h.advance(10 * time.Second)
		h.metrics(treeMetrics("b", 20, -1, 1))
		h.eval()
	}
	h.checkpoint()
	assert.Len(t, store.keys(cpPrefix+"w/"), 1, "the forgotten workers' records are deleted")
}

// Issue 14.1: the processor's lock is not held while the checkpoint is
// marshaled and written: a large state or a slow disk does not stall the
// pipelines (the whole state was marshaled under the lock).
func TestCheckpointDoesNotHoldTheLock(t *testing.T) {
	store := &memStorage{}
	marshaling, release := make(chan struct{}), make(chan struct{})
	var first sync.Once
	h := started(t, testCfg(), store, withMarshal(func(v any) ([]byte, error) {
		first.Do(func() { // the first record is held; shutdown's are not
			close(marshaling)
			<-release
		})
		return json.Marshal(v)
	}))
	h.metrics(treeMetrics("a", 10, -1, 1))
	done := make(chan struct{})
	go func() {
		h.checkpoint()
		close(done)
	}()
	<-marshaling
	ingested := make(chan struct{})
	go func() {
		h.metrics(treeMetrics("b", 10, -1, 1))
		close(ingested)
	}()
	select {
	case <-ingested:
	case <-time.After(time.Minute):
		t.Fatal("ingestion waited for the checkpoint's marshaling")
	}
	close(release)
	<-done
	assert.Contains(t, store.written(), cpSlotKey(0))
}

// A failed write keeps the changed workers queued for the next one.
func TestCheckpointRetriesAfterAFailedWrite(t *testing.T) {
	store := &memStorage{fail: errors.New("disk full")}
	h := started(t, testCfg(), store)
	h.metrics(treeMetrics("a", 10, -1, 1))
	h.checkpoint()
	store.mu.Lock()
	store.fail = nil
	store.mu.Unlock()
	h.checkpoint()
	assert.Contains(t, store.written(), cpSlotKey(0))
}

// Issue 14.1: after a restart the state is bounded the same way: at most
// limits.max_workers workers and limits.max_runs runs come back, records
// that cannot be read are skipped, and the version 1 checkpoint (one huge
// value) is deleted unread.
func TestRestoreIsBounded(t *testing.T) {
	store := &memStorage{}
	cfg := testCfg()
	h := started(t, cfg, store)
	for i := range 30 {
		id := fmt.Sprintf("w%02d", i)
		h.metrics(treeMetrics(id, 10, -1, 1))
		for r := range 10 {
			h.logs(sl(id, contract.EventClaimed, fmt.Sprintf("%s-r%d", id, r)))
		}
	}
	h.checkpoint()
	store.mu.Lock()
	store.data[cpSlotKey(3)] = []byte("{not json")
	store.data[cpLegacyKey] = make([]byte, 1<<20)
	store.mu.Unlock()

	small := testCfg()
	small.Limits.MaxWorkers = 10
	small.Limits.MaxUnconfirmedWorkers = 10
	small.Limits.MaxRuns = 40
	h2 := started(t, small, store)
	h2.p.mu.Lock()
	n, runs := len(h2.p.tracker.workers), h2.p.tracker.runCount
	h2.p.mu.Unlock()
	assert.Equal(t, 10, n)
	assert.Equal(t, 40, runs)
	assert.Empty(t, store.keys(cpLegacyKey))
	for _, w := range h2.p.tracker.snapshot(h2.clock.Now().UnixNano()).Workers {
		assert.Equal(t, contract.Unknown, w.State, "restored workers are unknown until they report")
	}
	// The slots not restored are deleted at the next write.
	h2.checkpoint()
	assert.Len(t, store.keys(cpPrefix+"w/"), 10)
}

// Without a storage nothing queues workers for a checkpoint (the queue
// would hold every worker ever seen, forgotten ones too).
func TestNoCheckpointQueueWithoutStorage(t *testing.T) {
	h := newHarness(t, testCfg())
	for i := range 100 {
		h.logs(wl(fmt.Sprintf("w%d", i), contract.EventHeartbeat, "", nil))
	}
	h.advance(time.Minute)
	h.eval()
	h.p.mu.Lock()
	defer h.p.mu.Unlock()
	assert.Empty(t, h.p.tracker.workers)
	assert.Empty(t, h.p.tracker.cp.dirty)
}

// statusHost records the component status events reported to it, as the
// collector's per-instance host does.
type statusHost struct {
	host
	mu     sync.Mutex
	events []*componentstatus.Event
}

func (s *statusHost) Report(ev *componentstatus.Event) {
	s.mu.Lock()
	s.events = append(s.events, ev)
	s.mu.Unlock()
}

func (s *statusHost) statuses() []componentstatus.Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []componentstatus.Status
	for _, ev := range s.events {
		out = append(out, ev.Status())
	}
	return out
}

// A failing checkpoint is the component's status (as memory_limiter reports
// its own): a recoverable error at the first failed write, OK at the next
// good one, and one log line per change, not one per evaluation.
func TestCheckpointFailureIsReportedAsStatus(t *testing.T) {
	store := &memStorage{fail: errors.New("disk full")}
	id := component.MustNewID("file_storage")
	cfg := testCfg()
	cfg.StorageID = &id
	h := newHarness(t, cfg)
	core, logs := observer.New(zap.InfoLevel)
	h.p.logger = zap.New(core)
	sh := &statusHost{host: host{ext: map[component.ID]component.Component{id: store}}}
	pl := &pipeline{}
	require.NoError(t, h.p.start(context.Background(), sh, pl))
	t.Cleanup(func() { require.NoError(t, h.p.shutdown(context.Background(), pl)) })
	require.Empty(t, sh.statuses(), "nothing to report before a write")

	for i := range 3 {
		h.metrics(treeMetrics(fmt.Sprint("w", i), 10, -1, 1))
		h.checkpoint()
	}
	require.Equal(t, []componentstatus.Status{componentstatus.StatusRecoverableError}, sh.statuses())
	assert.ErrorContains(t, sh.events[0].Err(), "disk full")
	assert.Equal(t, 1, logs.FilterMessageSnippet("writing the checkpoint failed").Len(), "one log line for the episode")

	store.mu.Lock()
	store.fail = nil
	store.mu.Unlock()
	h.checkpoint()
	h.metrics(treeMetrics("w9", 10, -1, 1))
	h.checkpoint()
	assert.Equal(t, []componentstatus.Status{componentstatus.StatusRecoverableError, componentstatus.StatusOK}, sh.statuses())
	assert.Equal(t, 1, logs.FilterMessageSnippet("works again").Len())
	assert.Contains(t, store.keys(cpPrefix), cpSlotKey(2), "the workers queued while failing were written")
}

// The per-rule checkpoint records are embedded in cpWorker and written as one
// flat JSON object, the format of version 2 (worker_health.v2/): the keys
// are those a checkpoint written before the records were split holds, each
// once (a key repeated by two records would be dropped by encoding/json).
func TestCheckpointRecordKeys(t *testing.T) {
	h := newHarness(t, testCfg())
	h.metrics(treeMetrics("w1", 10, -1, 1))
	h.logs(wl("w1", "workerwatch.run.claimed", "r1", map[string]any{"workerwatch.worker.capacity": 2}))
	h.logs(sl("w1", "workerwatch.run.claimed", "r1"))
	for _, r := range []string{"r1", "r2", "r3"} { // 3 kills that count: kill_since
		h.logs(wl("w1", "workerwatch.run.killed", r, map[string]any{"workerwatch.kill.reason": "oom"}))
	}
	h.eval()
	h.p.mu.Lock()
	rec := h.p.tracker.toCheckpoint(h.p.tracker.workers["w1"])
	h.p.mu.Unlock()
	b, err := json.Marshal(&rec)
	require.NoError(t, err)
	var m map[string]any
	require.NoError(t, json.Unmarshal(b, &m))
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	assert.Equal(t, []string{
		"alive", "cap", "cgmax", "claims", "ev", "first", "id", "kill_log", "kill_since", "kills", "last_claim",
		"mem", "mention", "roles", "rss", "runs", "sched", "sched_known", "sources", "transitions",
	}, keys)
	var back cpWorker
	require.NoError(t, json.Unmarshal(b, &back))
	assert.Equal(t, rec, back, "a record reads back as written")
}
