package tracker // import "github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/tracker"

import (
	"github.com/workerwatch/workerwatch/internal/contract"
	"github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/state"
)

// Admission and bounds (docs/processor.md, "Bounds"). Anyone who can reach
// the OTLP port can name workers and runs; the state must stay bounded and a
// flood of ids must not push real workers out. So each worker has an
// evidence level, and the limits treat the levels differently:
//
//   - seen once: only its own records, all within one evaluation interval
//     or two adjacent ones (one batch of records can straddle an
//     evaluation). At most limits.max_unconfirmed_workers of them, at most
//     maxRunsSeenOnce runs each; forgotten after lost.after without a
//     record; neither exported as per-worker series (nor, with
//     limits.drop_untracked_metrics, its own metrics), nor checkpointed, nor
//     announced by a state-change record until seen again.
//   - records: only its own records, but in intervals further apart.
//   - confirmed: its process tree (the worker_process receiver) or a
//     scheduler named it.
//
// At limits.max_workers a new confirmed worker takes the place of the least
// recently mentioned worker seen once, else of the least recently mentioned
// one with records only; a new worker of any other level is refused.
// Confirmed workers are never pushed out. Runs: limits.max_runs in all, and
// per worker limits.max_runs_per_worker or its share of max_runs, whichever
// is lower; a worker at its limit replaces its oldest ended run, and a run
// beyond it is refused. Every refusal, eviction and expiry is counted.

// EvidenceNames are the values of the evidence attribute of the processor's
// own telemetry.
var EvidenceNames = [state.NEvidence]string{"seen_once", "records", "tree_or_scheduler"}

const (
	// maxRunsSeenOnce: runs a worker seen once may hold. A real worker
	// claims a few runs before its second interval; a flood of run ids
	// under fresh worker ids gets no further.
	maxRunsSeenOnce = 4
	// minRunShare: a worker's share of limits.max_runs never falls below
	// this (capacity plus a few remembered ended runs), so a full fleet
	// still tracks every worker's current runs.
	minRunShare = 8
)

// Why a worker or run was refused: the limit that was full.
const (
	refusedMaxWorkers = iota
	refusedMaxUnconfirmed
	NRefusedWorker
)

// RefusedWorkerReasons name the indices of AdmissionCounts.WorkersRefused
// (the reason attribute of the processor's own telemetry).
var RefusedWorkerReasons = [NRefusedWorker]string{"max_workers", "max_unconfirmed_workers"}

const (
	refusedRunsPerWorker = iota
	refusedRunsTotal
	NRefusedRun
)

// RefusedRunReasons name the indices of AdmissionCounts.RunsRefused.
var RefusedRunReasons = [NRefusedRun]string{"max_runs_per_worker", "max_runs"}

// AdmissionCounts are read and reset by the processor for its telemetry.
type AdmissionCounts struct {
	WorkersRefused [NRefusedWorker]int64
	WorkersEvicted [state.NEvidence]int64
	WorkersExpired [state.NEvidence]int64
	RunsRefused    [NRefusedRun]int64
}

// listLinks is a worker's place in the tracker's list of its evidence level
// (not confirmed).
type listLinks struct {
	prev, next *Worker
}

// workerList is an intrusive list of workers, least recently mentioned first.
type workerList struct {
	head, tail *Worker
	n          int
}

func (l *workerList) pushBack(w *Worker) {
	w.prev, w.next = l.tail, nil
	if l.tail != nil {
		l.tail.next = w
	} else {
		l.head = w
	}
	l.tail = w
	l.n++
}

func (l *workerList) remove(w *Worker) {
	if w.prev != nil {
		w.prev.next = w.next
	} else {
		l.head = w.next
	}
	if w.next != nil {
		w.next.prev = w.prev
	} else {
		l.tail = w.prev
	}
	w.prev, w.next = nil, nil
	l.n--
}

func (l *workerList) moveToBack(w *Worker) {
	if l.tail != w {
		l.remove(w)
		l.pushBack(w)
	}
}

// get returns the worker a record names, admitting it if it is new and the
// limits allow, and raises its evidence. ev is what the record is: a tree
// sample or a scheduler record (confirmed), or the worker's own (seen once).
func (t *Tracker) get(id string, now int64, ev state.Evidence) *Worker {
	// A batch's events come grouped by resource, so most are the previous
	// event's worker: a string compare instead of a map lookup.
	if w := t.last; w != nil && w.id == id {
		t.mention(w, now, ev)
		return w
	}
	if w := t.workers.get(id); w != nil {
		t.mention(w, now, ev)
		t.last = w
		return w
	}
	if id == t.lastRefused {
		return nil // one refusal per resource (or run of scheduler records)
	}
	if t.workers.len() >= t.cfg.Limits.MaxWorkers {
		victim := t.low[state.EvidenceOnce].head
		if victim == nil {
			victim = t.low[state.EvidenceRecords].head
		}
		if ev != state.EvidenceConfirmed || victim == nil {
			return t.refuse(id, refusedMaxWorkers)
		}
		t.counts.WorkersEvicted[victim.Evidence]++
		t.forget(victim)
	}
	if ev == state.EvidenceOnce && t.low[state.EvidenceOnce].n >= t.cfg.Limits.MaxUnconfirmedWorkers {
		return t.refuse(id, refusedMaxUnconfirmed)
	}
	w := newWorker(id, now)
	w.Evidence, w.Admitted = ev, uint32(t.evals)
	t.markDirty(w)
	if ev != state.EvidenceConfirmed {
		t.low[ev].pushBack(w)
	}
	t.workers.put(w)
	t.last = w
	return w
}

