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

// resultNames are the cicd.pipeline.result values and "other", sorted (the
// order of the emitted points). Anything else is "other", so a worker's
// free-form results cannot explode cardinality.
var resultNames = [...]string{"cancellation", "error", "failure", "other", "skip", "success", "timeout"}

// resultIndex is a result's slot in resultNames: a switch, not a map lookup,
// because it runs for every finished run.
func resultIndex(result string) int {
	switch result {
	case "cancellation":
		return 0
	case "error":
		return 1
	case "failure":
		return 2
	case "skip":
		return 4
	case "success":
		return 5
	case "timeout":
		return 6
	}
	return 3
}

// histograms are fleet-wide (not per worker): per-worker histograms would
// multiply series by workers times buckets.
type histograms struct {
	// changed: observed since the last checkpoint.
	changed    bool
	bounds     []float64
	byResult   [len(resultNames)]*hist // nil until a run had that result
	claimStart hist
	// stages holds one histogram per configured stage name, made up front so
	// a stage span costs one lookup (the mapper already only yields
	// configured names; the lookup also keeps unknown names out).
	stages map[string]*hist
	// stageNames are the keys of stages, sorted once: the order of the points.
	stageNames []string
}

func newHistograms(bounds []float64, stages []string) *histograms {
	h := &histograms{bounds: bounds, stages: make(map[string]*hist, len(stages))}
	for _, s := range stages {
		if h.stages[s] == nil {
			h.stages[s] = &hist{}
			h.stageNames = append(h.stageNames, s)
		}
	}
	sort.Strings(h.stageNames)
	return h
}

func nsToSeconds(ns int64) float64 { return float64(ns) / 1e9 }

func (h *histograms) duration(result string, ns int64) {
	i := resultIndex(result)
	x := h.byResult[i]
	if x == nil {
		x = &hist{}
		h.byResult[i] = x
	}
	x.observe(h.bounds, nsToSeconds(ns))
	h.changed = true
}

func (h *histograms) claimToStart(ns int64) {
	h.claimStart.observe(h.bounds, nsToSeconds(ns))
	h.changed = true
}

func (h *histograms) stage(name string, ns int64) {
	if x := h.stages[name]; x != nil && ns >= 0 {
		x.observe(h.bounds, nsToSeconds(ns))
		h.changed = true
	}
}
