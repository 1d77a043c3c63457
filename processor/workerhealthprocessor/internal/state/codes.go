package state // import "github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/state"

import "time"

// Reason codes (docs/health-rules.md).
const (
	CodeMemory        = "memory_over_soft_limit"
	CodeMemoryAtStart = "memory_over_soft_limit_at_run_start"
	CodeKills         = "kills_in_window"
	CodeCPU           = "cpu_saturated"
	CodeNoClaim       = "no_claim"
	CodeNoTelemetry   = "no_telemetry"
	CodeMissing       = "drift_missing"
	CodeOrphaned      = "drift_orphaned"
	CodeOverCapacity  = "over_capacity"
	CodeRecovering    = "recovering"
	CodeNotReported   = "no_telemetry_since_start"
)

// Time is a timestamp in nanoseconds as a UTC time; 0 is the zero time.
func Time(ns int64) time.Time {
	if ns == 0 {
		return time.Time{}
	}
	return time.Unix(0, ns).UTC()
}
