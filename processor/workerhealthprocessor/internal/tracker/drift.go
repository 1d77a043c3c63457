package tracker // import "github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/tracker"

import (
	"slices"

	"github.com/workerwatch/workerwatch/internal/contract"
	"github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/mapping"
	"github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/state"
)

// Claim drift (docs/health-rules.md, "Claim drift" and "Scheduler views").
// Each run is one entry holding both sides' view. How the scheduler's side
// is known depends on the scheduler's view: events (claims and ends), claims
// only (the worker's own end closes the scheduler's claim), snapshots (the
// latest statement of every run held is the truth). Lost events must not
// leave permanent drift behind: snapshots and the counts both sides report
// correct it as they come, and drift.heal_after bounds the rest.

// schedName names scheduler source i for a checkpoint record ("" = none).
func (t *Tracker) schedName(i int) string {
	if i < len(t.scheds) {
		return t.scheds[i].Name
	}
	return ""
}

// schedIndex is the scheduler source of this name (the last one; -1 = none).
func (t *Tracker) schedIndex(name string) int {
	i := -1
	for j, s := range t.scheds {
		if s.Name == name {
			i = j
		}
	}
	return i
}

// noSched is the view of a worker no scheduler named: events (nothing to
// close or restate).
var noSched = mapping.Scheduler{View: contract.ViewEvents}

// schedOf is the scheduler source that last named the worker.
func (t *Tracker) schedOf(w *Worker) *mapping.Scheduler {
	if int(w.Sched) < len(t.scheds) {
		return &t.scheds[w.Sched]
	}
	return &noSched
}

// letGo releases a run's side in the judgement (heal, reconcile): counted,
// and the worker's record is rewritten at the next checkpoint.
func (t *Tracker) letGo(w *Worker, r *state.Run, side mapping.Side, now int64) {
	release(r, side, now)
	r.Flags |= state.RunLetGo
	t.healed[side]++
	t.markDirty(w)
	if side == mapping.SideWorker && r.Has(state.RunSchedHeld) && t.schedOf(w).View == contract.ViewClaimsOnly {
		// The worker's end closes a claims-only scheduler's claim: let go
		// because its own count says it ended, the run ended all the same.
		release(r, mapping.SideScheduler, now)
		t.healed[mapping.SideScheduler]++
	}
}

// release ends one side's hold of a run that was let go without an end
// event (healed, closed by the other side, or absent from a snapshot).
func release(r *state.Run, side mapping.Side, now int64) {
	if side == mapping.SideWorker {
		r.Flags = (r.Flags | state.RunWorkerEnded) &^ state.RunWorkerHeld
		r.WEnd = now
		return
	}
	r.Flags = (r.Flags | state.RunSchedEnded) &^ state.RunSchedHeld
	r.SEnd = now
}

// applySnapshot makes the scheduler's side exactly the runs listed: runs
// listed are held (claimed now if new), runs not listed are not.
func (t *Tracker) applySnapshot(w *Worker, runs []string, now int64) {
	w.SnapAt, w.SnapKind = now, state.SnapList
	for _, id := range runs {
		r := t.run(w, id)
		if r == nil {
			continue
		}
		r.Flags |= state.RunListed
		if !r.Has(state.RunSchedHeld) {
			r.Flags = (r.Flags | state.RunSchedHeld) &^ state.RunSchedEnded
			r.SAt = now
			w.Claims[mapping.SideScheduler]++
		}
	}
	for r := range w.Table.All() {
		if r.Has(state.RunListed) {
			r.Flags &^= state.RunListed
		} else if r.Has(state.RunSchedHeld) {
			release(r, mapping.SideScheduler, now)
		}
	}
}

// heldCount records a "snapshots" scheduler's count of the runs it holds.
func (w *Worker) heldCount(n int, now int64) {
	w.SchedCount, w.SchedCountAt = state.Clamp32(n), now // below 2^20 (the mapping's bound)
	if w.SnapKind != state.SnapList {
		w.SnapKind = state.SnapCount
	}
}

