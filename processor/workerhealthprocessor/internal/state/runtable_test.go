package state

import (
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The table against a map, through random puts and removes, with hashes
// forced into few values so that probe runs wrap around and ids share a hash;
// with 12 ids the runs held cross smallRuns both ways (list to table, and
// back at a Shrink), with 300 they stay in the table.
func TestRunTableAgainstMap(t *testing.T) {
	for _, c := range []struct{ hashes, ids uint64 }{{3, 12}, {64, 12}, {1 << 62, 12}, {3, 300}, {64, 300}, {1 << 62, 300}} {
		hashes := c.hashes
		rng := rand.New(rand.NewPCG(c.ids, hashes))
		lists, tables := 0, 0
		var tb RunTable
		want := map[string]*Run{}
		for step := 0; step < 20000; step++ {
			id := "r" + strconv.Itoa(rng.IntN(int(c.ids)))
			h := rng.Uint64()%hashes*0x9E3779B97F4A7C15 + uint64(len(id))
			if r := want[id]; r != nil {
				h = r.Hash
			}
			got := tb.Get(id, h)
			require.Same(t, want[id], got, "step %d id %s", step, id)
			if got == nil {
				r := &Run{ID: []byte(id), Hash: h}
				tb.Put(r)
				want[id] = r
			} else if rng.IntN(2) == 0 {
				tb.Remove(got)
				delete(want, id)
			}
			if step%1000 == 0 || (c.ids < 100 && step%7 == 0) {
				tb.Shrink()
			}
			require.Equal(t, len(want), tb.Len())
			if tb.hashed() {
				tables++
			} else {
				lists++
				require.Len(t, tb.slots, tb.Len(), "a list has no empty slot")
			}
		}
		if c.ids < 100 {
			assert.Positive(t, lists, "some steps in the list")
			assert.Positive(t, tables, "some steps in the table")
		}
		var ids []string
		for r := range tb.All() {
			ids = append(ids, string(r.ID))
		}
		slices.Sort(ids)
		var wantIDs []string
		for id := range want {
			wantIDs = append(wantIDs, id)
		}
		slices.Sort(wantIDs)
		assert.Equal(t, wantIDs, ids)
		for id, r := range want {
			tb.Remove(r)
			assert.Nil(t, tb.Get(id, r.Hash))
		}
		tb.Shrink()
		assert.Zero(t, tb.Len())
		assert.Nil(t, tb.slots)
	}
}
