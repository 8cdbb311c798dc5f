// Fake custom HTTP tool endpoint ("Custom Tool Node Protocol" of
// /work/shared/seeds/003_13e79fab57a3fe28.txt) for Flowgate's tests, plus async task tools
// (the submit/status/cancel protocol of /work/shared/seeds/002_5ab2825f99a05c72.txt).
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
//   'no_content'          204, no Content-Type, no body
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
//   spec.holdResult: true → the stream waits before the result event until release(path) (or
//   the client leaving, the fixture stopping); the request record has held: true meanwhile.
//   Lets a test see what arrives while the tool is still working.
//
// ---- Async tools (the submit/status/cancel protocol of seed 002, "ordinary" task tools) --
//   const t = tools.addAsyncTool({ apiKey: KEY, script: [{status:'running'}, {status:'completed', result:{...}}] });
//   → { submitPath, statusPath, cancelPath, calls }   (<prefix>/submit|status|cancel, prefix
//     /tools/<random hex>); all three are POST JSON endpoints with the same checks as a
//     plain tool (404 / 405 / 401 / 400 as above). Answers are the structuredContent object
//     itself, 200 application/json, unless said otherwise.
//   submit(body)        → {task_id: "remote-<16 hex>", status: "running"}, a new task with its
//                         own copy of the script. spec.submitResponse (any JSON, or a function
//                         (body) → JSON) replaces the whole answer, verbatim; the task is then
//                         registered under its task_id if that is a string (else the generated
//                         id, which the client never sees).
//   status({task_id})   → the task's next script entry (consumed one per status call, the last
//                         one repeated for ever). An entry is
//                           {httpStatus: N}            N, text/plain, the status text (500:
//                                                      "Internal Server Error"): transient error
//                           {isError: true, text: T}   {isError:true, content:[{type:"text",text:T}]}
//                           {raw: <any JSON>}          sent verbatim
//                           {drop: true}               the connection is closed, no answer
//                                                      (what a pooled connection the server
//                                                      closed looks like to the caller)
//                           anything else              {task_id, ...entry} (the entry's own
//                                                      task_id, if it has the key, wins)
//                         Default script: [{status:"completed", result:{echo: <submit body>}}].
//                         After a cancel: {task_id, status:"cancelled"} (nothing consumed).
//   cancel({task_id})   → {task_id, status:"cancelled"}, idempotent; spec.cancelFailures N: the
//                         first N cancels of a task answer 500 text/plain (and do not cancel).
//   status/cancel of a task_id this tool never issued → 200 {task_id, status:"failed",
//   error_code:"task_not_found", error:"Task not found"}; a body without a string task_id →
//   400 {"error":"task_id is required"}.
//   spec.delayMs delays every answer of the three endpoints (default 0).
//   `calls` (also callsFor(anyOfTheThreePaths)): every call that passed the checks, in order:
//   {kind: 'submit'|'status'|'cancel', at (Date.now() on arrival), body, task_id (the task
//   addressed, or the new one for submit), httpStatus, response (JSON answer, or text)}.
//   tasksOf(path) → the tool's tasks: {task_id, submitBody, cursor (script entries consumed),
//   statusCalls, cancelCalls, cancelled, submittedAt, cancelledAt}.
//
// Records (`requests`, in arrival order): {method, path, headers, body, apiKey (bearer token
// or null), conversationId, userId, stream (body.stream === true), at, status (answer
// status, once sent), clientAborted (streams only: true once the client went away before
// the stream was complete)}.

import { randomBytes } from 'node:crypto';
import { STATUS_CODES } from 'node:http';

import { listenLoopback, readBody } from './loopback-server.mjs';

const BEHAVIOURS = new Set(['ok', 'error400', 'error500', 'not_json', 'no_content', 'wrong_content_type', 'rate_limited']);
const STREAM_BEHAVIOURS = new Set(['ok', 'end_early']);
const RESULT_SHAPES = new Set(['nested', 'flat']);

const isPlainObject = (v) => v !== null && typeof v === 'object' && !Array.isArray(v);
const ASYNC_KINDS = ['submit', 'status', 'cancel'];

function nonNegInt(v, name, dflt) {
  if (v === undefined || v === null) return dflt;
  if (!Number.isInteger(v) || v < 0) throw new Error(`addAsyncTool: ${name} must be a non-negative integer; got ${v}`);
  return v;
}

