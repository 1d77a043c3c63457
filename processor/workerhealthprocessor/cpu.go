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

// cpuSample advances the CPU episode with one utilization sample. Without a
// known limit there are no cores to judge, and the episode holds.
func (t *tracker) cpuSample(w *worker, utilization float64, now int64) {
	if w.cpuLimit <= 0 {
		return
	}
	c := &t.cfg.CPU
	cores := contract.Cores(utilization, w.cpuLimit)
	w.cpuCores = cores
	scale := cpuScale(w.cpuLimit)
	switch {
	case cores >= c.SaturationCores*scale:
		if w.cpuOver == 0 && !w.cpuSat {
			w.cpuSince = now
		}
		w.cpuOver++
		w.cpuUnder = 0
		if w.cpuOver >= c.Samples {
			w.cpuSat = true
		}
	case cores < c.RecoveryCores*scale:
		w.cpuOver = 0
		w.cpuUnder++
		if w.cpuUnder >= c.RecoverySamples {
			w.cpuSat = false
		}
	default:
		w.cpuOver, w.cpuUnder = 0, 0
	}
}

func (t *tracker) cpuReason(w *worker) contract.Reason {
	thr := t.cfg.CPU.SaturationCores * cpuScale(w.cpuLimit)
	return contract.Reason{
		Code: codeCPU,
		Message: fmt.Sprintf("main process at %.2f cores (limit %.2g CPUs) for %d samples; saturated from %.2f cores",
			w.cpuCores, w.cpuLimit, t.cfg.CPU.Samples, thr),
		Value: w.cpuCores, Threshold: thr, Since: ts(w.cpuSince),
	}
}

func cpuSnapshot(w *worker) contract.CPU {
	return contract.CPU{MainCores: w.cpuCores, LimitCPUs: max(w.cpuLimit, 0)}
}
