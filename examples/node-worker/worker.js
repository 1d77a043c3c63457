'use strict';
// An OpenFn-style job worker: one main process that claims runs and forks one child
// process per run (command line contains child/runner.js, like OpenFn's engine-multi),
// emitting the workerwatch telemetry contract (docs/conventions.md) over OTLP/HTTP.
//
// Environment:
//   WORKER_NAME       required; the worker's stable id (resource attribute cicd.worker.id)
//   CAPACITY          runs held at once (default 2)
//   RUN_INTERVAL_MS   how often to try to claim a run (default 1000)
//   RUN_MEMORY_MB     memory each child allocates and touches (default 30)
//   RUN_DURATION_MS   how long each child holds it (default 1500)
//   CHILD_MAX_OLD_SPACE_MB  V8 heap limit passed to children, like OpenFn's
//                     WORKER_MAX_RUN_MEMORY_MB (default 500)
//   OTEL_EXPORTER_OTLP_ENDPOINT  default http://127.0.0.1:4318

const path = require('node:path');
const { fork } = require('node:child_process');

function intFromEnv(name, def, min) {
  const raw = process.env[name];
  if (raw === undefined || raw === '') return def;
  const v = Number(raw);
  if (!Number.isInteger(v) || v < min) {
    fail(`${name} must be an integer >= ${min}, got ${JSON.stringify(raw)}`);
  }
  return v;
}

function fail(msg) {
  process.stderr.write(`node-worker: ${msg}\n`);
  process.exit(2);
}

const WORKER_NAME = (process.env.WORKER_NAME || '').trim();
if (!WORKER_NAME) {
  fail('WORKER_NAME is required (the worker\'s stable id, sent as resource attribute cicd.worker.id); e.g. WORKER_NAME=worker-1 node worker.js');
}
const CAPACITY = intFromEnv('CAPACITY', 2, 1);
const RUN_INTERVAL_MS = intFromEnv('RUN_INTERVAL_MS', 1000, 10);
const RUN_MEMORY_MB = intFromEnv('RUN_MEMORY_MB', 30, 0);
const RUN_DURATION_MS = intFromEnv('RUN_DURATION_MS', 1500, 0);
const CHILD_MAX_OLD_SPACE_MB = intFromEnv('CHILD_MAX_OLD_SPACE_MB', 500, 16);
const HEARTBEAT_MS = 1000;
const CHILD_KILL_GRACE_MS = 2000;

const { startTelemetry } = require('./telemetry');
const sdk = startTelemetry({ workerId: WORKER_NAME });

const { trace, context, metrics, SpanStatusCode, ValueType } = require('@opentelemetry/api');
const { logs, SeverityNumber } = require('@opentelemetry/api-logs');

const SCOPE = 'workerwatch-node-worker';
const tracer = trace.getTracer(SCOPE);
const logger = logs.getLogger(SCOPE);
const meter = metrics.getMeter(SCOPE);

/** runId -> { runId, child, span, execSpan, claimedAt, startedAt, reported, killReason } */
const active = new Map();
let runCounter = 0;
let shuttingDown = false;

meter
  .createObservableGauge('workerwatch.worker.capacity', {
    unit: '{run}',
    description: 'Runs the worker may hold at once.',
    valueType: ValueType.INT,
  })
  .addCallback((r) => r.observe(CAPACITY));
meter
  .createObservableGauge('workerwatch.worker.runs.active', {
    unit: '{run}',
    description: 'Runs the worker holds now.',
    valueType: ValueType.INT,
  })
  .addCallback((r) => r.observe(active.size));

// emit sends one lifecycle event as an OTLP log record with event.name set; run events
// are correlated with the run span (trace and span ids on the record).
function emit(eventName, attributes, span, severityNumber = SeverityNumber.INFO) {
  logger.emit({
    eventName,
    severityNumber,
    severityText: severityNumber >= SeverityNumber.WARN ? 'WARN' : 'INFO',
    body: eventName,
    attributes,
    context: span ? trace.setSpan(context.active(), span) : context.active(),
  });
}

function log(msg) {
  process.stdout.write(`${new Date().toISOString()} [${WORKER_NAME}] ${msg}\n`);
}

