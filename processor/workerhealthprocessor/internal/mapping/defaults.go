package mapping // import "github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/mapping"

import "github.com/workerwatch/workerwatch/internal/contract"

// DefaultConfig is the mapping section's default: the names of
// internal/contract.
func DefaultConfig() Config {
	return Config{
		EventNameAttribute:    contract.AttrEventName,
		WorkerIDAttributes:    []string{contract.AttrWorkerID},
		WorkerNameAttribute:   contract.AttrWorkerName,
		RunIDAttribute:        contract.AttrRunID,
		ResultAttribute:       contract.AttrResult,
		ErrorTypeAttribute:    contract.AttrErrorType,
		KillReasonAttribute:   contract.AttrKillReason,
		CapacityAttribute:     contract.AttrCapacity,
		SnapshotRunsAttribute: contract.AttrSchedulerRuns,
		Events: EventNames{
			Claimed:   []string{contract.EventClaimed},
			Started:   []string{contract.EventStarted},
			Finished:  []string{contract.EventFinished},
			Killed:    []string{contract.EventKilled},
			Released:  []string{contract.EventReleased},
			Heartbeat: []string{contract.EventHeartbeat},
			Snapshot:  []string{contract.EventSchedulerSnapshot},
		},
		ErrorTypeKillReasons: map[string]string{"TimeoutError": contract.KillTimeout, "OOMError": contract.KillMemoryLimit},
		RunSpanName:          contract.SpanRun,
		StageSpanNames:       []string{contract.SpanCompile, contract.SpanExecute},
	}
}

// DefaultMetricsConfig is the metrics section's default.
func DefaultMetricsConfig() MetricsConfig {
	return MetricsConfig{
		Memory:          contract.MetricMemory,
		Present:         contract.MetricPresent,
		CPU:             contract.MetricCPUUtilization,
		CPULimit:        contract.MetricCPULimit,
		CgroupMemoryMax: contract.MetricCgroupMemoryMax,
		OOMKills:        contract.MetricCgroupOOMKills,
		Exited:          contract.MetricExited,
		SchedulerHeld:   contract.MetricSchedulerHeld,
		Capacity:        contract.MetricCapacity,
		RunsActive:      contract.MetricRunsActive,
		Pending:         contract.MetricSchedulerPending,
		RoleAttribute:   contract.AttrRole,
		MainRole:        contract.RoleMain,
	}
}
