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
	"github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/tracker"
)

// The checkpoint lives in the storage client under these keys: the workers'
// records in groups of numbered slots, one value per group (each record
// compressed: checkpoint_codec.go), a meta record saying how many slots to
// read, and the fleet-wide histograms. Version the meta record: a format
// change must not restore garbage.
//
// Only what changed is written: a group is rewritten after a record about
// one of its workers (or a change of its runs) since the last checkpoint,
// or when one of its workers is forgotten, and deleted when it is left
// empty. Records are copied under the processor's lock and marshaled and
// written outside it. Restore reads the groups in chunks and admits what
// the limits allow, so a checkpoint never brings back more than
// limits.max_workers workers and limits.max_runs runs.
//
// The records, the groups and what to write are the tracker's
// (internal/tracker/checkpoint.go, which says why groups and how to add a
// field).
const (
	cpPrefix  = "worker_health.v2/"
	cpMetaKey = cpPrefix + "meta"
	// cpLegacyKey held the whole state in one value (version 1), rewritten
	// at every checkpoint; it is deleted, unread (it could be hundreds of MB).
	cpLegacyKey = "worker_health.v1"
	// cpReadChunk slots are read per storage batch at restore (a whole
	// number of groups).
	cpReadChunk = 4 * tracker.GroupSlots
	// cpMaxRecord: a worker record larger than this is malformed (the
	// largest a worker can have is max_runs_per_worker runs with ids of
	// max_attribute_length bytes: 256 x ~500 B).
	cpMaxRecord = 4 << 20
)

// cpGroupKey holds a group of slots (version 3). The number is zero-padded
// so that the keys sort as the groups do: a storage batch writes
// consecutive groups, and bbolt, which copies every value sharing a node
// with one it rewrites, then finds each node's values all rewritten (with
// g/1, g/10, g/100 side by side, a batch read the old values of groups of
// other batches through the file's mapping: docs/results/density.md).
func cpGroupKey(group int32) string { return fmt.Sprintf("%sg/%08d", cpPrefix, group) }

// cpSlotKey held one slot (version 2): read at restore, then deleted.
func cpSlotKey(slot int32) string { return cpPrefix + "w/" + strconv.Itoa(int(slot)) }

// cpHistsKey holds the fleet-wide histograms (written when they changed).
const cpHistsKey = cpPrefix + "hists"

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
	p.tracker.EnableCheckpoint()
	p.mu.Unlock()
	return nil
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
	var meta tracker.Meta
	if err := json.Unmarshal(raw, &meta); err != nil || (meta.Version != tracker.CheckpointVersion && meta.Version != 2) || meta.Slots < 0 {
		fail("the checkpoint's meta record is unreadable", fmt.Errorf("version %d, %d slots: %w", meta.Version, meta.Slots, err))
		return
	}
	now := p.clock.Now().UnixNano()
	p.mu.Lock()
	p.tracker.RestoreMeta(&meta)
	if meta.Start > 0 {
		// The cumulative series continue from their first start.
		p.startTime = meta.Start
	}
	p.mu.Unlock()
	p.restoreHists(ctx)
	p.lastMeta = meta
	var bad int
	for start := int32(0); start < meta.Slots; start += cpReadChunk {
		stored, broken, err := p.readSlots(ctx, meta.Version, start, min(start+cpReadChunk, meta.Slots))
		if err != nil {
			fail("reading the checkpoint failed", err)
			p.mu.Lock()
			p.tracker = tracker.New(p.cfg.trackerConfig())
			p.tracker.EnableCheckpoint()
			p.mu.Unlock()
			return
		}
		bad += broken + p.restoreSlots(start, stored, now)
	}
	if meta.Version == 2 {
		// Written again as groups at the next checkpoint, which deletes
		// the slots' values.
		p.legacySlots = meta.Slots
		p.mu.Lock()
		p.tracker.RewriteAll()
		p.mu.Unlock()
	}
	p.mu.Lock()
	n := p.tracker.Tracked()
	refused := p.tracker.RefusedAtRestore()
	runs := p.tracker.RunCount()
	p.mu.Unlock()
	if bad > 0 {
		p.tel.ProcessorWorkerHealthCheckpointErrors.Add(ctx, int64(bad))
	}
	p.logger.Info("restored worker state from the checkpoint", zap.Int64("workers", n[state.EvidenceRecords]+n[state.EvidenceConfirmed]),
		zap.Int("runs", runs), zap.Int("unreadable_records", bad), zap.Int64("over_max_workers", refused))
}