// drift compares both sides' views of a worker's runs. A disagreement counts
// only once it is older than the grace period, measured from when it BEGAN
// (the later of the holder's claim and the other side's end), so a finish the
// scheduler learns a few seconds after the worker is not drift. Orphaned runs
// are judged only while the scheduler is reporting at all, and only for
// workers it has named: without it every run would look orphaned.
func (t *Tracker) drift(w *Worker, now int64) {
	grace := int64(t.cfg.Drift.Grace)
	src := t.schedOf(w)
	// Since when each disagreement lasts: worked on in a copy, kept at the
	// end (a worker in none keeps no times).
	ts := w.DriftTimes()
	t.heal(w, src, &ts, now, grace)

	schedulerLive := t.schedulerSeen > 0 && now-t.schedulerSeen < int64(t.cfg.Lost.After)
	// A scheduler that states only a count names no run: runs it does not
	// name are not orphans, and its count is its side.
	counted := src.View == contract.ViewSnapshots && w.SnapKind == state.SnapCount && w.countFresh(src, now)
	// Runs can be missing only from a worker that says what it holds: one
	// whose own telemetry never named it (its tree only, or the scheduler
	// only) has no view to disagree with.
	workerView := w.NamedBy(state.OriginTelemetry)
	missing, orphaned := w.NamedScratch()
	ts.MissSince, ts.OrphSince = 0, 0
	heldW, heldS := 0, 0
	for r := range w.Table.All() {
		wh, sh := r.Has(state.RunWorkerHeld), r.Has(state.RunSchedHeld)
		if wh {
			heldW++
		}
		if sh {
			heldS++
		}
		switch {
		case sh && !wh && workerView:
			if began := max(r.SAt, r.WEnd); now-began >= grace {
				missing = append(missing, state.RunID(r.ID()))
				ts.MissSince = minSince(ts.MissSince, began)
			}
		case wh && !sh && schedulerLive && w.SchedKnown && !counted:
			if began := max(r.WAt, r.SEnd); now-began >= grace {
				orphaned = append(orphaned, state.RunID(r.ID()))
				ts.OrphSince = minSince(ts.OrphSince, began)
			}
		}
	}
	// Runs tracked: at most limits.max_runs_per_worker.
	w.HeldW, w.HeldS = state.Clamp32(heldW), state.Clamp32(heldS)
	slices.Sort(missing)
	slices.Sort(orphaned)
	w.SetNamed(missing, orphaned)
	w.MissN, w.OrphN = state.Clamp32(len(missing)), state.Clamp32(len(orphaned))
	if counted {
		w.HeldS = max(w.HeldS, w.SchedCount)
		if workerView {
			w.countDrift(&ts, now, grace)
		}
	} else {
		ts.CountMissSince, ts.CountOrphSince = 0, 0
	}

	// Over capacity: the runs held beyond the capacity, once that lasted the
	// grace period (claims and ends cross in flight).
	w.OverCap = 0
	// A claims-only scheduler never says a run ended: without the worker's
	// own view its claims only add up (until drift.heal_after), which says
	// nothing of the worker's load.
	judged := w.NamedBy(state.OriginTelemetry) || src.View != contract.ViewClaimsOnly
	c := t.capacityOf(w)
	if held := w.heldForCapacity(); c > 0 && judged && held > c {
		if ts.OverCapSince == 0 {
			ts.OverCapSince = now
		}
		if now-ts.OverCapSince >= grace {
			w.OverCap = state.Clamp32(held - c)
		}
	} else {
		ts.OverCapSince = 0
	}
	w.SetDriftTimes(ts)
}

// heldForCapacity is what over capacity judges: the runs the worker holds,
// by its own view where it has one. Runs only the scheduler holds are not
// the worker's load: they are missing (or about to be, within the grace
// period), and counting them again as capacity excess would report every
// lost claim twice. A worker whose own telemetry never named it has only the
// scheduler's view.
func (w *Worker) heldForCapacity() int {
	if w.NamedBy(state.OriginTelemetry) {
		return int(w.HeldW)
	}
	return int(w.HeldS)
}

func minSince(cur, v int64) int64 {
	if cur == 0 || v < cur {
		return v
	}
	return cur
}

// countFresh: the worker's held count was restated within three snapshot
// intervals.
func (w *Worker) countFresh(src *mapping.Scheduler, now int64) bool {
	return w.SchedCountAt > 0 && now-w.SchedCountAt <= 3*int64(src.Interval)
}

// countDrift judges a count-only scheduler's side: more held than the worker
// holds is missing, fewer is orphaned, each once it lasted the grace period.
func (w *Worker) countDrift(ts *state.DriftTimes, now, grace int64) {
	judge := func(diff int, since *int64, n *int32, first *int64) {
		if diff <= 0 {
			*since = 0
			return
		}
		if *since == 0 {
			// From the count that showed it (restated every interval).
			*since = w.SchedCountAt
		}
		if now-*since >= grace && diff > int(*n) {
			*n = state.Clamp32(diff)
			*first = minSince(*first, *since)
		}
	}
	judge(int(w.SchedCount)-int(w.HeldW), &ts.CountMissSince, &w.MissN, &ts.MissSince)
	if w.SchedKnown {
		judge(int(w.HeldW)-int(w.SchedCount), &ts.CountOrphSince, &w.OrphN, &ts.OrphSince)
	}
}

