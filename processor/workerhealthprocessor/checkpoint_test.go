package workerhealthprocessor

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componentstatus"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/workerwatch/workerwatch/internal/contract"
	"github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/state"
	"github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/tracker"
)

// started is a harness whose processor checkpoints to store.
func started(t testing.TB, cfg *Config, store *memStorage, opts ...option) *harness {
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

// Issue 14.1: the checkpoint is written incrementally, only the groups of
// slots with a change; a group left empty by forgotten workers is deleted;
// workers seen once are not written. (The whole state was rewritten as one
// value at every evaluation: 227 MB every 5 s after a flood.)
func TestCheckpointWritesOnlyWhatChanged(t *testing.T) {
	store := &memStorage{}
	h := started(t, testCfg(), store)
	n := tracker.GroupSlots + 2 // two groups
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("w%03d", i)
		h.metrics(treeMetrics(ids[i], 10, -1, 1))
	}
	h.logs(wl("once", contract.EventHeartbeat, "", nil))
	h.checkpoint()
	assert.Equal(t, map[string]int{cpGroupKey(0): 1, cpGroupKey(1): 1, cpMetaKey: 1}, store.written())
	assert.ElementsMatch(t, ids, slices.Collect(maps.Values(storedIDs(t, store))), "every worker but the one seen once")

	last := ids[n-1]
	h.metrics(treeMetrics(last, 20, -1, 1))
	h.checkpoint()
	assert.Equal(t, map[string]int{cpGroupKey(1): 1}, store.written(), "only the group of the worker that changed")
	h.checkpoint()
	assert.Empty(t, store.written(), "nothing changed, nothing written")

	// All but the last go quiet and are forgotten after worker_ttl.
	for range 7 {
		h.advance(10 * time.Second)
		h.metrics(treeMetrics(last, 20, -1, 1))
		h.eval()
	}
	h.checkpoint()
	assert.Equal(t, []string{cpGroupKey(1)}, store.keys(cpPrefix+"g/"), "the group left empty is deleted")
	assert.Equal(t, map[int32]string{int32(n - 1): last}, storedIDs(t, store), "the forgotten workers' records are gone")
}

// The checkpoint's encoder and buffers are not kept between checkpoints
// (about 1 MB of a shard's heap): each checkpoint makes its own, and one
// written after another reads back the same.
func TestCheckpointLetsItsEncoderGo(t *testing.T) {
	store := &memStorage{}
	h := started(t, testCfg(), store)
	h.metrics(treeMetrics("w1", 10, -1, 1))
	h.checkpoint()
	assert.Equal(t, map[string]int{cpGroupKey(0): 1, cpMetaKey: 1}, store.written())
	assert.Nil(t, h.p.cpEnc.zstd, "the encoder let go")
	assert.Nil(t, h.p.cpEnc.group, "its buffers too")
	h.metrics(treeMetrics("w2", 10, -1, 1))
	h.checkpoint()
	assert.Contains(t, store.written(), cpGroupKey(0))
	assert.Nil(t, h.p.cpEnc.zstd)
	assert.Equal(t, map[int32]string{0: "w1", 1: "w2"}, storedIDs(t, store), "both checkpoints read back")
}

// checkpoint_every: the timer's evaluations write a checkpoint every N of
// them (the tracker counts the evaluations).
func TestCheckpointEvery(t *testing.T) {
	store := &memStorage{}
	cfg := testCfg()
	cfg.CheckpointEvery = 3
	h := started(t, cfg, store)
	var wrote []int
	for i := 1; i <= 7; i++ {
		// A change to write; the clock stands still, so the timer loop
		// evaluates nothing itself.
		h.metrics(treeMetrics("w1", int64(10+i), -1, 1))
		h.p.tick(context.Background())
		if len(store.written()) > 0 {
			wrote = append(wrote, i)
		}
	}
	assert.Equal(t, []int{3, 6}, wrote, "the evaluations that wrote a checkpoint")
}

