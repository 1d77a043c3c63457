package workerhealthprocessor // import "github.com/workerwatch/workerwatch/processor/workerhealthprocessor"

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"slices"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/extension/xextension/storage"
	"go.uber.org/zap"

	"github.com/workerwatch/workerwatch/internal/contract"
)

// checkpointKey is the one key the processor writes. Version it: a format
// change must not make an old checkpoint restore garbage.
const (
	checkpointKey     = "worker_health.v1"
	checkpointVersion = 1
)

// The checkpoint keeps the evidence, not the verdict: restored workers are
// "unknown" until they send telemetry again (or "lost" when they never do),
// except that a memory latch or recent kills still make them "unhealthy".
type cpRun struct {
	WAt     int64 `json:"wa,omitempty"`
	SAt     int64 `json:"sa,omitempty"`
	WEnd    int64 `json:"we,omitempty"`
	SEnd    int64 `json:"se,omitempty"`
	ClaimTS int64 `json:"c,omitempty"`
	StartTS int64 `json:"s,omitempty"`
	Flags   uint8 `json:"f"`
}

type cpWorker struct {
	Name          string           `json:"name,omitempty"`
	FirstMention  int64            `json:"first"`
	LastMention   int64            `json:"mention"`
	LastAlive     int64            `json:"alive"`
	Capacity      int              `json:"cap"`
	RSS           int64            `json:"rss"`
	CgroupMax     int64            `json:"cgmax"`
	OverSamples   int              `json:"over"`
	OverSince     int64            `json:"over_since,omitempty"`
	MemOver       bool             `json:"mem_over,omitempty"`
	MemLatched    bool             `json:"latched,omitempty"`
	MemLatchCode  string           `json:"latch_code,omitempty"`
	MemLatchSince int64            `json:"latch_since,omitempty"`
	KillRing      []int64          `json:"kill_ring,omitempty"`
	KillNext      int              `json:"kill_next,omitempty"`
	Kills         [6]int64         `json:"kills"`
	Claims        [2]int64         `json:"claims"`
	LastClaim     int64            `json:"last_claim"`
	Runs          map[string]cpRun `json:"runs,omitempty"`
	SchedKnown    bool             `json:"sched_known,omitempty"`
}

type checkpointDoc struct {
	Version       int                 `json:"version"`
	SchedulerSeen int64               `json:"scheduler_seen"`
	Workers       map[string]cpWorker `json:"workers"`
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
	return nil
}

func (t *tracker) marshal() ([]byte, error) {
	doc := checkpointDoc{Version: checkpointVersion, SchedulerSeen: t.schedulerSeen, Workers: make(map[string]cpWorker, len(t.workers))}
	for id, w := range t.workers {
		cw := cpWorker{
			Name: w.name, FirstMention: w.firstMention, LastMention: w.lastMention, LastAlive: w.lastAlive,
			Capacity: w.capacity, RSS: w.rss, CgroupMax: w.cgroupMax, OverSamples: w.overSamples, OverSince: w.overSince,
			MemOver: w.memOver, MemLatched: w.memLatched, MemLatchCode: w.memLatchCode, MemLatchSince: w.memLatchSince,
			KillRing: w.killRing, KillNext: w.killNext, Kills: w.kills, Claims: w.claims, LastClaim: w.lastClaim,
			SchedKnown: w.schedKnown,
		}
		if w.runs.len() > 0 {
			cw.Runs = make(map[string]cpRun, w.runs.len())
			for r := range w.runs.all() {
				cw.Runs[string(r.id)] = cpRun{WAt: r.wAt, SAt: r.sAt, WEnd: r.wEnd, SEnd: r.sEnd, ClaimTS: r.claimTS, StartTS: r.startTS, Flags: r.flags}
			}
		}
		doc.Workers[id] = cw
	}
	return json.Marshal(doc)
}

// firstSeen is when a run was first claimed by either side (0 = never).
func firstSeen(r *run) int64 {
	switch {
	case r.wAt == 0:
		return r.sAt
	case r.sAt == 0:
		return r.wAt
	}
	return min(r.wAt, r.sAt)
}

