package workerhealthprocessor // import "github.com/workerwatch/workerwatch/processor/workerhealthprocessor"

import (
	"errors"
	"fmt"
	"regexp"
	"slices"

	"github.com/workerwatch/workerwatch/internal/contract"
	"github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/state"
)

// Validate checks the configuration; every error names its YAML key. Each
// section is checked by its own function below, in the order of the
// sections in the file.
func (c *Config) Validate() error {
	var errs []error
	add := func(key, format string, a ...any) {
		errs = append(errs, fmt.Errorf("%s: %s", key, fmt.Sprintf(format, a...)))
	}
	if c.EmitInterval < MinEmitInterval {
		add("emit_interval", "must be at least %v, got %v", MinEmitInterval, c.EmitInterval)
	}
	if c.ResendInterval < 0 {
		add("resend_interval", "must not be negative (0: every evaluation), got %v", c.ResendInterval)
	}
	if c.CheckpointEvery < 1 {
		add("checkpoint_every", "must be at least 1, got %d", c.CheckpointEvery)
	}
	c.validateMapping(add)
	c.validateMemory(add)
	c.validateKills(add)
	if err := c.Recycle.Validate(); err != nil {
		errs = append(errs, err)
	}
	c.validateIdentity(add)
	c.validateCPU(add)
	c.validateStateRules(add)
	c.validateDrift(add)
	c.validateLimits(add)
	c.validateCapacity(add)
	for i := 1; i < len(c.HistogramBuckets); i++ {
		if c.HistogramBuckets[i] <= c.HistogramBuckets[i-1] {
			add("histogram_buckets", "must be strictly increasing")
			break
		}
	}
	return errors.Join(errs...)
}

// validateMapping checks mapping, metrics and the schedulers: how records are read.
func (c *Config) validateMapping(add func(key, format string, a ...any)) {
	if len(c.Mapping.WorkerIDAttributes) == 0 {
		add("mapping.worker_id_attributes", "must name at least one attribute")
	}
	for _, a := range c.Mapping.WorkerIDAttributes {
		if a == "" {
			add("mapping.worker_id_attributes", "must not contain an empty name")
		}
	}
	if keys := c.idKeys(); len(keys) > maxIDKeys {
		add("mapping.worker_id_attributes", "%d distinct worker id attributes with the schedulers' (%v); at most %d", len(keys), keys, maxIDKeys)
	}
	c.validateScheduler(add)
	for i, kp := range c.Mapping.KillReasonPatterns {
		if _, err := regexp.Compile(kp.Pattern); err != nil || kp.Pattern == "" {
			add(fmt.Sprintf("mapping.kill_reason_patterns[%d].pattern", i), "not a regular expression: %q", kp.Pattern)
		}
		if !validKillReason(kp.Reason) {
			add(fmt.Sprintf("mapping.kill_reason_patterns[%d].reason", i), "unknown kill reason %q (one of %v)", kp.Reason, state.KillReasonNames)
		}
	}
	if len(c.Mapping.KillReasonPatterns) > 0 && c.Mapping.FailureReasonAttribute == "" {
		add("mapping.failure_reason_attribute", "must be set while mapping.kill_reason_patterns are")
	}
	for _, p := range c.Mapping.RunSpanNamePrefixes {
		if p == "" {
			add("mapping.run_span_name_prefixes", "must not contain an empty prefix (every span would be a run)")
		}
	}
	if (c.Metrics.PendingAttribute == "") != (len(c.Metrics.PendingValues) == 0) {
		add("metrics.pending_values", "metrics.pending_attribute and metrics.pending_values go together")
	}
	if len(c.Mapping.Events.Snapshot) > 0 && c.Mapping.SnapshotRunsAttribute == "" {
		add("mapping.snapshot_runs_attribute", "must not be empty while mapping.events.snapshot names events")
	}
	if c.Mapping.RunIDAttribute == "" {
		add("mapping.run_id_attribute", "must not be empty")
	}
	for et, r := range c.Mapping.ErrorTypeKillReasons {
		if !validKillReason(r) {
			add("mapping.error_type_kill_reasons", "%q maps to unknown kill reason %q (one of %v)", et, r, state.KillReasonNames)
		}
	}
}

