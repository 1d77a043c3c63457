package workerhealthprocessor // import "github.com/workerwatch/workerwatch/processor/workerhealthprocessor"

import (
	"cmp"
	"slices"
	"unicode/utf8"

	"github.com/workerwatch/workerwatch/internal/contract"
	"github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/state"
)

// The runs of a worker (docs/health-rules.md, "Claim drift"): one entry per
// run holding both sides' view, in a runTable (runs.go), with the order they
// were first seen in for eviction at the caps (admission.go).

// Run flags. One run entry holds both sides' view so drift is a comparison of
// two bits, and the "ended" bits are the tombstones that make late,
// duplicated and reordered events harmless.
const (
	fWorkerHeld uint16 = 1 << iota
	fWorkerEnded
	fSchedHeld
	fSchedEnded
	fStarted
	// fGone: pruned from the worker's runs; its entry in order is stale.
	fGone
	// fKilled: the worker reported the run killed (counted once).
	fKilled
	// fListed: listed by the snapshot being applied (only during it).
	fListed
	// fReleased: the worker's end was a release (not run: not a recent run).
	fReleased
	// fLetGo: a side was let go without an end (drift.go heal): not a
	// recent run either.
	fLetGo
)

// run is one run as both sides see it. Times are unix ns: *At are arrival
// times on the processor's clock (for grace periods), *TS the records' own.
type run struct {
	id         []byte // reused when an evicted run's memory takes a new run
	hash       uint64 // runHash(id)
	wAt, sAt   int64  // when each side's claim arrived
	wEnd, sEnd int64  // when each side's end arrived
	claimTS    int64  // earliest claim timestamp of either side
	startTS    int64
	endTS      int64 // the worker's end record's own timestamp
	flags      uint16
	result     uint8 // state.ResultIndex + 1 of how it ended (0 = not ended or unknown)
	kill       uint8 // kill reason index + 1 (0 = not killed)
}

func (r *run) has(f uint16) bool { return r.flags&f != 0 }

// lastEnd is when the run last stopped being held by a side.
func (r *run) lastEnd() int64 { return max(r.wEnd, r.sEnd) }

// runsState is a worker's runs and what it says of them: its capacity
// (reported by the worker, -1 = not reported), the runs claimed by each
// source (cumulative) and the last claim by the worker itself.
type runsState struct {
	capacity  int
	claims    [2]int64 // cumulative by source
	lastClaim int64

	runs runTable
	// order holds the runs in the order they were first seen, from
	// orderHead on (runs no longer tracked are skipped and compacted away):
	// at the per-worker cap the oldest ended run is evicted in amortized
	// O(1), not by a scan of every run for each new one.
	order     []*run
	orderHead int
}

// run finds or creates the run entry. When the worker is at its limit, or
// the processor at limits.max_runs, the worker's oldest ended run makes
// room; a new run beyond it is counted and dropped (admission.go).
func (t *tracker) run(w *worker, id string) *run {
	h := runHash(id)
	r := w.runs.get(id, h)
	if r != nil {
		return r
	}
	perWorker := w.runs.len() >= t.runLimit(w)
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
		*r = run{id: r.id[:0]}
	} else {
		r = &run{}
		t.runCount++
	}
	r.id = append(r.id, id...)
	r.hash = h
	w.runs.put(r)
	w.order = append(w.order, r)
	return r
}

