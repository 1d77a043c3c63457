package workerhealthextension // import "github.com/workerwatch/workerwatch/extension/workerhealthextension"

import (
	"math"
	"slices"
	"sync"
	"time"

	"github.com/workerwatch/workerwatch/internal/contract"
)

// The history behind the worker page and /health/workers/{id}/history: per
// worker, a fixed ring of samples (one per history.resolution, the last
// window of memory per role against the soft limits, main-process CPU, runs
// held by each view and capacity, state) and a small ring of state
// transitions with their reasons. It is fed from the snapshots the extension
// already receives, by the drain goroutine, so it costs the processor
// nothing. Sizes are fixed so memory per worker is bounded and known:
// docs/http-api.md gives the figure and TestHistoryMemory measures it.

const (
	// historyRoles is how many roles per worker the history keeps: main,
	// child and two configured roles. Further roles are left out of the
	// history (the worker's own JSON still has every role).
	historyRoles = 4
	// historyTransitions is how many state transitions per worker are kept.
	historyTransitions = 16
	// transitionReasons is how many reasons a transition keeps.
	transitionReasons = 3
)

// sample is one worker at one time. Byte counts are KiB in 32 bits (up to
// 4 TiB; RSS is a whole number of pages, so KiB lose nothing) and CPU is 32-bit
// float: 64 bytes a sample instead of 104.
type sample struct {
	at                                  int64 // unix milliseconds of the snapshot
	rssKiB                              uint32
	softKiB                             uint32
	roleRSS                             [historyRoles]uint32 // KiB, by slot (workerHistory.roles)
	roleSoft                            [historyRoles]uint32
	cpuMain                             float32 // cores; -1: not reported
	cpuLimit                            float32 // CPUs; 0: unknown
	runsWorker, runsScheduler, capacity uint16
	state                               uint8 // stateCode
	roleMask                            uint8 // which role slots the sample has
}

type transitionReason struct {
	code             string
	value, threshold float64
}

// transition is a change of state, at the time the processor says the new
// state began (Worker.Since) when it says so.
type transition struct {
	at       int64 // unix milliseconds
	from, to uint8 // stateCode; from 0: first seen
	nReasons uint8
	reasons  [transitionReasons]transitionReason
}

// workerHistory is one worker's rings. samples grows up to the ring size
// (so a worker seen briefly costs little) and then wraps at next.
type workerHistory struct {
	samples []sample
	next    int
	roles   [historyRoles]string
	trans   []transition
	tnext   int
	// state is the state last recorded (0: none yet).
	state uint8
	// inView: the worker was in a served view since the extension started.
	// A worker restored from storage that is not (yet) is kept for one
	// window; one that left the view is dropped at once.
	inView bool
	// For storage (history_storage.go): how many of the newest samples are
	// not written yet, whether the transitions changed, and whether the
	// worker has keys in storage.
	unsaved    int
	transDirty bool
	persisted  bool
}

// stateCode numbers the states for the rings: index in AllStates plus one.
func stateCode(s contract.State) uint8 {
	if i := slices.Index(contract.AllStates, s); i >= 0 {
		return uint8(i + 1)
	}
	return 0
}

func stateOf(c uint8) contract.State {
	if c == 0 || int(c) > len(contract.AllStates) {
		return ""
	}
	return contract.AllStates[c-1]
}

// historyStore holds every worker's history. The drain goroutine writes
// (record, retain) under the write lock, once per snapshot; pages and the
// JSON copy a worker's rings out under the read lock.
type historyStore struct {
	window     time.Duration
	resolution time.Duration
	size       int // samples per worker: window / resolution

	mu   sync.RWMutex
	byID map[string]*workerHistory
	// codes interns reason codes: a handful of distinct strings shared by
	// every transition instead of a copy each.
	codes map[string]string
	// persist is the storage behind the history; nil without one.
	persist *historyPersistence
	// first is the time of the oldest sample ever recorded (unix ms; 0:
	// none): the pages show less than the window while it is younger.
	first int64
}

func newHistoryStore(window, resolution time.Duration) *historyStore {
	return &historyStore{
		window:     window,
		resolution: resolution,
		size:       historySize(window, resolution),
		byID:       map[string]*workerHistory{},
		codes:      map[string]string{},
	}
}

func historySize(window, resolution time.Duration) int {
	return max(1, int((window+resolution-1)/resolution))
}

