package workerhealthprocessor // import "github.com/workerwatch/workerwatch/processor/workerhealthprocessor"

import (
	"context"
	"encoding/json"
	"fmt"
	"strconv"
	"unicode/utf8"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componentstatus"
	"go.opentelemetry.io/collector/extension/xextension/storage"
	"go.uber.org/zap"

	"github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/state"
)

// The checkpoint lives in the storage client under these keys: one record
// per worker, in a numbered slot, and a meta record saying how many slots to
// read. Version the prefix: a format change must not restore garbage.
//
// Only what changed is written: a worker is rewritten after a record about it
// (or a change of its runs) since the last checkpoint, and its slot deleted
// when it is forgotten. Records are copied under the processor's lock and
// marshaled and written outside it. Restore reads the slots in chunks and
// admits what the limits allow, so a checkpoint never brings back more than
// limits.max_workers workers and limits.max_runs runs.
//
// To add a field: add it to the rule's checkpoint record (state.MemoryRecord
// in internal/state/memory.go, state.KillsRecord in internal/state/kills.go,
// state.DriftRecord in internal/state/drift.go, ...) with `json:",omitempty"` and fill it in that
// type's Checkpoint/cp and Restore/restore, next to the state it keeps. The records are
// embedded in cpWorker, so their keys share one JSON object: a new key must
// not repeat another record's (TestCheckpointRecordKeys). Unknown fields are
// ignored and missing ones are zero, so no version change is needed unless
// a field changes meaning.
const (
	checkpointVersion = 2
	cpPrefix          = "worker_health.v2/"
	cpMetaKey         = cpPrefix + "meta"
	// cpLegacyKey held the whole state in one value (version 1), rewritten
	// at every checkpoint; it is deleted, unread (it could be hundreds of MB).
	cpLegacyKey = "worker_health.v1"
	// cpReadChunk slots are read per storage batch at restore.
	cpReadChunk = 256
	// cpMaxRecord: a worker record larger than this is malformed (the
	// largest a worker can have is max_runs_per_worker runs with ids of
	// max_attribute_length bytes: 256 x ~500 B).
	cpMaxRecord = 4 << 20
)

func cpSlotKey(slot int32) string { return cpPrefix + "w/" + strconv.Itoa(int(slot)) }

// cpMeta is the checkpoint's meta record.
type cpMeta struct {
	Version       int   `json:"version"`
	SchedulerSeen int64 `json:"scheduler_seen"`
	// Slots: slots 0 to Slots-1 may hold a worker.
	Slots int32 `json:"slots"`
	// Start is when the cumulative series (counters, histograms) began:
	// the first start, kept across restarts so every one of them continues
	// from it (docs/processor.md, "Emitted metrics").
	Start int64 `json:"start,omitempty"`
}

// cpHistsKey holds the fleet-wide histograms (written when they changed).
const cpHistsKey = cpPrefix + "hists"

// cpSlots is the tracker's bookkeeping of the slots.
type cpSlots struct {
	enabled bool    // a storage is configured
	hw      int32   // slots handed out so far: 0..hw-1
	free    []int32 // slots of forgotten workers, to hand out again
	deleted []int32 // slots to delete at the next write
	dirty   []*worker
}

// cpWrite is one worker record to write.
type cpWrite struct {
	slot int32
	id   string
	rec  cpWorker
}

// cpWorker is a worker's checkpoint record: the evidence, not the verdict.
// Restored workers are "unknown" until they send telemetry again (or "lost"
// when they never do), except that a memory latch or recent kills still make
// them "unhealthy". Each rule's state type has its own record (state.IdentityRecord in
// internal/state/identity.go, state.RunsRecord in runstate.go, ...), embedded here: encoding/json
// writes their fields flat, as one record.
type cpWorker struct {
	ID string `json:"id"`
	state.AdmissionRecord
	state.IdentityRecord
	state.RunsRecord
	state.DriftRecord
	state.MemoryRecord
	state.KillsRecord
	state.VerdictRecord
}

