package workerhealthprocessor // import "github.com/workerwatch/workerwatch/processor/workerhealthprocessor"

import (
	"strings"

	"github.com/workerwatch/workerwatch/internal/contract"
)

// Run flags. One run entry holds both sides' view so drift is a comparison of
// two bits, and the "ended" bits are the tombstones that make late,
// duplicated and reordered events harmless.
const (
	fWorkerHeld uint8 = 1 << iota
	fWorkerEnded
	fSchedHeld
	fSchedEnded
	fStarted
	// fGone: pruned from the worker's runs; its entry in order is stale.
	fGone
	// fKilled: the worker reported the run killed (counted once).
	fKilled
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
	flags      uint8
}

func (r *run) has(f uint8) bool { return r.flags&f != 0 }

// lastEnd is when the run last stopped being held by a side.
func (r *run) lastEnd() int64 { return max(r.wEnd, r.sEnd) }

// The kill reason index: fixed so per-worker kill counters are an array. The
// reasons of the contract, "other" last for anything else, so a misbehaving
// worker cannot explode the kills metric's cardinality.
var killReasonNames = contract.KillReasons

const killOther = len(killReasonNames) - 1

// killReasons are the reasons a config may name (all but "other").
var killReasons = killReasonNames[:killOther]

var killReasonIndex = func() map[string]int {
	m := make(map[string]int, len(killReasonNames))
	for i, r := range killReasonNames {
		m[r] = i
	}
	return m
}()

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
// the measured size): ints rather than time.Time, a lazily created kill ring.
type worker struct {
	id, name string

	// firstMention: first record naming it (either side); lastMention: last
	// (drives expiry); lastAlive: last of its own telemetry that did not say
	// the process is gone (drives "lost"); fresh: own telemetry since start.
	firstMention, lastMention, lastAlive int64
	fresh                                bool

	// active: runs the worker itself reports holding (-1 = never reported),
	// at activeAt; heldOverSince: since when the runs tracked as held by the
	// worker exceed that count (0 = they do not).
	active                  int
	activeAt, heldOverSince int64

	// schedKnown: the scheduler has named this worker at least once. Only
	// then can its runs be orphaned: a worker no scheduler knows (one that
	// generates its own work, or is scheduled elsewhere) has no other view.
	schedKnown bool

	capacity  int // reported by the worker, -1 = not reported
	rss       int64
	rssAt     int64
	cgroupMax int64

	// memory episode
	memOver       bool
	overSamples   int
	underSamples  int
	overSince     int64
	memLatched    bool
	memLatchCode  string
	memLatchSince int64

	// cpu episode
	cpuCores float64
	cpuOver  int
	cpuUnder int
	cpuSat   bool
	cpuSince int64

	// kills: the last kills.count kill times (a ring), enough to know whether
	// kills.count fell within kills.window.
	killRing []int64
	killNext int

	kills       [6]int64 // cumulative by reason
	claims      [2]int64 // cumulative by source
	transitions [6]int64 // cumulative by state entered
	lastClaim   int64    // last claim by the worker itself

	runs runTable
	// order holds the runs in the order they were first seen, from
	// orderHead on (runs no longer tracked are skipped and compacted away):
	// at the per-worker cap the oldest ended run is evicted in amortized
	// O(1), not by a scan of every run for each new one.
	order     []*run
	orderHead int

	overCapSince int64

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
		id:           strings.Clone(id),
		firstMention: now,
		lastMention:  now,
		capacity:     -1,
		active:       -1,
		rss:          -1,
		cgroupMax:    -1,
		state:        contract.Unknown,
		since:        now,
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

	// idle is the fleet's idle capacity at the last evaluation (the metric
	// and the snapshot of one tick show the same figure).
	idle             int64
	idleIntervals    int
	idleWhilePending bool

	// overflow accounting, read and reset by the processor for telemetry
	overflowWorkers, overflowRuns, expired, malformed int64

	// killCounts: the kill reasons (by index) that feed the kills rule.
	killCounts [len(killReasonNames)]bool
}

func newTracker(cfg *Config) *tracker {
	t := &tracker{
		cfg:     cfg,
		workers: map[string]*worker{},
		hists:   newHistograms(cfg.HistogramBuckets, cfg.Mapping.StageSpanNames),
		pending: -1,
	}
	for _, r := range cfg.Kills.Reasons {
		if i, ok := killReasonIndex[r]; ok {
			t.killCounts[i] = true
		}
	}
	return t
}

// get returns the worker, creating it unless the limit is reached.
func (t *tracker) get(id string, now int64) *worker {
	// A batch's events come grouped by resource, so most are the previous
	// event's worker: a string compare instead of a map lookup.
	if w := t.last; w != nil && w.id == id {
		w.lastMention = now
		return w
	}
	if w, ok := t.workers[id]; ok {
		w.lastMention = now
		t.last = w
		return w
	}
	if len(t.workers) >= t.cfg.Limits.MaxWorkers {
		t.overflowWorkers++
		return nil
	}
	w := newWorker(id, now)
	t.workers[w.id] = w
	t.last = w
	return w
}

// softLimit is the effective soft limit in bytes (0 = none).
func (t *tracker) softLimit(w *worker) int64 {
	lim := t.cfg.Memory.SoftLimitBytes
	if t.cfg.Memory.SoftLimitRatio > 0 && w.cgroupMax > 0 {
		r := int64(t.cfg.Memory.SoftLimitRatio * float64(w.cgroupMax))
		if lim == 0 || r < lim {
			lim = r
		}
	}
	return lim
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
}

