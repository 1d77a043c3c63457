// Package history keeps what the worker pages and /health/workers/{id}/history
// show of each worker: a fixed ring of samples and a small ring of state
// transitions, fed from the snapshots the extension serves, optionally kept
// in a storage extension across restarts (storage.go, codec.go). It knows
// the contract's Worker and nothing of HTTP or of the view that feeds it.
package history // import "github.com/workerwatch/workerwatch/extension/workerhealthextension/internal/history"

import (
	"iter"
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
	Roles = 4
	// historyTransitions is how many state transitions per worker are kept.
	Transitions = 16
	// transitionReasons is how many reasons a transition keeps.
	TransitionReasons = 3
)

// Sample is one worker at one time. Byte counts are KiB in 32 bits (up to
// 4 TiB; RSS is a whole number of pages, so KiB lose nothing) and CPU is 32-bit
// float: 64 bytes a sample instead of 104.
type Sample struct {
	At                                  int64 // unix milliseconds of the snapshot
	RSSKiB                              uint32
	SoftKiB                             uint32
	RoleRSS                             [Roles]uint32 // KiB, by slot (Series.Roles)
	RoleSoft                            [Roles]uint32
	CPUMain                             float32 // cores; -1: not reported
	CPULimit                            float32 // CPUs; 0: unknown
	RunsWorker, RunsScheduler, Capacity uint16
	State                               uint8 // StateOf gives the state
	RoleMask                            uint8 // which role slots the sample has
}

// TransitionReason is one reason a transition kept.
type TransitionReason struct {
	Code             string
	Value, Threshold float64
}

// Transition is a change of state, at the time the processor says the new
// state began (Worker.Since) when it says so.
type Transition struct {
	At       int64 // unix milliseconds
	From, To uint8 // StateOf gives the state; From 0: first seen
	NReasons uint8
	Reasons  [TransitionReasons]TransitionReason
}

