package contract

// Identity and run attributes (OpenTelemetry semantic conventions where they
// exist). A worker puts the identity on its resource; the scheduler names the
// worker on each record (docs/conventions.md).
const (
	// AttrWorkerID is the worker's stable id, shared by the worker, the
	// scheduler and the receiver's tree (OpenFn's WORKER_NAME). String.
	AttrWorkerID = "cicd.worker.id"
	// AttrWorkerName is a human name, where different from the id. String.
	AttrWorkerName = "cicd.worker.name"
	// AttrServiceName tells the scheduler's records from the workers'.
	AttrServiceName = "service.name"
	// AttrRunID is the run id both sides use. String.
	AttrRunID = "cicd.pipeline.run.id"
	// AttrRunAttempt is the number of the run's attempt a record is about
	// (1 = the first), where the sender numbers them (BullMQ's attempts and
	// stall re-runs, Celery's retries). Int. A run is (AttrRunID,
	// AttrRunAttempt); without it the processor numbers attempts in the
	// order it sees them (a start of a run already ended is a new attempt).
	AttrRunAttempt = "workerwatch.run.attempt"
	// AttrResult is how a run ended: one of the Result* values.
	AttrResult = "cicd.pipeline.result"
	// AttrErrorType is the error a run failed with (TimeoutError, OOMError...).
	AttrErrorType = "error.type"
	// AttrKillReason is why a run was killed: one of KillReasons.
	AttrKillReason = "workerwatch.kill.reason"
	// AttrCapacity is how many runs the worker may hold at once, on claimed
	// and heartbeat records. Int.
	AttrCapacity = "workerwatch.worker.capacity"
	// AttrEventName carries a lifecycle event's name when a log record's
	// EventName field is empty.
	AttrEventName = "event.name"
	// AttrSchedulerRuns is on an EventSchedulerSnapshot record: the ids of
	// every run the scheduler holds for the worker. String array.
	AttrSchedulerRuns = "workerwatch.scheduler.runs"
	// AttrReleaseReason is why the simulated scheduler rolled a claim back
	// (simulator only, docs/simulator.md).
	AttrReleaseReason = "workerwatch.release.reason"
)

// Attributes of the receiver's tree series.
const (
	// AttrRole is the role of the processes in a series: RoleMain, a
	// configured role, or the worker's default role (RoleChild).
	AttrRole = "workerwatch.process.role"
	// AttrCPUMode is the CPU mode of process.cpu.time: "user" or "system".
	AttrCPUMode = "cpu.mode"
	// AttrPID, AttrExecutableName and AttrCommandLine are on the opt-in
	// top-N per-process series only (never on aggregate series). AttrPID is
	// also on the worker's resource, with AttrProcessCreationTime: the root
	// process's incarnation (below).
	AttrPID            = "process.pid"
	AttrExecutableName = "process.executable.name"
	AttrCommandLine    = "process.command_line"
)

// Incarnation attributes: which process the worker's root is, on the worker's
// resource. The worker_process receiver states them on every resource of a
// worker whose root it found (AttrPID and AttrProcessCreationTime), and, on
// the resource of the scrape that found the root gone (MetricPresent 0),
// those of the root that ended with its exit (AttrProcessExitTime and, where
// known, AttrProcessExitCode or AttrProcessExitSignal). A pid alone is not a
// process (pids are reused); pid + creation time is. A worker's own telemetry
// may carry the same pair (an SDK's process detector) or
// AttrServiceInstanceID, which the processor then uses as the incarnation.
const (
	// TimeLayout is how the times the components state as strings are
	// written (AttrProcessCreationTime, AttrProcessExitTime, a process
	// incarnation's id, the reasons' times on a state-change record): RFC
	// 3339 in UTC to the millisecond.
	TimeLayout = "2006-01-02T15:04:05.000Z07:00"
	// AttrProcessCreationTime is when the root process started, ISO 8601
	// (RFC 3339, UTC, to the kernel's clock tick). String.
	AttrProcessCreationTime = "process.creation.time"
	// AttrProcessExitTime is when the root process exited, ISO 8601. String.
	AttrProcessExitTime = "process.exit.time"
	// AttrProcessExitCode is the root's exit code, when it exited normally
	// and the exit was seen in the kernel's process events. Int.
	AttrProcessExitCode = "process.exit.code"
	// AttrProcessExitSignal is the signal number that ended the root, when
	// it was killed by one and the exit was seen in the kernel's process
	// events (semconv has no such attribute). Int.
	AttrProcessExitSignal = "workerwatch.process.exit.signal"
	// AttrServiceInstanceID is the OpenTelemetry SDK's id of one running
	// instance of a service: a worker's telemetry-only incarnation.
	AttrServiceInstanceID = "service.instance.id"
)

