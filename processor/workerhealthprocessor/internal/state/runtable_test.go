package state

import (
	"math/rand/v2"
	"slices"
	"strconv"
	"testing"
	"unsafe"

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
		hashOf := map[*Run]uint64{}
		for step := 0; step < 20000; step++ {
			id := "r" + strconv.Itoa(rng.IntN(int(c.ids)))
			h := rng.Uint64()%hashes*0x9E3779B97F4A7C15 + uint64(len(id))
			if r := want[id]; r != nil {
				h = hashOf[r]
			}
			got := tb.Get(id, h)
			require.Same(t, want[id], got, "step %d id %s", step, id)
			if got == nil {
				r := &Run{}
				r.SetID(id)
				tb.Put(r, h)
				want[id], hashOf[r] = r, h
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
			ids = append(ids, string(r.ID()))
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
			assert.Nil(t, tb.Get(id, hashOf[r]))
		}
		tb.Shrink()
		assert.Zero(t, tb.Len())
		assert.Nil(t, tb.slots)
	}
}

// A run fits the allocator's 80-byte class (run.go says why).
func TestRunSize(t *testing.T) {
	assert.LessOrEqual(t, unsafe.Sizeof(Run{}), uintptr(80))
}

// A run's id is its own bytes: a new id that fits them reuses them (no
// allocation: an evicted run's memory serves the next run), a longer one
// gets new ones; Take and Restart keep the run's id.
func TestRunID(t *testing.T) {
	r := &Run{}
	assert.Nil(t, r.ID())
	r.SetID("a-run-id-of-some-length")
	assert.Equal(t, "a-run-id-of-some-length", string(r.ID()))
	assert.Zero(t, testing.AllocsPerRun(100, func() {
		r.Reset()
		r.SetID("shorter-id")
	}))
	assert.Equal(t, "shorter-id", string(r.ID()))
	r.Reset()
	r.SetID("a-run-id-longer-than-the-bytes-it-had-so-far")
	assert.Equal(t, "a-run-id-longer-than-the-bytes-it-had-so-far", string(r.ID()))

	o := &Run{WAt: 5, Attempt: 2}
	o.SetID("other")
	r.Take(o)
	assert.Equal(t, "a-run-id-longer-than-the-bytes-it-had-so-far", string(r.ID()))
	assert.Equal(t, int64(5), r.WAt)
	assert.Equal(t, uint16(2), r.Attempt)
	r.Restart(3, RunSchedHeld)
	assert.Equal(t, "a-run-id-longer-than-the-bytes-it-had-so-far", string(r.ID()))
	assert.Equal(t, Run{id: r.id, Attempt: 3, Flags: RunSchedHeld}, *r)
	assert.Equal(t, "other", string(o.ID()), "o keeps its own")
}
