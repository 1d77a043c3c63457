// Package state holds the worker_health processor's per-worker state: the
// rule sections of its configuration, which the processor's Config embeds
// under the same keys (the top package aliases these types).
package state // import "github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/state"

import "time"

// IdentityConfig: telling a worker whose sources never meet.
type IdentityConfig struct {
	// JoinWithin: a worker that only one source (its process tree, its own
	// telemetry, a scheduler) names this long after it was first seen, while
	// other workers are named by another source, is reported once: a log
	// line with the ids seen and the workers_unjoined counter. Default 1m.
	JoinWithin time.Duration `mapstructure:"join_within"`
}

// CapacityConfig gives capacities the workers do not report themselves.
type CapacityConfig struct {
	// Default capacity of every worker (0 = unknown). Default 0.
	Default int `mapstructure:"default"`
	// PerWorker overrides by worker id.
	PerWorker map[string]int `mapstructure:"per_worker"`
}

// MemoryRule: memory over the soft limit (docs/health-rules.md).
type MemoryRule struct {
	// SoftLimitBytes (0 = off). Default 0.
	SoftLimitBytes int64 `mapstructure:"soft_limit_bytes"`
	// SoftLimitRatio of the cgroup memory limit (0 = off). Default 0.9. When
	// both are set the lower one applies.
	SoftLimitRatio float64 `mapstructure:"soft_limit_ratio"`
	// UnhealthySamples consecutive samples over the limit make the worker
	// unhealthy. Default 3.
	UnhealthySamples int `mapstructure:"unhealthy_samples"`
	// UnhealthyAfter continuously over the limit makes it unhealthy too (0 =
	// off). Default 30s.
	UnhealthyAfter time.Duration `mapstructure:"unhealthy_after"`
	// AtRunStart: over the limit when a run starts makes it unhealthy at once
	// (Scoot's rule, but it recovers). Default true.
	AtRunStart bool `mapstructure:"at_run_start"`
	// RecoveryRatio of the soft limit the memory must fall under, for
	// RecoverySamples consecutive samples, to end the episode. Defaults 0.95, 3.
	RecoveryRatio   float64 `mapstructure:"recovery_ratio"`
	RecoverySamples int     `mapstructure:"recovery_samples"`
	// Roles: soft limits of single process roles (e.g. main: the engine
	// whose heap leaks while its children are bounded by their own limits),
	// each judged like the tree's with the persistence, at-run-start and
	// recovery settings above. Default: none.
	Roles map[string]RoleMemoryRule `mapstructure:"roles"`
}

// RoleMemoryRule is one role's soft limit.
type RoleMemoryRule struct {
	// SoftLimitBytes of the role's resident memory (required, > 0).
	SoftLimitBytes int64 `mapstructure:"soft_limit_bytes"`
}

// KillsRule: kills that say the worker itself is sick.
type KillsRule struct {
	// Count kills whose reason has an effect, within Window, give that
	// effect's state (0 = off). Defaults 3, 10m.
	Count  int           `mapstructure:"count"`
	Window time.Duration `mapstructure:"window"`
	// Effects of each kill reason: "none" (counted in the kills metric
	// only), "degraded" or "unhealthy". A reason left out keeps its default:
	// a run killed by its own limit (timeout, memory_limit) is the run's
	// fault, not the worker's, and so are canceled, shutdown and other
	// (none); the worker's processes killed by the OOM killer (oom), runs'
	// processes crashing (crash), the worker's main process exiting
	// (worker_exit) and children exiting with no run to blame (child_exit)
	// are the worker's (unhealthy).
	Effects map[string]string `mapstructure:"effects"`
	// ChildRoles: the roles whose exits are matched against ending runs for
	// child_exit. Default: none, which means every role but the main one.
	ChildRoles []string `mapstructure:"child_roles"`
	// ExitWindow: a child exit is blamed on a run that ended from the tree
	// sample before the exit until this long after it (the run's end record
	// and the tree travel apart, seconds apart under load). Default 15s.
	ExitWindow time.Duration `mapstructure:"exit_window"`
}

// CPURule: the main process saturating what one thread can get (cpu.go).
type CPURule struct {
	// Enabled. Default true.
	Enabled bool `mapstructure:"enabled"`
	// SaturationCores: at or above this many cores the main process is
	// saturated. Below a CPU limit of one core, it is this share of the
	// limit (the most the main process can get). Default 0.9.
	SaturationCores float64 `mapstructure:"saturation_cores"`
	// Samples consecutive saturated samples make the worker degraded. Default 3.
	Samples int `mapstructure:"samples"`
	// RecoveryCores (scaled like SaturationCores) and RecoverySamples end
	// it. Defaults 0.7, 3.
	RecoveryCores   float64 `mapstructure:"recovery_cores"`
	RecoverySamples int     `mapstructure:"recovery_samples"`
}

