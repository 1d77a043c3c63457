// Package scheduler is the simulated scheduler: a queue of runs, the claims
// each worker holds, and the rollbacks that make claim drift observable.
package scheduler

import (
	"fmt"
	"math/rand/v2"
	"sort"
	"sync"
	"time"

	"github.com/workerwatch/workerwatch/internal/contract"

	"go.opentelemetry.io/otel/attribute"

	"github.com/workerwatch/workerwatch/cmd/workersim/internal/api"
)

// Config is the queue's behavior.
type Config struct {
	Seed         uint64
	RunMemory    int64         // mean bytes per run (jitter +-25%)
	RunDuration  time.Duration // mean run duration (jitter +-25%)
	MaxPending   int           // generation pauses at this queue length
	ClaimTimeout time.Duration // unacknowledged claims roll back after this
	LostTimeout  time.Duration // dropped or started-but-silent runs roll back after this
	DropClaims   map[string]bool
	DropEvery    int // drop every Nth non-empty claim response of a DropClaims worker
}

// Event is one lifecycle event the scheduler reports (docs/conventions.md).
type Event struct {
	Name     string
	WorkerID string
	RunID    string
	Attrs    []attribute.KeyValue
}

type held struct {
	run       api.Run
	worker    string
	claimedAt time.Time
	deadline  time.Time
	started   bool
	dropped   bool
}

// State is the scheduler's book-keeping. Methods are safe for concurrent use
// and return the events to emit, so the caller emits outside the lock and
// tests read them directly.
type State struct {
	cfg Config

	mu      sync.Mutex
	rng     *rand.Rand
	seq     int
	pending []api.Run
	held    map[string]*held
	workers map[string]bool // every worker seen, so its held gauge reports 0 too
	claims  map[string]int  // non-empty claims per worker, for DropEvery
}

// New returns an empty queue.
func New(cfg Config) *State {
	if cfg.DropEvery <= 0 {
		cfg.DropEvery = 2
	}
	return &State{
		cfg:     cfg,
		rng:     rand.New(rand.NewPCG(cfg.Seed, 0x5eed)),
		held:    map[string]*held{},
		workers: map[string]bool{},
		claims:  map[string]int{},
	}
}

// jitter returns v scaled by a seeded factor in [0.75, 1.25).
func (s *State) jitter(v float64) float64 { return v * (0.75 + 0.5*s.rng.Float64()) }

// Enqueue adds one run unless the queue is full; the id and size depend only
// on the seed and the sequence number, so a seeded fleet is repeatable.
func (s *State) Enqueue() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.cfg.MaxPending > 0 && len(s.pending) >= s.cfg.MaxPending {
		return false
	}
	s.seq++
	s.pending = append(s.pending, api.Run{
		ID:          fmt.Sprintf("run-%d-%05d", s.cfg.Seed, s.seq),
		MemoryBytes: int64(s.jitter(float64(s.cfg.RunMemory))),
		DurationMS:  max(1, int64(s.jitter(float64(s.cfg.RunDuration.Milliseconds())))),
	})
	return true
}

// Claim assigns up to demand runs to worker. drop tells the HTTP layer to
// lose the response: the runs stay held for the worker (it never learns
// about them) until LostTimeout.
func (s *State) Claim(worker string, demand int, now time.Time) (runs []api.Run, drop bool, events []Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.workers[worker] = true
	n := min(demand, len(s.pending))
	if n <= 0 {
		return nil, false, nil
	}
	runs = append([]api.Run(nil), s.pending[:n]...)
	s.pending = s.pending[n:]
	s.claims[worker]++
	drop = s.cfg.DropClaims[worker] && s.claims[worker]%s.cfg.DropEvery == 0
	for _, r := range runs {
		h := &held{run: r, worker: worker, claimedAt: now, dropped: drop, deadline: now.Add(s.cfg.ClaimTimeout)}
		if drop {
			// Nobody will acknowledge it: only the long lost timeout
			// catches it, which is what makes the drift visible.
			h.deadline = now.Add(s.cfg.LostTimeout)
		}
		s.held[r.ID] = h
		events = append(events, Event{Name: contract.EventClaimed, WorkerID: worker, RunID: r.ID})
	}
	return runs, drop, events
}

