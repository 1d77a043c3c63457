package state // import "github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/state"

import (
	"fmt"
	"math"

	"github.com/workerwatch/workerwatch/internal/contract"
)

// Verdict is a worker's judged state: since when, with which reasons, the
// consecutive evaluations that computed a better state (hysteresis), and
// the cumulative state transitions by the state entered.
type Verdict struct {
	State   contract.State
	Since   int64
	Reasons []contract.Reason
	// transitions: 32 bits a count, as a state changes at most once an
	// evaluation (136 years at one a second), and the worker stays in the
	// allocator's size class it was measured in (tracker.TestWorkerSize).
	transitions [6]uint32
	// better: 32 bits, next to fresh (the word is shared): it counts to
	// hysteresis.recover_evaluations and stops at math.MaxInt32 (inc32).
	better int32
	// fresh: a new incarnation began since the last evaluation; the state
	// it computes applies at once (the current one was the old process's).
	fresh bool
}

// NewIncarnation makes the next evaluation's state apply at once, better or
// worse: hysteresis is about one process's flapping, and the state so far
// was another process's (docs/health-rules.md, "Incarnations").
func (v *Verdict) NewIncarnation() { v.fresh = true }

// NewVerdict is the verdict of a worker first seen at now: unknown.
func NewVerdict(now int64) Verdict { return Verdict{State: contract.Unknown, Since: now} }

// StateIndex is the current state's place in contract.AllStates.
func (v *Verdict) StateIndex() int { return stateIndex(v.State) }

// Transitions are the cumulative state transitions by the state entered
// (contract.AllStates order).
func (v *Verdict) Transitions() [6]uint32 { return v.transitions }

// Judged applies one evaluation's state and reasons, with hysteresis: a
// worse state (or unknown, either way, or the first of a new incarnation)
// is taken at once, a better one after
// recoverEvals consecutive evaluations computed it (until then the reasons
// say so). True when the state changed.
func (v *Verdict) Judged(target contract.State, reasons []contract.Reason, now int64, recoverEvals int) bool {
	cur := v.State
	fresh := v.fresh
	v.fresh = false
	switch {
	case target == cur:
		v.better = 0
	case cur == contract.Unknown || target == contract.Unknown || fresh || contract.Severity(target) > contract.Severity(cur):
		v.better = 0
		v.move(target, reasons, now)
		return true
	default:
		inc32(&v.better)
		if int(v.better) >= recoverEvals {
			v.better = 0
			v.move(target, reasons, now)
			return true
		}
		reasons = append(reasons, contract.Reason{
			Code:    CodeRecovering,
			Message: fmt.Sprintf("rules say %s; %d of %d evaluations before the state changes", target, v.better, recoverEvals),
			Value:   float64(v.better), Threshold: float64(recoverEvals),
		})
	}
	v.Reasons = reasons
	return false
}

func (v *Verdict) move(to contract.State, reasons []contract.Reason, now int64) {
	v.State, v.Since, v.Reasons = to, now, reasons
	v.transitions[stateIndex(to)]++
}

// Restored is a restored worker's verdict: unknown until evaluated (never
// healthy on a checkpoint's word), for this reason.
func (v *Verdict) Restored(now int64, why contract.Reason) {
	v.State, v.Since, v.Reasons = contract.Unknown, now, []contract.Reason{why}
}

// VerdictRecord is the verdict's checkpoint record: only the cumulative
// transitions (the state itself is judged again after a restore).
type VerdictRecord struct {
	Transitions map[string]int64 `json:"transitions,omitempty"`
}

// Checkpoint is the verdict's checkpoint record.
func (v *Verdict) Checkpoint() VerdictRecord {
	var c VerdictRecord
	for i, n := range v.transitions {
		if n > 0 {
			if c.Transitions == nil {
				c.Transitions = map[string]int64{}
			}
			c.Transitions[string(contract.AllStates[i])] = int64(n)
		}
	}
	return c
}

// Restore takes checkpointed transitions back.
func (v *Verdict) Restore(c *VerdictRecord) {
	for st, n := range c.Transitions {
		if s := contract.State(st); s.Valid() && n > 0 {
			v.transitions[stateIndex(s)] = uint32(min(n, math.MaxUint32))
		}
	}
}

// stateIndex maps states to array slots, in contract.AllStates order.
func stateIndex(s contract.State) int {
	for i, x := range contract.AllStates {
		if x == s {
			return i
		}
	}
	return len(contract.AllStates) - 1
}
