package workerhealthprocessor // import "github.com/workerwatch/workerwatch/processor/workerhealthprocessor"

import (
	"context"
	"encoding/json"
	"slices"
	"sort"
	"strings"

	"go.uber.org/zap"
)

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

// cpHists are the histograms by name ("result/<result>", "claim_to_start",
// "stage/<stage>"), with the bounds they were counted in: other bounds
// (histogram_buckets changed) make them unusable, and they start over.
type cpHists struct {
	Bounds []float64         `json:"bounds"`
	Hists  map[string]cpHist `json:"hists"`
}

type cpHist struct {
	Counts []uint64 `json:"counts"`
	Count  uint64   `json:"count"`
	Sum    float64  `json:"sum"`
}

// restoreHists reads the checkpointed histograms. Unreadable ones are
// counted and start over; so do histograms of other bounds (logged).
func (p *healthProcessor) restoreHists(ctx context.Context) {
	raw, err := p.storage.Get(ctx, cpHistsKey)
	if err != nil || raw == nil {
		if err != nil {
			p.tel.ProcessorWorkerHealthCheckpointErrors.Add(ctx, 1)
			p.logger.Warn("reading the checkpointed histograms failed; they start over", zap.Error(err))
		}
		return
	}
	var c cpHists
	if err := json.Unmarshal(raw, &c); err != nil || len(raw) > cpMaxRecord {
		p.tel.ProcessorWorkerHealthCheckpointErrors.Add(ctx, 1)
		p.logger.Warn("the checkpointed histograms are unreadable; they start over", zap.Error(err))
		return
	}
	p.mu.Lock()
	ok := p.tracker.restoreHists(&c)
	p.mu.Unlock()
	if !ok {
		p.logger.Info("histogram_buckets changed since the checkpoint: the histograms start over")
	}
}

// collectHists copies the histograms when they changed since the last
// checkpoint (nil when not). Under the processor's lock.
func (t *tracker) collectHists() *cpHists {
	if !t.hists.changed {
		return nil
	}
	t.hists.changed = false
	h := t.hists
	out := &cpHists{Bounds: h.bounds, Hists: map[string]cpHist{}}
	put := func(name string, x *hist) {
		if x != nil && x.count > 0 {
			out.Hists[name] = cpHist{Counts: slices.Clone(x.counts), Count: x.count, Sum: x.sum}
		}
	}
	for i, x := range h.byResult {
		put("result/"+resultNames[i], x)
	}
	put("claim_to_start", &h.claimStart)
	for name, x := range h.stages {
		put("stage/"+name, x)
	}
	return out
}

// restoreHists puts checkpointed histograms back; false when they were
// counted in other bounds (they start over then).
func (t *tracker) restoreHists(c *cpHists) bool {
	h := t.hists
	if !slices.Equal(c.Bounds, h.bounds) {
		return false
	}
	for name, ch := range c.Hists {
		if len(ch.Counts) != len(h.bounds)+1 {
			continue
		}
		x := &hist{counts: slices.Clone(ch.Counts), count: ch.Count, sum: ch.Sum}
		switch {
		case name == "claim_to_start":
			h.claimStart = *x
		case strings.HasPrefix(name, "result/"):
			if i := slices.Index(resultNames[:], strings.TrimPrefix(name, "result/")); i >= 0 {
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
