package celeryreceiver // import "github.com/workerwatch/workerwatch/receiver/celeryreceiver"

import (
	"context"
	"sync"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/receiver"

	"github.com/workerwatch/workerwatch/receiver/celeryreceiver/internal/metadata"
)

// NewFactory returns the celery receiver factory.
func NewFactory() receiver.Factory {
	return receiver.NewFactory(
		metadata.Type,
		createDefaultConfig,
		receiver.WithLogs(createLogs, metadata.LogsStability),
		receiver.WithMetrics(createMetrics, metadata.MetricsStability),
	)
}

func createDefaultConfig() component.Config {
	return &Config{
		MetricsBuilderConfig: metadata.NewDefaultMetricsBuilderConfig(),
		Queues:               []string{"celery"},
		EventExchange:        "celeryev",
		CollectionInterval:   5 * time.Second,
		HeartbeatGrace:       2,
		ReconnectInterval:    5 * time.Second,
		EventQueueExpires:    time.Hour,
		EventQueueMaxLength:  100000,
		ResultScanLimit:      100000,
		MaxTrackedTasks:      100000,
	}
}

// One receiver serves both pipelines of one configuration (one broker
// connection, one view of the workers), as the collector's shared
// components do.
var (
	sharedMu sync.Mutex
	shared   = map[*Config]*celeryReceiver{}
)

func getShared(set receiver.Settings, cfg *Config) (*celeryReceiver, error) {
	sharedMu.Lock()
	defer sharedMu.Unlock()
	if r, ok := shared[cfg]; ok {
		return r, nil
	}
	r, err := newReceiver(set, cfg)
	if err != nil {
		return nil, err
	}
	r.forget = func() {
		sharedMu.Lock()
		delete(shared, cfg)
		sharedMu.Unlock()
	}
	shared[cfg] = r
	return r, nil
}

func createLogs(_ context.Context, set receiver.Settings, cfg component.Config, next consumer.Logs) (receiver.Logs, error) {
	r, err := getShared(set, cfg.(*Config))
	if err != nil {
		return nil, err
	}
	r.logs = next
	return r, nil
}

func createMetrics(_ context.Context, set receiver.Settings, cfg component.Config, next consumer.Metrics) (receiver.Metrics, error) {
	r, err := getShared(set, cfg.(*Config))
	if err != nil {
		return nil, err
	}
	r.metrics = next
	return r, nil
}