// Process roles.
const (
	// RoleMain is the worker's root process (the engine). Reserved: no
	// configured role may take the name.
	RoleMain = "main"
	// RoleChild is the default role of descendants no configured role matches.
	RoleChild = "child"
)

// Attributes of the processor's output.
const (
	// AttrState is a health state: one of AllStates.
	AttrState = "workerwatch.worker.state"
	// AttrStateFrom and AttrStateTo are on state-change records.
	AttrStateFrom = "workerwatch.worker.state.from"
	AttrStateTo   = "workerwatch.worker.state.to"
	// AttrMayTakeWork is on state-change records: whether the new state may
	// be sent work (healthy, degraded). Bool.
	AttrMayTakeWork = "workerwatch.worker.may_take_work"
	// AttrReasons is on state-change records: an array of maps with the keys
	// code, message, value, threshold and since, and the reason's evidence
	// where it has it (Reason): role, samples, fired_at, latched, current,
	// recovery_samples, recovery_needed, recovery_ratio, incarnation, exit
	// (how), exit_code, exit_signal.
	AttrReasons = "workerwatch.worker.reasons"
	// AttrSource is whose view a figure is: SourceWorker or SourceScheduler.
	AttrSource = "workerwatch.source"
	// AttrDriftKind is one of the Drift* values.
	AttrDriftKind = "workerwatch.drift.kind"
	// AttrStage is a stage span's name (compile, execute).
	AttrStage = "workerwatch.run.stage"
)

// Values of AttrSource.
const (
	SourceWorker    = "worker"
	SourceScheduler = "scheduler"
)

// Values of AttrDriftKind.
const (
	// DriftMissing: runs the scheduler holds for a worker that the worker
	// does not hold (lost runs).
	DriftMissing = "missing"
	// DriftOrphaned: runs the worker holds that the scheduler does not list
	// (duplicate-execution risk).
	DriftOrphaned = "orphaned"
	// DriftOverCapacity: runs held beyond the worker's capacity.
	DriftOverCapacity = "over_capacity"
)

// Kill reasons (AttrKillReason): why a process of a worker died. KillOther
// is what any other value is counted as, so a misbehaving sender cannot grow
// the kills metric's cardinality. Whether a reason says the run or the worker
// is at fault is the health rules' business (docs/health-rules.md, "Kills").
const (
	// KillTimeout: the run outlived its own time limit and was killed.
	KillTimeout = "timeout"
	// KillMemoryLimit: the run outgrew its own memory limit (a heap limit,
	// OpenFn's OOMError) and was killed.
	KillMemoryLimit = "memory_limit"
	// KillOOM: the kernel's or the cgroup's OOM killer killed a process of
	// the worker (MetricCgroupOOMKills, or a worker's record saying so).
	KillOOM = "oom"
	// KillCanceled: the run was canceled by a person or the scheduler.
	KillCanceled = "canceled"
	// KillShutdown: the worker stopped and killed its runs on the way out.
	KillShutdown = "shutdown"
	// KillCrash: a run's process died on its own, not killed by the worker
	// (OpenFn's reason crash, error ExitError).
	KillCrash = "crash"
	// KillWorkerExit: the worker's main process exited (a crash or a
	// restart), from the tree's MetricExited of the main role.
	KillWorkerExit = "worker_exit"
	// KillChildExit: a child process of the worker exited with no run ending
	// to blame it on, from the tree's MetricExited of the other roles.
	KillChildExit = "child_exit"
	KillOther     = "other"
)

