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
	WAt     int64  `json:"wa,omitempty"`
	SAt     int64  `json:"sa,omitempty"`
	WEnd    int64  `json:"we,omitempty"`
	SEnd    int64  `json:"se,omitempty"`
	ClaimTS int64  `json:"c,omitempty"`
	StartTS int64  `json:"s,omitempty"`
	Flags   uint16 `json:"f"`
	EndTS   int64  `json:"e,omitempty"`
	Result  uint8  `json:"r,omitempty"`
	Kill    uint8  `json:"k,omitempty"`
}

type cpWorker struct {
	Name         string           `json:"name,omitempty"`
	FirstMention int64            `json:"first"`
	LastMention  int64            `json:"mention"`
	LastAlive    int64            `json:"alive"`
	Capacity     int              `json:"cap"`
	RSS          int64            `json:"rss"`
	CgroupMax    int64            `json:"cgmax"`
	Mem          cpEpisode        `json:"mem"`
	Roles        []cpRole         `json:"roles,omitempty"`
	KillLog      []killRecJSON    `json:"kill_log,omitempty"`
	KillSince    int64            `json:"kill_since,omitempty"`
	Kills        map[string]int64 `json:"kills,omitempty"`
	Claims       [2]int64         `json:"claims"`
	LastClaim    int64            `json:"last_claim"`
	Runs         map[string]cpRun `json:"runs,omitempty"`
	SchedKnown   bool             `json:"sched_known,omitempty"`
	// Sources: which sources named the worker (identity.go), by name.
	Sources map[string]cpOrigin `json:"sources,omitempty"`
	// Sched: the service name of the scheduler that last named it.
	Sched string `json:"sched,omitempty"`
}

// cpOrigin is one source's view of a worker's identity, its id attributes
// by name (their bit order depends on the config).
type cpOrigin struct {
	Last int64    `json:"last"`
	Keys []string `json:"keys,omitempty"`
}

// cpEpisode is a memEpisode (memory.go).
type cpEpisode struct {
	Over         bool  `json:"over,omitempty"`
	OverSamples  int   `json:"n,omitempty"`
	UnderSamples int   `json:"u,omitempty"`
	OverSince    int64 `json:"since,omitempty"`
	Persist      bool  `json:"persist,omitempty"`
	PersistSince int64 `json:"persist_since,omitempty"`
	AtStart      bool  `json:"at_start,omitempty"`
	AtStartSince int64 `json:"at_start_since,omitempty"`
}

func (e *memEpisode) cp() cpEpisode {
	return cpEpisode{e.over, e.overSamples, e.underSamples, e.overSince, e.persist, e.persistSince, e.atStart, e.atStartSince}
}

func (c cpEpisode) episode() memEpisode {
	return memEpisode{c.Over, c.OverSamples, c.UnderSamples, c.OverSince, c.Persist, c.PersistSince, c.AtStart, c.AtStartSince}
}

// cpRole is a role's last memory and, for a limited role, its episode.
type cpRole struct {
	Role string    `json:"role"`
	RSS  int64     `json:"rss"`
	Mem  cpEpisode `json:"mem"`
}

