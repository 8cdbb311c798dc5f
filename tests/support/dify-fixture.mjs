// Fake Dify Service API (base http://127.0.0.1:PORT/v1) for Flowgate's tests.
//
// Shapes follow /work/shared/reference/dify-mcp-server-and-service-api.md §5.
// One fixture serves many apps; each app is identified by its API key
// (`Authorization: Bearer <key>`), so concurrent tests never see each other's apps.
//
//   const dify = await startDifyFixture();
//   const key = dify.addApp({ mode: 'workflow', name: 'Echo', user_input_form: [...] });
//   ... point Flowgate at dify.baseUrl with key ...
//   dify.requestsFor(key)   // what Flowgate sent for this app
//   await dify.stop();
//
// Behaviours (addApp({ behaviour })) apply to the run endpoints only
// (/workflows/run, /chat-messages, /completion-messages); /info and /parameters
// always answer normally so the app can still be registered:
//   'ok'              normal answer
//   'http500'         500, text/plain body "Internal Server Error"
//   'dify_error'      400 {"code":"provider_quota_exceeded",...}
//   'workflow_failed' workflow apps: 200 with data.status "failed"; other modes: like 'ok'
//   'slow'            waits delayMs (default 30000) and then answers like 'ok'
// `delayMs` given explicitly delays every run answer, whatever the behaviour.
// Response mode "streaming" answers with SSE (`data: {json}\n\n`) in Dify's event shapes.

import http from 'node:http';
import { randomUUID, randomBytes } from 'node:crypto';

const KEY_ALPHABET = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';
const MODES = new Set(['workflow', 'chat', 'advanced-chat', 'agent-chat', 'completion']);
const CHAT_MODES = new Set(['chat', 'advanced-chat', 'agent-chat']);
const BEHAVIOURS = new Set(['ok', 'http500', 'dify_error', 'workflow_failed', 'slow']);

export function randomApiKey() {
  const bytes = randomBytes(24);
  let s = 'app-';
  for (const b of bytes) s += KEY_ALPHABET[b % KEY_ALPHABET.length];
  return s;
}

function difyError(status, code, message) {
  return { status, body: { code, message, status } };
}

const ERR_UNAUTHORIZED = () => difyError(401, 'unauthorized', 'Access token is invalid');
const ERR_NOT_FOUND = () =>
  difyError(404, 'not_found', 'The requested URL was not found on the server. If you entered the URL manually please check your spelling and try again.');
const ERR_METHOD = () => difyError(405, 'method_not_allowed', 'The method is not allowed for the requested URL.');
const ERR_BAD_JSON = () => difyError(400, 'bad_request', 'Invalid JSON payload received or JSON payload is empty.');
const ERR_QUOTA = () =>
  difyError(400, 'provider_quota_exceeded', 'Your quota for Dify Hosted Model Provider has been exhausted.');
const ERR_APP_UNAVAILABLE = (msg) => difyError(400, 'app_unavailable', msg);
const ERR_INVALID_PARAM = (msg) => difyError(400, 'invalid_param', msg);

const isPlainObject = (v) => v !== null && typeof v === 'object' && !Array.isArray(v);
const nowSec = () => Math.floor(Date.now() / 1000);

function usage(latencySec) {
  return {
    prompt_tokens: 12,
    prompt_unit_price: '0.001',
    prompt_price_unit: '0.001',
    prompt_price: '0.0000120',
    completion_tokens: 8,
    completion_unit_price: '0.002',
    completion_price_unit: '0.001',
    completion_price: '0.0000160',
    total_tokens: 20,
    total_price: '0.0000280',
    currency: 'USD',
    latency: latencySec,
  };
}

function chunkText(text) {
  // Split into a few chunks (keeping whitespace) so streaming clients must concatenate.
  const parts = String(text).match(/\S+\s*|\s+/g);
  return parts && parts.length ? parts : [''];
}

