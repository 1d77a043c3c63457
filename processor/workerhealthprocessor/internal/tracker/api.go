package tracker // import "github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/tracker"

import (
	"github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/mapping"
	"github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/state"
)

// What the processor reads of the tracker between evaluations: the figures
// of its own telemetry, what its emission renders, and the cluster's share.
// Every call is under the processor's lock.

// Apply folds one batch into the state.
func (t *Tracker) Apply(b *mapping.Batch, now int64) { t.apply(b, now) }

// Evaluate judges every worker and returns the transitions and the workers
// newly reported as named by one source only (judge.go).
func (t *Tracker) Evaluate(now int64) ([]Transition, []Unjoined) { return t.evaluate(now) }

// Evals is the number of evaluations so far.
func (t *Tracker) Evals() int { return t.evals }

// SetStart sets when the cumulative series began (checkpointed).
func (t *Tracker) SetStart(start int64) { t.start = start }

// Counts are the figures the processor reads and resets at each evaluation
// for its own telemetry.
type Counts struct {
	Admission AdmissionCounts
	// Malformed records (mapping).
	Malformed int64
	// Healed: runs let go, per side (drift.go).
	Healed [2]int64
	// Unjoined: workers reported as named by one source only.
	Unjoined int64
}

// TakeCounts returns the counts since the last call and resets them.
func (t *Tracker) TakeCounts() Counts {
	c := Counts{Admission: t.counts, Malformed: t.malformed, Healed: t.healed, Unjoined: t.unjoinedN}
	t.counts, t.malformed, t.healed, t.unjoinedN = AdmissionCounts{}, 0, [2]int64{}, 0
	return c
}

// Tracked is the number of workers by evidence.
func (t *Tracker) Tracked() [state.NEvidence]int64 { return t.tracked() }

// RunCount is the number of runs tracked.
func (t *Tracker) RunCount() int { return t.runCount }

// Worker is the tracked worker of this id, nil when none.
func (t *Tracker) Worker(id string) *Worker { return t.workers.get(id) }

// ID is the worker's id.
func (w *Worker) ID() string { return w.id }

// KillsByReason are the worker's kills so far, by reason.
func (w *Worker) KillsByReason() *[state.NKillReasons]int64 { return w.kills.ByReason() }

// SeriesSums are the sums of the values of a worker's series, one for each
// group of them the processor sends apart (its emit.go says which). 32 bits
// each: kept per worker, they and the checkpoint slot fit two words where
// 64-bit sums took four, which put the tracker's Worker in the 576-byte size
// class (TestWorkerSize). A change whose sum collides with the last one
// (about one in four billion) is left out until the worker's resend point,
// as an unchanged group is: a late point, never a wrong one.
type SeriesSums [3]uint32

// Sent is the sums of the worker's series values as last delivered
// downstream, and when all of them were last sent (0: never).
func (w *Worker) Sent() (sums SeriesSums, at int64) { return w.sentSums, w.sentAt }

// MarkSent records that the worker's series with these sums were
// delivered, all of them at `at` when all is set (else only those whose
// sum changed were sent, and the others keep their time).
func (w *Worker) MarkSent(sums SeriesSums, at int64, all bool) {
	w.sentSums = sums
	if all {
		w.sentAt = at
	}
}

// ByID returns the workers sorted by id: the order of the metric points and
// of the snapshot.
func (t *Tracker) ByID() []*Worker { return t.byID() }

// Hists are the fleet-wide histograms.
func (t *Tracker) Hists() *state.Histograms { return t.hists }

// FleetFigures are the fleet-wide figures of the last evaluation.
type FleetFigures struct {
	// Idle capacity; Pending: the scheduler's pending count while fresh
	// (-1 = none); IdleWhilePending: idle for fleet.idle_intervals
	// evaluations while work was pending.
	Idle, Pending    int64
	IdleWhilePending bool
}

// Fleet gives the fleet-wide figures now.
func (t *Tracker) Fleet(now int64) FleetFigures {
	f := FleetFigures{Idle: t.idle, Pending: -1, IdleWhilePending: t.idleWhilePending}
	if t.pendingFresh(now) {
		f.Pending = t.pending
	}
	return f
}

// pendingNow is the scheduler's pending count for the rules: this shard's
// own report while fresh, else another shard's while fresh; -1 when none.
// What this shard emits (workerwatch.fleet.runs.pending) and publishes stays
// its own report, so the figure is exported once, by the shard that
// receives it.
func (t *Tracker) pendingNow(now int64) int64 {
	if t.pendingFresh(now) {
		return t.pending
	}
	if t.clusterPending >= 0 && now-t.clusterPendingAt < int64(t.cfg.Lost.After) {
		return t.clusterPending
	}
	return -1
}

// SetClusterPending is the pending gauge as another shard of a sharded
// gateway reported it (n -1 = none), at its snapshot time.
func (t *Tracker) SetClusterPending(n, at int64) { t.clusterPending, t.clusterPendingAt = n, at }

// ClusterPendingAt is the snapshot time of the cluster's pending gauge.
func (t *Tracker) ClusterPendingAt() int64 { return t.clusterPendingAt }

// Disown forgets the workers this shard does not own (owns is false for
// their id), and the pending gauge when it does not own the empty id (the
// exporter routes it with the empty id); it calls gone with each worker
// about to be forgotten (its state still whole).
func (t *Tracker) Disown(owns func(id string) bool, gone func(w *Worker)) {
	if t.pending >= 0 && !owns("") {
		t.pending = -1
	}
	var others []*Worker // forgotten after the walk: a removal moves the table's entries
	for w := range t.workers.all() {
		if !owns(w.id) {
			others = append(others, w)
		}
	}
	for _, w := range others {
		gone(w)
		t.forget(w)
	}
}

// RefusedAtRestore is the number of workers refused at limits.max_workers
// so far (read after a restore, before the first evaluation resets it).
func (t *Tracker) RefusedAtRestore() int64 { return t.counts.WorkersRefused[refusedMaxWorkers] }
