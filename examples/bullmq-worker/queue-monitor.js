'use strict';
// The queue side: what Redis (BullMQ's source of truth) says about the queue, sent
// every SNAPSHOT_INTERVAL_MS. This is the scheduler's view for workerwatch:
//
//  - BullMQ's own queue gauge, bullmq.queue.jobs {bullmq.queue.jobs.state}, through
//    Queue.recordJobCountsMetric() (bullmq-otel): how many jobs wait, are active, ...
//  - one log record per worker connected to Redis (Queue.getWorkers(): BullMQ names a
//    worker's blocking connection after it, and a dead worker's connection closes at
//    once), event.name bullmq.queue.active, with the ids of every job Redis lists as
//    active and processed by that worker (Queue.getActive(), grouped by job.processedBy,
//    BullMQ's name for the worker that took the job); an empty list for an idle worker.
//    A statement is therefore also a sign of the worker's life. Jobs still active under
//    a worker whose connection is gone are not stated: BullMQ's stalled check hands them
//    to another worker. BullMQ sends nothing like it: see README.md.
//
// A snapshot, not events: BullMQ's QueueEvents stream says a job became active but
// not who took it, and a reader that was down misses what happened meanwhile; a
// snapshot of the active list is complete every time and heals after any outage.
//
// Environment: REDIS_URL, QUEUE (default jobs), SNAPSHOT_INTERVAL_MS (default 5000),
// SNAPSHOT_MAX_JOBS (default 10000; a larger active list is not snapshotted, since a
// partial list would show held jobs as lost), OTEL_EXPORTER_OTLP_ENDPOINT.

const os = require('node:os');
const { startTelemetry, intFromEnv, redisConnection } = require('./telemetry');

const PROG = 'bullmq-queue';
const QUEUE = process.env.QUEUE || 'jobs';
const SNAPSHOT_INTERVAL_MS = intFromEnv(PROG, 'SNAPSHOT_INTERVAL_MS', 5000, 100);
const SNAPSHOT_MAX_JOBS = intFromEnv(PROG, 'SNAPSHOT_MAX_JOBS', 10000, 1);
const connection = redisConnection(PROG, { worker: false });

const sdk = startTelemetry({ serviceName: PROG, instanceId: os.hostname(), metricIntervalMs: 1000 });

const { logs, SeverityNumber } = require('@opentelemetry/api-logs');
const { Queue } = require('bullmq');
const { BullMQOtel } = require('bullmq-otel');

const logger = logs.getLogger(PROG);
const queue = new Queue(QUEUE, {
  connection,
  telemetry: new BullMQOtel({ tracerName: 'bullmq', meterName: 'bullmq', enableMetrics: true }),
});

// workerName extracts the worker name from a CLIENT LIST entry that
// Queue.getWorkers() returned: BullMQ names a named worker's blocking
// connection "<prefix>:<base64 queue>:w:<name>".
function workerName(client) {
  const raw = client.rawname || '';
  const i = raw.indexOf(':w:');
  return i < 0 ? '' : raw.slice(i + 3);
}

let unattributedWarned = false;
const orphanedWarned = new Set();
async function snapshot() {
  await queue.recordJobCountsMetric();
  const activeCount = await queue.getActiveCount();
  if (activeCount > SNAPSHOT_MAX_JOBS) {
    process.stderr.write(`${PROG}: ${activeCount} active jobs > SNAPSHOT_MAX_JOBS ${SNAPSHOT_MAX_JOBS}: no snapshot\n`);
    return;
  }
  const [jobs, clients] = await Promise.all([queue.getActive(), queue.getWorkers()]);
  const held = new Map();
  for (const c of clients) {
    const name = workerName(c);
    if (name) held.set(name, []);
  }
  let unattributed = 0;
  for (const job of jobs) {
    if (!job) continue; // removed between the list and the read
    if (!job.processedBy) {
      unattributed++;
    } else if (held.has(job.processedBy)) {
      held.get(job.processedBy).push(String(job.id));
    } else if (!orphanedWarned.has(job.processedBy)) {
      orphanedWarned.add(job.processedBy);
      process.stderr.write(`${PROG}: active jobs of ${job.processedBy}, which is not connected: not stated (BullMQ's stalled check will hand them on)\n`);
    }
  }
  if (unattributed > 0 && !unattributedWarned) {
    unattributedWarned = true;
    process.stderr.write(`${PROG}: ${unattributed} active jobs without processedBy: give every Worker a name\n`);
  }
  for (const [name, ids] of held) {
    ids.sort();
    logger.emit({
      eventName: 'bullmq.queue.active',
      severityNumber: SeverityNumber.INFO,
      body: `${name} holds ${ids.length} active jobs of ${QUEUE}`,
      attributes: {
        'event.name': 'bullmq.queue.active',
        'bullmq.queue.name': QUEUE,
        'bullmq.worker.name': name,
        'bullmq.job.ids': ids,
      },
    });
  }
  if (process.env.QUEUE_MONITOR_VERBOSE) {
    process.stdout.write(`${PROG}: ${JSON.stringify(Object.fromEntries(held))}\n`);
  }
}

let timer = null;
let closing = false;
async function loop() {
  try {
    await snapshot();
  } catch (err) {
    process.stderr.write(`${PROG}: snapshot: ${err.message}\n`);
  }
  if (!closing) timer = setTimeout(loop, SNAPSHOT_INTERVAL_MS);
}
queue.waitUntilReady().then(() => {
  process.stdout.write(`${PROG}: watching ${QUEUE} every ${SNAPSHOT_INTERVAL_MS} ms (pid ${process.pid})\n`);
  loop();
});

async function shutdown(signal) {
  if (closing) return;
  closing = true;
  clearTimeout(timer);
  process.stdout.write(`${PROG}: ${signal}: closing\n`);
  await queue.close().catch(() => {});
  await Promise.race([sdk.shutdown(), new Promise((r) => setTimeout(r, 5000))]);
  process.exit(0);
}
process.on('SIGTERM', () => shutdown('SIGTERM'));
process.on('SIGINT', () => shutdown('SIGINT'));
