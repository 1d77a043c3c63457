package workerhealthprocessor // import "github.com/workerwatch/workerwatch/processor/workerhealthprocessor"

import (
	"errors"
	"fmt"
	"slices"
	"time"

	"go.opentelemetry.io/collector/component"
)

// Config of the worker_health processor. Every key is documented in
// docs/processor.md and every rule in docs/health-rules.md; the defaults are
// set only in createDefaultConfig.
type Config struct {
	// EmitInterval is how often workers are evaluated and the derived metrics,
	// transition logs and the snapshot for the health extension are emitted.
	// Default 10s, at least MinEmitInterval. Every time-based rule is
	// evaluated at this resolution.
	EmitInterval time.Duration `mapstructure:"emit_interval"`

	// HealthExtension is the id of the worker_health extension (the health
	// API) the state is published to after every evaluation. Default: none
	// (nothing is published; the derived metrics and logs still flow). An id
	// that is not configured, or is not a worker_health extension, fails
	// Start with an error naming this key.
	HealthExtension *component.ID `mapstructure:"health_extension"`

	// StorageID is the optional id of a storage extension (e.g. file_storage)
	// used to checkpoint state so a restart neither forgets drift nor reports a
	// false "healthy". Default: none (state lives in memory only).
	StorageID *component.ID `mapstructure:"storage_id"`
	// CheckpointEvery writes a checkpoint every N evaluations (and always on
	// shutdown). Default 1.
	CheckpointEvery int `mapstructure:"checkpoint_every"`

	// Scheduler says which records are the scheduler's view.
	Scheduler SchedulerConfig `mapstructure:"scheduler"`
	// Mapping turns log records and spans into run lifecycle events.
	Mapping MappingConfig `mapstructure:"mapping"`
	// Metrics names the input metrics read from the worker_process receiver,
	// the workers and the scheduler.
	Metrics MetricsInputConfig `mapstructure:"metrics"`
	// Capacity is the runs each worker may hold when the worker does not say.
	Capacity CapacityConfig `mapstructure:"capacity"`

	Memory MemoryRule   `mapstructure:"memory"`
	Kills  KillsRule    `mapstructure:"kills"`
	CPU    CPURule      `mapstructure:"cpu"`
	Stall  StallRule    `mapstructure:"stalled"`
	Lost   LostRule     `mapstructure:"lost"`
	Drift  DriftRule    `mapstructure:"drift"`
	Fleet  FleetRule    `mapstructure:"fleet"`
	Hyst   Hysteresis   `mapstructure:"hysteresis"`
	Limits LimitsConfig `mapstructure:"limits"`

	// HistogramBuckets are the explicit bounds, in seconds, of the run duration,
	// claim-to-start and stage duration histograms.
	HistogramBuckets []float64 `mapstructure:"histogram_buckets"`

	// prevent unkeyed literal initialization
	_ struct{}
}

// SchedulerConfig identifies the scheduler's records.
type SchedulerConfig struct {
	// ServiceNames: records whose resource service.name is one of these are the
	// scheduler's view; all others are the worker's own view.
	// Default [workersim-scheduler, scheduler].
	ServiceNames []string `mapstructure:"service_names"`
}

// EventNames lists, per lifecycle kind, the event names (log record
// event.name) that mean it. Several names per kind are allowed so that one
// processor understands several kinds of worker.
type EventNames struct {
	Claimed   []string `mapstructure:"claimed"`
	Started   []string `mapstructure:"started"`
	Finished  []string `mapstructure:"finished"`
	Killed    []string `mapstructure:"killed"`
	Released  []string `mapstructure:"released"`
	Heartbeat []string `mapstructure:"heartbeat"`
}

