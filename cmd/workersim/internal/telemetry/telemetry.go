// Package telemetry sets up the OpenTelemetry SDK for the simulator's
// processes: traces, metrics and logs over OTLP/HTTP with short intervals so
// tests and demos see data within a second or two, and an error handler that
// keeps a missing collector from flooding stderr.
package telemetry

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/workerwatch/workerwatch/internal/contract"

	"github.com/go-logr/logr/funcr"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlplog/otlploghttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlpmetric/otlpmetrichttp"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/log"
	"go.opentelemetry.io/otel/metric"
	sdklog "go.opentelemetry.io/otel/sdk/log"
	sdkmetric "go.opentelemetry.io/otel/sdk/metric"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/trace"

	"github.com/workerwatch/workerwatch/cmd/workersim/internal/cli"
)

// ScopeName is the instrumentation scope of everything the simulator emits.
const ScopeName = "github.com/workerwatch/workerwatch/cmd/workersim"

// Options configure Setup.
type Options struct {
	// ServiceName is the resource's service.name.
	ServiceName string
	// Endpoint is the OTLP/HTTP endpoint, "host:port" (plain HTTP) or a URL.
	// Empty disables export: the SDK still runs, nothing leaves the process.
	Endpoint string
	// Attributes are added to the resource (e.g. cicd.worker.id); the first
	// also names the process in its error lines.
	Attributes []attribute.KeyValue
	// Interval is the metric export interval and the span/log batch timeout.
	Interval time.Duration
}

// Providers are one process's SDK providers.
type Providers struct {
	Tracer trace.Tracer
	Meter  metric.Meter
	Logger log.Logger

	shutdown []func(context.Context) error
}

// Setup builds the providers. It never fails because the collector is
// down: exporters connect lazily and their errors go to the rate-limited
// handler.
func Setup(ctx context.Context, o Options) (*Providers, error) {
	if o.Interval <= 0 {
		o.Interval = time.Second
	}
	// The first attribute names the process (a worker's id) in error lines.
	who := o.ServiceName
	if len(o.Attributes) > 0 {
		who += " " + o.Attributes[0].Value.AsString()
	}
	installErrorHandler(who)

	attrs := append([]attribute.KeyValue{attribute.String(contract.AttrServiceName, o.ServiceName)}, o.Attributes...)
	res, err := resource.Merge(resource.Default(), resource.NewSchemaless(attrs...))
	if err != nil {
		return nil, fmt.Errorf("resource: %w", err)
	}

	var (
		tpOpts = []sdktrace.TracerProviderOption{sdktrace.WithResource(res)}
		mpOpts = []sdkmetric.Option{sdkmetric.WithResource(res)}
		lpOpts = []sdklog.LoggerProviderOption{sdklog.WithResource(res)}
	)
	if o.Endpoint != "" {
		te, me, le, err := exporters(ctx, o.Endpoint)
		if err != nil {
			return nil, err
		}
		tpOpts = append(tpOpts, sdktrace.WithBatcher(te, sdktrace.WithBatchTimeout(o.Interval)))
		mpOpts = append(mpOpts, sdkmetric.WithReader(sdkmetric.NewPeriodicReader(me, sdkmetric.WithInterval(o.Interval))))
		lpOpts = append(lpOpts, sdklog.WithProcessor(sdklog.NewBatchProcessor(le, sdklog.WithExportInterval(o.Interval))))
	}
	tp := sdktrace.NewTracerProvider(tpOpts...)
	mp := sdkmetric.NewMeterProvider(mpOpts...)
	lp := sdklog.NewLoggerProvider(lpOpts...)
	return &Providers{
		Tracer:   tp.Tracer(ScopeName),
		Meter:    mp.Meter(ScopeName),
		Logger:   lp.Logger(ScopeName),
		shutdown: []func(context.Context) error{tp.Shutdown, mp.Shutdown, lp.Shutdown},
	}, nil
}

// exporters builds the three OTLP/HTTP exporters. Retries are short: a
// simulator that waits a minute per failed batch would hold its shutdown.
func exporters(ctx context.Context, endpoint string) (sdktrace.SpanExporter, sdkmetric.Exporter, sdklog.Exporter, error) {
	isURL := strings.Contains(endpoint, "://")
	const timeout = 3 * time.Second

	topts := []otlptracehttp.Option{
		otlptracehttp.WithTimeout(timeout),
		otlptracehttp.WithRetry(otlptracehttp.RetryConfig{Enabled: true, InitialInterval: 500 * time.Millisecond, MaxInterval: time.Second, MaxElapsedTime: 3 * time.Second}),
	}
	mopts := []otlpmetrichttp.Option{
		otlpmetrichttp.WithTimeout(timeout),
		otlpmetrichttp.WithRetry(otlpmetrichttp.RetryConfig{Enabled: true, InitialInterval: 500 * time.Millisecond, MaxInterval: time.Second, MaxElapsedTime: 3 * time.Second}),
	}
	lopts := []otlploghttp.Option{
		otlploghttp.WithTimeout(timeout),
		otlploghttp.WithRetry(otlploghttp.RetryConfig{Enabled: true, InitialInterval: 500 * time.Millisecond, MaxInterval: time.Second, MaxElapsedTime: 3 * time.Second}),
	}
	if isURL {
		topts = append(topts, otlptracehttp.WithEndpointURL(endpoint))
		mopts = append(mopts, otlpmetrichttp.WithEndpointURL(endpoint))
		lopts = append(lopts, otlploghttp.WithEndpointURL(endpoint))
	} else {
		topts = append(topts, otlptracehttp.WithEndpoint(endpoint), otlptracehttp.WithInsecure())
		mopts = append(mopts, otlpmetrichttp.WithEndpoint(endpoint), otlpmetrichttp.WithInsecure())
		lopts = append(lopts, otlploghttp.WithEndpoint(endpoint), otlploghttp.WithInsecure())
	}
	te, err := otlptracehttp.New(ctx, topts...)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("otlp trace exporter: %w", err)
	}
	me, err := otlpmetrichttp.New(ctx, mopts...)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("otlp metric exporter: %w", err)
	}
	le, err := otlploghttp.New(ctx, lopts...)
	if err != nil {
		return nil, nil, nil, fmt.Errorf("otlp log exporter: %w", err)
	}
	return te, me, le, nil
}

// Shutdown flushes and stops every provider; ctx bounds how long a missing
// collector may delay the exit.
func (p *Providers) Shutdown(ctx context.Context) error {
	var errs []error
	for _, f := range p.shutdown {
		errs = append(errs, f(ctx))
	}
	return errors.Join(errs...)
}

var handlerOnce sync.Once

// installErrorHandler routes SDK errors and SDK internal logs to stderr, at
// most one line a minute: a simulator started without a collector must keep
// running quietly.
func installErrorHandler(who string) {
	handlerOnce.Do(func() {
		l := &cli.RateLimited{Prefix: who + ": telemetry", Every: time.Minute}
		otel.SetErrorHandler(otel.ErrorHandlerFunc(func(err error) { l.Printf("%v", err) }))
		otel.SetLogger(funcr.New(func(prefix, args string) { l.Printf("%s", strings.TrimSpace(prefix+" "+args)) }, funcr.Options{}))
	})
}
