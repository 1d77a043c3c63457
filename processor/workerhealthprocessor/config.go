package workerhealthprocessor // import "github.com/workerwatch/workerwatch/processor/workerhealthprocessor"

import (
	"cmp"
	"errors"
	"fmt"
	"regexp"
	"slices"
	"time"

	"go.opentelemetry.io/collector/component"

	"github.com/workerwatch/workerwatch/internal/contract"
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
	// Identity reports workers whose sources never meet.
	Identity IdentityConfig `mapstructure:"identity"`

	Memory     MemoryRule   `mapstructure:"memory"`
	Kills      KillsRule    `mapstructure:"kills"`
	CPU        CPURule      `mapstructure:"cpu"`
	Stalled    StalledRule  `mapstructure:"stalled"`
	Lost       LostRule     `mapstructure:"lost"`
	Drift      DriftRule    `mapstructure:"drift"`
	Fleet      FleetRule    `mapstructure:"fleet"`
	Hysteresis Hysteresis   `mapstructure:"hysteresis"`
	Limits     LimitsConfig `mapstructure:"limits"`

	// HistogramBuckets are the explicit bounds, in seconds, of the run duration,
	// claim-to-start and stage duration histograms.
	HistogramBuckets []float64 `mapstructure:"histogram_buckets"`

	// prevent unkeyed literal initialization
	_ struct{}
}

// SchedulerConfig says which records are a scheduler's view and how each
// scheduler states what it holds (docs/health-rules.md, "Scheduler views").
type SchedulerConfig struct {
	// ServiceNames: records whose resource service.name is one of these are a
	// scheduler's view, with the view, id attributes and snapshot interval
	// below; all other records are the workers' own.
	// Default [workersim-scheduler, scheduler].
	ServiceNames []string `mapstructure:"service_names"`
	// View is how those schedulers state which runs they hold: "events"
	// (claims and ends), "claims_only" (claims, no ends: the worker's own
	// end closes the claim; OpenFn's Lightning) or "snapshots" (a periodic
	// statement of every run held per worker). Default "events".
	View string `mapstructure:"view"`
	// WorkerIDAttributes name the worker on a scheduler's records, tried in
	// order (record attribute, then resource attribute). Default: none, which
	// means mapping.worker_id_attributes.
	WorkerIDAttributes []string `mapstructure:"worker_id_attributes"`
	// SnapshotInterval is how often a "snapshots" scheduler states what it
	// holds. A worker not restated for three intervals loses the runs its
	// last snapshot listed (counted as healed). Default 30s.
	SnapshotInterval time.Duration `mapstructure:"snapshot_interval"`
	// SignOfLife: which of these schedulers' records about a worker count as
	// a sign of its life for the lost rule: "claims" (a claims_only
	// scheduler's claims: it is pulled, a claim exists because the worker
	// just asked for work), "any" (every record or snapshot naming the
	// worker: a queue whose snapshots state only workers with an open
	// connection) or "none". Default "claims".
	SignOfLife string `mapstructure:"sign_of_life"`
	// Sources are further schedulers, each with its own settings; a field
	// left out takes the value above.
	Sources []SchedulerSource `mapstructure:"sources"`
}

// SchedulerSource is one scheduler with its own view.
type SchedulerSource struct {
	// ServiceName is the resource service.name of its records. Required.
	ServiceName string `mapstructure:"service_name"`
	// View: events, claims_only or snapshots. Default: scheduler.view.
	View string `mapstructure:"view"`
	// WorkerIDAttributes. Default: scheduler.worker_id_attributes.
	WorkerIDAttributes []string `mapstructure:"worker_id_attributes"`
	// SnapshotInterval. Default: scheduler.snapshot_interval.
	SnapshotInterval time.Duration `mapstructure:"snapshot_interval"`
	// SignOfLife: claims, any or none. Default: scheduler.sign_of_life.
	SignOfLife string `mapstructure:"sign_of_life"`
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
	// Snapshot: a scheduler's statement of every run it holds for one
	// worker (scheduler.view "snapshots"), the runs listed in
	// mapping.snapshot_runs_attribute.
	Snapshot []string `mapstructure:"snapshot"`
}

