// Package tracker is the worker_health processor's per-worker state: the
// worker, a composition of one internal/state type per rule, and the tracker
// that applies batches (internal/mapping) to the workers, judges them and
// gives their snapshot and checkpoint records. The processor's top package
// holds its lifecycle, config and I/O around it.
package tracker // import "github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/tracker"

import (
	"time"

	"github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/mapping"
	"github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/state"
)

// Config is what the tracker reads of the processor's configuration: the
// rule sections (the same types as the processor's Config, under the same
// names) and what the processor derives from its scheduler and mapping
// sections. The processor builds it once per instance.
type Config struct {
	Capacity   state.CapacityConfig
	Identity   state.IdentityConfig
	Memory     state.MemoryRule
	Kills      state.KillsRule
	Recycle    state.RecycleRule
	CPU        state.CPURule
	Stalled    state.StalledRule
	Lost       state.LostRule
	Drift      state.DriftRule
	Fleet      state.FleetRule
	Hysteresis state.Hysteresis
	Limits     state.LimitsConfig
	// EmitInterval: how often the processor evaluates (emit_interval); a
	// longer gap between two evaluations is a pause of the collector's own
	// (judge.go, paused). 0 in tests that drive evaluations by hand.
	EmitInterval time.Duration

	// HistogramBuckets: the bounds of the duration histograms, in seconds.
	HistogramBuckets []float64
	// StageSpanNames: the stages with a histogram (mapping.stage_span_names).
	StageSpanNames []string
	// Schedulers are the scheduler sources, in the order the mapping numbers
	// them; IDKeys the worker id attributes (the mapping's, then the
	// schedulers').
	Schedulers []mapping.Scheduler
	IDKeys     []string
}