// readSlots reads the stored records of slots from to to-1 (nil: empty)
// from a checkpoint of the given version: version 3 in groups, version 2 a
// value per slot. A group that cannot be read counts as one unreadable
// record (in bad), its slots from the break on empty (all of them when the
// group is compressed whole).
func (p *healthProcessor) readSlots(ctx context.Context, version int, from, to int32) (stored [][]byte, bad int, err error) {
	stored = make([][]byte, to-from)
	if version == 2 {
		ops := make([]*storage.Operation, 0, len(stored))
		for s := from; s < to; s++ {
			ops = append(ops, storage.GetOperation(cpSlotKey(s)))
		}
		if err := p.storage.Batch(ctx, ops...); err != nil {
			return nil, 0, err
		}
		for i, op := range ops {
			stored[i] = op.Value
		}
		return stored, 0, nil
	}
	first := tracker.GroupOf(from)
	var ops []*storage.Operation
	for g := first; g <= tracker.GroupOf(to-1); g++ {
		ops = append(ops, storage.GetOperation(cpGroupKey(g)))
	}
	if err := p.storage.Batch(ctx, ops...); err != nil {
		return nil, 0, err
	}
	for j, op := range ops {
		if op.Value == nil {
			continue
		}
		base := (first+int32(j))*tracker.GroupSlots - from
		err := decodeGroup(op.Value, func(i int, rec []byte) {
			if at := base + int32(i); at >= 0 && at < int32(len(stored)) {
				stored[at] = rec
			}
		})
		if err != nil {
			bad++
			p.logger.Warn("a group of the checkpoint's records is unreadable; its workers from the break on start over",
				zap.String("key", op.Key), zap.Error(err))
		}
	}
	return stored, bad, nil
}

// restoreSlots decodes the stored records of the slots from start on and
// admits their workers; it returns how many could not be read.
func (p *healthProcessor) restoreSlots(start int32, stored [][]byte, now int64) (bad int) {
	recs := make([]tracker.Record, len(stored))
	ok := make([]bool, len(stored))
	for i, v := range stored {
		if len(v) == 0 {
			continue
		}
		js, err := decodeRecord(v)
		if err != nil || json.Unmarshal(js, &recs[i]) != nil || !validRecord(&recs[i], p.cfg) {
			bad++
			continue
		}
		ok[i] = true
	}
	p.mu.Lock()
	for i := range stored {
		p.tracker.RestoreSlot(start+int32(i), &recs[i], ok[i], now)
	}
	p.mu.Unlock()
	return bad
}

// validRecord: a record whose id the mapping would have taken.
func validRecord(cw *tracker.Record, cfg *Config) bool {
	return cw.ID != "" && len(cw.ID) <= cfg.Limits.MaxAttributeLength && utf8.ValidString(cw.ID) &&
		(cw.Evidence == state.EvidenceRecords || cw.Evidence == state.EvidenceConfirmed)
}

// unchanged: nothing to write (the meta record as last written).
func (p *healthProcessor) unchanged(groups []int32, meta tracker.Meta) bool {
	return len(groups) == 0 && meta == p.lastMeta && p.legacySlots == 0
}

// cpWriteGroups groups (4,096 slots, about 1.4 MB of JSON for workers with
// three runs) are encoded and written per storage batch, each group copied
// just before it is encoded (writeGroups): what a checkpoint holds at once,
// and what bbolt builds in memory for one transaction, stays
// that size instead of growing with the fleet (every group at 100,000
// workers held the records of all of them, hundreds of MB at each
// checkpoint). Each group is whole in one batch; the meta record and the
// histograms go with the last, so a collector that stops between two
// batches restores each worker from one of the two checkpoints (and
// misses the workers of new slots, who are unknown until they report).
const cpWriteGroups = 64

