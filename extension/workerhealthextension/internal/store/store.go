// Package store is what the API serves: the latest snapshot of each
// publishing processor, indexed once (each worker's JSON encoded when a
// request first asks for it) and merged into one immutable View that readers
// load without a lock. It feeds the history and knows nothing of HTTP.
package store // import "github.com/workerwatch/workerwatch/extension/workerhealthextension/internal/store"

import (
	"cmp"
	"encoding/json"
	"fmt"
	"iter"
	"math"
	"net/url"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"go.opentelemetry.io/collector/component"

	"github.com/workerwatch/workerwatch/extension/workerhealthextension/internal/history"
	"github.com/workerwatch/workerwatch/internal/contract"
)

// Entry is one worker as served: the judgement, and its JSON encoded the
// first time a request asks for it in this view, then reused by every later
// request until the next snapshot replaces the entry. Encoding at the first
// request rather than when the snapshot arrives keeps the encoding off the
// publish: a shard of 100,000 workers publishing every 10 s encoded 10,000
// workers a second whether anyone asked or not, while schedulers ask for far
// fewer distinct workers than that between two evaluations (a publish of
// 10,000 workers: 5.3x less time and 13x fewer bytes allocated;
// docs/results/http-api.md).
type Entry struct {
	Worker *contract.Worker
	// At is the time of the snapshot the worker came in: on a tie between
	// two processors, the fresher one wins. (8 bytes, not a time.Time's 24:
	// the entry fits the allocator's 24-byte class, 2.3 MiB less at 100,000
	// workers.)
	At contract.Time
	// json is the encoding, once made. Two requests racing for the first
	// encoding both make it and one is kept: the same bytes either way.
	json atomic.Pointer[[]byte]
}

// NewEntry is w as served from a snapshot of time at; its JSON is encoded
// when first asked for.
func NewEntry(w *contract.Worker, at time.Time) *Entry {
	return &Entry{Worker: w, At: contract.TimeOf(at)}
}

// EncodedEntry is w with its JSON already at hand (raw, as another shard
// sent it): served as it is.
func EncodedEntry(w *contract.Worker, raw []byte, at time.Time) *Entry {
	e := &Entry{Worker: w, At: contract.TimeOf(at)}
	e.json.Store(&raw)
	return e
}

// JSON is the worker's JSON object, encoded at the first call. Only a NaN or
// Inf in the evidence can fail the encoding: the worker is then served with
// that evidence zeroed rather than dropped from the API.
func (e *Entry) JSON() []byte {
	if b := e.json.Load(); b != nil {
		return *b
	}
	b, err := marshalWorker(WithEmptyLists(e.Worker))
	if err != nil {
		b, _ = marshalWorker(WithEmptyLists(WithFiniteEvidence(e.Worker)))
	}
	e.json.Store(&b)
	return b
}

// sourceIndex is one processor's latest snapshot, indexed by worker id.
type SourceIndex struct {
	Snap *contract.Snapshot
	// Order is Snap.Workers' entries sorted by id, one for each id.
	Order []*Entry
}

// sourceInfo tells readers which processors contributed and how fresh each is:
// a processor that stopped publishing shows up as an old time.
type SourceInfo struct {
	ID      string    `json:"id"`
	Time    time.Time `json:"time"`
	Workers int       `json:"workers"`
	// Error: a shard of the cluster that did not answer (docs/scaling.md).
	Error string `json:"error,omitempty"`
}

// view is the merged, immutable picture every reader shares. A new view is
// built on every Publish and swapped in atomically; nothing in it changes
// afterwards, so readers never lock.
type View struct {
	// Time is the newest snapshot time; zero before any publish.
	Time    time.Time
	Sources []SourceInfo
	// ByIDOrder is every worker sorted by id, each once (the JSON list
	// order; Lookup).
	ByIDOrder []*Entry
	// WorstFirst is every worker sorted by severity, then id (the page order).
	WorstFirst []*Entry
	Fleet      contract.Fleet
	// ListHead is the list body's JSON up to its count (time, sources and
	// fleet, without the closing brace), encoded once here rather than on
	// every GET /health/workers; nil if it cannot be encoded.
	ListHead []byte
}

// Lookup is the entry the view serves for the worker id, or nil: a binary
// search of ByIDOrder. No map of ids beside the order: it was 41 bytes a
// worker, and a new one of every worker at each publish
// (docs/results/density.md, "the view's id map"), for a search of about 17
// steps at 100,000 workers instead of a hash.
func (v *View) Lookup(id string) *Entry {
	i, ok := slices.BinarySearchFunc(v.ByIDOrder, id, func(e *Entry, id string) int { return cmp.Compare(e.Worker.ID, id) })
	if !ok {
		return nil
	}
	return v.ByIDOrder[i]
}

