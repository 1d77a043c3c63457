package tracker // import "github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/tracker"

import (
	"github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/state"
)

// The checkpoint's records and the tracker's bookkeeping of its slots. The
// processor (checkpoint.go at the top) encodes, writes, reads and decodes
// them; the tracker says what to write and takes back what was read.
//
// Only what changed is written: a worker is rewritten after a record about it
// (or a change of its runs) since the last checkpoint, and its slot deleted
// when it is forgotten. Restore admits what the limits allow, so a checkpoint
// never brings back more than limits.max_workers workers and limits.max_runs
// runs.
//
// To add a field: add it to the rule's checkpoint record (state.MemoryRecord
// in internal/state/memory.go, state.KillsRecord in internal/state/kills.go,
// state.DriftRecord in internal/state/drift.go, ...) with `json:",omitempty"`
// and fill it in that type's Checkpoint and Restore, next to the state it
// keeps. The records are embedded in Record, so their keys share one JSON
// object: a new key must not repeat another record's
// (TestCheckpointRecordKeys). Unknown fields are ignored and missing ones are
// zero, so no version change is needed unless a field changes meaning.

// CheckpointVersion is the format of the records (Meta.Version).
const CheckpointVersion = 2

// Meta is the checkpoint's meta record.
type Meta struct {
	Version       int   `json:"version"`
	SchedulerSeen int64 `json:"scheduler_seen"`
	// Slots: slots 0 to Slots-1 may hold a worker.
	Slots int32 `json:"slots"`
	// Start is when the cumulative series (counters, histograms) began:
	// the first start, kept across restarts so every one of them continues
	// from it (docs/processor.md, "Emitted metrics").
	Start int64 `json:"start,omitempty"`
}

// cpSlots is the tracker's bookkeeping of the slots.
type cpSlots struct {
	enabled bool    // a storage is configured
	hw      int32   // slots handed out so far: 0..hw-1
	free    []int32 // slots of forgotten workers, to hand out again
	deleted []int32 // slots to delete at the next write
	dirty   []*Worker
}

// Write is one worker record to write.
type Write struct {
	Slot int32
	ID   string
	Rec  Record
}

// Record is a worker's checkpoint record: the evidence, not the verdict.
// Restored workers are "unknown" until they send telemetry again (or "lost"
// when they never do), except that a memory latch or recent kills still make
// them "unhealthy". Each rule's state type has its own record
// (state.IdentityRecord in internal/state/identity.go, state.RunsRecord in
// internal/state/runs.go, ...), embedded here: encoding/json writes their
// fields flat, as one record.
type Record struct {
	ID string `json:"id"`
	state.AdmissionRecord
	state.IdentityRecord
	state.RunsRecord
	state.DriftRecord
	state.MemoryRecord
	state.KillsRecord
	state.VerdictRecord
	// Incarnation is the worker's incarnation and how the last one ended
	// (internal/state/incarnation.go): restored evidence counts only for
	// the same incarnation.
	Incarnation *state.IncarnationRecord `json:"incarnation,omitempty"`
}

// EnableCheckpoint: a storage is configured, changed workers are queued.
func (t *Tracker) EnableCheckpoint() { t.cp.enabled = true }

// toCheckpoint copies what a worker's record keeps (the evidence, not the
// verdict). Under the processor's lock: a copy, no marshaling.
func (t *Tracker) toCheckpoint(w *Worker) Record {
	return Record{
		ID:              w.id,
		AdmissionRecord: w.Admission.Checkpoint(),
		IdentityRecord:  w.Identity.Checkpoint(t.idKeys),
		RunsRecord:      w.Runs.Checkpoint(),
		DriftRecord:     w.Drift.Checkpoint(t.schedName),
		MemoryRecord:    w.memory.Checkpoint(),
		KillsRecord:     w.kills.Checkpoint(),
		VerdictRecord:   w.Verdict.Checkpoint(),
		Incarnation:     state.CheckpointIncarnation(&w.inc, w.exit),
	}
}

