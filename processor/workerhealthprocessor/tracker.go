package workerhealthprocessor // import "github.com/workerwatch/workerwatch/processor/workerhealthprocessor"

import (
	"strings"

	"github.com/workerwatch/workerwatch/internal/contract"
)

// Run flags. One run entry holds both sides' view so drift is a comparison of
// two bits, and the "ended" bits are the tombstones that make late,
// duplicated and reordered events harmless.
const (
	fWorkerHeld uint16 = 1 << iota
	fWorkerEnded
	fSchedHeld
	fSchedEnded
	fStarted
	// fGone: pruned from the worker's runs; its entry in order is stale.
	fGone
	// fKilled: the worker reported the run killed (counted once).
	fKilled
	// fListed: listed by the snapshot being applied (only during it).
	fListed
	// fReleased: the worker's end was a release (not run: not a recent run).
	fReleased
	// fLetGo: a side was let go without an end (drift.go heal): not a
	// recent run either.
	fLetGo
)

// run is one run as both sides see it. Times are unix ns: *At are arrival
// times on the processor's clock (for grace periods), *TS the records' own.
type run struct {
	id         []byte // reused when an evicted run's memory takes a new run
	hash       uint64 // runHash(id)
	wAt, sAt   int64  // when each side's claim arrived
	wEnd, sEnd int64  // when each side's end arrived
	claimTS    int64  // earliest claim timestamp of either side
	startTS    int64
	endTS      int64 // the worker's end record's own timestamp
	flags      uint16
	result     uint8 // resultIndex + 1 of how it ended (0 = not ended or unknown)
	kill       uint8 // kill reason index + 1 (0 = not killed)
}

func (r *run) has(f uint16) bool { return r.flags&f != 0 }

// lastEnd is when the run last stopped being held by a side.
func (r *run) lastEnd() int64 { return max(r.wEnd, r.sEnd) }

// stateIndex maps states to array slots, in contract.AllStates order.
func stateIndex(s contract.State) int {
	for i, v := range contract.AllStates {
		if v == s {
			return i
		}
	}
	return len(contract.AllStates) - 1
}

// worker is everything kept per worker. Kept small (docs/processor.md gives
// the measured size): ints rather than time.Time, lazily made slices.
type worker struct {
	id, name string

	// firstMention: first record naming it (any source); lastMention: last
	// (drives expiry); lastAlive: last of its own telemetry or of its tree
	// with a live process (drives "lost"); fresh: own telemetry or tree since
	// start.
	firstMention, lastMention, lastAlive int64
	fresh                                bool
	// restoredAt: when it was restored from the checkpoint (0 = not).
	restoredAt int64

	// origins: which sources named it, when and by which id attributes.
	origins          [nOrigins]originSeen
	unjoinedReported bool

	// active: runs the worker itself reports holding (-1 = never reported),
	// at activeAt; heldOverSince: since when the runs tracked as held by the
	// worker exceed that count (0 = they do not).
	active                  int
	activeAt, heldOverSince int64

	// schedKnown: the scheduler has named this worker at least once. Only
	// then can its runs be orphaned: a worker no scheduler knows (one that
	// generates its own work, or is scheduled elsewhere) has no other view.
	// sched: the scheduler source that last named it.
	schedKnown bool
	sched      uint8
	// A "snapshots" scheduler's statements: snapKind says which form,
	// snapAt the last list, schedCount/schedCountAt the last count,
	// schedOverSince since when the runs it named exceed its count.
	snapKind                             uint8
	snapAt, schedCountAt, schedOverSince int64
	schedCount                           int
	countMissSince, countOrphSince       int64
	missN, orphN                         int
	missSince, orphSince                 int64

	capacity  int // reported by the worker, -1 = not reported
	rss       int64
	rssAt     int64
	cgroupMax int64

	// memory: the tree's episode and each role's (memory.go).
	mem   memEpisode
	roles []roleMem

	// cpu episode (cpu.go); cpuCores -1 = never judged, cpuLimit -1 = unknown.
	cpuCores float64
	cpuLimit float64
	cpuOver  int
	cpuUnder int
	cpuSat   bool
	cpuSince int64

	// kills (kills.go): the counted kills within kills.window, the episode's
	// start, the tree's cumulative counters' last values (-1 = none yet),
	// child exits not yet matched against run ends, run ends not yet
	// matched, the last tree sample.
	killLog                              []killRec
	killSince                            int64
	oomBase, exitMainBase, exitChildBase int64
	exitPend                             []exitRec
	endTimes                             []int64 // in arrival order, 0 = spent
	treeAt                               int64

	kills       [nKillReasons]int64 // cumulative by reason
	claims      [2]int64            // cumulative by source
	transitions [6]int64            // cumulative by state entered
	lastClaim   int64               // last claim by the worker itself

	runs runTable
	// order holds the runs in the order they were first seen, from
	// orderHead on (runs no longer tracked are skipped and compacted away):
	// at the per-worker cap the oldest ended run is evicted in amortized
	// O(1), not by a scan of every run for each new one.
	order     []*run
	orderHead int

	overCapSince int64

	// admission (admission.go): how much the processor knows it exists,
	// the evaluation it was admitted in, its place in the tracker's list of
	// its evidence level (not confirmed), and whether a state change while
	// it was seen once is still to be announced.
	evidence    evidence
	admitted    int
	prev, next  *worker
	unannounced bool

	// checkpoint (checkpoint.go): its slot (-1 = none yet) and whether it
	// changed since it was last written.
	slot  int32
	dirty bool

	state   contract.State
	since   int64
	reasons []contract.Reason
	better  int // consecutive evaluations that computed a better state

	// drift of the last evaluation, for metrics and the snapshot.
	missing, orphaned []string
	overCap           int
	heldW, heldS      int
}

