package workerhealthprocessor // import "github.com/workerwatch/workerwatch/processor/workerhealthprocessor"

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/workerwatch/workerwatch/internal/contract"
)

// Reason codes (docs/health-rules.md).
const (
	codeMemory        = "memory_over_soft_limit"
	codeMemoryAtStart = "memory_over_soft_limit_at_run_start"
	codeKills         = "kills_in_window"
	codeCPU           = "cpu_saturated"
	codeNoClaim       = "no_claim"
	codeNoTelemetry   = "no_telemetry"
	codeMissing       = "drift_missing"
	codeOrphaned      = "drift_orphaned"
	codeOverCapacity  = "over_capacity"
	codeRecovering    = "recovering"
	codeNotReported   = "no_telemetry_since_start"
)

// transition is one state change, for the log record.
type transition struct {
	worker, name string
	from, to     contract.State
	reasons      []contract.Reason
	at           int64
}

func ts(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns).UTC()
}

// judge computes the state the rules give now, with every active reason,
// worst first.
func (t *tracker) judge(w *worker, now int64) (contract.State, []contract.Reason) {
	var unhealthy, stalled, degraded []contract.Reason

	lostAfter := int64(t.cfg.Lost.After)
	lastAlive := max(w.lastAlive, w.firstMention)
	if now-lastAlive >= lostAfter {
		return contract.Lost, []contract.Reason{{
			Code:      codeNoTelemetry,
			Message:   fmt.Sprintf("no telemetry and no live process for %v", time.Duration(now-lastAlive).Round(time.Second)),
			Value:     time.Duration(now - lastAlive).Seconds(),
			Threshold: t.cfg.Lost.After.Seconds(),
			Since:     ts(lastAlive),
		}}
	}

	lim := t.softLimit(w)
	// The duration form of the memory rule also fires between samples.
	if w.memOver && !w.memLatched && t.cfg.Memory.UnhealthyAfter > 0 && now-w.overSince >= int64(t.cfg.Memory.UnhealthyAfter) {
		w.latchMemory(codeMemory, w.overSince)
	}
	if w.memLatched {
		msg := fmt.Sprintf("memory over the soft limit for %d samples or %v", t.cfg.Memory.UnhealthySamples, t.cfg.Memory.UnhealthyAfter)
		if w.memLatchCode == codeMemoryAtStart {
			msg = "memory over the soft limit when a run started"
		}
		unhealthy = append(unhealthy, contract.Reason{
			Code: w.memLatchCode, Message: msg + "; recovers after " +
				fmt.Sprintf("%d samples under %.0f%% of it", t.cfg.Memory.RecoverySamples, 100*t.cfg.Memory.RecoveryRatio),
			Value: float64(w.rss), Threshold: float64(lim), Since: ts(w.memLatchSince),
		})
	} else if w.memOver {
		degraded = append(degraded, contract.Reason{
			Code:    codeMemory,
			Message: fmt.Sprintf("memory over the soft limit for %d of %d samples", w.overSamples, t.cfg.Memory.UnhealthySamples),
			Value:   float64(w.rss), Threshold: float64(lim), Since: ts(w.overSince),
		})
	}

	if k := t.cfg.Kills.Count; k > 0 && w.killRing != nil {
		// The ring holds the last k kill times; the oldest is at killNext.
		oldest := w.killRing[w.killNext]
		if oldest > 0 && now-oldest <= int64(t.cfg.Kills.Window) {
			unhealthy = append(unhealthy, contract.Reason{
				Code:    codeKills,
				Message: fmt.Sprintf("%d kills within %v", k, t.cfg.Kills.Window),
				Value:   float64(k), Threshold: float64(k), Since: ts(oldest),
			})
		}
	}

	t.drift(w, now)
	capacity := t.capacityOf(w)
	held := max(w.heldW, w.heldS)

	if after := int64(t.cfg.Stall.After); after > 0 {
		free := held == 0 || (capacity > 0 && held < capacity)
		pending := !t.cfg.Stall.RequirePending || (t.pendingFresh(now) && t.pending > 0)
		last := max(w.lastClaim, w.firstMention)
		if free && pending && now-last >= after {
			stalled = append(stalled, contract.Reason{
				Code:    codeNoClaim,
				Message: fmt.Sprintf("alive with free capacity and work pending, no claim for %v", time.Duration(now-last).Round(time.Second)),
				Value:   time.Duration(now - last).Seconds(), Threshold: t.cfg.Stall.After.Seconds(), Since: ts(last),
			})
		}
	}

	if n := len(w.missing); n > 0 {
		degraded = append(degraded, contract.Reason{
			Code:    codeMissing,
			Message: fmt.Sprintf("%d runs the scheduler assigned are not held by the worker", n),
			Value:   float64(n), Threshold: t.cfg.Drift.Grace.Seconds(),
		})
	}
	if n := len(w.orphaned); n > 0 {
		degraded = append(degraded, contract.Reason{
			Code:    codeOrphaned,
			Message: fmt.Sprintf("%d runs the worker holds are not listed by the scheduler", n),
			Value:   float64(n), Threshold: t.cfg.Drift.Grace.Seconds(),
		})
	}
	if w.overCap > 0 {
		degraded = append(degraded, contract.Reason{
			Code:    codeOverCapacity,
			Message: fmt.Sprintf("%d runs held with capacity %d", held, capacity),
			Value:   float64(held), Threshold: float64(capacity), Since: ts(w.overCapSince),
		})
	}
	if w.cpuSat {
		degraded = append(degraded, contract.Reason{
			Code:    codeCPU,
			Message: fmt.Sprintf("main process at %.2f cores for %d samples", w.cpuCores, t.cfg.CPU.Samples),
			Value:   w.cpuCores, Threshold: t.cfg.CPU.SaturationCores, Since: ts(w.cpuSince),
		})
	}

	reasons := make([]contract.Reason, 0, len(unhealthy)+len(stalled)+len(degraded))
	reasons = append(append(append(reasons, unhealthy...), stalled...), degraded...)
	if !w.fresh {
		// Restored from a checkpoint, or only named by the scheduler: nothing
		// of its own seen since this process started, so never "healthy".
		// Restored evidence (a memory latch, kills) still makes it unhealthy.
		if len(unhealthy) > 0 {
			return contract.Unhealthy, reasons
		}
		return contract.Unknown, append(reasons, contract.Reason{
			Code:    codeNotReported,
			Message: "no telemetry from the worker since the processor started", Since: ts(w.firstMention),
		})
	}
	switch {
	case len(unhealthy) > 0:
		return contract.Unhealthy, reasons
	case len(stalled) > 0:
		return contract.Stalled, reasons
	case len(degraded) > 0:
		return contract.Degraded, reasons
	}
	return contract.Healthy, reasons
}

