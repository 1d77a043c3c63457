package workerhealthprocessor

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"runtime"
	"slices"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/pmetric"

	"github.com/workerwatch/workerwatch/internal/contract"
	"github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/state"
	"github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/tracker"
)

// A worker seen once changes state silently and is not exported; seen
// again, its state so far is announced, once.
func TestSeenOnceIsAnnouncedWhenSeenAgain(t *testing.T) {
	h := newHarness(t, testCfg())
	h.logs(wl("w1", contract.EventHeartbeat, "", nil))
	assert.Empty(t, h.eval(), "no transition while seen once")
	h.p.mu.Lock()
	md := buildMetrics(h.p.tracker, t0.UnixNano(), h.clock.Now().UnixNano())
	h.p.mu.Unlock()
	assert.NotContains(t, metricsByWorker(md), "w1")
	assert.Equal(t, healthy, h.state("w1"), "judged all the same (the API shows it)")
	h.advance(sec)
	h.logs(wl("w1", contract.EventHeartbeat, "", nil))
	assert.Empty(t, h.eval(), "the next interval: still seen once")
	h.advance(sec)
	h.logs(wl("w1", contract.EventHeartbeat, "", nil))
	trs := h.eval()
	require.Len(t, trs, 1)
	assert.Equal(t, tracker.Transition{Worker: "w1", From: unknown, To: healthy, Reasons: trs[0].Reasons, At: h.clock.Now().UnixNano()}, trs[0])
	assert.Empty(t, h.eval())
}

// A flood through the processor's own input path (as over OTLP): 100,000
// worker ids with 10 run ids each, records only, while real workers report.
// The state stays bounded and the real workers stay tracked and exported;
// a new real worker arrives in the middle of it and is tracked.
func TestFloodStaysBounded(t *testing.T) {
	if testing.Short() {
		t.Skip("a flood of 100,000 ids")
	}
	cfg := testCfg()
	h := newHarness(t, cfg)
	report := func(n int) {
		for i := range n {
			h.metrics(treeMetrics(fmt.Sprintf("real-%d", i), 10, -1, 1))
		}
	}
	report(50)
	h.eval()
	base := heapAfterGC()
	for i := range 100_000 {
		recs := make([]rec, 10)
		for r := range recs {
			recs[r] = rec{Worker: fmt.Sprintf("flood-%d", i), Event: contract.EventClaimed, Run: fmt.Sprintf("run-%d-%d", i, r)}
		}
		h.logs(workerLogs("flood", recs...))
		if i%10_000 == 0 {
			h.advance(sec)
			report(50)
			h.eval()
		}
		if i == 50_000 {
			h.metrics(treeMetrics("newcomer", 10, -1, 1))
		}
	}
	h.eval()
	grown := int64(heapAfterGC()) - int64(base)
	h.p.mu.Lock()
	defer h.p.mu.Unlock()
	tr := h.p.tracker
	n := tr.Tracked()
	t.Logf("after the flood: %v workers by evidence, %d runs, heap +%.1f MiB, refused %v",
		n, tr.RunCount(), float64(grown)/(1<<20), tr.TakeCounts().Admission.WorkersRefused)
	assert.LessOrEqual(t, n[state.EvidenceOnce], int64(cfg.Limits.MaxUnconfirmedWorkers))
	assert.LessOrEqual(t, tr.RunCount(), cfg.Limits.MaxUnconfirmedWorkers*4, "4 runs at most per worker seen once (internal/tracker/admission.go)")
	assert.Equal(t, int64(51), n[state.EvidenceConfirmed], "every real worker, the newcomer too")
	assert.Less(t, grown, int64(20<<20), "bounded: about a thousand workers seen once with 4 runs each")
	md := buildMetrics(tr, t0.UnixNano(), h.clock.Now().UnixNano())
	assert.Len(t, metricsByWorker(md), 52, "the real workers and the fleet resource: no flood id is exported")
	runtime.KeepAlive(h)
}