export async function startDifyFixture() {
  const apps = new Map(); // apiKey -> app spec (mutable)
  const requests = [];
  const pendingWaits = new Set(); // { timer, resolve }
  const streams = new Set();
  let stopped = false;
  let stopPromise = null;

  function wait(ms, res) {
    if (!ms || ms <= 0) return Promise.resolve(!stopped);
    return new Promise((resolve) => {
      const entry = {
        timer: setTimeout(() => finish(true), ms),
        resolve: (v) => finish(v),
      };
      const onClose = () => finish(false);
      function finish(v) {
        clearTimeout(entry.timer);
        pendingWaits.delete(entry);
        res.off('close', onClose);
        resolve(v && !stopped);
      }
      // The client going away also ends the wait (the answer would be discarded anyway).
      // (res, not req: IncomingMessage emits 'close' as soon as the body has been read.)
      res.on('close', onClose);
      pendingWaits.add(entry);
    });
  }

  function send(res, status, body, headers = {}) {
    if (res.headersSent || res.destroyed) return;
    if (typeof body === 'string') {
      res.writeHead(status, { 'Content-Type': 'text/plain; charset=utf-8', ...headers });
      res.end(body);
    } else {
      const text = JSON.stringify(body);
      res.writeHead(status, { 'Content-Type': 'application/json', ...headers });
      res.end(text);
    }
  }

  async function sendStream(res, events) {
    if (res.headersSent || res.destroyed) return;
    res.writeHead(200, {
      'Content-Type': 'text/event-stream; charset=utf-8',
      'Cache-Control': 'no-cache',
      Connection: 'keep-alive',
    });
    streams.add(res);
    try {
      for (const ev of events) {
        if (stopped || res.destroyed) return;
        res.write(`data: ${JSON.stringify(ev)}\n\n`);
        await new Promise((r) => setImmediate(r));
      }
      res.end();
    } finally {
      streams.delete(res);
    }
  }

  function authApp(req) {
    const h = req.headers.authorization;
    if (typeof h !== 'string') return null;
    const m = /^Bearer\s+(\S+)\s*$/i.exec(h);
    if (!m) return null;
    return apps.get(m[1]) ?? null;
  }

  // ---- run endpoints -------------------------------------------------------

  function validateResponseMode(body) {
    const rm = body.response_mode;
    if (rm === undefined || rm === null) return { mode: 'blocking' };
    if (rm !== 'blocking' && rm !== 'streaming') {
      return { error: ERR_INVALID_PARAM(`response_mode must be one of 'blocking', 'streaming'`) };
    }
    return { mode: rm };
  }

  function validateUserAndInputs(body, { inputsRequired = true } = {}) {
    if (typeof body.user !== 'string' || body.user.length === 0) {
      return ERR_INVALID_PARAM('user is required and must be a non-empty string');
    }
    if (body.inputs === undefined && !inputsRequired) return null;
    if (!isPlainObject(body.inputs)) return ERR_INVALID_PARAM('inputs is required and must be an object');
    return null;
  }

  async function preRun(app, res) {
    const explicitDelay = app.delayMs;
    const delay = app.behaviour === 'slow' ? (explicitDelay ?? 30000) : (explicitDelay ?? 0);
    if (delay > 0) {
      const ok = await wait(delay, res);
      if (!ok) {
        // Server stopping or client gone: drop the connection without an answer.
        res.destroy();
        return false;
      }
    }
    if (app.behaviour === 'http500') {
      send(res, 500, 'Internal Server Error');
      return false;
    }
    if (app.behaviour === 'dify_error') {
      const e = ERR_QUOTA();
      send(res, e.status, e.body);
      return false;
    }
    return true;
  }

  async function workflowRun(app, body, req, res) {
    if (app.mode !== 'workflow') {
      const e = ERR_APP_UNAVAILABLE('Only support workflow app.');
      return send(res, e.status, e.body);
    }
    const rm = validateResponseMode(body);
    if (rm.error) return send(res, rm.error.status, rm.error.body);
    const err = validateUserAndInputs(body);
    if (err) return send(res, err.status, err.body);
    if (!(await preRun(app, res))) return;

    const started = Date.now();
    const failed = app.behaviour === 'workflow_failed';
    let outputs;
    if (failed) outputs = {};
    else if (typeof app.outputs === 'function') outputs = await app.outputs(body.inputs);
    else if (app.outputs !== undefined) outputs = app.outputs;
    else outputs = { echo: body.inputs };

    const runId = randomUUID();
    const taskId = randomUUID();
    const workflowId = app.workflowId;
    const createdAt = nowSec();
    const data = {
      id: runId,
      workflow_id: workflowId,
      status: failed ? 'failed' : 'succeeded',
      outputs,
      error: failed ? 'Node LLM failed: model timeout' : null,
      elapsed_time: (Date.now() - started) / 1000 + 0.123,
      total_tokens: failed ? 0 : 20,
      total_steps: failed ? 2 : 3,
      created_at: createdAt,
      finished_at: nowSec(),
    };
    if (rm.mode === 'blocking') {
      return send(res, 200, { workflow_run_id: runId, task_id: taskId, data });
    }
    const base = { task_id: taskId, workflow_run_id: runId };
    return sendStream(res, [
      {
        event: 'workflow_started',
        ...base,
        data: { id: runId, workflow_id: workflowId, inputs: body.inputs, created_at: createdAt, reason: 'initial' },
      },
      { event: 'workflow_finished', ...base, data },
    ]);
  }

  function resolveConversation(app, body) {
    const cid = body.conversation_id;
    if (cid === undefined || cid === null || cid === '') {
      const id = randomUUID();
      app.conversations.add(id);
      return { id };
    }
    if (typeof cid !== 'string' || !app.conversations.has(cid)) {
      return { error: difyError(404, 'not_found', 'Conversation Not Exists.') };
    }
    return { id: cid };
  }

  async function chatMessages(app, body, req, res) {
    if (!CHAT_MODES.has(app.mode)) {
      const e = ERR_APP_UNAVAILABLE('App mode is invalid: chat-messages needs a chat, advanced-chat or agent-chat app.');
      return send(res, e.status, e.body);
    }
    const rm = validateResponseMode(body);
    if (rm.error) return send(res, rm.error.status, rm.error.body);
    if (typeof body.query !== 'string') {
      const e = ERR_INVALID_PARAM('query is required and must be a string');
      return send(res, e.status, e.body);
    }
    const err = validateUserAndInputs(body);
    if (err) return send(res, err.status, err.body);
    if (app.mode === 'agent-chat' && rm.mode === 'blocking') {
      const e = ERR_INVALID_PARAM('Agent Chat App does not support blocking mode');
      return send(res, e.status, e.body);
    }
    const conv = resolveConversation(app, body);
    if (conv.error) return send(res, conv.error.status, conv.error.body);
    if (!(await preRun(app, res))) return;
    const answer =
      typeof app.answer === 'function'
        ? await app.answer(body.query, body.inputs)
        : app.answer !== undefined
          ? app.answer
          : `echo: ${body.query}`;
    return messageAnswer(app, rm.mode, conv.id, String(answer), res);
  }

  async function completionMessages(app, body, req, res) {
    if (app.mode !== 'completion') {
      const e = ERR_APP_UNAVAILABLE('App mode is invalid: completion-messages needs a completion app.');
      return send(res, e.status, e.body);
    }
    const rm = validateResponseMode(body);
    if (rm.error) return send(res, rm.error.status, rm.error.body);
    const err = validateUserAndInputs(body);
    if (err) return send(res, err.status, err.body);
    if (body.query !== undefined && typeof body.query !== 'string') {
      const e = ERR_INVALID_PARAM('query must be a string');
      return send(res, e.status, e.body);
    }
    if (!(await preRun(app, res))) return;
    const answer =
      typeof app.answer === 'function'
        ? await app.answer(body.query ?? '', body.inputs)
        : app.answer !== undefined
          ? app.answer
          : `completion: ${JSON.stringify(body.inputs)}`;
    const convId = randomUUID();
    return messageAnswer(app, rm.mode, convId, String(answer), res);
  }

  function messageAnswer(app, responseMode, conversationId, answer, res) {
    const taskId = randomUUID();
    const messageId = randomUUID();
    const createdAt = nowSec();
    const metadata = { usage: usage(0.42), retriever_resources: [] };
    if (responseMode === 'blocking') {
      return send(res, 200, {
        event: 'message',
        task_id: taskId,
        id: messageId,
        message_id: messageId,
        conversation_id: conversationId,
        mode: app.mode,
        answer,
        metadata,
        created_at: createdAt,
      });
    }
    const base = { task_id: taskId, id: messageId, message_id: messageId, conversation_id: conversationId, created_at: createdAt };
    const events = [];
    if (app.mode === 'agent-chat') {
      const thoughtId = randomUUID();
      const thought = (t) => ({
        event: 'agent_thought',
        id: thoughtId,
        task_id: taskId,
        message_id: messageId,
        position: 1,
        thought: t,
        observation: '',
        tool: '',
        tool_input: '',
        message_files: [],
        conversation_id: conversationId,
        created_at: createdAt,
      });
      events.push(thought(''));
      for (const c of chunkText(answer)) events.push({ event: 'agent_message', ...base, answer: c });
      events.push(thought(answer));
    } else {
      for (const c of chunkText(answer)) events.push({ event: 'message', ...base, answer: c });
    }
    events.push({ event: 'message_end', task_id: taskId, id: messageId, message_id: messageId, conversation_id: conversationId, metadata });
    return sendStream(res, events);
  }

  // ---- dispatcher -----------------------------------------------------------

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
    const record = {
      method: req.method,
      path: url.pathname,
      query: Object.fromEntries(url.searchParams),
      headers: { ...req.headers },
      body,
      apiKey: /^Bearer\s+(\S+)/i.exec(req.headers.authorization ?? '')?.[1] ?? null,
      at: Date.now(),
    };
    requests.push(record);

    const p = url.pathname.replace(/\/+$/, '') || '/';
    const routes = {
      '/v1/info': 'GET',
      '/v1/parameters': 'GET',
      '/v1/workflows/run': 'POST',
      '/v1/chat-messages': 'POST',
      '/v1/completion-messages': 'POST',
    };
    let route = p;
    if (/^\/v1\/workflows\/[^/]+\/run$/.test(p)) route = '/v1/workflows/run';
    const method = routes[route];
    if (!method) {
      const e = ERR_NOT_FOUND();
      return send(res, e.status, e.body);
    }
    if (req.method !== method) {
      const e = ERR_METHOD();
      return send(res, e.status, e.body, { Allow: `${method}, OPTIONS` });
    }
    const app = authApp(req);
    if (!app) {
      const e = ERR_UNAUTHORIZED();
      return send(res, e.status, e.body);
    }
    record.app = app.apiKey;

    if (route === '/v1/info') {
      return send(res, 200, {
        name: app.name,
        description: app.description,
        tags: app.tags,
        mode: app.mode,
        author_name: 'fixture',
      });
    }
    if (route === '/v1/parameters') {
      return send(res, 200, {
        opening_statement: '',
        suggested_questions: [],
        suggested_questions_after_answer: { enabled: false },
        speech_to_text: { enabled: false },
        text_to_speech: { enabled: false },
        retriever_resource: { enabled: false },
        annotation_reply: { enabled: false },
        more_like_this: { enabled: false },
        user_input_form: app.user_input_form,
        sensitive_word_avoidance: { enabled: false },
        file_upload: { image: { enabled: false } },
        system_parameters: {
          file_size_limit: 15,
          image_file_size_limit: 10,
          audio_file_size_limit: 50,
          video_file_size_limit: 100,
        },
      });
    }

    // POST run endpoints: body must be a JSON object.
    if (badJson || !isPlainObject(body)) {
      const e = ERR_BAD_JSON();
      return send(res, e.status, e.body);
    }
    app.runCount += 1;
    if (route === '/v1/workflows/run') return workflowRun(app, body, req, res);
    if (route === '/v1/chat-messages') return chatMessages(app, body, req, res);
    return completionMessages(app, body, req, res);
  }

  const server = http.createServer((req, res) => {
    handle(req, res).catch((err) => {
      if (!res.headersSent && !res.destroyed) {
        send(res, 500, { code: 'fixture_error', message: String(err?.stack ?? err), status: 500 });
      } else {
        res.destroy();
      }
    });
  });
  server.keepAliveTimeout = 1000;

  await new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, '127.0.0.1', () => {
      server.off('error', reject);
      resolve();
    });
  });
  const { port } = server.address();
  const origin = `http://127.0.0.1:${port}`;

  function normaliseSpec(spec, apiKey) {
    const mode = spec.mode;
    if (!MODES.has(mode)) throw new Error(`addApp: mode must be one of ${[...MODES].join(', ')}; got ${mode}`);
    const behaviour = spec.behaviour ?? 'ok';
    if (!BEHAVIOURS.has(behaviour)) throw new Error(`addApp: unknown behaviour ${behaviour}`);
    return {
      apiKey,
      mode,
      name: spec.name ?? `Fixture ${mode} app`,
      description: spec.description ?? '',
      tags: spec.tags ?? [],
      user_input_form: spec.user_input_form ?? [],
      behaviour,
      delayMs: spec.delayMs,
      outputs: spec.outputs,
      answer: spec.answer,
    };
  }

  return {
    origin,
    baseUrl: `${origin}/v1`,
    port,
    requests,

    /** Register an app; returns its API key. */
    addApp(spec = {}) {
      const apiKey = spec.apiKey ?? randomApiKey();
      if (apps.has(apiKey)) throw new Error(`addApp: api key ${apiKey} already registered`);
      apps.set(apiKey, {
        ...normaliseSpec(spec, apiKey),
        workflowId: randomUUID(),
        conversations: new Set(),
        runCount: 0,
      });
      return apiKey;
    },

    /** Change an existing app (e.g. its user_input_form or behaviour) in place. */
    updateApp(apiKey, patch = {}) {
      const app = apps.get(apiKey);
      if (!app) throw new Error(`updateApp: unknown api key ${apiKey}`);
      const merged = normaliseSpec({ ...app, ...patch }, apiKey);
      Object.assign(app, merged);
      return apiKey;
    },

    /** Remove an app: its key answers 401 from now on (like a revoked Dify key). */
    removeApp(apiKey) {
      return apps.delete(apiKey);
    },

    /** Requests made with this app's API key (in arrival order). */
    requestsFor(apiKey) {
      return requests.filter((r) => r.apiKey === apiKey);
    },

    /** Conversation ids Dify has issued for a chat app. */
    conversationsOf(apiKey) {
      return [...(apps.get(apiKey)?.conversations ?? [])];
    },

    stop() {
      if (stopPromise) return stopPromise;
      stopped = true;
      for (const w of [...pendingWaits]) w.resolve(false);
      for (const s of [...streams]) s.destroy();
      stopPromise = new Promise((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      });
      return stopPromise;
    },
  };
}
