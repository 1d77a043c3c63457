package workerhealthprocessor // import "github.com/workerwatch/workerwatch/processor/workerhealthprocessor"

import (
	"cmp"
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

var _ component.Config = (*Config)(nil)

// MinEmitInterval is the shortest emit_interval. Every evaluation judges
// every worker, builds the derived metrics, publishes a snapshot to the
// health API and (checkpoint_every) writes a checkpoint: at
// limits.max_workers that is a few hundred milliseconds of CPU
// (BenchmarkTick, docs/processor.md), while the rules' inputs (scrapes,
// heartbeats) arrive every few seconds, so a shorter period costs CPU and
// gains nothing.
const MinEmitInterval = time.Second

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