func (p *healthProcessor) openStorage(ctx context.Context, host component.Host) error {
	if p.cfg.StorageID == nil {
		return nil
	}
	ext, ok := host.GetExtensions()[*p.cfg.StorageID]
	if !ok {
		return fmt.Errorf("storage_id: extension %q not found", p.cfg.StorageID)
	}
	se, ok := ext.(storage.Extension)
	if !ok {
		return fmt.Errorf("storage_id: extension %q is not a storage extension", p.cfg.StorageID)
	}
	c, err := se.GetClient(ctx, component.KindProcessor, p.set.ID, "")
	if err != nil {
		return fmt.Errorf("storage_id: %w", err)
	}
	p.cpMu.Lock()
	p.storage = c
	p.cpMu.Unlock()
	p.mu.Lock()
	p.tracker.cp.enabled = true
	p.mu.Unlock()
	return nil
}

// toCheckpoint copies what a worker's record keeps (the evidence, not the
// verdict). Under the processor's lock: a copy, no marshaling.
func (t *tracker) toCheckpoint(w *worker) cpWorker {
	return cpWorker{
		ID:              w.id,
		AdmissionRecord: w.Admission.Checkpoint(),
		IdentityRecord:  w.Identity.Checkpoint(t.idKeys),
		RunsRecord:      w.Runs.Checkpoint(),
		DriftRecord:     w.Drift.Checkpoint(t.schedName),
		MemoryRecord:    w.memory.Checkpoint(),
		KillsRecord:     w.kills.Checkpoint(),
		VerdictRecord:   w.Verdict.Checkpoint(),
	}
}

// fromCheckpoint makes a worker of its record, its runs within the limits
// (admission.go). The caller admits it.
func (t *tracker) fromCheckpoint(cw *cpWorker, now int64) *worker {
	w := newWorker(cw.ID, cw.FirstMention)
	w.Admission.Restore(&cw.AdmissionRecord)
	w.Identity.Restore(&cw.IdentityRecord, t.idKeys, now)
	if w.Runs.Restore(&cw.RunsRecord, t.cfg.Limits.MaxRunsPerWorker, t.cfg.Limits.MaxRuns,
		t.cfg.Limits.MaxAttributeLength, &t.runCount) {
		t.counts.runsRefused[refusedRunsTotal]++
	}
	w.Drift.Restore(&cw.DriftRecord, t.schedIndex)
	w.memory.Restore(&cw.MemoryRecord, t.mem)
	w.kills.Restore(&cw.KillsRecord, t.kills)
	w.Verdict.Restore(&cw.VerdictRecord)
	// The verdict is not restored: unknown until evaluated (never healthy
	// by default after a restart).
	w.Restored(now, notReported(w, now, true))
	return w
}