// recordView adds the workers of the snapshots just indexed (srcs) to their
// histories, then drops the histories of workers no longer served. Only the
// entry the view serves is recorded, so with two processors listing one
// worker the history follows the API's answer.
func (hs *historyStore) recordView(v *view, srcs []*sourceIndex) {
	hs.mu.Lock()
	defer hs.mu.Unlock()
	for _, si := range srcs {
		at := si.snap.Time.UnixMilli()
		for _, e := range si.order {
			if v.byID[e.w.ID] == e {
				hs.record(e.w, at)
			}
		}
	}
	hs.retain(v, time.Now().Add(-hs.window).UnixMilli())
}

func (hs *historyStore) record(w *contract.Worker, at int64) {
	if hs.first == 0 || at < hs.first {
		hs.first = at
	}
	h := hs.byID[w.ID]
	if h == nil {
		h = &workerHistory{}
		hs.byID[w.ID] = h
	}
	h.inView = true
	s := sample{
		at:            at,
		rssKiB:        kib(w.Memory.RSSBytes),
		softKiB:       kib(w.Memory.SoftLimitBytes),
		cpuMain:       float32(w.CPU.MainCores),
		cpuLimit:      float32(w.CPU.LimitCPUs),
		runsWorker:    clamp16(len(w.Runs.Worker)),
		runsScheduler: clamp16(len(w.Runs.Scheduler)),
		capacity:      clamp16(w.Runs.Capacity),
		state:         stateCode(w.State),
	}
	for _, r := range w.Memory.Roles {
		if i := h.slot(r.Role); i >= 0 {
			s.roleRSS[i], s.roleSoft[i] = kib(r.RSSBytes), kib(r.SoftLimitBytes)
			s.roleMask |= 1 << i
		}
	}
	h.add(s, hs.resolution.Milliseconds(), hs.size)
	if s.state != h.state {
		h.transition(w, s.state, at, hs.intern)
	}
}

// slot is the role's slot, taking a free one for a new role; -1 when the
// slots are full.
func (h *workerHistory) slot(role string) int {
	for i, r := range h.roles {
		if r == role {
			return i
		}
		if r == "" {
			h.roles[i] = role
			return i
		}
	}
	return -1
}

// add appends s, or replaces the last sample when s falls in the same
// resolution step (a processor evaluating more often than the resolution
// updates the step's sample rather than pushing older ones out).
func (h *workerHistory) add(s sample, res int64, size int) {
	if n := len(h.samples); n > 0 {
		last := &h.samples[h.lastIndex(size)]
		switch {
		case s.at < last.at:
			return // out of order: the view never goes back, nor does history
		case s.at/res == last.at/res:
			*last = s
			h.unsaved = max(h.unsaved, 1)
			return
		}
	}
	h.unsaved = min(h.unsaved+1, size)
	if len(h.samples) < size {
		if len(h.samples) == cap(h.samples) {
			// Grow by doubling, but never past the ring size: append
			// would round a 180-sample ring up to 256.
			grown := make([]sample, len(h.samples), min(size, max(8, 2*cap(h.samples))))
			copy(grown, h.samples)
			h.samples = grown
		}
		h.samples = append(h.samples, s)
		return
	}
	h.samples[h.next] = s
	h.next = (h.next + 1) % size
}

func (h *workerHistory) lastIndex(size int) int {
	if len(h.samples) < size {
		return len(h.samples) - 1
	}
	return (h.next + size - 1) % size
}

func (h *workerHistory) transition(w *contract.Worker, to uint8, at int64, intern func(string) string) {
	t := transition{at: at, from: h.state, to: to}
	// The processor knows when the state began; a snapshot only shows it
	// at the next evaluation.
	if since := w.Since.UnixMilli(); !w.Since.IsZero() && since <= at && (len(h.trans) == 0 || since >= h.lastTransition().at) {
		t.at = since
	}
	for _, r := range w.Reasons {
		if int(t.nReasons) == transitionReasons {
			break
		}
		t.reasons[t.nReasons] = transitionReason{code: intern(r.Code), value: r.Value, threshold: r.Threshold}
		t.nReasons++
	}
	h.state, h.transDirty = to, true
	if len(h.trans) < historyTransitions {
		if h.trans == nil {
			h.trans = make([]transition, 0, 2)
		}
		h.trans = append(h.trans, t)
		return
	}
	h.trans[h.tnext] = t
	h.tnext = (h.tnext + 1) % historyTransitions
}

