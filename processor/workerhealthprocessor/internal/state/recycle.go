package state // import "github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/state"

import (
	"errors"
	"fmt"
	"time"

	"github.com/workerwatch/workerwatch/internal/contract"
)

// The recycle rule (docs/health-rules.md, "Pool recycle loop"): a pool
// that replaces its child after (nearly) every run. Celery's
// worker_max_memory_per_child set below what a child needs once it has run
// a task (celery #4125), or max_tasks_per_child 1, makes the pool fork a
// new child for every task: no event says so, no run fails, and the work
// pays a fork and a warm-up each time. The tree shows it: a pool child
// exits right after each run ends, an exit the kills rule excuses (a run
// end explains it: kills.exit_window) and counts in no kill. Those excused
// exits, less the ones a killed run's end explains (its child died with
// it: a kill, not a recycle), are the recycles.

// CodeRecycleLoop is the recycle rule's reason code (the contract's).
const CodeRecycleLoop = contract.CodeRecycleLoop

// RecycleRule: a pool replacing its children after every run.
type RecycleRule struct {
	// Window over which recycles and run ends are counted (0 = off).
	// Default 0: off, since workers that run each task in a new process
	// are built that way; the Celery preset sets 10m.
	Window time.Duration `mapstructure:"window"`
	// MinExits: at least this many recycled children within the window.
	// Default 5.
	MinExits int `mapstructure:"min_exits"`
	// PerRunRatio: and at least this share of the runs that ended within
	// the window replaced their child. Default 0.9.
	PerRunRatio float64 `mapstructure:"per_run_ratio"`
}

// DefaultRecycleRule is the recycle section's defaults: off, the other
// keys ready for a window.
func DefaultRecycleRule() RecycleRule {
	return RecycleRule{MinExits: 5, PerRunRatio: 0.9}
}

// Validate names the key at fault.
func (c *RecycleRule) Validate() error {
	var errs []error
	if c.Window < 0 {
		errs = append(errs, fmt.Errorf("recycle.window: must not be negative (0 = off), got %v", c.Window))
	}
	if c.Window > 0 {
		if c.MinExits < 1 {
			errs = append(errs, fmt.Errorf("recycle.min_exits: must be at least 1 when recycle.window is set, got %d", c.MinExits))
		}
		if !(c.PerRunRatio > 0 && c.PerRunRatio <= 1) {
			errs = append(errs, fmt.Errorf("recycle.per_run_ratio: must be in (0, 1] (a run end explains at most one exit), got %v", c.PerRunRatio))
		}
	}
	return errors.Join(errs...)
}

// maxRecycleLog bounds the recycles and the run ends kept per worker
// (those within recycle.window); beyond it the oldest go.
const maxRecycleLog = 4096

// Recycle is a worker's recycled pool children and ended runs within
// recycle.window, and since when the loop has been seen: a pointer to them,
// nil while there are none (the rule is off by default, and a worker's
// state is kept small: the lists were 80 bytes of every worker).
type Recycle struct{ l *recycleLog }

type recycleLog struct {
	exits  []int64 // each excused child exit's time, in order
	ends   []int64 // each run end not a kill, in order
	killed []int64 // each killed run's end, in order
	since  int64
}

func (r *Recycle) log() *recycleLog {
	if r.l == nil {
		r.l = &recycleLog{}
	}
	return r.l
}

// RunEnded counts a run end of a worker whose tree reports child exits
// (the same runs Kills.RunEnded keeps for matching), when the rule is on;
// killed: the run was killed (its child's exit is no recycle).
func (r *Recycle) RunEnded(k *Kills, now int64, killed bool, c *RecycleRule) {
	if k.exitChildBase < 0 || c.Window <= 0 {
		return
	}
	if killed {
		r.log().killed = appendBounded(r.log().killed, now)
		return
	}
	r.log().ends = appendBounded(r.log().ends, now)
}

// MatchExits is Kills.MatchExits, counting as recycles the child exits it
// settles that a run end explained (those it does not count as child_exit
// kills), when the rule is on.
func (r *Recycle) MatchExits(k *Kills, now int64, kr *KillRules, c *RecycleRule) {
	if c.Window <= 0 {
		k.MatchExits(now, kr, func(int64) {})
		return
	}
	k.MatchExits(now, kr, r.explained)
}

// explained logs one child exit a run end explained, at its time.
func (r *Recycle) explained(at int64) { r.log().exits = appendBounded(r.log().exits, at) }

func appendBounded(s []int64, v int64) []int64 {
	if len(s) >= maxRecycleLog {
		s = append(s[:0], s[1:]...)
	}
	return append(s, v)
}

// Window forgets what slid out of recycle.window and keeps since when the
// loop has been seen (the oldest recycle in the window when the rule began
// to fire, fixed until it stops firing).
func (r *Recycle) Window(now int64, c *RecycleRule) {
	if c.Window <= 0 || r.l == nil {
		r.l = nil
		return
	}
	l := r.l
	win := int64(c.Window)
	drop := func(s []int64) []int64 {
		i := 0
		for i < len(s) && now-s[i] > win {
			i++
		}
		if i == len(s) {
			return nil
		}
		return s[i:]
	}
	l.exits, l.ends, l.killed = drop(l.exits), drop(l.ends), drop(l.killed)
	switch {
	case !r.firing(c):
		l.since = 0
	case l.since == 0:
		l.since = l.exits[0]
	}
	if l.exits == nil && l.ends == nil && l.killed == nil {
		r.l = nil // the window forgot everything
	}
}

// recycles are the excused exits within the window less the killed runs'.
func (r *Recycle) recycles() int {
	if r.l == nil {
		return 0
	}
	return max(len(r.l.exits)-len(r.l.killed), 0)
}

func (r *Recycle) firing(c *RecycleRule) bool {
	n := r.recycles()
	return c.Window > 0 && n > 0 && n >= c.MinExits && float64(n) >= c.PerRunRatio*float64(len(r.l.ends))
}

// Reason is the rule's degraded reason, when it fires.
func (r *Recycle) Reason(c *RecycleRule) (contract.Reason, bool) {
	if !r.firing(c) {
		return contract.Reason{}, false
	}
	n, ends := r.recycles(), len(r.l.ends)
	return contract.Reason{
		Code: CodeRecycleLoop,
		Message: fmt.Sprintf("%d pool children replaced after their run within %v, for %d runs ended (a new child per run: max_memory_per_child or max_tasks_per_child too low?)",
			n, c.Window, ends),
		Value: float64(n), Threshold: float64(c.MinExits), Since: Time(r.l.since),
	}, true
}
