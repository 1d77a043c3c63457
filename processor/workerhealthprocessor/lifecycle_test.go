package workerhealthprocessor

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jonboulle/clockwork"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componenttest"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/consumer/consumertest"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/processor"
	"go.opentelemetry.io/collector/processor/batchprocessor"
	"go.opentelemetry.io/collector/processor/processortest"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/sdk/metric/metricdata"
	"go.opentelemetry.io/otel/sdk/metric/metricdata/metricdatatest"

	"github.com/workerwatch/workerwatch/internal/contract"
	"github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/metadata"
	"github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/metadatatest"
)

// blockingMetrics is a downstream that blocks in ConsumeMetrics and ignores
// its context (as a shut-down batch processor does) until released.
type blockingMetrics struct {
	entered chan struct{} // closed at the first call
	release chan struct{}
	once    sync.Once
	calls   atomic.Int64
}

func newBlockingMetrics() *blockingMetrics {
	return &blockingMetrics{entered: make(chan struct{}), release: make(chan struct{})}
}

func (b *blockingMetrics) Capabilities() consumer.Capabilities { return consumer.Capabilities{} }
func (b *blockingMetrics) ConsumeMetrics(context.Context, pmetric.Metrics) error {
	b.calls.Add(1)
	b.once.Do(func() { close(b.entered) })
	<-b.release
	return nil
}

// shutdownAll shuts the wrappers down in order on another goroutine and
// reports whether it returned before the deadline: a hang must fail the test,
// not stall it.
func shutdownAll(ctx context.Context, t *testing.T, cs ...component.Component) {
	t.Helper()
	done := make(chan error, 1)
	go func() {
		var errs []error
		for _, c := range cs {
			errs = append(errs, c.Shutdown(ctx))
		}
		done <- errors.Join(errs...)
	}()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(time.Minute):
		t.Fatal("Shutdown did not return: it waits for a blocked downstream")
	}
}

// A 1 ms emit_interval (below what Validate allows, to make emission
// constant) with a metrics downstream that blocks for good and ignores its
// context: every Shutdown still returns, bounded by its context's deadline,
// or by shutdownWait when the context has none (the collector's has none).
func TestShutdownDoesNotWaitForABlockedDownstream(t *testing.T) {
	for _, withDeadline := range []bool{true, false} {
		name := "context without deadline"
		if withDeadline {
			name = "context with deadline"
		}
		t.Run(name, func(t *testing.T) {
			wait := 50 * time.Millisecond
			if withDeadline {
				wait = time.Hour // only the context may end the wait
			}

			cfg := testCfg()
			cfg.EmitInterval = time.Millisecond
			store := &memStorage{}
			storageID := component.MustNewID("file_storage")
			cfg.StorageID = &storageID
			f := newFactory(withShutdownWait(wait))
			set := processortest.NewNopSettings(metadata.Type)
			ctx := context.Background()
			down := newBlockingMetrics()
			t.Cleanup(func() { close(down.release) })
			tp, err := f.CreateTraces(ctx, set, cfg, consumertest.NewNop())
			require.NoError(t, err)
			mp, err := f.CreateMetrics(ctx, set, cfg, down)
			require.NoError(t, err)
			lp, err := f.CreateLogs(ctx, set, cfg, consumertest.NewNop())
			require.NoError(t, err)
			h := host{ext: map[component.ID]component.Component{storageID: store}}
			for _, c := range []component.Component{mp, lp, tp} {
				require.NoError(t, c.Start(ctx, h))
			}
			select {
			case <-down.entered:
			case <-time.After(time.Minute):
				t.Fatal("the timer never emitted")
			}

			sctx := ctx
			if withDeadline {
				var cancel context.CancelFunc
				sctx, cancel = context.WithTimeout(ctx, 50*time.Millisecond)
				defer cancel()
			}
			shutdownAll(sctx, t, tp, mp, lp)
			store.mu.Lock()
			_, wrote := store.data[cpMetaKey]
			store.mu.Unlock()
			assert.True(t, wrote, "the final checkpoint was written all the same")
			assert.Equal(t, int64(1), down.calls.Load(), "one emission, the blocked one")
		})
	}
}

