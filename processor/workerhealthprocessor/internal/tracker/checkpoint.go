package tracker // import "github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/tracker"

import (
	"maps"
	"slices"

	"github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/state"
)

// The checkpoint's records and the tracker's bookkeeping of its slots. The
// processor (checkpoint.go at the top) encodes, writes, reads and decodes
// them; the tracker says what to write and takes back what was read.
//
// Only what changed is written: the slots are kept in groups of GroupSlots,
// stored as one value each, and a group is rewritten (every worker in it)
// after a record about one of its workers (or a change of its runs) since
// the last checkpoint, or when one of its workers is forgotten; a group left
// empty is deleted. Why groups and not a value per worker: the storage
// (file_storage's bbolt) copies every value that shares a page with one it
// rewrites, reading it through the file's memory mapping, and those pages
// then count in the collector's RSS; a group's value spans its own pages,
// and rewriting it reads none of the old one (docs/results/density.md, "the
// checkpoint in groups"). Restore admits what the limits allow, so a
// checkpoint never brings back more than limits.max_workers workers and
// limits.max_runs runs.
//
// To add a field: add it to the rule's checkpoint record (state.MemoryRecord
// in internal/state/memory.go, state.KillsRecord in internal/state/kills.go,
// state.DriftRecord in internal/state/drift.go, ...) with `json:",omitempty"`
// and fill it in that type's Checkpoint and Restore, next to the state it
// keeps. The records are embedded in Record, so their keys share one JSON
// object: a new key must not repeat another record's
// (TestCheckpointRecordKeys). Unknown fields are ignored and missing ones are
// zero, so no version change is needed unless a field changes meaning.

// CheckpointVersion is the format of the checkpoint (Meta.Version): 3,
// records in groups of slots; 2, a value per slot (still read, see the
// processor's restore).
const CheckpointVersion = 3

// GroupSlots is the number of slots stored together as one value: about 22
// KB for workers with three runs each, several pages of bbolt's 4 KiB.
const GroupSlots = 64

// GroupOf is the group a slot is stored in.
func GroupOf(slot int32) int32 { return slot / GroupSlots }

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
	rewrite []int32 // groups rewritten at the next write (a worker forgotten, a failed write)
	dirty   []*Worker
	// bySlot is the worker in each slot (nil: free), to rewrite a group
	// whole.
	bySlot []*Worker
}

// Write is one worker record to write.
type Write struct {
	Slot int32
	Rec  Record
}

// Group is one group of slots to write: the record of every worker in it, in
// slot order; none means the group is empty and its value deleted.
type Group struct {
	Index  int32
	Writes []Write
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
		Incarnation:     state.CheckpointIncarnation(w.inc.Get(), w.exit),
	}
}

// fromCheckpoint makes a worker of its record, its runs within the limits
// (admission.go). The caller admits it.
func (t *Tracker) fromCheckpoint(cw *Record, now int64) *Worker {
	w := newWorker(cw.ID, cw.FirstMention)
	w.Admission.Restore(&cw.AdmissionRecord)
	w.Identity.Restore(&cw.IdentityRecord, t.idKeys, now)
	w.setName(w.Name) // the id's string where the name is the id
	if w.Runs.Restore(&cw.RunsRecord, t.cfg.Limits.MaxRunsPerWorker, t.cfg.Limits.MaxRuns,
		t.cfg.Limits.MaxAttributeLength, &t.runCount) {
		t.counts.RunsRefused[refusedRunsTotal]++
	}
	w.Drift.Restore(&cw.DriftRecord, t.schedIndex)
	w.memory.Restore(&cw.MemoryRecord, t.mem)
	w.kills.Restore(&cw.KillsRecord, t.kills)
	w.Verdict.Restore(&cw.VerdictRecord)
	in, exit := cw.Incarnation.Restore(now)
	w.inc.Set(in)
	w.exit = exit
	// The verdict is not restored: unknown until evaluated (never healthy
	// by default after a restart).
	w.Restored(now, notReported(w, now, true))
	return w
}

