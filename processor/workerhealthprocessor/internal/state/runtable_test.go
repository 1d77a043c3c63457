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
// forced into few values so that probe runs wrap around and ids share a hash.
func TestRunTableAgainstMap(t *testing.T) {
	for _, hashes := range []uint64{3, 64, 1 << 62} {
		rng := rand.New(rand.NewPCG(1, hashes))
		var tb RunTable
		want := map[string]*Run{}
		for step := 0; step < 20000; step++ {
			id := "r" + strconv.Itoa(rng.IntN(300))
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
			if step%1000 == 0 {
				tb.Shrink()
			}
			require.Equal(t, len(want), tb.Len())
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
