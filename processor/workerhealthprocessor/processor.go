package workerhealthprocessor // import "github.com/workerwatch/workerwatch/processor/workerhealthprocessor"

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jonboulle/clockwork"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/component/componentstatus"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/extension/xextension/storage"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/processor"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"

	"github.com/workerwatch/workerwatch/internal/contract"
	"github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/mapping"
	"github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/metadata"
	"github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/tracker"
)

// healthProcessor is the one instance behind every pipeline that lists the
// component id. Each pipeline's processorhelper wrapper has its own
// *pipeline and calls start/shutdown with it.
type healthProcessor struct {
	cfg    *Config
	set    processor.Settings
	logger *zap.Logger
	clock  clockwork.Clock
	mapper *mapping.Mapper
	tel    *metadata.TelemetryBuilder
	pool   sync.Pool

	// mu guards the tracker and the emission targets. Never held while
	// calling a consumer, the subscriber or the storage.
	mu        sync.Mutex
	tracker   *tracker.Tracker
	lastSent  int // the workers the last evaluation's emission held (collectRows' hint)
	targets   []*pipeline
	startTime int64
	// exitDue wakes the timer loop for an evaluation when a worker's root
	// exit is due (its lost.exit_grace ended: ingest), so that the worker
	// is lost then and not at the next emit_interval.
	exitDue chan struct{}

	// lifeMu serializes start/shutdown and guards what they set up.
	lifeMu     sync.Mutex
	refs       int
	subscriber contract.Subscriber
	cancel     context.CancelFunc // stops the timer loop
	loopDone   chan struct{}      // closed when the timer loop returned
	stopped    bool               // the timer loop was told to stop
	onLastStop func()
	// shutdownWait bounds how long Shutdown waits for a timer loop blocked in
	// a downstream consumer that ignores its canceled context, when
	// Shutdown's own context has no earlier deadline (the collector passes
	// one without a deadline).
	shutdownWait time.Duration

	// cpMu serializes checkpoint writes and guards storage, so the timer
	// loop's checkpoint and the final one at shutdown never overlap.
	cpMu     sync.Mutex
	storage  storage.Client
	marshal  func(any) ([]byte, error) // a checkpoint record's marshaler
	cpEnc    recordEncoder             // compresses the records (checkpoint_codec.go)
	lastMeta tracker.Meta              // the meta record last written or read
	// legacySlots: the slots of a version 2 checkpoint read at restore,
	// whose values the next write deletes (checkpoint.go).
	legacySlots int32
	// cpFailing: the last checkpoint write failed (status reported).
	cpFailing bool

	// shard: the cluster hooks of a sharded gateway (cluster.go), set at
	// start from the health extension; read under mu.
	shard *shard

	// latest is the derived metrics waiting for the emitter goroutine: one
	// slot, a newer evaluation's replaces an older one not yet taken.
	latest latestMetrics
}

// latestMetrics is a one-slot mailbox between the timer loop and the
// emitter. The derived metrics are cumulative sums and gauges of every
// worker, so a newer emission carries everything an older one did: when
// the next consumer is slower than emit_interval (a Prometheus exporter
// taking a large shard's emission, a blocked batch processor), the loop
// keeps evaluating and publishing verdicts on time and only the newest
// emission waits. The state-change log records are not replaceable and go
// out on the loop itself.
type latestMetrics struct {
	mu      sync.Mutex
	pending *emission
	wake    chan struct{} // capacity 1
}

// emission is one evaluation's derived metrics and where they go.
type emission struct {
	// rows are the workers' series, rendered a piece at a time as they are
	// sent (emit.go), and fleet the fleet-wide resource, sent in the last.
	rows  []workerRow
	fleet pmetric.Metrics
	to    []consumer.Metrics
	gone  []*atomic.Bool
	// start is when the cumulative series began and at the evaluation's
	// time; sent the workers whose series rows hold (resend_interval:
	// marked delivered once every pipeline took them).
	start, at int64
	sent      []sentMark
	// final: the ends of series at shutdown, sent without the pauses
	// between pieces (shutdownWait bounds it; nothing comes after it).
	final bool
}

