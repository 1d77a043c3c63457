package workerhealthprocessor // import "github.com/workerwatch/workerwatch/processor/workerhealthprocessor"

import "github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/state"

// The rule sections of Config live in internal/state (config.go there documents
// every key); these aliases keep their names and YAML keys unchanged.
type (
	IdentityConfig = state.IdentityConfig
	CapacityConfig = state.CapacityConfig
	MemoryRule     = state.MemoryRule
	RoleMemoryRule = state.RoleMemoryRule
	KillsRule      = state.KillsRule
	RecycleRule    = state.RecycleRule
	CPURule        = state.CPURule
	StalledRule    = state.StalledRule
	LostRule       = state.LostRule
	DriftRule      = state.DriftRule
	FleetRule      = state.FleetRule
	Hysteresis     = state.Hysteresis
	LimitsConfig   = state.LimitsConfig
)
