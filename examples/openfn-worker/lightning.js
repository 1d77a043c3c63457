// A stand-in for OpenFn Lightning, the scheduler (Lightning itself is an Elixir
// application and is not available here). It keeps a queue of runs, answers a
// worker's `claim` with runs the way Lightning does, serves each run's plan and
// records the run events the worker pushes, and marks runs lost when they
// outlive claimed_at + run_timeout_ms + grace (LostAfterClaim, LostAfterStart:
// Lightning.Runs.mark_run_lost).
//
// Lightning speaks Phoenix channels over a websocket; this stand-in speaks the
// same messages as JSON over HTTP (README.md, "The protocol"). What it sends
// to workerwatch over OTLP is what a Lightning forwarder would: its own view
// of which worker holds which run, claims only (the worker reports the run's
// end, Lightning sends no end of its own), plus the lost runs and how many
// runs are waiting.
//
// Environment:
//   LIGHTNING_LISTEN               host:port (default 127.0.0.1:4000)
//   LIGHTNING_GRACE_SECONDS        added to run_timeout_ms before a run is lost (10)
//   LIGHTNING_RUN_TIMEOUT_MS       run_timeout_ms of runs enqueued without one (300000)
//   OTEL_EXPORTER_OTLP_ENDPOINT    default http://127.0.0.1:4318
//
// A control API for demos and tests (not part of Lightning), under /_control:
//   POST /_control/enqueue {job, params, queue, count, options}  -> {ids}
//   POST /_control/drop-claim-replies {worker_name, count}       -> {}
//        the next `count` claims from that worker are recorded (the runs are
//        claimed for it) but never answered: the worker's claim times out and
//        the runs never start (kit #910, #981)
//   GET  /_control/runs                                          -> [run]

import http from 'node:http';
import crypto from 'node:crypto';
import { logs, SeverityNumber } from '@opentelemetry/api-logs';
import { metrics, ValueType } from '@opentelemetry/api';
import { startTelemetry, stopTelemetry } from './telemetry.js';
import { jobSource } from './jobs.js';

const [host, port] = (process.env.LIGHTNING_LISTEN || '127.0.0.1:4000').split(/:(?=\d+$)/);
const GRACE_MS = Number(process.env.LIGHTNING_GRACE_SECONDS ?? 10) * 1000;
const DEFAULT_RUN_TIMEOUT_MS = Number(process.env.LIGHTNING_RUN_TIMEOUT_MS ?? 300000);
const MAX_BODY = 1 << 20;

const sdk = startTelemetry({ resource: { 'service.name': 'lightning' } });
const logger = logs.getLogger('lightning-standin');

// Runs by id, in the order they were enqueued (a Map keeps insertion order).
// state: available -> claimed -> started -> a final reason | lost
const runs = new Map();
const dropReplies = new Map(); // worker_name -> claims still to leave unanswered
const FINAL = new Set(['success', 'fail', 'crash', 'kill', 'cancel', 'exception', 'lost']);
let seq = 0;

metrics
  .getMeter('lightning-standin')
  .createObservableGauge('workerwatch.scheduler.runs.pending', {
    unit: '{run}',
    description: 'Runs waiting for a worker (state available).',
    valueType: ValueType.INT,
  })
  .addCallback((r) => r.observe([...runs.values()].filter((x) => x.state === 'available').length));

// emit sends one record of Lightning's view. The worker a record is about is
// named on the record (worker_name), as in the claim payload.
function emit(eventName, attributes, severityNumber = SeverityNumber.INFO) {
  logger.emit({
    eventName,
    severityNumber,
    severityText: severityNumber >= SeverityNumber.WARN ? 'WARN' : 'INFO',
    body: `${eventName} ${attributes.run_id} ${attributes.worker_name}`,
    attributes,
  });
}

function log(msg) {
  process.stdout.write(`${new Date().toISOString()} [lightning] ${msg}\n`);
}

function enqueue({ job = 'ok', params = {}, queue = 'manual', count = 1, options = {} }) {
  const body = jobSource(job, params); // refuses unknown jobs before anything is queued
  const ids = [];
  for (let i = 0; i < count; i += 1) {
    seq += 1;
    const id = `run-${String(seq).padStart(4, '0')}-${crypto.randomUUID().slice(0, 8)}`;
    runs.set(id, {
      id,
      job,
      queue,
      state: 'available',
      token: crypto.randomBytes(12).toString('hex'),
      options: { run_timeout_ms: DEFAULT_RUN_TIMEOUT_MS, ...options },
      body,
      worker_name: null,
    });
    ids.push(id);
  }
  return ids;
}

// claim answers {demand, worker_name, queues} with up to `demand` available
// runs from those queues ("*" takes any), in queue order then age.
function claim({ demand = 1, worker_name: worker = null, queues = ['*'] }) {
  const claimed = [];
  for (const q of queues) {
    for (const r of runs.values()) {
      if (claimed.length >= demand) break;
      if (r.state === 'available' && (q === '*' || r.queue === q)) {
        Object.assign(r, { state: 'claimed', worker_name: worker, claimed_at: Date.now() });
        claimed.push(r);
        emit('claim', { run_id: r.id, worker_name: worker ?? '', queue: r.queue });
      }
    }
  }
  return claimed;
}

// The run events a worker pushes on the run's channel.
function runEvent(r, event, payload) {
  if (FINAL.has(r.state)) return; // Lightning ignores events of finished (or lost) runs
  if (event === 'run:start') {
    Object.assign(r, { state: 'started', started_at: Date.now() });
  } else if (event === 'run:complete') {
    Object.assign(r, {
      state: payload.reason || 'exception',
      error_type: payload.error_type ?? null,
      finished_at: Date.now(),
    });
  }
}

