package state // import "github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/state"

import (
	"slices"
	"sort"
	"strings"
)

// Hist is a cumulative explicit-bucket histogram in seconds.
type Hist struct {
	counts []uint64
	count  uint64
	sum    float64
}

func (h *Hist) observe(bounds []float64, seconds float64) {
	if h.counts == nil {
		h.counts = make([]uint64, len(bounds)+1)
	}
	h.counts[sort.SearchFloat64s(bounds, seconds)]++
	h.count++
	h.sum += seconds
}

// ResultNames are the cicd.pipeline.result values and "other", sorted (the
// order of the emitted points). Anything else is "other", so a worker's
// free-form results cannot explode cardinality.
var ResultNames = [...]string{"cancellation", "error", "failure", "other", "skip", "success", "timeout"}

// ResultIndex is a result's slot in ResultNames: a switch, not a map lookup,
// because it runs for every finished run.
func ResultIndex(result string) int {
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

// Histograms are fleet-wide (not per worker): per-worker histograms would
// multiply series by workers times buckets.
type Histograms struct {
	// changed: observed since the last checkpoint.
	changed    bool
	bounds     []float64
	byResult   [len(ResultNames)]*Hist // nil until a run had that result
	claimStart Hist
	// stages holds one histogram per configured stage name, made up front so
	// a stage span costs one lookup (the mapper already only yields
	// configured names; the lookup also keeps unknown names out).
	stages map[string]*Hist
	// stageNames are the keys of stages, sorted once: the order of the points.
	stageNames []string
}

// NewHistograms are empty histograms of these bounds and stage names.
func NewHistograms(bounds []float64, stages []string) *Histograms {
	h := &Histograms{bounds: bounds, stages: make(map[string]*Hist, len(stages))}
	for _, s := range stages {
		if h.stages[s] == nil {
			h.stages[s] = &Hist{}
			h.stageNames = append(h.stageNames, s)
		}
	}
	sort.Strings(h.stageNames)
	return h
}

// Seconds is a duration in nanoseconds in seconds.
func Seconds(ns int64) float64 { return float64(ns) / 1e9 }

// Duration observes a finished run's duration by its result.
func (h *Histograms) Duration(result string, ns int64) {
	i := ResultIndex(result)
	x := h.byResult[i]
	if x == nil {
		x = &Hist{}
		h.byResult[i] = x
	}
	x.observe(h.bounds, Seconds(ns))
	h.changed = true
}

// ClaimToStart observes a run's latency from its earliest claim to its start.
func (h *Histograms) ClaimToStart(ns int64) {
	h.claimStart.observe(h.bounds, Seconds(ns))
	h.changed = true
}

// Stage observes a configured stage span's duration (others are dropped).
func (h *Histograms) Stage(name string, ns int64) {
	if x := h.stages[name]; x != nil && ns >= 0 {
		x.observe(h.bounds, Seconds(ns))
		h.changed = true
	}
}

// HistsRecord is the histograms' checkpoint record, by name ("result/<result>", "claim_to_start",
// "stage/<stage>"), with the bounds they were counted in: other bounds
// (histogram_buckets changed) make them unusable, and they start over.
type HistsRecord struct {
	Bounds []float64         `json:"bounds"`
	Hists  map[string]cpHist `json:"hists"`
}

type cpHist struct {
	Counts []uint64 `json:"counts"`
	Count  uint64   `json:"count"`
	Sum    float64  `json:"sum"`
}

// Count is the number of observations.
func (h *Hist) Count() uint64 { return h.count }

// Sum is the observations' sum in seconds.
func (h *Hist) Sum() float64 { return h.sum }

// Counts are the bucket counts (nil before the first observation).
func (h *Hist) Counts() []uint64 { return h.counts }

// Bounds are the explicit bucket bounds in seconds.
func (h *Histograms) Bounds() []float64 { return h.bounds }

// ByResult is the run duration histogram of ResultNames[i] (nil until a run
// had that result).
func (h *Histograms) ByResult(i int) *Hist { return h.byResult[i] }

// ClaimStart is the claim-to-start histogram.
func (h *Histograms) ClaimStart() *Hist { return &h.claimStart }

// StageNames are the configured stage names, sorted: the order of the points.
func (h *Histograms) StageNames() []string { return h.stageNames }

// StageHist is a configured stage's histogram (nil for any other name).
func (h *Histograms) StageHist(name string) *Hist { return h.stages[name] }

// Unsaved marks the histograms changed again: their checkpoint write failed.
func (h *Histograms) Unsaved() { h.changed = true }

// Collect copies the histograms when they changed since the last
// checkpoint (nil when not).
func (h *Histograms) Collect() *HistsRecord {
	if !h.changed {
		return nil
	}
	h.changed = false
	out := &HistsRecord{Bounds: h.bounds, Hists: map[string]cpHist{}}
	put := func(name string, x *Hist) {
		if x != nil && x.count > 0 {
			out.Hists[name] = cpHist{Counts: slices.Clone(x.counts), Count: x.count, Sum: x.sum}
		}
	}
	for i, x := range h.byResult {
		put("result/"+ResultNames[i], x)
	}
	put("claim_to_start", &h.claimStart)
	for name, x := range h.stages {
		put("stage/"+name, x)
	}
	return out
}

// Restore puts checkpointed histograms back; false when they were
// counted in other bounds (they start over then).
func (h *Histograms) Restore(c *HistsRecord) bool {
	if !slices.Equal(c.Bounds, h.bounds) {
		return false
	}
	for name, ch := range c.Hists {
		if len(ch.Counts) != len(h.bounds)+1 {
			continue
		}
		x := &Hist{counts: slices.Clone(ch.Counts), count: ch.Count, sum: ch.Sum}
		switch {
		case name == "claim_to_start":
			h.claimStart = *x
		case strings.HasPrefix(name, "result/"):
			if i := slices.Index(ResultNames[:], strings.TrimPrefix(name, "result/")); i >= 0 {
				h.byResult[i] = x
			}
		case strings.HasPrefix(name, "stage/"):
			if st := h.stages[strings.TrimPrefix(name, "stage/")]; st != nil {
				*st = *x
			}
		}
	}
	return true
}