// MappingConfig maps records to lifecycle events (docs/conventions.md holds the
// defaults; testdata/openfn.yaml an OpenFn example).
type MappingConfig struct {
	// EventNameAttribute is read when a log record's EventName field is empty.
	// Default "event.name".
	EventNameAttribute string `mapstructure:"event_name_attribute"`
	// WorkerIDAttributes name the worker, tried in order: on a worker's
	// resource (then on the record), on a scheduler's record (then its
	// resource). cicd.worker.id is always tried last, so the worker_process
	// receiver's tree, which carries it, joins the worker whatever this says.
	// Default [cicd.worker.id].
	WorkerIDAttributes []string `mapstructure:"worker_id_attributes"`
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
	// SnapshotRunsAttribute: on a snapshot record, the ids of the runs the
	// scheduler holds (a string array; a string is read as one id).
	// Default "workerwatch.scheduler.runs".
	SnapshotRunsAttribute string `mapstructure:"snapshot_runs_attribute"`

	// Events per kind. Defaults: workerwatch.run.claimed, .started, .finished,
	// .killed, .released, workerwatch.worker.heartbeat,
	// workerwatch.scheduler.snapshot.
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

	// FailureReasonAttribute: the failure text on finished/killed records,
	// matched against KillReasonPatterns. Default "" (none).
	FailureReasonAttribute string `mapstructure:"failure_reason_attribute"`
	// KillReasonPatterns: RE2 patterns over the failure text of a
	// finished/killed record without a kill reason attribute; the first that
	// matches makes the record a kill with its reason (BullMQ's only kill
	// evidence is "Unexpected exit code: null signal: SIGABRT"). Default none.
	KillReasonPatterns []KillReasonPattern `mapstructure:"kill_reason_patterns"`

	// RunSpanName: a span with this name and a run id is a whole run (started
	// at its start, finished at its end). Default "run". Empty disables it.
	RunSpanName string `mapstructure:"run_span_name"`
	// RunSpanNamePrefixes: spans whose name starts with one of these are
	// whole runs too (BullMQ's "process <queue>"). Default none.
	RunSpanNamePrefixes []string `mapstructure:"run_span_name_prefixes"`
	// StageSpanNames: spans with these names are stages of a run; their
	// durations are recorded per stage. Default [compile, execute].
	StageSpanNames []string `mapstructure:"stage_span_names"`
}

// KillReasonPattern maps failure text to a kill reason.
type KillReasonPattern struct {
	// Pattern is an RE2 regular expression.
	Pattern string `mapstructure:"pattern"`
	// Reason is a kill reason (docs/health-rules.md#kills).
	Reason string `mapstructure:"reason"`
}

