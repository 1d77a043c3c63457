package workerhealthextension // import "github.com/workerwatch/workerwatch/extension/workerhealthextension"

import (
	"cmp"
	"encoding/json"
	"iter"
	"math"
	"net/url"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/collector/component"

	"github.com/workerwatch/workerwatch/extension/workerhealthextension/internal/history"
	"github.com/workerwatch/workerwatch/internal/contract"
)

// entry is one worker as served: the judgement plus its JSON, encoded once
// when the snapshot arrives so a scheduler polling thousands of times a
// second costs a map lookup and a write, not an encoding.
type entry struct {
	w    *contract.Worker
	json []byte
	// at is the time of the snapshot the worker came in: on a tie between
	// two processors, the fresher one wins.
	at time.Time
}

// sourceIndex is one processor's latest snapshot, indexed by worker id.
type sourceIndex struct {
	snap *contract.Snapshot
	byID map[string]*entry
	// order is snap.Workers' entries sorted by id.
	order []*entry
}

// sourceInfo tells readers which processors contributed and how fresh each is:
// a processor that stopped publishing shows up as an old time.
type sourceInfo struct {
	ID      string    `json:"id"`
	Time    time.Time `json:"time"`
	Workers int       `json:"workers"`
	// Error: a shard of the cluster that did not answer (docs/scaling.md).
	Error string `json:"error,omitempty"`
}

// view is the merged, immutable picture every reader shares. A new view is
// built on every Publish and swapped in atomically; nothing in it changes
// afterwards, so readers never lock.
type view struct {
	// time is the newest snapshot time; zero before any publish.
	time    time.Time
	sources []sourceInfo
	byID    map[string]*entry
	// byIDOrder is every worker sorted by id (the JSON list order).
	byIDOrder []*entry
	// worstFirst is every worker sorted by severity, then id (the page order).
	worstFirst []*entry
	fleet      contract.Fleet
	// listHead is the list body's JSON up to its count (time, sources and
	// fleet, without the closing brace), encoded once here rather than on
	// every GET /health/workers; nil if it cannot be encoded.
	listHead []byte
}

// count is how many workers keep selects. fleet.ByState counts every worker
// of the view, so no request walks the workers to count them.
func (v *view) count(keep stateFilter) int {
	if keep == nil {
		return len(v.byIDOrder)
	}
	n := 0
	for st := range keep {
		n += v.fleet.ByState[st]
	}
	return n
}

// store keeps the latest snapshot of each publishing processor and the merged
// view. Publish only hands the snapshot over (publish): the processor's
// evaluation tick must not pay for encoding thousands of workers. One drain
// goroutine at a time then indexes what was handed over and swaps a new,
// complete view in; readers only load the atomic pointer, so they see either
// the previous view or the next one, never one being built.
type store struct {
	// mu guards the hand-over: pending, accepted and draining.
	mu sync.Mutex
	// pending is the newest snapshot of each source not indexed yet. A
	// source that publishes faster than the drain keeps only its newest:
	// older ones would be replaced by it at once anyway.
	pending map[component.ID]*contract.Snapshot
	// accepted is the time of each source's newest snapshot handed over: an
	// older one (a publish that lost a race) is refused at the door, so no
	// order of encoding can roll a source back.
	accepted map[component.ID]time.Time
	draining bool
	// idle is signaled when a drain ends with nothing pending.
	idle *sync.Cond

	// sources is only touched by the drain goroutine (one at a time).
	sources map[component.ID]*sourceIndex
	// index is indexSnapshot; tests slow it down.
	index   func(*contract.Snapshot) *sourceIndex
	history *history.Store
	current atomic.Pointer[view]
}

func newStore(history *history.Store) *store {
	s := &store{
		history:  history,
		pending:  map[component.ID]*contract.Snapshot{},
		accepted: map[component.ID]time.Time{},
		sources:  map[component.ID]*sourceIndex{},
		index:    indexSnapshot,
	}
	s.idle = sync.NewCond(&s.mu)
	// An empty fleet, not an error, until a processor publishes.
	s.current.Store(buildView(nil))
	return s
}

// load returns the current view; never nil.
func (s *store) load() *view { return s.current.Load() }

// publish hands snap over and returns at once; the view that serves it is
// built by drain, in the background. A snapshot older than one already
// handed over for the same source is ignored.
func (s *store) publish(snap *contract.Snapshot) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if last, ok := s.accepted[snap.Source]; ok && last.After(snap.Time) {
		return
	}
	s.accepted[snap.Source] = snap.Time
	s.pending[snap.Source] = snap
	if !s.draining {
		s.draining = true
		go s.drain()
	}
}

