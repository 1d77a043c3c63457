package state // import "github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/state"

import (
	"iter"
	"slices"
)

// RunTable holds one worker's runs by id: up to smallRuns of them in a
// dense list searched by their 64-bit id hashes, more in an open-addressing
// hash table of those hashes (linear probing, at most half full,
// backward-shift deletion).
//
// Why a list first: most workers hold a few runs (the held ones and the
// ended ones kept for drift: four each on a full shard of the gateway
// files), and the table's eight slots for them were 128 bytes a worker where
// the list of four is 64; a scan of a few hashes in one cache line costs
// what a probe does.
//
// Why not a map[string]*Run: when every batch brings new runs (the normal
// case: a run is seen a few times and then never again), each run record
// cost three hashes of its id (a lookup that misses, the delete of the ended
// run evicted at the cap, the insert) and a new allocation for a copy of the
// id, and left the processor at 1.02-1.19x the spanmetrics connector's cost
// per span (BenchmarkSpans at commit 1f057b6). Here the id is hashed once
// per record, the id bytes live in the run (whose memory an evicted run hands on to the new
// one, so steady state allocates nothing per run), and the table's probes,
// insert and delete are a few compares on one contiguous slice, where a Go
// map keyed by the hash still rehashes it and matches control bytes for each
// of the three operations (measured: the three map operations were a quarter
// of the processor's time per lifecycle span).
//
// Runs are told apart by their id, not their hash alone: two ids with one
// hash (chance about n^2/2^65 for n runs; the seed is random per process,
// so ids cannot be chosen to collide) are two slots.
type RunTable struct {
	// slots: the list (len = n <= smallRuns, no empty slot) or the hash
	// table (len a power of two above smallRuns).
	slots []runSlot
	n     int
}

// smallRuns is the most runs kept as a list.
const smallRuns = 8

// hashed: the slots are a hash table, not the list.
func (t *RunTable) hashed() bool { return len(t.slots) > smallRuns }

type runSlot struct {
	h uint64
	r *Run // nil: empty
}

func (t *RunTable) Len() int { return t.n }

// Get returns the run with this id (h is RunHash(id)), or nil.
func (t *RunTable) Get(id string, h uint64) *Run {
	if !t.hashed() {
		for i := range t.slots {
			if s := &t.slots[i]; s.h == h && string(s.r.ID()) == id {
				return s.r
			}
		}
		return nil
	}
	mask := uint64(len(t.slots) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		s := &t.slots[i]
		if s.r == nil {
			return nil
		}
		if s.h == h && string(s.r.ID()) == id {
			return s.r
		}
	}
}

// Put adds a run (its id set; h is RunHash of it) that is not in the table.
func (t *RunTable) Put(r *Run, h uint64) {
	r.id.h = uint32(h) // for Remove: a table's mask is far below 32 bits
	switch {
	case !t.hashed() && t.n < smallRuns:
		t.slots = append(t.slots, runSlot{h: h, r: r})
		t.n++
		return
	case !t.hashed():
		t.resize(4 * smallRuns) // the list is full: a table at most half full
	case 2*(t.n+1) > len(t.slots):
		t.resize(2 * len(t.slots))
	}
	t.place(runSlot{h: h, r: r})
	t.n++
}

func (t *RunTable) place(s runSlot) {
	mask := uint64(len(t.slots) - 1)
	i := s.h & mask
	for t.slots[i].r != nil {
		i = (i + 1) & mask
	}
	t.slots[i] = s
}

func (t *RunTable) resize(size int) {
	old := t.slots
	t.slots = make([]runSlot, size)
	for _, s := range old {
		if s.r != nil {
			t.place(s)
		}
	}
}

// Remove drops a run of the table (a no-op when it is not there).
func (t *RunTable) Remove(r *Run) {
	if !t.hashed() {
		for i := range t.slots {
			if t.slots[i].r == r {
				last := len(t.slots) - 1
				t.slots[i] = t.slots[last]
				t.slots[last] = runSlot{}
				t.slots = t.slots[:last]
				t.n--
				return
			}
		}
		return
	}
	mask := uint64(len(t.slots) - 1)
	i := uint64(r.id.h) & mask
	for t.slots[i].r != r {
		if t.slots[i].r == nil {
			return
		}
		i = (i + 1) & mask
	}
	t.n--
	// Backward-shift deletion: move up every later entry of the probe run
	// whose home slot does not lie between the hole and itself, so that no
	// lookup stops early at the hole and no tombstones pile up.
	for {
		t.slots[i] = runSlot{}
		j := i
		for {
			j = (j + 1) & mask
			if t.slots[j].r == nil {
				return
			}
			home := t.slots[j].h & mask
			if (j > i && (home <= i || home > j)) || (j < i && home <= i && home > j) {
				break
			}
		}
		t.slots[i] = t.slots[j]
		i = j
	}
}

// Shrink gives back the memory of a table that emptied (after pruning):
// an empty one lets go of its slots, one of smallRuns runs or fewer becomes
// the list again.
func (t *RunTable) Shrink() {
	switch {
	case t.n == 0:
		t.slots = nil
	case !t.hashed():
		if cap(t.slots) > 2*t.n {
			t.slots = slices.Clone(t.slots)
		}
	case t.n <= smallRuns:
		list := make([]runSlot, 0, t.n)
		for _, s := range t.slots {
			if s.r != nil {
				list = append(list, s)
			}
		}
		t.slots = list
	case 8*t.n < len(t.slots):
		size := 4 * smallRuns
		for 2*t.n > size/2 {
			size *= 2
		}
		t.resize(size)
	}
}

// All yields every run, in no particular order. The loop body must not add
// or remove runs (a removal shifts entries).
func (t *RunTable) All() iter.Seq[*Run] {
	return func(yield func(*Run) bool) {
		for _, s := range t.slots {
			if s.r != nil && !yield(s.r) {
				return
			}
		}
	}
}
