package contract

// The one definition of CPU utilization, used by the receiver that measures
// it and the processor that judges it (and by the simulator and tests that
// check them).
//
// process.cpu.utilization (MetricCPUUtilization) of a role is the CPU time
// (user + system) its processes used over the last interval, divided by the
// interval and by the worker's CPU limit: 1.0 means the role used every CPU
// the worker may use. This follows the semantic conventions ("divided by the
// elapsed time and number of CPUs available to the process").
//
// The worker's CPU limit (MetricCPULimit, unit {cpu}) is the number of CPUs
// its root process may run on (its affinity, Cpus_allowed_list), lowered to
// its cgroup's cpu.max quota / period where that is smaller (0.5 for
// "50000 100000"). A worker pinned with taskset to one CPU of a 16-CPU host
// has a limit of 1; a pod with a 1-CPU limit on a 16-core node too.
//
// Cores, what the health rules compare with cpu.saturation_cores, is
// utilization × limit: the CPUs' worth of time the role used. Never the
// collector host's CPU count: the collector may run elsewhere, and the worker
// may use fewer CPUs than its host has.

// CPULimit is a worker's CPU limit from the CPUs in its affinity mask and its
// cgroup cpu.max (quota and period in microseconds; quota <= 0 or period <= 0
// means no quota). affinity <= 0 means unknown, and then the quota alone, or
// 0 (unknown) without one.
func CPULimit(affinity int, quota, period float64) float64 {
	limit := float64(max(affinity, 0))
	if quota > 0 && period > 0 {
		if q := quota / period; limit == 0 || q < limit {
			limit = q
		}
	}
	return limit
}

// Utilization is CPU seconds used over wall seconds, as a fraction of limit
// CPUs (0 when either is not positive).
func Utilization(cpuSeconds, wallSeconds, limit float64) float64 {
	if wallSeconds <= 0 || limit <= 0 || cpuSeconds < 0 {
		return 0
	}
	return cpuSeconds / (wallSeconds * limit)
}

// Cores turns a utilization back into CPUs' worth of time.
func Cores(utilization, limit float64) float64 {
	return utilization * limit
}