// Start records the worker's acknowledgement. ok is false when the run is
// not held by that worker (rolled back already: the worker is an orphan).
func (s *State) Start(worker, runID string, now time.Time) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.held[runID]
	if h == nil || h.worker != worker {
		return false
	}
	if !h.started {
		h.started = true
		// A started run whose worker goes silent is lost after LostTimeout
		// (OpenFn's LostAfterStart).
		h.deadline = now.Add(s.cfg.LostTimeout)
	}
	return true
}

// Complete ends a run the worker holds.
func (s *State) Complete(worker, runID, result, errorType string) (bool, []Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.held[runID]
	if h == nil || h.worker != worker {
		return false, nil
	}
	delete(s.held, runID)
	if result == "" {
		result = "success"
	}
	attrs := []attribute.KeyValue{attribute.String(contract.AttrResult, result)}
	if errorType != "" {
		attrs = append(attrs, attribute.String(contract.AttrErrorType, errorType))
	}
	return true, []Event{{Name: contract.EventFinished, WorkerID: worker, RunID: runID, Attrs: attrs}}
}

// Release gives a run back to the front of the queue at the worker's request.
func (s *State) Release(worker, runID string) (bool, []Event) {
	s.mu.Lock()
	defer s.mu.Unlock()
	h := s.held[runID]
	if h == nil || h.worker != worker {
		return false, nil
	}
	return true, []Event{s.rollbackLocked(h, "worker_released")}
}

// Expire rolls back every claim past its deadline: unacknowledged claims
// after ClaimTimeout, dropped and silent started runs after LostTimeout.
func (s *State) Expire(now time.Time) []Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	var expired []*held
	for _, h := range s.held {
		if now.After(h.deadline) {
			expired = append(expired, h)
		}
	}
	// Newest first: each rollback goes to the queue's front, so the oldest
	// ends up first and requeued runs keep their order.
	sort.Slice(expired, func(i, j int) bool { return expired[i].run.ID > expired[j].run.ID })
	var events []Event
	for _, h := range expired {
		reason := "claim_timeout"
		if h.started || h.dropped {
			reason = "lost"
		}
		events = append(events, s.rollbackLocked(h, reason))
	}
	return events
}

func (s *State) rollbackLocked(h *held, reason string) Event {
	delete(s.held, h.run.ID)
	s.pending = append([]api.Run{h.run}, s.pending...)
	return Event{
		Name: contract.EventReleased, WorkerID: h.worker, RunID: h.run.ID,
		Attrs: []attribute.KeyValue{attribute.String(contract.AttrReleaseReason, reason)},
	}
}

// Counts returns the pending length and the runs held per worker seen.
func (s *State) Counts() (pending int, heldBy map[string]int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	heldBy = make(map[string]int, len(s.workers))
	for w := range s.workers {
		heldBy[w] = 0
	}
	for _, h := range s.held {
		heldBy[h.worker]++
	}
	return len(s.pending), heldBy
}

// Status is the view served at /v1/status.
func (s *State) Status() api.Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := api.Status{Pending: len(s.pending), Held: map[string][]string{}, Dropped: map[string][]string{}}
	for w := range s.workers {
		st.Held[w] = []string{}
	}
	for id, h := range s.held {
		st.Held[h.worker] = append(st.Held[h.worker], id)
		if h.dropped {
			st.Dropped[h.worker] = append(st.Dropped[h.worker], id)
		}
	}
	for _, ids := range st.Held {
		sort.Strings(ids)
	}
	for _, ids := range st.Dropped {
		sort.Strings(ids)
	}
	return st
}
