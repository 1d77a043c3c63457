package tracker // import "github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/tracker"

import (
	"hash/maphash"
	"iter"
)

// workerTable is the tracker's workers by id: open addressing over a
// power-of-two array of the workers themselves (each holds its id), linear
// probing, at most 7/8 full, backward-shift deletion. Each slot has a tag
// beside it, 7 bits of the id's hash with the high bit set (0 = empty), so
// that a probe compares ids only where the tags match, as a Go map's control
// bytes do.
//
// Why not a map[string]*Worker: its slots held each id's string header
// again beside the worker that holds the id, 24 bytes a slot, about 43 bytes
// a worker at 10,000 workers; here a slot is 9 bytes, about 15 a worker
// (docs/results/density.md, "the tracker's workers by id").
type workerTable struct {
	seed  maphash.Seed
	tags  []uint8
	slots []*Worker
	n     int
}

func newWorkerTable() workerTable { return workerTable{seed: maphash.MakeSeed()} }

// hash is id's hash: its low bits place it, its top 7 bits are its tag.
func (t *workerTable) hash(id string) (h uint64, tag uint8) {
	h = maphash.String(t.seed, id)
	return h, uint8(h>>57) | 0x80
}

// get is the worker with this id, or nil.
func (t *workerTable) get(id string) *Worker {
	if t.n == 0 {
		return nil
	}
	h, tag := t.hash(id)
	mask := uint64(len(t.slots) - 1)
	for i := h & mask; ; i = (i + 1) & mask {
		switch t.tags[i] {
		case 0:
			return nil
		case tag:
			if w := t.slots[i]; w.id == id {
				return w
			}
		}
	}
}

// put adds a worker whose id is not in the table.
func (t *workerTable) put(w *Worker) {
	if 8*(t.n+1) > 7*len(t.slots) {
		t.resize(max(16, 2*len(t.slots)))
	}
	t.place(w)
	t.n++
}

func (t *workerTable) place(w *Worker) {
	h, tag := t.hash(w.id)
	mask := uint64(len(t.slots) - 1)
	i := h & mask
	for t.tags[i] != 0 {
		i = (i + 1) & mask
	}
	t.tags[i], t.slots[i] = tag, w
}

func (t *workerTable) resize(size int) {
	old := t.slots
	t.tags, t.slots = make([]uint8, size), make([]*Worker, size)
	for _, w := range old {
		if w != nil {
			t.place(w)
		}
	}
}

// remove drops w (a no-op when it is not in the table).
func (t *workerTable) remove(w *Worker) {
	if t.n == 0 {
		return
	}
	h, _ := t.hash(w.id)
	mask := uint64(len(t.slots) - 1)
	i := h & mask
	for t.slots[i] != w {
		if t.tags[i] == 0 {
			return
		}
		i = (i + 1) & mask
	}
	t.n--
	// Backward-shift deletion: move up every later entry of the probe run
	// whose home slot does not lie between the hole and itself, so that no
	// lookup stops early at the hole (as RunTable.Remove).
	for {
		t.tags[i], t.slots[i] = 0, nil
		j := i
		for {
			j = (j + 1) & mask
			if t.tags[j] == 0 {
				return
			}
			hj, _ := t.hash(t.slots[j].id)
			home := hj & mask
			if (j > i && (home <= i || home > j)) || (j < i && home <= i && home > j) {
				break
			}
		}
		t.tags[i], t.slots[i] = t.tags[j], t.slots[j]
		i = j
	}
}

func (t *workerTable) len() int { return t.n }

// all yields every worker, in no particular order. The loop body must not
// add or remove workers (a removal shifts entries): collect them first.
func (t *workerTable) all() iter.Seq[*Worker] {
	return func(yield func(*Worker) bool) {
		for _, w := range t.slots {
			if w != nil && !yield(w) {
				return
			}
		}
	}
}
