package state

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestHistograms(t *testing.T) {
	h := NewHistograms([]float64{1, 10}, []string{"execute", "compile", "execute"})
	assert.Equal(t, []string{"compile", "execute"}, h.stageNames, "sorted, once each")
	h.Duration("success", 500e6) // 0.5 s: first bucket
	h.Duration("success", 10e9)  // 10 s: a bound is inclusive
	h.Duration("bogus", 11e9)    // other, overflow bucket
	h.ClaimToStart(2e9)          // second bucket
	h.Stage("execute", 3e9)      // kept
	h.Stage("unconfigured", 3e9) // not a configured stage: dropped
	h.Stage("compile", -1)       // negative: dropped
	x := h.byResult[ResultIndex("success")]
	require.NotNil(t, x)
	assert.Equal(t, []uint64{1, 1, 0}, x.counts)
	assert.Equal(t, uint64(2), x.count)
	assert.InDelta(t, 10.5, x.sum, 1e-9)
	assert.Equal(t, []uint64{0, 0, 1}, h.byResult[ResultIndex("other")].counts)
	assert.Equal(t, []uint64{0, 1, 0}, h.claimStart.counts)
	assert.Equal(t, uint64(1), h.stages["execute"].count)
	assert.Zero(t, h.stages["compile"].count)
	assert.True(t, h.changed)
}

// The histograms' checkpoint record: what changed is collected once, read
// back into the same bounds, and ignored (start over) under other bounds.
func TestHistogramsCheckpoint(t *testing.T) {
	stages := []string{"execute"}
	h := NewHistograms([]float64{1, 10}, stages)
	assert.Nil(t, h.Collect(), "nothing observed")
	h.Duration("failure", 2e9)
	h.Stage("execute", 20e9)
	c := h.Collect()
	require.NotNil(t, c)
	assert.Nil(t, h.Collect(), "collected once until the next change")
	assert.Len(t, c.Hists, 2)
	h.Unsaved()
	assert.NotNil(t, h.Collect(), "a failed write collects them again")

	back := NewHistograms([]float64{1, 10}, stages)
	require.True(t, back.Restore(c))
	assert.Equal(t, h.byResult, back.byResult)
	assert.Equal(t, *h.stages["execute"], *back.stages["execute"])

	other := NewHistograms([]float64{5}, stages)
	assert.False(t, other.Restore(c), "other bounds: the histograms start over")
	assert.Nil(t, other.byResult[ResultIndex("failure")])
}

func TestResultIndex(t *testing.T) {
	assert.True(t, slices.IsSorted(ResultNames[:]), "points are emitted in this order")
	for i, n := range ResultNames {
		assert.Equal(t, i, ResultIndex(n), n)
	}
	assert.Equal(t, "other", ResultNames[ResultIndex("weird")])
}