// KillReasons lists every kill reason, KillOther last.
var KillReasons = [...]string{
	KillTimeout, KillMemoryLimit, KillOOM, KillCanceled, KillShutdown,
	KillCrash, KillWorkerExit, KillChildExit, KillOther,
}

// Scheduler views: how a scheduler states which runs it holds for a worker
// (docs/conventions.md, "What a scheduler sends"). The worker_health
// processor's scheduler.view takes these values, and the simulator's
// scheduler speaks each (--view).
const (
	// ViewEvents: the scheduler sends each run's claim and its end
	// (EventClaimed, EventFinished/EventKilled/EventReleased).
	ViewEvents = "events"
	// ViewClaimsOnly: the scheduler sends claims (and rollbacks, if any) but
	// no run end: the worker's own end of a run closes the scheduler's
	// claim (OpenFn's Lightning).
	ViewClaimsOnly = "claims_only"
	// ViewSnapshots: the scheduler periodically states every run it holds,
	// per worker: an EventSchedulerSnapshot record listing them
	// (AttrSchedulerRuns), or the MetricSchedulerHeld count. Drift is judged
	// against the latest one.
	ViewSnapshots = "snapshots"
)

// SchedulerViews lists the scheduler views.
var SchedulerViews = [...]string{ViewEvents, ViewClaimsOnly, ViewSnapshots}

// Run results (AttrResult): the semantic-convention values of
// cicd.pipeline.result.
const (
	ResultSuccess      = "success"
	ResultFailure      = "failure"
	ResultError        = "error"
	ResultTimeout      = "timeout"
	ResultCancellation = "cancellation"
	ResultSkip         = "skip"
)

// Lifecycle event names a worker and a scheduler send (log record
// EventName, or AttrEventName), docs/conventions.md.
const (
	// EventClaimed: the run is now held by the worker.
	EventClaimed = "workerwatch.run.claimed"
	// EventStarted: the run's execution began.
	EventStarted = "workerwatch.run.started"
	// EventFinished: the run ended; AttrResult says how.
	EventFinished = "workerwatch.run.finished"
	// EventKilled: the run's process was killed; AttrKillReason says why.
	EventKilled = "workerwatch.run.killed"
	// EventReleased: the claim was given back without finishing.
	EventReleased = "workerwatch.run.released"
	// EventHeartbeat: the worker is alive.
	EventHeartbeat = "workerwatch.worker.heartbeat"
	// EventSchedulerSnapshot: the scheduler states every run it holds for
	// one worker (AttrWorkerID), listed in AttrSchedulerRuns; an empty list
	// says it holds none (ViewSnapshots).
	EventSchedulerSnapshot = "workerwatch.scheduler.snapshot"
	// EventRunStalled: the scheduler found the run's worker stopped
	// renewing its claim (BullMQ's stalled checker: the job's lock lapsed
	// and the job went back to wait), on a scheduler record naming the
	// worker that held it (AttrWorkerID) and the run (AttrRunID). The
	// bullmq receiver sends it; the worker_health processor does not read
	// it yet (a worker alive while its run stalls has a hung main loop:
	// receiver/bullmqreceiver/README.md, "Hung workers").
	EventRunStalled = "workerwatch.run.stalled"
	// EventStateChange is the processor's record of one state transition.
	EventStateChange = "workerwatch.worker.state_change"
)

// Spans.
const (
	// SpanRun is a whole run, from start to finish.
	SpanRun = "run"
	// SpanCompile and SpanExecute are stages of a run.
	SpanCompile = "compile"
	SpanExecute = "execute"
)

