package state // import "github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/state"

import (
	"math"
	"time"

	"github.com/workerwatch/workerwatch/internal/contract"
)

// Reason codes (docs/health-rules.md): the contract's.
const (
	CodeMemory        = contract.CodeMemory
	CodeMemoryAtStart = contract.CodeMemoryAtStart
	CodeKills         = contract.CodeKills
	CodeCPU           = contract.CodeCPU
	CodeNoClaim       = contract.CodeNoClaim
	CodeNoTelemetry   = contract.CodeNoTelemetry
	CodeMissing       = contract.CodeMissing
	CodeOrphaned      = contract.CodeOrphaned
	CodeOverCapacity  = contract.CodeOverCapacity
	CodeRecovering    = contract.CodeRecovering
	CodeNotReported   = contract.CodeNotReported
	CodeProcessExited = contract.CodeProcessExited
)

// Time is a timestamp in nanoseconds as a UTC time; 0 is the zero time.
func Time(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns).UTC()
}

// Clamp32 is n as an int32, clamped to its range: for counts kept per
// worker in 32 bits whose sources are bounded far below it.
func Clamp32(n int) int32 { return int32(max(min(n, math.MaxInt32), math.MinInt32)) }

// inc32 counts one more in a 32-bit count, which stops at math.MaxInt32
// (68 years of samples or evaluations at one a second).
func inc32(n *int32) {
	if *n < math.MaxInt32 {
		*n++
	}
}
