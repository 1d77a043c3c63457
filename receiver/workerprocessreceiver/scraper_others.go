//go:build !linux

package workerprocessreceiver // import "github.com/workerwatch/workerwatch/receiver/workerprocessreceiver"

// The receiver reads Linux's /proc. Elsewhere the factory still registers
// (a configuration can be validated, the distribution builds), and Start
// fails with errUnsupportedPlatform, as contrib's hostmetrics process
// scraper does on the systems it does not support.

import (
	"context"
	"errors"
	"fmt"
	"runtime"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/collector/consumer"
	"go.opentelemetry.io/collector/pdata/pmetric"
	"go.opentelemetry.io/collector/receiver"
)

// errUnsupportedPlatform is what Start returns on systems other than Linux.
var errUnsupportedPlatform = errors.New("the worker_process receiver is unsupported on this platform (it reads Linux's /proc)")

// workerScraper elsewhere: next is set by the factory as on Linux (where a
// root's exit is scraped and sent at once); nothing is sent here.
type workerScraper struct {
	next consumer.Metrics
}

func newWorkerScraper(receiver.Settings, *Config) (*workerScraper, error) {
	return &workerScraper{}, nil
}

func (*workerScraper) start(context.Context, component.Host) error {
	return fmt.Errorf("%w: %s", errUnsupportedPlatform, runtime.GOOS)
}

func (*workerScraper) scrape(context.Context) (pmetric.Metrics, error) {
	return pmetric.NewMetrics(), nil
}

func (*workerScraper) shutdown(context.Context) error { return nil }
