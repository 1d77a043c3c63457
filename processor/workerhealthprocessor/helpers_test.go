package workerhealthprocessor

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/pcommon"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/processor/processorhelper"
	"go.opentelemetry.io/collector/processor/processortest"

	"github.com/workerwatch/workerwatch/internal/contract"
	"github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/metadata"
	"github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/pdatatest"
	"github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/state"
	"github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/tracker"
)

// The pdata builders the processor's packages' tests share
// (internal/pdatatest), under the names the tests call them by.
type (
	rec  = pdatatest.Rec
	tree = pdatatest.Tree
)

var (
	workerLogs     = pdatatest.WorkerLogs
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

const sec = time.Second

const (
	unknown   = contract.Unknown
	healthy   = contract.Healthy
	degraded  = contract.Degraded
	unhealthy = contract.Unhealthy
	lost      = contract.Lost
)

func hb(h *harness) { h.logs(wl("w1", "workerwatch.worker.heartbeat", "", nil)) }

// workerActive is worker's own count of the runs it holds.
func workerActive(worker string, n int64) pmetric.Metrics {
	md := activeMetrics(n)
	md.ResourceMetrics().At(0).Resource().Attributes().PutStr(contract.AttrWorkerID, worker)
	return md
}

// testCfg is the default config tuned to the simulator's cadence: every
// rule works at seconds.
func testCfg() *Config {
	cfg := createDefaultConfig().(*Config)
	cfg.EmitInterval = time.Second
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

// harness drives one processor instance with a fake clock, without timers:
// tests call eval() where the ticker would fire.
type harness struct {
	t     testing.TB
	p     *healthProcessor
	clock *clockwork.FakeClock
}

func newHarness(t testing.TB, cfg *Config, opts ...option) *harness {
	require.NoError(t, cfg.Validate())
	clock := clockwork.NewFakeClockAt(t0)
	p, err := newHealthProcessor(processortest.NewNopSettings(metadata.Type), cfg, append([]option{withClock(clock)}, opts...)...)
	require.NoError(t, err)
	t.Cleanup(p.tel.Shutdown)
	return &harness{t: t, p: p, clock: clock}
}

func (h *harness) advance(d time.Duration) { h.clock.Advance(d) }

// tick is one evaluation with its emission on the caller's goroutine; the
// timer loop hands the metrics to the emitter instead.
func (p *healthProcessor) tick(ctx context.Context) {
	p.sendMetrics(ctx, p.evaluate(ctx))
}

func (h *harness) logs(ld plog.Logs) {
	_, err := h.p.processLogs(context.Background(), ld)
	require.NoError(h.t, err)
}

// metrics feeds md; a batch the processor drops whole
// (limits.drop_untracked_metrics) is not an error.
func (h *harness) metrics(md pmetric.Metrics) {
	_, err := h.p.processMetrics(context.Background(), md)
	if !errors.Is(err, processorhelper.ErrSkipProcessingData) {
		require.NoError(h.t, err)
	}
}

func (h *harness) traces(td ptrace.Traces) {
	_, err := h.p.processTraces(context.Background(), td)
	require.NoError(h.t, err)
}

// eval runs one evaluation and returns the transitions.
func (h *harness) eval() []tracker.Transition {
	h.p.mu.Lock()
	defer h.p.mu.Unlock()
	trs, _ := h.p.tracker.Evaluate(h.clock.Now().UnixNano())
	return trs
}

func (h *harness) worker(id string) *tracker.Worker {
	h.p.mu.Lock()
	defer h.p.mu.Unlock()
	return h.p.tracker.Worker(id)
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

// stageSpan is one span of a worker's run stage, from start to end (unix ns).
func stageSpan(worker, stage string, start, end pcommon.Timestamp) ptrace.Traces {
	td := ptrace.NewTraces()
	rs := td.ResourceSpans().AppendEmpty()
	rs.Resource().Attributes().PutStr("cicd.worker.id", worker)
	sp := rs.ScopeSpans().AppendEmpty().Spans().AppendEmpty()
	sp.SetName(stage)
	sp.SetStartTimestamp(start)
	sp.SetEndTimestamp(end)
	return td
}

// metricsByWorker indexes derived metrics by the resource's worker id ("" for
// the fleet resource) and name.
func metricsByWorker(md pmetric.Metrics) map[string]map[string]pmetric.Metric {
	out := map[string]map[string]pmetric.Metric{}
	for i := 0; i < md.ResourceMetrics().Len(); i++ {
		rm := md.ResourceMetrics().At(i)
		id := ""
		if v, ok := rm.Resource().Attributes().Get(contract.AttrWorkerID); ok {
			id = v.Str()
		}
		if out[id] == nil {
			out[id] = map[string]pmetric.Metric{}
		}
		for j := 0; j < rm.ScopeMetrics().Len(); j++ {
			ms := rm.ScopeMetrics().At(j).Metrics()
			for k := 0; k < ms.Len(); k++ {
				out[id][ms.At(k).Name()] = ms.At(k)
			}
		}
	}
	return out
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

// pointFlags counts the points of md by worker (the fleet's resource: ""),
// and of those the ones flagged as having no recorded value.
func pointFlags(md pmetric.Metrics) (points, ended map[string]int) {
	points, ended = map[string]int{}, map[string]int{}
	count := func(id string, noValue bool) {
		points[id]++
		if noValue {
			ended[id]++
		}
	}
	for id, byName := range metricsByWorker(md) {
		for _, m := range byName {
			switch m.Type() {
			case pmetric.MetricTypeGauge:
				for i := 0; i < m.Gauge().DataPoints().Len(); i++ {
					count(id, m.Gauge().DataPoints().At(i).Flags().NoRecordedValue())
				}
			case pmetric.MetricTypeSum:
				for i := 0; i < m.Sum().DataPoints().Len(); i++ {
					count(id, m.Sum().DataPoints().At(i).Flags().NoRecordedValue())
				}
			case pmetric.MetricTypeHistogram:
				for i := 0; i < m.Histogram().DataPoints().Len(); i++ {
					count(id, m.Histogram().DataPoints().At(i).Flags().NoRecordedValue())
				}
			}
		}
	}
	return points, ended
}
