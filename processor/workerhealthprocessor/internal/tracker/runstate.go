package tracker // import "github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/tracker"

import (
	"github.com/workerwatch/workerwatch/internal/contract"
	"github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/mapping"
	"github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/state"
)

// The runs of a worker (docs/health-rules.md, "Claim drift"): one state.Run
// per run holding both sides' view, in a state.RunTable, with the order they
// were first seen in for eviction at the caps (admission.go).

// run finds or creates the run entry. When the worker is at its limit, or
// the processor at limits.max_runs, the worker's oldest ended run makes
// room; a new run beyond it is counted and dropped (admission.go).
func (t *Tracker) run(w *Worker, id string) *state.Run {
	h := state.RunHash(id)
	r := w.Table.Get(id, h)
	if r != nil {
		return r
	}
	perWorker := w.Table.Len() >= t.runLimit(w)
	if perWorker || t.runCount >= t.cfg.Limits.MaxRuns {
		if r = w.evictEnded(); r == nil {
			if perWorker {
				t.counts.RunsRefused[refusedRunsPerWorker]++
			} else {
				t.counts.RunsRefused[refusedRunsTotal]++
			}
			return nil
		}
		// The evicted run's memory, id bytes included, serves the new one.
		r.Reset()
	} else {
		r = &state.Run{}
		t.runCount++
	}
	r.SetID(id)
	w.Table.Put(r, h)
	w.Order = append(w.Order, r)
	return r
}

// evictEnded drops the oldest run that neither side holds any more and
// returns it; nil when every run is held. Held runs (about the capacity) are
// stepped over, so the cost does not grow with the runs tracked.
func (w *Worker) evictEnded() *state.Run {
	for i := int(w.OrderHead); i < len(w.Order); i++ {
		r := w.Order[i]
		if r.Has(state.RunGone) {
			if i == int(w.OrderHead) {
				w.Order[i] = nil
				w.OrderHead++
			}
			continue
		}
		if r.Has(state.RunWorkerHeld) || r.Has(state.RunSchedHeld) {
			continue
		}
		w.Table.Remove(r)
		// Drop order[i], keeping the entries before it in their order.
		copy(w.Order[w.OrderHead+1:i+1], w.Order[w.OrderHead:i])
		w.Order[w.OrderHead] = nil
		w.OrderHead++
		w.CompactOrder()
		return r
	}
	return nil
}

// workerClaim: the worker holds the run. Ignored once the worker ended it (a
// late or duplicated claim), counted once.
func (w *Worker) workerClaim(r *state.Run, ts, now int64) {
	w.LastClaim = now
	if r.Has(state.RunWorkerEnded) || r.Has(state.RunWorkerHeld) {
		return
	}
	r.Flags |= state.RunWorkerHeld
	r.WAt = now
	w.Claims[mapping.SideWorker]++
	if ts > 0 && (r.ClaimTS == 0 || ts < r.ClaimTS) {
		r.ClaimTS = ts
	}
}

func (t *Tracker) workerStart(w *Worker, r *state.Run, ts, now int64) {
	if r.Has(state.RunStarted) || r.Has(state.RunWorkerEnded) {
		return
	}
	r.Flags |= state.RunStarted
	r.StartTS = ts
	if r.ClaimTS > 0 && ts >= r.ClaimTS {
		t.hists.ClaimToStart(ts - r.ClaimTS)
	}
	// Scoot's rule: memory already over the soft limit when a run starts.
	w.memory.RunStarted(now, t.mem)
}

// workerEnd applies the worker's end of a run (finished, killed, released;
// a run span carries its start too): the run's kill is counted once, a
// duplicate end only gives the result the first one lacked, a claims-only
// scheduler's claim closes with it, and the duration is observed.
func (t *Tracker) workerEnd(w *Worker, r *state.Run, e *mapping.Event, now int64) {
	if e.StartTS > 0 {
		// A run span: its start is in the same record.
		w.workerClaim(r, e.StartTS, now)
		t.workerStart(w, r, e.StartTS, now)
	}
	// A kill is its own fact: the run's span (or a finished record) may
	// arrive first through another pipeline, and must not hide it.
	if e.Kind == mapping.KindKilled {
		t.runKilled(w, r, e.KillReason, now)
	}
	if r.Has(state.RunWorkerEnded) {
		// A duplicate end (BullMQ's job span, which carries no result, and
		// the worker's record of the same end, which does, in either
		// order): the first that knows the result gives it.
		if r.Result == 0 && e.Result != "" {
			r.Result = uint8(state.ResultIndex(e.Result) + 1)
		}
		return
	}
	r.Flags = (r.Flags | state.RunWorkerEnded) &^ state.RunWorkerHeld
	r.WEnd = now
	if t.schedOf(w).View == contract.ViewClaimsOnly && r.Has(state.RunSchedHeld) {
		// The scheduler sends no end: the worker's closes its claim.
		release(r, mapping.SideScheduler, now)
	}
	if e.Kind == mapping.KindReleased {
		r.Flags |= state.RunReleased
		return
	}
	r.EndTS = e.TS
	if e.Result != "" {
		r.Result = uint8(state.ResultIndex(e.Result) + 1)
	}
	if r.Has(state.RunStarted) || e.Kind == mapping.KindKilled {
		// A run killed before it started still had its child killed
		// (OpenFn's engine starts the time limit at the hand-over).
		w.kills.RunEnded(now)
		w.recycle.RunEnded(&w.kills, now, e.Kind == mapping.KindKilled, &t.cfg.Recycle)
	}
	if r.StartTS > 0 && e.TS >= r.StartTS {
		t.hists.Duration(e.Result, e.TS-r.StartTS)
	}
}

