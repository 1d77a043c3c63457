package workerprocessreceiver // import "github.com/workerwatch/workerwatch/receiver/workerprocessreceiver"

import (
	"context"
	"time"

	"go.opentelemetry.io/collector/component"
	"go.uber.org/zap"

	"github.com/workerwatch/workerwatch/receiver/workerprocessreceiver/internal/metadata"
)

// telemetry is the receiver's internal telemetry, in one place. Counts are
// gathered per scrape and recorded once, not per process, to keep the hot
// path free of metric calls.
type telemetry struct {
	tb *metadata.TelemetryBuilder
}

func newTelemetry(set component.TelemetrySettings) (*telemetry, error) {
	tb, err := metadata.NewTelemetryBuilder(set)
	if err != nil {
		return nil, err
	}
	return &telemetry{tb: tb}, nil
}

func (t *telemetry) record(ctx context.Context, d time.Duration, read, vanished, perms, scans int64) {
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