// countingMetrics counts calls that reach next after closed was set.
type countingMetrics struct {
	next   consumer.Metrics
	closed atomic.Bool
	late   atomic.Int64
}

func (c *countingMetrics) Capabilities() consumer.Capabilities { return c.next.Capabilities() }
func (c *countingMetrics) ConsumeMetrics(ctx context.Context, md pmetric.Metrics) error {
	if c.closed.Load() {
		c.late.Add(1)
	}
	return c.next.ConsumeMetrics(ctx, md)
}

// The hang of issue 14: the processor sits in several pipelines; the
// collector shuts the metrics pipeline's wrapper down, then its batch
// processor, while the logs pipeline's wrapper still runs. Emitting into the
// stopped batch processor blocks for good (its channel is no longer read,
// and it ignores the context). Here nothing is emitted into a pipeline once
// its wrapper shut down: the first Shutdown stops the timer.
func TestNoEmissionIntoAShutDownPipeline(t *testing.T) {
	clock := clockwork.NewFakeClockAt(t0)
	cfg := testCfg()
	ctx := context.Background()
	sink := new(consumertest.MetricsSink)
	bf := batchprocessor.NewFactory()
	bp, err := bf.CreateMetrics(ctx, processortest.NewNopSettings(bf.Type()), bf.CreateDefaultConfig(), sink)
	require.NoError(t, err)
	count := &countingMetrics{next: bp}

	f := newFactory(withClock(clock))
	set := processortest.NewNopSettings(metadata.Type)
	mp, err := f.CreateMetrics(ctx, set, cfg, count)
	require.NoError(t, err)
	lp, err := f.CreateLogs(ctx, set, cfg, consumertest.NewNop())
	require.NoError(t, err)
	// The collector's order: downstream first.
	for _, c := range []component.Component{bp, mp, lp} {
		require.NoError(t, c.Start(ctx, componenttest.NewNopHost()))
	}
	require.NoError(t, mp.ConsumeMetrics(ctx, treeMetrics("w1", 10, -1, 1)))
	require.NoError(t, clock.BlockUntilContext(ctx, 1))
	clock.Advance(cfg.EmitInterval)
	require.Eventually(t, func() bool { return sink.DataPointCount() > 1 }, time.Minute, time.Millisecond, "derived metrics reach the batch processor")

	shutdownAll(ctx, t, mp)
	count.closed.Store(true)
	shutdownAll(ctx, t, bp)
	// A timer still running would emit into the stopped batch processor.
	clock.Advance(cfg.EmitInterval)
	timerStopped := func() bool {
		c, cancel := context.WithTimeout(ctx, time.Millisecond)
		defer cancel()
		return clock.BlockUntilContext(c, 0) == nil
	}
	require.Eventually(t, func() bool { return count.late.Load() > 0 || timerStopped() }, time.Minute, time.Millisecond)
	assert.Zero(t, count.late.Load(), "emitted into the metrics pipeline after its wrapper shut down")
	shutdownAll(ctx, t, lp)
}

// health_extension names the extension; a wrong id fails Start naming the key.
func TestHealthExtensionByID(t *testing.T) {
	ctx := context.Background()
	healthID := component.MustNewID("worker_health")
	storageID := component.MustNewID("file_storage")
	ext := map[component.ID]component.Component{healthID: &subscriber{}, storageID: &memStorage{}}
	for _, tt := range []struct {
		name    string
		id      *component.ID
		wantErr string
	}{
		{name: "the named worker_health extension", id: &healthID},
		{name: "not set: nothing published", id: nil},
		{name: "not configured", id: ptr(component.MustNewIDWithName("worker_health", "typo")), wantErr: `health_extension: extension "worker_health/typo" is not configured`},
		{name: "not a worker_health extension", id: &storageID, wantErr: `health_extension: extension "file_storage" is not a worker_health extension`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cfg := testCfg()
			cfg.HealthExtension = tt.id
			mp, err := NewFactory().CreateMetrics(ctx, processortest.NewNopSettings(metadata.Type), cfg, consumertest.NewNop())
			require.NoError(t, err)
			err = mp.Start(ctx, host{ext: ext})
			if tt.wantErr != "" {
				require.ErrorContains(t, err, tt.wantErr)
			} else {
				require.NoError(t, err)
			}
			require.NoError(t, mp.Shutdown(ctx))
		})
	}
	assert.NotNil(t, ext[healthID].(*subscriber).last(), "published to the named extension")
}