// RestoreMeta takes the meta record read at restore.
func (t *Tracker) RestoreMeta(m *Meta) {
	t.schedulerSeen = m.SchedulerSeen
	t.cp.hw = m.Slots
	t.cp.bySlot = make([]*Worker, m.Slots)
	if m.Start > 0 {
		t.start = m.Start
	}
}

// RewriteAll queues every worker to be written at the next checkpoint (after
// a restore from an earlier format, which the next write replaces).
func (t *Tracker) RewriteAll() {
	for _, w := range t.cp.bySlot {
		if w != nil {
			t.markDirty(w)
		}
	}
}

// RestoreSlot admits one slot's worker, within limits.max_workers; a slot
// that is empty, unreadable (ok false), a duplicate or over the limit is
// freed (and deleted at the next write).
func (t *Tracker) RestoreSlot(slot int32, cw *Record, ok bool, now int64) {
	if ok && t.workers.get(cw.ID) == nil && t.workers.len() < t.cfg.Limits.MaxWorkers {
		w := t.fromCheckpoint(cw, now)
		t.setSlot(w, slot)
		if w.Evidence != state.EvidenceConfirmed {
			t.low[w.Evidence].pushBack(w)
		}
		t.workers.put(w)
		return
	}
	if ok && t.workers.get(cw.ID) == nil {
		t.counts.WorkersRefused[refusedMaxWorkers]++
	}
	t.cp.free = append(t.cp.free, slot)
	t.cp.rewrite = append(t.cp.rewrite, GroupOf(slot))
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
		t.cp.rewrite = append(t.cp.rewrite, GroupOf(w.slot))
		t.cp.bySlot[w.slot] = nil
		w.slot = -1
	}
}

// setSlot puts w in slot.
func (t *Tracker) setSlot(w *Worker, slot int32) {
	if n := int(slot) + 1; len(t.cp.bySlot) < n {
		t.cp.bySlot = append(t.cp.bySlot, make([]*Worker, n-len(t.cp.bySlot))...)
	}
	w.slot = slot
	t.cp.bySlot[slot] = w
}

// CollectCheckpoint says what changed since the last checkpoint: the groups
// to write, in order (slots handed out as needed), and the meta record. The
// records are copied by CopyGroups, a part at a time. Under the processor's
// lock; no marshaling.
func (t *Tracker) CollectCheckpoint() (groups []int32, meta Meta) {
	changed := map[int32]bool{}
	for _, w := range t.cp.dirty {
		w.dirty = false
		if t.workers.get(w.id) != w || w.Evidence == state.EvidenceOnce {
			continue // forgotten since, or not checkpointed (admission.go)
		}
		if w.slot < 0 {
			if n := len(t.cp.free); n > 0 {
				t.setSlot(w, t.cp.free[n-1])
				t.cp.free = t.cp.free[:n-1]
			} else {
				t.setSlot(w, t.cp.hw)
				t.cp.hw++
			}
		}
		changed[GroupOf(w.slot)] = true
	}
	clear(t.cp.dirty)
	t.cp.dirty = t.cp.dirty[:0]
	for _, g := range t.cp.rewrite {
		changed[g] = true
	}
	t.cp.rewrite = nil
	groups = slices.Sorted(maps.Keys(changed))
	return groups, Meta{Version: CheckpointVersion, SchedulerSeen: t.schedulerSeen, Slots: t.cp.hw, Start: t.start}
}

// CopyGroup copies the records of the workers in group g (none: the group
// is to be deleted). Under the processor's lock; no marshaling.
func (t *Tracker) CopyGroup(g int32) Group {
	out := Group{Index: g}
	for s := g * GroupSlots; s < min((g+1)*GroupSlots, int32(len(t.cp.bySlot))); s++ {
		w := t.cp.bySlot[s]
		if w == nil || w.Evidence == state.EvidenceOnce {
			continue
		}
		out.Writes = append(out.Writes, Write{Slot: s, Rec: t.toCheckpoint(w)})
	}
	return out
}

// CheckpointFailed queues again what a failed write held: its groups are
// rewritten at the next one, and the histograms when they were in it.
func (t *Tracker) CheckpointFailed(groups []int32, hists bool) {
	t.cp.rewrite = append(t.cp.rewrite, groups...)
	if hists {
		t.hists.Unsaved()
	}
}