// fromCheckpoint makes a worker of its record, its runs within the limits
// (admission.go). The caller admits it.
func (t *Tracker) fromCheckpoint(cw *Record, now int64) *Worker {
	w := newWorker(cw.ID, cw.FirstMention)
	w.Admission.Restore(&cw.AdmissionRecord)
	w.Identity.Restore(&cw.IdentityRecord, t.idKeys, now)
	if w.Runs.Restore(&cw.RunsRecord, t.cfg.Limits.MaxRunsPerWorker, t.cfg.Limits.MaxRuns,
		t.cfg.Limits.MaxAttributeLength, &t.runCount) {
		t.counts.RunsRefused[refusedRunsTotal]++
	}
	w.Drift.Restore(&cw.DriftRecord, t.schedIndex)
	w.memory.Restore(&cw.MemoryRecord, t.mem)
	w.kills.Restore(&cw.KillsRecord, t.kills)
	w.Verdict.Restore(&cw.VerdictRecord)
	w.inc, w.exit = cw.Incarnation.Restore(now)
	// The verdict is not restored: unknown until evaluated (never healthy
	// by default after a restart).
	w.Restored(now, notReported(w, now, true))
	return w
}

// RestoreMeta takes the meta record read at restore.
func (t *Tracker) RestoreMeta(m *Meta) {
	t.schedulerSeen = m.SchedulerSeen
	t.cp.hw = m.Slots
	if m.Start > 0 {
		t.start = m.Start
	}
}

// RestoreSlot admits one slot's worker, within limits.max_workers; a slot
// that is empty, unreadable (ok false), a duplicate or over the limit is
// freed (and deleted at the next write).
func (t *Tracker) RestoreSlot(slot int32, cw *Record, ok bool, now int64) {
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
		t.counts.WorkersRefused[refusedMaxWorkers]++
	}
	t.cp.free = append(t.cp.free, slot)
	t.cp.deleted = append(t.cp.deleted, slot)
}

// markDirty queues a worker to be written at the next checkpoint (when
// there is a storage: without one nothing would ever empty the queue).
func (t *Tracker) markDirty(w *Worker) {
	if !w.dirty && t.cp.enabled {
		w.dirty = true
		t.cp.dirty = append(t.cp.dirty, w)
	}
}

// freeSlot is called when a worker is forgotten.
func (t *Tracker) freeSlot(w *Worker) {
	if w.slot >= 0 {
		t.cp.free = append(t.cp.free, w.slot)
		t.cp.deleted = append(t.cp.deleted, w.slot)
		w.slot = -1
	}
}

// CollectCheckpoint copies what changed since the last checkpoint: the
// records of the workers to write (slots handed out as needed), the slots to
// delete, the meta record. Under the processor's lock; no marshaling.
func (t *Tracker) CollectCheckpoint() (writes []Write, deletes []int32, meta Meta) {
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
		writes = append(writes, Write{Slot: w.slot, ID: w.id, Rec: t.toCheckpoint(w)})
	}
	clear(t.cp.dirty)
	t.cp.dirty = t.cp.dirty[:0]
	deletes, t.cp.deleted = t.cp.deleted, nil
	return writes, deletes, Meta{Version: CheckpointVersion, SchedulerSeen: t.schedulerSeen, Slots: t.cp.hw, Start: t.start}
}

// CheckpointFailed queues again what a failed write held: the workers still
// in their slots, the slots to delete, and the histograms when they were in
// it.
func (t *Tracker) CheckpointFailed(writes []Write, deletes []int32, hists bool) {
	for _, wr := range writes {
		if w := t.workers[wr.ID]; w != nil && w.slot == wr.Slot {
			t.markDirty(w)
		}
	}
	t.cp.deleted = append(t.cp.deleted, deletes...)
	if hists {
		t.hists.Unsaved()
	}
}
