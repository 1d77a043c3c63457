package bullmqreceiver // import "github.com/workerwatch/workerwatch/receiver/bullmqreceiver"

import (
	"context"
	"time"

	"go.opentelemetry.io/collector/component"

	"github.com/workerwatch/workerwatch/receiver/bullmqreceiver/internal/metadata"
)

// telemetry is the receiver's internal telemetry (metadata.yaml,
// "telemetry"): Redis commands and errors, events read, stream gaps, poll
// time.
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

func (t *telemetry) commands(ctx context.Context, n int64) {
	t.tb.BullmqRedisCommands.Add(ctx, n)
}
func (t *telemetry) errored(ctx context.Context) { t.tb.BullmqRedisErrors.Add(ctx, 1) }
func (t *telemetry) eventsRead(ctx context.Context, n int64) {
	if n > 0 {
		t.tb.BullmqEventsRead.Add(ctx, n)
	}
}
func (t *telemetry) gap(ctx context.Context) { t.tb.BullmqEventsGaps.Add(ctx, 1) }
func (t *telemetry) polled(ctx context.Context, d time.Duration) {
	t.tb.BullmqPollDuration.Record(ctx, d.Seconds())
}
func (t *telemetry) shutdown() { t.tb.Shutdown() }