func ptr[T any](v T) *T { return &v }

// refusing is a downstream that refuses everything.
type refusing struct{}

func (refusing) Capabilities() consumer.Capabilities { return consumer.Capabilities{} }

func (refusing) ConsumeMetrics(context.Context, pmetric.Metrics) error { return errors.New("refused") }

func (refusing) ConsumeLogs(context.Context, plog.Logs) error { return errors.New("refused") }

// What the processor emits, and what downstream refused, is counted.
func TestEmissionIsCounted(t *testing.T) {
	tt := componenttest.NewTelemetry()
	t.Cleanup(func() { require.NoError(t, tt.Shutdown(context.Background())) })
	h := newHarness(t, testCfg())
	p, err := newHealthProcessor(metadatatest.NewSettings(tt), testCfg(), withClock(h.clock))
	require.NoError(t, err)
	t.Cleanup(p.tel.Shutdown)
	ctx := context.Background()
	msink, lsink := new(consumertest.MetricsSink), new(consumertest.LogsSink)
	pls := []*pipeline{{metrics: msink}, {logs: lsink}, {metrics: refusing{}}, {logs: refusing{}}}
	for _, pl := range pls {
		require.NoError(t, p.start(ctx, componenttest.NewNopHost(), pl))
	}
	_, err = p.processMetrics(ctx, treeMetrics("w1", 10, -1, 1))
	require.NoError(t, err)
	p.tick(ctx)
	points, records := int64(msink.DataPointCount()), int64(lsink.LogRecordCount())
	require.Positive(t, points)
	require.Equal(t, int64(1), records, "w1: unknown -> healthy")
	one := func(v int64) []metricdata.DataPoint[int64] { return []metricdata.DataPoint[int64]{{Value: v}} }
	opts := []metricdatatest.Option{metricdatatest.IgnoreTimestamp()}
	metadatatest.AssertEqualProcessorWorkerHealthEmittedMetricPoints(t, tt, one(points), opts...)
	metadatatest.AssertEqualProcessorWorkerHealthRefusedMetricPoints(t, tt, one(points), opts...)
	metadatatest.AssertEqualProcessorWorkerHealthEmittedLogRecords(t, tt, one(records), opts...)
	metadatatest.AssertEqualProcessorWorkerHealthRefusedLogRecords(t, tt, one(records), opts...)
	for _, pl := range pls {
		require.NoError(t, p.shutdown(ctx, pl))
	}
}

// injecting is a meter provider like the service's: it adds the pipeline's
// attributes to every meter's scope and can drop them.
type injecting struct {
	metric.MeterProvider
	attrs []attribute.KeyValue
}

func (m injecting) Meter(name string, opts ...metric.MeterOption) metric.Meter {
	return m.MeterProvider.Meter(name, append(opts, metric.WithInstrumentationAttributes(m.attrs...))...)
}

func (m injecting) DropInjectedAttributes(drop ...string) metric.MeterProvider {
	var kept []attribute.KeyValue
	for _, kv := range m.attrs {
		if !slices.Contains(drop, string(kv.Key)) {
			kept = append(kept, kv)
		}
	}
	return injecting{MeterProvider: m.MeterProvider, attrs: kept}
}

