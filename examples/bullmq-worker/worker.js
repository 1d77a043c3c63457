'use strict';
// A BullMQ worker as BullMQ users write one: a Worker with a SANDBOXED processor
// (processor.js, run by BullMQ in forked child processes), BullMQ's own OpenTelemetry
// (bullmq-otel: traces and metrics), and three small log records BullMQ does not send
// (README.md, "What the worker sends"): all optional, off with OTEL_SDK_DISABLED=true. The
// BullMQ preset needs none of them (its bullmq receiver reads BullMQ's state in Redis).
//
// Environment (README.md has the full table):
//   WORKER_NAME          required: the worker's id, and BullMQ's worker `name` (stored on
//                        every job it takes as processedBy, sent as bullmq.worker.name)
//   BULLMQ_NAME          BullMQ's worker name when it differs from WORKER_NAME (to try
//                        what workerwatch says when the two ids do not meet)
//   REDIS_URL            default redis://127.0.0.1:6379
//   QUEUE                default jobs
//   CONCURRENCY          jobs at once (one child process each), default 2
//   LOCK_DURATION_MS, STALLED_INTERVAL_MS, MAX_STALLED_COUNT   BullMQ's, defaults 30000, 30000, 1
//   JOB_MAX_OLD_SPACE_MB the children's V8 heap limit, default 256
//   JOB_TIMEOUT_MS       the children's time limit (processor.js), default 30000
// Faults, for trying workerwatch (all off by default):
//   LEAK_MB_PER_JOB      the main process keeps this many MiB per completed job
//   DROP_CLAIMS          take this many jobs from the queue and never start them
//   DROP_LOCK_MS         the lock those jobs are taken with (default 120000)
//   PAUSED               1: pause the Worker once it is ready (Worker.pause): alive and
//                        connected, it takes no job (a worker paused and forgotten)
//   a job with data {hangWorker: WORKER_NAME, hangMainMs: N} blocks this worker's main
//   event loop for N ms, one second after it started the job

const path = require('node:path');
const { startTelemetry, intFromEnv, redisConnection } = require('./telemetry');

const PROG = 'bullmq-worker';
const WORKER_NAME = (process.env.WORKER_NAME || '').trim();
if (!WORKER_NAME) {
  process.stderr.write(`${PROG}: WORKER_NAME is required (BullMQ's worker name, e.g. WORKER_NAME=worker-a node worker.js)\n`);
  process.exit(2);
}
const BULLMQ_NAME = (process.env.BULLMQ_NAME || '').trim() || WORKER_NAME;
const QUEUE = process.env.QUEUE || 'jobs';
const CONCURRENCY = intFromEnv(PROG, 'CONCURRENCY', 2, 1);
const LOCK_DURATION_MS = intFromEnv(PROG, 'LOCK_DURATION_MS', 30000, 1);
const STALLED_INTERVAL_MS = intFromEnv(PROG, 'STALLED_INTERVAL_MS', 30000, 1);
const MAX_STALLED_COUNT = intFromEnv(PROG, 'MAX_STALLED_COUNT', 1, 0);
const JOB_MAX_OLD_SPACE_MB = intFromEnv(PROG, 'JOB_MAX_OLD_SPACE_MB', 256, 16);
const LEAK_MB_PER_JOB = intFromEnv(PROG, 'LEAK_MB_PER_JOB', 0);
const DROP_CLAIMS = intFromEnv(PROG, 'DROP_CLAIMS', 0);
const DROP_LOCK_MS = intFromEnv(PROG, 'DROP_LOCK_MS', 120000, 1);
const PAUSED = intFromEnv(PROG, 'PAUSED', 0);
intFromEnv(PROG, 'JOB_TIMEOUT_MS', 30000, 1); // read by processor.js in the children
const connection = redisConnection(PROG, { worker: true });

// Telemetry first: bullmq-otel uses the global providers it registers.
const sdk = startTelemetry({ serviceName: PROG, instanceId: BULLMQ_NAME });

const { logs, SeverityNumber } = require('@opentelemetry/api-logs');
const { Worker } = require('bullmq');
const { BullMQOtel } = require('bullmq-otel');

const telemetry = new BullMQOtel({ tracerName: 'bullmq', meterName: 'bullmq', enableMetrics: true });
const logger = logs.getLogger(PROG);

const worker = new Worker(QUEUE, path.join(__dirname, 'processor.js'), {
  name: BULLMQ_NAME,
  connection,
  concurrency: CONCURRENCY,
  lockDuration: LOCK_DURATION_MS,
  stalledInterval: STALLED_INTERVAL_MS,
  maxStalledCount: MAX_STALLED_COUNT,
  // Each child: node --max-old-space-size=N .../bullmq/dist/cjs/classes/main.js
  workerForkOptions: { execArgv: [`--max-old-space-size=${JOB_MAX_OLD_SPACE_MB}`] },
  telemetry,
});