func TestTransitionsAreReported(t *testing.T) {
	h := newHarness(t, testCfg())
	h.metrics(treeMetrics("w1", 10, -1, 1)) // confirmed: announced at once (internal/tracker/admission.go)
	trs := h.eval()
	require.Len(t, trs, 1)
	assert.Equal(t, tracker.Transition{Worker: "w1", From: unknown, To: healthy, Reasons: trs[0].Reasons, At: t0.UnixNano()}, trs[0])
	assert.Empty(t, h.eval(), "no transition without a change")
	ld := buildLogs(trs)
	lr := ld.ResourceLogs().At(0).ScopeLogs().At(0).LogRecords().At(0)
	assert.Equal(t, contract.EventStateChange, lr.EventName())
	from, _ := lr.Attributes().Get("workerwatch.worker.state.from")
	to, _ := lr.Attributes().Get("workerwatch.worker.state.to")
	assert.Equal(t, "unknown", from.Str())
	assert.Equal(t, "healthy", to.Str())
	assert.Equal(t, "worker w1: unknown -> healthy ()", lr.Body().Str())
}

// statePoints is w1's workerwatch.worker.state points in md: value by state.
func statePoints(t *testing.T, md pmetric.Metrics) map[contract.State]int64 {
	t.Helper()
	m, ok := metricsByWorker(md)["w1"][contract.MetricState]
	require.True(t, ok, "w1 has a state metric")
	out := map[contract.State]int64{}
	dps := m.Gauge().DataPoints()
	for i := 0; i < dps.Len(); i++ {
		s, _ := dps.At(i).Attributes().Get(contract.AttrState)
		out[contract.State(s.Str())] = dps.At(i).IntValue()
	}
	return out
}

// The state set is six points while the worker's state is recent (so an
// exporter replaces the 1 of the state it left with 0), then the current
// state's 1 alone (issue 24: a steady worker is one series, not six).
func TestStateSetSparseWhenSteady(t *testing.T) {
	h := newHarness(t, testCfg())
	emit := func() pmetric.Metrics {
		h.p.mu.Lock()
		defer h.p.mu.Unlock()
		return buildMetrics(h.p.tracker, t0.UnixNano(), h.clock.Now().UnixNano())
	}
	step := func(mem int64) {
		h.metrics(treeMetrics("w1", mem, 0.1, 1))
		h.logs(wl("w1", contract.EventHeartbeat, "", nil))
		h.eval()
	}
	step(10)
	first := h.state("w1")
	pts := statePoints(t, emit())
	assert.Len(t, pts, len(contract.AllStates), "a new state: the six points")
	assert.Equal(t, int64(1), pts[first])

	since := h.worker("w1").Since
	for h.clock.Now().UnixNano()-since < int64(stateZerosFor) {
		h.advance(10 * sec)
		step(10)
		require.Equal(t, first, h.state("w1"), "steady")
		if h.clock.Now().UnixNano()-since < int64(stateZerosFor) {
			assert.Len(t, statePoints(t, emit()), len(contract.AllStates), "still recent")
		}
	}
	assert.Equal(t, map[contract.State]int64{first: 1}, statePoints(t, emit()), "steady for stateZerosFor: one point")

	// Over its memory soft limit: a new state, the six points again, the
	// one left at 0.
	h.advance(10 * sec)
	step(1 << 20)
	now := h.state("w1")
	require.NotEqual(t, first, now)
	pts = statePoints(t, emit())
	assert.Len(t, pts, len(contract.AllStates))
	assert.Equal(t, int64(1), pts[now])
	assert.Equal(t, int64(0), pts[first])
}