// drain indexes pending snapshots until none is left, one view per round.
// Only one drain runs at a time (draining), so indexes are never built
// concurrently and the newest snapshot is always the last one swapped in.
func (s *store) drain() {
	batch := map[component.ID]*contract.Snapshot{}
	for {
		s.mu.Lock()
		if len(s.pending) == 0 {
			s.draining = false
			s.idle.Broadcast()
			s.mu.Unlock()
			return
		}
		batch, s.pending = s.pending, batch
		s.mu.Unlock()

		fresh := make([]*sourceIndex, 0, len(batch))
		for src, snap := range batch {
			si := s.index(snap)
			s.sources[src] = si
			fresh = append(fresh, si)
		}
		clear(batch)
		srcs := make([]*sourceIndex, 0, len(s.sources))
		for _, si := range s.sources {
			srcs = append(srcs, si)
		}
		v := buildView(srcs)
		// History first, so a page that finds a worker in the view also
		// finds the sample of that snapshot.
		s.history.Update(servedWorkers(v, fresh), func(id string) bool { return v.byID[id] != nil })
		s.current.Store(v)
	}
}

// servedWorkers yields the workers of the snapshots just indexed that v
// serves, with their snapshot's time: with two processors listing one
// worker, the history follows the API's answer.
func servedWorkers(v *view, fresh []*sourceIndex) iter.Seq2[int64, *contract.Worker] {
	return func(yield func(int64, *contract.Worker) bool) {
		for _, si := range fresh {
			at := si.snap.Time.UnixMilli()
			for _, e := range si.order {
				if v.byID[e.w.ID] == e && !yield(at, e.w) {
					return
				}
			}
		}
	}
}

// flush waits until every snapshot handed over so far is in the view.
func (s *store) flush() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.draining {
		s.idle.Wait()
	}
}

func indexSnapshot(snap *contract.Snapshot) *sourceIndex {
	idx := &sourceIndex{
		snap:  snap,
		byID:  make(map[string]*entry, len(snap.Workers)),
		order: make([]*entry, 0, len(snap.Workers)),
	}
	for i := range snap.Workers {
		w := &snap.Workers[i]
		b, err := marshalWorker(withEmptyLists(w))
		if err != nil {
			// Only a NaN or Inf in the evidence can fail; serve the worker
			// with that evidence zeroed rather than drop it from the API.
			b, _ = marshalWorker(withEmptyLists(withFiniteEvidence(w)))
		}
		e := &entry{w: w, json: b, at: snap.Time}
		if prev, dup := idx.byID[w.ID]; dup {
			// A processor should not list a worker twice; if it does, the
			// worse judgement stands (a scheduler must not be told "go" by
			// the more optimistic copy).
			if contract.Severity(prev.w.State) >= contract.Severity(w.State) {
				continue
			}
			idx.order = slices.DeleteFunc(idx.order, func(x *entry) bool { return x == prev })
		}
		idx.byID[w.ID] = e
		idx.order = append(idx.order, e)
	}
	// Snapshots promise id order; sort only if one breaks the promise.
	if !slices.IsSortedFunc(idx.order, byID) {
		slices.SortStableFunc(idx.order, byID)
	}
	return idx
}

// buildView merges the sources. With one source (the usual case) its index
// is shared as is.
func buildView(srcs []*sourceIndex) *view {
	slices.SortFunc(srcs, func(a, b *sourceIndex) int { return cmp.Compare(a.snap.Source.String(), b.snap.Source.String()) })
	v := &view{
		sources: make([]sourceInfo, 0, len(srcs)),
		fleet: contract.Fleet{
			ByState: make(map[contract.State]int, len(contract.AllStates)),
			Pending: -1,
		},
	}
	for _, st := range contract.AllStates {
		v.fleet.ByState[st] = 0
	}
	for _, si := range srcs {
		v.sources = append(v.sources, sourceInfo{ID: si.snap.Source.String(), Time: si.snap.Time, Workers: len(si.order)})
		if si.snap.Time.After(v.time) {
			v.time = si.snap.Time
		}
		f := si.snap.Fleet
		if f.Pending >= 0 {
			v.fleet.Pending = max(v.fleet.Pending, 0) + f.Pending
		}
		v.fleet.IdleCapacity += f.IdleCapacity
		v.fleet.IdleWhilePending = v.fleet.IdleWhilePending || f.IdleWhilePending
	}

	switch len(srcs) {
	case 0:
		v.byID = map[string]*entry{}
	case 1:
		v.byID = srcs[0].byID
		v.byIDOrder = srcs[0].order
	default:
		v.byID, v.byIDOrder = mergeSources(srcs)
	}

	for _, e := range v.byIDOrder {
		v.fleet.ByState[e.w.State]++
	}
	// byIDOrder is in id order, so a stable sort by severity alone keeps
	// the id order within a state.
	v.worstFirst = slices.Clone(v.byIDOrder)
	slices.SortStableFunc(v.worstFirst, func(a, b *entry) int {
		return cmp.Compare(contract.Severity(b.w.State), contract.Severity(a.w.State))
	})
	v.listHead = encodeListHead(v)
	return v
}

