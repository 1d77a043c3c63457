//go:build linux

package workerprocessreceiver // import "github.com/workerwatch/workerwatch/receiver/workerprocessreceiver"

import (
	"context"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/otel/metric"
	"go.uber.org/zap"

	"github.com/workerwatch/workerwatch/receiver/workerprocessreceiver/internal/metadata"
)

// telemetry is the receiver's internal telemetry, in one place. Counts are
// gathered per scrape and recorded once, not per process, to keep the hot
// path free of metric calls.
type telemetry struct {
	tb *metadata.TelemetryBuilder
	// openFiles mirrors the scraper's held-file count for the gauge's
	// callback, which runs on the meter's goroutine.
	openFiles atomic.Int64
}

func newTelemetry(set component.TelemetrySettings) (*telemetry, error) {
	tb, err := metadata.NewTelemetryBuilder(set)
	if err != nil {
		return nil, err
	}
	t := &telemetry{tb: tb}
	if err := tb.RegisterWorkerProcessOpenFilesCallback(func(_ context.Context, o metric.Int64Observer) error {
		o.Observe(t.openFiles.Load())
		return nil
	}); err != nil {
		tb.Shutdown()
		return nil, err
	}
	return t, nil
}

func (t *telemetry) record(ctx context.Context, d time.Duration, read, vanished, perms, scans int64, openFiles int) {
	t.openFiles.Store(int64(openFiles))
	t.tb.WorkerProcessScrapeDuration.Record(ctx, d.Seconds())
	t.tb.WorkerProcessProcessesRead.Add(ctx, read)
	t.tb.WorkerProcessProcessesVanished.Add(ctx, vanished)
	if perms > 0 {
		t.tb.WorkerProcessPermissionErrors.Add(ctx, perms)
	}
	if scans > 0 {
		t.tb.WorkerProcessDiscoveryScans.Add(ctx, scans)
	}
}

// recordEventsLost counts process events the kernel dropped (receive buffer
// overflow), found by the gaps in its per-CPU sequence numbers.
func (t *telemetry) recordEventsLost(ctx context.Context, n int64) {
	if n > 0 {
		t.tb.WorkerProcessEventsLost.Add(ctx, n)
	}
}

func (t *telemetry) shutdown() { t.tb.Shutdown() }

// permissionOnce logs a permission problem once per worker and kind of file,
// with what to do about it, instead of on every scrape.
func (s *workerScraper) permissionOnce(key, msg string, fields ...zap.Field) {
	if s.logged[key] {
		return
	}
	s.logged[key] = true
	s.logger.Warn(msg, fields...)
}

// logOnce logs an informational condition once until it is cleared.
func (s *workerScraper) logOnce(key, msg string, fields ...zap.Field) {
	if s.logged[key] {
		return
	}
	s.logged[key] = true
	s.logger.Info(msg, fields...)
}