// workerHistory is one worker's rings. samples grows up to the ring size
// (so a worker seen briefly costs little) and then wraps at next.
type workerHistory struct {
	// chunks are the ring's slots, packed chunkSamples to a chunk
	// (packed.go); n of them hold a sample.
	chunks [][]byte
	n      int
	next   int
	roles  [Roles]string
	trans  []Transition
	tnext  int
	// state is the state last recorded (0: none yet).
	state uint8
	// inView: the worker was in a served view since the extension started.
	// A worker restored from storage that is not (yet) is kept for one
	// window; one that left the view is dropped at once.
	inView bool
	// gen is the last update whose view served the worker (Store.gen);
	// in the padding after state and inView.
	gen uint32
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

// StateOf is the state a Sample or Transition code stands for; "" for 0.
func StateOf(c uint8) contract.State {
	if c == 0 || int(c) > len(contract.AllStates) {
		return ""
	}
	return contract.AllStates[c-1]
}

// Store holds every worker's history. The drain goroutine writes
// (record, retain) under the write lock, once per snapshot; pages and the
// JSON copy a worker's rings out under the read lock.
type Store struct {
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
	// gen counts the updates: a worker whose history has the current one
	// (workerHistory.gen) is served by the view of this update.
	gen uint32
}

// New is an empty history of window / resolution samples per worker.
func New(window, resolution time.Duration) *Store {
	return &Store{
		window:     window,
		resolution: resolution,
		size:       Size(window, resolution),
		byID:       map[string]*workerHistory{},
		codes:      map[string]string{},
	}
}

// Size is how many samples a worker's ring holds: 0 when the window is 0
// (the history is off).
func Size(window, resolution time.Duration) int {
	if window <= 0 {
		return 0
	}
	return max(1, int((window+resolution-1)/resolution))
}

// Off is true when the history keeps nothing (history::window: 0).
func (hs *Store) Off() bool { return hs.size == 0 }

// Window is how far back the history goes (history.window).
func (hs *Store) Window() time.Duration { return hs.window }

// Resolution is the time between two samples of a worker (history.resolution).
func (hs *Store) Resolution() time.Duration { return hs.resolution }

// Update adds the workers of the snapshots just indexed to their histories
// (fresh yields each served worker with its snapshot's time, unix ms), then
// drops the histories of workers the API no longer serves: those neither
// fresh nor in also (the ids of the other workers the view serves, those of
// sources that did not publish since; nil: none). The caller passes only
// the copy of a worker the API serves, so with two processors listing one
// worker the history follows the API's answer. Served workers are marked
// with the update's number as they go by rather than looked up in the view
// afterwards: the view keeps no map of its ids.
func (hs *Store) Update(fresh iter.Seq2[int64, *contract.Worker], also iter.Seq[string]) {
	if hs.Off() {
		return
	}
	hs.mu.Lock()
	defer hs.mu.Unlock()
	hs.gen++
	for at, w := range fresh {
		hs.record(w, at)
	}
	if also != nil {
		for id := range also {
			if h := hs.byID[id]; h != nil {
				h.gen = hs.gen
			}
		}
	}
	hs.retain(time.Now().Add(-hs.window).UnixMilli())
}

func (hs *Store) record(w *contract.Worker, at int64) {
	if hs.first == 0 || at < hs.first {
		hs.first = at
	}
	h := hs.byID[w.ID]
	if h == nil {
		h = &workerHistory{}
		hs.byID[w.ID] = h
	}
	h.inView, h.gen = true, hs.gen
	s := Sample{
		At:            at,
		RSSKiB:        kib(w.Memory.RSSBytes),
		SoftKiB:       kib(w.Memory.SoftLimitBytes),
		CPUMain:       float32(w.CPU.MainCores),
		CPULimit:      float32(w.CPU.LimitCPUs),
		RunsWorker:    clamp16(len(w.Runs.Worker)),
		RunsScheduler: clamp16(len(w.Runs.Scheduler)),
		Capacity:      clamp16(w.Runs.Capacity),
		State:         stateCode(w.State),
	}
	for _, r := range w.Memory.Roles {
		if i := h.slot(r.Role); i >= 0 {
			s.RoleRSS[i], s.RoleSoft[i] = kib(r.RSSBytes), kib(r.SoftLimitBytes)
			s.RoleMask |= 1 << i
		}
	}
	h.add(s, hs.resolution.Milliseconds(), hs.size)
	if s.State != h.state {
		h.transition(w, s.State, at, hs.intern)
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
func (h *workerHistory) add(s Sample, res int64, size int) {
	// The last sample's chunk is decoded once: to compare with it, and to
	// write s when s goes in the same chunk (7 times in 8).
	var buf [chunkSamples]Sample
	g, k := -1, 0
	if h.n > 0 {
		li := h.lastIndex(size)
		g = li / chunkSamples
		k = decodeChunk(h.chunks[g], &buf)
		last := &buf[li%chunkSamples]
		switch {
		case s.At < last.At:
			return // out of order: the view never goes back, nor does history
		case s.At/res == last.At/res:
			*last = s
			h.chunks[g] = encodeChunk(h.chunks[g], &buf, k)
			h.unsaved = max(h.unsaved, 1)
			return
		}
	}
	h.unsaved = min(h.unsaved+1, size)
	slot := h.n
	if h.n == size {
		slot, h.next = h.next, (h.next+1)%size
	}
	if slot/chunkSamples != g {
		h.setSample(slot, s, size)
		return
	}
	i := slot % chunkSamples
	buf[i] = s
	h.chunks[g] = encodeChunk(h.chunks[g], &buf, max(k, i+1))
	h.n = max(h.n, slot+1)
}

func (h *workerHistory) lastIndex(size int) int {
	if h.n < size {
		return h.n - 1
	}
	return (h.next + size - 1) % size
}

func (h *workerHistory) transition(w *contract.Worker, to uint8, at int64, intern func(string) string) {
	t := Transition{At: at, From: h.state, To: to}
	// The processor knows when the state began; a snapshot only shows it
	// at the next evaluation.
	if since := w.Since.Time().UnixMilli(); !w.Since.IsZero() && since <= at && (len(h.trans) == 0 || since >= h.lastTransition().At) {
		t.At = since
	}
	for _, r := range w.Reasons {
		if int(t.NReasons) == TransitionReasons {
			break
		}
		t.Reasons[t.NReasons] = TransitionReason{Code: intern(r.Code), Value: r.Value, Threshold: r.Threshold}
		t.NReasons++
	}
	h.state, h.transDirty = to, true
	if len(h.trans) < Transitions {
		if h.trans == nil {
			h.trans = make([]Transition, 0, 2)
		}
		h.trans = append(h.trans, t)
		return
	}
	h.trans[h.tnext] = t
	h.tnext = (h.tnext + 1) % Transitions
}

func (h *workerHistory) lastTransition() Transition {
	if len(h.trans) < Transitions {
		return h.trans[len(h.trans)-1]
	}
	return h.trans[(h.tnext+Transitions-1)%Transitions]
}

// retain drops the history of every worker the API no longer serves: at
// once when it was served since start, after a window when it only came
// from storage (the processor may not have reported it again yet).
func (hs *Store) retain(horizon int64) {
	for id, h := range hs.byID {
		if h.gen == hs.gen {
			continue // served
		}
		if h.inView || h.n == 0 || h.sample(h.lastIndex(hs.size)).At < horizon {
			delete(hs.byID, id)
			if p := hs.persist; p != nil && h.persisted {
				p.removed[id] = max(p.ids[id], (h.n+historyGroup-1)/historyGroup)
			}
		}
	}
}

// Series is a copy of one worker's history, oldest first, from a time on:
// what the pages and the JSON render, without holding the lock.
type Series struct {
	Roles       []string // the role slots in use, in slot order
	Samples     []Sample
	Transitions []Transition
}

// Series copies id's history from since on; empty when there is none.
func (hs *Store) Series(id string, since time.Time) Series {
	hs.mu.RLock()
	defer hs.mu.RUnlock()
	h := hs.byID[id]
	if h == nil {
		return Series{}
	}
	from := since.UnixMilli()
	var ws Series
	for _, r := range h.roles {
		if r != "" {
			ws.Roles = append(ws.Roles, r)
		}
	}
	ws.Samples = slices.DeleteFunc(h.inTimeOrder(hs.size), func(s Sample) bool { return s.At < from })
	ws.Transitions = make([]Transition, 0, len(h.trans))
	for i := range h.trans {
		t := h.trans[(h.tnext+i)%len(h.trans)]
		// A transition older than the window is still the one that
		// explains the current state: keep it when it is the last.
		if t.At >= from || i == len(h.trans)-1 {
			ws.Transitions = append(ws.Transitions, t)
		}
	}
	return ws
}

// minSpan is the shortest time the pages draw: a history younger than the
// window is drawn over its own age, but not over less than this.
const minSpan = 2 * time.Minute

// Span is the time the pages draw, ending at now: the window, or while the
// history is younger than that (the collector just started), its age, so
// the first minutes are not squeezed into the right edge of a half-hour.
func (hs *Store) Span(now time.Time) time.Duration {
	hs.mu.RLock()
	first := hs.first
	hs.mu.RUnlock()
	if first == 0 {
		return hs.window
	}
	age := now.Sub(time.UnixMilli(first)) + hs.resolution
	return min(hs.window, max(age, min(minSpan, hs.window)))
}

// Trend is the tree memory of each worker in ids over the span ending at
// now, as points buckets (the largest sample in each, -1 where none): the
// fleet page's sparkline. One lock for all of them; nil for a worker
// without history.
func (hs *Store) Trend(ids []string, now time.Time, points int) [][]int64 {
	out := make([][]int64, len(ids))
	span := hs.Span(now)
	from := now.Add(-span).UnixMilli()
	step := max(1, span.Milliseconds()/int64(points))
	hs.mu.RLock()
	defer hs.mu.RUnlock()
	for i, id := range ids {
		h := hs.byID[id]
		if h == nil || h.n == 0 {
			continue
		}
		t := make([]int64, points)
		for j := range t {
			t[j] = -1
		}
		for _, s := range h.slots {
			b := (s.At - from) / step
			if s.At < from || b >= int64(points) {
				continue
			}
			t[b] = max(t[b], int64(s.RSSKiB)<<10)
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

func (hs *Store) intern(c string) string {
	if s, ok := hs.codes[c]; ok {
		return s
	}
	if len(hs.codes) >= 1024 { // codes are a fixed vocabulary; do not grow on garbage
		return c
	}
	hs.codes[c] = c
	return c
}
