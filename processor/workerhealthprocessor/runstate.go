package workerhealthprocessor // import "github.com/workerwatch/workerwatch/processor/workerhealthprocessor"

import (
	"cmp"
	"slices"
	"unicode/utf8"

	"github.com/workerwatch/workerwatch/internal/contract"
	"github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/state"
)

// The runs of a worker (docs/health-rules.md, "Claim drift"): one state.Run
// per run holding both sides' view, in a state.RunTable, with the order they
// were first seen in for eviction at the caps (admission.go).

// runsState is a worker's runs and what it says of them: its capacity
// (reported by the worker, -1 = not reported), the runs claimed by each
// source (cumulative) and the last claim by the worker itself.
type runsState struct {
	capacity  int
	claims    [2]int64 // cumulative by source
	lastClaim int64

	runs state.RunTable
	// order holds the runs in the order they were first seen, from
	// orderHead on (runs no longer tracked are skipped and compacted away):
	// at the per-worker cap the oldest ended run is evicted in amortized
	// O(1), not by a scan of every run for each new one.
	order     []*state.Run
	orderHead int
}

// run finds or creates the run entry. When the worker is at its limit, or
// the processor at limits.max_runs, the worker's oldest ended run makes
// room; a new run beyond it is counted and dropped (admission.go).
func (t *tracker) run(w *worker, id string) *state.Run {
	h := state.RunHash(id)
	r := w.runs.Get(id, h)
	if r != nil {
		return r
	}
	perWorker := w.runs.Len() >= t.runLimit(w)
	if perWorker || t.runCount >= t.cfg.Limits.MaxRuns {
		if r = t.evictEnded(w); r == nil {
			if perWorker {
				t.counts.runsRefused[refusedRunsPerWorker]++
			} else {
				t.counts.runsRefused[refusedRunsTotal]++
			}
			return nil
		}
		// The evicted run's memory, id bytes included, serves the new one.
		*r = state.Run{ID: r.ID[:0]}
	} else {
		r = &state.Run{}
		t.runCount++
	}
	r.ID = append(r.ID, id...)
	r.Hash = h
	w.runs.Put(r)
	w.order = append(w.order, r)
	return r
}

// evictEnded drops the oldest run that neither side holds any more and
// returns it; nil when every run is held. Held runs (about the capacity) are
// stepped over, so the cost does not grow with the runs tracked.
func (t *tracker) evictEnded(w *worker) *state.Run {
	for i := w.orderHead; i < len(w.order); i++ {
		r := w.order[i]
		if r.Has(state.RunGone) {
			if i == w.orderHead {
				w.order[i] = nil
				w.orderHead++
			}
			continue
		}
		if r.Has(state.RunWorkerHeld) || r.Has(state.RunSchedHeld) {
			continue
		}
		w.runs.Remove(r)
		// Drop order[i], keeping the entries before it in their order.
		copy(w.order[w.orderHead+1:i+1], w.order[w.orderHead:i])
		w.order[w.orderHead] = nil
		w.orderHead++
		w.compactOrder()
		return r
	}
	return nil
}

// compactOrder forgets the entries of runs no longer tracked once order is
// more than about twice the runs tracked, so it stays bounded by the run cap.
func (w *worker) compactOrder() {
	if len(w.order) <= 2*w.runs.Len()+8 {
		return
	}
	n := 0
	for _, r := range w.order[w.orderHead:] {
		if r != nil && !r.Has(state.RunGone) {
			w.order[n] = r
			n++
		}
	}
	clear(w.order[n:])
	w.order, w.orderHead = w.order[:n], 0
}

// workerClaim: the worker holds the run. Ignored once the worker ended it (a
// late or duplicated claim), counted once.
func (t *tracker) workerClaim(w *worker, r *state.Run, ts, now int64) {
	w.lastClaim = now
	if r.Has(state.RunWorkerEnded) || r.Has(state.RunWorkerHeld) {
		return
	}
	r.Flags |= state.RunWorkerHeld
	r.WAt = now
	w.claims[srcWorker]++
	if ts > 0 && (r.ClaimTS == 0 || ts < r.ClaimTS) {
		r.ClaimTS = ts
	}
}