// MappingConfig maps records to lifecycle events (docs/conventions.md holds the
// defaults; testdata/openfn.yaml an OpenFn example).
type MappingConfig struct {
	// EventNameAttribute is read when a log record's EventName field is empty.
	// Default "event.name".
	EventNameAttribute string `mapstructure:"event_name_attribute"`
	// WorkerIDAttribute: resource attribute on a worker's records, record
	// attribute on the scheduler's (either is tried). Default "cicd.worker.id".
	WorkerIDAttribute string `mapstructure:"worker_id_attribute"`
	// WorkerNameAttribute: optional human name. Default "cicd.worker.name".
	WorkerNameAttribute string `mapstructure:"worker_name_attribute"`
	// RunIDAttribute. Default "cicd.pipeline.run.id".
	RunIDAttribute string `mapstructure:"run_id_attribute"`
	// ResultAttribute. Default "cicd.pipeline.result".
	ResultAttribute string `mapstructure:"result_attribute"`
	// ErrorTypeAttribute. Default "error.type".
	ErrorTypeAttribute string `mapstructure:"error_type_attribute"`
	// KillReasonAttribute. Default "workerwatch.kill.reason".
	KillReasonAttribute string `mapstructure:"kill_reason_attribute"`
	// CapacityAttribute: the worker's capacity on claimed/heartbeat records.
	// Default "workerwatch.worker.capacity".
	CapacityAttribute string `mapstructure:"capacity_attribute"`

	// Events per kind. Defaults: workerwatch.run.claimed, .started, .finished,
	// .killed, .released, workerwatch.worker.heartbeat.
	Events EventNames `mapstructure:"events"`

	// ResultValues maps raw result values to semconv cicd.pipeline.result
	// values (unmapped values pass as they are). Default: identity.
	ResultValues map[string]string `mapstructure:"result_values"`
	// KillResults: raw result values that mean the run was killed, so a
	// "finished" event with one of them counts as "killed" (OpenFn: [kill]).
	KillResults []string `mapstructure:"kill_results"`
	// ErrorTypeKillReasons maps error.type to a kill reason when the record has
	// no kill reason attribute. Default {TimeoutError: timeout, OOMError:
	// memory_limit}.
	ErrorTypeKillReasons map[string]string `mapstructure:"error_type_kill_reasons"`

	// RunSpanName: a span with this name and a run id is a whole run (started
	// at its start, finished at its end). Default "run". Empty disables spans.
	RunSpanName string `mapstructure:"run_span_name"`
	// StageSpanNames: spans with these names are stages of a run; their
	// durations are recorded per stage. Default [compile, execute].
	StageSpanNames []string `mapstructure:"stage_span_names"`
}

// MetricsInputConfig names the input metrics.
type MetricsInputConfig struct {
	// Memory: per role, summed over roles = the tree. Default "process.memory.usage".
	Memory string `mapstructure:"memory"`
	// Present: 1 while the worker's root process exists. Default "workerwatch.worker.present".
	Present string `mapstructure:"present"`
	// CPU: fraction of ALL CPUs, per role. Default "process.cpu.utilization".
	CPU string `mapstructure:"cpu"`
	// CgroupMemoryMax: the worker's cgroup limit. Default "workerwatch.cgroup.memory.max".
	CgroupMemoryMax string `mapstructure:"cgroup_memory_max"`
	// Capacity sent by the worker. Default "workerwatch.worker.capacity".
	Capacity string `mapstructure:"capacity"`
	// Pending sent by the scheduler. Default "workerwatch.scheduler.runs.pending".
	Pending string `mapstructure:"pending"`
	// RunsActive: how many runs the worker itself says it holds. Default
	// "workerwatch.worker.runs.active". When the worker's own count stays
	// below the runs it is tracked as holding for longer than drift.grace,
	// the oldest are let go: their end events were lost (the worker crashed,
	// or the collector restarted while they ended), and a count the worker
	// reports is the truth about what it holds. Empty turns this off.
	RunsActive string `mapstructure:"runs_active"`
	// RoleAttribute and MainRole select the main process for the CPU rule.
	// Defaults "workerwatch.process.role" and "main".
	RoleAttribute string `mapstructure:"role_attribute"`
	MainRole      string `mapstructure:"main_role"`
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
}

// KillsRule: repeated kills.
type KillsRule struct {
	// Count kills within Window make the worker unhealthy (0 = off). Defaults 3, 10m.
	Count  int           `mapstructure:"count"`
	Window time.Duration `mapstructure:"window"`
	// Reasons that count. Default [timeout, memory_limit, oom].
	Reasons []string `mapstructure:"reasons"`
}

