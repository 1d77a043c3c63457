package workerhealthprocessor // import "github.com/workerwatch/workerwatch/processor/workerhealthprocessor"

import (
	"strings"

	"github.com/workerwatch/workerwatch/internal/contract"
)

// stateIndex maps states to array slots, in contract.AllStates order.
func stateIndex(s contract.State) int {
	for i, v := range contract.AllStates {
		if v == s {
			return i
		}
	}
	return len(contract.AllStates) - 1
}

// worker is everything kept per worker: a composition of one state type per
// rule, each in its own file with what it applies, its reasons, its part of
// the snapshot and its checkpoint record. Kept small (docs/processor.md gives
// the measured size): ints rather than time.Time, lazily made slices.
//
// To add a per-worker fact: add it to the rule's type, and to its checkpoint
// record (a cp* type next to it, embedded in cpWorker) if it must survive a
// restart.
type worker struct {
	id string

	identity   // identity.go: name, when and by whom it was named
	runsState  // runstate.go: its runs, claims, capacity
	driftState // drift.go: the scheduler's view and the drift between both views
	memState   // memory.go: memory and its episodes
	cpuState   // cpu.go: the CPU episode
	killState  // kills.go: the kills and the kills rule
	admission  // admission.go: evidence level and place in the admission lists
	verdict    // judge.go: state, since, reasons, hysteresis, transitions

	// checkpoint (checkpoint.go): its slot (-1 = none yet) and whether it
	// changed since it was last written.
	slot  int32
	dirty bool
}

func newWorker(id string, now int64) *worker {
	return &worker{
		id:         strings.Clone(id),
		identity:   identity{firstMention: now, lastMention: now},
		runsState:  runsState{capacity: -1},
		driftState: driftState{active: -1},
		memState:   memState{rss: -1, cgroupMax: -1},
		cpuState:   cpuState{cpuCores: -1, cpuLimit: -1},
		killState:  killState{oomBase: -1, exitMainBase: -1, exitChildBase: -1},
		verdict:    verdict{state: contract.Unknown, since: now},
		slot:       -1,
	}
}

// tracker is all per-worker state of one processor instance. It is not
// safe for concurrent use: the processor holds its lock around every call.
type tracker struct {
	cfg     *Config
	workers map[string]*worker
	last    *worker // the worker get returned last (nil after any removal)

	// stage and histogram state live in hists (fleet-wide, bounded by config).
	hists *histograms

	pending       int64 // scheduler's pending gauge, -1 = none
	pendingAt     int64
	schedulerSeen int64 // last scheduler record: orphaned drift needs one

	// clusterPending: the pending gauge as another shard of a sharded
	// gateway reported it (cluster.go), -1 = none; at its snapshot time.
	clusterPending, clusterPendingAt int64

	// idle is the fleet's idle capacity at the last evaluation (the metric
	// and the snapshot of one tick show the same figure).
	idle             int64
	idleIntervals    int
	idleWhilePending bool

	// admission and bounds (admission.go): the evaluations so far, the
	// workers not confirmed by evidence level, the runs tracked, the last
	// id refused (one refusal per resource), the workers promoted from seen
	// once since the last evaluation; counts read and reset by the
	// processor for its telemetry, as is malformed.
	evals       int
	low         [evidenceConfirmed]workerList
	runCount    int
	share       int // runLimit's share of max_runs for shareOf workers
	shareOf     int
	lastRefused string
	fromOnce    []*worker
	counts      admissionCounts
	malformed   int64
	// cp: the checkpoint's slots and the workers changed since it was
	// last written (checkpoint.go).
	cp cpSlots
	// healed: runs let go by side (drift.go), unjoinedN: workers reported
	// as named by one source only; read and reset by the processor.
	healed    [2]int64
	unjoinedN int64

	// effects: each kill reason's effect (kills.go).
	effects [nKillReasons]uint8
	// scheds are the scheduler sources, idKeys the worker id attributes,
	// roleLimits the roles with a soft limit (all from the config).
	scheds     []schedSource
	idKeys     []string
	roleLimits []roleLimit
	// originAt: the last record of each source about any worker.
	originAt [nOrigins]int64
	// roleNames interns process role names (memory.go).
	roleNames map[string]string
	// start is when the cumulative series began (checkpointed).
	start int64
}