// heal lets go of what lost events left behind, counting each run let go:
//   - the worker's own count of its runs (metrics.runs_active) is the truth
//     about its side once the disagreement outlasts the grace period;
//   - a "snapshots" scheduler's side is its latest snapshot (applied as it
//     comes), or its latest count; a worker it stops restating loses the
//     runs its last snapshot listed after three snapshot intervals;
//   - where neither corrects a side, a run it still holds drift.heal_after
//     after the other side ended it, or that the other side never named (for
//     the worker's side: only when a scheduler knows the worker; a worker no
//     scheduler knows may hold a run for hours), is let go.
func (t *Tracker) heal(w *Worker, src *mapping.Scheduler, ts *state.DriftTimes, now, grace int64) {
	workerCounted := t.reconcile(w, mapping.SideWorker, int(w.Active), w.ActiveAt, int64(t.cfg.Lost.After), &ts.HeldOverSince, now, grace)
	schedCorrected := false
	if src.View == contract.ViewSnapshots {
		switch {
		case w.SnapKind == state.SnapList && now-w.SnapAt > 3*int64(src.Interval):
			for r := range w.Table.All() {
				if r.Has(state.RunSchedHeld) {
					t.letGo(w, r, mapping.SideScheduler, now)
				}
			}
			w.SnapKind = state.SnapNone
		case w.SnapKind == state.SnapList:
			schedCorrected = true
		case w.SnapKind == state.SnapCount && w.countFresh(src, now):
			t.reconcile(w, mapping.SideScheduler, int(w.SchedCount), w.SchedCountAt, 3*int64(src.Interval), &ts.SchedOverSince, now, grace)
			schedCorrected = true
		}
	}
	after := int64(t.cfg.Drift.HealAfter)
	for r := range w.Table.All() {
		switch {
		case !schedCorrected && r.Has(state.RunSchedHeld) && !r.Has(state.RunWorkerHeld):
			// The worker ended it (its end reached us, the scheduler's did
			// not), or never named it (its claim and end were both lost, or
			// the run really was lost: a scheduler gives up on it by now).
			if now-max(r.SAt, r.WEnd) >= after {
				t.letGo(w, r, mapping.SideScheduler, now)
			}
		case !workerCounted && r.Has(state.RunWorkerHeld) && r.Has(state.RunSchedEnded):
			if now-max(r.WAt, r.SEnd) >= after {
				t.letGo(w, r, mapping.SideWorker, now)
			}
		case !workerCounted && r.Has(state.RunWorkerHeld) && !r.Has(state.RunSchedHeld) && w.SchedKnown:
			// A scheduler that knows the worker never named the run (a
			// short run between two snapshots, a claim lost): its end was
			// lost too, or it is a real orphan no longer news.
			if now-r.WAt >= after {
				t.letGo(w, r, mapping.SideWorker, now)
			}
		}
	}
}

// reconcile lets go of runs tracked as held by one side when that side's own
// count of the runs it holds (fresh: reported within fresh) has been lower
// for longer than the grace period: their end events never arrived (the
// worker was killed and restarted, the collector was down while they
// ended). The oldest claims go first; the other side's view is untouched, so
// runs it still lists become drift, which is the truth. It reports whether a
// fresh count corrects the side.
func (t *Tracker) reconcile(w *Worker, side mapping.Side, count int, at, fresh int64, overSince *int64, now, grace int64) bool {
	if count < 0 || at == 0 || now-at > fresh {
		*overSince = 0
		return false
	}
	flag := state.RunWorkerHeld
	claimAt := func(r *state.Run) int64 { return r.WAt }
	if side == mapping.SideScheduler {
		flag = state.RunSchedHeld
		claimAt = func(r *state.Run) int64 { return r.SAt }
	}
	held := 0
	for r := range w.Table.All() {
		if r.Has(flag) {
			held++
		}
	}
	if held <= count {
		*overSince = 0
		return true
	}
	if *overSince == 0 {
		*overSince = now
	}
	if now-*overSince < grace {
		return true
	}
	for excess := held - count; excess > 0; excess-- {
		var oldest *state.Run
		for r := range w.Table.All() {
			if r.Has(flag) && (oldest == nil || claimAt(r) < claimAt(oldest)) {
				oldest = r
			}
		}
		t.letGo(w, oldest, side, now)
	}
	*overSince = 0
	return true
}

// prune forgets runs that both sides ended (or that one side ended and the
// other never held) longer than the tombstone TTL ago.
func (t *Tracker) prune(w *Worker, now int64) {
	ttl := int64(t.cfg.Drift.TombstoneTTL)
	// Through order, not the table: removing from the table shifts entries.
	for _, r := range w.Order[w.OrderHead:] {
		if r == nil || r.Has(state.RunGone) || r.Has(state.RunWorkerHeld) || r.Has(state.RunSchedHeld) {
			continue
		}
		if now-r.LastEnd() > ttl {
			r.Flags |= state.RunGone
			w.Table.Remove(r)
			t.runCount--
			t.markDirty(w)
		}
	}
	w.CompactOrder()
	w.Table.Shrink()
}