// points is how many data points the emission sends to one pipeline.
func (em *emission) points() int64 {
	n := int64(em.fleet.DataPointCount())
	for i := range em.rows {
		n += int64(em.rows[i].points())
	}
	return n
}

// pipeline is one processorhelper wrapper: the next consumer of its
// pipeline, which the derived metrics or logs go to. Derived data goes only
// into pipelines whose wrapper has started and not yet shut down: the
// collector starts a pipeline's downstream before it and shuts it down after
// it, so nothing is ever emitted into a component that is not running.
type pipeline struct {
	metrics consumer.Metrics // nil unless a metrics pipeline
	logs    consumer.Logs    // nil unless a logs pipeline
	started bool             // guarded by lifeMu
	// host is the one its wrapper was started with: component status is
	// reported to each pipeline's instance (set at start, under mu).
	gone atomic.Bool // set at its Shutdown, before the wait for the loop
	host component.Host
}

// defaultShutdownWait: a downstream that ignores a canceled context is a
// bug in that component; five seconds is long enough for any consumer that
// is merely slow, and short against the grace periods of systemd (90 s)
// and Kubernetes (30 s).
const defaultShutdownWait = 5 * time.Second

// option sets what a test replaces: the clock, the checkpoint's marshaler,
// the shutdown wait.
type option func(*healthProcessor)

// withClock gives the processor its clock (tests: a clockwork.FakeClock).
func withClock(c clockwork.Clock) option { return func(p *healthProcessor) { p.clock = c } }

// withMarshal replaces the checkpoint records' marshaler (a test holds it to
// prove the processor's lock is free meanwhile).
func withMarshal(f func(any) ([]byte, error)) option {
	return func(p *healthProcessor) { p.marshal = f }
}

// withShutdownWait replaces defaultShutdownWait (tests need not wait that long).
func withShutdownWait(d time.Duration) option { return func(p *healthProcessor) { p.shutdownWait = d } }

func newHealthProcessor(set processor.Settings, cfg *Config, opts ...option) (*healthProcessor, error) {
	tel, err := metadata.NewTelemetryBuilder(set.TelemetrySettings)
	if err != nil {
		return nil, err
	}
	p := &healthProcessor{
		cfg:          cfg,
		set:          set,
		logger:       set.Logger,
		clock:        clockwork.NewRealClock(),
		marshal:      json.Marshal,
		mapper:       mapping.New(cfg.mappingSettings()),
		tel:          tel,
		tracker:      tracker.New(cfg.trackerConfig()),
		shutdownWait: defaultShutdownWait,
		exitDue:      make(chan struct{}, 1),
	}
	for _, o := range opts {
		o(p)
	}
	p.pool.New = func() any { return mapping.NewBatch() }
	p.startTime = p.clock.Now().UnixNano()
	p.tracker.SetStart(p.startTime)
	if err := tel.RegisterProcessorWorkerHealthWorkersTrackedCallback(func(_ context.Context, o metric.Int64Observer) error {
		p.mu.Lock()
		n := p.tracker.Tracked()
		p.mu.Unlock()
		for ev, v := range n {
			o.Observe(v, evidenceAttrs[ev])
		}
		return nil
	}); err != nil {
		return nil, err
	}
	if err := tel.RegisterProcessorWorkerHealthRunsTrackedCallback(func(_ context.Context, o metric.Int64Observer) error {
		p.mu.Lock()
		n := p.tracker.RunCount()
		p.mu.Unlock()
		o.Observe(int64(n))
		return nil
	}); err != nil {
		return nil, err
	}
	return p, nil
}

