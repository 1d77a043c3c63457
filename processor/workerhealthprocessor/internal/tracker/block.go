package tracker // import "github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/tracker"

// block hands out the small parts of one snapshot's entries (held run ids
// and their lists, packed recent runs, roles) from blocks that belong to
// that snapshot alone, one block of each kind in the steady state, sized
// from what the snapshot before took.
//
// Why: as a small allocation each, the parts of a worker's entry that
// changed since the snapshot before were interleaved in the runtime's
// spans with the parts of the snapshot still served, and once that one was
// collected its parts left free slots in spans that still held live ones:
// memory the process kept but did not use (the runtime's heap/unused was
// 2.1 MB at 10,000 workers, about what one snapshot's parts take). A block
// is one large allocation that is freed whole with its snapshot
// (docs/results/density.md, "a snapshot's parts in blocks of its own").
// Nothing is shared with the snapshot before, which would keep its block
// alive: each snapshot copies what it lists.
type block[T any] struct {
	free       []T // room left in the current block
	used, last int // taken for this snapshot, and for the one before
}

// reset starts a new snapshot's blocks. The room left in the last one is
// not used: it belongs to the snapshot before, which its readers hold.
func (b *block[T]) reset() { b.free, b.last, b.used = nil, b.used, 0 }

// take is n elements from the snapshot's blocks, capped at n (appending
// to them never writes into another's).
func (b *block[T]) take(n int) []T {
	if n == 0 {
		return nil
	}
	if len(b.free) < n {
		// What the snapshot before took, and a little more for a fleet
		// that grows; past that, as much as was taken so far (blocks that
		// double, as append's).
		size := max(n, b.last+b.last/16-b.used, b.used, 64)
		b.free = make([]T, size)
	}
	s := b.free[:n:n]
	b.free = b.free[n:]
	b.used += n
	return s
}
