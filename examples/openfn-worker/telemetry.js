// OpenTelemetry JS SDK setup shared by the worker host (worker.js) and the
// Lightning stand-in (lightning.js): logs, traces and metrics over OTLP/HTTP
// (JSON bodies), with short export delays so a collector sees events quickly.
// The same shape as examples/node-worker/telemetry.js.
//
// Endpoint: the standard OTEL_EXPORTER_OTLP_ENDPOINT (base URL; /v1/logs,
// /v1/traces and /v1/metrics are appended) or the per-signal variables;
// default http://127.0.0.1:4318, the collector's OTLP/HTTP listener.

import { NodeSDK, tracing } from '@opentelemetry/sdk-node';
import { OTLPTraceExporter } from '@opentelemetry/exporter-trace-otlp-http';
import { OTLPLogExporter } from '@opentelemetry/exporter-logs-otlp-http';
import { OTLPMetricExporter } from '@opentelemetry/exporter-metrics-otlp-http';
import { BatchLogRecordProcessor } from '@opentelemetry/sdk-logs';
import { PeriodicExportingMetricReader } from '@opentelemetry/sdk-metrics';
import { resourceFromAttributes } from '@opentelemetry/resources';

export function startTelemetry({ resource, exportDelayMs = 500, metricIntervalMs = 1000 }) {
  process.env.OTEL_EXPORTER_OTLP_ENDPOINT ||= 'http://127.0.0.1:4318';
  const sdk = new NodeSDK({
    resource: resourceFromAttributes(resource),
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

// stopTelemetry flushes what is buffered, bounded: a collector that is down
// must not hang a shutdown.
export async function stopTelemetry(sdk, name) {
  try {
    await Promise.race([
      sdk.shutdown(),
      new Promise((_, reject) => setTimeout(() => reject(new Error('timed out after 5s')), 5000).unref()),
    ]);
  } catch (err) {
    process.stderr.write(`${name}: telemetry shutdown: ${err.message}\n`);
  }
}