// MetricsInputConfig names the input metrics.
type MetricsInputConfig struct {
	// Memory: per role, summed over roles = the tree. Default "process.memory.usage".
	Memory string `mapstructure:"memory"`
	// Present: 1 while the worker's root process exists. Its presence also
	// marks a resource as the worker's process tree (docs/health-rules.md,
	// "Identity"). Default "workerwatch.worker.present".
	Present string `mapstructure:"present"`
	// CPU: per role, a fraction of the worker's CPU limit
	// (internal/contract/cpu.go). Default "process.cpu.utilization".
	CPU string `mapstructure:"cpu"`
	// CPULimit: the CPUs the worker may use, turning CPU into cores.
	// Default "workerwatch.worker.cpu.limit".
	CPULimit string `mapstructure:"cpu_limit"`
	// CgroupMemoryMax: the worker's cgroup limit. Default "workerwatch.cgroup.memory.max".
	CgroupMemoryMax string `mapstructure:"cgroup_memory_max"`
	// OOMKills: the kernel's OOM kills in the worker's cgroup (cumulative).
	// Default "workerwatch.cgroup.memory.oom_kills".
	OOMKills string `mapstructure:"oom_kills"`
	// Exited: processes that left each role (cumulative): exits of the main
	// role are the worker's own, exits of the others with no run ending to
	// blame are unexplained child deaths. Default "workerwatch.process.exited".
	Exited string `mapstructure:"exited"`
	// Capacity sent by the worker. Default "workerwatch.worker.capacity".
	Capacity string `mapstructure:"capacity"`
	// Pending sent by the scheduler. Default "workerwatch.scheduler.runs.pending".
	Pending string `mapstructure:"pending"`
	// PendingAttribute and PendingValues: when set, only the pending
	// metric's points whose attribute has one of the values are summed
	// (BullMQ's bullmq.queue.jobs by bullmq.queue.jobs.state: waiting,
	// prioritized). Default none: every point.
	PendingAttribute string   `mapstructure:"pending_attribute"`
	PendingValues    []string `mapstructure:"pending_values"`
	// SchedulerHeld: a "snapshots" scheduler's count of the runs it holds,
	// per worker (cicd.worker.id, or the scheduler's id attributes, on each
	// point). Default "workerwatch.scheduler.runs.held".
	SchedulerHeld string `mapstructure:"scheduler_held"`
	// RunsActive: how many runs the worker itself says it holds. Default
	// "workerwatch.worker.runs.active". When the worker's own count stays
	// below the runs it is tracked as holding for longer than drift.grace,
	// the oldest are let go: their end events were lost (the worker crashed,
	// or the collector restarted while they ended), and a count the worker
	// reports is the truth about what it holds. Empty turns this off.
	RunsActive string `mapstructure:"runs_active"`
	// RoleAttribute and MainRole select the main process for the CPU rule,
	// and the roles of memory.roles. Defaults "workerwatch.process.role" and
	// "main".
	RoleAttribute string `mapstructure:"role_attribute"`
	MainRole      string `mapstructure:"main_role"`
}

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
	// worker is refused and counted (admission.go). Default 10000.
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

var _ component.Config = (*Config)(nil)