// encodeListHead is the list body up to "count", left open for it.
func encodeListHead(v *view) []byte {
	head := listHead{Sources: v.sources, Fleet: v.fleet}
	if !v.time.IsZero() {
		head.Time = &v.time
	}
	b, err := json.Marshal(head)
	if err != nil {
		return nil
	}
	return b[:len(b)-1]
}

// mergeSources unions several processors' workers. The same id from two
// processors is a configuration mistake (two pipelines judging one worker);
// the worse state wins so the API errs on the side of "do not send work",
// and on a tie the fresher snapshot wins.
func mergeSources(srcs []*sourceIndex) (map[string]*entry, []*entry) {
	n := 0
	for _, si := range srcs {
		n += len(si.order)
	}
	ids := make(map[string]*entry, n)
	for _, si := range srcs {
		for _, e := range si.order {
			prev, dup := ids[e.w.ID]
			if dup {
				ps, es := contract.Severity(prev.w.State), contract.Severity(e.w.State)
				if ps > es || (ps == es && !e.at.After(prev.at)) {
					continue
				}
			}
			ids[e.w.ID] = e
		}
	}
	order := make([]*entry, 0, len(ids))
	for _, e := range ids {
		order = append(order, e)
	}
	slices.SortFunc(order, byID)
	return ids, order
}

func byID(a, b *entry) int { return cmp.Compare(a.w.ID, b.w.ID) }

// workerJSON is a worker whose id is not valid UTF-8. JSON strings are
// Unicode, so encoding/json writes each invalid byte as U+FFFD and "dup\xff"
// and "dup\xfe" would read alike; id_escaped is the id URL-escaped (RFC 3986),
// which keeps every byte: distinct, reversible, and the path that addresses
// the worker. (The worker_health processor refuses such ids; another
// publisher might not.)
type workerJSON struct {
	*contract.Worker
	IDEscaped string `json:"id_escaped"`
}

func marshalWorker(w *contract.Worker) ([]byte, error) {
	if utf8.ValidString(w.ID) {
		return json.Marshal(w)
	}
	return json.Marshal(workerJSON{Worker: w, IDEscaped: url.PathEscape(w.ID)})
}

// withEmptyLists returns w, or a copy whose nil lists are empty, so clients
// always see [] and never null (the processor may leave them nil).
func withEmptyLists(w *contract.Worker) *contract.Worker {
	if w.Reasons != nil && w.Runs.Worker != nil && w.Runs.Scheduler != nil &&
		w.Drift.Missing != nil && w.Drift.Orphaned != nil && w.Memory.Roles != nil &&
		w.Runs.Recent != nil && w.Runs.Kills != nil && w.Sources.Tree.IDs != nil &&
		w.Sources.Telemetry.IDs != nil && w.Sources.Scheduler.IDs != nil {
		return w
	}
	c := *w
	c.Reasons = nonNil(c.Reasons)
	c.Runs.Worker = nonNil(c.Runs.Worker)
	c.Runs.Scheduler = nonNil(c.Runs.Scheduler)
	c.Runs.Recent = nonNil(c.Runs.Recent)
	if c.Runs.Kills == nil {
		c.Runs.Kills = map[string]int64{}
	}
	c.Drift.Missing = nonNil(c.Drift.Missing)
	c.Drift.Orphaned = nonNil(c.Drift.Orphaned)
	c.Memory.Roles = nonNil(c.Memory.Roles)
	c.Sources.Tree.IDs = nonNil(c.Sources.Tree.IDs)
	c.Sources.Telemetry.IDs = nonNil(c.Sources.Telemetry.IDs)
	c.Sources.Scheduler.IDs = nonNil(c.Sources.Scheduler.IDs)
	return &c
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// withFiniteEvidence returns a copy of w whose reason values JSON can encode.
func withFiniteEvidence(w *contract.Worker) *contract.Worker {
	c := *w
	c.Reasons = slices.Clone(w.Reasons)
	for i := range c.Reasons {
		c.Reasons[i].Value = finite(c.Reasons[i].Value)
		c.Reasons[i].Threshold = finite(c.Reasons[i].Threshold)
	}
	return &c
}

func finite(f float64) float64 {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return 0
	}
	return f
}
