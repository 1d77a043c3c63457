package workerhealthprocessor // import "github.com/workerwatch/workerwatch/processor/workerhealthprocessor"

import (
	"context"
	"sync"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/processor"
	"go.opentelemetry.io/collector/processor/processorhelper"

	"github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/mapping"
	"github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/metadata"
	"github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/tracker"
)

// factory keeps one instance per *Config: the collector creates the
// component once per pipeline with the same *Config pointer, so every
// pipeline that lists the id shares one tracker (the memory_limiter
// pattern). The entry is dropped when the last pipeline shuts down, so a
// config reload builds a fresh instance (which restores the checkpoint the
// old one wrote at its shutdown).
type factory struct {
	mu        sync.Mutex
	instances map[*Config]*healthProcessor
	// opts are given to every instance (tests: a fake clock, a shorter
	// shutdown wait).
	opts []option
}

// NewFactory returns the worker_health processor factory.
func NewFactory() processor.Factory { return newFactory() }

func newFactory(opts ...option) processor.Factory {
	f := &factory{instances: map[*Config]*healthProcessor{}, opts: opts}
	return processor.NewFactory(
		metadata.Type,
		createDefaultConfig,
		processor.WithTraces(f.createTraces, metadata.TracesStability),
		processor.WithMetrics(f.createMetrics, metadata.MetricsStability),
		processor.WithLogs(f.createLogs, metadata.LogsStability),
	)
}

func createDefaultConfig() component.Config {
	d := tracker.DefaultConfig()
	return &Config{
		EmitInterval:     10 * time.Second,
		ResendInterval:   time.Minute,
		CheckpointEvery:  1,
		Scheduler:        mapping.DefaultSchedulerConfig(),
		Mapping:          mapping.DefaultConfig(),
		Metrics:          mapping.DefaultMetricsConfig(),
		Capacity:         d.Capacity,
		Identity:         d.Identity,
		Memory:           d.Memory,
		Kills:            d.Kills,
		Recycle:          d.Recycle,
		CPU:              d.CPU,
		Stalled:          d.Stalled,
		Lost:             d.Lost,
		Drift:            d.Drift,
		Fleet:            d.Fleet,
		Hysteresis:       d.Hysteresis,
		Limits:           d.Limits,
		HistogramBuckets: d.HistogramBuckets,
	}
}

// get returns the shared instance for cfg, creating it on first use. Its
// telemetry is the first pipeline's without the pipeline and signal
// attributes the service injected (telemetry.go).
func (f *factory) get(set processor.Settings, cfg component.Config) (*healthProcessor, error) {
	c := cfg.(*Config)
	f.mu.Lock()
	defer f.mu.Unlock()
	if p, ok := f.instances[c]; ok {
		return p, nil
	}
	set.TelemetrySettings = sharedTelemetry(set.TelemetrySettings)
	p, err := newHealthProcessor(set, c, f.opts...)
	if err != nil {
		return nil, err
	}
	p.onLastStop = func() {
		f.mu.Lock()
		if f.instances[c] == p {
			delete(f.instances, c)
		}
		f.mu.Unlock()
		p.tel.Shutdown()
	}
	f.instances[c] = p
	return p, nil
}

// lifecycle binds a wrapper's Start and Shutdown to its pipeline. The
// metrics wrapper mutates what passes when it drops untracked workers'
// metrics (limits.drop_untracked_metrics).
func lifecycle(p *healthProcessor, pl *pipeline, mutates bool) []processorhelper.Option {
	return []processorhelper.Option{
		processorhelper.WithCapabilities(consumer.Capabilities{MutatesData: mutates}),
		processorhelper.WithStart(func(ctx context.Context, host component.Host) error { return p.start(ctx, host, pl) }),
		processorhelper.WithShutdown(func(ctx context.Context) error { return p.shutdown(ctx, pl) }),
	}
}

func (f *factory) createTraces(ctx context.Context, set processor.Settings, cfg component.Config, next consumer.Traces) (processor.Traces, error) {
	p, err := f.get(set, cfg)
	if err != nil {
		return nil, err
	}
	return processorhelper.NewTraces(ctx, set, cfg, next, p.processTraces, lifecycle(p, &pipeline{}, false)...)
}

func (f *factory) createMetrics(ctx context.Context, set processor.Settings, cfg component.Config, next consumer.Metrics) (processor.Metrics, error) {
	p, err := f.get(set, cfg)
	if err != nil {
		return nil, err
	}
	return processorhelper.NewMetrics(ctx, set, cfg, next, p.processMetrics, lifecycle(p, &pipeline{metrics: next}, p.cfg.Limits.DropUntrackedMetrics)...)
}

func (f *factory) createLogs(ctx context.Context, set processor.Settings, cfg component.Config, next consumer.Logs) (processor.Logs, error) {
	p, err := f.get(set, cfg)
	if err != nil {
		return nil, err
	}
	return processorhelper.NewLogs(ctx, set, cfg, next, p.processLogs, lifecycle(p, &pipeline{logs: next}, false)...)
}
