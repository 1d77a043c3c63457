package workerhealthprocessor

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestHistograms(t *testing.T) {
	h := newHistograms([]float64{1, 10}, []string{"execute", "compile", "execute"})
	assert.Equal(t, []string{"compile", "execute"}, h.stageNames, "sorted, once each")
	h.duration("success", 500e6) // 0.5 s: first bucket
	h.duration("success", 10e9)  // 10 s: a bound is inclusive
	h.duration("bogus", 11e9)    // other, overflow bucket
	h.claimToStart(2e9)          // second bucket
	h.stage("execute", 3e9)      // kept
	h.stage("unconfigured", 3e9) // not a configured stage: dropped
	h.stage("compile", -1)       // negative: dropped
	x := h.byResult[resultIndex("success")]
	require.NotNil(t, x)
	assert.Equal(t, []uint64{1, 1, 0}, x.counts)
	assert.Equal(t, uint64(2), x.count)
	assert.InDelta(t, 10.5, x.sum, 1e-9)
	assert.Equal(t, []uint64{0, 0, 1}, h.byResult[resultIndex("other")].counts)
	assert.Equal(t, []uint64{0, 1, 0}, h.claimStart.counts)
	assert.Equal(t, uint64(1), h.stages["execute"].count)
	assert.Zero(t, h.stages["compile"].count)
	assert.True(t, h.changed)
}

// The histograms' checkpoint record: what changed is collected once, read
// back into the same bounds, and ignored (start over) under other bounds.
func TestHistogramsCheckpoint(t *testing.T) {
	cfg := testCfg()
	cfg.HistogramBuckets = []float64{1, 10}
	cfg.Mapping.StageSpanNames = []string{"execute"}
	tr := newTracker(cfg)
	assert.Nil(t, tr.collectHists(), "nothing observed")
	tr.hists.duration("failure", 2e9)
	tr.hists.stage("execute", 20e9)
	c := tr.collectHists()
	require.NotNil(t, c)
	assert.Nil(t, tr.collectHists(), "collected once until the next change")
	assert.Len(t, c.Hists, 2)

	back := newTracker(cfg)
	require.True(t, back.restoreHists(c))
	assert.Equal(t, tr.hists.byResult, back.hists.byResult)
	assert.Equal(t, *tr.hists.stages["execute"], *back.hists.stages["execute"])

	cfg2 := testCfg()
	cfg2.HistogramBuckets = []float64{5}
	other := newTracker(cfg2)
	assert.False(t, other.restoreHists(c), "other bounds: the histograms start over")
	assert.Nil(t, other.hists.byResult[resultIndex("failure")])
}

func TestResultIndex(t *testing.T) {
	assert.True(t, slices.IsSorted(resultNames[:]), "points are emitted in this order")
	for i, n := range resultNames {
		assert.Equal(t, i, resultIndex(n), n)
	}
	assert.Equal(t, "other", resultNames[resultIndex("weird")])
}
