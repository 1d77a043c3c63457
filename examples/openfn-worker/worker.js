// A small host of OpenFn's real engine, @openfn/engine-multi, driven the way
// OpenFn's ws-worker drives it (openfn/kit packages/ws-worker: api/claim.ts,
// api/execute.ts, events/*.ts): a workloop claims runs from Lightning, each
// run's plan is executed by the engine (a pool of forked child processes,
// `.../engine-multi/dist/worker/child/runner.js`, one worker thread per run),
// and the engine's events become the run channel's messages: run:start,
// step:start, step:complete, run:complete with reason
// success|fail|crash|kill|cancel|exception and error_type.
//
// OpenFn sends no OTLP of its own. This host forwards every one of those
// messages, under OpenFn's own names, as an OTLP log record (`event.name`),
// and each run as a `run` span with a `step` span per step, through the
// OpenTelemetry JS SDK: what an OpenFn operator adds to their worker so that
// workerwatch (presets/openfn) understands it.
//
// Environment (ws-worker's names where ws-worker has the setting):
//   WORKER_NAME (or DEPLOYED_POD_NAME)  required: the worker's stable name
//   WORKER_LIGHTNING_SERVICE_URL        Lightning (stand-in) URL, default http://127.0.0.1:4000
//   WORKER_CAPACITY                     runs at once (5)
//   WORKER_MAX_RUN_MEMORY_MB            the run's heap limit (500)
//   WORKER_MAX_RUN_DURATION_SECONDS     the run's time limit (300)
//   WORKER_CLAIM_TIMEOUT_SECONDS        how long a claim waits for its reply (3600)
//   WORKER_BACKOFF                      claim backoff min/max in seconds (1/10)
//   WORKER_QUEUES                       queues to claim from, comma separated (*)
//   WORKER_REPO_DIR                     the engine's adaptor repo (a temp dir)
//   OTEL_EXPORTER_OTLP_ENDPOINT         default http://127.0.0.1:4318
// Faults, to show what workerwatch sees (off by default):
//   RETAIN_FINAL_STATES=1               keep every run's final state in the main
//                                       process: its heap grows with each run (kit #888)
//   SIGUSR2                             blocks the main event loop for HANG_SECONDS (30),
//                                       as a synchronous parse of a huge dataclip does

import crypto from 'node:crypto';
import os from 'node:os';
import path from 'node:path';
import createEngine from '@openfn/engine-multi';
import createLogger from '@openfn/logger';
import { trace, context, metrics, SpanStatusCode, ValueType } from '@opentelemetry/api';
import { logs, SeverityNumber } from '@opentelemetry/api-logs';
import { startTelemetry, stopTelemetry } from './telemetry.js';

function fail(msg) {
  process.stderr.write(`openfn-worker: ${msg}\n`);
  process.exit(2);
}

function intFromEnv(name, def, min) {
  const raw = process.env[name];
  if (raw === undefined || raw === '') return def;
  const v = Number(raw);
  if (!Number.isInteger(v) || v < min) fail(`${name} must be an integer >= ${min}, got ${JSON.stringify(raw)}`);
  return v;
}

const NAME = (process.env.WORKER_NAME || process.env.DEPLOYED_POD_NAME || '').trim();
if (!NAME) fail('WORKER_NAME (or DEPLOYED_POD_NAME) is required: the name Lightning and workerwatch know this worker by');
const LIGHTNING = (process.env.WORKER_LIGHTNING_SERVICE_URL || 'http://127.0.0.1:4000').replace(/\/$/, '');
const CAPACITY = intFromEnv('WORKER_CAPACITY', 5, 1);
const RUN_MEMORY_MB = intFromEnv('WORKER_MAX_RUN_MEMORY_MB', 500, 16);
const RUN_TIMEOUT_S = intFromEnv('WORKER_MAX_RUN_DURATION_SECONDS', 300, 1);
const CLAIM_TIMEOUT_S = intFromEnv('WORKER_CLAIM_TIMEOUT_SECONDS', 3600, 1);
const HANG_S = intFromEnv('HANG_SECONDS', 30, 1);
const [BACKOFF_MIN_MS, BACKOFF_MAX_MS] = (process.env.WORKER_BACKOFF || '1/10').split('/').map((s) => Number(s) * 1000);
if (!(BACKOFF_MIN_MS > 0 && BACKOFF_MAX_MS >= BACKOFF_MIN_MS)) fail(`WORKER_BACKOFF must be min/max seconds, got ${process.env.WORKER_BACKOFF}`);
const QUEUES = (process.env.WORKER_QUEUES || '*').split(',').map((q) => q.trim()).filter(Boolean);
const REPO_DIR = process.env.WORKER_REPO_DIR || path.join(os.tmpdir(), `openfn-worker-repo-${process.getuid?.() ?? 0}`);
const RETAIN = process.env.RETAIN_FINAL_STATES === '1';

