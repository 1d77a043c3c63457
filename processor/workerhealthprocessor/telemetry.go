package workerhealthprocessor // import "github.com/workerwatch/workerwatch/processor/workerhealthprocessor"

import (
	"go.opentelemetry.io/collector/component"
	"go.opentelemetry.io/otel/metric"
	"go.opentelemetry.io/otel/trace"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
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