// start is one wrapper's Start. The first one sets up what all share (the
// health extension, the checkpoint, the timer loop); each one adds its
// pipeline to the emission targets.
func (p *healthProcessor) start(ctx context.Context, host component.Host, pl *pipeline) error {
	p.lifeMu.Lock()
	defer p.lifeMu.Unlock()
	if pl.started {
		return nil
	}
	if p.refs == 0 {
		if err := p.startShared(ctx, host); err != nil {
			return err
		}
	}
	p.refs++
	pl.started = true
	p.mu.Lock()
	pl.host = host
	p.targets = append(p.targets, pl)
	p.mu.Unlock()
	return nil
}

func (p *healthProcessor) startShared(ctx context.Context, host component.Host) error {
	sub, err := p.findHealthExtension(host)
	if err != nil {
		return err
	}
	p.subscriber = sub
	p.mu.Lock()
	p.shard = newShard(sub, p.logger)
	p.mu.Unlock()
	if err := p.openStorage(ctx, host); err != nil {
		return err
	}
	p.restore(ctx)
	// Publish at once: restored workers are "unknown" until evaluated, and a
	// subscriber should know them from the first request on.
	if p.subscriber != nil {
		p.mu.Lock()
		snap := p.tracker.Snapshot(p.clock.Now().UnixNano())
		p.mu.Unlock()
		p.publish(ctx, snap)
	}

	p.logger.Info("judging workers", zap.Duration("emit_interval", p.cfg.EmitInterval),
		zap.String("health_extension", idOrNone(p.cfg.HealthExtension)), zap.String("storage_id", idOrNone(p.cfg.StorageID)))
	loopCtx, cancel := context.WithCancel(context.Background())
	p.cancel, p.loopDone, p.stopped = cancel, make(chan struct{}), false
	ticker := p.clock.NewTicker(p.cfg.EmitInterval)
	p.latest.wake = make(chan struct{}, 1)
	var loops sync.WaitGroup
	loops.Add(2)
	go func() {
		defer loops.Done()
		defer ticker.Stop()
		for {
			select {
			case <-loopCtx.Done():
				return
			case <-ticker.Chan():
				p.offer(loopCtx, p.evaluate(loopCtx))
			case <-p.exitDue:
				p.offer(loopCtx, p.evaluate(loopCtx))
			}
		}
	}()
	go func() {
		defer loops.Done()
		for {
			select {
			case <-loopCtx.Done():
				return
			case <-p.latest.wake:
				p.sendMetrics(loopCtx, p.take())
			}
		}
	}()
	go func() {
		loops.Wait()
		close(p.loopDone)
	}()
	return nil
}

func idOrNone(id *component.ID) string {
	if id == nil {
		return "none"
	}
	return id.String()
}

// findHealthExtension resolves health_extension. Named, not discovered: a
// collector may run several extensions that could take snapshots, and a
// typo must fail Start rather than leave the health API empty.
func (p *healthProcessor) findHealthExtension(host component.Host) (contract.Subscriber, error) {
	id := p.cfg.HealthExtension
	if id == nil {
		return nil, nil
	}
	ext, ok := host.GetExtensions()[*id]
	if !ok {
		return nil, fmt.Errorf("health_extension: extension %q is not configured (add it under extensions and service::extensions)", id)
	}
	sub, ok := ext.(contract.Subscriber)
	if !ok {
		return nil, fmt.Errorf("health_extension: extension %q is not a worker_health extension (it cannot receive worker state)", id)
	}
	return sub, nil
}

// shutdown is one wrapper's Shutdown. The first one stops the timer loop:
// the collector shuts all pipelines down together, and once it has begun the
// derived data has nowhere reliable to go. The last one writes the final
// checkpoint (all receivers are down by then, so it holds everything that
// arrived) and releases the storage.
func (p *healthProcessor) shutdown(ctx context.Context, pl *pipeline) error {
	p.lifeMu.Lock()
	defer p.lifeMu.Unlock()
	if !pl.started {
		// Shutdown without Start (a failed pipeline build): nothing runs
		// for this wrapper.
		if p.refs == 0 {
			p.lastStop()
		}
		return nil
	}
	pl.started = false
	pl.gone.Store(true)
	p.mu.Lock()
	p.targets = slices.DeleteFunc(p.targets, func(x *pipeline) bool { return x == pl })
	p.mu.Unlock()
	p.stopLoop(ctx)
	if pl.metrics != nil {
		p.endSeries(ctx, pl.metrics)
	}
	p.refs--
	if p.refs > 0 {
		return nil
	}
	p.cpMu.Lock()
	p.writeCheckpoint(ctx)
	if p.storage != nil {
		if err := p.storage.Close(ctx); err != nil {
			p.logger.Warn("closing the storage client failed", zap.Error(err))
		}
		p.storage = nil
	}
	p.cpMu.Unlock()
	p.lastStop()
	return nil
}