// Identity: the worker's name on the resource, under OpenFn's own key.
const sdk = startTelemetry({ resource: { 'service.name': 'openfn-worker', worker_name: NAME } });
const tracer = trace.getTracer('openfn-worker');
const otelLogger = logs.getLogger('openfn-worker');

function log(msg) {
  process.stdout.write(`${new Date().toISOString()} [${NAME}] ${msg}\n`);
}

// emit forwards one ws-worker message as a log record named after it,
// correlated with the run's span.
function emit(eventName, attributes, span, severityNumber = SeverityNumber.INFO) {
  otelLogger.emit({
    eventName,
    severityNumber,
    severityText: severityNumber >= SeverityNumber.WARN ? 'WARN' : 'INFO',
    body: `${eventName} ${attributes.run_id}`,
    attributes,
    context: span ? trace.setSpan(context.active(), span) : context.active(),
  });
}

const runs = new Map(); // run id -> run context

// The runs the worker holds (ws-worker: its workloops' activeRuns), as a
// gauge every second: OpenFn has no name for it, so it is the convention's
// (docs/conventions.md). workerwatch trusts it to let go of runs whose end
// never arrived (a collector outage): without it they stay held.
metrics
  .getMeter('openfn-worker')
  .createObservableGauge('workerwatch.worker.runs.active', {
    unit: '{run}',
    description: 'Runs the worker holds now.',
    valueType: ValueType.INT,
  })
  .addCallback((r) => r.observe(runs.size));
const retained = []; // RETAIN_FINAL_STATES: the leak
let pendingClaims = 0;
let stopping = false;
let wake = () => {};

// ---- Lightning: the worker queue channel and the run channels ----

async function lightning(method, pathname, body, timeoutMs = 30000) {
  const res = await fetch(`${LIGHTNING}${pathname}`, {
    method,
    headers: body ? { 'content-type': 'application/json' } : {},
    body: body ? JSON.stringify(body) : undefined,
    signal: AbortSignal.timeout(timeoutMs),
  });
  if (!res.ok) throw new Error(`${method} ${pathname}: HTTP ${res.status} ${await res.text()}`);
  return res.json();
}

// claim (ws-worker api/claim.ts): ask for `demand` runs; the reply names them.
async function claim() {
  pendingClaims += 1;
  try {
    const { runs: claimed } = await lightning('POST', '/claim', { demand: 1, worker_name: NAME, queues: QUEUES }, CLAIM_TIMEOUT_S * 1000);
    for (const r of claimed) {
      emit('claim', { run_id: r.id, worker_name: NAME, demand: 1, capacity: CAPACITY });
      execute(r);
    }
    return claimed.length;
  } finally {
    pendingClaims -= 1;
  }
}

// The workloop (ws-worker api/workloop.ts): claim while there is capacity,
// back off while Lightning has nothing or cannot be reached.
async function workloop() {
  let backoff = BACKOFF_MIN_MS;
  while (!stopping) {
    if (runs.size + pendingClaims >= CAPACITY) {
      await new Promise((resolve) => { wake = resolve; });
      continue;
    }
    let got = 0;
    try {
      got = await claim();
    } catch (e) {
      log(`claim failed: ${e.name === 'TimeoutError' ? `TIMEOUT on claim after ${CLAIM_TIMEOUT_S}s. Runs may be lost.` : e.message}`);
    }
    if (got) {
      backoff = BACKOFF_MIN_MS;
    } else {
      await new Promise((resolve) => setTimeout(resolve, backoff));
      backoff = Math.min(backoff * 2, BACKOFF_MAX_MS);
    }
  }
}

// ---- one run (ws-worker server.ts app.execute, api/execute.ts, events/*) ----