// restore loads the checkpoint, if any. A broken record is counted and
// skipped, a broken checkpoint is counted and ignored: starting empty
// (everyone unknown) is safe, failing to start is not. (A corrupt storage
// file is moved aside before this, by file_storage: extension/filestorage.)
func (p *healthProcessor) restore(ctx context.Context) {
	if p.storage == nil {
		return
	}
	fail := func(msg string, err error) {
		p.tel.ProcessorWorkerHealthCheckpointErrors.Add(ctx, 1)
		p.logger.Warn(msg+"; starting with no workers", zap.Error(err))
	}
	if err := p.storage.Delete(ctx, cpLegacyKey); err != nil {
		fail("deleting the version 1 checkpoint failed", err)
	}
	raw, err := p.storage.Get(ctx, cpMetaKey)
	if err != nil {
		fail("reading the checkpoint failed", err)
		return
	}
	if raw == nil {
		p.logger.Info("no checkpoint in the storage: starting with no workers")
		return
	}
	var meta cpMeta
	if err := json.Unmarshal(raw, &meta); err != nil || meta.Version != checkpointVersion || meta.Slots < 0 {
		fail("the checkpoint's meta record is unreadable", fmt.Errorf("version %d, %d slots: %w", meta.Version, meta.Slots, err))
		return
	}
	now := p.clock.Now().UnixNano()
	p.mu.Lock()
	p.tracker.schedulerSeen = meta.SchedulerSeen
	p.tracker.cp.hw = meta.Slots
	if meta.Start > 0 {
		// The cumulative series continue from their first start.
		p.startTime, p.tracker.start = meta.Start, meta.Start
	}
	p.mu.Unlock()
	p.restoreHists(ctx)
	p.lastMeta = meta
	var bad int
	for start := int32(0); start < meta.Slots; start += cpReadChunk {
		ops := make([]*storage.Operation, 0, cpReadChunk)
		for s := start; s < min(start+cpReadChunk, meta.Slots); s++ {
			ops = append(ops, storage.GetOperation(cpSlotKey(s)))
		}
		if err := p.storage.Batch(ctx, ops...); err != nil {
			fail("reading the checkpoint failed", err)
			p.mu.Lock()
			p.tracker = newTracker(p.cfg)
			p.tracker.cp.enabled = true
			p.mu.Unlock()
			return
		}
		recs := make([]cpWorker, len(ops))
		ok := make([]bool, len(ops))
		for i, op := range ops {
			if op.Value == nil {
				continue
			}
			if len(op.Value) > cpMaxRecord || json.Unmarshal(op.Value, &recs[i]) != nil || !validRecord(&recs[i], p.cfg) {
				bad++
				continue
			}
			ok[i] = true
		}
		p.mu.Lock()
		for i := range ops {
			p.tracker.restoreSlot(start+int32(i), &recs[i], ok[i], now)
		}
		p.mu.Unlock()
	}
	p.mu.Lock()
	n := p.tracker.tracked()
	refused := p.tracker.counts.workersRefused[refusedMaxWorkers]
	runs := p.tracker.runCount
	p.mu.Unlock()
	if bad > 0 {
		p.tel.ProcessorWorkerHealthCheckpointErrors.Add(ctx, int64(bad))
	}
	p.logger.Info("restored worker state from the checkpoint", zap.Int64("workers", n[state.EvidenceRecords]+n[state.EvidenceConfirmed]),
		zap.Int("runs", runs), zap.Int("unreadable_records", bad), zap.Int64("over_max_workers", refused))
}

// validRecord: a record whose id the mapping would have taken.
func validRecord(cw *cpWorker, cfg *Config) bool {
	return cw.ID != "" && len(cw.ID) <= cfg.Limits.MaxAttributeLength && utf8.ValidString(cw.ID) &&
		(cw.Evidence == state.EvidenceRecords || cw.Evidence == state.EvidenceConfirmed)
}

// restoreSlot admits one slot's worker, within limits.max_workers; a slot
// that is empty, unreadable, a duplicate or over the limit is freed (and
// deleted at the next write).
func (t *tracker) restoreSlot(slot int32, cw *cpWorker, ok bool, now int64) {
	if ok && t.workers[cw.ID] == nil && len(t.workers) < t.cfg.Limits.MaxWorkers {
		w := t.fromCheckpoint(cw, now)
		w.slot = slot
		if w.Evidence != state.EvidenceConfirmed {
			t.low[w.Evidence].pushBack(w)
		}
		t.workers[w.id] = w
		return
	}
	if ok && t.workers[cw.ID] == nil {
		t.counts.workersRefused[refusedMaxWorkers]++
	}
	t.cp.free = append(t.cp.free, slot)
	t.cp.deleted = append(t.cp.deleted, slot)
}

// markDirty queues a worker to be written at the next checkpoint (when
// there is a storage: without one nothing would ever empty the queue).
func (t *tracker) markDirty(w *worker) {
	if !w.dirty && t.cp.enabled {
		w.dirty = true
		t.cp.dirty = append(t.cp.dirty, w)
	}
}

// freeSlot is called when a worker is forgotten.
func (t *tracker) freeSlot(w *worker) {
	if w.slot >= 0 {
		t.cp.free = append(t.cp.free, w.slot)
		t.cp.deleted = append(t.cp.deleted, w.slot)
		w.slot = -1
	}
}

