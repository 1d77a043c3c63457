'use strict';
const { test } = require('node:test');
const assert = require('node:assert/strict');
const fs = require('node:fs');
const path = require('node:path');
const { spawn } = require('node:child_process');
const { startSink } = require('./otlp-sink');

const WORKER = path.join(__dirname, '..', 'worker.js');
const CHILD_MARK = 'child/runner.js';

// The environment for a worker under test: no OTEL_* settings leak in from outside.
function workerEnv(extra) {
  const env = {};
  for (const [k, v] of Object.entries(process.env)) if (!k.startsWith('OTEL_')) env[k] = v;
  return { ...env, ...extra };
}

function cmdline(pid) {
  try {
    return fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').filter(Boolean);
  } catch {
    return null; // gone
  }
}

function ppid(pid) {
  try {
    const m = /^PPid:\s+(\d+)/m.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'));
    return m ? Number(m[1]) : null;
  } catch {
    return null;
  }
}

// Processes whose command line contains child/runner.js and whose parent is `parent`.
function runnerChildrenOf(parent) {
  const out = [];
  for (const name of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    const pid = Number(name);
    const argv = cmdline(pid);
    if (argv && argv.join(' ').includes(CHILD_MARK) && ppid(pid) === parent) out.push({ pid, argv });
  }
  return out;
}

function isRunnerAlive(pid) {
  const argv = cmdline(pid);
  return argv !== null && argv.join(' ').includes(CHILD_MARK);
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function waitFor(what, fn, timeoutMs, onTick) {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    if (onTick) onTick();
    const v = fn();
    if (v) return v;
    if (Date.now() > deadline) throw new Error(`timed out after ${timeoutMs} ms waiting for ${what}`);
    await sleep(50);
  }
}

function startWorker(env) {
  const proc = spawn(process.execPath, [WORKER], { env, stdio: ['ignore', 'pipe', 'pipe'] });
  proc.output = '';
  proc.stdout.on('data', (d) => { proc.output += d; });
  proc.stderr.on('data', (d) => { proc.output += d; });
  proc.exited = new Promise((resolve) => proc.on('exit', (code, signal) => resolve({ code, signal })));
  return proc;
}