// validateMemory checks the memory rule.
func (c *Config) validateMemory(add func(key, format string, a ...any)) {
	if c.Memory.SoftLimitBytes < 0 {
		add("memory.soft_limit_bytes", "must not be negative, got %d", c.Memory.SoftLimitBytes)
	}
	if c.Memory.SoftLimitRatio < 0 || c.Memory.SoftLimitRatio > 1 {
		add("memory.soft_limit_ratio", "must be within [0, 1], got %v", c.Memory.SoftLimitRatio)
	}
	if c.Memory.UnhealthySamples < 1 {
		add("memory.unhealthy_samples", "must be at least 1, got %d", c.Memory.UnhealthySamples)
	}
	if c.Memory.UnhealthyAfter < 0 {
		add("memory.unhealthy_after", "must not be negative, got %v", c.Memory.UnhealthyAfter)
	}
	if c.Memory.RecoveryRatio <= 0 || c.Memory.RecoveryRatio > 1 {
		add("memory.recovery_ratio", "must be within (0, 1], got %v", c.Memory.RecoveryRatio)
	}
	if c.Memory.RecoverySamples < 1 {
		add("memory.recovery_samples", "must be at least 1, got %d", c.Memory.RecoverySamples)
	}
	for r, rule := range c.Memory.Roles {
		if r == "" {
			add("memory.roles", "a role name must not be empty")
		}
		if rule.SoftLimitBytes <= 0 {
			add("memory.roles", "%q: soft_limit_bytes must be positive, got %d", r, rule.SoftLimitBytes)
		}
	}
	if len(c.Memory.Roles) > maxRoleLimits {
		add("memory.roles", "at most %d roles, got %d", maxRoleLimits, len(c.Memory.Roles))
	}
}

// validateKills checks the kills rule.
func (c *Config) validateKills(add func(key, format string, a ...any)) {
	if c.Kills.Count < 0 {
		add("kills.count", "must not be negative, got %d", c.Kills.Count)
	}
	if c.Kills.Count > 0 && c.Kills.Window <= 0 {
		add("kills.window", "must be positive when kills.count is set, got %v", c.Kills.Window)
	}
	for r, e := range c.Kills.Effects {
		if !slices.Contains(state.KillReasonNames[:], r) {
			add("kills.effects", "unknown kill reason %q (one of %v)", r, state.KillReasonNames)
		}
		if _, ok := state.EffectIndex(e); !ok {
			add("kills.effects", "%q: unknown effect %q (one of none, degraded, unhealthy)", r, e)
		}
	}
	if c.Kills.ExitWindow <= 0 {
		add("kills.exit_window", "must be positive, got %v", c.Kills.ExitWindow)
	}
}

// validateIdentity checks identity.
func (c *Config) validateIdentity(add func(key, format string, a ...any)) {
	if c.Identity.JoinWithin <= 0 {
		add("identity.join_within", "must be positive, got %v", c.Identity.JoinWithin)
	}
}

// validateCPU checks the CPU rule.
func (c *Config) validateCPU(add func(key, format string, a ...any)) {
	if c.CPU.Enabled {
		if c.CPU.SaturationCores <= 0 {
			add("cpu.saturation_cores", "must be positive, got %v", c.CPU.SaturationCores)
		}
		if c.CPU.RecoveryCores <= 0 || c.CPU.RecoveryCores > c.CPU.SaturationCores {
			add("cpu.recovery_cores", "must be positive and at most cpu.saturation_cores, got %v", c.CPU.RecoveryCores)
		}
		if c.CPU.Samples < 1 {
			add("cpu.samples", "must be at least 1, got %d", c.CPU.Samples)
		}
		if c.CPU.RecoverySamples < 1 {
			add("cpu.recovery_samples", "must be at least 1, got %d", c.CPU.RecoverySamples)
		}
	}
}

// validateStateRules checks the stalled, lost, fleet and hysteresis rules.
func (c *Config) validateStateRules(add func(key, format string, a ...any)) {
	if c.Stalled.After < 0 {
		add("stalled.after", "must not be negative, got %v", c.Stalled.After)
	}
	if c.Lost.After <= 0 {
		add("lost.after", "must be positive, got %v", c.Lost.After)
	}
	if c.Lost.ExitGrace < 0 {
		add("lost.exit_grace", "must not be negative, got %v", c.Lost.ExitGrace)
	}
	if c.Fleet.IdleIntervals < 1 {
		add("fleet.idle_intervals", "must be at least 1, got %d", c.Fleet.IdleIntervals)
	}
	if c.Hysteresis.RecoverEvaluations < 1 {
		add("hysteresis.recover_evaluations", "must be at least 1, got %d", c.Hysteresis.RecoverEvaluations)
	}
}

