package state // import "github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/state"

import (
	"bytes"
	"hash/maphash"
	"strconv"
	"unsafe"
)

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
//
// 80 bytes, the allocator's 80-byte class (TestRunSize), where a []byte id
// and the id's hash made it 96: both are held in 16 bytes (runKey). A
// worker of a full shard holds four runs: 64 bytes a worker
// (docs/results/density.md, "the 80-byte run").
type Run struct {
	id         runKey
	WAt, SAt   int64 // when each side's claim arrived
	WEnd, SEnd int64 // when each side's end arrived
	ClaimTS    int64 // earliest claim timestamp of either side
	StartTS    int64
	EndTS      int64 // the worker's end record's own timestamp
	Flags      uint16
	Result     uint8 // state.ResultIndex + 1 of how it ended (0 = not ended or unknown)
	Kill       uint8 // kill reason index + 1 (0 = not killed)
	// Attempt is the attempt's number (0 = not numbered: the only one seen
	// so far). An earlier attempt of the run is kept under AttemptKey.
	Attempt uint16
}

// runKey is a run's id bytes, their address and length, and the low 32
// bits of the id's hash (RunHash): 16 bytes where the []byte and the hash
// were 32. The bytes are the run's own and are reused when an evicted run's
// memory takes a new run whose id is no longer (Reset, SetID): no
// allocation a run in the steady state, which BenchmarkSpans' lifecycle
// spans need (an id copied into a new string for every run cost 1.17x the
// time a span). The hash spares the run table a hash of the id when it
// removes the run, which a lifecycle span does for the run it evicts.
// Whoever keeps an id copies it, as with the []byte before.
type runKey struct {
	p *byte
	n uint32 // length; the bytes' room too (a shorter id gives the rest up)
	h uint32 // uint32(RunHash(id)), set by RunTable.Put
}

// ID is the run's id bytes (its entry's key: an earlier attempt's carries
// the attempt, AttemptKey). Valid until the run's memory takes another run:
// copy what is kept.
func (r *Run) ID() []byte {
	if r.id.p == nil {
		return nil
	}
	return unsafe.Slice(r.id.p, r.id.n)
}

// SetID makes id the run's id, in the run's own bytes when they have room.
func (r *Run) SetID(id string) {
	if r.id.p != nil && len(id) <= int(r.id.n) {
		copy(r.ID(), id)
		r.id.n = uint32(len(id))
		return
	}
	b := []byte(id)
	r.id = runKey{p: unsafe.SliceData(b), n: uint32(len(b))}
}

// Reset clears the run for another, keeping its id's bytes for SetID.
func (r *Run) Reset() { *r = Run{id: runKey{p: r.id.p, n: r.id.n}} }

// Take gives the run everything of o but its id (r keeps its own).
func (r *Run) Take(o *Run) {
	id := r.id
	*r = *o
	r.id = id
}

// Restart clears the run for its attempt n, keeping its id, with the flags
// given.
func (r *Run) Restart(n, flags uint16) { *r = Run{id: r.id, Attempt: n, Flags: flags} }

// AttemptSep separates a run id from an earlier attempt's number in the key
// that attempt is kept under (AttemptKey): a byte no run id uses in
// practice, never shown (RunID strips it).
const AttemptSep = "\x00"

// AttemptKey is the key an earlier attempt n of run id is kept under.
func AttemptKey(id string, n uint16) string { return id + AttemptSep + strconv.Itoa(int(n)) }

// RunID is the run id of a run entry's key (an earlier attempt's key
// without its number).
func RunID(key []byte) string { return string(RunIDBytes(key)) }

// RunIDBytes is RunID without the copy: the run id's bytes of a key.
func RunIDBytes(key []byte) []byte {
	if i := bytes.IndexByte(key, AttemptSep[0]); i >= 0 {
		return key[:i]
	}
	return key
}

// Has tells whether the run has any of the flags f.
func (r *Run) Has(f uint16) bool { return r.Flags&f != 0 }

// LastEnd is when the run last stopped being held by a side.
func (r *Run) LastEnd() int64 { return max(r.WEnd, r.SEnd) }

var runSeed = maphash.MakeSeed()

// RunHash is the hash a RunTable keys a run id by (random seed per process).
func RunHash(id string) uint64 { return maphash.String(runSeed, id) }
