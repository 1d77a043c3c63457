//go:build e2e

package e2e

import (
	"cmp"
	"flag"
	"os"
	"slices"
	"strconv"
	"sync"
	"testing"
	"time"
)

// The parallel scenarios run up to E2E_PARALLEL at a time (`make e2e` sets
// it), the longest first.
//
// Why not go test's own -parallel: when the sequential scenarios are done, go
// test lets the paused ones go all at once and the first -parallel of them to
// wake up run, in no set order. In run 51 the OpenFn preset's outage group
// (260 s, the longest scenario) started about 110 s into the parallel part,
// behind scenarios of a few seconds, and ended last: the parallel part took
// 375 s for about 2,600 s of scenario time in 12 slots (docs/e2e.md, "Time").
// Started longest first, the part is bounded by its longest scenario.
//
// A scenario tells parallel how long it takes (about; its time in a warm CI
// run, read from the e2e log's --- PASS lines): only the order of starts
// depends on it, never a verdict. Every scenario is registered (in its
// parent's body, before t.Parallel pauses it) and the slots go out in one
// order, longest first, registration order among equals: the next
// registered scenario starts when a slot is free and it has been let go by
// go test, so a short scenario cannot take a slot first by waking first.
// A parent (a scenario whose subtests are scenarios) gives its slot back when
// its own body returns, as go test does, and is registered with its longest
// subtest's time so that its subtests are registered early.
//
// Without E2E_PARALLEL (a developer's `go test -parallel N -run X`),
// parallel is t.Parallel and go test's -parallel applies.
var slots = newSlotGate()

// gatedMinParallel: go test's -parallel must not hold scenarios back itself
// when the gate is on (a scenario holding one of go test's slots while it
// waits for the gate's next one could keep that next one from starting).
const gatedMinParallel = 256

type slotGate struct {
	limit int // 0: off

	mu      sync.Mutex
	running int
	seq     int
	pending []*slotTicket // registered, not started: longest first
}

type slotTicket struct {
	expected time.Duration
	seq      int
	arrived  bool // let go by go test, waiting for its slot
	start    chan struct{}
}

func newSlotGate() *slotGate {
	n, _ := strconv.Atoi(os.Getenv("E2E_PARALLEL"))
	return &slotGate{limit: max(n, 0)}
}

// parallel is t.Parallel for a scenario that takes about `expected`; it
// returns when the scenario may run. Defer what it returns: it gives the slot
// back (`defer parallel(t, 90*time.Second)()`).
func parallel(t *testing.T, expected time.Duration) (done func()) {
	t.Helper()
	g := slots
	if g.limit == 0 {
		t.Parallel()
		return func() {}
	}
	if f := flag.Lookup("test.parallel"); f != nil {
		if n, _ := strconv.Atoi(f.Value.String()); n < gatedMinParallel {
			t.Fatalf("E2E_PARALLEL=%d runs the scenarios through the suite's own slots: "+
				"go test needs -parallel %d or more (it has %d), or leave E2E_PARALLEL unset", g.limit, gatedMinParallel, n)
		}
	}
	tk := g.register(expected)
	t.Parallel()
	waiting := time.Now()
	g.arrive(tk)
	<-tk.start
	// Its --- PASS time includes this wait.
	if d := time.Since(waiting); d >= time.Second {
		t.Logf("e2e: waited %.1fs for one of the %d slots (expected to take %s)", d.Seconds(), g.limit, expected)
	}
	var once sync.Once
	return func() { once.Do(g.release) }
}

func (g *slotGate) register(expected time.Duration) *slotTicket {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.seq++
	tk := &slotTicket{expected: expected, seq: g.seq, start: make(chan struct{})}
	i, _ := slices.BinarySearchFunc(g.pending, tk, func(a, b *slotTicket) int {
		if c := cmp.Compare(b.expected, a.expected); c != 0 {
			return c // longest first
		}
		return cmp.Compare(a.seq, b.seq)
	})
	g.pending = slices.Insert(g.pending, i, tk)
	return tk
}

// arrive: go test has let tk's scenario go; it starts when its turn comes
// (tk.start is closed).
func (g *slotGate) arrive(tk *slotTicket) {
	g.mu.Lock()
	defer g.mu.Unlock()
	tk.arrived = true
	g.startNextLocked()
}

func (g *slotGate) release() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.running--
	g.startNextLocked()
}

// startNextLocked starts registered scenarios in order while slots are
// free. The first one not yet let go by go test holds the others back: it is
// a moment at most (go test lets a scenario go when its parent's body returns).
func (g *slotGate) startNextLocked() {
	for g.running < g.limit && len(g.pending) > 0 && g.pending[0].arrived {
		tk := g.pending[0]
		g.pending = g.pending[1:]
		g.running++
		close(tk.start)
	}
}

// TestSlotGateOrder: the slots go out longest first whatever order the
// scenarios wake up in, never more than the limit at once, and a freed slot
// goes to the longest registered scenario even when a shorter one has waited
// longer.
func TestSlotGateOrder(t *testing.T) {
	g := &slotGate{limit: 2}
	started := func(tk *slotTicket) bool {
		select {
		case <-tk.start:
			return true
		default:
			return false
		}
	}
	short := g.register(5 * time.Second)
	long := g.register(200 * time.Second)
	mid := g.register(60 * time.Second)
	mid2 := g.register(60 * time.Second)
	g.arrive(short) // woke first: must not start before the longer ones
	if started(short) {
		t.Fatal("the shortest scenario started while longer ones were registered")
	}
	g.arrive(mid2)
	if started(mid2) {
		t.Fatal("a scenario started before the longest registered one")
	}
	g.arrive(long)
	if !started(long) {
		t.Fatal("the longest scenario did not start with a slot free")
	}
	g.arrive(mid)
	if !started(mid) || started(mid2) || started(short) {
		t.Fatalf("second slot: mid %v mid2 %v short %v; want mid (registered before mid2) alone",
			started(mid), started(mid2), started(short))
	}
	late := g.register(100 * time.Second) // a subtest registered meanwhile
	g.release()
	if started(mid2) || started(short) {
		t.Fatal("a freed slot went past the longest registered scenario, which had not arrived yet")
	}
	g.arrive(late)
	if !started(late) {
		t.Fatal("the longest registered scenario did not take the freed slot")
	}
	g.release()
	g.release()
	if !started(mid2) || !started(short) || g.running != 2 {
		t.Fatalf("after two more releases: mid2 %v short %v running %d", started(mid2), started(short), g.running)
	}
}