func newTracker(cfg *Config) *tracker {
	t := &tracker{
		cfg:       cfg,
		workers:   map[string]*worker{},
		hists:     newHistograms(cfg.HistogramBuckets, cfg.Mapping.StageSpanNames),
		pending:   -1,
		roleNames: map[string]string{},

		clusterPending: -1,
	}
	t.scheds, t.idKeys, t.roleLimits = cfg.schedulers(), cfg.idKeys(), roleLimits(cfg)
	effects := defaultKillEffects()
	for r, e := range cfg.Kills.Effects {
		effects[r] = e
	}
	for r, e := range effects {
		if i, ok := killReasonIndex[r]; ok {
			t.effects[i], _ = effectIndex(e)
		}
	}
	return t
}

func (t *tracker) capacityOf(w *worker) int {
	if w.capacity >= 0 {
		return w.capacity
	}
	if n, ok := t.cfg.Capacity.PerWorker[w.id]; ok {
		return n
	}
	return t.cfg.Capacity.Default
}

// apply folds one batch into the state.
func (t *tracker) apply(b *batch, now int64) {
	t.lastRefused = ""
	t.malformed += b.malformed
	if b.schedulerSeen {
		t.schedulerSeen = now
	}
	if b.pending >= 0 {
		t.pending, t.pendingAt = b.pending, now
	}
	for i := range b.samples {
		t.applySample(&b.samples[i], now)
	}
	for i := range b.events {
		t.applyEvent(&b.events[i], now)
	}
	t.lastRefused = "" // it points into the batch's pdata
}

func (t *tracker) applySample(s *sample, now int64) {
	ev := evidenceOnce
	if s.tree {
		ev = evidenceConfirmed
	}
	w := t.get(s.worker, now, ev)
	if w == nil {
		return
	}
	if s.name != "" && w.name != s.name {
		w.name = strings.Clone(s.name)
	}
	if s.tree {
		t.seenBy(w, originTree, s.key, now)
	} else {
		t.seenBy(w, originTelemetry, s.key, now)
	}
	w.fresh = true
	// A live process is evidence of life as much as the worker's own
	// telemetry: "lost" needs both silence and no process.
	if s.present != 0 {
		w.lastAlive = now
	}
	if s.capacity >= 0 {
		w.capacity = s.capacity
	}
	if s.active >= 0 {
		w.active, w.activeAt = s.active, now
	}
	if s.cgroupMax >= 0 {
		w.cgroupMax = s.cgroupMax
	}
	if s.cpuLimit > 0 {
		w.cpuLimit = s.cpuLimit
	}
	if s.mem >= 0 {
		t.memorySample(w, s, now)
	}
	if s.cpuMain >= 0 && t.cfg.CPU.Enabled {
		t.cpuSample(w, s.cpuMain, now)
	}
	t.treeKills(w, s, now)
}

