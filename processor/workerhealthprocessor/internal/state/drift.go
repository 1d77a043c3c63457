package state // import "github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/state"

// Drift is the scheduler's view of a worker and the drift between it
// and the worker's own, as of the last evaluation.
type Drift struct {
	// ActiveAt: when the worker last reported the runs it holds itself
	// (Active, below).
	ActiveAt int64
	// A "snapshots" scheduler's statements: SnapKind (below) says which
	// form, SnapAt the last list, SchedCount/SchedCountAt the last count.
	SnapAt, SchedCountAt int64

	// drift of the last evaluation, for metrics and the snapshot: the runs
	// named (Missing(), Orphaned(); nil when none, as for most workers: a
	// pointer keeps the worker 40 bytes smaller) and how many (MissN and
	// OrphN, below).
	named *driftNamed
	// times: since when each disagreement has lasted (DriftTimes); nil
	// while none does, as for most workers (a pointer keeps the worker 48
	// bytes smaller).
	times *DriftTimes
	// DriftAt is the last evaluation that found drift of any kind (unix
	// ns, 0 = none): the emitted drift gauges' 0s are sent for a while
	// after it (the processor's emit.go).
	DriftAt int64

	// How many runs drift (MissN, OrphN: more than named when a count-only
	// scheduler's count shows it) and how many are held over capacity. In
	// 32 bits beside the counts below (at most the runs tracked or the
	// scheduler's count, both below 2^20): 16 bytes a worker less.
	MissN, OrphN int32
	OverCap      int32

	// More 32-bit counts and the bytes, packed with those above (this is
	// kept per worker). Active: runs the worker itself reports holding (-1 =
	// never reported); SchedCount: a "snapshots" scheduler's count (both
	// below 2^20, the mapping's bound). HeldW and HeldS: the runs held by
	// each side at the last evaluation (runs tracked, at most
	// limits.max_runs_per_worker, or SchedCount).
	Active, SchedCount int32
	HeldW, HeldS       int32
	// SchedKnown: the scheduler has named this worker at least once. Only
	// then can its runs be orphaned: a worker no scheduler knows (one that
	// generates its own work, or is scheduled elsewhere) has no other view.
	// Sched: the scheduler source that last named it.
	SchedKnown bool
	Sched      uint8
	SnapKind   uint8
}

// DriftTimes are since when each disagreement between a worker's views
// has lasted (unix ns, 0 = it does not). HeldOverSince: the runs tracked as
// held by the worker exceed its own count; SchedOverSince: those a
// "snapshots" scheduler named exceed its count; CountMissSince and
// CountOrphSince: a count-only scheduler's count exceeds, or falls short
// of, the runs the worker holds; MissSince and OrphSince: the oldest drift
// of each kind the last evaluation found; OverCapSince: the runs held
// exceed the capacity.
type DriftTimes struct {
	HeldOverSince, SchedOverSince  int64
	CountMissSince, CountOrphSince int64
	MissSince, OrphSince           int64
	OverCapSince                   int64
}

// DriftTimes are the worker's (all 0 when none is set).
func (d *Drift) DriftTimes() DriftTimes {
	if d.times == nil {
		return DriftTimes{}
	}
	return *d.times
}

// SetDriftTimes keeps the times; nothing when all are 0.
func (d *Drift) SetDriftTimes(t DriftTimes) {
	if t == (DriftTimes{}) {
		d.times = nil
		return
	}
	if d.times == nil {
		d.times = &DriftTimes{}
	}
	*d.times = t
}

// Drifting tells whether the last evaluation found drift of any kind (by
// count: a count-only scheduler names no run).
func (d *Drift) Drifting() bool { return d.MissN > 0 || d.OrphN > 0 || d.OverCap > 0 }

// DriftRecord is the scheduler view's checkpoint record. Sched: the service
// name of the scheduler that last named the worker.
type DriftRecord struct {
	SchedKnown bool   `json:"sched_known,omitempty"`
	Sched      string `json:"sched,omitempty"`
}

// Checkpoint is the scheduler view's record; schedName names scheduler
// source i.
func (d *Drift) Checkpoint(schedName func(i int) string) DriftRecord {
	c := DriftRecord{SchedKnown: d.SchedKnown}
	if d.SchedKnown {
		c.Sched = schedName(int(d.Sched))
	}
	return c
}

// Restore takes the record back; schedIndex gives the scheduler source of a
// name (-1 = none configured now).
func (d *Drift) Restore(c *DriftRecord, schedIndex func(name string) int) {
	if i := schedIndex(c.Sched); i >= 0 {
		d.Sched = uint8(i)
	}
	d.SchedKnown = c.SchedKnown
}

// Snapshot kinds of a worker: how its "snapshots" scheduler states what it
// holds.
const (
	SnapNone  uint8 = iota
	SnapList        // records listing the runs
	SnapCount       // a count only
)

// driftNamed are the runs in drift by id, sorted.
type driftNamed struct{ missing, orphaned []string }

// Missing are the runs the scheduler holds for the worker that it does
// not hold, by id, sorted (the last evaluation's).
func (d *Drift) Missing() []string {
	if d.named == nil {
		return nil
	}
	return d.named.missing
}

// Orphaned are the runs the worker executes that the scheduler does not
// list, by id, sorted (the last evaluation's).
func (d *Drift) Orphaned() []string {
	if d.named == nil {
		return nil
	}
	return d.named.orphaned
}

// NamedScratch are the lists of the last evaluation emptied, to fill again
// (their memory reused) and give to SetNamed.
func (d *Drift) NamedScratch() (missing, orphaned []string) {
	if d.named == nil {
		return nil, nil
	}
	return d.named.missing[:0], d.named.orphaned[:0]
}

// SetNamed keeps the runs in drift by id (sorted); nothing when there are
// none.
func (d *Drift) SetNamed(missing, orphaned []string) {
	if len(missing) == 0 && len(orphaned) == 0 {
		d.named = nil
		return
	}
	if d.named == nil {
		d.named = &driftNamed{}
	}
	d.named.missing, d.named.orphaned = missing, orphaned
}