// count is how many workers keep selects. fleet.ByState counts every worker
// of the view, so no request walks the workers to count them.
func (v *View) Count(keep StateFilter) int {
	if keep == nil {
		return len(v.ByIDOrder)
	}
	n := 0
	for st := range keep {
		n += v.Fleet.ByState[st]
	}
	return n
}

// store keeps the latest snapshot of each publishing processor and the merged
// view. Publish only hands the snapshot over (publish): the processor's
// evaluation tick must not pay for encoding thousands of workers. One drain
// goroutine at a time then indexes what was handed over and swaps a new,
// complete view in; readers only load the atomic pointer, so they see either
// the previous view or the next one, never one being built.
type Store struct {
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
	sources map[component.ID]*SourceIndex
	// index is indexSnapshot; tests slow it down.
	index   func(*contract.Snapshot) *SourceIndex
	history *history.Store
	current atomic.Pointer[View]
}

func New(history *history.Store) *Store {
	s := &Store{
		history:  history,
		pending:  map[component.ID]*contract.Snapshot{},
		accepted: map[component.ID]time.Time{},
		sources:  map[component.ID]*SourceIndex{},
		index:    indexSnapshot,
	}
	s.idle = sync.NewCond(&s.mu)
	// An empty fleet, not an error, until a processor publishes.
	s.current.Store(BuildView(nil))
	return s
}

// load returns the current view; never nil.
func (s *Store) Load() *View { return s.current.Load() }

// publish hands snap over and returns at once; the view that serves it is
// built by drain, in the background. A snapshot older than one already
// handed over for the same source is ignored.
func (s *Store) Publish(snap *contract.Snapshot) {
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
func (s *Store) drain() {
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

		fresh := make([]*SourceIndex, 0, len(batch))
		for src, snap := range batch {
			si := s.index(snap)
			s.sources[src] = si
			fresh = append(fresh, si)
		}
		clear(batch)
		srcs := make([]*SourceIndex, 0, len(s.sources))
		for _, si := range s.sources {
			srcs = append(srcs, si)
		}
		v := BuildView(srcs)
		// History first, so a page that finds a worker in the view also
		// finds the sample of that snapshot.
		s.history.Update(servedWorkers(v, fresh), servedElsewhere(v, fresh, srcs))
		s.current.Store(v)
	}
}

// servedElsewhere yields the ids of every worker v serves when some of its
// sources (srcs) are not among those just indexed (fresh), whose workers the
// history marks served as servedWorkers yields them; nil when all are.
func servedElsewhere(v *View, fresh, srcs []*SourceIndex) iter.Seq[string] {
	if len(fresh) == len(srcs) {
		return nil
	}
	return func(yield func(string) bool) {
		for _, e := range v.ByIDOrder {
			if !yield(e.Worker.ID) {
				return
			}
		}
	}
}

// servedWorkers yields the workers of the snapshots just indexed that v
// serves, with their snapshot's time: with two processors listing one
// worker, the history follows the API's answer.
func servedWorkers(v *View, fresh []*SourceIndex) iter.Seq2[int64, *contract.Worker] {
	return func(yield func(int64, *contract.Worker) bool) {
		for _, si := range fresh {
			at := si.Snap.Time.UnixMilli()
			// Both lists are in id order: one walk, no search per worker.
			j := 0
			for _, e := range si.Order {
				for j < len(v.ByIDOrder) && v.ByIDOrder[j].Worker.ID < e.Worker.ID {
					j++
				}
				if j < len(v.ByIDOrder) && v.ByIDOrder[j] == e && !yield(at, e.Worker) {
					return
				}
			}
		}
	}
}

// flush waits until every snapshot handed over so far is in the view.
func (s *Store) Flush() {
	s.mu.Lock()
	defer s.mu.Unlock()
	for s.draining {
		s.idle.Wait()
	}
}

func indexSnapshot(snap *contract.Snapshot) *SourceIndex {
	idx := &SourceIndex{Snap: snap, Order: make([]*Entry, len(snap.Workers))}
	// The entries in one block: one allocation a publish, not one a worker.
	entries := make([]Entry, len(snap.Workers))
	at := contract.TimeOf(snap.Time)
	for i := range snap.Workers {
		e := &entries[i]
		e.Worker, e.At = &snap.Workers[i], at
		idx.Order[i] = e
	}
	// Snapshots promise id order; sort only if one breaks the promise.
	if !slices.IsSortedFunc(idx.Order, CompareIDs) {
		slices.SortStableFunc(idx.Order, CompareIDs)
	}
	// A processor should not list a worker twice; if it does, the worse
	// judgement stands (a scheduler must not be told "go" by the more
	// optimistic copy), the first listed of equals.
	idx.Order = dedupIDs(idx.Order, func(kept, e *Entry) bool {
		return contract.Severity(e.Worker.State) > contract.Severity(kept.Worker.State)
	})
	return idx
}

