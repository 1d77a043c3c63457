package tracker // import "github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/tracker"

import (
	"fmt"
	"time"

	"github.com/workerwatch/workerwatch/internal/contract"
	"github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/mapping"
	"github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/state"
)

// Incarnations (docs/health-rules.md, "Incarnations"): the memory episodes,
// the CPU episode and the kills window belong to the incarnation they were
// seen in; a new one starts them afresh, live or after a restore. A root
// that exited with no new incarnation within lost.exit_grace makes the
// worker lost at once (process_exited).

// incarnation applies what a sample's or a record's resource says of the
// worker's incarnation, before the sample's figures: a new process's first
// sample is its own. tree: the resource is the worker_process receiver's;
// present: its root is there (a tree) or the record is the worker's own.
func (t *Tracker) incarnation(w *Worker, ref *mapping.IncRef, tree, present bool, now int64) {
	in, ok := state.IncarnationOf(ref, tree, now)
	if !ok {
		return
	}
	cur := w.inc.Get()
	if tree && !present {
		// The root ended: pending until a new incarnation or the grace.
		if cur.Known() && !cur.Same(&in) {
			return // an older root's exit, restated
		}
		in.Name()
		if w.exit != nil && w.exit.Inc == in.ID {
			return // known already
		}
		if ex, ok := state.ExitOf(ref, in.ID, now); ok {
			w.exit = &ex
			if !cur.Known() {
				w.inc.Set(in)
			}
			t.exitDue = minDue(t.exitDue, now+int64(t.cfg.Lost.ExitGrace))
		}
		return
	}
	if !tree && cur.Source == contract.IncarnationTree {
		return // the tree's root is the worker's incarnation
	}
	switch {
	case !cur.Known():
		// The first known: its evidence is its own (a worker restored from
		// a checkpoint that knew no incarnation keeps its evidence).
		in.Name()
		w.inc.Set(in)
	case cur.Same(&in):
		if (in.Source == contract.IncarnationTree && cur.Source != contract.IncarnationTree) || (cur.PID == 0 && in.PID != 0) {
			// The same process, now from its tree (the tree speaks for
			// it) or now with its pid: its evidence and first sight stay.
			in.Name()
			cur.ID, cur.Source, cur.PID, cur.Started = in.ID, in.Source, in.PID, in.Started
			w.inc.Set(cur)
			t.markDirty(w)
		}
		return
	default:
		w.memory.NewIncarnation()
		w.cpu.NewIncarnation()
		w.kills.NewIncarnation()
		w.NewIncarnation()
		in.Name()
		w.inc.Set(in)
	}
	if w.exit != nil {
		w.exit.Pending = false
	}
	t.markDirty(w)
}

// minDue is the earlier of two due times (0 = none).
func minDue(a, b int64) int64 {
	if a == 0 || b < a {
		return b
	}
	return a
}

// exited: the worker's root exited, and no new incarnation replaced it
// within lost.exit_grace.
func (t *Tracker) exited(w *Worker, now int64) bool {
	return w.exit != nil && w.exit.Pending && now-w.exit.Seen >= int64(t.cfg.Lost.ExitGrace)
}

// exitReason is the process_exited reason of an exited worker.
func (t *Tracker) exitReason(w *Worker, now int64) contract.Reason {
	ex := w.exit
	snap := ex.Snapshot()
	return contract.Reason{
		Code: state.CodeProcessExited,
		Message: fmt.Sprintf("the worker's root process (%s) exited, %s, and no new process replaced it within %v",
			ex.Inc, snap.Text(), t.cfg.Lost.ExitGrace),
		Value:     time.Duration(now - ex.At).Seconds(),
		Threshold: t.cfg.Lost.ExitGrace.Seconds(),
		Since:     state.Time(ex.At),
		Exit:      snap,
	}
}

// TakeExitDue returns when the earliest exit seen since the last call is due
// (its grace ends; unix ns, 0 = none) and forgets it: the processor
// evaluates then, not only every emit_interval.
func (t *Tracker) TakeExitDue() int64 {
	d := t.exitDue
	t.exitDue = 0
	return d
}

// stampIncarnation names the current incarnation on the reasons of its own
// evidence (memory, CPU, kills). The name is made only when a reason takes
// it (a process's is not held: state.CurrentIncarnation).
func (w *Worker) stampIncarnation(rs []contract.Reason) {
	if !w.inc.Known() {
		return
	}
	id := ""
	for i := range rs {
		switch rs[i].Code {
		case state.CodeMemory, state.CodeMemoryAtStart, state.CodeCPU, state.CodeKills, state.CodeProcessExited:
			if id == "" {
				id = w.inc.ID()
			}
			rs[i].Incarnation = id
		}
	}
}
