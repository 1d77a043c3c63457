package bullmqreceiver // import "github.com/workerwatch/workerwatch/receiver/bullmqreceiver"

import (
	"context"
	"sync"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/config/configtls"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/receiver"

	"github.com/workerwatch/workerwatch/receiver/bullmqreceiver/internal/metadata"
)

// NewFactory returns the bullmq receiver factory. One receiver instance
// serves both signals of one configuration (logs: runs, snapshots, stalls;
// metrics: queue counts), so Redis is read once per interval.
func NewFactory() receiver.Factory {
	f := &factory{instances: map[*Config]*bullReceiver{}}
	return receiver.NewFactory(
		metadata.Type,
		createDefaultConfig,
		receiver.WithLogs(f.createLogs, metadata.LogsStability),
		receiver.WithMetrics(f.createMetrics, metadata.MetricsStability),
	)
}

func createDefaultConfig() component.Config {
	tls := configtls.NewDefaultClientConfig()
	tls.Insecure = true
	return &Config{
		Endpoint:             "localhost:6379",
		TLS:                  tls,
		Timeout:              5 * time.Second,
		Prefix:               "bull",
		DiscoveryInterval:    time.Minute,
		PollInterval:         time.Second,
		MaxEventsPerPoll:     10000,
		MaxActiveJobs:        10000,
		ServiceName:          "bullmq",
		MetricsBuilderConfig: metadata.NewDefaultMetricsBuilderConfig(),
	}
}

type factory struct {
	mu        sync.Mutex
	instances map[*Config]*bullReceiver
}

func (f *factory) get(set receiver.Settings, cfg *Config) (*bullReceiver, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if r, ok := f.instances[cfg]; ok {
		return r, nil
	}
	r, err := newReceiver(set, cfg)
	if err != nil {
		return nil, err
	}
	r.onShutdown = func() {
		f.mu.Lock()
		if f.instances[cfg] == r {
			delete(f.instances, cfg)
		}
		f.mu.Unlock()
	}
	f.instances[cfg] = r
	return r, nil
}

func (f *factory) createLogs(_ context.Context, set receiver.Settings, cfg component.Config, next consumer.Logs) (receiver.Logs, error) {
	r, err := f.get(set, cfg.(*Config))
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	r.logs = next
	r.mu.Unlock()
	return r, nil
}

func (f *factory) createMetrics(_ context.Context, set receiver.Settings, cfg component.Config, next consumer.Metrics) (receiver.Metrics, error) {
	r, err := f.get(set, cfg.(*Config))
	if err != nil {
		return nil, err
	}
	r.mu.Lock()
	r.metrics = next
	r.mu.Unlock()
	return r, nil
}
