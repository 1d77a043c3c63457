package workerhealthprocessor

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.uber.org/zap"
	"go.uber.org/zap/zaptest/observer"

	"github.com/workerwatch/workerwatch/internal/contract"
	"github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/tracker"
)

// fakeCluster is a clustered worker_health extension: the workers this
// shard owns and the pending count another shard reports.
type fakeCluster struct {
	subscriber
	mu        sync.Mutex
	elsewhere map[string]bool
	pending   int64
	at        time.Time
}

func (f *fakeCluster) Owns(id string) bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return !f.elsewhere[id]
}

func (f *fakeCluster) ClusterPending() (int64, time.Time, bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.pending, f.at, f.pending >= 0
}

func (f *fakeCluster) move(id string) {
	f.mu.Lock()
	f.elsewhere[id] = true
	f.mu.Unlock()
}

// clustered wires a fake cluster into the harness; the logger is observed.
func clustered(h *harness) (*fakeCluster, *observer.ObservedLogs) {
	core, logs := observer.New(zap.WarnLevel)
	f := &fakeCluster{elsewhere: map[string]bool{}, pending: -1}
	h.p.shard = newShard(f, zap.New(core))
	require.NotNil(h.t, h.p.shard)
	return f, logs
}

// tick is the processor's evaluation as the timer runs it: hand-over first.
func (h *harness) tick() (handed int64, trs []tracker.Transition) {
	h.p.mu.Lock()
	defer h.p.mu.Unlock()
	now := h.clock.Now().UnixNano()
	handed, _ = h.p.shard.handOver(h.p.tracker, now)
	trs, _ = h.p.tracker.Evaluate(now)
	return handed, trs
}

// A worker whose records now go to another shard is forgotten at the next
// evaluation: no `lost`, no transition, not in the snapshot or the metrics.
// Records still in flight re-create it only until the next evaluation; if
// they keep coming for a minute, the rings disagree and a warning says so.
func TestHandOverForgetsWorkersOwnedElsewhere(t *testing.T) {
	h := newHarness(t, testCfg())
	fc, logs := clustered(h)
	for _, id := range []string{"w1", "w2"} {
		h.metrics(treeMetrics(id, 100, -1, 1))
	}
	n, trs := h.tick()
	require.Zero(t, n)
	require.Len(t, trs, 2)
	require.Equal(t, contract.Healthy, h.state("w2"))

	fc.move("w2")
	h.advance(time.Second)
	h.metrics(treeMetrics("w1", 100, -1, 1))
	n, trs = h.tick()
	assert.Equal(t, int64(1), n)
	assert.Empty(t, trs, "a worker that moved makes no transition here")
	assert.Nil(t, h.worker("w2"))
	snap := h.p.tracker.Snapshot(h.clock.Now().UnixNano())
	require.Len(t, snap.Workers, 1)
	assert.Equal(t, "w1", snap.Workers[0].ID)
	md := buildMetrics(h.p.tracker, t0.UnixNano(), h.clock.Now().UnixNano())
	assert.NotContains(t, metricWorkers(md, contract.MetricState), "w2")

	// Far past lost.after: never lost here.
	for range 10 {
		h.advance(time.Second)
		h.metrics(treeMetrics("w1", 100, -1, 1))
		_, trs = h.tick()
		for _, tr := range trs {
			assert.NotEqual(t, "w2", tr.Worker)
		}
	}
	assert.Zero(t, logs.Len(), "a move is not a warning")

	// Records for w2 that keep arriving for over a minute: the rings
	// disagree; said once.
	for range 70 {
		h.advance(time.Second)
		h.metrics(treeMetrics("w2", 100, -1, 1))
		n, _ = h.tick()
		require.Equal(t, int64(1), n)
	}
	require.Equal(t, 1, logs.Len())
	assert.Contains(t, logs.All()[0].Message, "shard ring")
	assert.Equal(t, "w2", logs.All()[0].ContextMap()["worker"])
}

// The scheduler's pending gauge reaches one shard; the others judge
// `stalled` and idle-while-pending with the figure that shard reports, but
// only the shard that received it emits it.
func TestStallUsesTheClusterPending(t *testing.T) {
	cfg := testCfg()
	cfg.Fleet.IdleIntervals = 2
	h := newHarness(t, cfg)
	fc, _ := clustered(h)
	run := 0
	hb := func() {
		h.logs(wl("w1", "workerwatch.worker.heartbeat", "", map[string]any{"workerwatch.worker.capacity": 2}))
		// w2 claims and finishes a run each second: never stalled, and its
		// free capacity is idle.
		run++
		r := fmt.Sprintf("r-%d", run)
		h.logs(wl("w2", "workerwatch.run.claimed", r, map[string]any{"workerwatch.worker.capacity": 2}))
		h.logs(wl("w2", "workerwatch.run.finished", r, nil))
	}

	for range 12 {
		hb()
		h.advance(time.Second)
		h.tick()
	}
	require.Equal(t, contract.Healthy, h.state("w1"), "no pending anywhere: not stalled")

	fc.mu.Lock()
	fc.pending, fc.at = 5, h.clock.Now()
	fc.mu.Unlock()
	hb()
	h.tick()
	assert.Equal(t, contract.Stalled, h.state("w1"), "pending at another shard")
	assert.Equal(t, contract.Healthy, h.state("w2"))
	hb()
	h.advance(time.Second)
	h.tick()
	assert.True(t, h.p.tracker.Fleet(h.clock.Now().UnixNano()).IdleWhilePending, "w2's capacity idle while work is pending elsewhere")
	snap := h.p.tracker.Snapshot(h.clock.Now().UnixNano())
	assert.Equal(t, int64(-1), snap.Fleet.Pending, "not this shard's figure to publish")
	md := buildMetrics(h.p.tracker, t0.UnixNano(), h.clock.Now().UnixNano())
	assert.False(t, hasMetric(md, contract.MetricFleetPending), "nor to emit")

	// A shard that no longer owns the empty id (where the exporter routes
	// the gauge) forgets its own last report at once.
	h.metrics(pendingMetrics(9))
	h.tick()
	require.Equal(t, int64(9), h.p.tracker.Snapshot(h.clock.Now().UnixNano()).Fleet.Pending)
	fc.move("")
	h.tick()
	assert.Equal(t, int64(-1), h.p.tracker.Snapshot(h.clock.Now().UnixNano()).Fleet.Pending, "the empty id moved away")
}

