'use strict';
// Adds jobs to the queue, as an application would (Queue.add).
//
//   node producer.js add [--count N] [--name NAME] [--attempts N] [DATA_JSON]
//       adds N jobs (default 1) with DATA_JSON as their data (processor.js reads
//       durationMs, memoryMb, heapMb, throw; worker.js hangWorker, hangMainMs) and
//       prints their ids, one per line
//   node producer.js steady --every-ms MS [--name NAME] [DATA_JSON]
//       adds one job every MS until SIGTERM/SIGINT, printing each id
//
// Environment: REDIS_URL (default redis://127.0.0.1:6379), QUEUE (default jobs).
// Completed and failed jobs are kept (BullMQ's default): they are the record of
// what ran where.

const { redisConnection } = require('./telemetry');
const { Queue } = require('bullmq');

const PROG = 'bullmq-producer';
const QUEUE = process.env.QUEUE || 'jobs';

function usage(msg) {
  process.stderr.write(`${PROG}: ${msg}\nusage: node producer.js add [--count N] [--name NAME] [--attempts N] [DATA_JSON]\n       node producer.js steady --every-ms MS [--name NAME] [DATA_JSON]\n`);
  process.exit(2);
}

function parse(argv) {
  const [cmd, ...rest] = argv;
  if (cmd !== 'add' && cmd !== 'steady') usage(`unknown command ${JSON.stringify(cmd)}`);
  const o = { cmd, count: 1, name: 'job', attempts: 1, everyMs: 0, data: {} };
  for (let i = 0; i < rest.length; i++) {
    const a = rest[i];
    const num = (flag) => {
      const v = Number(rest[++i]);
      if (!Number.isInteger(v) || v < 1) usage(`${flag} needs an integer >= 1, got ${JSON.stringify(rest[i])}`);
      return v;
    };
    if (a === '--count') o.count = num(a);
    else if (a === '--attempts') o.attempts = num(a);
    else if (a === '--every-ms') o.everyMs = num(a);
    else if (a === '--name') o.name = rest[++i] || usage('--name needs a value');
    else if (a.startsWith('--')) usage(`unknown flag ${a}`);
    else {
      try {
        o.data = JSON.parse(a);
      } catch (err) {
        usage(`DATA_JSON is not JSON: ${err.message}`);
      }
    }
  }
  if (cmd === 'steady' && !o.everyMs) usage('steady needs --every-ms');
  return o;
}

async function main() {
  const o = parse(process.argv.slice(2));
  const queue = new Queue(QUEUE, { connection: redisConnection(PROG, { worker: false }) });
  const add = async () => {
    const job = await queue.add(o.name, o.data, { attempts: o.attempts });
    process.stdout.write(`${job.id}\n`);
  };
  if (o.cmd === 'add') {
    for (let i = 0; i < o.count; i++) await add();
    await queue.close();
    return;
  }
  let stop = false;
  const done = new Promise((resolve) => {
    const end = () => { stop = true; resolve(); };
    process.on('SIGTERM', end);
    process.on('SIGINT', end);
  });
  while (!stop) {
    await add();
    await Promise.race([done, new Promise((r) => setTimeout(r, o.everyMs))]);
  }
  await queue.close();
}

main().catch((err) => {
  process.stderr.write(`${PROG}: ${err.message}\n`);
  process.exit(1);
});
