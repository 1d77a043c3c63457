package celeryreceiver // import "github.com/workerwatch/workerwatch/receiver/celeryreceiver"

import (
	"strings"

	"github.com/workerwatch/workerwatch/internal/contract"
)

// runEnd is how a run ended, read from an end event (task-succeeded,
// task-failed, task-revoked) or from a result stored in the result backend:
// both paths emit it with end.
type runEnd struct {
	// result is the run's cicd.pipeline.result.
	result string
	// errorType is the exception's class name (WorkerLostError, ValueError).
	errorType string
	// killReason is set when the task's process was killed (crash, oom,
	// timeout) or the task terminated (canceled); the record is then a kill.
	killReason string
	// failed: the run failed; text (the traceback's last line, or the
	// exception text) goes on the record.
	failed bool
	text   string
	// runtime is task-succeeded's runtime, in seconds.
	runtime *float64
}

func succeeded(runtime *float64) runEnd {
	return runEnd{result: contract.ResultSuccess, runtime: runtime}
}

// revoked: a revoked task; terminated (revoke(terminate=True)) killed its
// process.
func revoked(terminated bool) runEnd {
	e := runEnd{result: contract.ResultCancellation}
	if terminated {
		e.killReason = contract.KillCanceled
	}
	return e
}

// classifyFailure reads a task-failed event's exception and traceback.
// Celery 5.2.6 sends the literal "ExceptionWithTraceback()" as the
// exception of a task whose pool child exited, was killed or hit the hard
// time limit; only the traceback's last line tells them apart:
//
//	billiard.exceptions.WorkerLostError: Worker exited prematurely: exitcode 1 Job: 2.
//	billiard.exceptions.WorkerLostError: Worker exited prematurely: signal 9 (SIGKILL) Job: 3.
//	billiard.exceptions.TimeLimitExceeded: TimeLimitExceeded(2,)
//
// A task that raised (SoftTimeLimitExceeded included) is a failure with
// its exception's class.
func classifyFailure(exception, traceback string) runEnd {
	last := lastLine(traceback)
	if last == "" {
		last = strings.TrimSpace(exception)
	}
	f := runEnd{result: contract.ResultFailure, failed: true, text: last}
	cls, msg, _ := strings.Cut(last, ":")
	if strings.ContainsAny(cls, " (") {
		// Not "module.Class: message": the exception's repr, Class(args).
		cls, _, _ = strings.Cut(last, "(")
		msg = ""
	}
	if i := strings.LastIndexByte(cls, '.'); i >= 0 {
		cls = cls[i+1:]
	}
	f.errorType = strings.TrimSpace(cls)
	msg = strings.TrimSpace(msg)
	switch f.errorType {
	case "WorkerLostError":
		// "Worker exited prematurely: signal 9 (SIGKILL)": the kernel's OOM
		// killer's way (or anyone's kill -9); "exitcode N": the child exited.
		if strings.Contains(msg, "signal 9 ") || strings.HasSuffix(msg, "signal 9") || strings.Contains(msg, "(SIGKILL)") {
			f.killReason = contract.KillOOM
		} else {
			f.killReason = contract.KillCrash
		}
	case "TimeLimitExceeded":
		f.killReason = contract.KillTimeout
		f.result = contract.ResultTimeout
	}
	return f
}

// lastLine is the last non-empty line of text.
func lastLine(text string) string {
	text = strings.TrimRight(text, " \n\r\t")
	if i := strings.LastIndexByte(text, '\n'); i >= 0 {
		text = text[i+1:]
	}
	return strings.TrimSpace(text)
}