// Metrics the worker_process receiver emits, per worker (resource
// AttrWorkerID) and role (AttrRole). The receiver's metadata.yaml declares
// them; a receiver test checks that every metric it emits is named here.
const (
	// MetricMemory is the resident set size summed over the role's live
	// processes. Bytes, gauge. Summed over roles it is the tree's memory.
	MetricMemory = "process.memory.usage"
	// MetricCPUTime is CPU seconds of the role, monotonic per tree even when
	// children exit, by AttrCPUMode. Seconds, cumulative sum.
	MetricCPUTime = "process.cpu.time"
	// MetricCPUUtilization is defined in cpu.go. Ratio, gauge.
	MetricCPUUtilization = "process.cpu.utilization"
	// MetricCPULimit is the CPUs the worker may use (cpu.go). {cpu}, gauge.
	MetricCPULimit = "workerwatch.worker.cpu.limit"
	// MetricThreads is the role's thread count. {thread}, gauge.
	MetricThreads = "process.thread.count"
	// MetricFDs is the role's open file descriptors. {file_descriptor}, gauge.
	MetricFDs = "process.unix.file_descriptor.count"
	// MetricProcesses is the role's live processes. {process}, gauge.
	MetricProcesses = "workerwatch.process.count"
	// MetricStarted and MetricExited count processes that joined and left the
	// role since the receiver started. {process}, cumulative sums.
	MetricStarted = "workerwatch.process.started"
	MetricExited  = "workerwatch.process.exited"
	// MetricPresent is 1 while the worker's root process exists, 0 when the
	// selector matches no process. Gauge.
	MetricPresent = "workerwatch.worker.present"
	// MetricCgroupMemoryCurrent and MetricCgroupMemoryMax are the worker's
	// cgroup v2 memory use and limit. Bytes, gauges.
	MetricCgroupMemoryCurrent = "workerwatch.cgroup.memory.current"
	MetricCgroupMemoryMax     = "workerwatch.cgroup.memory.max"
	// MetricCgroupOOMKills counts the kernel's OOM kills in the worker's
	// cgroup (memory.events oom_kill). {kill}, cumulative sum.
	MetricCgroupOOMKills = "workerwatch.cgroup.memory.oom_kills"
	// MetricPSS is the proportional set size (opt-in, size-gated). Bytes.
	MetricPSS = "workerwatch.process.memory.pss"
	// MetricTopMemory is the opt-in top-N per-process RSS. Bytes.
	MetricTopMemory = "workerwatch.process.top.memory.usage"
)

// ReceiverMetrics lists every metric the worker_process receiver can emit:
// its metadata.yaml declares exactly these (a receiver test checks both
// ways, and that a scrape with every metric enabled emits nothing else).
var ReceiverMetrics = [...]string{
	MetricMemory, MetricCPUTime, MetricCPUUtilization, MetricCPULimit, MetricThreads, MetricFDs,
	MetricProcesses, MetricStarted, MetricExited, MetricPresent,
	MetricCgroupMemoryCurrent, MetricCgroupMemoryMax, MetricCgroupOOMKills,
	MetricPSS, MetricTopMemory,
}

// Metrics a worker and a scheduler send (docs/conventions.md).
const (
	// MetricCapacity: runs the worker may hold at once. {run}, gauge (worker).
	MetricCapacity = "workerwatch.worker.capacity"
	// MetricRunsActive: runs the worker holds now. {run}, gauge (worker).
	MetricRunsActive = "workerwatch.worker.runs.active"
	// MetricSchedulerPending: runs waiting for a worker. {run}, gauge
	// (scheduler).
	MetricSchedulerPending = "workerwatch.scheduler.runs.pending"
	// MetricSchedulerHeld: runs the scheduler believes a worker holds, per
	// AttrWorkerID. {run}, gauge (scheduler).
	MetricSchedulerHeld = "workerwatch.scheduler.runs.held"
)

// Metrics the worker_health processor emits every emit_interval.
const (
	MetricState            = "workerwatch.worker.state"
	MetricStateTransitions = "workerwatch.worker.state.transitions"
	MetricRunsHeld         = "workerwatch.worker.runs.held"
	MetricDrift            = "workerwatch.worker.drift"
	MetricClaims           = "workerwatch.worker.claims"
	MetricKills            = "workerwatch.worker.kills"
	MetricRunDuration      = "workerwatch.run.duration"
	MetricClaimToStart     = "workerwatch.run.claim_to_start"
	MetricStageDuration    = "workerwatch.run.stage.duration"
	MetricFleetWorkers     = "workerwatch.fleet.workers"
	MetricFleetIdle        = "workerwatch.fleet.capacity.idle"
	MetricFleetPending     = "workerwatch.fleet.runs.pending"
	MetricFleetIdlePending = "workerwatch.fleet.idle_while_pending"
)

// Unit strings shared by senders and readers.
const (
	UnitRuns = "{run}"
)