func (t *tracker) unmarshal(data []byte, now int64) error {
	var doc checkpointDoc
	if err := json.Unmarshal(data, &doc); err != nil {
		return err
	}
	if doc.Version != checkpointVersion {
		return fmt.Errorf("checkpoint version %d, want %d", doc.Version, checkpointVersion)
	}
	t.schedulerSeen = doc.SchedulerSeen
	for id, cw := range doc.Workers {
		if len(t.workers) >= t.cfg.Limits.MaxWorkers {
			t.overflowWorkers++
			continue
		}
		w := newWorker(id, cw.FirstMention)
		w.name, w.lastMention, w.lastAlive = cw.Name, cw.LastMention, cw.LastAlive
		w.capacity, w.rss, w.cgroupMax = cw.Capacity, cw.RSS, cw.CgroupMax
		w.overSamples, w.overSince, w.memOver = cw.OverSamples, cw.OverSince, cw.MemOver
		w.memLatched, w.memLatchCode, w.memLatchSince = cw.MemLatched, cw.MemLatchCode, cw.MemLatchSince
		if len(cw.KillRing) == t.cfg.Kills.Count && cw.KillNext < len(cw.KillRing) {
			w.killRing, w.killNext = cw.KillRing, cw.KillNext
		}
		w.kills, w.claims, w.lastClaim = cw.Kills, cw.Claims, cw.LastClaim
		w.schedKnown = cw.SchedKnown
		// The verdict is not restored: unknown until evaluated (never healthy
		// by default after a restart).
		w.state, w.since = contract.Unknown, now
		if len(cw.Runs) > 0 {
			for rid, r := range cw.Runs {
				if w.runs.len() >= t.cfg.Limits.MaxRunsPerWorker {
					t.overflowRuns++
					break
				}
				rr := &run{
					id: []byte(rid), hash: runHash(rid), wAt: r.WAt, sAt: r.SAt, wEnd: r.WEnd, sEnd: r.SEnd,
					claimTS: r.ClaimTS, startTS: r.StartTS, flags: r.Flags &^ fGone,
				}
				w.runs.put(rr)
				w.order = append(w.order, rr)
			}
			// First seen = the earlier side's claim (0 when never claimed).
			slices.SortFunc(w.order, func(a, b *run) int {
				return cmp.Compare(firstSeen(a), firstSeen(b))
			})
		}
		t.workers[w.id] = w
	}
	return nil
}

// restore loads the checkpoint, if any. A broken checkpoint is counted and
// ignored: starting empty (everyone unknown) is safe, failing to start is not.
func (p *healthProcessor) restore(ctx context.Context) {
	if p.storage == nil {
		return
	}
	data, err := p.storage.Get(ctx, checkpointKey)
	if err != nil || data == nil {
		if err != nil {
			p.tel.ProcessorWorkerHealthCheckpointErrors.Add(ctx, 1)
			p.logger.Warn("reading the checkpoint failed; starting empty", zap.Error(err))
		}
		return
	}
	p.mu.Lock()
	err = p.tracker.unmarshal(data, p.clock.Now().UnixNano())
	n := len(p.tracker.workers)
	p.mu.Unlock()
	if err != nil {
		p.tel.ProcessorWorkerHealthCheckpointErrors.Add(ctx, 1)
		p.logger.Warn("the checkpoint is unreadable; starting empty", zap.Error(err))
		return
	}
	p.logger.Info("restored worker state from the checkpoint", zap.Int("workers", n))
}

// writeCheckpoint writes the checkpoint; the caller holds cpMu.
func (p *healthProcessor) writeCheckpoint(ctx context.Context) {
	if p.storage == nil {
		return
	}
	p.mu.Lock()
	data, err := p.tracker.marshal()
	p.mu.Unlock()
	if err == nil {
		err = p.storage.Set(ctx, checkpointKey, data)
	}
	if err != nil {
		p.tel.ProcessorWorkerHealthCheckpointErrors.Add(ctx, 1)
		p.logger.Warn("writing the checkpoint failed", zap.Error(err))
	}
}
