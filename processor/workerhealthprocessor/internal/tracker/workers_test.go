package tracker

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The worker table against a Go map, through puts, removes (which shift
// entries back) and gets of ids present and absent, over rounds that grow
// and shrink it; all yields each worker once.
func TestWorkerTable(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	tb := newWorkerTable()
	ref := map[string]*Worker{}
	assert.Nil(t, tb.get("none"), "empty")
	tb.remove(newWorker("none", 0))
	for round := range 6 {
		for range 3000 {
			id := fmt.Sprintf("w-%d", rng.IntN(4000))
			switch w := ref[id]; {
			case w == nil:
				w = newWorker(id, 0)
				tb.put(w)
				ref[id] = w
			case rng.IntN(2) == 0 || round >= 4: // the last rounds mostly empty it
				tb.remove(w)
				tb.remove(w) // twice: a no-op
				delete(ref, id)
			}
		}
		require.Equal(t, len(ref), tb.len(), "round %d", round)
		for i := range 4000 {
			id := fmt.Sprintf("w-%d", i)
			require.Same(t, ref[id], tb.get(id), "round %d, %s", round, id)
		}
		seen := map[*Worker]bool{}
		for w := range tb.all() {
			require.False(t, seen[w], "yielded twice")
			seen[w] = true
			require.Same(t, ref[w.id], w)
		}
		require.Len(t, seen, len(ref))
	}
}

// A slot is 9 bytes, at most 7/8 of them full: about 15 bytes a worker at
// 10,000 workers, where a map[string]*Worker took about 43.
func TestWorkerTableSize(t *testing.T) {
	tb := newWorkerTable()
	const n = 10_000
	for i := range n {
		tb.put(newWorker(fmt.Sprintf("density-worker-%06d", i), 0))
	}
	perWorker := float64(len(tb.tags)+8*len(tb.slots)) / n
	assert.InDelta(t, 14.7, perWorker, 0.1)
}

// The table's get beside a Go map's, at 100,000 workers, of ids present
// and absent:
//
//	go test -run '^$' -bench BenchmarkWorkerTable -benchmem ./processor/workerhealthprocessor/internal/tracker/
func BenchmarkWorkerTable(b *testing.B) {
	const n = 100_000
	tb, m := newWorkerTable(), map[string]*Worker{}
	ids := make([]string, 2*n)
	for i := range ids {
		ids[i] = fmt.Sprintf("bench-worker-%06d", i)
		if i < n {
			w := newWorker(ids[i], 0)
			tb.put(w)
			m[w.id] = w
		}
	}
	for _, c := range []struct {
		name string
		from int
	}{{"present", 0}, {"absent", n}} {
		b.Run("table/"+c.name, func(b *testing.B) {
			for i := 0; b.Loop(); i++ {
				if (tb.get(ids[c.from+i*7919%n]) == nil) != (c.from > 0) {
					b.Fatal("wrong answer")
				}
			}
		})
		b.Run("map/"+c.name, func(b *testing.B) {
			for i := 0; b.Loop(); i++ {
				if (m[ids[c.from+i*7919%n]] == nil) != (c.from > 0) {
					b.Fatal("wrong answer")
				}
			}
		})
	}
}