// dedupIDs keeps one entry of each id of order (sorted by id, stably): the
// first, unless replace says a later one of the id wins over the one kept.
func dedupIDs(order []*Entry, replace func(kept, e *Entry) bool) []*Entry {
	out := order[:0]
	for _, e := range order {
		if n := len(out); n > 0 && out[n-1].Worker.ID == e.Worker.ID {
			if replace(out[n-1], e) {
				out[n-1] = e
			}
			continue
		}
		out = append(out, e)
	}
	clear(order[len(out):]) // no entry kept alive by the slice's tail
	return out
}

// buildView merges the sources. With one source (the usual case) its index
// is shared as is.
func BuildView(srcs []*SourceIndex) *View {
	slices.SortFunc(srcs, func(a, b *SourceIndex) int { return cmp.Compare(a.Snap.Source.String(), b.Snap.Source.String()) })
	v := &View{
		Sources: make([]SourceInfo, 0, len(srcs)),
		Fleet: contract.Fleet{
			ByState: make(map[contract.State]int, len(contract.AllStates)),
			Pending: -1,
		},
	}
	for _, st := range contract.AllStates {
		v.Fleet.ByState[st] = 0
	}
	for _, si := range srcs {
		v.Sources = append(v.Sources, SourceInfo{ID: si.Snap.Source.String(), Time: si.Snap.Time, Workers: len(si.Order)})
		if si.Snap.Time.After(v.Time) {
			v.Time = si.Snap.Time
		}
		f := si.Snap.Fleet
		if f.Pending >= 0 {
			v.Fleet.Pending = max(v.Fleet.Pending, 0) + f.Pending
		}
		v.Fleet.IdleCapacity += f.IdleCapacity
		v.Fleet.IdleWhilePending = v.Fleet.IdleWhilePending || f.IdleWhilePending
	}

	switch len(srcs) {
	case 0:
	case 1:
		v.ByIDOrder = srcs[0].Order
	default:
		v.ByIDOrder = mergeSources(srcs)
	}

	for _, e := range v.ByIDOrder {
		v.Fleet.ByState[e.Worker.State]++
	}
	// byIDOrder is in id order, so a stable sort by severity alone keeps
	// the id order within a state.
	v.WorstFirst = slices.Clone(v.ByIDOrder)
	slices.SortStableFunc(v.WorstFirst, func(a, b *Entry) int {
		return cmp.Compare(contract.Severity(b.Worker.State), contract.Severity(a.Worker.State))
	})
	v.ListHead = EncodeListHead(v)
	return v
}

