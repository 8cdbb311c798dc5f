// Fake custom HTTP tool endpoint ("Custom Tool Node Protocol" of
// /work/shared/seeds/003_13e79fab57a3fe28.txt) for Flowgate's tests.
//
//   const tools = await startHttpTool();
//   const path = tools.addTool({ apiKey: 'tool-secret', result: { temperature: 72 } });
//   ... point Flowgate at tools.url + path ...
//   tools.requestsFor(path)   // what was sent to this tool
//   await tools.stop();
//
// Every tool lives at its own path /tools/<random hex>, so concurrent tests never share one.
//
// ---- Wire format -------------------------------------------------------------------
// Request:  POST <url><path>
//           Content-Type: application/json
//           Authorization: Bearer <spec.apiKey>
//           X-Dify-Conversation-Id: <conversation id>   (recorded, optional)
//           X-Dify-User-Id: <user id>                   (recorded, optional)
//           body: JSON object of the tool's parameters; `"stream": true` asks for SSE.
// Checks, in this order (all error bodies are application/json):
//   unknown path                     404 {"error":"not found"}
//   method other than POST           405 {"error":"method not allowed"} (Allow: POST)
//   missing/wrong bearer token       401 {"error":"invalid api key"}
//   body not a JSON object           400 {"error":"invalid JSON body"}
// Then (after spec.delayMs, if given) by spec.behaviour:
//   'ok' (default)        200 application/json  <result>   (result = spec.result ?? {echo: body})
//   'error400'            400 {"error":"Invalid location format. Expected 'City, State'."}
//   'error500'            500 {"error":"upstream exploded"}
//   'not_json'            200 text/html; charset=utf-8  <html>oops</html>
//   'wrong_content_type'  200 text/plain; charset=utf-8  JSON.stringify(result)
//   'rate_limited'        429 {"error":"slow down"}, header Retry-After: 7
// Streaming (body.stream === true and behaviour 'ok'): 200,
//   Content-Type: text/event-stream; charset=utf-8. Frames are `data: <json>\n\n` only
//   (no `event:` or `id:` lines), exactly as the seed's example, in this order:
//     data: {"type":"thought","message":"<text>"}\n\n        one per spec.thoughts entry
//                                                           (default ["Working on it..."])
//     data: {"type":"progress","percent":<N>}\n\n           one per spec.progress entry
//                                                           (default [50]); an entry
//                                                           {percent, message} adds "message"
//     data: {"type":"result","result":{...result}}\n\n      final event, resultShape 'nested' (default)
//     data: {"type":"result",...result}\n\n                 final event, resultShape 'flat'
//   and the connection is closed. The seed is inconsistent about the final event: its prose
//   says the final payload contains a "result" key with the complete output ('nested'), its
//   example spreads the output next to "type" ('flat'); both are available.
//   spec.eventDelayMs: wait before every event after the first (default 0).
//   spec.streamBehaviour: 'ok' (default) | 'end_early' (close without the result event).
//
// Records (`requests`, in arrival order): {method, path, headers, body, apiKey (bearer token
// or null), conversationId, userId, stream (body.stream === true), at, status (answer
// status, once sent), clientAborted (streams only: true once the client went away before
// the stream was complete)}.

import { randomBytes } from 'node:crypto';

import { listenLoopback } from './loopback-server.mjs';

const BEHAVIOURS = new Set(['ok', 'error400', 'error500', 'not_json', 'wrong_content_type', 'rate_limited']);
const STREAM_BEHAVIOURS = new Set(['ok', 'end_early']);
const RESULT_SHAPES = new Set(['nested', 'flat']);

const isPlainObject = (v) => v !== null && typeof v === 'object' && !Array.isArray(v);