func newWorker(id string, now int64) *worker {
	return &worker{
		id:            strings.Clone(id),
		firstMention:  now,
		lastMention:   now,
		capacity:      -1,
		active:        -1,
		rss:           -1,
		cgroupMax:     -1,
		cpuCores:      -1,
		cpuLimit:      -1,
		oomBase:       -1,
		exitMainBase:  -1,
		exitChildBase: -1,
		state:         contract.Unknown,
		since:         now,
		slot:          -1,
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

// run finds or creates the run entry. When the worker is at its limit, or
// the processor at limits.max_runs, the worker's oldest ended run makes
// room; a new run beyond it is counted and dropped (admission.go).
func (t *tracker) run(w *worker, id string) *run {
	h := runHash(id)
	r := w.runs.get(id, h)
	if r != nil {
		return r
	}
	perWorker := w.runs.len() >= t.runLimit(w)
	if perWorker || t.runCount >= t.cfg.Limits.MaxRuns {
		if r = t.evictEnded(w); r == nil {
			if perWorker {
				t.counts.runsRefused[refusedRunsPerWorker]++
			} else {
				t.counts.runsRefused[refusedRunsTotal]++
			}
			return nil
		}
		// The evicted run's memory, id bytes included, serves the new one.
		*r = run{id: r.id[:0]}
	} else {
		r = &run{}
		t.runCount++
	}
	r.id = append(r.id, id...)
	r.hash = h
	w.runs.put(r)
	w.order = append(w.order, r)
	return r
}

// evictEnded drops the oldest run that neither side holds any more and
// returns it; nil when every run is held. Held runs (about the capacity) are
// stepped over, so the cost does not grow with the runs tracked.
func (t *tracker) evictEnded(w *worker) *run {
	for i := w.orderHead; i < len(w.order); i++ {
		r := w.order[i]
		if r.has(fGone) {
			if i == w.orderHead {
				w.order[i] = nil
				w.orderHead++
			}
			continue
		}
		if r.has(fWorkerHeld) || r.has(fSchedHeld) {
			continue
		}
		w.runs.remove(r)
		// Drop order[i], keeping the entries before it in their order.
		copy(w.order[w.orderHead+1:i+1], w.order[w.orderHead:i])
		w.order[w.orderHead] = nil
		w.orderHead++
		w.compactOrder()
		return r
	}
	return nil
}

// compactOrder forgets the entries of runs no longer tracked once order is
// more than about twice the runs tracked, so it stays bounded by the run cap.
func (w *worker) compactOrder() {
	if len(w.order) <= 2*w.runs.len()+8 {
		return
	}
	n := 0
	for _, r := range w.order[w.orderHead:] {
		if r != nil && !r.has(fGone) {
			w.order[n] = r
			n++
		}
	}
	clear(w.order[n:])
	w.order, w.orderHead = w.order[:n], 0
}

// workerClaim: the worker holds the run. Ignored once the worker ended it (a
// late or duplicated claim), counted once.
func (t *tracker) workerClaim(w *worker, r *run, ts, now int64) {
	w.lastClaim = now
	if r.has(fWorkerEnded) || r.has(fWorkerHeld) {
		return
	}
	r.flags |= fWorkerHeld
	r.wAt = now
	w.claims[srcWorker]++
	if ts > 0 && (r.claimTS == 0 || ts < r.claimTS) {
		r.claimTS = ts
	}
}

func (t *tracker) workerStart(w *worker, r *run, ts, now int64) {
	if r.has(fStarted) || r.has(fWorkerEnded) {
		return
	}
	r.flags |= fStarted
	r.startTS = ts
	if r.claimTS > 0 && ts >= r.claimTS {
		t.hists.claimToStart(ts - r.claimTS)
	}
	// Scoot's rule: memory already over the soft limit when a run starts.
	t.memoryAtRunStart(w, now)
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
