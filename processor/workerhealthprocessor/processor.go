package workerhealthprocessor // import "github.com/workerwatch/workerwatch/processor/workerhealthprocessor"

import (
	"context"
	"sync"

	"github.com/jonboulle/clockwork"
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/extension/xextension/storage"
	"go.opentelemetry.io/collector/pdata/plog"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/pdata/ptrace"
	"go.opentelemetry.io/collector/processor"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"

	"github.com/workerwatch/workerwatch/internal/contract"
	"github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/metadata"
)

// healthProcessor is the one instance behind every pipeline that lists the
// component id. Each pipeline's processorhelper wrapper calls start/shutdown;
// they are reference counted so the timer runs while any pipeline does.
type healthProcessor struct {
	cfg    *Config
	set    processor.Settings
	logger *zap.Logger
	clock  clockwork.Clock
	mapper *mapper
	tel    *metadata.TelemetryBuilder
	pool   sync.Pool

	// mu guards the tracker and the consumer lists. Never held while calling
	// a consumer or a subscriber.
	mu        sync.Mutex
	tracker   *tracker
	metricsTo []consumer.Metrics
	logsTo    []consumer.Logs
	startTime int64
	evals     int

	// lifeMu serializes start/shutdown and guards the reference count.
	lifeMu      sync.Mutex
	refs        int
	subscribers []contract.Subscriber
	storage     storage.Client
	cancel      context.CancelFunc
	wg          sync.WaitGroup
	onLastStop  func()
}

func newHealthProcessor(set processor.Settings, cfg *Config, clock clockwork.Clock) (*healthProcessor, error) {
	tel, err := metadata.NewTelemetryBuilder(set.TelemetrySettings)
	if err != nil {
		return nil, err
	}
	p := &healthProcessor{
		cfg:     cfg,
		set:     set,
		logger:  set.Logger,
		clock:   clock,
		mapper:  newMapper(cfg),
		tel:     tel,
		tracker: newTracker(cfg),
	}
	p.pool.New = func() any { b := &batch{}; b.reset(); return b }
	p.startTime = clock.Now().UnixNano()
	if err := tel.RegisterProcessorWorkerHealthWorkersTrackedCallback(func(_ context.Context, o metric.Int64Observer) error {
		p.mu.Lock()
		n := len(p.tracker.workers)
		p.mu.Unlock()
		o.Observe(int64(n))
		return nil
	}); err != nil {
		return nil, err
	}
	return p, nil
}

func (p *healthProcessor) addMetricsConsumer(c consumer.Metrics) {
	p.mu.Lock()
	p.metricsTo = append(p.metricsTo, c)
	p.mu.Unlock()
}

func (p *healthProcessor) addLogsConsumer(c consumer.Logs) {
	p.mu.Lock()
	p.logsTo = append(p.logsTo, c)
	p.mu.Unlock()
}

func (p *healthProcessor) start(ctx context.Context, host component.Host) error {
	p.lifeMu.Lock()
	defer p.lifeMu.Unlock()
	p.refs++
	if p.refs > 1 {
		return nil
	}
	p.subscribers = p.subscribers[:0]
	for _, ext := range host.GetExtensions() {
		if s, ok := ext.(contract.Subscriber); ok {
			p.subscribers = append(p.subscribers, s)
		}
	}
	if err := p.openStorage(ctx, host); err != nil {
		p.refs--
		return err
	}
	p.restore(ctx)
	// Publish at once: restored workers are "unknown" until evaluated, and a
	// subscriber should know them from the first request on.
	p.mu.Lock()
	snap := p.tracker.snapshot(p.clock.Now().UnixNano())
	p.mu.Unlock()
	p.publish(snap)

	// The timer's context is canceled by the last Shutdown, so an emit
	// blocked on a downstream cannot hold the collector's shutdown.
	tickCtx, cancel := context.WithCancel(context.Background())
	p.cancel = cancel
	ticker := p.clock.NewTicker(p.cfg.EmitInterval)
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		defer ticker.Stop()
		for {
			select {
			case <-tickCtx.Done():
				return
			case <-ticker.Chan():
				p.tick(tickCtx)
			}
		}
	}()
	return nil
}

func (p *healthProcessor) shutdown(ctx context.Context) error {
	p.lifeMu.Lock()
	defer p.lifeMu.Unlock()
	if p.refs == 0 {
		// Shutdown without Start (a failed pipeline build): nothing runs.
		p.lastStop()
		return nil
	}
	p.refs--
	if p.refs > 0 {
		return nil
	}
	p.cancel()
	p.wg.Wait()
	p.checkpoint(ctx)
	if p.storage != nil {
		if err := p.storage.Close(ctx); err != nil {
			p.logger.Warn("closing the storage client failed", zap.Error(err))
		}
		p.storage = nil
	}
	p.lastStop()
	return nil
}