// The shared instance's own telemetry carries neither the pipeline nor the
// signal of whichever pipeline created it; the component id stays.
func TestOwnTelemetryWithoutPipelineAttributes(t *testing.T) {
	tt := componenttest.NewTelemetry()
	t.Cleanup(func() { require.NoError(t, tt.Shutdown(context.Background())) })
	set := metadatatest.NewSettings(tt)
	set.MeterProvider = injecting{MeterProvider: set.MeterProvider, attrs: []attribute.KeyValue{
		attribute.String("otelcol.component.id", "worker_health"),
		attribute.String("otelcol.pipeline.id", "logs"),
		attribute.String("otelcol.signal", "logs"),
	}}
	ctx := context.Background()
	cfg := testCfg()
	f := NewFactory()
	var ps []processor.Logs
	for range 2 {
		lp, err := f.CreateLogs(ctx, set, cfg, consumertest.NewNop())
		require.NoError(t, err)
		require.NoError(t, lp.Start(ctx, componenttest.NewNopHost()))
		ps = append(ps, lp)
	}
	bad := plog.NewLogs()
	bad.ResourceLogs().AppendEmpty().Resource().Attributes().PutInt(contract.AttrWorkerID, 7)
	require.NoError(t, ps[0].ConsumeLogs(ctx, bad))
	rm := metricdata.ResourceMetrics{}
	require.NoError(t, tt.Reader.Collect(ctx, &rm))
	found := false
	for _, sm := range rm.ScopeMetrics {
		if sm.Scope.Name != metadata.ScopeName {
			continue
		}
		found = true
		_, hasPipeline := sm.Scope.Attributes.Value("otelcol.pipeline.id")
		_, hasSignal := sm.Scope.Attributes.Value("otelcol.signal")
		_, hasID := sm.Scope.Attributes.Value("otelcol.component.id")
		assert.False(t, hasPipeline, "pipeline attribute dropped")
		assert.False(t, hasSignal, "signal attribute dropped")
		assert.True(t, hasID, "component id kept")
	}
	assert.True(t, found)
	for _, p := range ps {
		require.NoError(t, p.Shutdown(ctx))
	}
}

// A metrics consumer slower than emit_interval (a Prometheus exporter taking
// a large shard's emission) holds neither the evaluation nor the verdicts:
// every tick publishes on time while the consumer is blocked, the emissions
// it could not take are replaced by the newest (counted as superseded), and
// once it is free it gets that newest one. With the emission on the timer
// loop, the second and third snapshots never came while the consumer was
// blocked.
func TestSlowConsumerDoesNotDelayVerdicts(t *testing.T) {
	tt := componenttest.NewTelemetry()
	t.Cleanup(func() { require.NoError(t, tt.Shutdown(context.Background())) })
	cfg := testCfg()
	healthID := component.MustNewID("worker_health")
	cfg.HealthExtension = &healthID
	h := newHarness(t, cfg)
	p, err := newHealthProcessor(metadatatest.NewSettings(tt), cfg, withClock(h.clock))
	require.NoError(t, err)
	t.Cleanup(p.tel.Shutdown)
	ctx := context.Background()
	sub := &subscriber{}
	down := newBlockingMetrics()
	got := new(consumertest.MetricsSink)
	released := false
	release := func() {
		if !released {
			released = true
			close(down.release)
		}
	}
	t.Cleanup(release)
	pl := &pipeline{metrics: fanout{down, got}}
	require.NoError(t, p.start(ctx, host{ext: map[component.ID]component.Component{healthID: sub}}, pl))
	_, err = p.processMetrics(ctx, treeMetrics("w1", 10, -1, 1))
	require.NoError(t, err)

	published := func() int {
		sub.mu.Lock()
		defer sub.mu.Unlock()
		return len(sub.snaps)
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		deadline := time.Now().Add(time.Minute)
		for !cond() {
			if time.Now().After(deadline) {
				t.Fatalf("not within a minute: %s", what)
			}
			time.Sleep(time.Millisecond)
		}
	}
	start := published() // the one published at Start
	require.NoError(t, h.clock.BlockUntilContext(ctx, 1))
	h.clock.Advance(cfg.EmitInterval)
	waitFor("the first emission reaches the consumer", func() bool { return down.calls.Load() == 1 })
	for i := 2; i <= 4; i++ {
		require.NoError(t, h.clock.BlockUntilContext(ctx, 1))
		h.clock.Advance(cfg.EmitInterval)
		waitFor(fmt.Sprintf("evaluation %d published while the consumer is blocked", i), func() bool { return published() == start+i })
	}
	assert.Equal(t, int64(1), down.calls.Load(), "the consumer is still in the first emission")
	release()
	waitFor("the newest emission reaches the consumer", func() bool { return got.DataPointCount() > 0 && down.calls.Load() == 2 })
	points := int64(got.DataPointCount()) / 2 // two emissions of the same size: the first and the newest
	one := func(v int64) []metricdata.DataPoint[int64] { return []metricdata.DataPoint[int64]{{Value: v}} }
	// Evaluations 2 and 3 were replaced before the emitter took them.
	metadatatest.AssertEqualProcessorWorkerHealthSupersededMetricPoints(t, tt, one(2*points), metricdatatest.IgnoreTimestamp())
	require.NoError(t, p.shutdown(ctx, pl))
}

