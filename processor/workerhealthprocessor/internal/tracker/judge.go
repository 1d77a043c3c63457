package tracker // import "github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/tracker"

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/workerwatch/workerwatch/internal/contract"
	"github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/state"
)

// Transition is one state change, for the log record.
type Transition struct {
	Worker, Name string
	From, To     contract.State
	Reasons      []contract.Reason
	At           int64
}

// sinceAlive is when the worker last showed life. Silence the processor did
// not witness is no evidence: a restored worker's counts from the restore,
// and every worker's from the end of a pause of the collector's own.
func (t *Tracker) sinceAlive(w *Worker) int64 {
	return max(w.LastAlive, w.FirstMention, w.RestoredAt, t.resumedAt)
}

// lost: no telemetry and no live process for lost.after.
func (t *Tracker) lost(w *Worker, now int64) bool {
	return now-t.sinceAlive(w) >= int64(t.cfg.Lost.After)
}

// paused: a gap since the last evaluation this long means the collector
// itself did not run (a VM paused or migrated, the process stopped or
// starved of CPU): three evaluations missed, and at least half of
// lost.after. During such a pause the workers' records wait in sockets and
// in the senders' queues, and the evaluation that runs first on resuming
// would find every worker silent: a false `lost` (and `stalled`) for the
// whole fleet, each one a 503 to the schedulers. So silence counts again
// from the resume, as it does from a restore.
// Without an emit interval (tests that evaluate by hand) there is no rhythm
// to miss, and no pause.
func (t *Tracker) paused(now int64) bool {
	gap := now - t.lastEval
	return t.cfg.EmitInterval > 0 && t.lastEval > 0 &&
		gap >= max(3*int64(t.cfg.EmitInterval), int64(t.cfg.Lost.After)/2)
}

// TakePause returns how long the collector was paused before the last
// evaluations (0 = not) and forgets it, for the processor's log.
func (t *Tracker) TakePause() int64 {
	p := t.pause
	t.pause = 0
	return p
}

// update advances every rule of a worker to now, before it is judged: what
// changes with time alone (a memory episode's duration, the kills window,
// child exits no run end explains, and those one explains: recycles) and
// the drift between both views (runs let go, drift counted). A lost
// worker's rules stand still: it is judged lost whatever they say.
func (t *Tracker) update(w *Worker, now int64) {
	if t.lost(w, now) {
		return
	}
	w.memory.Tick(now, t.mem)
	w.recycle.MatchExits(&w.kills, now, t.kills, &t.cfg.Recycle) // kills.MatchExits, counting recycles
	w.recycle.Window(now, &t.cfg.Recycle)
	w.kills.Window(now, t.kills)
	t.drift(w, now)
}