function validateScript(script) {
  if (!Array.isArray(script) || script.length === 0) throw new Error('addAsyncTool: script must be a non-empty array of objects');
  for (const e of script) {
    if (!isPlainObject(e)) throw new Error('addAsyncTool: script must be a non-empty array of objects');
    if ('httpStatus' in e && (!Number.isInteger(e.httpStatus) || e.httpStatus < 100 || e.httpStatus > 599)) {
      throw new Error(`addAsyncTool: httpStatus must be an HTTP status code; got ${e.httpStatus}`);
    }
    if (e.isError === true && typeof e.text !== 'string') throw new Error('addAsyncTool: an isError entry needs text');
  }
  return script;
}

export async function startHttpTool() {
  const tools = new Map(); // path -> spec
  const asyncEndpoints = new Map(); // path -> { tool, kind }
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

  /**
   * Resolves with why the wait ended: 'time' after `ms` (when given), 'released' when the tool's
   * release(path) is called (when `tool` is given), or 'closed' / 'fixture' if the client or the
   * fixture goes first.
   */
  function waitFor(res, { ms, tool }) {
    if (stopped) return Promise.resolve('fixture');
    if (res.fixtureClosed || res.destroyed) return Promise.resolve('closed');
    return new Promise((resolve) => {
      let settled = false;
      const entry = { resolve: (why) => done(why) };
      const onClose = () => done('closed');
      const timer = ms === undefined ? undefined : setTimeout(() => done('time'), ms);
      function done(why) {
        if (settled) return;
        settled = true;
        clearTimeout(timer);
        res.off('close', onClose);
        pending.delete(entry);
        tool?.waiters.delete(entry.resolve);
        resolve(stopped ? 'fixture' : why);
      }
      res.on('close', onClose);
      pending.add(entry);
      tool?.waiters.add(entry.resolve);
    });
  }

  const sleep = (ms, res) => waitFor(res, { ms });
  const hold = (res, tool) => waitFor(res, { tool });

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
        if (ev.type === 'result' && tool.holdResult && !tool.released) {
          record.held = true;
          const why = await hold(res, tool);
          record.held = false;
          if (why !== 'released') return;
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
    const { body, badJson } = await readBody(req);
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

    const endpoint = asyncEndpoints.get(url.pathname);
    const tool = endpoint?.tool ?? tools.get(url.pathname);
    if (!tool) return send(res, 404, { error: 'not found' });
    if (req.method !== 'POST') return send(res, 405, { error: 'method not allowed' }, { Allow: 'POST' });
    if (tool.apiKey !== null) {
      const m = /^Bearer\s+(\S+)\s*$/i.exec(h.authorization ?? '');
      if (!m || m[1] !== tool.apiKey) return send(res, 401, { error: 'invalid api key' });
    }
    if (badJson || !isPlainObject(body)) return send(res, 400, { error: 'invalid JSON body' });
    if (endpoint) return asyncCall(endpoint.tool, endpoint.kind, body, res);
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
      case 'no_content':
        // No body at all: the runtime hands Flowgate a response whose body is null.
        record.status = 204;
        res.writeHead(204);
        return res.end();
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

  // ---- async tools ----------------------------------------------------------------

  function newTaskId() {
    return `remote-${randomBytes(8).toString('hex')}`;
  }

  /** {status, text} (a plain-text answer) or {status, json} for one script entry. */
  function statusAnswer(task, entry) {
    if ('httpStatus' in entry) return { status: entry.httpStatus, text: STATUS_CODES[entry.httpStatus] ?? 'Error' };
    if (entry.isError === true) return { status: 200, json: { isError: true, content: [{ type: 'text', text: entry.text }] } };
    if ('raw' in entry) return { status: 200, json: entry.raw };
    return { status: 200, json: 'task_id' in entry ? { ...entry } : { task_id: task.task_id, ...entry } };
  }

  async function asyncCall(tool, kind, body, res) {
    const call = { kind, at: res.fixtureRecord.at, body, task_id: null, httpStatus: null, response: undefined };
    tool.asyncCalls.push(call);
    if (tool.delayMs > 0) {
      const why = await sleep(tool.delayMs, res);
      if (why !== 'time') {
        res.destroy();
        return;
      }
    }
    // A string payload is a text/plain answer; anything else is sent as JSON.
    const answer = (status, payload) => {
      if (typeof payload !== 'string') return answerJson(res, call, payload, status);
      call.httpStatus = status;
      call.response = payload;
      send(res, status, payload);
    };
    if (kind === 'submit') {
      let response;
      let id = newTaskId();
      if (tool.submitResponse !== undefined) {
        response = typeof tool.submitResponse === 'function' ? await tool.submitResponse(body) : tool.submitResponse;
        if (isPlainObject(response) && typeof response.task_id === 'string') id = response.task_id;
      } else {
        response = { task_id: id, status: 'running' };
      }
      tool.tasks.set(id, {
        task_id: id,
        submitBody: body,
        script: tool.script ?? [{ status: 'completed', result: { echo: body } }],
        cursor: 0,
        statusCalls: 0,
        cancelCalls: 0,
        cancelled: false,
        submittedAt: call.at,
        cancelledAt: null,
      });
      call.task_id = id;
      return answerJson(res, call, response, 200);
    }
    if (typeof body.task_id !== 'string') return answer(400, { error: 'task_id is required' });
    call.task_id = body.task_id;
    const task = tool.tasks.get(body.task_id);
    if (!task) return answer(200, { task_id: body.task_id, status: 'failed', error_code: 'task_not_found', error: 'Task not found' });
    if (kind === 'status') {
      task.statusCalls += 1;
      if (task.cancelled) return answer(200, { task_id: task.task_id, status: 'cancelled' });
      const entry = task.script[Math.min(task.cursor, task.script.length - 1)];
      task.cursor += 1;
      if (entry.drop === true) {
        res.socket?.destroy();
        return;
      }
      const a = statusAnswer(task, entry);
      return 'text' in a ? answer(a.status, a.text) : answerJson(res, call, a.json, a.status);
    }
    // cancel
    task.cancelCalls += 1;
    if (task.cancelCalls <= tool.cancelFailures) return answer(500, 'Internal Server Error');
    if (!task.cancelled) {
      task.cancelled = true;
      task.cancelledAt = Date.now();
    }
    return answer(200, { task_id: task.task_id, status: 'cancelled' });
  }

  /** Sends any JSON value (send() treats strings as text, so JSON is encoded here). */
  function answerJson(res, call, value, status) {
    call.httpStatus = status;
    call.response = value;
    if (res.headersSent || res.destroyed) return;
    res.fixtureRecord.status = status;
    res.writeHead(status, { 'Content-Type': 'application/json' });
    res.end(JSON.stringify(value ?? null));
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
        holdResult: Boolean(spec.holdResult),
        released: false,
        waiters: new Set(),
        calls: 0,
      });
      return path;
    },

    /** Lets the held streams of the tool at `path` send their result (and later ones at once). */
    release(path) {
      const tool = tools.get(path);
      if (!tool) throw new Error(`release: no tool at ${path}`);
      tool.released = true;
      for (const w of [...tool.waiters]) w('released');
    },

    /**
     * Registers an async (submit/status/cancel) tool; returns {submitPath, statusPath,
     * cancelPath, calls}. spec: {apiKey (string, or null; required), script (array of status
     * answers, see the header), submitResponse (any JSON or (body) => JSON), cancelFailures,
     * delayMs}.
     */
    addAsyncTool(spec = {}) {
      if (spec.apiKey === undefined) throw new Error('addAsyncTool: apiKey is required (null for a tool without auth)');
      if (spec.apiKey !== null && (typeof spec.apiKey !== 'string' || !spec.apiKey)) {
        throw new Error('addAsyncTool: apiKey must be a non-empty string or null');
      }
      const script = spec.script === undefined ? null : validateScript(spec.script);
      const prefix = `/tools/${randomBytes(8).toString('hex')}`;
      const tool = {
        apiKey: spec.apiKey,
        script,
        submitResponse: spec.submitResponse,
        cancelFailures: nonNegInt(spec.cancelFailures, 'cancelFailures', 0),
        delayMs: nonNegInt(spec.delayMs, 'delayMs', 0),
        asyncCalls: [],
        tasks: new Map(),
      };
      const paths = {};
      for (const kind of ASYNC_KINDS) {
        paths[`${kind}Path`] = `${prefix}/${kind}`;
        asyncEndpoints.set(`${prefix}/${kind}`, { tool, kind });
      }
      return { ...paths, calls: tool.asyncCalls };
    },

    /** The `calls` of the async tool owning this path (any of its three), or [] if none. */
    callsFor(path) {
      return asyncEndpoints.get(path)?.tool.asyncCalls ?? [];
    },

    /** The tasks of the async tool owning this path, in submit order. */
    tasksOf(path) {
      return [...(asyncEndpoints.get(path)?.tool.tasks.values() ?? [])];
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