func (t *tracker) workerStart(w *worker, r *state.Run, ts, now int64) {
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

// cpRuns is the runs' checkpoint record.
type cpRuns struct {
	Capacity  int              `json:"cap"`
	Claims    [2]int64         `json:"claims"`
	LastClaim int64            `json:"last_claim"`
	Runs      map[string]cpRun `json:"runs,omitempty"`
}

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

func (x *runsState) cp() cpRuns {
	c := cpRuns{Capacity: x.capacity, Claims: x.claims, LastClaim: x.lastClaim}
	if x.runs.Len() > 0 {
		c.Runs = make(map[string]cpRun, x.runs.Len())
		for r := range x.runs.All() {
			c.Runs[string(r.ID)] = cpRun{
				WAt: r.WAt, SAt: r.SAt, WEnd: r.WEnd, SEnd: r.SEnd, ClaimTS: r.ClaimTS, StartTS: r.StartTS,
				Flags: r.Flags, EndTS: r.EndTS, Result: r.Result, Kill: r.Kill,
			}
		}
	}
	return c
}

// restore takes checkpointed runs back, within limits.max_runs_per_worker
// and limits.max_runs (counted in the tracker).
func (x *runsState) restore(c *cpRuns, t *tracker) {
	x.capacity, x.claims, x.lastClaim = c.Capacity, c.Claims, c.LastClaim
	if len(c.Runs) == 0 {
		return
	}
	for rid, r := range c.Runs {
		if x.runs.Len() >= t.cfg.Limits.MaxRunsPerWorker || t.runCount >= t.cfg.Limits.MaxRuns {
			t.counts.runsRefused[refusedRunsTotal]++
			break
		}
		if rid == "" || len(rid) > t.cfg.Limits.MaxAttributeLength || !utf8.ValidString(rid) {
			continue // not an id the mapping would have taken
		}
		t.runCount++
		rr := &state.Run{
			ID: []byte(rid), Hash: state.RunHash(rid), WAt: r.WAt, SAt: r.SAt, WEnd: r.WEnd, SEnd: r.SEnd,
			ClaimTS: r.ClaimTS, StartTS: r.StartTS, Flags: r.Flags &^ (state.RunGone | state.RunListed),
			EndTS: r.EndTS, Result: r.Result, Kill: r.Kill,
		}
		x.runs.Put(rr)
		x.order = append(x.order, rr)
	}
	// First seen = the earlier side's claim (0 when never claimed).
	slices.SortFunc(x.order, func(a, b *state.Run) int {
		return cmp.Compare(firstSeen(a), firstSeen(b))
	})
}

// firstSeen is when a run was first claimed by either side (0 = never).
func firstSeen(r *state.Run) int64 {
	switch {
	case r.WAt == 0:
		return r.SAt
	case r.SAt == 0:
		return r.WAt
	}
	return min(r.WAt, r.SAt)
}

// workerEnd applies the worker's end of a run (finished, killed, released;
// a run span carries its start too): the run's kill is counted once, a
// duplicate end only gives the result the first one lacked, a claims-only
// scheduler's claim closes with it, and the duration is observed.
func (t *tracker) workerEnd(w *worker, r *state.Run, e *event, now int64) {
	if e.StartTS > 0 {
		// A run span: its start is in the same record.
		t.workerClaim(w, r, e.StartTS, now)
		t.workerStart(w, r, e.StartTS, now)
	}
	// A kill is its own fact: the run's span (or a finished record) may
	// arrive first through another pipeline, and must not hide it.
	if e.Kind == evKilled {
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
		release(r, srcScheduler, now)
	}
	if e.Kind == evReleased {
		r.Flags |= state.RunReleased
		return
	}
	r.EndTS = e.TS
	if e.Result != "" {
		r.Result = uint8(state.ResultIndex(e.Result) + 1)
	}
	if r.Has(state.RunStarted) || e.Kind == evKilled {
		// A run killed before it started still had its child killed
		// (OpenFn's engine starts the time limit at the hand-over).
		w.kills.RunEnded(now)
	}
	if r.StartTS > 0 && e.TS >= r.StartTS {
		t.hists.Duration(e.Result, e.TS-r.StartTS)
	}
}

// runKilled counts the kill of a run once, whatever else about the run
// arrived first (its span or a finished record may come through another
// pipeline before the kill), with its reason.
func (t *tracker) runKilled(w *worker, r *state.Run, reason string, now int64) {
	if r.Has(state.RunKilled) {
		return
	}
	r.Flags |= state.RunKilled
	k := state.KillIndex(reason)
	r.Kill = uint8(k + 1)
	w.kills.Kill(k, now, t.kills)
}
