package celeryreceiver // import "github.com/workerwatch/workerwatch/receiver/celeryreceiver"

import (
	"strings"

	"github.com/workerwatch/workerwatch/internal/contract"
)

// failure is how a task-failed event is read.
type failure struct {
	// errorType is the exception's class name (WorkerLostError, ValueError).
	errorType string
	// killReason is set when the task's process was killed (crash, oom,
	// timeout); empty for a task that raised.
	killReason string
	// result is the run's cicd.pipeline.result.
	result string
	// lastLine is the traceback's last line (or the exception text).
	lastLine string
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
func classifyFailure(exception, traceback string) failure {
	last := lastLine(traceback)
	if last == "" {
		last = strings.TrimSpace(exception)
	}
	f := failure{result: contract.ResultFailure, lastLine: last}
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