// A checkpoint copies a group's records just before it encodes them, not
// those of every group of its batch first (writeGroups): it holds one
// group's records at a time. So a change made while the first group is
// encoded is in the second group as written.
func TestCheckpointCopiesOneGroupAtATime(t *testing.T) {
	store := &memStorage{}
	var h *harness
	var once sync.Once
	second := fmt.Sprintf("w%03d", tracker.GroupSlots) // the first worker of group 1
	h = started(t, testCfg(), store, withMarshal(func(v any) ([]byte, error) {
		once.Do(func() { h.metrics(treeMetrics(second, 77<<20, -1, 1)) }) // while group 0 is encoded
		return json.Marshal(v)
	}))
	for i := range tracker.GroupSlots + 1 {
		h.metrics(treeMetrics(fmt.Sprintf("w%03d", i), 10<<20, -1, 1))
	}
	h.checkpoint()
	rss := map[string]int64{}
	for _, rec := range storedRecords(t, store) {
		rss[rec.ID] = rec.RSS
	}
	require.Len(t, rss, tracker.GroupSlots+1, "every worker written")
	assert.Equal(t, int64(10<<20), rss["w000"])
	assert.Equal(t, int64(77<<20), rss[second], "group 1 copied after group 0 was encoded")
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
	assert.Contains(t, store.written(), cpGroupKey(0))
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
	assert.Equal(t, map[int32]string{0: "a"}, storedIDs(t, store))
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
	setStored(t, store, 3, []byte("{not json"))
	store.mu.Lock()
	store.data[cpLegacyKey] = make([]byte, 1<<20)
	store.mu.Unlock()

	small := testCfg()
	small.Limits.MaxWorkers = 10
	small.Limits.MaxUnconfirmedWorkers = 10
	small.Limits.MaxRuns = 40
	h2 := started(t, small, store)
	h2.p.mu.Lock()
	n, runs := len(h2.p.tracker.ByID()), h2.p.tracker.RunCount()
	h2.p.mu.Unlock()
	assert.Equal(t, 10, n)
	assert.Equal(t, 40, runs)
	assert.Empty(t, store.keys(cpLegacyKey))
	for _, w := range h2.p.tracker.Snapshot(h2.clock.Now().UnixNano()).Workers {
		assert.Equal(t, contract.Unknown, w.State, "restored workers are unknown until they report")
	}
	// The slots not restored are deleted at the next write.
	h2.checkpoint()
	assert.Len(t, storedIDs(t, store), 10)
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
	require.ErrorContains(t, sh.events[0].Err(), "disk full")
	assert.Equal(t, 1, logs.FilterMessageSnippet("writing the checkpoint failed").Len(), "one log line for the episode")

	store.mu.Lock()
	store.fail = nil
	store.mu.Unlock()
	h.checkpoint()
	h.metrics(treeMetrics("w9", 10, -1, 1))
	h.checkpoint()
	assert.Equal(t, []componentstatus.Status{componentstatus.StatusRecoverableError, componentstatus.StatusOK}, sh.statuses())
	assert.Equal(t, 1, logs.FilterMessageSnippet("works again").Len())
	assert.Len(t, storedIDs(t, store), 4, "the workers queued while failing were written")
}