// stopLoop cancels the timer loop and waits for it to return, but never
// longer than ctx allows or shutdownWait: a downstream consumer that blocks
// and ignores its context must not hold the collector's shutdown. A loop
// left behind touches nothing once it returns (it checks its context before
// every consumer, the subscriber and the storage).
func (p *healthProcessor) stopLoop(ctx context.Context) {
	if p.stopped {
		return
	}
	p.stopped = true
	p.cancel()
	began := time.Now()
	timer := time.NewTimer(p.shutdownWait)
	defer timer.Stop()
	select {
	case <-p.loopDone:
		return
	case <-ctx.Done():
	case <-timer.C:
	}
	p.logger.Warn("the emission of derived telemetry is blocked in a downstream consumer that ignores cancellation; shutting down without waiting for it",
		zap.Duration("waited", time.Since(began)))
}

// endSeries sends a metrics pipeline that shuts down the end of every
// series the processor exports (staleRow; the fleet's figures too): the
// collector stops judging, and the exporter is still running (the
// collector stops a pipeline's processors before its exporters). Scraped,
// a stopped collector's series end when Prometheus finds the target down;
// pushed, without this they would stand for Prometheus's lookback (5
// minutes), beside the new owner's after a shard left the ring (a rolling
// restart, a scale-down; docs/deployment.md). Not sent when the timer loop
// is still blocked in a consumer; bounded by shutdownWait.
func (p *healthProcessor) endSeries(ctx context.Context, next consumer.Metrics) {
	select {
	case <-p.loopDone:
	default:
		return
	}
	p.mu.Lock()
	now := p.clock.Now().UnixNano()
	rows, fleet := collectRows(p.tracker, p.startTime, now, nil)
	p.mu.Unlock()
	for i := range rows {
		rows[i].stale = true
	}
	markNoRecordedValue(fleet)
	em := &emission{rows: rows, fleet: fleet, to: []consumer.Metrics{next}, gone: []*atomic.Bool{new(atomic.Bool)}, start: p.startTime, at: now, final: true}
	ctx, cancel := context.WithTimeout(ctx, p.shutdownWait)
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		p.sendMetrics(ctx, em)
	}()
	select {
	case <-done:
	case <-ctx.Done():
		p.logger.Warn("the end of the derived series was not delivered in time at shutdown; "+
			"pushed series stay visible downstream until they go stale there", zap.Int("workers", len(rows)))
	}
}

func (p *healthProcessor) lastStop() {
	if p.onLastStop != nil {
		p.onLastStop()
	}
}

// reportStatus reports a status event to the instance of every pipeline
// the processor runs in (the collector keeps one status per pipeline's
// instance; one shared processor serves them all).
func (p *healthProcessor) reportStatus(ev *componentstatus.Event) {
	p.mu.Lock()
	hosts := make([]component.Host, 0, len(p.targets))
	for _, pl := range p.targets {
		hosts = append(hosts, pl.host)
	}
	p.mu.Unlock()
	for _, h := range hosts {
		componentstatus.ReportStatus(h, ev)
	}
}

// publish hands the snapshot to the health extension, unless the loop was
// stopped (the extension may be shutting down).
func (p *healthProcessor) publish(ctx context.Context, snap *contract.Snapshot) {
	if snap == nil || p.subscriber == nil || ctx.Err() != nil {
		return
	}
	snap.Source = p.set.ID
	p.subscriber.Publish(snap)
}
