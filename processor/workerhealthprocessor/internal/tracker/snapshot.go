package tracker // import "github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/tracker"

import (
	"bytes"
	"cmp"
	"slices"
	"sort"

	"github.com/workerwatch/workerwatch/internal/contract"
	"github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/state"
)

// Snapshot builds the immutable view for the health extension.
func (t *Tracker) Snapshot(now int64) *contract.Snapshot {
	s := &contract.Snapshot{
		Time:    state.Time(now),
		Workers: make([]contract.Worker, 0, len(t.workers)),
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
	for _, w := range t.byID() {
		s.Fleet.ByState[w.State]++
		var wr, sr []string
		ended = ended[:0]
		for r := range w.Table.All() {
			// One string per held run, shared by both sides' lists (the
			// served snapshot keeps them for every worker).
			var id string
			if r.Has(state.RunWorkerHeld | state.RunSchedHeld) {
				id = state.RunID(r.ID())
			}
			if r.Has(state.RunWorkerHeld) {
				wr = append(wr, id)
			}
			if r.Has(state.RunSchedHeld) {
				sr = append(sr, id)
			}
			if r.Has(state.RunWorkerEnded) && !r.Has(state.RunReleased|state.RunLetGo) && r.WEnd > 0 {
				ended = append(ended, r)
			}
		}
		sort.Strings(wr)
		sort.Strings(sr)
		if slices.Equal(wr, sr) {
			sr = wr // both sides agree (most workers): one list, read-only as all of a snapshot
		}
		s.Workers = append(s.Workers, contract.Worker{
			ID: w.id, Name: w.Name, State: w.State,
			Reasons:  append([]contract.Reason{}, w.Reasons...),
			Since:    contract.Time(w.Since),
			LastSeen: contract.Time(w.LastAlive),
			Memory:   w.memory.Snapshot(t.mem),
			CPU:      w.cpu.Snapshot(),
			Runs: contract.Runs{
				Worker: nonNil(wr), Scheduler: nonNil(sr), Capacity: t.capacityOf(w),
				Recent: t.recentRuns(ended), Kills: w.kills.Snapshot(),
			},
			Drift: contract.Drift{
				Missing: nonNil(slices.Clone(w.Missing())), Orphaned: nonNil(slices.Clone(w.Orphaned())),
				MissingCount: w.MissN, OrphanedCount: w.OrphN, OverCapacity: w.OverCap,
			},
			Sources:     w.Identity.Snapshot(w.id, t.idPrefixes), //nolint:staticcheck // QF1008: named, it reads as the identity's part, not the worker's snapshot
			Incarnation: w.inc.Snapshot(),
			LastExit:    w.lastExit(),
		})
	}
	return s
}

// recentRuns are the newest limits.recent_runs of the ended run attempts,
// newest activity first (activity, then the later attempt, then id): each attempt of a run is an
// entry of its own (docs/health-rules.md, "Attempts"). Packed straight from
// the runs (contract.RecentRuns): one allocation a worker.
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
	return t.packer.Done()
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