// judge computes the state the rules give now, with every active reason,
// worst first. It only reads: update brought every rule to now.
func (t *Tracker) judge(w *Worker, now int64) (contract.State, []contract.Reason) {
	var unhealthy, stalled, degraded []contract.Reason

	if t.exited(w, now) {
		r := t.exitReason(w, now)
		r.Incarnation = r.Exit.Incarnation
		return contract.Lost, []contract.Reason{r}
	}
	if t.lost(w, now) {
		lastAlive := t.sinceAlive(w)
		return contract.Lost, []contract.Reason{{
			Code:      state.CodeNoTelemetry,
			Message:   fmt.Sprintf("no telemetry and no live process for %v", time.Duration(now-lastAlive).Round(time.Second)),
			Value:     time.Duration(now - lastAlive).Seconds(),
			Threshold: t.cfg.Lost.After.Seconds(),
			Since:     state.Time(lastAlive),
		}}
	}

	unhealthy, degraded = w.memory.AddReasons(t.mem, unhealthy, degraded)

	switch r, effect := w.kills.Reason(t.kills); effect {
	case state.EffectUnhealthy:
		unhealthy = append(unhealthy, r)
	case state.EffectDegraded:
		degraded = append(degraded, r)
	}

	capacity := t.capacityOf(w)
	held := int(max(w.HeldW, w.HeldS))

	if after := int64(t.cfg.Stalled.After); after > 0 {
		free := held == 0 || (capacity > 0 && held < capacity)
		pending := !t.cfg.Stalled.RequirePending || t.pendingNow(now) > 0
		last := max(w.LastClaim, w.FirstMention, t.resumedAt)
		if free && pending && now-last >= after {
			stalled = append(stalled, contract.Reason{
				Code:    state.CodeNoClaim,
				Message: fmt.Sprintf("alive with free capacity and work pending, no claim for %v", time.Duration(now-last).Round(time.Second)),
				Value:   time.Duration(now - last).Seconds(), Threshold: t.cfg.Stalled.After.Seconds(), Since: state.Time(last),
			})
		}
	}

	// Drift reasons count runs; one run in disagreement past the grace
	// period is enough (threshold 1), since when the oldest began.
	ts := w.DriftTimes()
	if w.MissN > 0 {
		degraded = append(degraded, contract.Reason{
			Code:    state.CodeMissing,
			Message: fmt.Sprintf("%d runs the scheduler holds for the worker are not held by it (for over %v)", w.MissN, t.cfg.Drift.Grace),
			Value:   float64(w.MissN), Threshold: 1, Since: state.Time(ts.MissSince),
		})
	}
	if w.OrphN > 0 {
		degraded = append(degraded, contract.Reason{
			Code:    state.CodeOrphaned,
			Message: fmt.Sprintf("%d runs the worker holds are not listed by the scheduler (for over %v)", w.OrphN, t.cfg.Drift.Grace),
			Value:   float64(w.OrphN), Threshold: 1, Since: state.Time(ts.OrphSince),
		})
	}
	if w.OverCap > 0 {
		n := w.heldForCapacity()
		degraded = append(degraded, contract.Reason{
			Code:    state.CodeOverCapacity,
			Message: fmt.Sprintf("%d runs held with capacity %d", n, capacity),
			Value:   float64(n), Threshold: float64(capacity), Since: state.Time(ts.OverCapSince),
		})
	}
	if r, ok := w.cpu.Reason(&t.cfg.CPU); ok {
		degraded = append(degraded, r)
	}
	if r, ok := w.recycle.Reason(&t.cfg.Recycle); ok {
		degraded = append(degraded, r)
	}

	reasons := make([]contract.Reason, 0, len(unhealthy)+len(stalled)+len(degraded))
	reasons = append(append(append(reasons, unhealthy...), stalled...), degraded...)
	w.stampIncarnation(reasons)
	if !w.Fresh {
		// Restored from a checkpoint, or only named by the scheduler: nothing
		// of its own seen since this process started, so never "healthy".
		// Restored evidence (a memory latch, kills) still makes it unhealthy,
		// unless it belongs to an incarnation: then only once that process
		// is seen again (the first sample says whether it is the same one:
		// a new process inherits nothing), unknown until then.
		if len(unhealthy) > 0 && !w.inc.Known() {
			return contract.Unhealthy, reasons
		}
		return contract.Unknown, append(reasons, notReported(w, max(w.FirstMention, w.RestoredAt), w.RestoredAt > 0))
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

// notReported is the reason of a worker that sent nothing of its own since
// the processor started: restored from a checkpoint, or only named by the
// scheduler (the message says so).
func notReported(w *Worker, since int64, restored bool) contract.Reason {
	msg := "no telemetry from the worker or its process tree since the processor started"
	switch {
	case restored:
		msg += "; restored from the checkpoint"
	case w.NamedBy(state.OriginScheduler):
		msg += "; only the scheduler named it"
	}
	return contract.Reason{Code: state.CodeNotReported, Message: msg, Since: state.Time(since)}
}

func (t *Tracker) pendingFresh(now int64) bool {
	return t.pending >= 0 && now-t.pendingAt < int64(t.cfg.Lost.After)
}

// evaluate judges every worker, applies hysteresis, expires the forgotten
// and returns the transitions. Worse states apply at once (each rule has its
// own persistence); better ones only after hysteresis.recover_evaluations
// consecutive evaluations, so alternating input cannot flap the state.
//
// The tracker's time never goes back: an evaluation older than the last one
// (two evaluations racing, one of which read the clock before it waited for
// the lock) is an evaluation at the last one's time. Otherwise the next one
// would measure a gap that never was, take it for a pause of the collector
// and restart every worker's lost and stalled clocks
// (TestStaleEvaluationIsNoPause).
func (t *Tracker) evaluate(now int64) ([]Transition, []Unjoined) {
	now = max(now, t.lastEval)
	var out []Transition
	t.evals++
	if t.paused(now) {
		t.resumedAt, t.pause = now, now-t.lastEval
	}
	t.lastEval = now
	t.expire(now)
	for w := range t.workers.all() {
		t.prune(w, now)
		t.update(w, now)
		target, reasons := t.judge(w, now)
		if w.Drifting() {
			w.DriftAt = now
		}
		from := w.State
		if w.Judged(target, reasons, now, t.cfg.Hysteresis.RecoverEvaluations) {
			out = append(out, Transition{Worker: w.id, Name: w.Name, From: from, To: target, Reasons: reasons, At: now})
			t.markDirty(w)
		}
	}
	t.fleet(now)
	out = t.announced(out, now)
	sort.Slice(out, func(i, j int) bool { return out[i].Worker < out[j].Worker })
	uj := t.checkJoin(now)
	t.unjoinedN += int64(len(uj))
	return out, uj
}

// fleet: pending work while healthy capacity sits idle (Taskcluster #7052).
func (t *Tracker) fleet(now int64) {
	t.idle = t.idleCapacity()
	if t.pendingNow(now) > 0 && t.idle > 0 {
		t.idleIntervals++
	} else {
		t.idleIntervals = 0
	}
	t.idleWhilePending = t.idleIntervals >= t.cfg.Fleet.IdleIntervals
}

// idleCapacity is free capacity on workers that may take work, clamped at 0
// per worker (stale data can show more held than capacity).
func (t *Tracker) idleCapacity() int64 {
	var idle int64
	for w := range t.workers.all() {
		if !w.State.MayTakeWork() || w.Evidence == state.EvidenceOnce {
			continue
		}
		if c := t.capacityOf(w); c > 0 {
			idle += int64(max(0, c-int(max(w.HeldW, w.HeldS))))
		}
	}
	return idle
}

// byID returns the workers sorted by id: the order of the metric points and
// of the snapshot.
func (t *Tracker) byID() []*Worker {
	ws := make([]*Worker, 0, t.workers.len())
	for w := range t.workers.all() {
		ws = append(ws, w)
	}
	slices.SortFunc(ws, func(a, b *Worker) int { return strings.Compare(a.id, b.id) })
	return ws
}
