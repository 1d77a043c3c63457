package state // import "github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/state"

import "hash/maphash"

// The runs of a worker (docs/health-rules.md, "Claim drift"): one Run per
// run holding both sides' view, in a RunTable (runtable.go).

// Run flags. One run entry holds both sides' view so drift is a comparison of
// two bits, and the "ended" bits are the tombstones that make late,
// duplicated and reordered events harmless.
const (
	RunWorkerHeld uint16 = 1 << iota
	RunWorkerEnded
	RunSchedHeld
	RunSchedEnded
	RunStarted
	// RunGone: pruned from the worker's runs; its entry in order is stale.
	RunGone
	// RunKilled: the worker reported the run killed (counted once).
	RunKilled
	// RunListed: listed by the snapshot being applied (only during it).
	RunListed
	// RunReleased: the worker's end was a release (not run: not a recent run).
	RunReleased
	// RunLetGo: a side was let go without an end (the processor's drift heal): not a
	// recent run either.
	RunLetGo
)

// Run is one run as both sides see it. Times are unix ns: *At are arrival
// times on the processor's clock (for grace periods), *TS the records' own.
type Run struct {
	ID         []byte // reused when an evicted run's memory takes a new run
	Hash       uint64 // RunHash(id)
	WAt, SAt   int64  // when each side's claim arrived
	WEnd, SEnd int64  // when each side's end arrived
	ClaimTS    int64  // earliest claim timestamp of either side
	StartTS    int64
	EndTS      int64 // the worker's end record's own timestamp
	Flags      uint16
	Result     uint8 // state.ResultIndex + 1 of how it ended (0 = not ended or unknown)
	Kill       uint8 // kill reason index + 1 (0 = not killed)
}

// Has tells whether the run has any of the flags f.
func (r *Run) Has(f uint16) bool { return r.Flags&f != 0 }

// LastEnd is when the run last stopped being held by a side.
func (r *Run) LastEnd() int64 { return max(r.WEnd, r.SEnd) }

var runSeed = maphash.MakeSeed()

// RunHash is the hash a RunTable keys a run id by (random seed per process).
func RunHash(id string) uint64 { return maphash.String(runSeed, id) }