// The drift gauges are sent while the worker has drift and for
// stateZerosFor after (so an exporter replaces the counts with 0), not for
// a worker without drift (issue 24: three series fewer per steady worker).
func TestDriftGaugesSparse(t *testing.T) {
	h := newHarness(t, testCfg())
	drift := func() (pmetric.Metric, bool) {
		h.p.mu.Lock()
		defer h.p.mu.Unlock()
		m, ok := metricsByWorker(buildMetrics(h.p.tracker, t0.UnixNano(), h.clock.Now().UnixNano()))["w1"][contract.MetricDrift]
		return m, ok
	}
	alive := func() {
		h.metrics(treeMetrics("w1", 10, -1, 1))
		h.logs(schedLogs(rec{Worker: "w1", Event: contract.EventHeartbeat}))
		h.eval()
	}
	alive()
	_, ok := drift()
	assert.False(t, ok, "no drift: no gauge")

	// The worker holds b, the scheduler c: drift after the grace.
	h.logs(wl("w1", contract.EventClaimed, "b", nil))
	h.logs(sl("w1", contract.EventClaimed, "c"))
	for range 5 {
		h.advance(sec)
		alive()
	}
	m, ok := drift()
	require.True(t, ok, "drift: the gauge")
	total := int64(0)
	for i := 0; i < m.Gauge().DataPoints().Len(); i++ {
		total += m.Gauge().DataPoints().At(i).IntValue()
	}
	require.Positive(t, total)

	// Both views agree again: zeros for stateZerosFor, then no gauge.
	h.logs(wl("w1", contract.EventFinished, "b", map[string]any{contract.AttrResult: contract.ResultSuccess}))
	h.logs(sl("w1", contract.EventFinished, "c"))
	h.advance(sec)
	alive()
	cleared := h.clock.Now()
	m, ok = drift()
	require.True(t, ok, "just cleared: the gauge, at 0")
	for i := 0; i < m.Gauge().DataPoints().Len(); i++ {
		assert.Zero(t, m.Gauge().DataPoints().At(i).IntValue())
	}
	for h.clock.Now().Sub(cleared) < stateZerosFor-10*sec {
		h.advance(10 * sec)
		alive()
		_, ok = drift()
		require.True(t, ok, "%s after: still the zeros", h.clock.Now().Sub(cleared))
	}
	h.advance(20 * sec)
	alive()
	_, ok = drift()
	assert.False(t, ok, "stateZerosFor after: no gauge")
}

// A "snapshots" scheduler that states only a count names no run: the drift
// it shows is a count (state.Drift.MissN), and the drift gauge carries it as
// the health API's missing_count does, not the 0 of the runs named.
func TestDriftGaugeOfACount(t *testing.T) {
	cfg := testCfg()
	cfg.Scheduler.View = contract.ViewSnapshots
	cfg.Scheduler.SnapshotInterval = 2 * sec
	h := newHarness(t, cfg)
	h.logs(wl("w1", contract.EventHeartbeat, "", nil))
	h.logs(wl("w1", contract.EventClaimed, "r1", nil))
	h.metrics(heldMetrics("workersim-scheduler", map[string]int64{"w1": 3}))
	h.advance(4 * sec)
	h.logs(wl("w1", contract.EventHeartbeat, "", nil))
	h.eval()
	require.Equal(t, 2, h.snap("w1").Drift.MissingCount())
	h.p.mu.Lock()
	m, ok := metricsByWorker(buildMetrics(h.p.tracker, t0.UnixNano(), h.clock.Now().UnixNano()))["w1"][contract.MetricDrift]
	h.p.mu.Unlock()
	require.True(t, ok, "drift of a count: the gauge")
	byKind := map[string]int64{}
	for i := 0; i < m.Gauge().DataPoints().Len(); i++ {
		dp := m.Gauge().DataPoints().At(i)
		k, _ := dp.Attributes().Get(contract.AttrDriftKind)
		byKind[k.Str()] = dp.IntValue()
	}
	assert.Equal(t, map[string]int64{contract.DriftMissing: 2, contract.DriftOrphaned: 0, contract.DriftOverCapacity: 0}, byKind)
}

