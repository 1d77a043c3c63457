package workerhealthprocessor // import "github.com/workerwatch/workerwatch/processor/workerhealthprocessor"

import (
	"context"

	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"

	"github.com/workerwatch/workerwatch/internal/contract"
	"github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/mapping"
	"github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/state"
	"github.com/workerwatch/workerwatch/processor/workerhealthprocessor/internal/tracker"
)

// The attributes the collector's service injects into a component's
// telemetry (logger fields, meter and tracer scope attributes) per pipeline.
// One instance serves every pipeline that lists the processor, so those of
// whichever pipeline was built first would be wrong for the others: they are
// dropped, as core's memorylimiterprocessor does. The component's own id and
// kind stay: they are the same in every pipeline.
const (
	injectedSignalKey     = "otelcol.signal"
	injectedPipelineIDKey = "otelcol.pipeline.id"
)

// The service's telemetry providers implement these (duck-typed, as the
// collector's own internal/telemetry.DropInjectedAttributes does). That
// helper lives in an internal package of the collector, which this module
// cannot import; these few lines are its copy.
type injectorCore interface {
	DropInjectedAttributes(...string) zapcore.Core
}

type injectorMeterProvider interface {
	DropInjectedAttributes(...string) metric.MeterProvider
}

type injectorTracerProvider interface {
	DropInjectedAttributes(...string) trace.TracerProvider
}

// sharedTelemetry returns ts without the per-pipeline attributes.
func sharedTelemetry(ts component.TelemetrySettings) component.TelemetrySettings {
	drop := []string{injectedSignalKey, injectedPipelineIDKey}
	ts.Logger = ts.Logger.WithOptions(zap.WrapCore(func(c zapcore.Core) zapcore.Core {
		if ic, ok := c.(injectorCore); ok {
			return ic.DropInjectedAttributes(drop...)
		}
		return c
	}))
	if mp, ok := ts.MeterProvider.(injectorMeterProvider); ok {
		ts.MeterProvider = mp.DropInjectedAttributes(drop...)
	}
	if tp, ok := ts.TracerProvider.(injectorTracerProvider); ok {
		ts.TracerProvider = tp.DropInjectedAttributes(drop...)
	}
	return ts
}

func (p *healthProcessor) count(ctx context.Context, c metric.Int64Counter, n int64, opts ...metric.AddOption) {
	if n > 0 {
		c.Add(ctx, n, opts...)
	}
}

// The attribute sets of the admission counters, made once.
var (
	evidenceAttrs = func() (a [state.NEvidence]metric.MeasurementOption) {
		for i, n := range tracker.EvidenceNames {
			a[i] = metric.WithAttributeSet(attribute.NewSet(attribute.String("evidence", n)))
		}
		return a
	}()
	refusedWorkerAttrs = func() (a [tracker.NRefusedWorker]metric.MeasurementOption) {
		for i, n := range tracker.RefusedWorkerReasons {
			a[i] = metric.WithAttributeSet(attribute.NewSet(attribute.String("reason", n)))
		}
		return a
	}()
	refusedRunAttrs = func() (a [tracker.NRefusedRun]metric.MeasurementOption) {
		for i, n := range tracker.RefusedRunReasons {
			a[i] = metric.WithAttributeSet(attribute.NewSet(attribute.String("reason", n)))
		}
		return a
	}()
)

// admissionTelemetry counts one evaluation's refusals, evictions and expiries.
func (p *healthProcessor) admissionTelemetry(ctx context.Context, c *tracker.AdmissionCounts) {
	for i, n := range c.WorkersRefused {
		p.count(ctx, p.tel.ProcessorWorkerHealthWorkersRefused, n, refusedWorkerAttrs[i])
	}
	for i, n := range c.RunsRefused {
		p.count(ctx, p.tel.ProcessorWorkerHealthRunsRefused, n, refusedRunAttrs[i])
	}
	for i, n := range c.WorkersEvicted {
		p.count(ctx, p.tel.ProcessorWorkerHealthWorkersEvicted, n, evidenceAttrs[i])
	}
	for i, n := range c.WorkersExpired {
		p.count(ctx, p.tel.ProcessorWorkerHealthWorkersExpired, n, evidenceAttrs[i])
	}
}

// judgeTelemetry counts the runs healed (by the side let go) and the
// workers named by one source only, with one log line for each of those.
func (p *healthProcessor) judgeTelemetry(ctx context.Context, healed [2]int64, unjoinedN int64, uj []tracker.Unjoined) {
	for side, n := range healed {
		if n > 0 {
			name := contract.SourceWorker
			if mapping.Side(side) == mapping.SideScheduler {
				name = contract.SourceScheduler
			}
			p.tel.ProcessorWorkerHealthRunsHealed.Add(ctx, n, metric.WithAttributes(attribute.String(contract.AttrSource, name)))
		}
	}
	p.count(ctx, p.tel.ProcessorWorkerHealthWorkersUnjoined, unjoinedN)
	for _, u := range uj {
		p.logger.Warn(u.Message(), zap.String("worker", u.Worker), zap.String("source", u.Origin),
			zap.Strings("ids", u.IDs), zap.Strings("named_only_by_another_source", u.Others))
	}
}
