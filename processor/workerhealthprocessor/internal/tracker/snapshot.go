package tracker // import "github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/tracker"

import (
	"bytes"
	"cmp"
	"slices"
	"unsafe"

	"github.com/workerwatch/workerwatch/internal/contract"
	"github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/state"
)

// Snapshot builds the immutable view for the health extension.
func (t *Tracker) Snapshot(now int64) *contract.Snapshot {
	s := &contract.Snapshot{
		Time:    state.Time(now),
		Workers: make([]contract.Worker, 0, t.workers.len()),
		Fleet: contract.Fleet{
			ByState:          map[contract.State]int{},
			Pending:          -1,
			IdleCapacity:     t.idle,
			IdleWhilePending: t.idleWhilePending,
		},
	}
	if t.pendingFresh(now) {
		s.Fleet.Pending = t.pending
	}
	for _, st := range contract.AllStates {
		s.Fleet.ByState[st] = 0
	}
	var ended []*state.Run
	t.bytes.reset()
	t.strs.reset()
	t.roles.reset()
	for _, w := range t.byID() {
		s.Fleet.ByState[w.State]++
		t.heldW, t.heldS, ended = t.heldW[:0], t.heldS[:0], ended[:0]
		for r := range w.Table.All() {
			if r.Has(state.RunWorkerHeld) {
				t.heldW = append(t.heldW, state.RunIDBytes(r.ID()))
			}
			if r.Has(state.RunSchedHeld) {
				t.heldS = append(t.heldS, state.RunIDBytes(r.ID()))
			}
			if r.Has(state.RunWorkerEnded) && !r.Has(state.RunReleased|state.RunLetGo) && r.WEnd > 0 {
				ended = append(ended, r)
			}
		}
		slices.SortFunc(t.heldW, bytes.Compare)
		slices.SortFunc(t.heldS, bytes.Compare)
		wr := t.heldList(t.heldW, nil)
		sr := wr // both sides agree (most workers): one list, read-only as all of a snapshot
		if !sameIDs(t.heldS, wr) {
			sr = t.heldList(t.heldS, wr)
		}
		s.Workers = append(s.Workers, contract.Worker{
			ID: w.id, Name: w.Name, State: w.State,
			Reasons:  append([]contract.Reason{}, w.Reasons...),
			Since:    contract.Time(w.Since),
			LastSeen: contract.Time(w.LastAlive),
			Memory:   w.memory.Snapshot(t.mem, t.roles.take(w.memory.RoleCount())),
			CPU:      w.cpu.Snapshot(),
			Runs: contract.Runs{
				Worker: wr, Scheduler: sr, Capacity: t.capacityOf(w),
				Recent: t.recentRuns(ended), Kills: w.kills.Snapshot(),
			},
			Drift: contract.NewDrift(contract.DriftDetail{
				Missing: slices.Clone(w.Missing()), Orphaned: slices.Clone(w.Orphaned()),
				MissingCount: int(w.MissN), OrphanedCount: int(w.OrphN), OverCapacity: int(w.OverCap),
			}),
			Sources:     w.Identity.Snapshot(w.id, t.idPrefixes), //nolint:staticcheck // QF1008: named, it reads as the identity's part, not the worker's snapshot
			Incarnation: w.inc.Snapshot(),
			LastExit:    w.lastExit(),
		})
	}
	return s
}

// heldList is a side's held run ids (ids, sorted) as the snapshot lists
// them, from its blocks: the strings of other (the other side's list)
// where it holds the same id.
func (t *Tracker) heldList(ids [][]byte, other []string) []string {
	if len(ids) == 0 {
		return []string{}
	}
	out := t.strs.take(len(ids))
	for i, id := range ids {
		if k, ok := slices.BinarySearch(other, string(id)); ok {
			out[i] = other[k]
		} else {
			b := t.bytes.take(len(id))
			copy(b, id)
			out[i] = unsafe.String(unsafe.SliceData(b), len(b))
		}
	}
	return out
}

// sameIDs reports whether ids and list name the same runs in the same order.
func sameIDs(ids [][]byte, list []string) bool {
	return slices.EqualFunc(ids, list, func(b []byte, s string) bool { return string(b) == s })
}

// recentRuns are the newest limits.recent_runs of the ended run attempts,
// newest activity first (activity, then the later attempt, then id): each attempt of a run is an
// entry of its own (docs/health-rules.md, "Attempts"). Packed straight from
// the runs (contract.RecentRuns), into the snapshot's block of bytes.
func (t *Tracker) recentRuns(ended []*state.Run) contract.RecentRuns {
	slices.SortFunc(ended, func(a, b *state.Run) int {
		return cmp.Or(cmp.Compare(activity(b), activity(a)), cmp.Compare(b.Attempt, a.Attempt), bytes.Compare(b.ID(), a.ID()))
	})
	for _, r := range ended[:min(len(ended), t.cfg.Limits.RecentRuns)] {
		var result, kill string
		if r.Result > 0 {
			result = state.ResultNames[r.Result-1]
		}
		if r.Kill > 0 {
			kill = state.KillReasonNames[r.Kill-1]
		}
		t.packer.Add(state.RunIDBytes(r.ID()), int(r.Attempt), result, kill, r.StartTS, r.EndTS)
	}
	return t.packer.DoneInto(t.bytes.take(t.packer.Len()))
}

// lastExit is how the worker's last incarnation ended, where the receiver
// said (nil: never).
func (w *Worker) lastExit() *contract.Exit {
	if w.exit == nil {
		return nil
	}
	return w.exit.Snapshot()
}

// activity is when a run attempt was last heard of: its claim, its end on
// either side.
func activity(r *state.Run) int64 { return max(r.WAt, r.WEnd, r.SEnd) }