// resend_interval: a worker's series are sent at the evaluation that sees a
// change and again once resend_interval has passed, not at every
// evaluation; the fleet figures at every one. A change in an emission that
// was superseded or refused is sent by the next evaluation. With
// resend_interval 0, every worker at every evaluation (as before it).
func TestResendOnlyWhatChanged(t *testing.T) {
	ctx := context.Background()
	workers := []string{"w1", "w2"}
	// steady starts w1 and w2 (seen in two intervals: past seen-once) and
	// returns the harness a second after its first emission of both.
	steady := func(t *testing.T, resend time.Duration) (*harness, *consumertest.MetricsSink) {
		cfg := testCfg()
		cfg.ResendInterval = resend
		h := newHarness(t, cfg)
		ms, _ := h.withSinks()
		for range 5 {
			for _, w := range workers {
				h.metrics(treeMetrics(w, 10, -1, 1))
			}
			h.p.tick(ctx)
			h.advance(sec)
			if slices.Equal(sentWorkers(t, ms), workers) {
				return h, ms
			}
		}
		require.FailNow(t, "w1 and w2 were never exported")
		return nil, nil
	}
	// next feeds both trees, runs one evaluation and emission, and returns
	// the workers the emission held.
	next := func(h *harness, ms *consumertest.MetricsSink) []string {
		for _, w := range workers {
			h.metrics(treeMetrics(w, 10, -1, 1))
		}
		h.p.tick(ctx)
		h.advance(sec)
		return sentWorkers(t, ms)
	}
	claim := func(h *harness, run string) {
		h.logs(workerLogs("workersim-worker", rec{Worker: "w1", Event: contract.EventClaimed, Run: run}))
	}

	// sentSeries are the names of w1's series in the last emission.
	sentSeries := func(ms *consumertest.MetricsSink) []string {
		all := ms.AllMetrics()
		return slices.Sorted(maps.Keys(metricsByWorker(all[len(all)-1])["w1"]))
	}
	t.Run("changes and every resend_interval", func(t *testing.T) {
		h, ms := steady(t, time.Minute) // both sent at T
		assert.Empty(t, next(h, ms), "T+1 s, nothing changed: no worker's series")
		claim(h, "r1")
		assert.Equal(t, []string{"w1"}, next(h, ms), "T+2 s, w1 holds a run now: only w1")
		assert.Equal(t, []string{contract.MetricClaims, contract.MetricRunsHeld}, sentSeries(ms),
			"only the series that changed (seriesGroups): its state is as it was sent at T")
		h.logs(workerLogs("workersim-worker", rec{Worker: "w1", Event: contract.EventFinished, Run: "r1", Attrs: map[string]any{contract.AttrResult: contract.ResultSuccess}}))
		claim(h, "r2")
		assert.Equal(t, []string{"w1"}, next(h, ms), "T+3 s, w1 ended a run and claimed the next")
		assert.Equal(t, []string{contract.MetricClaims}, sentSeries(ms), "a busy worker: its claims alone (still one run held)")
		assert.Empty(t, next(h, ms))
		// Each is sent again whole between half a minute and a minute after
		// it was last sent whole, at a point of its own; then again as long
		// after. Nothing changes meanwhile: every worker sent is sent whole.
		sentAt := map[string][]int{"w1": {0}, "w2": {0}}
		for s := 5; s <= 130; s++ {
			for _, w := range next(h, ms) {
				sentAt[w] = append(sentAt[w], s)
				if w == "w1" {
					assert.Contains(t, sentSeries(ms), contract.MetricState, "T+%d s: w1 sent again whole", s)
				}
			}
		}
		for w, at := range sentAt {
			require.GreaterOrEqual(t, len(at), 3, "%s sent at T+%v s", w, at)
			for i := 1; i < len(at); i++ {
				gap := at[i] - at[i-1]
				assert.True(t, gap >= 30 && gap <= 60, "%s sent again %d s after it was sent (T+%v s)", w, gap, at)
			}
		}
	})

	t.Run("a superseded emission's change is sent by the next", func(t *testing.T) {
		h, ms := steady(t, time.Minute)
		claim(h, "r1")
		em := h.p.evaluate(ctx) // replaced in the slot before the emitter took it
		md := pmetric.NewMetrics()
		renderRows(md, em.rows, em.start, em.at)
		require.Equal(t, []string{"w1"}, workersOf(md))
		h.advance(sec)
		h.p.tick(ctx)
		assert.Equal(t, []string{"w1"}, sentWorkers(t, ms), "w1's change, although the emission that first held it was never delivered")
		h.advance(sec)
		assert.Empty(t, next(h, ms))
	})

	t.Run("a refused emission's change is sent by the next", func(t *testing.T) {
		h, ms := steady(t, time.Minute)
		h.p.mu.Lock()
		keep := h.p.targets
		h.p.targets = []*pipeline{{metrics: consumertest.NewErr(errors.New("refused"))}}
		h.p.mu.Unlock()
		claim(h, "r1")
		h.p.tick(ctx)
		h.advance(sec)
		h.p.mu.Lock()
		h.p.targets = keep
		h.p.mu.Unlock()
		assert.Equal(t, []string{"w1"}, next(h, ms))
		assert.Empty(t, next(h, ms))
	})

	t.Run("resend_interval 0: every worker at every evaluation", func(t *testing.T) {
		h, ms := steady(t, 0)
		for range 3 {
			assert.Equal(t, workers, next(h, ms))
		}
	})
}