// Counters and histograms are consistent across a restart with a
// checkpoint (docs/processor.md, "Emitted metrics"): before, kills and
// claims continued from the checkpoint while transitions and histograms
// started over from 0, each with the new start time.
func TestCumulativeAcrossRestart(t *testing.T) {
	store := &memStorage{}
	storageID := component.MustNewID("file_storage")
	cfg := testCfg()
	cfg.StorageID = &storageID
	cfg.Lost.After = time.Minute
	ctx := context.Background()
	hst := host{ext: map[component.ID]component.Component{storageID: store}}

	h1 := newHarness(t, cfg)
	pl1 := &pipeline{}
	require.NoError(t, h1.p.start(ctx, hst, pl1))
	started := h1.clock.Now()
	h1.logs(workerLogs("worker",
		rec{Worker: "w1", Event: "workerwatch.run.claimed", Run: "r1", TS: t0},
		rec{Worker: "w1", Event: "workerwatch.run.started", Run: "r1", TS: t0.Add(sec)},
		rec{Worker: "w1", Event: "workerwatch.run.killed", Run: "r1", TS: t0.Add(3 * sec), Attrs: map[string]any{"workerwatch.kill.reason": "timeout", "cicd.pipeline.result": "timeout"}},
	))
	// Its tree confirms it at once (internal/tracker/admission.go): checkpointed whenever
	// the timer (driven by the fake clock too) evaluates.
	h1.metrics(treeMetrics("w1", 100, -1, 1))
	h1.advance(sec)
	h1.p.tick(ctx)
	require.Equal(t, healthy, h1.state("w1"))
	require.NoError(t, h1.p.shutdown(ctx, pl1))

	h2 := newHarness(t, cfg)
	h2.clock.Advance(time.Hour)
	// A new process starts an hour later (the harness's clock starts at t0).
	h2.p.startTime = h2.clock.Now().UnixNano()
	h2.p.tracker.SetStart(h2.p.startTime)
	pl2 := &pipeline{}
	require.NoError(t, h2.p.start(ctx, hst, pl2))
	defer func() { require.NoError(t, h2.p.shutdown(ctx, pl2)) }()
	h2.metrics(treeMetrics("w1", 100, -1, 1))
	h2.logs(workerLogs("worker",
		rec{Worker: "w1", Event: "workerwatch.run.started", Run: "r2", TS: t0.Add(time.Hour)},
		rec{Worker: "w1", Event: "workerwatch.run.finished", Run: "r2", TS: t0.Add(time.Hour + 2*sec), Attrs: map[string]any{"cicd.pipeline.result": "success"}},
	))
	h2.eval()
	h2.p.mu.Lock()
	md := buildMetrics(h2.p.tracker, h2.p.startTime, h2.clock.Now().UnixNano())
	h2.p.mu.Unlock()
	byWorker := metricsByWorker(md)

	sum := func(m pmetric.Metric, attr, value string) (int64, pcommon.Timestamp) {
		dps := m.Sum().DataPoints()
		for i := 0; i < dps.Len(); i++ {
			if v, ok := dps.At(i).Attributes().Get(attr); ok && v.Str() == value {
				return dps.At(i).IntValue(), dps.At(i).StartTimestamp()
			}
		}
		return 0, 0
	}
	start := pcommon.NewTimestampFromTime(started)
	kills, killsStart := sum(byWorker["w1"][contract.MetricKills], contract.AttrKillReason, "timeout")
	assert.Equal(t, int64(1), kills, "kills continue")
	assert.Equal(t, start, killsStart)
	claims, claimsStart := sum(byWorker["w1"][contract.MetricClaims], contract.AttrSource, contract.SourceWorker)
	assert.Equal(t, int64(2), claims, "claims continue: r1 before the restart, r2 (its start is its claim) after")
	assert.Equal(t, start, claimsStart)
	trans, transStart := sum(byWorker["w1"][contract.MetricStateTransitions], contract.AttrState, "healthy")
	assert.Equal(t, int64(2), trans, "transitions continue: healthy before the restart and after it")
	assert.Equal(t, start, transStart, "from the first start")
	durations := byWorker[""][contract.MetricRunDuration].Histogram().DataPoints()
	var total uint64
	for i := 0; i < durations.Len(); i++ {
		total += durations.At(i).Count()
		assert.Equal(t, start, durations.At(i).StartTimestamp(), "histograms from the first start")
	}
	assert.Equal(t, uint64(2), total, "the run before the restart and the one after")
}

// openfn helper's finding: a restart longer than lost.after made idle
// workers lost at once (their restored last sign of life was old). Silence
// the processor did not witness counts from the restore.
func TestRestoredSilenceCountsFromTheRestore(t *testing.T) {
	store := &memStorage{}
	storageID := component.MustNewID("file_storage")
	cfg := testCfg()
	cfg.StorageID = &storageID
	ctx := context.Background()
	hst := host{ext: map[component.ID]component.Component{storageID: store}}
	h1 := newHarness(t, cfg)
	pl1 := &pipeline{}
	require.NoError(t, h1.p.start(ctx, hst, pl1))
	h1.metrics(treeMetrics("w1", 100, -1, 1))
	h1.advance(sec)
	h1.p.tick(ctx)
	require.NoError(t, h1.p.shutdown(ctx, pl1))

	// Down for longer than lost.after (5 s in the test config).
	h2 := newHarness(t, cfg)
	h2.clock.Advance(20 * sec)
	pl2 := &pipeline{}
	require.NoError(t, h2.p.start(ctx, hst, pl2))
	defer func() { require.NoError(t, h2.p.shutdown(ctx, pl2)) }()
	h2.eval()
	assert.Equal(t, unknown, h2.state("w1"), "not lost for silence nobody witnessed")
	for range 6 { // evaluated every emit_interval, as the loop does
		h2.advance(sec)
		h2.eval()
	}
	assert.Equal(t, lost, h2.state("w1"), "lost after lost.after of silence since the restore")
}

