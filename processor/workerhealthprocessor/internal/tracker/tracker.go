package tracker // import "github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/tracker"

import (
	"strings"

	"github.com/workerwatch/workerwatch/internal/contract"
	"github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/mapping"
	"github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/state"
)

// worker is everything kept per worker: a composition of one state type per
// rule, each in its own file with what it applies, its reasons, its part of
// the snapshot and its checkpoint record. Kept small (docs/processor.md gives
// the measured size): ints rather than time.Time, lazily made slices.
//
// To add a per-worker fact: add it to the rule's type, and to its checkpoint
// record (a *Record type next to it, embedded in Record, checkpoint.go) if it must survive a
// restart.
type Worker struct {
	id string

	state.Identity               // internal/state/identity.go: name, when and by whom it was named
	state.Runs                   // internal/state/runs.go (+ runstate.go): its runs, claims, capacity
	state.Drift                  // internal/state/drift.go (+ drift.go): the scheduler's view and the drift between both views
	memory          state.Memory // internal/state/memory.go: memory and its episodes
	cpu             state.CPU    // internal/state/cpu.go: the CPU episode
	kills           state.Kills  // internal/state/kills.go: the kills and the kills rule
	state.Admission              // internal/state/admission.go: evidence level, admitted, unannounced
	listLinks                    // admission.go: place in the admission lists
	state.Verdict                // internal/state/verdict.go: state, since, reasons, hysteresis, transitions

	recycle state.Recycle // internal/state/recycle.go: pool children replaced after their run

	// inc is the current incarnation, exit how the last one ended (nil:
	// none seen) (incarnation.go, internal/state/incarnation.go).
	inc  state.CurrentIncarnation
	exit *state.Exit

	// checkpoint (checkpoint.go): its slot (-1 = none yet) and whether it
	// changed since it was last written.
	slot  int32
	dirty bool

	// sentSums and sentAt: the sums of the values of its series as last
	// delivered downstream, and when all were last sent (0: never), so that
	// an evaluation can leave out the series that have not changed (the
	// processor's resend_interval, emit.go). In memory only: after a
	// restart every worker is sent once.
	sentSums SeriesSums
	sentAt   int64
}

func newWorker(id string, now int64) *Worker {
	return &Worker{
		id:       strings.Clone(id),
		Identity: state.NewIdentity(now),
		Runs:     state.Runs{Capacity: -1},
		Drift:    state.Drift{Active: -1},
		memory:   state.NewMemory(),
		cpu:      state.NewCPU(),
		kills:    state.NewKills(),
		Verdict:  state.NewVerdict(now),
		slot:     -1,
	}
}

// setName takes a worker's name as a sender gave it, or as a checkpoint
// restored it (none: the name stands). A name that is the worker's id
// shares the id's string: the worker_process receiver's default when a
// worker is configured with a name only (its id is the name), so those
// workers keep no second copy.
func (w *Worker) setName(name string) {
	switch name {
	case "":
	case w.id:
		w.Name = w.id
	case w.Name:
	default:
		w.Name = strings.Clone(name)
	}
}