func (h *workerHistory) lastTransition() transition {
	if len(h.trans) < historyTransitions {
		return h.trans[len(h.trans)-1]
	}
	return h.trans[(h.tnext+historyTransitions-1)%historyTransitions]
}

// retain drops the history of every worker the view no longer serves: at
// once when it was served since start, after a window when it only came
// from storage (the processor may not have reported it again yet).
func (hs *historyStore) retain(v *view, horizon int64) {
	for id, h := range hs.byID {
		if v.byID[id] != nil {
			continue
		}
		if h.inView || len(h.samples) == 0 || h.samples[h.lastIndex(hs.size)].at < horizon {
			delete(hs.byID, id)
			if p := hs.persist; p != nil && h.persisted {
				p.removed[id] = max(p.ids[id], (len(h.samples)+historyGroup-1)/historyGroup)
			}
		}
	}
}

// workerSeries is a copy of one worker's history, oldest first, from
// since on: what the page and the JSON render, without holding the lock.
type workerSeries struct {
	roles       []string // the role slots in use, in slot order
	samples     []sample
	transitions []transition
}

// series copies id's history from since on; empty when there is none.
func (hs *historyStore) series(id string, since time.Time) workerSeries {
	hs.mu.RLock()
	defer hs.mu.RUnlock()
	h := hs.byID[id]
	if h == nil {
		return workerSeries{}
	}
	from := since.UnixMilli()
	var ws workerSeries
	for _, r := range h.roles {
		if r != "" {
			ws.roles = append(ws.roles, r)
		}
	}
	ws.samples = make([]sample, 0, len(h.samples))
	for i := range h.samples {
		s := h.samples[(h.next+i)%len(h.samples)]
		if s.at >= from {
			ws.samples = append(ws.samples, s)
		}
	}
	ws.transitions = make([]transition, 0, len(h.trans))
	for i := range h.trans {
		t := h.trans[(h.tnext+i)%len(h.trans)]
		// A transition older than the window is still the one that
		// explains the current state: keep it when it is the last.
		if t.at >= from || i == len(h.trans)-1 {
			ws.transitions = append(ws.transitions, t)
		}
	}
	return ws
}

// minSpan is the shortest time the pages draw: a history younger than the
// window is drawn over its own age, but not over less than this.
const minSpan = 2 * time.Minute

// span is the time the pages draw, ending at now: the window, or while the
// history is younger than that (the collector just started), its age, so
// the first minutes are not squeezed into the right edge of a half-hour.
func (hs *historyStore) span(now time.Time) time.Duration {
	hs.mu.RLock()
	first := hs.first
	hs.mu.RUnlock()
	if first == 0 {
		return hs.window
	}
	age := now.Sub(time.UnixMilli(first)) + hs.resolution
	return min(hs.window, max(age, min(minSpan, hs.window)))
}

// trend is the tree memory of each worker in ids over the span ending at
// now, as points buckets (the largest sample in each, -1 where none): the
// fleet page's sparkline. One lock for all of them; nil for a worker
// without history.
func (hs *historyStore) trend(ids []string, now time.Time, points int) [][]int64 {
	out := make([][]int64, len(ids))
	span := hs.span(now)
	from := now.Add(-span).UnixMilli()
	step := max(1, span.Milliseconds()/int64(points))
	hs.mu.RLock()
	defer hs.mu.RUnlock()
	for i, id := range ids {
		h := hs.byID[id]
		if h == nil || len(h.samples) == 0 {
			continue
		}
		t := make([]int64, points)
		for j := range t {
			t[j] = -1
		}
		for _, s := range h.samples {
			b := (s.at - from) / step
			if s.at < from || b >= int64(points) {
				continue
			}
			t[b] = max(t[b], int64(s.rssKiB)<<10)
		}
		out[i] = t
	}
	return out
}

func kib(b int64) uint32 {
	if b <= 0 {
		return 0
	}
	return uint32(min((b+1023)>>10, math.MaxUint32))
}

func clamp16(n int) uint16 { return uint16(min(max(n, 0), math.MaxUint16)) }

func (hs *historyStore) intern(c string) string {
	if s, ok := hs.codes[c]; ok {
		return s
	}
	if len(hs.codes) >= 1024 { // codes are a fixed vocabulary; do not grow on garbage
		return c
	}
	hs.codes[c] = c
	return c
}
