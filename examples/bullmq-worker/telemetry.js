'use strict';
// OpenTelemetry JS SDK setup shared by the worker and the queue monitor: traces, logs and
// metrics over OTLP/HTTP (JSON bodies) to OTEL_EXPORTER_OTLP_ENDPOINT (default
// http://127.0.0.1:4318, the collector's OTLP/HTTP listener). BullMQ's own telemetry
// (bullmq-otel) uses the global tracer and meter providers this registers, so it must
// run before any Queue or Worker is created.

const { NodeSDK, tracing } = require('@opentelemetry/sdk-node');
const { OTLPTraceExporter } = require('@opentelemetry/exporter-trace-otlp-http');
const { OTLPLogExporter } = require('@opentelemetry/exporter-logs-otlp-http');
const { OTLPMetricExporter } = require('@opentelemetry/exporter-metrics-otlp-http');
const { BatchLogRecordProcessor } = require('@opentelemetry/sdk-logs');
const { PeriodicExportingMetricReader } = require('@opentelemetry/sdk-metrics');
const { resourceFromAttributes } = require('@opentelemetry/resources');

const DEFAULT_ENDPOINT = 'http://127.0.0.1:4318';

function startTelemetry({ serviceName, instanceId, exportDelayMs = 500, metricIntervalMs = 2000 }) {
  if (!process.env.OTEL_EXPORTER_OTLP_ENDPOINT) {
    process.env.OTEL_EXPORTER_OTLP_ENDPOINT = DEFAULT_ENDPOINT;
  }
  const sdk = new NodeSDK({
    // Plain OpenTelemetry service identity: nothing workerwatch-specific. The
    // worker's identity for workerwatch is BullMQ's own worker name
    // (bullmq.worker.name on BullMQ's spans, the job's processedBy in Redis).
    resource: resourceFromAttributes({
      'service.name': serviceName,
      'service.instance.id': instanceId,
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
    // No auto-instrumentation: BullMQ instruments itself (bullmq-otel), and the
    // exporters' own HTTP calls and the Redis commands must not become spans.
    instrumentations: [],
  });
  sdk.start();
  return sdk;
}

// intFromEnv reads a non-negative integer setting; a bad value stops the
// program with a message naming the variable.
function intFromEnv(prog, name, def, min = 0) {
  const raw = process.env[name];
  if (raw === undefined || raw === '') return def;
  const v = Number(raw);
  if (!Number.isInteger(v) || v < min) {
    process.stderr.write(`${prog}: ${name} must be an integer >= ${min}, got ${JSON.stringify(raw)}\n`);
    process.exit(2);
  }
  return v;
}

// redisConnection: BullMQ's connection options (ioredis) from REDIS_URL
// (default redis://127.0.0.1:6379). Workers need maxRetriesPerRequest: null
// (BullMQ refuses otherwise): they wait for Redis to come back.
function redisConnection(prog, { worker }) {
  const raw = process.env.REDIS_URL || 'redis://127.0.0.1:6379';
  let u;
  try {
    u = new URL(raw);
  } catch (err) {
    process.stderr.write(`${prog}: REDIS_URL is not a URL: ${JSON.stringify(raw)}\n`);
    process.exit(2);
  }
  if (u.protocol !== 'redis:') {
    process.stderr.write(`${prog}: REDIS_URL must start with redis://, got ${JSON.stringify(raw)}\n`);
    process.exit(2);
  }
  const opts = { host: u.hostname || '127.0.0.1', port: Number(u.port || 6379) };
  if (u.password) opts.password = decodeURIComponent(u.password);
  if (u.username) opts.username = decodeURIComponent(u.username);
  if (worker) opts.maxRetriesPerRequest = null;
  return opts;
}

module.exports = { startTelemetry, intFromEnv, redisConnection, DEFAULT_ENDPOINT };