async function execute({ id, token }) {
  const q = `?token=${encodeURIComponent(token)}`;
  const ctx = { id, token, q, span: null, step: null, reasons: {}, leaves: [], jobs: [], chain: Promise.resolve() };
  runs.set(id, ctx);
  try {
    // Joining the run channel and fetch:plan.
    const run = await lightning('GET', `/run/${encodeURIComponent(id)}${q}`);
    ctx.jobs = run.jobs.map((j) => j.id);
    // convert-lightning-plan.ts: jobs become steps; run options become engine options.
    const plan = {
      id,
      workflow: { steps: run.jobs.map((j) => ({ id: j.id, name: j.name, expression: j.body })) },
      options: {},
    };
    const opts = {
      runTimeoutMs: run.options?.run_timeout_ms ?? RUN_TIMEOUT_S * 1000,
      memoryLimitMb: run.options?.run_memory_limit_mb ?? RUN_MEMORY_MB,
    };
    engine.listen(id, {
      'workflow-start': (e) => onRunStart(ctx, e),
      'job-start': (e) => onStepStart(ctx, e),
      'job-complete': (e) => onStepComplete(ctx, e),
      'job-error': (e) => onJobError(ctx, e),
      'workflow-complete': (e) => onRunComplete(ctx, e),
      'workflow-error': (e) => onRunError(ctx, e),
    });
    ctx.handedAt = Date.now();
    engine.execute(plan, { data: {} }, opts);
  } catch (e) {
    // As in ws-worker: a run that cannot be joined is dropped, and Lightning
    // later marks it lost.
    log(`Unexpected error executing ${id}: ${e.message}`);
    finish(ctx);
  }
}

// send pushes one message on the run channel, in order, and forwards it as OTLP.
function send(ctx, eventName, payload, severity) {
  emit(eventName, { run_id: ctx.id, worker_name: NAME, ...flatten(payload) }, ctx.span, severity);
  ctx.chain = ctx.chain.then(() => push(ctx, eventName, payload));
}

// push delivers one message to Lightning, retrying as ws-worker does on a
// timeout (util/send-event.ts: timeoutRetryCount): a message it cannot
// deliver loses the run, which Lightning then marks lost.
async function push(ctx, eventName, payload) {
  for (let attempt = 1; ; attempt += 1) {
    try {
      return await lightning('POST', `/run/${encodeURIComponent(ctx.id)}/${eventName}${ctx.q}`, payload);
    } catch (e) {
      if (attempt >= 10) {
        log(`${ctx.id}: failed to send ${eventName}; this run will be lost: ${e.message}`);
        return undefined;
      }
      await new Promise((resolve) => setTimeout(resolve, 1000));
    }
  }
}

// flatten keeps the scalar fields of a payload, nested objects as a.b keys
// (step:complete's mem.job, mem.system).
function flatten(obj, prefix = '', out = {}) {
  for (const [k, v] of Object.entries(obj)) {
    if (v === null || v === undefined) continue;
    if (typeof v === 'object') flatten(v, `${prefix}${k}.`, out);
    else out[`${prefix}${k}`] = v;
  }
  return out;
}

function onRunStart(ctx) {
  ctx.span = tracer.startSpan('run', { attributes: { run_id: ctx.id, worker_name: NAME } });
  send(ctx, 'run:start', {});
}

function onStepStart(ctx, e) {
  ctx.step = { step_id: crypto.randomUUID(), job_id: e.jobId };
  ctx.step.span = tracer.startSpan('step', { attributes: { run_id: ctx.id, job_id: e.jobId, step_id: ctx.step.step_id } },
    trace.setSpan(context.active(), ctx.span));
  send(ctx, 'step:start', { step_id: ctx.step.step_id, job_id: e.jobId });
}

// api/reasons.ts calculateJobExitReason.
function jobExitReason(jobId, state, error) {
  if (error) {
    return { reason: error.severity ?? 'crash', error_type: error.subtype || error.type || error.name || null, error_message: error.message ?? null };
  }
  const err = state?.errors?.[jobId];
  if (err) return { reason: 'fail', error_type: err.name ?? null, error_message: err.message ?? null };
  return { reason: 'success', error_type: null, error_message: null };
}

function onStepComplete(ctx, e, error) {
  const step = ctx.step ?? { step_id: crypto.randomUUID(), job_id: e.jobId };
  ctx.step = null;
  const reason = jobExitReason(step.job_id, e.state, error);
  ctx.reasons[step.job_id] = reason;
  if (!e.next?.length) ctx.leaves.push(step.job_id);
  send(ctx, 'step:complete', {
    step_id: step.step_id,
    job_id: step.job_id,
    mem: e.mem,
    duration: e.duration,
    thread_id: e.threadId,
    ...reason,
  }, reason.reason === 'success' ? SeverityNumber.INFO : SeverityNumber.WARN);
  endSpan(step.span, reason);
}