func (t *tracker) applySample(s *sample, now int64) {
	w := t.get(s.worker, now)
	if w == nil {
		return
	}
	if s.name != "" && w.name != s.name {
		w.name = strings.Clone(s.name)
	}
	w.fresh = true
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
	if s.mem >= 0 {
		t.memorySample(w, s.mem, now)
	}
	if s.cpuMain >= 0 && t.cfg.CPU.Enabled {
		t.cpuSample(w, s.cpuMain*float64(t.cfg.CPU.NumCPUs), now)
	}
}

// memorySample advances the memory episode: N samples (or a duration) over
// the soft limit latch "unhealthy"; only RecoverySamples samples under
// RecoveryRatio of the limit end the episode, so it cannot flap at the edge.
func (t *tracker) memorySample(w *worker, rss, now int64) {
	w.rss, w.rssAt = rss, now
	lim := t.softLimit(w)
	if lim <= 0 {
		w.memOver, w.overSamples, w.underSamples = false, 0, 0
		w.memLatched = false
		return
	}
	m := &t.cfg.Memory
	if rss > lim {
		if !w.memOver {
			w.overSince = now
		}
		w.memOver = true
		w.overSamples++
		w.underSamples = 0
		if !w.memLatched && (w.overSamples >= m.UnhealthySamples || (m.UnhealthyAfter > 0 && now-w.overSince >= int64(m.UnhealthyAfter))) {
			w.latchMemory(codeMemory, w.overSince)
		}
		return
	}
	w.memOver = false
	w.overSamples = 0
	if float64(rss) < m.RecoveryRatio*float64(lim) {
		w.underSamples++
		if w.underSamples >= m.RecoverySamples {
			w.memLatched = false
		}
	} else {
		// Between the recovery threshold and the limit: neither over nor
		// recovered, the episode (if any) holds.
		w.underSamples = 0
	}
}

func (w *worker) latchMemory(code string, since int64) {
	w.memLatched = true
	w.memLatchCode = code
	w.memLatchSince = since
	w.underSamples = 0
}

func (t *tracker) cpuSample(w *worker, cores float64, now int64) {
	c := &t.cfg.CPU
	w.cpuCores = cores
	switch {
	case cores >= c.SaturationCores:
		if w.cpuOver == 0 && !w.cpuSat {
			w.cpuSince = now
		}
		w.cpuOver++
		w.cpuUnder = 0
		if w.cpuOver >= c.Samples {
			w.cpuSat = true
		}
	case cores < c.RecoveryCores:
		w.cpuOver = 0
		w.cpuUnder++
		if w.cpuUnder >= c.RecoverySamples {
			w.cpuSat = false
		}
	default:
		w.cpuOver, w.cpuUnder = 0, 0
	}
}

func (t *tracker) applyEvent(e *event, now int64) {
	w := t.get(e.worker, now)
	if w == nil {
		return
	}
	if e.src == srcScheduler {
		w.schedKnown = true
	}
	if e.src == srcWorker {
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
			t.kill(w, e.killReason, now)
		}
		if r.has(fWorkerEnded) {
			return // duplicate end
		}
		r.flags = (r.flags | fWorkerEnded) &^ fWorkerHeld
		r.wEnd = now
		if e.kind == evReleased {
			return
		}
		if r.startTS > 0 && e.ts >= r.startTS {
			t.hists.duration(e.result, e.ts-r.startTS)
		}
	}
}

// run finds or creates the run entry. When the worker is at its cap, ended
// runs are evicted first; a new run beyond it is counted and dropped.
func (t *tracker) run(w *worker, id string) *run {
	h := runHash(id)
	r := w.runs.get(id, h)
	if r != nil {
		return r
	}
	if w.runs.len() >= t.cfg.Limits.MaxRunsPerWorker {
		if r = t.evictEnded(w); r == nil {
			t.overflowRuns++
			return nil
		}
		// The evicted run's memory, id bytes included, serves the new one.
		*r = run{id: r.id[:0]}
	} else {
		r = &run{}
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
	// Scoot's rule: memory already over the soft limit when a run starts. Only
	// a recent sample counts: an old one says nothing about now.
	if t.cfg.Memory.AtRunStart && w.rss >= 0 && now-w.rssAt <= int64(t.cfg.Lost.After) {
		if lim := t.softLimit(w); lim > 0 && w.rss > lim && !w.memLatched {
			w.latchMemory(codeMemoryAtStart, now)
		}
	}
}

func (t *tracker) schedulerEvent(w *worker, r *run, e *event, now int64) {
	switch e.kind {
	case evClaimed, evStarted:
		if r.has(fSchedEnded) || r.has(fSchedHeld) {
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
		r.flags = (r.flags | fSchedEnded) &^ fSchedHeld
		r.sEnd = now
	}
}

// kill counts a kill; reasons in kills.reasons feed the kills rule.
func (t *tracker) kill(w *worker, reason string, now int64) {
	idx, ok := killReasonIndex[reason]
	if !ok {
		idx = killOther
	}
	w.kills[idx]++
	if t.cfg.Kills.Count <= 0 || !t.killCounts[idx] {
		return
	}
	if w.killRing == nil {
		w.killRing = make([]int64, t.cfg.Kills.Count)
	}
	w.killRing[w.killNext] = now
	w.killNext = (w.killNext + 1) % len(w.killRing)
}
