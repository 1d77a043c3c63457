'use strict';
// The example against a real redis-server (started here on a free loopback port, its own
// directory, ended by pid) and a tiny OTLP/HTTP sink: what the worker
// send, the sandboxed children in /proc, a clean SIGTERM. Skipped when redis-server is
// not installed (scripts/install-test-deps.sh installs it). Linux only (reads /proc).

const test = require('node:test');
const assert = require('node:assert');
const fs = require('node:fs');
const net = require('node:net');
const os = require('node:os');
const path = require('node:path');
const { spawn } = require('node:child_process');
const { startSink } = require('../../node-worker/test/otlp-sink');

const DIR = path.join(__dirname, '..');
const redisBin = ['/usr/bin/redis-server', '/usr/local/bin/redis-server'].find((p) => fs.existsSync(p));

function freePort() {
  return new Promise((resolve) => {
    const srv = net.createServer().listen(0, '127.0.0.1', () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

async function until(what, cond, ms = 120000, seen = () => '') {
  const end = Date.now() + ms;
  for (;;) {
    const v = await cond();
    if (v) return v;
    if (Date.now() > end) throw new Error(`${what}: not within ${ms} ms\n${seen()}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

function run(file, env, args = []) {
  const p = spawn(process.execPath, [path.join(DIR, file), ...args], { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
  p.out = '';
  p.stdout.on('data', (d) => { p.out += d; });
  p.stderr.on('data', (d) => { p.out += d; });
  p.exited = new Promise((resolve) => p.on('exit', (code, signal) => resolve({ code, signal })));
  return p;
}

function childrenOf(pid) {
  const out = [];
  for (const task of fs.readdirSync(`/proc/${pid}/task`)) {
    const kids = fs.readFileSync(`/proc/${pid}/task/${task}/children`, 'utf8').trim();
    if (kids) out.push(...kids.split(/\s+/).map(Number));
  }
  return out;
}

function cmdline(pid) {
  try {
    return fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').join(' ');
  } catch {
    return '';
  }
}

test('the worker runs sandboxed jobs and, with its SDK on, sends bullmq-otel spans and the optional records', { skip: !redisBin && 'redis-server not installed' }, async (t) => {
  const port = await freePort();
  const redisDir = fs.mkdtempSync(path.join(os.tmpdir(), 'bullmq-example-'));
  const redis = spawn(redisBin, ['--port', String(port), '--bind', '127.0.0.1', '--dir', redisDir, '--save', '', '--appendonly', 'no'], { stdio: 'ignore' });
  t.after(() => redis.kill('SIGTERM'));
  await until('redis listening', () => new Promise((resolve) => {
    const c = net.connect(port, '127.0.0.1', () => { c.end(); resolve(true); });
    c.on('error', () => resolve(false));
  }));
  const sink = await startSink();
  t.after(() => sink.close());
  const env = { REDIS_URL: `redis://127.0.0.1:${port}`, QUEUE: 'jobs', OTEL_EXPORTER_OTLP_ENDPOINT: sink.url };

  const worker = run('worker.js', { ...env, WORKER_NAME: 'example-w1', JOB_MAX_OLD_SPACE_MB: '64' });
  t.after(() => { worker.kill('SIGKILL'); });
  await until('worker ready', () => worker.out.includes('ready (pid'));

  // The producer runs beside this process, not with spawnSync, so that the
  // sink (in this process's event loop) keeps answering while it starts.
  const add = async (data) => {
    const p = spawn(process.execPath, [path.join(DIR, 'producer.js'), 'add', JSON.stringify(data)], { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let errOut = '';
    p.stdout.on('data', (d) => { out += d; });
    p.stderr.on('data', (d) => { errOut += d; });
    const code = await new Promise((resolve) => p.on('close', resolve));
    assert.strictEqual(code, 0, errOut);
    return out.trim();
  };
  // What the worker said and the sink got, for a wait that times out (a CI
  // run waited 2 min for the job's span and said nothing more).
  const seen = () => `worker output:\n${worker.out.slice(-3000)}\nsink: spans ${JSON.stringify(sink.spans.map((s) => [s.name, s.attributes['bullmq.job.id']]))}, ` +
    `logs ${JSON.stringify(sink.logs.map((l) => [l.eventName, l.attributes['bullmq.job.id']]))}, errors ${JSON.stringify(sink.errors)}`;
  const ok = await add({ durationMs: 1500, memoryMb: 5 });
  // While it runs: a sandboxed child of the worker.
  await until('a sandboxed child', () => childrenOf(worker.pid).some((c) => /bullmq\/dist\/cjs\/classes\/main\.js/.test(cmdline(c))), undefined, seen);
  const bad = await add({ durationMs: 100, throw: 'boom' });

  const span = await until('the job span', () => sink.spans.find((s) => s.name === 'process jobs' && s.attributes['bullmq.job.id'] === ok), undefined, seen);
  assert.strictEqual(span.attributes['bullmq.worker.name'], 'example-w1');
  assert.strictEqual(span.resource['service.name'], 'bullmq-worker');
  const active = await until('the active record', () => sink.logs.find((l) => l.eventName === 'bullmq.job.active' && l.attributes['bullmq.job.id'] === ok), undefined, seen);
  assert.strictEqual(active.attributes['bullmq.worker.name'], 'example-w1');
  const failed = await until('the failed record', () => sink.logs.find((l) => l.eventName === 'bullmq.job.failed' && l.attributes['bullmq.job.id'] === bad), undefined, seen);
  assert.strictEqual(failed.attributes['bullmq.job.failed.reason'], 'boom');
  assert.strictEqual(failed.attributes['bullmq.job.state'], 'failed');
  const completed = await until('the completed record', () => sink.logs.find((l) => l.eventName === 'bullmq.job.completed' && l.attributes['bullmq.job.id'] === ok), undefined, seen);
  assert.strictEqual(completed.attributes['bullmq.job.state'], 'completed');
  assert.deepStrictEqual(sink.errors, []);

  const kids = childrenOf(worker.pid);
  worker.kill('SIGTERM');
  assert.deepStrictEqual(await worker.exited, { code: 0, signal: null });
  for (const k of kids) assert.ok(!fs.existsSync(`/proc/${k}`) || !cmdline(k), `child ${k} left behind`);
});

test('the worker refuses to start without WORKER_NAME, naming it', async () => {
  const p = run('worker.js', { WORKER_NAME: '' });
  const { code } = await p.exited;
  assert.strictEqual(code, 2);
  assert.match(p.out, /WORKER_NAME is required/);
});

test('a bad REDIS_URL is named', async () => {
  const p = run('worker.js', { WORKER_NAME: 'w', REDIS_URL: 'http://127.0.0.1:1' });
  const { code } = await p.exited;
  assert.strictEqual(code, 2);
  assert.match(p.out, /REDIS_URL must start with redis:\/\//);
});