// A restart restores drift and evidence; restored workers are unknown, never
// healthy, until they report again.
func TestRestoreAfterRestart(t *testing.T) {
	store := &memStorage{}
	storageID := component.MustNewID("file_storage")
	cfg := testCfg()
	cfg.StorageID = &storageID
	cfg.Lost.After = time.Minute
	// The test evaluates by hand: a timer that fired as it advances the
	// clock would evaluate beside it (a data race on the worker it reads).
	cfg.EmitInterval = time.Hour
	ctx := context.Background()
	h1 := newHarness(t, cfg)
	sub := &subscriber{}
	healthID := component.MustNewID("worker_health")
	cfg.HealthExtension = &healthID
	hst := host{ext: map[component.ID]component.Component{storageID: store, healthID: sub}}
	pl1 := &pipeline{}
	require.NoError(t, h1.p.start(ctx, hst, pl1))
	twoCheckpointedWorkers(t, h1)
	require.NoError(t, h1.p.shutdown(ctx, pl1))

	h2 := newHarness(t, cfg)
	h2.clock.Advance(10 * time.Second)
	sub2 := &subscriber{}
	hst.ext[healthID] = sub2
	pl2 := &pipeline{}
	require.NoError(t, h2.p.start(ctx, hst, pl2))
	snap := sub2.last()
	require.Len(t, snap.Workers, 2)
	for _, w := range snap.Workers {
		assert.Equal(t, contract.Unknown, w.State, "restored as unknown")
		// Before: restored workers had no reason at all.
		require.Len(t, w.Reasons, 1, "restored as unknown, with a reason")
		assert.Equal(t, state.CodeNotReported, w.Reasons[0].Code)
	}
	assert.Equal(t, []string{"r1"}, snap.Workers[0].Runs.Scheduler)

	restored := h2.clock.Now()
	h2.advance(time.Second)
	h2.eval()
	assert.Equal(t, unknown, h2.state("w1"), "no telemetry since the restart: never healthy")
	// Evaluated, it keeps saying why, since the restore (before: the
	// reason lost "restored" and its since went back to when the previous
	// process first saw the worker).
	r := h2.reason(state.CodeNotReported)
	assert.Contains(t, r.Message, "restored from the checkpoint")
	assert.Equal(t, restored, r.Since)
	assert.Equal(t, unhealthy, h2.state("w2"), "restored evidence still counts")
	hb(h2)
	h2.eval()
	assert.Equal(t, degraded, h2.state("w1"), "drift survived the restart")
	assert.Contains(t, h2.codes("w1"), state.CodeMissing)
	require.NoError(t, h2.p.shutdown(ctx, pl2))
}

// twoCheckpointedWorkers gives h's processor w1, whose scheduler holds a run
// the worker does not (missing), and w2, over its memory limit (latched),
// both judged: what a restart must bring back (TestRestoreAfterRestart,
// TestRestoreReadsPlainJSONRecords).
func twoCheckpointedWorkers(t *testing.T, h *harness) {
	t.Helper()
	hb(h)
	h.logs(sl("w1", contract.EventClaimed, "r1"))
	for range 3 {
		h.metrics(treeMetrics("w2", 5000, -1, 1))
	}
	h.advance(5 * time.Second)
	h.p.tick(context.Background())
	require.Equal(t, degraded, h.state("w1"))
	require.Equal(t, unhealthy, h.state("w2"))
}

// storedIDs is the id of the worker in each slot of the checkpoint in store.
func storedIDs(t *testing.T, store *memStorage) map[int32]string {
	t.Helper()
	out := map[int32]string{}
	for slot, rec := range storedRecords(t, store) {
		out[slot] = rec.ID
	}
	return out
}

// storedRecords is the record of each slot of the checkpoint in store,
// decoded.
func storedRecords(t *testing.T, store *memStorage) map[int32]tracker.Record {
	t.Helper()
	out := map[int32]tracker.Record{}
	for slot, v := range storedSlots(t, store) {
		js, err := decodeRecord(v)
		require.NoError(t, err, "slot %d", slot)
		var rec tracker.Record
		require.NoError(t, json.Unmarshal(js, &rec), "slot %d", slot)
		out[slot] = rec
	}
	return out
}

