package state // import "github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/state"

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

// CPU is the CPU of a worker's main process: cores -1 = never judged,
// limit -1 = unknown. Its episode exists only while there is one.
type CPU struct {
	cores float64
	limit float64
	// ep: nil while no sample in a row is over the threshold and nothing
	// latched (most workers, most of the time): 24 bytes a worker where the
	// counts and the evidence kept inline were 56 (the tracker's Worker in
	// a smaller size class, TestWorkerSize). Idle, the counts do not matter:
	// going over starts counting afresh, and under counts only while
	// latched.
	ep *cpuEpisode
}

// cpuEpisode is a CPU episode under way.
type cpuEpisode struct {
	// over and under: samples in a row over and under the limit.
	over, under int32
	since       int64
	// firedCores and firedAt are the evidence the episode latched on.
	firedCores float64
	firedAt    int64
	sat        bool
}

// NewCPU is the episode of a worker never sampled.
func NewCPU() CPU { return CPU{cores: -1, limit: -1} }

// SetLimit records the worker's CPU limit, in CPUs, as its tree reports it.
func (c *CPU) SetLimit(limit float64) { c.limit = limit }

// cpuScale is what cpu.saturation_cores and cpu.recovery_cores are shares
// of: one core, or the worker's CPU limit when that is smaller.
func cpuScale(limit float64) float64 { return min(1, limit) }

// Sample advances the episode with one utilization sample (a fraction of
// the worker's CPU limit). Without a known limit there are no cores to
// judge, and the episode holds.
func (c *CPU) Sample(utilization float64, now int64, r *CPURule) {
	if c.limit <= 0 {
		return
	}
	cores := contract.Cores(utilization, c.limit)
	c.cores = cores
	scale := cpuScale(c.limit)
	switch {
	case cores >= r.SaturationCores*scale:
		if c.ep == nil {
			c.ep = &cpuEpisode{}
		}
		e := c.ep
		if e.over == 0 && !e.sat {
			e.since = now
		}
		e.over++
		e.under = 0
		if int(e.over) >= r.Samples && !e.sat {
			e.sat, e.firedCores, e.firedAt = true, cores, now
		}
	case c.ep == nil:
		// Idle and not over: nothing to count.
	case cores < r.RecoveryCores*scale:
		e := c.ep
		e.over = 0
		e.under++
		if int(e.under) >= r.RecoverySamples {
			e.sat = false
		}
	default:
		c.ep.over, c.ep.under = 0, 0
	}
	if e := c.ep; e != nil && !e.sat && e.over == 0 {
		c.ep = nil // the episode is over
	}
}

// Reason is the rule's reason while the main process is saturated.
func (c *CPU) Reason(r *CPURule) (contract.Reason, bool) {
	e := c.ep
	if e == nil || !e.sat {
		return contract.Reason{}, false
	}
	thr := r.SaturationCores * cpuScale(c.limit)
	cur := c.cores
	ratio := 0.0
	if r.SaturationCores > 0 {
		ratio = r.RecoveryCores / r.SaturationCores
	}
	return contract.Reason{
		Code: CodeCPU,
		Message: fmt.Sprintf("main process at %.2f cores (limit %.2g CPUs) for %d samples; saturated from %.2f cores; recovers after %d samples under %.2f cores",
			e.firedCores, c.limit, r.Samples, thr, r.RecoverySamples, r.RecoveryCores*cpuScale(c.limit)),
		Value: e.firedCores, Threshold: thr, Since: Time(e.since), Samples: r.Samples, FiredAt: Time(e.firedAt),
		Latched: true, Current: &cur, Recovery: &contract.Recovery{Samples: int(e.under), Needed: r.RecoverySamples, Ratio: ratio},
	}, true
}

// NewIncarnation starts the episode afresh for a new process of the
// worker (the limit stays: it is the worker's).
func (c *CPU) NewIncarnation() {
	*c = CPU{cores: -1, limit: c.limit}
}

// Snapshot is the health API's view of the CPU (not checkpointed: a
// restored worker's episode starts again with its next samples).
func (c *CPU) Snapshot() contract.CPU {
	return contract.CPU{MainCores: c.cores, LimitCPUs: max(c.limit, 0)}
}