// evictEnded drops the oldest run that neither side holds any more and
// returns it; nil when every run is held. Held runs (about the capacity) are
// stepped over, so the cost does not grow with the runs tracked.
func (t *tracker) evictEnded(w *worker) *run {
	for i := w.orderHead; i < len(w.order); i++ {
		r := w.order[i]
		if r.has(fGone) {
			if i == w.orderHead {
				w.order[i] = nil
				w.orderHead++
			}
			continue
		}
		if r.has(fWorkerHeld) || r.has(fSchedHeld) {
			continue
		}
		w.runs.remove(r)
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
	if len(w.order) <= 2*w.runs.len()+8 {
		return
	}
	n := 0
	for _, r := range w.order[w.orderHead:] {
		if r != nil && !r.has(fGone) {
			w.order[n] = r
			n++
		}
	}
	clear(w.order[n:])
	w.order, w.orderHead = w.order[:n], 0
}

// workerClaim: the worker holds the run. Ignored once the worker ended it (a
// late or duplicated claim), counted once.
func (t *tracker) workerClaim(w *worker, r *run, ts, now int64) {
	w.lastClaim = now
	if r.has(fWorkerEnded) || r.has(fWorkerHeld) {
		return
	}
	r.flags |= fWorkerHeld
	r.wAt = now
	w.claims[srcWorker]++
	if ts > 0 && (r.claimTS == 0 || ts < r.claimTS) {
		r.claimTS = ts
	}
}

func (t *tracker) workerStart(w *worker, r *run, ts, now int64) {
	if r.has(fStarted) || r.has(fWorkerEnded) {
		return
	}
	r.flags |= fStarted
	r.startTS = ts
	if r.claimTS > 0 && ts >= r.claimTS {
		t.hists.ClaimToStart(ts - r.claimTS)
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
	if x.runs.len() > 0 {
		c.Runs = make(map[string]cpRun, x.runs.len())
		for r := range x.runs.all() {
			c.Runs[string(r.id)] = cpRun{
				WAt: r.wAt, SAt: r.sAt, WEnd: r.wEnd, SEnd: r.sEnd, ClaimTS: r.claimTS, StartTS: r.startTS,
				Flags: r.flags, EndTS: r.endTS, Result: r.result, Kill: r.kill,
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
		if x.runs.len() >= t.cfg.Limits.MaxRunsPerWorker || t.runCount >= t.cfg.Limits.MaxRuns {
			t.counts.runsRefused[refusedRunsTotal]++
			break
		}
		if rid == "" || len(rid) > t.cfg.Limits.MaxAttributeLength || !utf8.ValidString(rid) {
			continue // not an id the mapping would have taken
		}
		t.runCount++
		rr := &run{
			id: []byte(rid), hash: runHash(rid), wAt: r.WAt, sAt: r.SAt, wEnd: r.WEnd, sEnd: r.SEnd,
			claimTS: r.ClaimTS, startTS: r.StartTS, flags: r.Flags &^ (fGone | fListed),
			endTS: r.EndTS, result: r.Result, kill: r.Kill,
		}
		x.runs.put(rr)
		x.order = append(x.order, rr)
	}
	// First seen = the earlier side's claim (0 when never claimed).
	slices.SortFunc(x.order, func(a, b *run) int {
		return cmp.Compare(firstSeen(a), firstSeen(b))
	})
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

// workerEnd applies the worker's end of a run (finished, killed, released;
// a run span carries its start too): the run's kill is counted once, a
// duplicate end only gives the result the first one lacked, a claims-only
// scheduler's claim closes with it, and the duration is observed.
func (t *tracker) workerEnd(w *worker, r *run, e *event, now int64) {
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
	if r.has(fWorkerEnded) {
		// A duplicate end (BullMQ's job span, which carries no result, and
		// the worker's record of the same end, which does, in either
		// order): the first that knows the result gives it.
		if r.result == 0 && e.Result != "" {
			r.result = uint8(state.ResultIndex(e.Result) + 1)
		}
		return
	}
	r.flags = (r.flags | fWorkerEnded) &^ fWorkerHeld
	r.wEnd = now
	if t.schedOf(w).View == contract.ViewClaimsOnly && r.has(fSchedHeld) {
		// The scheduler sends no end: the worker's closes its claim.
		release(r, srcScheduler, now)
	}
	if e.Kind == evReleased {
		r.flags |= fReleased
		return
	}
	r.endTS = e.TS
	if e.Result != "" {
		r.result = uint8(state.ResultIndex(e.Result) + 1)
	}
	if r.has(fStarted) || e.Kind == evKilled {
		// A run killed before it started still had its child killed
		// (OpenFn's engine starts the time limit at the hand-over).
		w.kills.RunEnded(now)
	}
	if r.startTS > 0 && e.TS >= r.startTS {
		t.hists.Duration(e.Result, e.TS-r.startTS)
	}
}

// runKilled counts the kill of a run once, whatever else about the run
// arrived first (its span or a finished record may come through another
// pipeline before the kill), with its reason.
func (t *tracker) runKilled(w *worker, r *run, reason string, now int64) {
	if r.has(fKilled) {
		return
	}
	r.flags |= fKilled
	k := state.KillIndex(reason)
	r.kill = uint8(k + 1)
	w.kills.Kill(k, now, t.kills)
}
