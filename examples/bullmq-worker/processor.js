'use strict';
// The sandboxed processor: BullMQ runs this file in a child process it forks
// (node .../bullmq/dist/cjs/classes/main.js, one child per concurrent job, kept
// and reused while it stays healthy). What a job does comes from its data:
//
//   durationMs  how long the job runs (default 1000)
//   memoryMb    memory it allocates and touches (off-heap Buffers: real RSS)
//   heapMb      JavaScript heap it allocates (past the child's
//               --max-old-space-size, V8 aborts the child: a job over its
//               memory limit)
//   throw       an error message: the job throws it (a job that fails)
//   untilFile   a path: the job ends as soon as that file exists (checked
//               every 100 ms), at the latest after durationMs (to end a job
//               at a moment of one's choosing, e.g. while the collector is down)
//
// Time limit: BullMQ has no job timeout of its own. This is the pattern of
// BullMQ's documentation ("Timeout for sandboxed processors",
// docs.bullmq.io/patterns/timeout-for-sandboxed-processors): after
// JOB_TIMEOUT_MS the child exits with TTL_EXIT_CODE, BullMQ fails the job with
// "Unexpected exit code: 10 signal: null" and forks a fresh child for the next
// job. The child inherits the worker's environment (fork's default).

const fs = require('node:fs');

const TTL_EXIT_CODE = 10;
const JOB_TIMEOUT_MS = Number(process.env.JOB_TIMEOUT_MS || 30000);

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

function touchBuffers(mb) {
  const out = [];
  for (let i = 0; i < mb; i++) {
    out.push(Buffer.alloc(1 << 20, i & 0xff)); // alloc fills: every page touched
  }
  return out;
}

function fillHeap(mb) {
  const out = [];
  for (let i = 0; i < mb; i++) {
    out.push(new Array(1 << 17).fill(i + 0.5)); // 128 Ki doubles = 1 MiB of heap
  }
  return out;
}

module.exports = async function process_(job) {
  const data = job.data || {};
  let completed = false;
  const ttl = setTimeout(() => {
    if (!completed) process.exit(TTL_EXIT_CODE);
  }, JOB_TIMEOUT_MS);
  try {
    let held = touchBuffers(Math.max(0, Number(data.memoryMb) || 0));
    if (data.heapMb) held = held.concat(fillHeap(Number(data.heapMb)));
    const until = Date.now() + Number(data.durationMs ?? 1000);
    if (data.untilFile) {
      while (Date.now() < until && !fs.existsSync(String(data.untilFile))) await sleep(100);
    } else {
      await sleep(until - Date.now());
    }
    if (data.throw) throw new Error(String(data.throw));
    completed = true;
    return { pid: process.pid, heldMb: held.length };
  } finally {
    // This child is reused for the next job: never leave the timer behind.
    clearTimeout(ttl);
  }
};
