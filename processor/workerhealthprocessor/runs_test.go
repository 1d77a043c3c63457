package workerhealthprocessor

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
		var tb runTable
		want := map[string]*run{}
		for step := 0; step < 20000; step++ {
			id := "r" + strconv.Itoa(rng.IntN(300))
			h := rng.Uint64()%hashes*0x9E3779B97F4A7C15 + uint64(len(id))
			if r := want[id]; r != nil {
				h = r.hash
			}
			got := tb.get(id, h)
			require.Same(t, want[id], got, "step %d id %s", step, id)
			if got == nil {
				r := &run{id: []byte(id), hash: h}
				tb.put(r)
				want[id] = r
			} else if rng.IntN(2) == 0 {
				tb.remove(got)
				delete(want, id)
			}
			if step%1000 == 0 {
				tb.shrink()
			}
			require.Equal(t, len(want), tb.len())
		}
		var ids []string
		for r := range tb.all() {
			ids = append(ids, string(r.id))
		}
		slices.Sort(ids)
		var wantIDs []string
		for id := range want {
			wantIDs = append(wantIDs, id)
		}
		slices.Sort(wantIDs)
		assert.Equal(t, wantIDs, ids)
		for id, r := range want {
			tb.remove(r)
			assert.Nil(t, tb.get(id, r.hash))
		}
		tb.shrink()
		assert.Zero(t, tb.len())
		assert.Nil(t, tb.slots)
	}
}

// An evicted run's memory (its id bytes included) serves the next run: the
// runs still tracked keep their own ids.
func TestRunIDsSurviveReuse(t *testing.T) {
	cfg := testCfg()
	cfg.Limits.MaxRunsPerWorker = 3
	tr := newTracker(cfg)
	w := tr.get("w", 1, evidenceConfirmed)
	ids := []string{"a-long-run-id-0001", "b", "c-run", "d-another-long-id", "e", "f"}
	runs := make([]*run, len(ids))
	for i, id := range ids {
		r := tr.run(w, id)
		require.NotNil(t, r)
		runs[i] = r
		if i == 0 {
			r.flags |= fWorkerHeld // held: never evicted
		} else {
			r.flags |= fWorkerEnded
		}
	}
	assert.Equal(t, 3, w.runs.len())
	// The oldest ended run's memory serves each new run: d takes b's, e
	// takes c's, f takes d's.
	assert.Same(t, runs[1], runs[3])
	assert.Same(t, runs[2], runs[4])
	assert.Same(t, runs[3], runs[5])
	for _, id := range []string{"a-long-run-id-0001", "e", "f"} {
		assert.True(t, w.runs.has(id), id)
	}
	for r := range w.runs.all() {
		assert.Equal(t, runHash(string(r.id)), r.hash)
	}
}
