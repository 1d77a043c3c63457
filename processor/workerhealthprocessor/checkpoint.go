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

// The checkpoint lives in the storage client under these keys: one record
// per worker, in a numbered slot (compressed: checkpoint_codec.go), and a
// meta record saying how many slots to read. Version the prefix: a format
// change must not restore garbage.
//
// Only what changed is written: a worker is rewritten after a record about it
// (or a change of its runs) since the last checkpoint, and its slot deleted
// when it is forgotten. Records are copied under the processor's lock and
// marshaled and written outside it. Restore reads the slots in chunks and
// admits what the limits allow, so a checkpoint never brings back more than
// limits.max_workers workers and limits.max_runs runs.
//
// The records and what to write are the tracker's (internal/tracker/checkpoint.go,
// which says how to add a field).
const (
	cpPrefix  = "worker_health.v2/"
	cpMetaKey = cpPrefix + "meta"
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
	if err := json.Unmarshal(raw, &meta); err != nil || meta.Version != tracker.CheckpointVersion || meta.Slots < 0 {
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
		ops := make([]*storage.Operation, 0, cpReadChunk)
		for s := start; s < min(start+cpReadChunk, meta.Slots); s++ {
			ops = append(ops, storage.GetOperation(cpSlotKey(s)))
		}
		if err := p.storage.Batch(ctx, ops...); err != nil {
			fail("reading the checkpoint failed", err)
			p.mu.Lock()
			p.tracker = tracker.New(p.cfg.trackerConfig())
			p.tracker.EnableCheckpoint()
			p.mu.Unlock()
			return
		}
		recs := make([]tracker.Record, len(ops))
		ok := make([]bool, len(ops))
		for i, op := range ops {
			if op.Value == nil {
				continue
			}
			js, err := decodeRecord(op.Value)
			if err != nil || json.Unmarshal(js, &recs[i]) != nil || !validRecord(&recs[i], p.cfg) {
				bad++
				continue
			}
			ok[i] = true
		}
		p.mu.Lock()
		for i := range ops {
			p.tracker.RestoreSlot(start+int32(i), &recs[i], ok[i], now)
		}
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

// validRecord: a record whose id the mapping would have taken.
func validRecord(cw *tracker.Record, cfg *Config) bool {
	return cw.ID != "" && len(cw.ID) <= cfg.Limits.MaxAttributeLength && utf8.ValidString(cw.ID) &&
		(cw.Evidence == state.EvidenceRecords || cw.Evidence == state.EvidenceConfirmed)
}

// unchanged: nothing to write (the meta record as last written).
func (p *healthProcessor) unchanged(writes []tracker.Write, deletes []int32, meta tracker.Meta) bool {
	return len(writes) == 0 && len(deletes) == 0 && meta == p.lastMeta
}

// writeCheckpoint writes what changed; the caller holds cpMu. On failure
// the workers stay queued for the next one.
func (p *healthProcessor) writeCheckpoint(ctx context.Context) {
	if p.storage == nil {
		return
	}
	p.mu.Lock()
	writes, deletes, meta := p.tracker.CollectCheckpoint()
	hists := p.tracker.Hists().Collect()
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
		if b, err = p.marshal(&writes[i].Rec); err != nil {
			break
		}
		ops = append(ops, storage.SetOperation(cpSlotKey(writes[i].Slot), p.cpEnc.encode(b)))
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
		p.tracker.CheckpointFailed(writes, deletes, hists != nil)
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