// collectCheckpoint copies what changed since the last checkpoint: the
// records of the workers to write (slots handed out as needed), the slots to
// delete, the meta record. Under the processor's lock; no marshaling.
func (t *tracker) collectCheckpoint() (writes []cpWrite, deletes []int32, meta cpMeta) {
	for _, w := range t.cp.dirty {
		w.dirty = false
		if t.workers[w.id] != w || w.Evidence == state.EvidenceOnce {
			continue // forgotten since, or not checkpointed (admission.go)
		}
		if w.slot < 0 {
			if n := len(t.cp.free); n > 0 {
				w.slot, t.cp.free = t.cp.free[n-1], t.cp.free[:n-1]
			} else {
				w.slot = t.cp.hw
				t.cp.hw++
			}
		}
		writes = append(writes, cpWrite{slot: w.slot, id: w.id, rec: t.toCheckpoint(w)})
	}
	clear(t.cp.dirty)
	t.cp.dirty = t.cp.dirty[:0]
	deletes, t.cp.deleted = t.cp.deleted, nil
	return writes, deletes, cpMeta{Version: checkpointVersion, SchedulerSeen: t.schedulerSeen, Slots: t.cp.hw, Start: t.start}
}

// unchanged: nothing to write (the meta record as last written).
func (p *healthProcessor) unchanged(writes []cpWrite, deletes []int32, meta cpMeta) bool {
	return len(writes) == 0 && len(deletes) == 0 && meta == p.lastMeta
}

// writeCheckpoint writes what changed; the caller holds cpMu. On failure
// the workers stay queued for the next one.
func (p *healthProcessor) writeCheckpoint(ctx context.Context) {
	if p.storage == nil {
		return
	}
	p.mu.Lock()
	writes, deletes, meta := p.tracker.collectCheckpoint()
	hists := p.tracker.hists.Collect()
	p.mu.Unlock()
	if p.unchanged(writes, deletes, meta) && hists == nil {
		return
	}

	ops := make([]*storage.Operation, 0, len(deletes)+len(writes)+1)
	for _, s := range deletes {
		ops = append(ops, storage.DeleteOperation(cpSlotKey(s)))
	}
	var err error
	for i := range writes {
		var b []byte
		if b, err = p.marshal(&writes[i].rec); err != nil {
			break
		}
		ops = append(ops, storage.SetOperation(cpSlotKey(writes[i].slot), b))
	}
	if err == nil && meta != p.lastMeta {
		var b []byte
		if b, err = json.Marshal(&meta); err == nil {
			ops = append(ops, storage.SetOperation(cpMetaKey, b))
		}
	}
	if err == nil && hists != nil {
		var b []byte
		if b, err = json.Marshal(hists); err == nil {
			ops = append(ops, storage.SetOperation(cpHistsKey, b))
		}
	}
	if err == nil {
		err = p.storage.Batch(ctx, ops...)
	}
	p.checkpointStatus(err)
	if err == nil {
		p.lastMeta = meta
	} else {
		p.tel.ProcessorWorkerHealthCheckpointErrors.Add(ctx, 1)
		p.mu.Lock()
		t := p.tracker
		for _, wr := range writes {
			if w := t.workers[wr.id]; w != nil && w.slot == wr.slot {
				t.markDirty(w)
			}
		}
		t.cp.deleted = append(t.cp.deleted, deletes...)
		if hists != nil {
			t.hists.Unsaved()
		}
		p.mu.Unlock()
	}
}

// checkpointStatus reports the checkpoint's health as the component's status,
// the memory_limiter way: a recoverable error at the first failed write of an
// episode, OK at the next good one, and one log line for each (a storage that
// stays broken does not log every evaluation; checkpoint_errors counts every
// failure). The caller holds cpMu.
func (p *healthProcessor) checkpointStatus(err error) {
	switch {
	case err != nil && !p.cpFailing:
		p.cpFailing = true
		p.logger.Warn("writing the checkpoint failed; trying again at every checkpoint until it works "+
			"(the component reports a recoverable error until then)", zap.Error(err))
		p.reportStatus(componentstatus.NewRecoverableErrorEvent(fmt.Errorf("writing the checkpoint: %w", err)))
	case err == nil && p.cpFailing:
		p.cpFailing = false
		p.logger.Info("writing the checkpoint works again")
		p.reportStatus(componentstatus.NewEvent(componentstatus.StatusOK))
	}
}