// sentWorkers are the workers in the sink's last emission, which must also
// hold the fleet figures.
func sentWorkers(t *testing.T, ms *consumertest.MetricsSink) []string {
	t.Helper()
	all := ms.AllMetrics()
	require.NotEmpty(t, all)
	md := all[len(all)-1]
	require.Contains(t, metricsByWorker(md)[""], contract.MetricFleetWorkers, "the fleet figures are in every emission")
	return workersOf(md)
}

// workersOf lists the workers with series in md, sorted.
func workersOf(md pmetric.Metrics) []string {
	var ids []string
	for id := range metricsByWorker(md) {
		if id != "" {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

// workersOfAll lists the workers with series in any of mds (the pieces of
// one emission), in order.
func workersOfAll(mds []pmetric.Metrics) []string {
	var ids []string
	for _, md := range mds {
		ids = append(ids, workersOf(md)...)
	}
	return ids
}

// piecesCfg holds n workers and sends every worker's series at every
// evaluation: an emission of n rows.
func piecesCfg(n int) *Config {
	cfg := testCfg()
	cfg.Limits.MaxWorkers = n
	cfg.ResendInterval = 0
	return cfg
}

// An emission goes downstream in pieces of at most emitChunk workers and
// about emitPoints points (pieceEnds), one ConsumeMetrics each, in order:
// every worker once, the fleet figures last. So do the state-change records
// of a wave over the whole fleet (every worker judged at the same
// evaluation), in pieces of at most emitChunk workers, one ConsumeLogs each.
func TestEmissionInPieces(t *testing.T) {
	ctx := context.Background()
	const n = 2*emitChunk + 1
	h := newHarness(t, piecesCfg(n))
	ms, ls := h.withSinks()
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("w%05d", i)
	}
	var calls []pmetric.Metrics
	for range 5 { // a worker is exported once seen in two intervals
		for _, id := range ids {
			h.metrics(treeMetrics(id, 10, -1, 1))
		}
		before := len(ms.AllMetrics())
		h.p.tick(ctx)
		h.advance(sec)
		if calls = ms.AllMetrics()[before:]; len(calls) > 1 {
			break
		}
	}
	require.Greater(t, len(calls), 2, "%d workers and the fleet resource in pieces", n)
	var got []string
	for k, md := range calls {
		ws := workersOf(md)
		require.LessOrEqual(t, len(ws), emitChunk, "piece %d", k)
		points := md.DataPointCount()
		if k == len(calls)-1 { // less the fleet's
			fleet := pmetric.NewMetrics()
			md.ResourceMetrics().At(md.ResourceMetrics().Len() - 1).CopyTo(fleet.ResourceMetrics().AppendEmpty())
			points -= fleet.DataPointCount()
		} else {
			require.GreaterOrEqual(t, points, emitPoints, "piece %d ends at emitPoints", k)
		}
		require.Less(t, points, emitPoints+maxRowPoints, "piece %d: %d workers", k, len(ws))
		got = append(got, ws...)
	}
	require.Equal(t, ids, got, "every worker once, in order")
	require.Contains(t, metricsByWorker(calls[len(calls)-1])[""], contract.MetricFleetWorkers, "the fleet figures in the last piece")

	// The wave: each worker's first verdict (unknown -> healthy) came at
	// the same evaluation.
	seen := map[string]int{}
	var order []string
	for k, ld := range ls.AllLogs() {
		require.LessOrEqual(t, ld.ResourceLogs().Len(), emitChunk, "state-change piece %d", k)
		for i := 0; i < ld.ResourceLogs().Len(); i++ {
			id, _ := ld.ResourceLogs().At(i).Resource().Attributes().Get(contract.AttrWorkerID)
			if seen[id.Str()]++; seen[id.Str()] == 1 {
				order = append(order, id.Str())
			}
		}
	}
	require.Equal(t, ids, order, "a state change of every worker, in order")
	require.GreaterOrEqual(t, len(ls.AllLogs()), 3, "%d workers' state changes in pieces of %d", n, emitChunk)
}

// slowMetrics is a next consumer that takes `took` for each call and
// records when each call began and ended.
type slowMetrics struct {
	took       time.Duration
	began, end []time.Time
}

func (s *slowMetrics) Capabilities() consumer.Capabilities { return consumer.Capabilities{} }

func (s *slowMetrics) ConsumeMetrics(context.Context, pmetric.Metrics) error {
	s.began = append(s.began, time.Now())
	time.Sleep(s.took)
	s.end = append(s.end, time.Now())
	return nil
}

// The emitter pauses between two pieces for as long as the last one took:
// an emission is background work beside the health API, and the time
// between its pieces is the API's (docs/results/scaling.md, runs 29 to 33).
// Not when the emission, paused to its end, would end past half of
// emit_interval, nor when a newer emission waits (it must not fall
// behind), nor at shutdown, nor after the last piece.
func TestEmitterPausesBetweenPieces(t *testing.T) {
	ctx := context.Background()
	const n = 301 // a few pieces (pieceEnds)
	cfg := piecesCfg(n)
	cfg.EmitInterval = time.Minute // the pauses fit in its half
	h := newHarness(t, cfg)
	h.withSinks()
	var em *emission
	for range 5 { // a worker is exported once seen in two intervals
		for i := range n {
			h.metrics(treeMetrics(fmt.Sprintf("w%05d", i), 10, -1, 1))
		}
		if em = h.p.evaluate(ctx); em != nil && len(em.rows) == n {
			break
		}
		h.advance(sec)
	}
	require.Len(t, em.rows, n, "every worker's series in the emission")
	sink := &slowMetrics{took: 50 * time.Millisecond}
	em.to, em.gone = []consumer.Metrics{sink}, []*atomic.Bool{new(atomic.Bool)}
	h.p.sendMetrics(ctx, em)
	require.Greater(t, len(sink.began), 2)
	require.Len(t, sink.began, len(pieceEnds(em.rows)), "%d workers and the fleet in pieces", n)
	for k := 1; k < len(sink.began); k++ {
		// The pause is at least what the piece took, which is at least
		// what the consumer took: a lower bound a timer keeps.
		require.GreaterOrEqual(t, sink.began[k].Sub(sink.end[k-1]), sink.took, "pause before piece %d", k)
	}

	t.Run("not while a newer emission waits", func(t *testing.T) {
		// The piece takes an hour to yield for: a pause would not end
		// within the test's deadline.
		done := make(chan struct{})
		h.p.latest.mu.Lock()
		h.p.latest.pending = &emission{}
		h.p.latest.mu.Unlock()
		go func() {
			defer close(done)
			h.p.yield(ctx, em, time.Hour)
		}()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatal("the emitter paused with a newer emission waiting")
		}
		h.p.take()
	})
	t.Run("not when the processor stops", func(t *testing.T) {
		cctx, cancel := context.WithCancel(ctx)
		done := make(chan struct{})
		go func() {
			defer close(done)
			h.p.yield(cctx, em, time.Hour)
		}()
		cancel()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatal("the emitter's pause outlived its context")
		}
	})
	t.Run("not when the emission, paused, would end past half of emit_interval", func(t *testing.T) {
		pc := pacer{start: time.Now(), budget: time.Second, total: 12}
		require.Equal(t, 10*time.Millisecond, pc.pause(10*time.Millisecond), "11 pieces and pauses of 10 ms fit in 1 s")
		pc = pacer{start: time.Now(), budget: time.Second, total: 60}
		require.Zero(t, pc.pause(10*time.Millisecond), "59 pieces and pauses of 10 ms do not")
		pc = pacer{start: time.Now(), budget: time.Second, total: 1}
		require.Zero(t, pc.pause(10*time.Millisecond), "none after the last piece")
	})
	t.Run("not in the ends of series at shutdown", func(t *testing.T) {
		done := make(chan struct{})
		go func() {
			defer close(done)
			h.p.yield(ctx, &emission{final: true}, time.Hour)
		}()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatal("the shutdown's ends of series paused between their pieces")
		}
	})
}