func (t *tracker) applyEvent(e *event, now int64) {
	ev := evidenceOnce
	if e.src == srcScheduler {
		ev = evidenceConfirmed
	}
	w := t.get(e.worker, now, ev)
	if w == nil {
		return
	}
	if e.src == srcScheduler {
		t.seenBy(w, originScheduler, e.key, now)
		w.schedKnown = true
		w.sched = e.sched
		if t.signOfLife(e) {
			// Not the worker's own view: still unknown without its
			// telemetry or tree, but not lost.
			w.lastAlive = now
		}
	}
	if e.src == srcWorker {
		t.seenBy(w, originTelemetry, e.key, now)
		w.fresh = true
		w.lastAlive = now
		if e.name != "" && w.name != e.name {
			w.name = strings.Clone(e.name)
		}
		if e.capacity >= 0 {
			w.capacity = e.capacity
		}
	}
	switch e.kind {
	case evSeen, evHeartbeat:
		return
	case evStage:
		t.hists.stage(e.stage, e.ts-e.startTS)
		return
	case evSnapshot:
		t.applySnapshot(w, e.snapRuns, now)
		return
	case evHeldCount:
		w.heldCount(e.held, now)
		return
	}
	r := t.run(w, e.run)
	if r == nil {
		return
	}
	if e.src == srcScheduler {
		t.schedulerEvent(w, r, e, now)
		return
	}
	switch e.kind {
	case evClaimed:
		t.workerClaim(w, r, e.ts, now)
	case evStarted:
		t.workerClaim(w, r, e.ts, now)
		t.workerStart(w, r, e.ts, now)
	case evFinished, evKilled, evReleased:
		if e.startTS > 0 {
			// A run span: its start is in the same record.
			t.workerClaim(w, r, e.startTS, now)
			t.workerStart(w, r, e.startTS, now)
		}
		// A kill is its own fact: the run's span (or a finished record) may
		// arrive first through another pipeline, and must not hide it.
		if e.kind == evKilled && !r.has(fKilled) {
			r.flags |= fKilled
			k := killIndex(e.killReason)
			r.kill = uint8(k + 1)
			t.kill(w, k, now)
		}
		if r.has(fWorkerEnded) {
			// A duplicate end (BullMQ's job span, which carries no result, and
			// the worker's record of the same end, which does, in either
			// order): the first that knows the result gives it.
			if r.result == 0 && e.result != "" {
				r.result = uint8(resultIndex(e.result) + 1)
			}
			return
		}
		r.flags = (r.flags | fWorkerEnded) &^ fWorkerHeld
		r.wEnd = now
		if t.schedOf(w).view == contract.ViewClaimsOnly && r.has(fSchedHeld) {
			// The scheduler sends no end: the worker's closes its claim.
			release(r, srcScheduler, now)
		}
		if e.kind == evReleased {
			r.flags |= fReleased
			return
		}
		r.endTS = e.ts
		if e.result != "" {
			r.result = uint8(resultIndex(e.result) + 1)
		}
		if r.has(fStarted) || e.kind == evKilled {
			// A run killed before it started still had its child killed
			// (OpenFn's engine starts the time limit at the hand-over).
			w.runEnded(now)
		}
		if r.startTS > 0 && e.ts >= r.startTS {
			t.hists.duration(e.result, e.ts-r.startTS)
		}
	}
}

// signOfLife: a scheduler's record that shows the worker alive
// (scheduler.sign_of_life): a claims-only scheduler's claim (it is pulled: a
// claim exists because the worker just asked for work), or with "any" every
// record naming the worker (not a count, which a gauge keeps restating for a
// worker long gone).
func (t *tracker) signOfLife(e *event) bool {
	if int(e.sched) >= len(t.scheds) {
		return false
	}
	switch src := &t.scheds[e.sched]; src.life {
	case lifeAny:
		return e.kind != evHeldCount
	case lifeClaims:
		return e.kind == evClaimed && src.view == contract.ViewClaimsOnly
	}
	return false
}

func (t *tracker) schedulerEvent(w *worker, r *run, e *event, now int64) {
	switch e.kind {
	case evClaimed, evStarted:
		if r.has(fSchedEnded) || r.has(fSchedHeld) {
			return
		}
		if r.has(fWorkerEnded) && t.schedOf(w).view == contract.ViewClaimsOnly {
			// A late claim of a run the worker already ended: closed.
			return
		}
		r.flags |= fSchedHeld
		r.sAt = now
		w.claims[srcScheduler]++
		if e.ts > 0 && (r.claimTS == 0 || e.ts < r.claimTS) {
			r.claimTS = e.ts
		}
	case evFinished, evKilled, evReleased:
		if r.has(fSchedEnded) {
			return
		}
		release(r, srcScheduler, now)
	}
}