// StalledRule: alive, work available, no claim.
type StalledRule struct {
	// After without a claim by the worker (0 = off). Default 5m.
	After time.Duration `mapstructure:"after"`
	// RequirePending: only when the scheduler reports pending work. When
	// false, free capacity alone suffices. Default true.
	RequirePending bool `mapstructure:"require_pending"`
}

// LostRule: no telemetry and no live process.
type LostRule struct {
	// After. Default 2m.
	After time.Duration `mapstructure:"after"`
	// ExitGrace: a worker whose root process exited (the worker_process
	// receiver says so) and that no new incarnation replaced within this
	// is lost at once (process_exited). Default 2s.
	ExitGrace time.Duration `mapstructure:"exit_grace"`
}

// DriftRule: scheduler vs worker.
type DriftRule struct {
	// Grace before a disagreement counts (propagation delay). Default 30s
	// (OpenFn's claim rollback).
	Grace time.Duration `mapstructure:"grace"`
	// TombstoneTTL: how long an ended run is remembered so late, duplicated or
	// reordered events about it do not create false drift. Default 10m.
	TombstoneTTL time.Duration `mapstructure:"tombstone_ttl"`
	// HealAfter bounds drift that lost events can leave behind where no
	// snapshot or count corrects it: a run one side still holds this long
	// after the other side ended it, or (the scheduler's side) that the
	// worker never named, is let go and counted as healed. Set it to the
	// scheduler's own limit for a run that never reports back (OpenFn: the
	// run timeout plus 40s). Default 10m.
	HealAfter time.Duration `mapstructure:"heal_after"`
}

// FleetRule: pending work while healthy capacity sits idle.
type FleetRule struct {
	// IdleIntervals consecutive evaluations. Default 3.
	IdleIntervals int `mapstructure:"idle_intervals"`
}

// Hysteresis shared by all states.
type Hysteresis struct {
	// RecoverEvaluations: a worker moves to a better state only after the
	// better state was computed this many consecutive evaluations. Moving to a
	// worse state is immediate (each rule has its own persistence). Default 2.
	RecoverEvaluations int `mapstructure:"recover_evaluations"`
}

// LimitsConfig bounds memory.
type LimitsConfig struct {
	// MaxWorkers tracked. At the limit a new worker confirmed by its tree or
	// by a scheduler takes the place of one that is not (seen once first,
	// then records only, least recently mentioned first); any other new
	// worker is refused and counted (internal/tracker/admission.go). Default 10000.
	MaxWorkers int `mapstructure:"max_workers"`
	// MaxUnconfirmedWorkers: workers seen once (only their own records, all
	// within one evaluation interval) tracked at a time; more are refused
	// until some are seen again or forgotten (after lost.after); max_workers
	// bounds them too. 0: only workers confirmed by their tree or a
	// scheduler are tracked. Default 1000.
	MaxUnconfirmedWorkers int `mapstructure:"max_unconfirmed_workers"`
	// MaxRunsPerWorker tracked (ended runs are evicted first); a worker seen
	// once holds at most 4, and none more than its share of max_runs.
	// Default 256.
	MaxRunsPerWorker int `mapstructure:"max_runs_per_worker"`
	// MaxRuns tracked in all (held and remembered ended runs). A worker's
	// share is max_runs / tracked workers, at least 8. Default 100000.
	MaxRuns int `mapstructure:"max_runs"`
	// DropUntrackedMetrics: incoming metrics whose resource names a worker
	// the processor does not track (refused at these limits), has seen only
	// once, or names by a malformed id, are dropped (and counted) instead of
	// passed on: every exporter downstream (a Prometheus exporter keeps each
	// series until its metric_expiration) then holds per-worker series for
	// at most max_workers workers, however many ids a sender makes up.
	// Metrics without a worker id, and the scheduler's, always pass.
	// Default true.
	DropUntrackedMetrics bool `mapstructure:"drop_untracked_metrics"`
	// WorkerTTL: forget a worker after this long without any record about it.
	// Default 1h.
	WorkerTTL time.Duration `mapstructure:"worker_ttl"`
	// MaxAttributeLength: ids and values longer than this are malformed.
	// Default 256.
	MaxAttributeLength int `mapstructure:"max_attribute_length"`
	// RecentRuns: ended runs per worker the snapshot lists (the newest of
	// those remembered for drift.tombstone_ttl). Default 10.
	RecentRuns int `mapstructure:"recent_runs"`
}
