package workerprocessreceiver // import "github.com/workerwatch/workerwatch/receiver/workerprocessreceiver"

import (
	"context"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/receiver"
	"go.opentelemetry.io/collector/receiver/xreceiver"
	"go.opentelemetry.io/collector/scraper"
	"go.opentelemetry.io/collector/scraper/scraperhelper"

	"github.com/workerwatch/workerwatch/receiver/workerprocessreceiver/internal/metadata"
)

// NewFactory returns the worker_process receiver factory.
func NewFactory() receiver.Factory {
	return xreceiver.NewFactory(
		metadata.Type,
		createDefaultConfig,
		xreceiver.WithMetrics(createMetrics, metadata.MetricsStability),
	)
}

func createDefaultConfig() component.Config {
	cc := scraperhelper.NewDefaultControllerConfig()
	cc.CollectionInterval = 10 * time.Second
	return &Config{
		ControllerConfig:     cc,
		MetricsBuilderConfig: metadata.NewDefaultMetricsBuilderConfig(),
		ProcRoot:             "/proc",
		CgroupRoot:           "/sys/fs/cgroup",
		DiscoveryInterval:    time.Minute,
		ForgetAfter:          10 * time.Minute,
		TopProcesses:         5,
		PSSMaxRSS:            256 << 20,
		ProcessEvents:        processEventsAuto,
		MaxOpenFiles:         4096,
	}
}

func createMetrics(_ context.Context, set receiver.Settings, cfg component.Config, next consumer.Metrics) (receiver.Metrics, error) {
	rCfg := cfg.(*Config)
	s, err := newWorkerScraper(set, rCfg)
	if err != nil {
		return nil, err
	}
	s.next = next
	sc, err := scraper.NewMetrics(s.scrape, scraper.WithStart(s.start), scraper.WithShutdown(s.shutdown))
	if err != nil {
		return nil, err
	}
	return scraperhelper.NewMetricsController(&rCfg.ControllerConfig, set, next,
		scraperhelper.AddMetricsScraper(metadata.Type, sc))
}
