// The host of the real engine against the Lightning stand-in, with an OTLP
// sink in place of the collector: every reason OpenFn reports, under OpenFn's
// names, from the real engine's real child processes.
import { test, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import net from 'node:net';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import sinkModule from '../../node-worker/test/otlp-sink.js';

const dir = path.dirname(path.dirname(fileURLToPath(import.meta.url)));
const started = [];
const sinks = [];
after(async () => {
  started.forEach((p) => p.exitCode === null && process.kill(-p.pid, 'SIGKILL'));
  await Promise.all(sinks.map((s) => s.close()));
});

function freePort() {
  return new Promise((resolve) => {
    const s = net.createServer().listen(0, '127.0.0.1', () => { const { port } = s.address(); s.close(() => resolve(port)); });
  });
}

function start(script, env) {
  const p = spawn(process.execPath, [path.join(dir, script)], {
    env: { PATH: process.env.PATH, HOME: process.env.HOME, ...env },
    stdio: ['ignore', 'pipe', 'pipe'],
    detached: true, // own process group: the test can stop the engine's children too
  });
  p.output = '';
  p.stdout.on('data', (d) => { p.output += d; });
  p.stderr.on('data', (d) => { p.output += d; });
  started.push(p);
  return p;
}

async function until(what, cond, ms = 120000) {
  const end = Date.now() + ms;
  for (;;) {
    const v = await cond();
    if (v) return v;
    if (Date.now() > end) {
      throw new Error(`${what}: not within ${ms} ms\n${started.map((p) => `--- ${p.spawnargs.join(' ')}\n${p.output.slice(-3000)}`).join('\n')}`);
    }
    await new Promise((r) => setTimeout(r, 200));
  }
}

async function control(base, pathname, body) {
  const res = await fetch(`${base}${pathname}`, body ? { method: 'POST', body: JSON.stringify(body) } : {});
  const text = await res.text();
  assert.equal(res.status, 200, `${pathname}: ${text}`);
  return JSON.parse(text);
}

function childrenOf(pid) {
  return fs.readdirSync('/proc').filter((d) => /^\d+$/.test(d)).filter((d) => {
    try {
      const stat = fs.readFileSync(`/proc/${d}/stat`, 'utf8');
      return Number(stat.slice(stat.lastIndexOf(')') + 2).split(' ')[1]) === pid;
    } catch { return false; }
  }).map(Number);
}

const cmdline = (pid) => fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').join(' ');

test('the real engine: every reason, under OpenFn names, claims-only Lightning', { timeout: 180000 }, async () => {
  const sink = await sinkModule.startSink();
  sinks.push(sink);
  const port = await freePort();
  const base = `http://127.0.0.1:${port}`;
  const otlp = { OTEL_EXPORTER_OTLP_ENDPOINT: sink.url };
  const lightning = start('lightning.js', { ...otlp, LIGHTNING_LISTEN: `127.0.0.1:${port}`, LIGHTNING_GRACE_SECONDS: '1' });
  await until('lightning listening', () => lightning.output.includes('listening'));

  // The first claim's reply never arrives: that run is claimed but never starts.
  await control(base, '/_control/drop-claim-replies', { worker_name: 'of-1', count: 1 });
  const [never] = (await control(base, '/_control/enqueue', { job: 'ok', queue: 'q1', options: { run_timeout_ms: 1000 } })).ids;
  const ids = {};
  for (const [job, params, options] of [
    ['ok', {}, {}], ['throw', {}, {}], ['oom', {}, { run_memory_limit_mb: 64 }],
    ['sleep', { ms: 60000 }, { run_timeout_ms: 2000 }], ['ok', {}, {}],
  ]) {
    [ids[ids[job] ? `${job}2` : job]] = (await control(base, '/_control/enqueue', { job, params, options, queue: 'q1' })).ids;
  }

  const worker = start('worker.js', {
    ...otlp, WORKER_NAME: 'of-1', WORKER_LIGHTNING_SERVICE_URL: base, WORKER_CAPACITY: '2',
    WORKER_QUEUES: 'q1', WORKER_CLAIM_TIMEOUT_SECONDS: '2', WORKER_BACKOFF: '0.2/1', WORKER_MAX_RUN_MEMORY_MB: '200',
  });

  const done = (id) => sink.logs.find((l) => l.eventName === 'run:complete' && l.attributes.run_id === id);
  for (const id of Object.values(ids)) await until(`run:complete of ${id}`, () => done(id));
  const runs = await until('the never-started run lost', async () => {
    const all = await control(base, '/_control/runs');
    return all.find((r) => r.id === never && r.state === 'lost') && all;
  });

  const reason = (id) => [done(id).attributes.reason, done(id).attributes.error_type ?? null];
  assert.deepEqual(reason(ids.ok), ['success', null]);
  assert.deepEqual(reason(ids.throw), ['fail', 'JobError']);
  assert.deepEqual(reason(ids.oom), ['kill', 'OOMError']);
  assert.deepEqual(reason(ids.sleep), ['kill', 'TimeoutError']);
  assert.deepEqual(reason(ids.ok2), ['success', null]);

  // Lightning learned every end from the worker; the dropped claim is lost after claim.
  const state = Object.fromEntries(runs.map((r) => [r.id, [r.state, r.error_type ?? null, r.worker_name]]));
  assert.deepEqual(state[ids.oom], ['kill', 'OOMError', 'of-1']);
  assert.deepEqual(state[never], ['lost', 'LostAfterClaim', 'of-1']);

  // The worker's records: OpenFn's names, worker_name on the resource, run_id on each.
  // The engine's time limit runs from when it hands the run to a child: on a
  // loaded machine the run can be killed before its thread starts, and then
  // (as in ws-worker) the run ends with no run:start and no step.
  for (const [job, id] of Object.entries(ids)) {
    const names = sink.logs.filter((l) => l.attributes.run_id === id && l.resource.worker_name === 'of-1').map((l) => l.eventName);
    const lifecycle = names.filter((n) => n !== 'step:start' && n !== 'step:complete');
    if (job === 'sleep' && !lifecycle.includes('run:start')) {
      assert.deepEqual(lifecycle, ['claim', 'run:complete'], id);
      continue;
    }
    assert.deepEqual(lifecycle, ['claim', 'run:start', 'run:complete'], id);
    assert.ok(names.includes('step:complete'), `${id}: ${names}`);
  }
  const step = sink.logs.find((l) => l.eventName === 'step:complete' && l.attributes.run_id === ids.ok);
  assert.ok(step.attributes['mem.job'] > 0 && step.attributes['mem.system'] > 0, JSON.stringify(step.attributes));
  // Nothing of the never-started run from the worker; Lightning's claim and lost mark.
  assert.equal(sink.logs.filter((l) => l.attributes.run_id === never && l.resource['service.name'] === 'openfn-worker').length, 0);
  // Lightning's records come through its own exporter's batches, on their own
  // time: the worker's last run:complete can reach the sink before Lightning's
  // claim of that run (once in CI: 5 claims of 6 when asserted at once).
  const lightningLogs = () => sink.logs.filter((l) => l.resource['service.name'] === 'lightning');
  await until("Lightning's six claims and the lost mark", () => {
    const ls = lightningLogs();
    return ls.filter((l) => l.eventName === 'claim').length >= 6 && ls.some((l) => l.eventName === 'run:lost' && l.attributes.run_id === never);
  });
  const fromLightning = lightningLogs();
  assert.deepEqual(fromLightning.filter((l) => l.attributes.run_id === never).map((l) => [l.eventName, l.attributes.worker_name]),
    [['claim', 'of-1'], ['run:lost', 'of-1']]);
  assert.equal(fromLightning.filter((l) => l.eventName === 'claim').length, 6);
  assert.ok(!fromLightning.some((l) => l.eventName === 'run:complete'), 'Lightning sends no run end of its own');

  // The worker's count of the runs it holds.
  await until('runs.active gauge', () => sink.metrics.some((m) => m.name === 'workerwatch.worker.runs.active' && m.resource.worker_name === 'of-1'));

  // run spans with a step span each.
  await until('run spans', () => Object.values(ids).every((id) => sink.spans.some((s) => s.name === 'run' && s.attributes.run_id === id)));
  const span = sink.spans.find((s) => s.name === 'run' && s.attributes.run_id === ids.sleep);
  assert.deepEqual([span.attributes.reason, span.attributes.error_type, span.resource.worker_name], ['kill', 'TimeoutError', 'of-1']);
  assert.ok(sink.spans.some((s) => s.name === 'step' && s.attributes.run_id === ids.ok));

  // The real engine's tree: children running engine-multi's child/runner.js.
  const kids = childrenOf(worker.pid).filter((p) => /engine-multi\/dist\/worker\/child\/runner\.js/.test(cmdline(p)));
  assert.ok(kids.length >= 1, `no engine children under ${worker.pid}: ${childrenOf(worker.pid).map(cmdline)}`);
  assert.match(cmdline(kids[0]), /--max-old-space-size=200 /);
  // engine-multi forks with env: {}; only node's own IPC variables are there.
  const environ = fs.readFileSync(`/proc/${kids[0]}/environ`, 'utf8').split('\0').filter(Boolean).map((kv) => kv.split('=')[0]);
  assert.deepEqual(environ.sort(), ['NODE_CHANNEL_FD', 'NODE_CHANNEL_SERIALIZATION_MODE']);

  worker.kill('SIGTERM');
  lightning.kill('SIGTERM');
  await until('worker stopped', () => worker.exitCode !== null, 20000);
  assert.equal(worker.exitCode, 0, worker.output);
});

test('the worker refuses to start without a name', async () => {
  const p = start('worker.js', {});
  await until('exit', () => p.exitCode !== null, 20000);
  assert.equal(p.exitCode, 2);
  assert.match(p.output, /WORKER_NAME \(or DEPLOYED_POD_NAME\) is required/);
});