// MinEmitInterval is the shortest emit_interval. Every evaluation judges
// every worker, builds the derived metrics, publishes a snapshot to the
// health API and (checkpoint_every) writes a checkpoint: at
// limits.max_workers that is a few hundred milliseconds of CPU
// (BenchmarkTick, docs/processor.md), while the rules' inputs (scrapes,
// heartbeats) arrive every few seconds, so a shorter period costs CPU and
// gains nothing.
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
	if len(c.Mapping.WorkerIDAttributes) == 0 {
		add("mapping.worker_id_attributes", "must name at least one attribute")
	}
	for _, a := range c.Mapping.WorkerIDAttributes {
		if a == "" {
			add("mapping.worker_id_attributes", "must not contain an empty name")
		}
	}
	if keys := c.idKeys(); len(keys) > maxIDKeys {
		add("mapping.worker_id_attributes", "%d distinct worker id attributes with the schedulers' (%v); at most %d", len(keys), keys, maxIDKeys)
	}
	c.validateScheduler(add)
	for i, kp := range c.Mapping.KillReasonPatterns {
		if _, err := regexp.Compile(kp.Pattern); err != nil || kp.Pattern == "" {
			add(fmt.Sprintf("mapping.kill_reason_patterns[%d].pattern", i), "not a regular expression: %q", kp.Pattern)
		}
		if !validKillReason(kp.Reason) {
			add(fmt.Sprintf("mapping.kill_reason_patterns[%d].reason", i), "unknown kill reason %q (one of %v)", kp.Reason, killReasonNames)
		}
	}
	if len(c.Mapping.KillReasonPatterns) > 0 && c.Mapping.FailureReasonAttribute == "" {
		add("mapping.failure_reason_attribute", "must be set while mapping.kill_reason_patterns are")
	}
	for _, p := range c.Mapping.RunSpanNamePrefixes {
		if p == "" {
			add("mapping.run_span_name_prefixes", "must not contain an empty prefix (every span would be a run)")
		}
	}
	if (c.Metrics.PendingAttribute == "") != (len(c.Metrics.PendingValues) == 0) {
		add("metrics.pending_values", "metrics.pending_attribute and metrics.pending_values go together")
	}
	if len(c.Mapping.Events.Snapshot) > 0 && c.Mapping.SnapshotRunsAttribute == "" {
		add("mapping.snapshot_runs_attribute", "must not be empty while mapping.events.snapshot names events")
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
	for r, e := range c.Kills.Effects {
		if !slices.Contains(killReasonNames[:], r) {
			add("kills.effects", "unknown kill reason %q (one of %v)", r, killReasonNames)
		}
		if _, ok := effectIndex(e); !ok {
			add("kills.effects", "%q: unknown effect %q (one of none, degraded, unhealthy)", r, e)
		}
	}
	for r, rule := range c.Memory.Roles {
		if r == "" {
			add("memory.roles", "a role name must not be empty")
		}
		if rule.SoftLimitBytes <= 0 {
			add("memory.roles", "%q: soft_limit_bytes must be positive, got %d", r, rule.SoftLimitBytes)
		}
	}
	if len(c.Memory.Roles) > maxRoleLimits {
		add("memory.roles", "at most %d roles, got %d", maxRoleLimits, len(c.Memory.Roles))
	}
	if c.Kills.ExitWindow <= 0 {
		add("kills.exit_window", "must be positive, got %v", c.Kills.ExitWindow)
	}
	if c.Identity.JoinWithin <= 0 {
		add("identity.join_within", "must be positive, got %v", c.Identity.JoinWithin)
	}
	for et, r := range c.Mapping.ErrorTypeKillReasons {
		if !validKillReason(r) {
			add("mapping.error_type_kill_reasons", "%q maps to unknown kill reason %q (one of %v)", et, r, killReasonNames)
		}
	}
	if c.CPU.Enabled {
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
	if c.Stalled.After < 0 {
		add("stalled.after", "must not be negative, got %v", c.Stalled.After)
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
	if c.Drift.HealAfter <= c.Drift.Grace {
		add("drift.heal_after", "must be longer than drift.grace (%v), got %v", c.Drift.Grace, c.Drift.HealAfter)
	}
	if c.Limits.RecentRuns < 0 {
		add("limits.recent_runs", "must not be negative, got %d", c.Limits.RecentRuns)
	}
	if c.Fleet.IdleIntervals < 1 {
		add("fleet.idle_intervals", "must be at least 1, got %d", c.Fleet.IdleIntervals)
	}
	if c.Hysteresis.RecoverEvaluations < 1 {
		add("hysteresis.recover_evaluations", "must be at least 1, got %d", c.Hysteresis.RecoverEvaluations)
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
	if c.Limits.MaxUnconfirmedWorkers < 0 {
		add("limits.max_unconfirmed_workers", "must not be negative, got %d", c.Limits.MaxUnconfirmedWorkers)
	}
	if c.Limits.MaxRuns < 1 {
		add("limits.max_runs", "must be at least 1, got %d", c.Limits.MaxRuns)
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

func validKillReason(r string) bool { return slices.Contains(killReasonNames[:], r) }

// maxIDKeys bounds the distinct worker id attributes (a worker remembers
// which it was named by in a bit mask); maxRoleLimits the roles with a
// memory limit (each is a memory episode per worker).
const (
	maxIDKeys     = 8
	maxRoleLimits = 8
)

// schedSource is one scheduler with every setting resolved.
type schedSource struct {
	name     string
	view     string
	keys     []string // worker id attributes, cicd.worker.id last
	interval time.Duration
	life     string // sign_of_life
}

// Values of scheduler.sign_of_life.
const (
	lifeClaims = "claims"
	lifeAny    = "any"
	lifeNone   = "none"
)

var signsOfLife = []string{lifeClaims, lifeAny, lifeNone}

// withTreeKey returns keys with contract.AttrWorkerID appended when absent:
// the receiver's tree always carries it, so it always joins.
func withTreeKey(keys []string) []string {
	out := slices.Clone(keys)
	if !slices.Contains(out, contract.AttrWorkerID) {
		out = append(out, contract.AttrWorkerID)
	}
	return out
}

// schedulers resolves scheduler.service_names and scheduler.sources.
func (c *Config) schedulers() []schedSource {
	sc := &c.Scheduler
	defKeys := sc.WorkerIDAttributes
	if len(defKeys) == 0 {
		defKeys = c.Mapping.WorkerIDAttributes
	}
	var out []schedSource
	for _, n := range sc.ServiceNames {
		out = append(out, schedSource{name: n, view: sc.View, keys: withTreeKey(defKeys), interval: sc.SnapshotInterval, life: sc.SignOfLife})
	}
	for _, s := range sc.Sources {
		r := schedSource{
			name: s.ServiceName, view: cmp.Or(s.View, sc.View), keys: defKeys,
			interval: cmp.Or(s.SnapshotInterval, sc.SnapshotInterval), life: cmp.Or(s.SignOfLife, sc.SignOfLife),
		}
		if len(s.WorkerIDAttributes) > 0 {
			r.keys = s.WorkerIDAttributes
		}
		r.keys = withTreeKey(r.keys)
		out = append(out, r)
	}
	return out
}

// idKeys is every distinct worker id attribute of the workers and the
// schedulers, in a fixed order (a worker's sources record them as bits).
func (c *Config) idKeys() []string {
	keys := withTreeKey(c.Mapping.WorkerIDAttributes)
	for _, s := range c.schedulers() {
		for _, k := range s.keys {
			if !slices.Contains(keys, k) {
				keys = append(keys, k)
			}
		}
	}
	return keys
}

func (c *Config) validateScheduler(add func(key, format string, a ...any)) {
	sc := &c.Scheduler
	validView := func(key, v string) {
		if !slices.Contains(contract.SchedulerViews[:], v) {
			add(key, "unknown view %q (one of %v)", v, contract.SchedulerViews)
		}
	}
	validView("scheduler.view", sc.View)
	validLife := func(key, v string) {
		if !slices.Contains(signsOfLife, v) {
			add(key, "unknown value %q (one of %v)", v, signsOfLife)
		}
	}
	validLife("scheduler.sign_of_life", sc.SignOfLife)
	if sc.SnapshotInterval <= 0 {
		add("scheduler.snapshot_interval", "must be positive, got %v", sc.SnapshotInterval)
	}
	seen := map[string]bool{}
	dup := func(key, n string) {
		if seen[n] {
			add(key, "service name %q is listed twice", n)
		}
		seen[n] = true
	}
	for _, n := range sc.ServiceNames {
		dup("scheduler.service_names", n)
	}
	for i, s := range sc.Sources {
		key := fmt.Sprintf("scheduler.sources[%d]", i)
		if s.ServiceName == "" {
			add(key+".service_name", "must not be empty")
		}
		dup(key+".service_name", s.ServiceName)
		if s.View != "" {
			validView(key+".view", s.View)
		}
		if s.SignOfLife != "" {
			validLife(key+".sign_of_life", s.SignOfLife)
		}
		if s.SnapshotInterval < 0 {
			add(key+".snapshot_interval", "must not be negative, got %v", s.SnapshotInterval)
		}
	}
	if len(seen) > 255 {
		add("scheduler", "at most 255 scheduler service names, got %d", len(seen))
	}
}