// killRecJSON is a counted kill by reason name (indexes may change between
// versions).
type killRecJSON struct {
	At     int64  `json:"at"`
	Reason string `json:"reason"`
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
		if w.evidence == evidenceOnce {
			continue // not checkpointed (admission.go)
		}
		cw := cpWorker{
			Name: w.name, FirstMention: w.firstMention, LastMention: w.lastMention, LastAlive: w.lastAlive,
			Capacity: w.capacity, RSS: w.rss, CgroupMax: w.cgroupMax, Mem: w.mem.cp(),
			KillSince: w.killSince, Kills: killsSnapshot(w), Claims: w.claims, LastClaim: w.lastClaim,
			SchedKnown: w.schedKnown,
		}
		for _, r := range w.roles {
			cr := cpRole{Role: r.role, RSS: r.rss}
			if r.ep != nil {
				cr.Mem = r.ep.cp()
			}
			cw.Roles = append(cw.Roles, cr)
		}
		for _, k := range w.killLog {
			cw.KillLog = append(cw.KillLog, killRecJSON{At: k.at, Reason: killReasonNames[k.reason]})
		}
		for o, seen := range w.origins {
			if seen.last == 0 {
				continue
			}
			if cw.Sources == nil {
				cw.Sources = map[string]cpOrigin{}
			}
			co := cpOrigin{Last: seen.last}
			for i, k := range t.idKeys {
				if seen.keys&(1<<i) != 0 {
					co.Keys = append(co.Keys, k)
				}
			}
			cw.Sources[originNames[o]] = co
		}
		if w.schedKnown {
			cw.Sched = t.schedOf(w).name
		}
		if w.runs.len() > 0 {
			cw.Runs = make(map[string]cpRun, w.runs.len())
			for r := range w.runs.all() {
				cw.Runs[string(r.id)] = cpRun{
					WAt: r.wAt, SAt: r.sAt, WEnd: r.wEnd, SEnd: r.sEnd, ClaimTS: r.claimTS, StartTS: r.startTS,
					Flags: r.flags, EndTS: r.endTS, Result: r.result, Kill: r.kill,
				}
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
			t.counts.workersRefused[refusedMaxWorkers]++
			continue
		}
		w := newWorker(id, cw.FirstMention)
		w.name, w.lastMention, w.lastAlive = cw.Name, cw.LastMention, cw.LastAlive
		w.capacity, w.rss, w.cgroupMax = cw.Capacity, cw.RSS, cw.CgroupMax
		w.mem = cw.Mem.episode()
		for _, r := range cw.Roles {
			if rm := t.role(w, r.Role); rm != nil {
				rm.rss = r.RSS
				if rm.ep != nil {
					*rm.ep = r.Mem.episode()
				}
			}
		}
		for _, k := range cw.KillLog {
			if i, ok := killReasonIndex[k.Reason]; ok && t.effects[i] != effectNone && len(w.killLog) < maxKillLog {
				w.killLog = append(w.killLog, killRec{at: k.At, reason: uint8(i)})
			}
		}
		w.killSince = cw.KillSince
		for r, n := range cw.Kills {
			w.kills[killIndex(r)] += n
		}
		w.claims, w.lastClaim = cw.Claims, cw.LastClaim
		for o, name := range originNames {
			co, ok := cw.Sources[name]
			if !ok {
				continue
			}
			w.origins[o].last = co.Last
			for _, k := range co.Keys {
				if i := slices.Index(t.idKeys, k); i >= 0 {
					w.origins[o].keys |= 1 << i
				}
			}
		}
		for i, s := range t.scheds {
			if s.name == cw.Sched {
				w.sched = uint8(i)
			}
		}
		w.schedKnown = cw.SchedKnown
		// Only workers seen in two intervals are checkpointed; a tree or a
		// scheduler confirmed them, or not.
		w.evidence = evidenceRecords
		if w.origins[originTree].last > 0 || w.origins[originScheduler].last > 0 {
			w.evidence = evidenceConfirmed
		}
		// The verdict is not restored: unknown until evaluated (never healthy
		// by default after a restart).
		w.state, w.since = contract.Unknown, now
		w.reasons = []contract.Reason{notReported(now)}
		if len(cw.Runs) > 0 {
			for rid, r := range cw.Runs {
				if w.runs.len() >= t.cfg.Limits.MaxRunsPerWorker || t.runCount >= t.cfg.Limits.MaxRuns {
					t.counts.runsRefused[refusedRunsTotal]++
					break
				}
				t.runCount++
				rr := &run{
					id: []byte(rid), hash: runHash(rid), wAt: r.WAt, sAt: r.SAt, wEnd: r.WEnd, sEnd: r.SEnd,
					claimTS: r.ClaimTS, startTS: r.StartTS, flags: r.Flags &^ (fGone | fListed),
					endTS: r.EndTS, result: r.Result, kill: r.Kill,
				}
				w.runs.put(rr)
				w.order = append(w.order, rr)
			}
			// First seen = the earlier side's claim (0 when never claimed).
			slices.SortFunc(w.order, func(a, b *run) int {
				return cmp.Compare(firstSeen(a), firstSeen(b))
			})
		}
		if w.evidence != evidenceConfirmed {
			t.low[w.evidence].pushBack(w)
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
	if err != nil {
		p.tel.ProcessorWorkerHealthCheckpointErrors.Add(ctx, 1)
		p.logger.Warn("reading the checkpoint failed; starting empty", zap.Error(err))
		return
	}
	if data == nil {
		p.logger.Info("no checkpoint in the storage: starting with no workers")
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