// CPURule: the main process saturating one core.
type CPURule struct {
	// Enabled. Default true.
	Enabled bool `mapstructure:"enabled"`
	// NumCPUs converts process.cpu.utilization (a fraction of all CPUs) to
	// cores. Default runtime.NumCPU() of the collector's host.
	NumCPUs int `mapstructure:"num_cpus"`
	// SaturationCores: at or above this many cores the main process is
	// saturated. Default 0.9.
	SaturationCores float64 `mapstructure:"saturation_cores"`
	// Samples consecutive saturated samples make the worker degraded. Default 3.
	Samples int `mapstructure:"samples"`
	// RecoveryCores and RecoverySamples end it. Defaults 0.7, 3.
	RecoveryCores   float64 `mapstructure:"recovery_cores"`
	RecoverySamples int     `mapstructure:"recovery_samples"`
}

// StallRule: alive, work available, no claim.
type StallRule struct {
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
}

// DriftRule: scheduler vs worker.
type DriftRule struct {
	// Grace before a disagreement counts (propagation delay). Default 30s
	// (OpenFn's claim rollback).
	Grace time.Duration `mapstructure:"grace"`
	// TombstoneTTL: how long an ended run is remembered so late, duplicated or
	// reordered events about it do not create false drift. Default 10m.
	TombstoneTTL time.Duration `mapstructure:"tombstone_ttl"`
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
	// MaxWorkers tracked (new workers beyond it are counted and ignored).
	// Default 10000.
	MaxWorkers int `mapstructure:"max_workers"`
	// MaxRunsPerWorker tracked (ended runs are evicted first). Default 256.
	MaxRunsPerWorker int `mapstructure:"max_runs_per_worker"`
	// WorkerTTL: forget a worker after this long without any record about it.
	// Default 1h.
	WorkerTTL time.Duration `mapstructure:"worker_ttl"`
	// MaxAttributeLength: ids and values longer than this are malformed.
	// Default 256.
	MaxAttributeLength int `mapstructure:"max_attribute_length"`
}

var _ component.Config = (*Config)(nil)

// MinEmitInterval is the shortest emit_interval. Every evaluation judges
// every worker, builds the derived metrics, publishes a snapshot to the
// health API and (checkpoint_every) writes a checkpoint: at limits.max_workers
// that is milliseconds of CPU (docs/processor.md), while the rules' inputs
// (scrapes, heartbeats) arrive every few seconds, so a shorter period costs
// CPU and gains nothing.
const MinEmitInterval = time.Second