// runKilled counts the kill of a run once, whatever else about the run
// arrived first (its span or a finished record may come through another
// pipeline before the kill), with its reason.
func (t *Tracker) runKilled(w *Worker, r *state.Run, reason string, now int64) {
	if r.Has(state.RunKilled) {
		return
	}
	r.Flags |= state.RunKilled
	k := state.KillIndex(reason)
	r.Kill = uint8(k + 1)
	w.kills.Kill(k, now, t.kills)
}

// attempt finds the attempt of run r a worker's record is about
// (docs/health-rules.md, "Attempts"). A claim or start of a run the worker
// already ended, timed after that end, or one stating a later attempt
// (workerwatch.run.attempt), is a new attempt: the ended one is kept as a run entry of its own
// (state.AttemptKey) with its worker, start, end and result, and r starts
// again for the new attempt. A record stating an earlier attempt goes to
// that attempt's entry. Nil when the earlier attempt cannot be kept (the
// run limits): the record is dropped as a new run would be.
func (t *Tracker) attempt(w *Worker, r *state.Run, e *mapping.Event) *state.Run {
	n := uint16(min(e.Attempt, 1<<15))
	if n > 0 && r.Attempt > 0 && n < r.Attempt {
		// An earlier attempt's record, late.
		key := state.AttemptKey(string(r.ID()), n)
		if old := w.Table.Get(key, state.RunHash(key)); old != nil {
			return old
		}
		return r
	}
	// A start after the end the worker reported, by the records' own
	// times: a late, duplicated or reordered record (no later time, or none
	// at all) is the ended attempt's, and harmless as before.
	// The scheduler's records start a new attempt only by its number (its
	// claim of a retry may come before the worker's start).
	starts := e.Kind == mapping.KindClaimed || e.Kind == mapping.KindStarted
	again := starts && e.Src == mapping.SideWorker && r.Has(state.RunWorkerEnded) && !r.Has(state.RunReleased) &&
		e.TS > 0 && r.EndTS > 0 && e.TS > r.EndTS && (n == 0 || n != r.Attempt)
	later := starts && n > 0 && r.Attempt > 0 && n > r.Attempt &&
		(r.Has(state.RunWorkerEnded) || r.Has(state.RunWorkerHeld) || r.Has(state.RunSchedEnded))
	if !again && !later {
		if n > 0 && r.Attempt == 0 {
			r.Attempt = n
		}
		return r
	}
	prev := max(r.Attempt, 1)
	id := string(r.ID())
	// Held meanwhile, so that making room for the earlier attempt's entry
	// cannot evict the run itself.
	held := r.Flags & state.RunWorkerHeld
	r.Flags |= state.RunWorkerHeld
	old := t.run(w, state.AttemptKey(id, prev))
	r.Flags = r.Flags&^state.RunWorkerHeld | held
	if old == nil {
		return nil
	}
	// The earlier attempt: the worker's view of it (still held when it
	// still runs, a stalled attempt on a hung loop: its end comes later),
	// ended on the scheduler's side (its claim of the id goes on with the
	// new attempt).
	old.Take(r)
	old.Attempt = prev
	old.Flags = r.Flags&^state.RunSchedHeld | state.RunSchedEnded
	if n == 0 {
		n = prev + 1
	}
	// The new attempt keeps the scheduler's claim while it holds the run.
	sched := r.Flags & state.RunSchedHeld
	r.Restart(n, sched)
	if sched != 0 {
		r.SAt, r.ClaimTS = old.SAt, old.ClaimTS
	}
	return r
}