func (t *Tracker) refuse(id string, reason int) *Worker {
	t.counts.WorkersRefused[reason]++
	t.lastRefused = id
	return nil
}

// mention notes a record about a tracked worker.
func (t *Tracker) mention(w *Worker, now int64, ev state.Evidence) {
	w.LastMention = now
	t.markDirty(w)
	switch {
	case w.Evidence == state.EvidenceConfirmed:
	case ev == state.EvidenceConfirmed:
		t.low[w.Evidence].remove(w)
		t.promoted(w, state.EvidenceConfirmed)
	case w.Evidence == state.EvidenceOnce && uint32(t.evals)-w.Admitted >= 2:
		// Seen in an interval that is not the next one: a batch of records
		// can straddle one evaluation, so two adjacent intervals are still
		// "seen once".
		t.low[state.EvidenceOnce].remove(w)
		t.promoted(w, state.EvidenceRecords)
		t.low[state.EvidenceRecords].pushBack(w)
	default:
		t.low[w.Evidence].moveToBack(w)
	}
}

func (t *Tracker) promoted(w *Worker, ev state.Evidence) {
	if w.Evidence == state.EvidenceOnce {
		t.fromOnce = append(t.fromOnce, w)
	}
	w.Evidence = ev
}

// forget drops a worker and its runs from every structure.
func (t *Tracker) forget(w *Worker) {
	if w.Evidence != state.EvidenceConfirmed {
		t.low[w.Evidence].remove(w)
	}
	t.runCount -= w.Table.Len()
	t.freeSlot(w)
	t.workers.remove(w)
	t.last = nil
}

// expire forgets workers seen once without a record for lost.after, and
// workers of any level without a record for limits.worker_ttl. Those seen
// once are listed least recently mentioned first, so this costs what it
// removes.
func (t *Tracker) expire(now int64) {
	once := &t.low[state.EvidenceOnce]
	for w := once.head; w != nil && now-w.LastMention > int64(t.cfg.Lost.After); w = once.head {
		t.counts.WorkersExpired[state.EvidenceOnce]++
		t.forget(w)
	}
	ttl := int64(t.cfg.Limits.WorkerTTL)
	var old []*Worker // forgotten after the walk: a removal moves the table's entries
	for w := range t.workers.all() {
		if now-w.LastMention > ttl {
			old = append(old, w)
		}
	}
	for _, w := range old {
		t.counts.WorkersExpired[w.Evidence]++
		t.forget(w)
	}
}

// announced filters an evaluation's transitions: a worker seen once changes
// state silently (a flood of ids is not an event stream); once seen again,
// its state so far is announced as one Transition from unknown.
func (t *Tracker) announced(trs []Transition, now int64) []Transition {
	out := trs[:0]
	for _, tr := range trs {
		if w := t.workers.get(tr.Worker); w != nil && w.Evidence == state.EvidenceOnce {
			w.Unannounced = true
			continue
		}
		out = append(out, tr)
	}
	for _, w := range t.fromOnce {
		if t.workers.get(w.id) != w || !w.Unannounced {
			continue
		}
		w.Unannounced = false
		if w.State != contract.Unknown && !hasTransition(out, w.id) {
			out = append(out, Transition{Worker: w.id, Name: w.Name, From: contract.Unknown, To: w.State, Reasons: w.Reasons, At: now})
		}
	}
	t.fromOnce = t.fromOnce[:0]
	return out
}

func hasTransition(trs []Transition, id string) bool {
	for _, tr := range trs {
		if tr.Worker == id {
			return true
		}
	}
	return false
}

// runLimit is how many runs w may hold now (see the top of this file).
func (t *Tracker) runLimit(w *Worker) int {
	if w.Evidence == state.EvidenceOnce {
		return min(maxRunsSeenOnce, t.cfg.Limits.MaxRunsPerWorker)
	}
	if n := t.workers.len(); n != t.shareOf {
		// The share changes only with the number of workers: a division
		// per new run was a few percent of a run span's cost.
		t.shareOf = n
		t.share = min(t.cfg.Limits.MaxRunsPerWorker, max(minRunShare, t.cfg.Limits.MaxRuns/max(1, n)))
	}
	return t.share
}

// tracked is the number of workers by evidence.
func (t *Tracker) tracked() [state.NEvidence]int64 {
	var n [state.NEvidence]int64
	n[state.EvidenceOnce], n[state.EvidenceRecords] = int64(t.low[state.EvidenceOnce].n), int64(t.low[state.EvidenceRecords].n)
	n[state.EvidenceConfirmed] = int64(t.workers.len()) - n[state.EvidenceOnce] - n[state.EvidenceRecords]
	return n
}