// tracker is all per-worker state of one processor instance. It is not
// safe for concurrent use: the processor holds its lock around every call.
type Tracker struct {
	cfg     *Config
	workers workerTable // workers.go
	last    *Worker     // the worker get returned last (nil after any removal)

	// stage and histogram state live in hists (fleet-wide, bounded by config).
	hists *state.Histograms

	pending       int64 // scheduler's pending gauge, -1 = none
	pendingAt     int64
	schedulerSeen int64 // last scheduler record: orphaned drift needs one

	// clusterPending: the pending gauge as another shard of a sharded
	// gateway reported it (the processor's cluster.go), -1 = none; at its snapshot time.
	clusterPending, clusterPendingAt int64

	// idle is the fleet's idle capacity at the last evaluation (the metric
	// and the snapshot of one tick show the same figure).
	idle             int64
	idleIntervals    int
	idleWhilePending bool

	// packer packs each worker's recent runs at a snapshot (snapshot.go).
	packer contract.RunPacker
	// bytes, strs and roles are the current snapshot's blocks (block.go).
	bytes block[byte]
	strs  block[string]
	roles block[contract.RoleMemory]
	// heldW and heldS: a worker's held run ids on each side, as Snapshot
	// lists them (scratch, reused from worker to worker).
	heldW, heldS [][]byte

	// lastEval: when the last evaluation ran; resumedAt: when the first
	// evaluation after a pause of the collector's own ran (judge.go), and
	// pause how long that pause was, until the processor takes it.
	lastEval, resumedAt, pause int64

	// admission and bounds (admission.go): the evaluations so far, the
	// workers not confirmed by evidence level, the runs tracked, the last
	// id refused (one refusal per resource), the workers promoted from seen
	// once since the last evaluation; counts read and reset by the
	// processor for its telemetry, as is malformed.
	evals       int
	low         [state.EvidenceConfirmed]workerList
	runCount    int
	share       int // runLimit's share of max_runs for shareOf workers
	shareOf     int
	lastRefused string
	fromOnce    []*Worker
	counts      AdmissionCounts
	malformed   int64
	// cp: the checkpoint's slots and the workers changed since it was
	// last written (checkpoint.go).
	cp cpSlots
	// healed: runs let go by side (drift.go), unjoinedN: workers reported
	// as named by one source only; read and reset by the processor.
	healed    [2]int64
	unjoinedN int64

	// kills is what the kills rule reads: its section and each reason's
	// effect (internal/state/kills.go).
	kills *state.KillRules
	// scheds are the scheduler sources, idKeys the worker id attributes
	// (both from the config), idPrefixes their "key=" for the snapshots.
	scheds     []mapping.Scheduler
	idKeys     []string
	idPrefixes *state.IDPrefixes
	// mem is what the memory rule reads (internal/state/memory.go), with
	// the interned role names.
	mem *state.MemRules
	// originAt: the last record of each source about any worker.
	originAt [state.NOrigins]int64
	// start is when the cumulative series began (checkpointed).
	start int64
	// exitDue: when the earliest root exit seen since the processor last
	// asked is due (TakeExitDue), 0 = none.
	exitDue int64
}

// New is the tracker of one processor instance.
func New(cfg *Config) *Tracker {
	t := &Tracker{
		cfg:     cfg,
		workers: newWorkerTable(),
		hists:   state.NewHistograms(cfg.HistogramBuckets, cfg.StageSpanNames),
		pending: -1,

		clusterPending: -1,
	}
	t.scheds, t.idKeys = cfg.Schedulers, cfg.IDKeys
	t.idPrefixes = state.NewIDPrefixes(cfg.IDKeys)
	t.mem = state.NewMemRules(&cfg.Memory, cfg.Lost.After)
	t.kills = state.NewKillRules(&cfg.Kills)
	return t
}

func (t *Tracker) capacityOf(w *Worker) int {
	if w.Capacity >= 0 {
		return int(w.Capacity)
	}
	if n, ok := t.cfg.Capacity.PerWorker[w.id]; ok {
		return n
	}
	return t.cfg.Capacity.Default
}

// apply folds one batch into the state.
func (t *Tracker) apply(b *mapping.Batch, now int64) {
	t.lastRefused = ""
	t.malformed += b.Malformed
	if b.SchedulerSeen {
		t.schedulerSeen = now
	}
	if b.Pending >= 0 {
		t.pending, t.pendingAt = b.Pending, now
	}
	for i := range b.Samples {
		t.applySample(&b.Samples[i], now)
	}
	for i := range b.Events {
		t.applyEvent(&b.Events[i], now)
	}
	t.lastRefused = "" // it points into the batch's pdata
}

func (t *Tracker) applySample(s *mapping.Sample, now int64) {
	ev := state.EvidenceOnce
	if s.Tree {
		ev = state.EvidenceConfirmed
	}
	w := t.get(s.Worker, now, ev)
	if w == nil {
		return
	}
	w.setName(s.Name)
	if s.Tree {
		t.seenBy(w, state.OriginTree, s.Key, now)
	} else {
		t.seenBy(w, state.OriginTelemetry, s.Key, now)
	}
	w.Fresh = true
	t.incarnation(w, &s.Inc, s.Tree, s.Present != 0, now)
	// A live process is evidence of life as much as the worker's own
	// telemetry: "lost" needs both silence and no process.
	if s.Present != 0 {
		w.LastAlive = now
	}
	// Kept in 32 bits: the mapping takes capacities and active counts
	// below 2^20 only (Clamp32 would clamp anything larger).
	if s.Capacity >= 0 {
		w.Capacity = state.Clamp32(s.Capacity)
	}
	if s.Active >= 0 {
		w.Active, w.ActiveAt = state.Clamp32(s.Active), now
	}
	if s.CgroupMax >= 0 {
		w.memory.SetCgroupMax(s.CgroupMax)
	}
	if s.CPULimit > 0 {
		w.cpu.SetLimit(s.CPULimit)
	}
	if s.Mem >= 0 {
		w.memory.Sample(s, now, t.mem)
	}
	if s.CPUMain >= 0 && t.cfg.CPU.Enabled {
		w.cpu.Sample(s.CPUMain, now, &t.cfg.CPU)
	}
	w.kills.Tree(s, now, t.kills)
}

