package workerhealthprocessor // import "github.com/workerwatch/workerwatch/processor/workerhealthprocessor"

import "sort"

// drift compares both sides' views of a worker's runs. A disagreement counts
// only once it is older than the grace period, measured from when it BEGAN
// (the later of the holder's claim and the other side's end), so a finish the
// scheduler learns a few seconds after the worker is not drift. Orphaned runs
// are judged only while the scheduler is reporting at all, and only for
// workers it has named: without it every run would look orphaned.
func (t *tracker) drift(w *worker, now int64) {
	grace := int64(t.cfg.Drift.Grace)
	t.reconcile(w, now, grace)
	schedulerLive := t.schedulerSeen > 0 && now-t.schedulerSeen < int64(t.cfg.Lost.After)
	w.missing, w.orphaned = w.missing[:0], w.orphaned[:0]
	w.heldW, w.heldS = 0, 0
	for r := range w.runs.all() {
		wh, sh := r.has(fWorkerHeld), r.has(fSchedHeld)
		if wh {
			w.heldW++
		}
		if sh {
			w.heldS++
		}
		switch {
		case sh && !wh:
			if now-max(r.sAt, r.wEnd) >= grace {
				w.missing = append(w.missing, string(r.id))
			}
		case wh && !sh && schedulerLive && w.schedKnown:
			if now-max(r.wAt, r.sEnd) >= grace {
				w.orphaned = append(w.orphaned, string(r.id))
			}
		}
	}
	sort.Strings(w.missing)
	sort.Strings(w.orphaned)

	// Over capacity: the larger of both views beyond the capacity, once it has
	// lasted the grace period (claims and ends cross in flight).
	w.overCap = 0
	if c := t.capacityOf(w); c > 0 {
		if held := max(w.heldW, w.heldS); held > c {
			if w.overCapSince == 0 {
				w.overCapSince = now
			}
			if now-w.overCapSince >= grace {
				w.overCap = held - c
			}
			return
		}
	}
	w.overCapSince = 0
}

// prune forgets runs that both sides ended (or that one side ended and the
// other never held) longer than the tombstone TTL ago.
func (t *tracker) prune(w *worker, now int64) {
	ttl := int64(t.cfg.Drift.TombstoneTTL)
	// Through order, not the table: removing from the table shifts entries.
	for _, r := range w.order[w.orderHead:] {
		if r == nil || r.has(fGone) || r.has(fWorkerHeld) || r.has(fSchedHeld) {
			continue
		}
		if now-r.lastEnd() > ttl {
			r.flags |= fGone
			w.runs.remove(r)
		}
	}
	w.compactOrder()
	w.runs.shrink()
}

// reconcile lets go of runs tracked as held by the worker when the worker's
// own count of active runs (workerwatch.worker.runs.active) has been lower
// for longer than the grace period: their end events never arrived (the
// worker was killed and restarted, or the collector restarted while they
// ended). Without it such phantom runs would hold a worker "over capacity"
// or "orphaned" forever. The oldest claims go first; the scheduler's view is
// untouched, so runs it still lists become "missing", which is the truth.
func (t *tracker) reconcile(w *worker, now, grace int64) {
	if w.active < 0 || now-w.activeAt > int64(t.cfg.Lost.After) {
		w.heldOverSince = 0
		return
	}
	held := 0
	for r := range w.runs.all() {
		if r.has(fWorkerHeld) {
			held++
		}
	}
	if held <= w.active {
		w.heldOverSince = 0
		return
	}
	if w.heldOverSince == 0 {
		w.heldOverSince = now
	}
	if now-w.heldOverSince < grace {
		return
	}
	for excess := held - w.active; excess > 0; excess-- {
		var oldest *run
		for r := range w.runs.all() {
			if r.has(fWorkerHeld) && (oldest == nil || r.wAt < oldest.wAt) {
				oldest = r
			}
		}
		oldest.flags = (oldest.flags | fWorkerEnded) &^ fWorkerHeld
		oldest.wEnd = now
	}
	w.heldOverSince = 0
}
