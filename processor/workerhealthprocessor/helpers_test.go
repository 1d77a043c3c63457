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
	"github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/state"
	"github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/tracker"
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
	t     *testing.T
	p     *healthProcessor
	clock *clockwork.FakeClock
}

func newHarness(t *testing.T, cfg *Config, opts ...option) *harness {
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

// rec describes one log record.
type rec struct {
	worker, event, run string
	attrs              map[string]any
	ts                 time.Time
}

func putAttrs(m pcommon.Map, attrs map[string]any) {
	for k, v := range attrs {
		switch x := v.(type) {
		case string:
			m.PutStr(k, x)
		case int:
			m.PutInt(k, int64(x))
		case float64:
			m.PutDouble(k, x)
		case bool:
			m.PutBool(k, x)
		}
	}
}

// workerLogs builds a worker's own records (worker id on the resource).
func workerLogs(service string, recs ...rec) plog.Logs {
	ld := plog.NewLogs()
	byWorker := map[string]plog.LogRecordSlice{}
	for _, r := range recs {
		lrs, ok := byWorker[r.worker]
		if !ok {
			rl := ld.ResourceLogs().AppendEmpty()
			rl.Resource().Attributes().PutStr("service.name", service)
			rl.Resource().Attributes().PutStr("cicd.worker.id", r.worker)
			lrs = rl.ScopeLogs().AppendEmpty().LogRecords()
			byWorker[r.worker] = lrs
		}
		fillRec(lrs.AppendEmpty(), r)
	}
	return ld
}

func fillRec(lr plog.LogRecord, r rec) {
	lr.SetEventName(r.event)
	if !r.ts.IsZero() {
		lr.SetTimestamp(pcommon.NewTimestampFromTime(r.ts))
	}
	if r.run != "" {
		lr.Attributes().PutStr("cicd.pipeline.run.id", r.run)
	}
	putAttrs(lr.Attributes(), r.attrs)
}

// schedLogs builds the scheduler's records (worker id on each record).
func schedLogs(recs ...rec) plog.Logs {
	ld := plog.NewLogs()
	rl := ld.ResourceLogs().AppendEmpty()
	rl.Resource().Attributes().PutStr("service.name", "workersim-scheduler")
	lrs := rl.ScopeLogs().AppendEmpty().LogRecords()
	for _, r := range recs {
		lr := lrs.AppendEmpty()
		fillRec(lr, r)
		lr.Attributes().PutStr("cicd.worker.id", r.worker)
	}
	return ld
}

func wl(worker, event, run string, attrs map[string]any) plog.Logs {
	return workerLogs("worker", rec{worker: worker, event: event, run: run, attrs: attrs})
}

func sl(worker, event, run string) plog.Logs {
	return schedLogs(rec{worker: worker, event: event, run: run})
}

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

// treeMetrics is one scrape of a worker tree: memory split over two roles.
func treeMetrics(worker string, mem int64, cpuMainFraction float64, present int64) pmetric.Metrics { //nolint:unparam // internal/tracker's copy of this builder is called with other values
	md := pmetric.NewMetrics()
	rm := md.ResourceMetrics().AppendEmpty()
	rm.Resource().Attributes().PutStr("cicd.worker.id", worker)
	ms := rm.ScopeMetrics().AppendEmpty().Metrics()
	m := ms.AppendEmpty()
	m.SetName("process.memory.usage")
	mg := m.SetEmptyGauge()
	for _, role := range []string{"main", "child"} {
		dp := mg.DataPoints().AppendEmpty()
		dp.SetIntValue(mem / 2)
		dp.Attributes().PutStr("workerwatch.process.role", role)
	}
	if cpuMainFraction >= 0 {
		// A worker that may use 4 CPUs: utilization is a fraction of them.
		l := ms.AppendEmpty()
		l.SetName("workerwatch.worker.cpu.limit")
		l.SetEmptyGauge().DataPoints().AppendEmpty().SetDoubleValue(4)
		c := ms.AppendEmpty()
		c.SetName("process.cpu.utilization")
		g := c.SetEmptyGauge()
		for _, role := range []string{"main", "child"} {
			dp := g.DataPoints().AppendEmpty()
			dp.SetDoubleValue(cpuMainFraction)
			if role == "child" {
				dp.SetDoubleValue(0.2)
			}
			dp.Attributes().PutStr("workerwatch.process.role", role)
		}
	}
	if present >= 0 {
		pm := ms.AppendEmpty()
		pm.SetName("workerwatch.worker.present")
		pm.SetEmptyGauge().DataPoints().AppendEmpty().SetIntValue(present)
	}
	return md
}

// activeMetrics is w1's own count of the runs it holds.
func activeMetrics(n int64) pmetric.Metrics {
	md := pmetric.NewMetrics()
	rm := md.ResourceMetrics().AppendEmpty()
	rm.Resource().Attributes().PutStr("cicd.worker.id", "w1")
	m := rm.ScopeMetrics().AppendEmpty().Metrics().AppendEmpty()
	m.SetName("workerwatch.worker.runs.active")
	m.SetEmptyGauge().DataPoints().AppendEmpty().SetIntValue(n)
	return md
}

func pendingMetrics(n int64) pmetric.Metrics {
	md := pmetric.NewMetrics()
	rm := md.ResourceMetrics().AppendEmpty()
	rm.Resource().Attributes().PutStr("service.name", "workersim-scheduler")
	m := rm.ScopeMetrics().AppendEmpty().Metrics().AppendEmpty()
	m.SetName("workerwatch.scheduler.runs.pending")
	m.SetEmptyGauge().DataPoints().AppendEmpty().SetIntValue(n)
	return md
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

// tree is one scrape of a worker's tree as the worker_process receiver
// sends it; zero values are left out (present is sent unless -1).
type tree struct {
	worker   string
	roles    map[string]int64 // memory per role
	present  int64            // 1, 0, or -1 = not sent
	cpuMain  float64          // utilization of the main role (a fraction of cpuLimit); 0 = not sent
	cpuLimit float64          // 0 = not sent
	oom      int64            // cumulative oom kills, -1 = not sent
	exited   map[string]int64 // cumulative exits per role
}

func (x tree) metrics() pmetric.Metrics {
	md := pmetric.NewMetrics()
	rm := md.ResourceMetrics().AppendEmpty()
	rm.Resource().Attributes().PutStr("cicd.worker.id", x.worker)
	ms := rm.ScopeMetrics().AppendEmpty().Metrics()
	perRole := func(name string, vals map[string]int64, sum bool) {
		if len(vals) == 0 {
			return
		}
		m := ms.AppendEmpty()
		m.SetName(name)
		dps := m.SetEmptyGauge().DataPoints()
		if sum {
			s := m.SetEmptySum()
			s.SetIsMonotonic(true)
			s.SetAggregationTemporality(pmetric.AggregationTemporalityCumulative)
			dps = s.DataPoints()
		}
		for role, v := range vals {
			dp := dps.AppendEmpty()
			dp.SetIntValue(v)
			dp.Attributes().PutStr("workerwatch.process.role", role)
		}
	}
	one := func(name string, v float64) {
		m := ms.AppendEmpty()
		m.SetName(name)
		m.SetEmptyGauge().DataPoints().AppendEmpty().SetDoubleValue(v)
	}
	perRole("process.memory.usage", x.roles, false)
	perRole("workerwatch.process.exited", x.exited, true)
	if x.present >= 0 {
		one("workerwatch.worker.present", float64(x.present))
	}
	if x.cpuLimit > 0 {
		one("workerwatch.worker.cpu.limit", x.cpuLimit)
	}
	if x.cpuMain > 0 {
		m := ms.AppendEmpty()
		m.SetName("process.cpu.utilization")
		dp := m.SetEmptyGauge().DataPoints().AppendEmpty()
		dp.SetDoubleValue(x.cpuMain)
		dp.Attributes().PutStr("workerwatch.process.role", "main")
	}
	if x.oom > 0 {
		m := ms.AppendEmpty()
		m.SetName("workerwatch.cgroup.memory.oom_kills")
		m.SetEmptySum().DataPoints().AppendEmpty().SetIntValue(x.oom)
	}
	return md
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

// snapLogs is a scheduler's snapshot of the runs it holds for one worker.
func snapLogs(service, worker string, runs ...string) plog.Logs {
	ld := plog.NewLogs()
	rl := ld.ResourceLogs().AppendEmpty()
	rl.Resource().Attributes().PutStr("service.name", service)
	lr := rl.ScopeLogs().AppendEmpty().LogRecords().AppendEmpty()
	lr.SetEventName("workerwatch.scheduler.snapshot")
	lr.Attributes().PutStr("cicd.worker.id", worker)
	sl := lr.Attributes().PutEmptySlice("workerwatch.scheduler.runs")
	for _, r := range runs {
		sl.AppendEmpty().SetStr(r)
	}
	return ld
}
