package workerhealthprocessor // import "github.com/workerwatch/workerwatch/processor/workerhealthprocessor"

import (
	"fmt"

	"github.com/workerwatch/workerwatch/internal/contract"
)

// The CPU rule: the main process saturating what one thread can get. A
// single-threaded runtime (Node) cannot claim or report while its main thread
// is busy, so a main process near one full core is a warning sign however
// many CPUs the worker has.
//
// Utilization comes from the receiver as a fraction of the worker's CPU
// limit and is turned into cores with the limit the receiver also sends
// (internal/contract/cpu.go: one definition for both sides; never the
// collector host's CPU count, which once made a pod limited to 1 CPU on a
// 16-core node look 16 times as busy). One thread can use at most one core,
// and at most the limit where the limit is below one core (a pod with
// cpu.max "50000 100000" gets half a core): the thresholds are shares of
// min(1, limit), so a main process held at its quota counts as saturated.

// cpuState is the CPU episode of a worker's main process: cpuCores -1 =
// never judged, cpuLimit -1 = unknown.
type cpuState struct {
	cpuCores float64
	cpuLimit float64
	cpuOver  int
	cpuUnder int
	cpuSat   bool
	cpuSince int64
}

// cpuScale is what cpu.saturation_cores and cpu.recovery_cores are shares
// of: one core, or the worker's CPU limit when that is smaller.
func cpuScale(limit float64) float64 { return min(1, limit) }

// sample advances the episode with one utilization sample (a fraction of
// the worker's CPU limit). Without a known limit there are no cores to
// judge, and the episode holds.
func (c *cpuState) sample(utilization float64, now int64, r *CPURule) {
	if c.cpuLimit <= 0 {
		return
	}
	cores := contract.Cores(utilization, c.cpuLimit)
	c.cpuCores = cores
	scale := cpuScale(c.cpuLimit)
	switch {
	case cores >= r.SaturationCores*scale:
		if c.cpuOver == 0 && !c.cpuSat {
			c.cpuSince = now
		}
		c.cpuOver++
		c.cpuUnder = 0
		if c.cpuOver >= r.Samples {
			c.cpuSat = true
		}
	case cores < r.RecoveryCores*scale:
		c.cpuOver = 0
		c.cpuUnder++
		if c.cpuUnder >= r.RecoverySamples {
			c.cpuSat = false
		}
	default:
		c.cpuOver, c.cpuUnder = 0, 0
	}
}

// reason is the rule's reason while the main process is saturated.
func (c *cpuState) reason(r *CPURule) (contract.Reason, bool) {
	if !c.cpuSat {
		return contract.Reason{}, false
	}
	thr := r.SaturationCores * cpuScale(c.cpuLimit)
	return contract.Reason{
		Code: codeCPU,
		Message: fmt.Sprintf("main process at %.2f cores (limit %.2g CPUs) for %d samples; saturated from %.2f cores",
			c.cpuCores, c.cpuLimit, r.Samples, thr),
		Value: c.cpuCores, Threshold: thr, Since: ts(c.cpuSince),
	}, true
}

// snapshot is the health API's view of the CPU (not checkpointed: a
// restored worker's episode starts again with its next samples).
func (c *cpuState) snapshot() contract.CPU {
	return contract.CPU{MainCores: c.cpuCores, LimitCPUs: max(c.cpuLimit, 0)}
}
