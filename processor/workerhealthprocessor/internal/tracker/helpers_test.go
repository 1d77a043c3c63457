package tracker

import (
	"sync"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"

	"github.com/workerwatch/workerwatch/internal/contract"
	"github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/mapping"
	"github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/pdatatest"
	"github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/state"
)

// The pdata builders the processor's packages' tests share
// (internal/pdatatest), under the names the tests call them by.
type (
	rec  = pdatatest.Rec
	tree = pdatatest.Tree
)

var (
	workerLogs     = pdatatest.WorkerLogs
	fillRec        = pdatatest.FillRec
	schedLogs      = pdatatest.SchedLogs
	wl             = pdatatest.WL
	sl             = pdatatest.SL
	snapLogs       = pdatatest.SnapLogs
	treeMetrics    = pdatatest.TreeMetrics
	activeMetrics  = pdatatest.ActiveMetrics
	pendingMetrics = pdatatest.PendingMetrics
	heldMetrics    = pdatatest.HeldMetrics
)

var t0 = time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)

// testConfig is what the processor's Config holds for the tracker and the
// mapping in front of it, under the same names, so a test changes
// c.Memory or c.Scheduler as it would the processor's.
type testConfig struct {
	Config
	Scheduler mapping.SchedulerConfig
	Mapping   mapping.Config
	Metrics   mapping.MetricsConfig
}

// testCfg is the default config tuned to the simulator's cadence: every
// rule works at seconds (the processor's tests use the same).
func testCfg() *testConfig {
	cfg := &testConfig{
		Config: DefaultConfig(), Scheduler: mapping.DefaultSchedulerConfig(),
		Mapping: mapping.DefaultConfig(), Metrics: mapping.DefaultMetricsConfig(),
	}
	cfg.Memory.SoftLimitBytes = 1000
	cfg.Memory.UnhealthyAfter = 0
	cfg.Stalled.After = 10 * time.Second
	cfg.Lost.After = 5 * time.Second
	cfg.Drift.Grace = 3 * time.Second
	cfg.Drift.TombstoneTTL = time.Minute
	cfg.Kills.Window = time.Minute
	cfg.Kills.ExitWindow = 3 * time.Second
	cfg.Limits.WorkerTTL = time.Minute
	return cfg
}

// tracker is the tracker's config as the processor derives it.
func (c *testConfig) tracker() *Config {
	tc := c.Config
	tc.StageSpanNames = c.Mapping.StageSpanNames
	tc.Schedulers = c.Scheduler.Schedulers(c.Mapping.WorkerIDAttributes)
	tc.IDKeys = mapping.IDKeys(c.Mapping.WorkerIDAttributes, tc.Schedulers)
	return &tc
}

// proc is the part of the processor a tracker test needs: the mapping in
// front of the tracker, and the lock it holds around it.
type proc struct {
	mu      sync.Mutex
	mapper  *mapping.Mapper
	tracker *Tracker
}

// harness drives one tracker with a fake clock through the mapping, as the
// processor does: tests call eval() where the processor's ticker would fire.
type harness struct {
	t     testing.TB
	p     *proc
	clock *clockwork.FakeClock
}

func newHarness(t testing.TB, cfg *testConfig) *harness {
	tc := cfg.tracker()
	m := mapping.New(&mapping.Settings{
		Mapping: &cfg.Mapping, Metrics: &cfg.Metrics, Schedulers: tc.Schedulers, IDKeys: tc.IDKeys,
		MaxAttributeLength: cfg.Limits.MaxAttributeLength, ChildRoles: cfg.Kills.ChildRoles,
	})
	clock := clockwork.NewFakeClockAt(t0)
	tr := New(tc)
	tr.SetStart(clock.Now().UnixNano())
	return &harness{t: t, p: &proc{mapper: m, tracker: tr}, clock: clock}
}

func (h *harness) advance(d time.Duration) { h.clock.Advance(d) }

// apply maps one input and applies its batch now.
func (h *harness) apply(fill func(*mapping.Batch)) {
	b := mapping.NewBatch()
	fill(b)
	h.p.mu.Lock()
	h.p.tracker.Apply(b, h.clock.Now().UnixNano())
	h.p.mu.Unlock()
}

func (h *harness) logs(ld plog.Logs) { h.apply(func(b *mapping.Batch) { h.p.mapper.Logs(ld, b) }) }

func (h *harness) metrics(md pmetric.Metrics) {
	h.apply(func(b *mapping.Batch) { h.p.mapper.Metrics(md, b) })
}

func (h *harness) traces(td ptrace.Traces) {
	h.apply(func(b *mapping.Batch) { h.p.mapper.Traces(td, b) })
}

// eval runs one evaluation and returns the transitions.
func (h *harness) eval() []Transition {
	h.p.mu.Lock()
	defer h.p.mu.Unlock()
	trs, _ := h.p.tracker.evaluate(h.clock.Now().UnixNano())
	return trs
}

func (h *harness) worker(id string) *Worker {
	h.p.mu.Lock()
	defer h.p.mu.Unlock()
	return h.p.tracker.workers.get(id)
}

func (h *harness) state(id string) contract.State {
	w := h.worker(id)
	if w == nil {
		return ""
	}
	return w.State
}

func (h *harness) codes(id string) []string {
	w := h.worker(id)
	var out []string
	for _, r := range w.Reasons {
		out = append(out, r.Code)
	}
	return out
}

// hasRun tells whether a worker's run table holds the run id.
func hasRun(t *state.RunTable, id string) bool { return t.Get(id, state.RunHash(id)) != nil }

// evalUnjoined runs one evaluation and returns the workers reported as
// named by one source only.
func (h *harness) evalUnjoined() []Unjoined {
	h.p.mu.Lock()
	defer h.p.mu.Unlock()
	_, uj := h.p.tracker.evaluate(h.clock.Now().UnixNano())
	return uj
}

// snap is the snapshot of one worker now.
func (h *harness) snap(id string) contract.Worker {
	h.p.mu.Lock()
	defer h.p.mu.Unlock()
	for _, w := range h.p.tracker.Snapshot(h.clock.Now().UnixNano()).Workers {
		if w.ID == id {
			return w
		}
	}
	h.t.Fatalf("no worker %s in the snapshot", id)
	return contract.Worker{}
}

// reason is w1's reason with this code.
func (h *harness) reason(code string) contract.Reason {
	for _, r := range h.worker("w1").Reasons {
		if r.Code == code {
			return r
		}
	}
	h.t.Fatalf("w1 has no reason %s: %v", code, h.codes("w1"))
	return contract.Reason{}
}

// healed reads and resets the runs let go per side.
func (h *harness) healed() [2]int64 {
	h.p.mu.Lock()
	defer h.p.mu.Unlock()
	n := h.p.tracker.healed
	h.p.tracker.healed = [2]int64{}
	return n
}