// api/execute.ts onJobError: a failure written to state is a step that
// completed with reason fail; anything else completes it with the error.
function onJobError(ctx, e) {
  const jobId = e.jobId ?? ctx.step?.job_id;
  if (e.state?.errors?.[jobId]?.message === e.error?.message) onStepComplete(ctx, e);
  else onStepComplete(ctx, e, e.error);
}

// events/run-complete.ts: the run's reason is a fail of a leaf step, else success.
function onRunComplete(ctx, e) {
  const fail = ctx.leaves.map((j) => ctx.reasons[j]).find((r) => r?.reason === 'fail');
  const reason = fail ?? { reason: 'success', error_type: null, error_message: null };
  if (RETAIN) retained.push(e.state);
  complete(ctx, reason);
}

// events/run-error.ts: the engine's error (OOMError, TimeoutError, ExitError,
// ...) is the run's reason; a step still running completes with it.
function onRunError(ctx, e) {
  const reason = jobExitReason('', { data: {} }, e);
  if (ctx.step) onStepComplete(ctx, { jobId: ctx.step.job_id }, e);
  complete(ctx, reason);
}

function complete(ctx, reason) {
  if (ctx.done) return;
  ctx.done = true;
  // A run the engine's time limit killed before its thread started has no
  // run:start: its span covers the time the engine held it.
  ctx.span ??= tracer.startSpan('run', { attributes: { run_id: ctx.id, worker_name: NAME }, startTime: ctx.handedAt });
  send(ctx, 'run:complete', reason, reason.reason === 'success' || reason.reason === 'fail' ? SeverityNumber.INFO : SeverityNumber.WARN);
  endSpan(ctx.span, reason);
  log(`${ctx.id}: ${reason.reason}${reason.error_type ? ` (${reason.error_type})` : ''}`);
  ctx.chain.finally(() => finish(ctx));
}

function endSpan(span, reason) {
  if (!span) return;
  span.setAttributes(flatten({ reason: reason.reason, error_type: reason.error_type }));
  if (reason.reason !== 'success') span.setStatus({ code: SpanStatusCode.ERROR, message: `${reason.error_type ?? reason.reason}: ${reason.error_message ?? ''}` });
  span.end();
}

function finish(ctx) {
  runs.delete(ctx.id);
  wake();
}

// ---- start and stop ----

const engineLogger = createLogger('RTE', { level: process.env.WORKER_LOG_LEVEL || 'info' });
const engine = await createEngine({
  logger: engineLogger,
  repoDir: REPO_DIR,
  maxWorkers: CAPACITY,
  memoryLimitMb: RUN_MEMORY_MB,
  runTimeoutMs: RUN_TIMEOUT_S * 1000,
});

process.on('SIGUSR2', () => {
  log(`SIGUSR2: blocking the event loop for ${HANG_S}s`);
  const until = Date.now() + HANG_S * 1000;
  while (Date.now() < until) { /* the main thread does nothing else */ }
  log('event loop unblocked');
});

async function shutdown(signal) {
  if (stopping) return;
  stopping = true;
  wake();
  log(`${signal}: stopping (${runs.size} runs in flight)`);
  // Like ws-worker's destroy: let runs in flight finish, here for at most 5 s.
  const deadline = Date.now() + 5000;
  while (runs.size && Date.now() < deadline) await new Promise((r) => setTimeout(r, 100));
  await engine.destroy(true);
  await stopTelemetry(sdk, 'openfn-worker');
  process.exit(0);
}
process.on('SIGTERM', () => shutdown('SIGTERM'));
process.on('SIGINT', () => shutdown('SIGINT'));

log(`started: engine-multi ${engine.version}, capacity ${CAPACITY}, run limits ${RUN_MEMORY_MB} MB / ${RUN_TIMEOUT_S} s, queues ${QUEUES.join(',')}, Lightning ${LIGHTNING}, OTLP ${process.env.OTEL_EXPORTER_OTLP_ENDPOINT}${RETAIN ? ', RETAIN_FINAL_STATES' : ''}`);
workloop();