export async function startHttpTool() {
  const tools = new Map(); // path -> spec
  const requests = [];
  const pending = new Set(); // { resolve(why) }
  const streams = new Set();
  let stopped = false;
  let stopPromise = null;

  function send(res, status, body, headers = {}) {
    if (res.headersSent || res.destroyed) return;
    res.fixtureRecord.status = status;
    if (typeof body === 'string') {
      res.writeHead(status, { 'Content-Type': 'text/plain; charset=utf-8', ...headers });
      res.end(body);
    } else {
      res.writeHead(status, { 'Content-Type': 'application/json', ...headers });
      res.end(JSON.stringify(body));
    }
  }

  /** Resolves 'time' after ms, or 'closed' / 'fixture' if the client or the fixture goes first. */
  function sleep(ms, res) {
    if (stopped) return Promise.resolve('fixture');
    if (res.fixtureClosed || res.destroyed) return Promise.resolve('closed');
    return new Promise((resolve) => {
      let settled = false;
      const entry = { resolve: (why) => done(why) };
      const onClose = () => done('closed');
      const timer = setTimeout(() => done('time'), ms);
      function done(why) {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        res.off('close', onClose);
        pending.delete(entry);
        resolve(stopped ? 'fixture' : why);
      }
      res.on('close', onClose);
      pending.add(entry);
    });
  }

  async function stream(res, tool, result) {
    const record = res.fixtureRecord;
    record.clientAborted = false;
    record.status = 200;
    res.writeHead(200, {
      'Content-Type': 'text/event-stream; charset=utf-8',
      'Cache-Control': 'no-cache',
      Connection: 'keep-alive',
    });
    streams.add(res);
    try {
      const events = [
        ...tool.thoughts.map((t) => ({ type: 'thought', message: String(t) })),
        ...tool.progress.map((p) =>
          typeof p === 'number' ? { type: 'progress', percent: p } : { type: 'progress', percent: p.percent, message: p.message },
        ),
      ];
      if (tool.streamBehaviour !== 'end_early') {
        events.push(tool.resultShape === 'flat' ? { type: 'result', ...result } : { type: 'result', result });
      }
      for (const [i, ev] of events.entries()) {
        if (i > 0 && tool.eventDelayMs > 0) {
          const why = await sleep(tool.eventDelayMs, res);
          if (why !== 'time') return;
        }
        if (stopped || res.destroyed || res.fixtureClosed) return;
        res.write(`data: ${JSON.stringify(ev)}\n\n`);
      }
      res.end();
    } finally {
      streams.delete(res);
    }
  }

  async function handle(req, res) {
    const url = new URL(req.url, 'http://127.0.0.1');
    const chunks = [];
    for await (const c of req) chunks.push(c);
    const raw = Buffer.concat(chunks).toString('utf8');
    let body;
    let badJson = false;
    if (raw.length) {
      try {
        body = JSON.parse(raw);
      } catch {
        body = raw;
        badJson = true;
      }
    }
    const h = req.headers;
    const record = {
      method: req.method,
      path: url.pathname,
      headers: { ...h },
      body,
      apiKey: /^Bearer\s+(\S+)/i.exec(h.authorization ?? '')?.[1] ?? null,
      conversationId: h['x-dify-conversation-id'] ?? null,
      userId: h['x-dify-user-id'] ?? null,
      stream: isPlainObject(body) && body.stream === true,
      at: Date.now(),
    };
    requests.push(record);
    res.fixtureRecord = record;
    res.on('close', () => {
      res.fixtureClosed = true;
      if ('clientAborted' in record && !res.writableFinished && !stopped) record.clientAborted = true;
    });

    const tool = tools.get(url.pathname);
    if (!tool) return send(res, 404, { error: 'not found' });
    if (req.method !== 'POST') return send(res, 405, { error: 'method not allowed' }, { Allow: 'POST' });
    if (tool.apiKey !== null) {
      const m = /^Bearer\s+(\S+)\s*$/i.exec(h.authorization ?? '');
      if (!m || m[1] !== tool.apiKey) return send(res, 401, { error: 'invalid api key' });
    }
    if (badJson || !isPlainObject(body)) return send(res, 400, { error: 'invalid JSON body' });
    tool.calls += 1;

    if (tool.delayMs > 0) {
      const why = await sleep(tool.delayMs, res);
      if (why !== 'time') {
        res.destroy();
        return;
      }
    }
    switch (tool.behaviour) {
      case 'error400':
        return send(res, 400, { error: "Invalid location format. Expected 'City, State'." });
      case 'error500':
        return send(res, 500, { error: 'upstream exploded' });
      case 'rate_limited':
        return send(res, 429, { error: 'slow down' }, { 'Retry-After': '7' });
      case 'not_json':
        record.status = 200;
        res.writeHead(200, { 'Content-Type': 'text/html; charset=utf-8' });
        return res.end('<html>oops</html>');
      default:
        break;
    }
    const result =
      typeof tool.result === 'function' ? await tool.result(body, record) : tool.result !== undefined ? tool.result : { echo: body };
    if (tool.behaviour === 'wrong_content_type') return send(res, 200, JSON.stringify(result));
    if (record.stream) return stream(res, tool, result);
    return send(res, 200, result);
  }

  const { server, port } = await listenLoopback(handle, (err) => ({ error: `fixture error: ${err?.stack ?? err}` }));
  const url = `http://127.0.0.1:${port}`;

  return {
    /** Base URL (no trailing slash); a tool's endpoint is url + the path addTool returned. */
    url,
    port,
    requests,

    /**
     * Registers a tool; returns its path (/tools/<random>). spec: {apiKey (string, or null for
     * no auth check; required), behaviour, result (object or (body, record) => object),
     * delayMs, thoughts, progress, resultShape, eventDelayMs, streamBehaviour}.
     */
    addTool(spec = {}) {
      if (spec.apiKey === undefined) throw new Error('addTool: apiKey is required (null for a tool without auth)');
      if (spec.apiKey !== null && (typeof spec.apiKey !== 'string' || !spec.apiKey)) {
        throw new Error('addTool: apiKey must be a non-empty string or null');
      }
      const behaviour = spec.behaviour ?? 'ok';
      if (!BEHAVIOURS.has(behaviour)) throw new Error(`addTool: unknown behaviour ${behaviour}`);
      const streamBehaviour = spec.streamBehaviour ?? 'ok';
      if (!STREAM_BEHAVIOURS.has(streamBehaviour)) throw new Error(`addTool: unknown streamBehaviour ${streamBehaviour}`);
      const resultShape = spec.resultShape ?? 'nested';
      if (!RESULT_SHAPES.has(resultShape)) throw new Error(`addTool: unknown resultShape ${resultShape}`);
      if (spec.result !== undefined && typeof spec.result !== 'function' && !isPlainObject(spec.result)) {
        throw new Error('addTool: result must be an object or a function');
      }
      const path = `/tools/${randomBytes(8).toString('hex')}`;
      tools.set(path, {
        apiKey: spec.apiKey,
        behaviour,
        result: spec.result,
        delayMs: spec.delayMs ?? 0,
        thoughts: spec.thoughts ?? ['Working on it...'],
        progress: spec.progress ?? [50],
        resultShape,
        eventDelayMs: spec.eventDelayMs ?? 0,
        streamBehaviour,
        calls: 0,
      });
      return path;
    },

    /** Requests made to this tool's path (in arrival order). */
    requestsFor(path) {
      return requests.filter((r) => r.path === path);
    },

    stop() {
      if (stopPromise) return stopPromise;
      stopped = true;
      for (const p of [...pending]) p.resolve('fixture');
      for (const s of [...streams]) s.destroy();
      stopPromise = new Promise((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      });
      return stopPromise;
    },
  };
}
