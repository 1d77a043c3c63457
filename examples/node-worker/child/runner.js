'use strict';
// The child process for one run (forked by ../worker.js, like OpenFn's
// engine-multi/dist/worker/child/runner.js). It allocates and touches RUN_MEMORY_MB of
// Buffers (real RSS), holds them for the run's duration, reports back over IPC and exits.
// It never outlives the main process: when the IPC channel disconnects (the parent
// exited or was killed) it exits at once.
//
// Arguments: --run-id <id> --memory-mb <n> --duration-ms <n>

function arg(name, def) {
  const i = process.argv.indexOf(`--${name}`);
  return i >= 0 && i + 1 < process.argv.length ? process.argv[i + 1] : def;
}

if (typeof process.send !== 'function') {
  process.stderr.write('child/runner.js must be forked by worker.js (it needs the IPC channel)\n');
  process.exit(2);
}

process.on('disconnect', () => process.exit(1));
process.on('SIGTERM', () => process.exit(143));

const runId = arg('run-id', 'unknown');
const memoryMb = Number(arg('memory-mb', '30'));
const durationMs = Number(arg('duration-ms', '1500'));

process.send({ type: 'started', runId, pid: process.pid });

const MB = 1024 * 1024;
const held = [];
for (let i = 0; i < memoryMb; i++) {
  // allocUnsafe + fill writes every page, so the memory is resident (RSS), not just reserved.
  const b = Buffer.allocUnsafe(MB);
  b.fill(i & 0xff);
  held.push(b);
}

setTimeout(() => {
  const rss = process.memoryUsage().rss;
  const sum = held.reduce((acc, b) => acc + b[b.length - 1], 0); // keep the buffers live
  process.send({ type: 'done', runId, result: 'success', rssBytes: rss, checksum: sum }, () => {
    process.exit(0);
  });
}, durationMs);