// writeCheckpoint writes what changed; the caller holds cpMu. On failure
// the groups not written stay queued for the next one.
func (p *healthProcessor) writeCheckpoint(ctx context.Context) {
	if p.storage == nil {
		return
	}
	p.mu.Lock()
	groups, meta := p.tracker.CollectCheckpoint()
	hists := p.tracker.Hists().Collect()
	p.mu.Unlock()
	if p.unchanged(groups, meta) && hists == nil {
		return
	}
	var err error
	start := 0
	for ; ; start += cpWriteGroups {
		last := start+cpWriteGroups >= len(groups)
		if err = p.writeGroups(ctx, groups[start:min(len(groups), start+cpWriteGroups)], last, meta, hists); err != nil || last {
			break
		}
	}
	// The encoder and its buffers (about 1 MB) are let go between
	// checkpoints (checkpoint_codec.go, newGroupEncoder).
	p.cpEnc = recordEncoder{}
	p.checkpointStatus(err)
	if err == nil {
		p.lastMeta = meta
		p.legacySlots = 0
	} else {
		// The groups of the batch that failed and after it; the histograms
		// go with the last batch, so they were not written either.
		p.tel.ProcessorWorkerHealthCheckpointErrors.Add(ctx, 1)
		p.mu.Lock()
		p.tracker.CheckpointFailed(groups[start:], hists != nil)
		p.mu.Unlock()
	}
}

// writeGroups copies each group's records (under the lock) and encodes
// them, one group after the other, and writes the groups in one storage
// batch; with last, the version 2 values to delete, the meta record and the
// histograms too.
//
// One group at a time: what is held between the copy and the write is one
// group's records (64) and the batch's encoded values, not the records of
// every group of the batch (4,096: at 10,000 workers while every worker
// changed, the heap live after a GC peaked at 38-41 MB with them and at
// 31-32 MB without, docs/results/density.md).
// The lock is taken for each group, as briefly as before for the whole
// batch; a batch's groups may be copied a change apart, as its batches are
// (cpWriteGroups).
func (p *healthProcessor) writeGroups(ctx context.Context, part []int32, last bool, meta tracker.Meta, hists *state.HistsRecord) error {
	ops := make([]*storage.Operation, 0, len(part)+2)
	for _, g := range part {
		p.mu.Lock()
		grp := p.tracker.CopyGroup(g)
		p.mu.Unlock()
		if len(grp.Writes) == 0 {
			ops = append(ops, storage.DeleteOperation(cpGroupKey(g)))
			continue
		}
		v, err := p.cpEnc.encodeGroup(&grp, p.marshal)
		if err != nil {
			return err
		}
		ops = append(ops, storage.SetOperation(cpGroupKey(g), v))
	}
	if last {
		for s := range p.legacySlots {
			ops = append(ops, storage.DeleteOperation(cpSlotKey(s)))
		}
		if meta != p.lastMeta {
			b, err := json.Marshal(&meta)
			if err != nil {
				return err
			}
			ops = append(ops, storage.SetOperation(cpMetaKey, b))
		}
		if hists != nil {
			b, err := json.Marshal(hists)
			if err != nil {
				return err
			}
			ops = append(ops, storage.SetOperation(cpHistsKey, b))
		}
	}
	return p.storage.Batch(ctx, ops...)
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

// restoreHists reads the checkpointed histograms. Unreadable ones are
// counted and start over; so do histograms of other bounds (logged).
func (p *healthProcessor) restoreHists(ctx context.Context) {
	raw, err := p.storage.Get(ctx, cpHistsKey)
	if err != nil || raw == nil {
		if err != nil {
			p.tel.ProcessorWorkerHealthCheckpointErrors.Add(ctx, 1)
			p.logger.Warn("reading the checkpointed histograms failed; they start over", zap.Error(err))
		}
		return
	}
	var c state.HistsRecord
	if err := json.Unmarshal(raw, &c); err != nil || len(raw) > cpMaxRecord {
		p.tel.ProcessorWorkerHealthCheckpointErrors.Add(ctx, 1)
		p.logger.Warn("the checkpointed histograms are unreadable; they start over", zap.Error(err))
		return
	}
	p.mu.Lock()
	ok := p.tracker.Hists().Restore(&c)
	p.mu.Unlock()
	if !ok {
		p.logger.Info("histogram_buckets changed since the checkpoint: the histograms start over")
	}
}