// validateDrift checks the drift rule.
func (c *Config) validateDrift(add func(key, format string, a ...any)) {
	if c.Drift.Grace < 0 {
		add("drift.grace", "must not be negative, got %v", c.Drift.Grace)
	}
	if c.Drift.TombstoneTTL < c.Drift.Grace {
		add("drift.tombstone_ttl", "must be at least drift.grace (%v), got %v", c.Drift.Grace, c.Drift.TombstoneTTL)
	}
	if c.Drift.HealAfter <= c.Drift.Grace {
		add("drift.heal_after", "must be longer than drift.grace (%v), got %v", c.Drift.Grace, c.Drift.HealAfter)
	}
}

// validateLimits checks the limits.
func (c *Config) validateLimits(add func(key, format string, a ...any)) {
	if c.Limits.RecentRuns < 0 {
		add("limits.recent_runs", "must not be negative, got %d", c.Limits.RecentRuns)
	}
	if c.Limits.MaxWorkers < 1 {
		add("limits.max_workers", "must be at least 1, got %d", c.Limits.MaxWorkers)
	}
	if c.Limits.MaxRunsPerWorker < 1 {
		add("limits.max_runs_per_worker", "must be at least 1, got %d", c.Limits.MaxRunsPerWorker)
	}
	if c.Limits.MaxUnconfirmedWorkers < 0 {
		add("limits.max_unconfirmed_workers", "must not be negative, got %d", c.Limits.MaxUnconfirmedWorkers)
	}
	if c.Limits.MaxRuns < 1 {
		add("limits.max_runs", "must be at least 1, got %d", c.Limits.MaxRuns)
	}
	if c.Limits.WorkerTTL < c.Lost.After {
		add("limits.worker_ttl", "must be at least lost.after (%v), got %v", c.Lost.After, c.Limits.WorkerTTL)
	}
	if c.Limits.MaxAttributeLength < 1 {
		add("limits.max_attribute_length", "must be at least 1, got %d", c.Limits.MaxAttributeLength)
	}
}

// validateCapacity checks capacity.
func (c *Config) validateCapacity(add func(key, format string, a ...any)) {
	if c.Capacity.Default < 0 {
		add("capacity.default", "must not be negative, got %d", c.Capacity.Default)
	}
	for id, n := range c.Capacity.PerWorker {
		if n < 0 {
			add("capacity.per_worker", "%q must not be negative, got %d", id, n)
		}
	}
}

func validKillReason(r string) bool { return slices.Contains(state.KillReasonNames[:], r) }

func (c *Config) validateScheduler(add func(key, format string, a ...any)) {
	sc := &c.Scheduler
	validView := func(key, v string) {
		if !slices.Contains(contract.SchedulerViews[:], v) {
			add(key, "unknown view %q (one of %v)", v, contract.SchedulerViews)
		}
	}
	validView("scheduler.view", sc.View)
	validLife := func(key, v string) {
		if !slices.Contains(signsOfLife, v) {
			add(key, "unknown value %q (one of %v)", v, signsOfLife)
		}
	}
	validLife("scheduler.sign_of_life", sc.SignOfLife)
	if sc.SnapshotInterval <= 0 {
		add("scheduler.snapshot_interval", "must be positive, got %v", sc.SnapshotInterval)
	}
	seen := map[string]bool{}
	dup := func(key, n string) {
		if seen[n] {
			add(key, "service name %q is listed twice", n)
		}
		seen[n] = true
	}
	for _, n := range sc.ServiceNames {
		dup("scheduler.service_names", n)
	}
	for i, s := range sc.Sources {
		key := fmt.Sprintf("scheduler.sources[%d]", i)
		if s.ServiceName == "" {
			add(key+".service_name", "must not be empty")
		}
		dup(key+".service_name", s.ServiceName)
		if s.View != "" {
			validView(key+".view", s.View)
		}
		if s.SignOfLife != "" {
			validLife(key+".sign_of_life", s.SignOfLife)
		}
		if s.SnapshotInterval < 0 {
			add(key+".snapshot_interval", "must not be negative, got %v", s.SnapshotInterval)
		}
	}
	if len(seen) > 255 {
		add("scheduler", "at most 255 scheduler service names, got %d", len(seen))
	}
}