test('worker.js emits run events, run spans and metrics, forks child/runner.js, and shuts down cleanly', async (t) => {
  const sink = await startSink();
  t.after(() => sink.close());
  const workerName = `node-test-worker-${process.pid}`;
  const proc = startWorker(workerEnv({
    WORKER_NAME: workerName,
    OTEL_EXPORTER_OTLP_ENDPOINT: sink.url,
    OTEL_EXPORTER_OTLP_PROTOCOL: 'http/json',
    RUN_INTERVAL_MS: '200',
    RUN_DURATION_MS: '800',
    RUN_MEMORY_MB: '10',
  }));
  t.after(() => { if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGKILL'); });

  const seenChildren = new Map();
  const watchChildren = () => {
    for (const c of runnerChildrenOf(proc.pid)) seenChildren.set(c.pid, c.argv);
  };

  try {
    // A finished run, as a log record with event.name, from this worker.
    const finished = await waitFor('a workerwatch.run.finished log record', () => sink.logs.find((l) =>
      l.eventName === 'workerwatch.run.finished' && l.resource['cicd.worker.id'] === workerName), 20000, watchChildren);
    const runId = finished.attributes['cicd.pipeline.run.id'];
    assert.match(runId, /^node-run-\d+$/);
    assert.equal(finished.attributes['cicd.pipeline.result'], 'success');
    assert.equal(finished.resource['service.name'], 'node-worker');

    // Its claimed and started events, and a heartbeat.
    const ofRun = (name) => sink.logs.find((l) => l.eventName === name && l.attributes['cicd.pipeline.run.id'] === runId);
    await waitFor('claimed + started events of the run', () => ofRun('workerwatch.run.claimed') && ofRun('workerwatch.run.started'), 5000, watchChildren);
    assert.equal(ofRun('workerwatch.run.claimed').attributes['workerwatch.worker.capacity'], 2);
    await waitFor('a heartbeat', () => sink.logs.find((l) => l.eventName === 'workerwatch.worker.heartbeat'
      && l.resource['cicd.worker.id'] === workerName), 5000, watchChildren);

    // The run span of the same run.
    const span = await waitFor(`a span "run" for ${runId}`, () => sink.spans.find((s) =>
      s.name === 'run' && s.attributes['cicd.pipeline.run.id'] === runId), 10000, watchChildren);
    assert.equal(span.attributes['cicd.worker.id'], workerName);
    assert.equal(span.attributes['cicd.pipeline.result'], 'success');
    assert.equal(span.resource['cicd.worker.id'], workerName);
    assert.equal(span.resource['service.name'], 'node-worker');

    // Both gauges.
    const metric = (name) => sink.metrics.find((m) => m.name === name && m.resource['cicd.worker.id'] === workerName);
    await waitFor('capacity and runs.active gauges', () => metric('workerwatch.worker.capacity') && metric('workerwatch.worker.runs.active'), 5000, watchChildren);
    assert.equal(metric('workerwatch.worker.capacity').value, 2);
    assert.equal(metric('workerwatch.worker.capacity').unit, '{run}');
    assert.ok(metric('workerwatch.worker.capacity').gauge, 'capacity is a gauge');

    // A child process with child/runner.js on its command line existed under the worker.
    await waitFor('a child/runner.js process', () => seenChildren.size > 0, 5000, watchChildren);
    assert.deepEqual(sink.errors, []);
  } catch (err) {
    err.message += `\n--- worker output ---\n${proc.output}`;
    throw err;
  }

  // Clean shutdown: exit 0, and no child outlives it.
  watchChildren();
  proc.kill('SIGTERM');
  const { code, signal } = await proc.exited;
  assert.equal(code, 0, `worker exit code (signal ${signal})\n${proc.output}`);
  for (const pid of seenChildren.keys()) {
    await waitFor(`child ${pid} to be gone`, () => !isRunnerAlive(pid), 2000);
  }

  // The shutdown flushed everything: every claimed run has ended, as finished or as
  // killed with reason shutdown, in the log records and in its run span.
  const mine = sink.logs.filter((l) => l.resource['cicd.worker.id'] === workerName);
  const claimed = mine.filter((l) => l.eventName === 'workerwatch.run.claimed').map((l) => l.attributes['cicd.pipeline.run.id']);
  for (const id of claimed) {
    const end = mine.find((l) => ['workerwatch.run.finished', 'workerwatch.run.killed'].includes(l.eventName)
      && l.attributes['cicd.pipeline.run.id'] === id);
    assert.ok(end, `run ${id} was claimed but never finished or killed\n${proc.output}`);
    if (end.eventName === 'workerwatch.run.killed') {
      assert.equal(end.attributes['workerwatch.kill.reason'], 'shutdown');
    } else {
      assert.equal(end.attributes['cicd.pipeline.result'], 'success');
    }
    assert.ok(sink.spans.find((s) => s.name === 'run' && s.attributes['cicd.pipeline.run.id'] === id), `run span of ${id}`);
  }
});

test('children exit when the main process is killed (IPC channel disconnect)', async (t) => {
  const sink = await startSink();
  t.after(() => sink.close());
  const proc = startWorker(workerEnv({
    WORKER_NAME: `node-test-kill-${process.pid}`,
    OTEL_EXPORTER_OTLP_ENDPOINT: sink.url,
    RUN_INTERVAL_MS: '100',
    RUN_DURATION_MS: '60000',
    RUN_MEMORY_MB: '1',
  }));
  t.after(() => { if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGKILL'); });
  const children = await waitFor('two child/runner.js processes', () => {
    const c = runnerChildrenOf(proc.pid);
    return c.length >= 2 ? c : null;
  }, 10000);
  proc.kill('SIGKILL');
  await proc.exited;
  for (const { pid } of children) {
    await waitFor(`orphaned child ${pid} to exit`, () => !isRunnerAlive(pid), 3000);
  }
});

test('worker.js refuses to start without WORKER_NAME', async () => {
  const env = workerEnv({});
  delete env.WORKER_NAME;
  const proc = startWorker(env);
  const { code } = await proc.exited;
  assert.equal(code, 2);
  assert.match(proc.output, /WORKER_NAME is required/);
});