// Validate checks the configuration; every error names its YAML key.
func (c *Config) Validate() error {
	var errs []error
	add := func(key, format string, a ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", key, fmt.Sprintf(format, a...)))
	}
	if c.EmitInterval < MinEmitInterval {
		add("emit_interval", "must be at least %v, got %v", MinEmitInterval, c.EmitInterval)
	}
	if c.CheckpointEvery < 1 {
		add("checkpoint_every", "must be at least 1, got %d", c.CheckpointEvery)
	}
	if c.Mapping.WorkerIDAttribute == "" {
		add("mapping.worker_id_attribute", "must not be empty")
	}
	if c.Mapping.RunIDAttribute == "" {
		add("mapping.run_id_attribute", "must not be empty")
	}
	if c.Memory.SoftLimitBytes < 0 {
		add("memory.soft_limit_bytes", "must not be negative, got %d", c.Memory.SoftLimitBytes)
	}
	if c.Memory.SoftLimitRatio < 0 || c.Memory.SoftLimitRatio > 1 {
		add("memory.soft_limit_ratio", "must be within [0, 1], got %v", c.Memory.SoftLimitRatio)
	}
	if c.Memory.UnhealthySamples < 1 {
		add("memory.unhealthy_samples", "must be at least 1, got %d", c.Memory.UnhealthySamples)
	}
	if c.Memory.UnhealthyAfter < 0 {
		add("memory.unhealthy_after", "must not be negative, got %v", c.Memory.UnhealthyAfter)
	}
	if c.Memory.RecoveryRatio <= 0 || c.Memory.RecoveryRatio > 1 {
		add("memory.recovery_ratio", "must be within (0, 1], got %v", c.Memory.RecoveryRatio)
	}
	if c.Memory.RecoverySamples < 1 {
		add("memory.recovery_samples", "must be at least 1, got %d", c.Memory.RecoverySamples)
	}
	if c.Kills.Count < 0 {
		add("kills.count", "must not be negative, got %d", c.Kills.Count)
	}
	if c.Kills.Count > 0 && c.Kills.Window <= 0 {
		add("kills.window", "must be positive when kills.count is set, got %v", c.Kills.Window)
	}
	for _, r := range c.Kills.Reasons {
		if !validKillReason(r) {
			add("kills.reasons", "unknown kill reason %q (one of %v)", r, killReasons)
		}
	}
	for et, r := range c.Mapping.ErrorTypeKillReasons {
		if !validKillReason(r) {
			add("mapping.error_type_kill_reasons", "%q maps to unknown kill reason %q (one of %v)", et, r, killReasons)
		}
	}
	if c.CPU.Enabled {
		if c.CPU.NumCPUs < 1 {
			add("cpu.num_cpus", "must be at least 1, got %d", c.CPU.NumCPUs)
		}
		if c.CPU.SaturationCores <= 0 {
			add("cpu.saturation_cores", "must be positive, got %v", c.CPU.SaturationCores)
		}
		if c.CPU.RecoveryCores <= 0 || c.CPU.RecoveryCores > c.CPU.SaturationCores {
			add("cpu.recovery_cores", "must be positive and at most cpu.saturation_cores, got %v", c.CPU.RecoveryCores)
		}
		if c.CPU.Samples < 1 {
			add("cpu.samples", "must be at least 1, got %d", c.CPU.Samples)
		}
		if c.CPU.RecoverySamples < 1 {
			add("cpu.recovery_samples", "must be at least 1, got %d", c.CPU.RecoverySamples)
		}
	}
	if c.Stall.After < 0 {
		add("stalled.after", "must not be negative, got %v", c.Stall.After)
	}
	if c.Lost.After <= 0 {
		add("lost.after", "must be positive, got %v", c.Lost.After)
	}
	if c.Drift.Grace < 0 {
		add("drift.grace", "must not be negative, got %v", c.Drift.Grace)
	}
	if c.Drift.TombstoneTTL < c.Drift.Grace {
		add("drift.tombstone_ttl", "must be at least drift.grace (%v), got %v", c.Drift.Grace, c.Drift.TombstoneTTL)
	}
	if c.Fleet.IdleIntervals < 1 {
		add("fleet.idle_intervals", "must be at least 1, got %d", c.Fleet.IdleIntervals)
	}
	if c.Hyst.RecoverEvaluations < 1 {
		add("hysteresis.recover_evaluations", "must be at least 1, got %d", c.Hyst.RecoverEvaluations)
	}
	if c.Capacity.Default < 0 {
		add("capacity.default", "must not be negative, got %d", c.Capacity.Default)
	}
	for id, n := range c.Capacity.PerWorker {
		if n < 0 {
			add("capacity.per_worker", "%q must not be negative, got %d", id, n)
		}
	}
	if c.Limits.MaxWorkers < 1 {
		add("limits.max_workers", "must be at least 1, got %d", c.Limits.MaxWorkers)
	}
	if c.Limits.MaxRunsPerWorker < 1 {
		add("limits.max_runs_per_worker", "must be at least 1, got %d", c.Limits.MaxRunsPerWorker)
	}
	if c.Limits.WorkerTTL < c.Lost.After {
		add("limits.worker_ttl", "must be at least lost.after (%v), got %v", c.Lost.After, c.Limits.WorkerTTL)
	}
	if c.Limits.MaxAttributeLength < 1 {
		add("limits.max_attribute_length", "must be at least 1, got %d", c.Limits.MaxAttributeLength)
	}
	for i := 1; i < len(c.HistogramBuckets); i++ {
		if c.HistogramBuckets[i] <= c.HistogramBuckets[i-1] {
			add("histogram_buckets", "must be strictly increasing")
			break
		}
	}
	return errors.Join(errs...)
}

func validKillReason(r string) bool { return slices.Contains(killReasons, r) }