// Lightning.Runs.Query.lost: unfinished runs claimed longer ago than their
// run_timeout_ms plus the grace period are marked lost.
function sweepLost() {
  const now = Date.now();
  for (const r of runs.values()) {
    if ((r.state === 'claimed' || r.state === 'started') && r.claimed_at + r.options.run_timeout_ms + GRACE_MS < now) {
      const errorType = r.state === 'claimed' ? 'LostAfterClaim' : 'LostAfterStart';
      Object.assign(r, { state: 'lost', error_type: errorType, finished_at: now });
      emit('run:lost', { run_id: r.id, worker_name: r.worker_name ?? '', error_type: errorType, state: 'lost' }, SeverityNumber.WARN);
      log(`${r.id} lost (${errorType}), was held by ${r.worker_name}`);
    }
  }
}
const sweeper = setInterval(sweepLost, 1000);

function readJSON(req) {
  return new Promise((resolve, reject) => {
    let size = 0;
    const chunks = [];
    req.on('data', (c) => {
      size += c.length;
      if (size > MAX_BODY) {
        reject(Object.assign(new Error(`request body over ${MAX_BODY} bytes`), { status: 413 }));
        req.destroy();
      } else chunks.push(c);
    });
    req.on('end', () => {
      try {
        resolve(chunks.length ? JSON.parse(Buffer.concat(chunks).toString('utf8')) : {});
      } catch (e) {
        reject(Object.assign(new Error(`invalid JSON: ${e.message}`), { status: 400 }));
      }
    });
    req.on('error', reject);
  });
}

function reply(res, status, body) {
  res.writeHead(status, { 'content-type': 'application/json' });
  res.end(JSON.stringify(body));
}

const routes = {
  // The worker queue channel's `claim` message.
  'POST /claim': async (req, res, body) => {
    const claimed = claim(body);
    const worker = body.worker_name;
    const drop = dropReplies.get(worker) ?? 0;
    if (claimed.length && drop > 0) {
      dropReplies.set(worker, drop - 1);
      for (const r of claimed) r.reply_dropped = true;
      log(`claim by ${worker}: ${claimed.map((r) => r.id).join(',')} claimed, reply dropped`);
      return; // never answered: the worker's claim times out
    }
    if (claimed.length) log(`claim by ${worker}: ${claimed.map((r) => r.id).join(',')}`);
    reply(res, 200, { runs: claimed.map((r) => ({ id: r.id, token: r.token })) });
  },
  // Joining the run's channel and `fetch:plan`: the run in Lightning's shape.
  'GET /run': async (req, res, body, id, token) => {
    const r = runs.get(id);
    if (!r || r.token !== token) return reply(res, 404, { error: `no run ${id} for this token` });
    reply(res, 200, {
      id: r.id,
      jobs: [{ id: `${r.job}-job`, name: r.job, body: r.body }],
      triggers: [],
      edges: [],
      starting_node_id: `${r.job}-job`,
      options: r.options,
    });
  },
  // The run channel's events: run:start, step:start, step:complete, run:log, run:complete.
  'POST /run': async (req, res, body, id, token, event) => {
    const r = runs.get(id);
    if (!r || r.token !== token) return reply(res, 404, { error: `no run ${id} for this token` });
    runEvent(r, event, body);
    reply(res, 200, {});
  },
  'POST /_control/enqueue': async (req, res, body) => reply(res, 200, { ids: enqueue(body) }),
  'POST /_control/drop-claim-replies': async (req, res, body) => {
    dropReplies.set(body.worker_name, (dropReplies.get(body.worker_name) ?? 0) + Number(body.count ?? 1));
    reply(res, 200, {});
  },
  'GET /_control/runs': async (req, res) =>
    reply(res, 200, [...runs.values()].map(({ body, token, ...r }) => r)),
};

const server = http.createServer(async (req, res) => {
  const url = new URL(req.url, 'http://lightning');
  // /run/<id>[/<event>]?token=...
  const [, first, id, event] = url.pathname.split('/');
  const key = `${req.method} ${first === 'run' ? '/run' : url.pathname}`;
  const route = routes[key];
  if (!route) return reply(res, 404, { error: `no route ${key}` });
  try {
    const body = req.method === 'POST' ? await readJSON(req) : {};
    await route(req, res, body, decodeURIComponent(id ?? ''), url.searchParams.get('token'), event && decodeURIComponent(event));
  } catch (e) {
    reply(res, e.status || 400, { error: e.message });
  }
});
// Longer than a worker's pause between two messages: a connection the
// server closes as the worker reuses it fails the request (ECONNRESET).
server.keepAliveTimeout = 65000;
server.headersTimeout = 66000;
server.requestTimeout = 0; // a dropped claim reply stays open until the worker gives up
server.listen(Number(port), host, () => {
  log(`listening on ${host}:${server.address().port}; grace ${GRACE_MS / 1000}s; OTLP ${process.env.OTEL_EXPORTER_OTLP_ENDPOINT}`);
});

async function shutdown(signal) {
  log(`${signal}: stopping`);
  clearInterval(sweeper);
  server.closeAllConnections();
  server.close();
  await stopTelemetry(sdk, 'lightning');
  process.exit(0);
}
process.on('SIGTERM', () => shutdown('SIGTERM'));
process.on('SIGINT', () => shutdown('SIGINT'));