func (t *tracker) pendingFresh(now int64) bool {
	return t.pending >= 0 && now-t.pendingAt < int64(t.cfg.Lost.After)
}

// evaluate judges every worker, applies hysteresis, expires the forgotten
// and returns the transitions. Worse states apply at once (each rule has its
// own persistence); better ones only after hysteresis.recover_evaluations
// consecutive evaluations, so alternating input cannot flap the state.
func (t *tracker) evaluate(now int64) []transition {
	var out []transition
	ttl := int64(t.cfg.Limits.WorkerTTL)
	for id, w := range t.workers {
		if now-w.lastMention > ttl {
			delete(t.workers, id)
			t.last = nil
			t.expired++
			continue
		}
		t.prune(w, now)
		target, reasons := t.judge(w, now)
		cur := w.state
		switch {
		case target == cur:
			w.better = 0
		case cur == contract.Unknown || target == contract.Unknown || contract.Severity(target) > contract.Severity(cur):
			w.better = 0
			out = append(out, t.move(w, target, reasons, now))
			continue
		default:
			w.better++
			if w.better >= t.cfg.Hyst.RecoverEvaluations {
				w.better = 0
				out = append(out, t.move(w, target, reasons, now))
				continue
			}
			reasons = append(reasons, contract.Reason{
				Code:    codeRecovering,
				Message: fmt.Sprintf("rules say %s; %d of %d evaluations before the state changes", target, w.better, t.cfg.Hyst.RecoverEvaluations),
				Value:   float64(w.better), Threshold: float64(t.cfg.Hyst.RecoverEvaluations),
			})
		}
		w.reasons = reasons
	}
	t.fleet(now)
	sort.Slice(out, func(i, j int) bool { return out[i].worker < out[j].worker })
	return out
}

