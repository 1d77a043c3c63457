package telemetry

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/log"
)

// Emit sends one lifecycle event as a log record with event.name set. ctx
// carries the run span, if any, so the record links to the trace.
func (p *Providers) Emit(ctx context.Context, sev log.Severity, event, body string, attrs ...attribute.KeyValue) {
	var r log.Record
	now := time.Now()
	r.SetTimestamp(now)
	r.SetObservedTimestamp(now)
	r.SetEventName(event)
	r.SetSeverity(sev)
	r.SetSeverityText(sev.String())
	r.SetBody(attribute.StringValue(body))
	r.AddAttributes(attrs...)
	p.Logger.Emit(ctx, r)
}