// storedSlots is the stored record of each slot of the checkpoint in store.
func storedSlots(t *testing.T, store *memStorage) map[int32][]byte {
	t.Helper()
	out := map[int32][]byte{}
	for _, k := range store.keys(cpPrefix + "g/") {
		g, err := strconv.Atoi(strings.TrimPrefix(k, cpPrefix+"g/"))
		require.NoError(t, err)
		store.mu.Lock()
		v := store.data[k]
		store.mu.Unlock()
		require.NoError(t, decodeGroup(v, func(i int, rec []byte) {
			if len(rec) > 0 {
				out[int32(g*tracker.GroupSlots+i)] = rec
			}
		}), k)
	}
	return out
}

// setStored replaces the stored record of one slot (nil: empties it) in
// the checkpoint in store.
func setStored(t *testing.T, store *memStorage, slot int32, stored []byte) {
	t.Helper()
	all := storedSlots(t, store)
	all[slot] = stored
	g := tracker.GroupOf(slot)
	v := []byte{cpGroupFormat1}
	for s := g * tracker.GroupSlots; s < (g+1)*tracker.GroupSlots; s++ {
		v = binary.AppendUvarint(v, uint64(len(all[s])))
		v = append(v, all[s]...)
	}
	store.mu.Lock()
	store.data[cpGroupKey(g)] = v
	store.mu.Unlock()
}

// The group keys sort as the groups do (bbolt keeps them in key order, and
// a batch of consecutive groups then rewrites whole nodes).
func TestCheckpointGroupKeysSort(t *testing.T) {
	assert.True(t, slices.IsSorted([]string{cpGroupKey(2), cpGroupKey(10), cpGroupKey(100), cpGroupKey(1<<25 - 1)}))
	assert.Equal(t, cpPrefix+"g/00000002", cpGroupKey(2))
}

// A group whose value is broken (a torn write, a bad disk) loses its
// workers (compressed whole, format 2: those after the break in a group of
// format 1, TestCheckpointGroupCodec): the other groups' workers come back,
// and the group is rewritten at the next checkpoint.
func TestRestoreSkipsABrokenGroup(t *testing.T) {
	store := &memStorage{}
	h := started(t, testCfg(), store)
	n := tracker.GroupSlots + 4
	for i := range n {
		h.metrics(treeMetrics(fmt.Sprintf("w%03d", i), 10, -1, 1))
	}
	h.checkpoint()
	store.mu.Lock()
	v := store.data[cpGroupKey(1)]
	store.data[cpGroupKey(1)] = v[:len(v)-10] // torn: compressed whole, the group's four workers are lost
	store.mu.Unlock()

	h2 := started(t, testCfg(), store)
	h2.p.mu.Lock()
	restored := len(h2.p.tracker.ByID())
	h2.p.mu.Unlock()
	assert.Equal(t, tracker.GroupSlots, restored, "all but the torn group's")
	h2.checkpoint()
	assert.Len(t, storedIDs(t, store), tracker.GroupSlots, "the broken group rewritten")
}

// A checkpoint of many groups is written cpWriteGroups groups per storage
// batch (what it and bbolt hold at once stays that size), each group whole,
// the meta record with the last; a batch that fails leaves it and the
// groups after it queued, and the next checkpoint writes those.
func TestCheckpointInBatches(t *testing.T) {
	store := &memStorage{}
	h := started(t, testCfg(), store)
	n := cpWriteGroups*tracker.GroupSlots + 1 // one group more than a batch
	ids := make([]string, n)
	report := func() {
		for i := range ids {
			ids[i] = fmt.Sprintf("w%05d", i)
			h.metrics(treeMetrics(ids[i], 10, -1, 1))
		}
	}
	report()
	store.mu.Lock()
	store.sets = 0
	store.mu.Unlock()
	h.checkpoint()
	w := store.written()
	assert.Len(t, w, cpWriteGroups+2, "every group and the meta record")
	store.mu.Lock()
	assert.Equal(t, 2, store.sets, "in two batches")
	store.sets, store.failSet = 0, 2
	store.mu.Unlock()
	assert.Len(t, storedIDs(t, store), n)

	report() // every worker changed; the second batch fails
	h.checkpoint()
	w = store.written()
	assert.Len(t, w, cpWriteGroups, "the first batch written")
	assert.NotContains(t, w, cpGroupKey(cpWriteGroups))
	h.checkpoint()
	assert.Equal(t, map[string]int{cpGroupKey(cpWriteGroups): 1}, store.written(), "the group of the failed batch, at the next checkpoint")
}