// maxRowPoints is the most points a worker's row makes: six states, six
// transitions, two held, three drift, two claims and the kills.
const maxRowPoints = 6 + 6 + 2 + 3 + 2 + state.NKillReasons

// Pieces end at emitChunk rows or at the row that brings them to
// emitPoints points; an emission without rows is one piece (the fleet's).
func TestPieceEnds(t *testing.T) {
	rows := func(n int, left seriesGroups, v seriesValues) []workerRow {
		rs := make([]workerRow, n)
		for i := range rs {
			rs[i] = workerRow{id: strconv.Itoa(i), left: left, seriesValues: v}
		}
		return rs
	}
	assert.Equal(t, []int{0}, pieceEnds(nil))
	// Claims alone: 2 points a row, so emitPoints ends the pieces.
	assert.Equal(t, []int{500, 1000, 1001}, pieceEnds(rows(1001, groupVerdict|groupHeld, seriesValues{})))
	// A worker just judged: 6 states, a transition, 2 held, 2 claims.
	fresh := seriesValues{verdictValues: verdictValues{zeros: true, transitions: [6]uint32{1}}}
	r := workerRow{seriesValues: fresh}
	require.Equal(t, 11, r.points())
	assert.Equal(t, []int{91, 182, 200}, pieceEnds(rows(200, 0, fresh)))
	// Rows without points (none are emitted, but the bound holds): emitChunk.
	assert.Equal(t, []int{emitChunk, 2 * emitChunk, 2*emitChunk + 1}, pieceEnds(rows(2*emitChunk+1, allGroups, seriesValues{})))
}

