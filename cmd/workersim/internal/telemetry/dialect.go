package telemetry

import (
	"fmt"

	"github.com/workerwatch/workerwatch/internal/contract"
)

// Dialect is the names a simulated worker and scheduler speak: workerwatch's
// own conventions (docs/conventions.md), or a real system's, so the health
// processor's mapping for that system is tried on the simulator with every
// fault (docs/simulator.md, "Dialects").
type Dialect struct {
	Name string
	// Service names of the workers and of the scheduler.
	WorkerService, SchedulerService string
	// Attribute keys: the worker's id (on the worker's resource and the
	// scheduler's records), the run id, how a run ended, its error type, the
	// capacity on claims and heartbeats, the kill reason ("" = not sent).
	IDKey, RunKey, ResultKey, ErrorKey, CapacityKey, KillReasonKey string
	// Event names. Heartbeat, StepStart and StepComplete "" = not sent.
	Claimed, Started, Finished, Killed, Released, Heartbeat string
	StepStart, StepComplete                                 string
	// SchedulerReleased is the scheduler's rollback of a claim.
	SchedulerReleased string
	// Results maps the simulator's outcomes (cicd.pipeline.result values)
	// to the dialect's result values; an outcome missing is sent as it is.
	Results map[string]string
	// KilledResult, when set, is the result of every killed run.
	KilledResult string
	// StageSpans are the names of a run's stage spans (compile, execute).
	StageSpans [2]string
}

// Conventions is workerwatch's own (docs/conventions.md).
var Conventions = Dialect{
	Name:          "conventions",
	WorkerService: "workersim-worker", SchedulerService: "workersim-scheduler",
	IDKey: contract.AttrWorkerID, RunKey: contract.AttrRunID, ResultKey: contract.AttrResult,
	ErrorKey: contract.AttrErrorType, CapacityKey: contract.AttrCapacity, KillReasonKey: contract.AttrKillReason,
	Claimed: contract.EventClaimed, Started: contract.EventStarted, Finished: contract.EventFinished,
	Killed: contract.EventKilled, Released: contract.EventReleased, Heartbeat: contract.EventHeartbeat,
	SchedulerReleased: contract.EventReleased,
	StageSpans:        [2]string{contract.SpanCompile, contract.SpanExecute},
}

// OpenFn is OpenFn's ws-worker and Lightning (openfn/kit): the worker names
// itself worker_name (WORKER_NAME), reports `claim` (the runs its claim
// got), `run:start`, `step:start`, `step:complete` and `run:complete` with
// `reason` (success, fail, crash, kill, cancel, exception) and `error_type`
// (TimeoutError, OOMError, ExitError); a kill is a run:complete with reason
// kill. It sends no heartbeat and no kill reason. Lightning's view is its
// `claim` of each run and `run:lost`, no run end.
var OpenFn = Dialect{
	Name:          "openfn",
	WorkerService: "openfn-worker", SchedulerService: "lightning",
	IDKey: "worker_name", RunKey: "run_id", ResultKey: "reason", ErrorKey: "error_type", CapacityKey: "capacity",
	Claimed: "claim", Started: "run:start", Finished: "run:complete", Killed: "run:complete", Released: "run:complete",
	StepStart: "step:start", StepComplete: "step:complete",
	SchedulerReleased: "run:lost",
	Results: map[string]string{
		contract.ResultSuccess: "success", contract.ResultFailure: "crash", contract.ResultError: "exception",
		contract.ResultCancellation: "cancel",
	},
	KilledResult: "kill",
	StageSpans:   [2]string{"", "step"},
}

// Dialects lists the dialects by name.
var Dialects = []Dialect{Conventions, OpenFn}

// ParseDialect finds a dialect by name.
func ParseDialect(name string) (Dialect, error) {
	for _, d := range Dialects {
		if d.Name == name {
			return d, nil
		}
	}
	return Dialect{}, fmt.Errorf("unknown dialect %q (known: conventions, openfn)", name)
}

// Result is the dialect's value for an outcome.
func (d Dialect) Result(outcome string, killed bool) string {
	if killed && d.KilledResult != "" {
		return d.KilledResult
	}
	if v, ok := d.Results[outcome]; ok {
		return v
	}
	return outcome
}
