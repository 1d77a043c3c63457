package telemetry

import (
	"context"
	"time"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/log"
)

// Names from docs/conventions.md.
const (
	EventClaimed   = "workerwatch.run.claimed"
	EventStarted   = "workerwatch.run.started"
	EventFinished  = "workerwatch.run.finished"
	EventKilled    = "workerwatch.run.killed"
	EventReleased  = "workerwatch.run.released"
	EventHeartbeat = "workerwatch.worker.heartbeat"

	AttrWorkerID   = "cicd.worker.id"
	AttrRunID      = "cicd.pipeline.run.id"
	AttrResult     = "cicd.pipeline.result"
	AttrErrorType  = "error.type"
	AttrKillReason = "workerwatch.kill.reason"
	AttrCapacity   = "workerwatch.worker.capacity"
	AttrReleaseWhy = "workerwatch.release.reason" // simulator-specific, docs/simulator.md
	MetricCapacity = "workerwatch.worker.capacity"
	MetricActive   = "workerwatch.worker.runs.active"
	MetricPending  = "workerwatch.scheduler.runs.pending"
	MetricHeld     = "workerwatch.scheduler.runs.held"
	UnitRuns       = "{run}"
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
