package workerhealthprocessor // import "github.com/workerwatch/workerwatch/processor/workerhealthprocessor"

import "sort"

// hist is a cumulative explicit-bucket histogram in seconds.
type hist struct {
	counts []uint64
	count  uint64
	sum    float64
}

func (h *hist) observe(bounds []float64, seconds float64) {
	if h.counts == nil {
		h.counts = make([]uint64, len(bounds)+1)
	}
	h.counts[sort.SearchFloat64s(bounds, seconds)]++
	h.count++
	h.sum += seconds
}

// semconvResults are the cicd.pipeline.result values; anything else is
// "other" so a worker's free-form results cannot explode cardinality.
var semconvResults = map[string]bool{"success": true, "failure": true, "error": true, "timeout": true, "cancellation": true, "skip": true}

// histograms are fleet-wide (not per worker): per-worker histograms would
// multiply series by workers times buckets.
type histograms struct {
	bounds       []float64
	byResult     map[string]*hist
	claimStart   hist
	stages       map[string]*hist
	stageAllowed map[string]bool
}

func newHistograms(bounds []float64, stages []string) *histograms {
	h := &histograms{bounds: bounds, byResult: map[string]*hist{}, stages: map[string]*hist{}, stageAllowed: map[string]bool{}}
	for _, s := range stages {
		h.stageAllowed[s] = true
	}
	return h
}

func nsToSeconds(ns int64) float64 { return float64(ns) / 1e9 }

func (h *histograms) duration(result string, ns int64) {
	if !semconvResults[result] {
		result = "other"
	}
	x := h.byResult[result]
	if x == nil {
		x = &hist{}
		h.byResult[result] = x
	}
	x.observe(h.bounds, nsToSeconds(ns))
}

func (h *histograms) claimToStart(ns int64) { h.claimStart.observe(h.bounds, nsToSeconds(ns)) }

func (h *histograms) stage(name string, ns int64) {
	if !h.stageAllowed[name] || ns < 0 {
		return
	}
	x := h.stages[name]
	if x == nil {
		x = &hist{}
		h.stages[name] = x
	}
	x.observe(h.bounds, nsToSeconds(ns))
}
