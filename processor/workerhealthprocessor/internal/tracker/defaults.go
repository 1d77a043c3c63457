package tracker // import "github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/tracker"

import (
	"time"

	"github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/state"
)

// DefaultConfig is the rule sections' default (the processor's defaults of
// the same sections); the scheduler sources and id keys are the processor's
// to derive.
func DefaultConfig() Config {
	return Config{
		Memory: state.MemoryRule{
			SoftLimitRatio:   0.9,
			UnhealthySamples: 3,
			UnhealthyAfter:   30 * time.Second,
			AtRunStart:       true,
			RecoveryRatio:    0.95,
			RecoverySamples:  3,
		},
		Kills:    state.KillsRule{Count: 3, Window: 10 * time.Minute, Effects: state.DefaultKillEffects(), ExitWindow: 15 * time.Second},
		Recycle:  state.DefaultRecycleRule(),
		Identity: state.IdentityConfig{JoinWithin: time.Minute},
		CPU: state.CPURule{
			Enabled: true, SaturationCores: 0.9, Samples: 3,
			RecoveryCores: 0.7, RecoverySamples: 3,
		},
		Stalled:    state.StalledRule{After: 5 * time.Minute, RequirePending: true},
		Lost:       state.LostRule{After: 2 * time.Minute, ExitGrace: 2 * time.Second},
		Drift:      state.DriftRule{Grace: 30 * time.Second, TombstoneTTL: 10 * time.Minute, HealAfter: 10 * time.Minute},
		Fleet:      state.FleetRule{IdleIntervals: 3},
		Hysteresis: state.Hysteresis{RecoverEvaluations: 2},
		Limits: state.LimitsConfig{
			MaxWorkers: 10000, MaxUnconfirmedWorkers: 1000, MaxRunsPerWorker: 256, MaxRuns: 100000, DropUntrackedMetrics: true,
			WorkerTTL: time.Hour, MaxAttributeLength: 256, RecentRuns: 10,
		},
		HistogramBuckets: []float64{0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800, 3600},
	}
}