function claimRun() {
  runCounter += 1;
  const runId = `node-run-${runCounter}`;
  const claimedAt = Date.now();
  const span = tracer.startSpan('run', {
    startTime: claimedAt,
    attributes: { 'cicd.pipeline.run.id': runId, 'cicd.worker.id': WORKER_NAME },
  });
  const run = { runId, span, execSpan: null, claimedAt, startedAt: 0, reported: null, killReason: null, child: null };
  active.set(runId, run);
  emit('workerwatch.run.claimed', {
    'cicd.pipeline.run.id': runId,
    'workerwatch.worker.capacity': CAPACITY,
  }, span);
  log(`claimed ${runId} (${active.size}/${CAPACITY})`);

  const child = fork(
    path.join(__dirname, 'child', 'runner.js'),
    ['--run-id', runId, '--memory-mb', String(RUN_MEMORY_MB), '--duration-ms', String(RUN_DURATION_MS)],
    {
      // Like OpenFn's engine-multi: a heap limit on the command line, and an empty
      // environment (children are identified by command line and parent pid, not env).
      execArgv: [`--max-old-space-size=${CHILD_MAX_OLD_SPACE_MB}`],
      env: {},
      stdio: ['ignore', 'inherit', 'inherit', 'ipc'],
    },
  );
  run.child = child;

  child.on('message', (msg) => {
    if (!msg || typeof msg !== 'object') return;
    if (msg.type === 'started') {
      run.startedAt = Date.now();
      run.execSpan = tracer.startSpan('execute', {
        attributes: { 'cicd.pipeline.run.id': runId, 'cicd.worker.id': WORKER_NAME },
      }, trace.setSpan(context.active(), span));
      emit('workerwatch.run.started', { 'cicd.pipeline.run.id': runId, 'process.pid': child.pid }, span);
    } else if (msg.type === 'done') {
      run.reported = msg;
    }
  });
  child.on('error', (err) => {
    log(`${runId}: child error: ${err.message}`);
  });
  child.on('exit', (code, signal) => finishRun(run, code, signal));
}

function finishRun(run, code, signal) {
  if (!active.has(run.runId)) return;
  active.delete(run.runId);
  const { runId, span } = run;
  const base = { 'cicd.pipeline.run.id': runId };
  let result;
  let errorType;
  let statusMessage;
  if (run.killReason) {
    // Killed by us (only on shutdown in this example; a real worker also kills on
    // timeout -> result timeout, error.type TimeoutError, reason timeout, and on memory).
    result = 'cancellation';
    statusMessage = `killed: ${run.killReason}`;
    emit('workerwatch.run.killed', {
      ...base,
      'cicd.pipeline.result': result,
      'workerwatch.kill.reason': run.killReason,
    }, span, SeverityNumber.WARN);
  } else if (code === 0 && run.reported && run.reported.result === 'success') {
    result = 'success';
    emit('workerwatch.run.finished', { ...base, 'cicd.pipeline.result': result }, span);
  } else {
    result = 'error';
    errorType = 'ExitError';
    statusMessage = `${errorType}: exit code ${code}, signal ${signal}`;
    emit('workerwatch.run.finished', {
      ...base,
      'cicd.pipeline.result': result,
      'error.type': errorType,
      'process.exit.code': code === null ? -1 : code,
    }, span, SeverityNumber.WARN);
  }
  const endAttrs = { 'cicd.pipeline.result': result };
  if (errorType) endAttrs['error.type'] = errorType;
  for (const s of [run.execSpan, span]) {
    if (!s) continue;
    s.setAttributes(endAttrs);
    if (statusMessage) s.setStatus({ code: SpanStatusCode.ERROR, message: statusMessage });
    s.end();
  }
  log(`finished ${runId}: ${result}${statusMessage ? ` (${statusMessage})` : ''}`);
}

const claimTimer = setInterval(() => {
  if (!shuttingDown && active.size < CAPACITY) claimRun();
}, RUN_INTERVAL_MS);

const heartbeatTimer = setInterval(() => {
  emit('workerwatch.worker.heartbeat', {
    'workerwatch.worker.capacity': CAPACITY,
    'workerwatch.worker.runs.active': active.size,
  });
}, HEARTBEAT_MS);

async function shutdown(signal) {
  if (shuttingDown) return;
  shuttingDown = true;
  log(`${signal}: shutting down (${active.size} active runs)`);
  clearInterval(claimTimer);
  clearInterval(heartbeatTimer);

  // Kill every child, wait for them to exit (SIGKILL after a grace period).
  const waits = [];
  for (const run of active.values()) {
    run.killReason = 'shutdown';
    const child = run.child;
    if (child.exitCode !== null || child.signalCode !== null) continue;
    waits.push(new Promise((resolve) => {
      const t = setTimeout(() => { try { child.kill('SIGKILL'); } catch { /* gone */ } }, CHILD_KILL_GRACE_MS);
      child.once('exit', () => { clearTimeout(t); resolve(); });
    }));
    try { child.kill('SIGTERM'); } catch { /* already gone */ }
  }
  await Promise.all(waits);

  // Flush and stop the SDK (bounded: a collector that is down must not hang shutdown).
  try {
    await Promise.race([
      sdk.shutdown(),
      new Promise((_, reject) => setTimeout(() => reject(new Error('timed out after 5s')), 5000).unref()),
    ]);
  } catch (err) {
    process.stderr.write(`node-worker: telemetry shutdown: ${err.message}\n`);
  }
  log('stopped');
  process.exit(0);
}

process.on('SIGTERM', () => shutdown('SIGTERM'));
process.on('SIGINT', () => shutdown('SIGINT'));

log(`started: capacity ${CAPACITY}, a run every ${RUN_INTERVAL_MS} ms, ${RUN_MEMORY_MB} MB for ${RUN_DURATION_MS} ms per run, OTLP ${process.env.OTEL_EXPORTER_OTLP_ENDPOINT}`);