// fanout hands each emission to a consumer that may block, then records it.
type fanout struct {
	first consumer.Metrics
	then  *consumertest.MetricsSink
}

func (f fanout) Capabilities() consumer.Capabilities { return consumer.Capabilities{} }
func (f fanout) ConsumeMetrics(ctx context.Context, md pmetric.Metrics) error {
	if err := f.first.ConsumeMetrics(ctx, md); err != nil {
		return err
	}
	return f.then.ConsumeMetrics(ctx, md)
}

// At shutdown the metrics pipeline gets the end of every series the
// processor exported there, the workers' and the fleet's (every point
// flagged as having no recorded value): the collector stops judging, and a
// pushed series would otherwise stand downstream for Prometheus's lookback.
func TestShutdownEndsTheSeries(t *testing.T) {
	clock := clockwork.NewFakeClockAt(t0)
	cfg := testCfg()
	ctx := context.Background()
	sink := new(consumertest.MetricsSink)
	f := newFactory(withClock(clock))
	mp, err := f.CreateMetrics(ctx, processortest.NewNopSettings(metadata.Type), cfg, sink)
	require.NoError(t, err)
	require.NoError(t, mp.Start(ctx, componenttest.NewNopHost()))
	exported := func() bool {
		for _, md := range sink.AllMetrics() {
			if points, _ := pointFlags(md); points["w1"] > 0 {
				return true
			}
		}
		return false
	}
	for range 5 { // seen in two intervals: exported
		require.NoError(t, mp.ConsumeMetrics(ctx, treeMetrics("w1", 10, -1, 1)))
		require.NoError(t, clock.BlockUntilContext(ctx, 1))
		emitted := len(sink.AllMetrics())
		clock.Advance(cfg.EmitInterval)
		require.Eventually(t, func() bool { return len(sink.AllMetrics()) > emitted }, time.Minute, time.Millisecond)
		if exported() {
			break
		}
	}
	require.True(t, exported(), "w1 exported")
	for _, md := range sink.AllMetrics() {
		_, ended := pointFlags(md)
		require.Empty(t, ended, "nothing ended while running")
	}

	before := len(sink.AllMetrics())
	shutdownAll(ctx, t, mp)
	all := sink.AllMetrics()
	require.Len(t, all, before+1, "one emission at shutdown")
	points, ended := pointFlags(all[before])
	assert.Positive(t, points["w1"])
	assert.Equal(t, points["w1"], ended["w1"], "every point of w1 ended")
	assert.Positive(t, points[""])
	assert.Equal(t, points[""], ended[""], "every point of the fleet's figures ended")
}