func (t *Tracker) applyEvent(e *mapping.Event, now int64) {
	ev := state.EvidenceOnce
	if e.Src == mapping.SideScheduler {
		ev = state.EvidenceConfirmed
	}
	w := t.get(e.Worker, now, ev)
	if w == nil {
		return
	}
	if e.Src == mapping.SideScheduler {
		t.seenBy(w, state.OriginScheduler, e.Key, now)
		w.SchedKnown = true
		w.Sched = e.Sched
		if t.signOfLife(e) {
			// Not the worker's own view: still unknown without its
			// telemetry or tree, but not lost.
			w.LastAlive = now
		}
	}
	if e.Src == mapping.SideWorker {
		t.seenBy(w, state.OriginTelemetry, e.Key, now)
		w.Fresh = true
		w.LastAlive = now
		w.setName(e.Name)
		if e.Capacity >= 0 {
			w.Capacity = state.Clamp32(e.Capacity) // below 2^20 (the mapping's intAttr)
		}
	}
	switch e.Kind {
	case mapping.KindSeen:
		if e.Src == mapping.SideWorker {
			t.incarnation(w, &e.Inc, false, true, now)
		}
		return
	case mapping.KindHeartbeat:
		return
	case mapping.KindStage:
		t.hists.Stage(e.Stage, e.TS-e.StartTS)
		return
	case mapping.KindSnapshot:
		t.applySnapshot(w, e.SnapRuns, now)
		return
	case mapping.KindHeldCount:
		w.heldCount(e.Held, now)
		return
	}
	r := t.run(w, e.Run)
	if r == nil {
		return
	}
	if r = t.attempt(w, r, e); r == nil {
		return
	}
	if e.Src == mapping.SideScheduler {
		t.schedulerEvent(w, r, e, now)
		return
	}
	switch e.Kind {
	case mapping.KindClaimed:
		w.workerClaim(r, e.TS, now)
	case mapping.KindStarted:
		w.workerClaim(r, e.TS, now)
		t.workerStart(w, r, e.TS, now)
	case mapping.KindFinished, mapping.KindKilled, mapping.KindReleased:
		t.workerEnd(w, r, e, now)
	}
}

// signOfLife: a scheduler's record that shows the worker alive
// (scheduler.sign_of_life): a claims-only scheduler's claim (it is pulled: a
// claim exists because the worker just asked for work), or with "any" every
// record naming the worker (not a count, which a gauge keeps restating for a
// worker long gone).
func (t *Tracker) signOfLife(e *mapping.Event) bool {
	if int(e.Sched) >= len(t.scheds) {
		return false
	}
	switch src := &t.scheds[e.Sched]; src.Life {
	case mapping.LifeAny:
		return e.Kind != mapping.KindHeldCount
	case mapping.LifeClaims:
		return e.Kind == mapping.KindClaimed && src.View == contract.ViewClaimsOnly
	}
	return false
}

func (t *Tracker) schedulerEvent(w *Worker, r *state.Run, e *mapping.Event, now int64) {
	switch e.Kind {
	case mapping.KindClaimed, mapping.KindStarted:
		if r.Has(state.RunSchedEnded) || r.Has(state.RunSchedHeld) {
			return
		}
		if r.Has(state.RunWorkerEnded) && t.schedOf(w).View == contract.ViewClaimsOnly {
			// A late claim of a run the worker already ended: closed.
			return
		}
		r.Flags |= state.RunSchedHeld
		r.SAt = now
		w.Claims[mapping.SideScheduler]++
		if e.TS > 0 && (r.ClaimTS == 0 || e.TS < r.ClaimTS) {
			r.ClaimTS = e.TS
		}
	case mapping.KindFinished, mapping.KindKilled, mapping.KindReleased:
		if r.Has(state.RunSchedEnded) {
			return
		}
		release(r, mapping.SideScheduler, now)
	}
}
