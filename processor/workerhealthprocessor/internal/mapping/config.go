package mapping

import (
	"slices"
	"time"

	"github.com/workerwatch/workerwatch/internal/contract"
)

// Config (the processor's mapping section) maps records to lifecycle events (docs/conventions.md holds the
// defaults; testdata/openfn.yaml an OpenFn example).
type Config struct {
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

// KillReasonPattern maps failure text to a kill reason.
type KillReasonPattern struct {
	// Pattern is an RE2 regular expression.
	Pattern string `mapstructure:"pattern"`
	// Reason is a kill reason (docs/health-rules.md#kills).
	Reason string `mapstructure:"reason"`
}

// MetricsConfig (the processor's metrics section) names the input metrics.
type MetricsConfig struct {
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

// Scheduler is one scheduler source with every setting resolved (the
// processor's scheduler section).
type Scheduler struct {
	Name     string
	View     string
	Keys     []string // worker id attributes, cicd.worker.id last
	Interval time.Duration
	Life     string // sign_of_life
}

// Values of scheduler.sign_of_life.
const (
	LifeClaims = "claims"
	LifeAny    = "any"
	LifeNone   = "none"
)

// WithTreeKey returns keys with contract.AttrWorkerID appended when absent:
// the receiver's tree always carries it, so it always joins.
func WithTreeKey(keys []string) []string {
	out := slices.Clone(keys)
	if !slices.Contains(out, contract.AttrWorkerID) {
		out = append(out, contract.AttrWorkerID)
	}
	return out
}

// Settings is what the mapper reads, resolved from the processor's config.
type Settings struct {
	Mapping *Config
	Metrics *MetricsConfig
	// Schedulers are the scheduler sources; IDKeys every distinct worker id
	// attribute, in the order a worker's sources record them as bits.
	Schedulers []Scheduler
	IDKeys     []string
	// MaxAttributeLength: ids and values longer are malformed.
	MaxAttributeLength int
	// ChildRoles: the roles whose exits count as child exits (nil = every
	// role but the main one).
	ChildRoles []string
}