// A worker handed over to another shard: the emission of the evaluation
// that forgets it ends its series here (every point flagged as having no
// recorded value: a Prometheus exporter drops the series, remote write
// sends Prometheus's staleness marker), so that this shard's last values
// do not stand beside the new owner's. Records still in flight that make
// it again here end nothing more: it was never exported since.
func TestHandOverEndsItsSeries(t *testing.T) {
	ctx := context.Background()
	h := newHarness(t, testCfg())
	fc, _ := clustered(h)
	ms, _ := h.withSinks()
	for range 3 { // seen in two intervals: exported
		h.metrics(treeMetrics("w1", 100, -1, 1))
		h.metrics(treeMetrics("w2", 100, -1, 1))
		h.p.tick(ctx)
		h.advance(h.p.cfg.EmitInterval)
	}
	exported := 0
	for _, md := range ms.AllMetrics() {
		points, ended := pointFlags(md)
		exported += points["w2"]
		require.Zero(t, ended["w2"])
	}
	require.Positive(t, exported, "w2 exported")

	ms.Reset()
	fc.move("w2")
	h.metrics(treeMetrics("w1", 100, -1, 1))
	h.p.tick(ctx)
	require.Len(t, ms.AllMetrics(), 1)
	points, ended := pointFlags(ms.AllMetrics()[0])
	assert.Positive(t, points["w2"], "w2's series in the emission that forgets it")
	assert.Equal(t, points["w2"], ended["w2"], "every one of them ended")
	assert.Zero(t, ended["w1"], "w1 stays")
	assert.Zero(t, ended[""], "the fleet's figures stay")

	ms.Reset()
	h.advance(time.Second)
	h.metrics(treeMetrics("w2", 100, -1, 1)) // in flight
	h.metrics(treeMetrics("w1", 100, -1, 1))
	h.p.tick(ctx)
	points, _ = pointFlags(ms.AllMetrics()[0])
	assert.Zero(t, points["w2"], "made again by records in flight, never exported: nothing to end")
}

// An emission the exporter did not take in time is replaced by the next
// (superseded), but the ends of series it carried go with the next one:
// those workers are no longer in the tracker to be ended again.
func TestSupersededEmissionKeepsItsEnds(t *testing.T) {
	h := newHarness(t, testCfg())
	ctx := context.Background()
	ended := workerRow{id: "gone", stale: true, seriesValues: seriesValues{}}
	h.p.offer(ctx, &emission{rows: []workerRow{{id: "w1"}, ended}, fleet: pmetric.NewMetrics()})
	h.p.offer(ctx, &emission{rows: []workerRow{{id: "w1"}}, fleet: pmetric.NewMetrics()})
	em := h.p.take()
	require.NotNil(t, em)
	assert.Equal(t, []workerRow{{id: "w1"}, ended}, em.rows)
}

func TestNoClusterNoHandOver(t *testing.T) {
	assert.Nil(t, newShard(&subscriber{}, zap.NewNop()))
	assert.Nil(t, newShard(nil, zap.NewNop()))
	var s *shard
	n, stale := s.handOver(tracker.New(testCfg().trackerConfig()), 1)
	assert.Zero(t, n)
	assert.Empty(t, stale)
}

func hasMetric(md pmetric.Metrics, name string) bool {
	found := false
	forMetric(md, name, func(pmetric.Metric) { found = true })
	return found
}

// metricWorkers is the set of worker ids on the data points of a metric.
func metricWorkers(md pmetric.Metrics, name string) map[string]bool {
	ids := map[string]bool{}
	forMetric(md, name, func(m pmetric.Metric) {
		dps := m.Gauge().DataPoints()
		for i := range dps.Len() {
			if v, ok := dps.At(i).Attributes().Get(contract.AttrWorkerID); ok {
				ids[v.Str()] = true
			}
		}
	})
	return ids
}

func forMetric(md pmetric.Metrics, name string, f func(pmetric.Metric)) {
	rms := md.ResourceMetrics()
	for i := range rms.Len() {
		sms := rms.At(i).ScopeMetrics()
		for j := range sms.Len() {
			ms := sms.At(j).Metrics()
			for k := range ms.Len() {
				if ms.At(k).Name() == name {
					f(ms.At(k))
				}
			}
		}
	}
}