// An emission's points (the superseded counter counts them without
// rendering) are those renderRows makes, for every shape a row takes and
// every set of groups left out.
func TestRowPoints(t *testing.T) {
	for _, zeros := range []bool{false, true} {
		for _, drifted := range []bool{false, true} {
			for k := range 4 {
				v := seriesValues{
					verdictValues: verdictValues{state: uint8(k % len(contract.AllStates)), zeros: zeros, drifted: drifted},
					held:          [2]int32{1, int32(k)}, claims: [2]int64{3, 2},
				}
				for i := range k {
					v.transitions[i] = uint32(i + 1)
					v.kills[i] = uint32(k)
				}
				if drifted {
					v.drift = [3]int32{int32(k), 0, 1}
				}
				for left := range allGroups + 1 {
					r := workerRow{id: "w", left: left, seriesValues: v}
					md := pmetric.NewMetrics()
					renderRows(md, []workerRow{r}, 1, 2)
					assert.Equal(t, md.DataPointCount(), r.points(), "%+v", r)
				}
			}
		}
	}
}

// A worker that claimed and started a run once and then only sends
// heartbeats keeps the run on both sides past lost.after, and its series
// unchanged: sent again only at its resend_interval points, never as a
// change (the load shape of make scale-figures; docs/results/scaling.md,
// run 24).
func TestHeartbeatsKeepTheRunPastLostAfter(t *testing.T) {
	cfg := testCfg()
	cfg.Lost.After = 2 * time.Minute
	cfg.EmitInterval = 10 * time.Second
	cfg.Drift.Grace = 30 * time.Second
	cfg.Limits.WorkerTTL = time.Hour
	h := newHarness(t, cfg)
	ms, _ := h.withSinks()
	ctx := context.Background()
	beat := func() {
		h.logs(workerLogs("workersim-worker", rec{Worker: "w1", Event: contract.EventHeartbeat, TS: h.clock.Now(), Attrs: map[string]any{contract.AttrCapacity: int64(2)}}))
	}
	beat()
	h.logs(workerLogs("workersim-worker",
		rec{Worker: "w1", Event: contract.EventClaimed, Run: "r1", TS: h.clock.Now()},
		rec{Worker: "w1", Event: contract.EventStarted, Run: "r1", TS: h.clock.Now()}))
	h.logs(workerLogs("workersim-scheduler", rec{Worker: "w1", Event: contract.EventClaimed, Run: "r1", TS: h.clock.Now()}))
	var sentAt []int
	for i := 1; i <= 21; i++ { // 210 s, past lost.after
		h.advance(cfg.EmitInterval)
		beat()
		before := len(ms.AllMetrics())
		h.p.tick(ctx)
		require.Equal(t, contract.Healthy, h.state("w1"), "t+%ds", i*10)
		w := h.worker("w1")
		require.Equal(t, [2]int32{1, 1}, [2]int32{w.HeldW, w.HeldS}, "t+%ds: the run held on both sides", i*10)
		if len(ms.AllMetrics()) > before {
			if points, _ := pointFlags(ms.AllMetrics()[len(ms.AllMetrics())-1]); points["w1"] > 0 {
				sentAt = append(sentAt, i*10)
			}
		}
	}
	require.NotEmpty(t, sentAt)
	for k := 1; k < len(sentAt); k++ {
		gap := time.Duration(sentAt[k]-sentAt[k-1]) * time.Second
		assert.GreaterOrEqual(t, gap, cfg.ResendInterval/2, "sent at %v: only at resend points", sentAt)
	}
}