// The three optional records BullMQ does not send (not needed by the preset). bullmq-otel's job span ("process <queue>")
// is exported only when the job ends, so nothing says a job started while it
// runs; and how the job ended (completed, failed and why) is only in span events.
// The records use BullMQ's own attribute names.
function jobRecord(eventName, job, attrs, severityNumber = SeverityNumber.INFO) {
  logger.emit({
    eventName,
    severityNumber,
    body: `${eventName} ${job.id}`,
    attributes: {
      'event.name': eventName,
      'bullmq.queue.name': QUEUE,
      'bullmq.worker.name': BULLMQ_NAME,
      'bullmq.worker.id': worker.id,
      'bullmq.job.id': String(job.id),
      'bullmq.job.name': job.name,
      'bullmq.job.attempts.made': job.attemptsMade,
      ...attrs,
    },
  });
}

const hung = new Set();
worker.on('active', (job) => {
  jobRecord('bullmq.job.active', job, {});
  const d = job.data || {};
  if (d.hangWorker === BULLMQ_NAME && d.hangMainMs > 0 && !hung.has(job.id)) {
    hung.add(job.id);
    // A main-process handler doing synchronous work while the job runs in its
    // child: the event loop cannot renew the job's lock.
    setTimeout(() => {
      process.stdout.write(`${PROG}: blocking the main event loop for ${d.hangMainMs} ms (job ${job.id})\n`);
      const end = Date.now() + d.hangMainMs;
      while (Date.now() < end) { /* busy */ }
      process.stdout.write(`${PROG}: main event loop free again (job ${job.id})\n`);
    }, 1000);
  }
});

worker.on('failed', (job, err) => {
  if (!job) return;
  jobRecord('bullmq.job.failed', job, {
    'bullmq.job.state': 'failed',
    'bullmq.job.failed.reason': (err && err.message) || String(err),
  }, SeverityNumber.WARN);
  process.stdout.write(`${PROG}: job ${job.id} failed: ${err && err.message}\n`);
});

const leaked = [];
worker.on('completed', (job) => {
  jobRecord('bullmq.job.completed', job, { 'bullmq.job.state': 'completed' });
  if (LEAK_MB_PER_JOB > 0) leaked.push(Buffer.alloc(LEAK_MB_PER_JOB << 20, 1));
});
worker.on('stalled', (jobId) => process.stdout.write(`${PROG}: found job ${jobId} stalled, moved back to wait\n`));
worker.on('error', (err) => process.stderr.write(`${PROG}: ${err && err.message}\n`));

// DROP_CLAIMS: a second Worker of the same name, without a processor, takes jobs with
// BullMQ's manual-fetch API (Worker.getNextJob) and never starts them: Redis says
// this worker holds them (active, processedBy = WORKER_NAME) until their lock lapses
// and a stalled check gives them to another worker.
async function dropClaims() {
  const dropper = new Worker(QUEUE, null, {
    name: BULLMQ_NAME, connection, lockDuration: DROP_LOCK_MS, autorun: false, telemetry,
  });
  let n = 0;
  while (n < DROP_CLAIMS && !closing) {
    const job = await dropper.getNextJob(`${dropper.id}:drop:${n}`, { block: false });
    if (job) {
      n++;
      process.stdout.write(`${PROG}: dropped claim ${job.id}\n`);
    } else {
      await new Promise((r) => setTimeout(r, 200));
    }
  }
  return dropper;
}

let closing = false;
let dropperP = null;
worker.on('ready', () => {
  process.stdout.write(`${PROG}: ${BULLMQ_NAME} ready (pid ${process.pid}, queue ${QUEUE}, concurrency ${CONCURRENCY})\n`);
  if (DROP_CLAIMS > 0) dropperP = dropClaims().catch((err) => process.stderr.write(`${PROG}: drop: ${err.message}\n`));
  if (PAUSED > 0) {
    worker.pause().then(() => process.stdout.write(`${PROG}: paused: taking no jobs\n`),
      (err) => process.stderr.write(`${PROG}: pause: ${err.message}\n`));
  }
});

async function shutdown(signal) {
  if (closing) return;
  closing = true;
  process.stdout.write(`${PROG}: ${signal}: closing\n`);
  const force = setTimeout(() => worker.close(true), 5000);
  try {
    await worker.close();
    const dropper = dropperP && (await dropperP);
    if (dropper) await dropper.close(true);
  } catch (err) {
    process.stderr.write(`${PROG}: close: ${err.message}\n`);
  }
  clearTimeout(force);
  await Promise.race([sdk.shutdown(), new Promise((r) => setTimeout(r, 5000))]);
  process.exit(0);
}
process.on('SIGTERM', () => shutdown('SIGTERM'));
process.on('SIGINT', () => shutdown('SIGINT'));
