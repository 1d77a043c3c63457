'use strict';
// OpenTelemetry setup for the example worker: traces, logs and metrics over OTLP/HTTP
// (JSON bodies), with short export delays so a collector (or a test) sees data fast.
//
// Endpoint: the standard OTEL_EXPORTER_OTLP_ENDPOINT (base URL, the exporters append
// /v1/traces, /v1/logs, /v1/metrics) or the per-signal OTEL_EXPORTER_OTLP_*_ENDPOINT
// variables; default http://127.0.0.1:4318 (the collector's OTLP/HTTP port).

const { NodeSDK, tracing } = require('@opentelemetry/sdk-node');
const { OTLPTraceExporter } = require('@opentelemetry/exporter-trace-otlp-http');
const { OTLPLogExporter } = require('@opentelemetry/exporter-logs-otlp-http');
const { OTLPMetricExporter } = require('@opentelemetry/exporter-metrics-otlp-http');
const { BatchLogRecordProcessor } = require('@opentelemetry/sdk-logs');
const { PeriodicExportingMetricReader } = require('@opentelemetry/sdk-metrics');
const { resourceFromAttributes } = require('@opentelemetry/resources');

const DEFAULT_ENDPOINT = 'http://127.0.0.1:4318';

function startTelemetry({ workerId, serviceName = 'node-worker', exportDelayMs = 500, metricIntervalMs = 1000 }) {
  if (!process.env.OTEL_EXPORTER_OTLP_ENDPOINT) {
    // Set before the exporters are built so that they (and the per-signal overrides)
    // resolve the URL the standard way.
    process.env.OTEL_EXPORTER_OTLP_ENDPOINT = DEFAULT_ENDPOINT;
  }
  const protocol = process.env.OTEL_EXPORTER_OTLP_PROTOCOL;
  if (protocol && protocol !== 'http/json') {
    process.stderr.write(`node-worker: OTEL_EXPORTER_OTLP_PROTOCOL=${protocol} ignored: this example always sends OTLP/HTTP with JSON bodies\n`);
  }

  const sdk = new NodeSDK({
    // Identity (docs/conventions.md): who sent it, and which worker it is.
    resource: resourceFromAttributes({
      'service.name': serviceName,
      'cicd.worker.id': workerId,
    }),
    spanProcessors: [
      new tracing.BatchSpanProcessor(new OTLPTraceExporter(), { scheduledDelayMillis: exportDelayMs }),
    ],
    logRecordProcessors: [
      new BatchLogRecordProcessor({ exporter: new OTLPLogExporter(), scheduledDelayMillis: exportDelayMs }),
    ],
    metricReaders: [
      new PeriodicExportingMetricReader({
        exporter: new OTLPMetricExporter(),
        exportIntervalMillis: metricIntervalMs,
        exportTimeoutMillis: Math.min(metricIntervalMs, 30000),
      }),
    ],
    // No auto-instrumentation: the exporters' own HTTP calls must not become spans.
    instrumentations: [],
  });
  sdk.start();
  return sdk;
}

module.exports = { startTelemetry, DEFAULT_ENDPOINT };