// Workers alike (the same series values) and sent together are sent again
// spread over time, not all at one evaluation: within a minute each settles
// on a phase of its own, and then every evaluation sends about
// emit_interval / resend_interval of them, each worker once a minute.
func TestResendSpreadsAlikeWorkers(t *testing.T) {
	cfg := testCfg()
	cfg.ResendInterval = time.Minute
	cfg.EmitInterval = 10 * time.Second
	cfg.Lost.After = 10 * time.Minute
	cfg.Limits.WorkerTTL = time.Hour
	h := newHarness(t, cfg)
	ms, _ := h.withSinks()
	ctx := context.Background()
	const n = 600
	feed := func() {
		for i := range n {
			h.metrics(treeMetrics(fmt.Sprintf("w%03d", i), 100, -1, 1))
		}
	}
	// Seen in two intervals, then sent together.
	together := false
	for range 5 {
		ms.Reset()
		feed()
		h.p.tick(ctx)
		h.advance(cfg.EmitInterval)
		if len(workersOfAll(ms.AllMetrics())) == n {
			together = true
			break
		}
	}
	require.True(t, together, "all sent together")
	var perEval []int
	seen := map[string]int{}
	for e := range 12 { // the next two minutes
		ms.Reset()
		feed()
		h.p.tick(ctx)
		h.advance(cfg.EmitInterval)
		ids := workersOfAll(ms.AllMetrics())
		perEval = append(perEval, len(ids))
		if e >= 6 {
			for _, id := range ids {
				seen[id]++
			}
		}
	}
	t.Logf("workers sent again per evaluation over the next two minutes: %v", perEval)
	for _, k := range perEval {
		// About half at the first point (those whose phase is not within
		// reach), never all.
		assert.LessOrEqual(t, k, 2*n/3, "not all at one point: %v", perEval)
	}
	for _, k := range perEval[6:] {
		assert.LessOrEqual(t, k, n/4, "the second minute, settled: about a sixth each: %v", perEval)
	}
	assert.Len(t, seen, n, "every worker sent again in the second minute")
	for id, k := range seen {
		assert.Equal(t, 1, k, "%s sent once in the second minute", id)
	}
}