// encodeListHead is the list body up to "count", left open for it.
func EncodeListHead(v *View) []byte {
	head := ListHead{Sources: v.Sources, Fleet: v.Fleet}
	if !v.Time.IsZero() {
		head.Time = &v.Time
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
func mergeSources(srcs []*SourceIndex) []*Entry {
	n := 0
	for _, si := range srcs {
		n += len(si.Order)
	}
	order := make([]*Entry, 0, n)
	for _, si := range srcs {
		order = append(order, si.Order...)
	}
	slices.SortStableFunc(order, CompareIDs)
	return dedupIDs(order, func(kept, e *Entry) bool {
		ks, es := contract.Severity(kept.Worker.State), contract.Severity(e.Worker.State)
		return es > ks || (es == ks && e.At > kept.At)
	})
}

func CompareIDs(a, b *Entry) int { return cmp.Compare(a.Worker.ID, b.Worker.ID) }

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
// always see [] and never null (the processor may leave them nil; a
// source's ids and a drift's lists are written as [] by contract.SourceIDs
// and contract.Drift themselves).
func WithEmptyLists(w *contract.Worker) *contract.Worker {
	if w.Reasons != nil && w.Runs.Worker != nil && w.Runs.Scheduler != nil &&
		w.Memory.Roles != nil &&
		w.Runs.Kills != nil {
		return w
	}
	c := *w
	c.Reasons = nonNil(c.Reasons)
	c.Runs.Worker = nonNil(c.Runs.Worker)
	c.Runs.Scheduler = nonNil(c.Runs.Scheduler)
	if c.Runs.Kills == nil {
		c.Runs.Kills = map[string]int64{}
	}
	c.Memory.Roles = nonNil(c.Memory.Roles)
	return &c
}

func nonNil[T any](s []T) []T {
	if s == nil {
		return []T{}
	}
	return s
}

// withFiniteEvidence returns a copy of w whose reason values JSON can encode.
func WithFiniteEvidence(w *contract.Worker) *contract.Worker {
	c := *w
	c.Reasons = slices.Clone(w.Reasons)
	for i := range c.Reasons {
		c.Reasons[i].Value = Finite(c.Reasons[i].Value)
		c.Reasons[i].Threshold = Finite(c.Reasons[i].Threshold)
		if cur := c.Reasons[i].Current; cur != nil {
			v := Finite(*cur)
			c.Reasons[i].Current = &v
		}
		if rc := c.Reasons[i].Recovery; rc != nil {
			r := *rc
			r.Ratio = Finite(r.Ratio)
			c.Reasons[i].Recovery = &r
		}
	}
	return &c
}

func Finite(f float64) float64 {
	if math.IsNaN(f) || math.IsInf(f, 0) {
		return 0
	}
	return f
}

// listHead is the list body but the count (the number of workers in this
// response, after ?state=) and the workers, which are streamed from their
// pre-encoded JSON after it. It is encoded once per view (view.listHead).
type ListHead struct {
	// Time is the newest snapshot's evaluation time; null before any.
	Time    *time.Time     `json:"time"`
	Sources []SourceInfo   `json:"sources"`
	Fleet   contract.Fleet `json:"fleet"`
}

// stateFilter is the set of states ?state= asks for; nil keeps all.
type StateFilter map[contract.State]bool

func (f StateFilter) Has(s contract.State) bool { return f == nil || f[s] }

// parseStateFilter accepts ?state=a&state=b and ?state=a,b; an unknown
// state is a client error (a typo must not silently return nothing).
func ParseStateFilter(values []string) (StateFilter, error) {
	var f StateFilter
	for _, v := range values {
		for _, s := range strings.Split(v, ",") {
			s = strings.TrimSpace(strings.ToLower(s))
			if s == "" {
				continue
			}
			st := contract.State(s)
			if !st.Valid() {
				return nil, fmt.Errorf("state: unknown state %q; use one or more of %s", s, stateList())
			}
			if f == nil {
				f = StateFilter{}
			}
			f[st] = true
		}
	}
	return f, nil
}

func stateList() string {
	names := make([]string, len(contract.AllStates))
	for i, s := range contract.AllStates {
		names[i] = string(s)
	}
	return strings.Join(names, ", ")
}

// Page is the workers keep selects whose id comes after `after` (byte
// order; "" from the first), in id order, at most limit of them (0: no
// limit), and whether more follow. Its cost is bounded by the page, not the
// fleet: a binary search per state and a merge of at most six runs.
// WorstFirst holds each state's workers as one run in id order (severity
// alone orders it, and no two states share a severity), so a filtered page
// reads only the runs of the states asked for.
func (v *View) Page(keep StateFilter, after string, limit int) ([]*Entry, bool) {
	var buf [6][]*Entry // a run per state at most (contract.AllStates)
	runs := buf[:0]
	if keep == nil || len(keep) == len(contract.AllStates) {
		runs = append(runs, v.ByIDOrder)
	} else {
		for _, st := range contract.AllStates {
			if !keep[st] {
				continue
			}
			sev := contract.Severity(st)
			// WorstFirst is in descending severity.
			lo, _ := slices.BinarySearchFunc(v.WorstFirst, sev, func(e *Entry, s int) int { return cmp.Compare(s, contract.Severity(e.Worker.State)) })
			hi, _ := slices.BinarySearchFunc(v.WorstFirst, sev-1, func(e *Entry, s int) int { return cmp.Compare(s, contract.Severity(e.Worker.State)) })
			if hi > lo {
				runs = append(runs, v.WorstFirst[lo:hi])
			}
		}
	}
	for i, r := range runs {
		if after != "" {
			j, found := slices.BinarySearchFunc(r, after, func(e *Entry, id string) int { return cmp.Compare(e.Worker.ID, id) })
			if found {
				j++
			}
			runs[i] = r[j:]
		}
	}
	total := 0
	for _, r := range runs {
		total += len(r)
	}
	if limit <= 0 || limit > total {
		limit = total
	}
	if len(runs) == 1 {
		return runs[0][:limit], limit < total
	}
	page := make([]*Entry, 0, limit)
	for len(page) < limit {
		best := -1
		for i, r := range runs {
			if len(r) > 0 && (best < 0 || r[0].Worker.ID < runs[best][0].Worker.ID) {
				best = i
			}
		}
		page = append(page, runs[best][0])
		runs[best] = runs[best][1:]
	}
	return page, limit < total
}