func (t *tracker) move(w *worker, to contract.State, reasons []contract.Reason, now int64) transition {
	tr := transition{worker: w.id, name: w.name, from: w.state, to: to, reasons: reasons, at: now}
	w.state, w.since, w.reasons = to, now, reasons
	w.transitions[stateIndex(to)]++
	return tr
}

// fleet: pending work while healthy capacity sits idle (Taskcluster #7052).
func (t *tracker) fleet(now int64) {
	t.idle = t.idleCapacity()
	if t.pendingFresh(now) && t.pending > 0 && t.idle > 0 {
		t.idleIntervals++
	} else {
		t.idleIntervals = 0
	}
	t.idleWhilePending = t.idleIntervals >= t.cfg.Fleet.IdleIntervals
}

// idleCapacity is free capacity on workers that may take work, clamped at 0
// per worker (stale data can show more held than capacity).
func (t *tracker) idleCapacity() int64 {
	var idle int64
	for _, w := range t.workers {
		if !w.state.MayTakeWork() {
			continue
		}
		if c := t.capacityOf(w); c > 0 {
			idle += int64(max(0, c-max(w.heldW, w.heldS)))
		}
	}
	return idle
}

// snapshot builds the immutable view for the health extension.
func (t *tracker) snapshot(now int64) *contract.Snapshot {
	s := &contract.Snapshot{
		Time:    ts(now),
		Workers: make([]contract.Worker, 0, len(t.workers)),
		Fleet: contract.Fleet{
			ByState:          map[contract.State]int{},
			Pending:          -1,
			IdleCapacity:     t.idle,
			IdleWhilePending: t.idleWhilePending,
		},
	}
	if t.pendingFresh(now) {
		s.Fleet.Pending = t.pending
	}
	for _, st := range contract.AllStates {
		s.Fleet.ByState[st] = 0
	}
	for _, w := range t.byID() {
		s.Fleet.ByState[w.state]++
		var wr, sr []string
		for r := range w.runs.all() {
			if r.has(fWorkerHeld) {
				wr = append(wr, string(r.id))
			}
			if r.has(fSchedHeld) {
				sr = append(sr, string(r.id))
			}
		}
		sort.Strings(wr)
		sort.Strings(sr)
		s.Workers = append(s.Workers, contract.Worker{
			ID: w.id, Name: w.name, State: w.state,
			Reasons:  append([]contract.Reason{}, w.reasons...),
			Since:    ts(w.since),
			LastSeen: ts(w.lastAlive),
			Memory: contract.Memory{
				RSSBytes: max(w.rss, 0), SoftLimitBytes: t.softLimit(w),
				CgroupMaxBytes: max(w.cgroupMax, 0), OverSamples: w.overSamples,
			},
			Runs:  contract.Runs{Worker: nonNil(wr), Scheduler: nonNil(sr), Capacity: t.capacityOf(w)},
			Drift: contract.Drift{Missing: nonNil(append([]string(nil), w.missing...)), Orphaned: nonNil(append([]string(nil), w.orphaned...)), OverCapacity: w.overCap},
		})
	}
	return s
}

// byID returns the workers sorted by id: the order of the metric points and
// of the snapshot.
func (t *tracker) byID() []*worker {
	ws := make([]*worker, 0, len(t.workers))
	for _, w := range t.workers {
		ws = append(ws, w)
	}
	slices.SortFunc(ws, func(a, b *worker) int { return strings.Compare(a.id, b.id) })
	return ws
}

// nonNil keeps JSON arrays as [] rather than null for API readers.
func nonNil(s []string) []string {
	if s == nil {
		return []string{}
	}
	return s
}
