'use strict';
// A tiny OTLP/HTTP JSON sink for tests: collects what arrives on /v1/traces, /v1/logs and
// /v1/metrics, and flattens it into spans, log records and metric points with their
// resource attributes.

const http = require('node:http');
const zlib = require('node:zlib');

function attrValue(v) {
  if (!v || typeof v !== 'object') return undefined;
  if ('stringValue' in v) return v.stringValue;
  if ('intValue' in v) return Number(v.intValue);
  if ('doubleValue' in v) return v.doubleValue;
  if ('boolValue' in v) return v.boolValue;
  if ('arrayValue' in v) return (v.arrayValue.values || []).map(attrValue);
  return undefined;
}

function attrs(list) {
  const out = {};
  for (const kv of list || []) out[kv.key] = attrValue(kv.value);
  return out;
}

function startSink() {
  const sink = { spans: [], logs: [], metrics: [], errors: [], requests: 0 };
  const server = http.createServer((req, res) => {
    const chunks = [];
    req.on('data', (c) => chunks.push(c));
    req.on('end', () => {
      sink.requests += 1;
      let body = Buffer.concat(chunks);
      try {
        if (req.headers['content-encoding'] === 'gzip') body = zlib.gunzipSync(body);
        const ctype = req.headers['content-type'] || '';
        if (!ctype.includes('json')) throw new Error(`unexpected content-type ${ctype} on ${req.url}`);
        const doc = JSON.parse(body.toString('utf8'));
        if (req.url === '/v1/traces') {
          for (const rs of doc.resourceSpans || []) {
            const resource = attrs(rs.resource && rs.resource.attributes);
            for (const ss of rs.scopeSpans || []) {
              for (const s of ss.spans || []) sink.spans.push({ name: s.name, attributes: attrs(s.attributes), resource, raw: s });
            }
          }
        } else if (req.url === '/v1/logs') {
          for (const rl of doc.resourceLogs || []) {
            const resource = attrs(rl.resource && rl.resource.attributes);
            for (const sl of rl.scopeLogs || []) {
              for (const l of sl.logRecords || []) {
                sink.logs.push({ eventName: l.eventName, attributes: attrs(l.attributes), resource, raw: l });
              }
            }
          }
        } else if (req.url === '/v1/metrics') {
          for (const rm of doc.resourceMetrics || []) {
            const resource = attrs(rm.resource && rm.resource.attributes);
            for (const sm of rm.scopeMetrics || []) {
              for (const m of sm.metrics || []) {
                const data = m.gauge || m.sum || m.histogram || {};
                for (const dp of data.dataPoints || []) {
                  const value = dp.asInt !== undefined ? Number(dp.asInt) : dp.asDouble;
                  sink.metrics.push({ name: m.name, unit: m.unit, gauge: !!m.gauge, value, resource });
                }
              }
            }
          }
        } else {
          throw new Error(`unexpected path ${req.url}`);
        }
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end('{}');
      } catch (err) {
        sink.errors.push(err.message);
        res.writeHead(400, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ message: err.message }));
      }
    });
  });
  return new Promise((resolve) => {
    server.listen(0, '127.0.0.1', () => {
      sink.url = `http://127.0.0.1:${server.address().port}`;
      sink.close = () => new Promise((r) => server.close(() => r()));
      resolve(sink);
    });
  });
}

module.exports = { startSink };