func (p *healthProcessor) lastStop() {
	if p.onLastStop != nil {
		p.onLastStop()
	}
}

// tick evaluates, emits and publishes. Lock, build, unlock, then consume.
func (p *healthProcessor) tick(ctx context.Context) {
	now := p.clock.Now().UnixNano()
	p.mu.Lock()
	trs := p.tracker.evaluate(now)
	var md pmetric.Metrics
	if len(p.metricsTo) > 0 {
		md = p.tracker.buildMetrics(p.startTime, now)
	}
	var ld plog.Logs
	if len(p.logsTo) > 0 && len(trs) > 0 {
		ld = buildLogs(trs)
	}
	snap := p.tracker.snapshot(now)
	mTo := append([]consumer.Metrics(nil), p.metricsTo...)
	lTo := append([]consumer.Logs(nil), p.logsTo...)
	t := p.tracker
	overW, overR, expired, malformed := t.overflowWorkers, t.overflowRuns, t.expired, t.malformed
	t.overflowWorkers, t.overflowRuns, t.expired, t.malformed = 0, 0, 0, 0
	p.evals++
	doCheckpoint := p.evals%p.cfg.CheckpointEvery == 0
	p.mu.Unlock()

	p.count(ctx, p.tel.ProcessorWorkerHealthWorkersOverflow, overW)
	p.count(ctx, p.tel.ProcessorWorkerHealthRunsOverflow, overR)
	p.count(ctx, p.tel.ProcessorWorkerHealthWorkersExpired, expired)
	p.count(ctx, p.tel.ProcessorWorkerHealthRecordsMalformed, malformed)

	for _, tr := range trs {
		p.logger.Debug("worker state changed", zap.String("worker", tr.worker),
			zap.String("from", string(tr.from)), zap.String("to", string(tr.to)))
	}
	// Each pipeline gets its own copy: a downstream processor may mutate it.
	for i, c := range mTo {
		out := md
		if i < len(mTo)-1 {
			out = pmetric.NewMetrics()
			md.CopyTo(out)
		}
		if err := c.ConsumeMetrics(ctx, out); err != nil {
			p.tel.ProcessorWorkerHealthEmitErrors.Add(ctx, 1)
		}
	}
	if len(trs) > 0 {
		for i, c := range lTo {
			out := ld
			if i < len(lTo)-1 {
				out = plog.NewLogs()
				ld.CopyTo(out)
			}
			if err := c.ConsumeLogs(ctx, out); err != nil {
				p.tel.ProcessorWorkerHealthEmitErrors.Add(ctx, 1)
			}
		}
	}
	p.publish(snap)
	if doCheckpoint {
		p.checkpoint(ctx)
	}
}

func (p *healthProcessor) count(ctx context.Context, c metric.Int64Counter, n int64) {
	if n > 0 {
		c.Add(ctx, n)
	}
}

func (p *healthProcessor) publish(snap *contract.Snapshot) {
	snap.Source = p.set.ID
	for _, s := range p.subscribers {
		s.Publish(snap)
	}
}

// ingest applies one extracted batch under the lock.
func (p *healthProcessor) ingest(b *batch) {
	now := p.clock.Now().UnixNano()
	p.mu.Lock()
	p.tracker.apply(b, now)
	p.mu.Unlock()
	b.reset()
	p.pool.Put(b)
}

func (p *healthProcessor) getBatch() *batch { return p.pool.Get().(*batch) }

func (p *healthProcessor) processTraces(_ context.Context, td ptrace.Traces) (ptrace.Traces, error) {
	b := p.getBatch()
	p.mapper.traces(td, b)
	p.ingest(b)
	return td, nil
}

func (p *healthProcessor) processMetrics(_ context.Context, md pmetric.Metrics) (pmetric.Metrics, error) {
	b := p.getBatch()
	p.mapper.metrics(md, b)
	p.ingest(b)
	return md, nil
}

func (p *healthProcessor) processLogs(_ context.Context, ld plog.Logs) (plog.Logs, error) {
	b := p.getBatch()
	p.mapper.logs(ld, b)
	p.ingest(b)
	return ld, nil
}

// newClock gives the processor its clock; tests inject a clockwork.FakeClock.
var newClock = clockwork.NewRealClock
