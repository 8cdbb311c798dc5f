// Fake Dify Service API (base http://127.0.0.1:PORT/v1) for Flowgate's tests.
//
// Shapes follow Dify's Service API reference (docs.dify.ai, "Workflow App API" and "Chat App API")
// as summarised in docs/backends.md.
// One fixture serves many apps; each app is identified by its API key
// (`Authorization: Bearer <key>`), so concurrent tests never see each other's apps.
//
// Standalone, to try Flowgate without a Dify: `node tests/support/dify-fixture.mjs --port 5001`
// serves a workflow app, a chat app and a workflow that takes files (keys printed; `--key K`
// fixes the workflow app's key, the chat app's is K-chat, the files app's K-files) until
// interrupted. `requests` grows with every call: fine for a try.
//
//   const dify = await startDifyFixture();
//   const key = dify.addApp({ mode: 'workflow', name: 'Echo', user_input_form: [...] });
//   ... point Flowgate at dify.baseUrl with key ...
//   dify.requestsFor(key)   // what Flowgate sent for this app
//   dify.stops              // stop calls accepted: [{ path, task_id, user, apiKey }]
//   dify.stopRefusals       // stop calls refused (unknown task, another user): see below
//   await dify.stop();
//
// Behaviours (addApp({ behaviour })) apply to the run endpoints only
// (/workflows/run, /chat-messages, /completion-messages); /info and /parameters
// always answer normally so the app can still be registered:
//   'ok'              normal answer
//   'http500'         500, text/plain body "Internal Server Error"
//   'dify_error'      400 {"code":"provider_quota_exceeded",...}
//   'rate_limited'    429, header Retry-After: 7, body
//                     {"code":"too_many_requests","message":"Too many requests, please retry later","status":429}
//   'workflow_failed' workflow apps: 200 with data.status "failed" (streaming: the LLM node's
//                     node_finished has status "failed", then workflow_finished "failed");
//                     other modes: like 'ok'
//   'slow'            waits delayMs (default 30000) and then answers like 'ok'
// `delayMs` given explicitly delays every run answer, whatever the behaviour (it is
// spent before the status line, so it also delays a stream's headers).
//
// ---- Streaming (`response_mode: "streaming"`) ------------------------------------
// 200, `Content-Type: text/event-stream; charset=utf-8`. Every event is one frame
// `data: <json>\n\n`; keep-alives are bare `event: ping\n\n` frames (PING_FRAME).
// Every JSON event has `event` and `task_id`; workflow events add `workflow_run_id`
// and `data`; chat/completion events add `message_id`, `id` (= message_id),
// `conversation_id` and `created_at`. Exact sequences (answers are split into 3 chunks,
// fewer only for answers shorter than 3 characters, at code-point boundaries):
//   workflow:       workflow_started; then for every node: node_started, node_finished;
//                   the text_chunk events come between node_started and node_finished of
//                   the host node (the last node of type "llm", else the last node);
//                   then workflow_finished {status, outputs, error, elapsed_time,
//                   total_tokens, total_steps (= number of nodes), created_at, finished_at}.
//                   text_chunk text = spec.text ?? outputs.text (if a string) ?? JSON.stringify(outputs).
//   advanced-chat:  like workflow, but the chunks are `message` events, every event also
//                   carries conversation_id/message_id/created_at, and a message_end
//                   follows workflow_finished.
//   chat, completion: message ×~3, message_end {metadata: {usage, retriever_resources}}.
//   agent-chat:     one agent_thought per spec.thoughts entry (default: one tool call,
//                   position 1), agent_thought (position n, thought ""), agent_message ×~3,
//                   agent_thought (position n, thought = the full answer), message_end.
//                   agentAnswer: false → no agent_message at all; the last agent_thought
//                   still carries the answer (the fall-back a client must use).
//   node_started.data  = {id, node_id, node_type, title, index (1-based), predecessor_node_id,
//                         inputs, created_at}
//   node_finished.data = {...those, process_data, outputs, status: "succeeded", error,
//                         elapsed_time, execution_metadata, finished_at}
//   workflow_started.data = {id, workflow_id, inputs, created_at, reason} (never the node
//                   count: callers know it from the spec: spec.nodes or DEFAULT_NODES[mode]).
//
// Stream options of addApp(spec) (all optional):
//   nodes          [{title, type, id?, outputs?}] workflow graph (workflow, advanced-chat);
//                  default DEFAULT_NODES[mode] (Start/LLM/End, Start/LLM/Answer).
//   text           workflow: the text streamed as text_chunk events.
//   thoughts       agent-chat: [{thought, tool, tool_input, observation}] before the answer
//                  (tool_input/observation objects are JSON-encoded, as Dify sends strings).
//   agentAnswer    agent-chat: false → no agent_message events (default true).
//   finalThought   agent-chat with agentAnswer: the thought of the final agent_thought
//                  (default: the answer), to tell the answer from a thought that differs.
//   holdBefore     an event name (e.g. 'workflow_finished', 'message_end'): the stream waits
//                  before the first event of that name until release(apiKey) (or a stop call,
//                  the client leaving, the fixture stopping); the request record has
//                  held: true while it waits. Lets a test see what arrives before the run ends.
//   eventDelayMs   wait this long before every event after the first (default 0); pings
//                  are written together with the event they precede.
//   pingEvery      a ping frame before every pingEvery-th event (default 3, 0 = none);
//                  never first, never last.
//   events         override: an array of objects (sent as `data: JSON\n\n`) or strings
//                  (sent verbatim, nothing added); no pings, no repeat. streamBehaviour
//                  still applies, treating the first entry as the start and the last as
//                  the final event.
//   repeat         N extra answer chunks after the normal ones (text_chunk for workflow,
//                  message for chat/advanced-chat/completion, agent_message for agent-chat,
//                  agent_thought when agentAnswer is false), each carrying
//                  filler(chunkBytes): chunkBytes bytes of ASCII text (default 1024).
//                  Generated lazily; the writer waits for 'drain' whenever res.write()
//                  returns false, so a client that stops reading stops the writer.
//   streamBehaviour
//     'ok'               (default) the whole stream.
//     'end_early'        close after the last answer chunk: no node_finished of the host
//                        node onwards, no workflow_finished, no message_end (override: the
//                        last entry is dropped).
//     'error_event'      the events before the first answer chunk, then
//                        {event:"error", task_id, (workflow_run_id | message_id,
//                        conversation_id), status:400, code:"provider_quota_exceeded",
//                        message:"..."} and close (override: after the first entry).
//     'malformed'        a frame `data: {not json\n\n` (MALFORMED_FRAME) right after the
//                        first event, then everything else normally.
//     'hang_after_first' headers and the first event, then silence; the socket stays open
//                        until the client goes away, a stop call arrives or the fixture stops.
//     'no_first_byte'    no status line at all, until the client goes away / fixture stops.
//
// Stop endpoints (POST, body {user}): /v1/workflows/tasks/:task_id/stop (workflow apps),
// /v1/chat-messages/:task_id/stop (chat modes), /v1/completion-messages/:task_id/stop.
// Stricter than Dify (which answers success to anything), so that a wrong stop call fails a
// test: the task id must be one this fixture issued to a run of the same app (blocking or
// streaming, running or finished) on the endpoint family of that run, else 404
// {"code":"not_found","message":"Task not found"}; the user must be the one that started the
// run, else 403 {"code":"forbidden","message":"The task belongs to another user"}. An accepted
// call answers {"result":"success"} (also when the run has already finished, like Dify) and is
// appended to `stops`; a refused one is appended to `stopRefusals` ({path, task_id, user,
// apiKey, status, code}). If an accepted call names a running stream, that stream ends at once:
// workflow → workflow_finished {status:"stopped", outputs:{}, error:null, total_steps: nodes
// started so far}; advanced-chat → that plus message_end; other chat modes / completion →
// message_end; then the stream closes. A stop without a user is 400 invalid_param, one on the
// wrong family for the app's mode 400 app_unavailable (neither is added to either list).
//
// ---- Request checks (run endpoints) ------------------------------------------------------
// Stricter than Dify where Dify would silently accept a wrong request:
//   response_mode  required: 'blocking' or 'streaming' (400 invalid_param otherwise).
//   user           a non-empty string; inputs an object.
//   inputs         checked against the app's user_input_form (both the {"text-input": {...}}
//                  and the {"type": ..., ...} shapes): every key must be a variable of the form;
//                  a required variable must be present and not empty/null; text-input and
//                  paragraph take a string of at most max_length characters, select one of its
//                  options, number a finite number, checkbox a boolean, json_object an object;
//                  external_data_tool values are not checked; file and file-list values (and a
//                  chat's `files`) are checked as Dify checks them (dify-files.mjs). A violation
//                  is 400 invalid_param naming the variable.
//
// ---- Files (dify-files.mjs has the rules) -------------------------------------------
// POST /v1/files/upload (multipart `file` + `user`) → 201 {id, name, size, extension,
// mime_type, created_by, created_at}; size and type refusals as Dify's. Members: uploads (Map
// id → {..., apiKey, user, data: Buffer}), fileOutput({name, mimeType, data}) (a Dify file
// object whose url this fixture serves: GET /files/tools/<id>.<ext>, no key needed, as Dify's
// signed URLs). addApp options: fileUpload (the app's file_upload feature, /parameters shows
// it; default image off), systemParameters (default Dify's 15/10/50/100 MB), uploadLimitBytes
// (one byte limit for every upload, for tests), uploadBlacklist (extensions refused, 415),
// messageFiles (file objects a chat answer carries: a message_file event each before
// message_end; a blocking answer has none, as in Dify).
//   query          chat modes: a string.
//   conversation_id chat modes, optional: absent or "" starts a new conversation, bound to the
//                  request's user; a UUID continues one only for the user that started it:
//                  another user's (or an unknown) id is 404 {"code":"not_found","message":
//                  "Conversation Not Exists."}, as Dify answers; not a UUID: 400 invalid_param.
//                  The default answer of a continued conversation names its earlier turns:
//                  `echo: <query> (turn N; earlier: "<q1>", "<q2>")`; an answer function gets
//                  (query, inputs, {conversationId, queries}).
// Every request refused by these checks is still recorded in `requests`.
//
// ---- Workflow runs and GET /v1/workflows/run/:workflow_run_id ----------------------
// Every run POST /v1/workflows/run starts (blocking or streaming, once validation and the
// behaviour checks have passed) is remembered by its workflow_run_id: app, user, inputs,
// outputs, task_id, start time (`runs`, a Map). Its state follows the clock:
//   status 'running' (outputs null, finished_at null, total_steps = nodes started so far,
//   total_tokens 0) until runDurationMs after the start (and, for a stream, until the stream
//   has ended), then the final state: 'succeeded' (outputs, total_steps = node count,
//   total_tokens 20) or, for behaviour 'workflow_failed', 'failed' (outputs {}, error
//   "Node LLM failed: model timeout", total_steps min(2, node count), total_tokens 0).
//   A stop call (POST /v1/workflows/tasks/:task_id/stop, same app and user) on a run that is
//   still running makes it 'stopped' for good (outputs {}, error null, total_steps = nodes
//   started by then). A client going away does NOT stop a run: only the stop call does.
// addApp options:
//   runDurationMs   (default 0) how long a run stays 'running'.
//                   Streaming: workflow_started is sent at once (it carries workflow_run_id
//                   and task_id), then PING_FRAME every RUN_PING_INTERVAL_MS (500 ms) until
//                   runDurationMs has passed since the start, then the node and finish events
//                   (eventDelayMs/pingEvery still apply to those). The client may disconnect
//                   after workflow_started; the run goes on. A stop call during the wait ends
//                   the stream with workflow_finished {status:"stopped", total_steps: 0}.
//                   Blocking: the answer waits until runDurationMs has passed (like Dify's
//                   blocking mode), then is the usual blocking body; a stop call during the
//                   wait answers at once with data.status "stopped" (outputs {}).
//   runPollFailures (default 0) the first N GETs of every run of the app answer 500,
//                   text/plain "Internal Server Error" (a flaky status endpoint).
// GET /v1/workflows/run/:workflow_run_id (Bearer key of the app that started the run) →
//   200 {id, workflow_id, status, inputs (JSON string of the request's inputs, as Dify
//   sends it), outputs, error, total_steps, total_tokens, created_at, finished_at
//   (unix seconds; finished_at null while running), elapsed_time (seconds, float)}.
//   A run id unknown to this app → 404 {"code":"not_found","message":"Workflow run not
//   found","status":404}; a chat/completion app → 400 app_unavailable. Not subject to
//   behaviour/delayMs. Run POSTs and GETs are recorded in `requests` with runId.
//
// Exports besides startDifyFixture/randomApiKey: PING_FRAME, MALFORMED_FRAME, DEFAULT_NODES,
// RUN_PING_INTERVAL_MS, splitChunks(text, n = 3) (how answers are chunked), filler(bytes)
// (the repeat text). Fixture members for runs: runs (Map workflow_run_id → run record) and
// runState(id) (the body GET would answer now, without counting as a GET; undefined if unknown).
//
// Extra fields on the records in `requests` for run calls: taskId (and runId for workflow
// runs and run GETs); for streaming calls
// also streaming: true, sentBytes (SSE body bytes written so far), clientAborted (true once
// the client went away before the stream was complete; false otherwise), stopped (true
// when a stop call ended the stream).

import { randomUUID, randomBytes } from 'node:crypto';

import { realpathSync } from 'node:fs';
import { pathToFileURL } from 'node:url';

import { listenLoopback, readBody } from './loopback-server.mjs';
import { DEFAULT_SYSTEM_PARAMETERS, fileObject, filesProblem, messageFileEvent, readRaw, upload } from './dify-files.mjs';

const KEY_ALPHABET = 'ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789';
const MODES = new Set(['workflow', 'chat', 'advanced-chat', 'agent-chat', 'completion']);
const CHAT_MODES = new Set(['chat', 'advanced-chat', 'agent-chat']);
const UUID_RE = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/i;
const BEHAVIOURS = new Set(['ok', 'http500', 'dify_error', 'workflow_failed', 'slow', 'rate_limited']);
const STREAM_BEHAVIOURS = new Set(['ok', 'end_early', 'error_event', 'malformed', 'hang_after_first', 'no_first_byte']);

/** Pings while a streamed run with runDurationMs is running come this often. */
export const RUN_PING_INTERVAL_MS = 500;
/** The keep-alive frame, verbatim. */
export const PING_FRAME = 'event: ping\n\n';
/** The broken frame sent by streamBehaviour 'malformed', verbatim. */
export const MALFORMED_FRAME = 'data: {not json\n\n';
/** The graph used when addApp gets no `nodes` (modes without a graph have none). */
export const DEFAULT_NODES = Object.freeze({
  workflow: Object.freeze([
    Object.freeze({ title: 'Start', type: 'start' }),
    Object.freeze({ title: 'LLM', type: 'llm' }),
    Object.freeze({ title: 'End', type: 'end' }),
  ]),
  'advanced-chat': Object.freeze([
    Object.freeze({ title: 'Start', type: 'start' }),
    Object.freeze({ title: 'LLM', type: 'llm' }),
    Object.freeze({ title: 'Answer', type: 'answer' }),
  ]),
});

const SSE_HEADERS = {
  'Content-Type': 'text/event-stream; charset=utf-8',
  'Cache-Control': 'no-cache',
  Connection: 'keep-alive',
};
const QUOTA_MESSAGE = 'Your quota for Dify Hosted Model Provider has been exhausted.';

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
const ERR_QUOTA = () => difyError(400, 'provider_quota_exceeded', QUOTA_MESSAGE);
const ERR_RATE_LIMITED = () => difyError(429, 'too_many_requests', 'Too many requests, please retry later');
const ERR_APP_UNAVAILABLE = (msg) => difyError(400, 'app_unavailable', msg);
const ERR_INVALID_PARAM = (msg) => difyError(400, 'invalid_param', msg);
const ERR_RUN_NOT_FOUND = () => difyError(404, 'not_found', 'Workflow run not found');
const RUN_FAILED_ERROR = 'Node LLM failed: model timeout';

const isPlainObject = (v) => v !== null && typeof v === 'object' && !Array.isArray(v);
const nowSec = () => Math.floor(Date.now() / 1000);
const nextTick = () => new Promise((r) => setImmediate(r));

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

/** Split text into (at most) n chunks at code-point boundaries; concatenating them gives text back. */
export function splitChunks(text, n = 3) {
  const cps = Array.from(String(text));
  if (cps.length === 0) return [''];
  const k = Math.min(n, cps.length);
  const out = [];
  for (let i = 0; i < k; i++) {
    out.push(cps.slice(Math.floor((i * cps.length) / k), Math.floor(((i + 1) * cps.length) / k)).join(''));
  }
  return out;
}

/** `bytes` bytes of ASCII text (the content of every `repeat` chunk). */
export function filler(bytes) {
  const base = 'The quick brown fox jumps over the lazy dog. ';
  return base.repeat(Math.ceil(bytes / base.length)).slice(0, bytes);
}

/** The variables of a Dify user_input_form, either shape: [{type, variable, label, required, ...}]. */
function formVariables(form) {
  const out = [];
  for (const item of Array.isArray(form) ? form : []) {
    if (!isPlainObject(item)) continue;
    if (typeof item.type === 'string' && typeof item.variable === 'string') {
      out.push(item);
      continue;
    }
    const [type] = Object.keys(item);
    if (type && isPlainObject(item[type])) out.push({ type, ...item[type] });
  }
  return out;
}

/** Why `inputs` does not fit the form (as Dify's invalid_param message), or null. */
function formProblem(form, inputs) {
  const vars = formVariables(form);
  const byName = new Map(vars.map((v) => [v.variable, v]));
  for (const key of Object.keys(inputs)) {
    if (!byName.has(key)) return `${key} is not a variable of this app's input form`;
  }
  for (const v of vars) {
    const value = inputs[v.variable];
    const absent = value === undefined || value === null || value === '';
    if (absent) {
      if (v.required) return `${v.variable} is required in input form`;
      continue;
    }
    switch (v.type) {
      case 'text-input':
      case 'paragraph':
        if (typeof value !== 'string') return `${v.variable} in input form must be a string`;
        if (Number.isInteger(v.max_length) && v.max_length > 0 && Array.from(value).length > v.max_length) {
          return `${v.variable} in input form must be less than ${v.max_length} characters`;
        }
        break;
      case 'select':
        if (typeof value !== 'string') return `${v.variable} in input form must be a string`;
        if (Array.isArray(v.options) && !v.options.includes(value)) {
          return `${v.variable} in input form must be one of the following: ${JSON.stringify(v.options)}`;
        }
        break;
      case 'number':
        if (typeof value !== 'number' || !Number.isFinite(value)) return `${v.variable} in input form must be a valid number`;
        break;
      case 'checkbox':
        if (typeof value !== 'boolean') return `${v.variable} in input form must be a boolean`;
        break;
      case 'json_object':
        if (!isPlainObject(value)) return `${v.variable} in input form must be a JSON object`;
        break;
      default: // file, file-list, external_data_tool: not checked
        break;
    }
  }
  return null;
}

const jsonString = (v) => (typeof v === 'string' ? v : JSON.stringify(v ?? ''));

function nonNegInt(v, name, dflt) {
  if (v === undefined || v === null) return dflt;
  if (!Number.isInteger(v) || v < 0) throw new Error(`addApp: ${name} must be a non-negative integer; got ${v}`);
  return v;
}

function normaliseNodes(nodes, mode) {
  const list = nodes ?? DEFAULT_NODES[mode];
  if (list === undefined) return undefined;
  if (!Array.isArray(list) || list.length === 0) throw new Error('addApp: nodes must be a non-empty array of {title, type}');
  return list.map((n, i) => {
    if (!isPlainObject(n)) throw new Error('addApp: nodes must be a non-empty array of {title, type}');
    const type = n.type ?? 'code';
    return { id: n.id ?? `${type}-${i + 1}`, title: n.title ?? type, type, outputs: n.outputs };
  });
}

export async function startDifyFixture({ port: listenPort = 0 } = {}) {
  const apps = new Map(); // apiKey -> app spec (mutable)
  const requests = [];
  const stops = [];
  const stopRefusals = [];
  const issuedTasks = new Map(); // task_id -> { apiKey, user, kind } for every run answered
  const pendingWaits = new Set(); // { resolve(why) }
  const streams = new Set();
  const running = new Map(); // task_id -> stream ctx
  const holding = new Set(); // stream ctxs waiting at their app's holdBefore event
  const runs = new Map(); // workflow_run_id -> run record
  const runsByTask = new Map(); // task_id -> run record
  const uploads = new Map(); // upload id -> upload record (dify-files.mjs)
  const served = new Map(); // path -> {data, mimeType}: the files of fileOutput()
  let stopped = false;
  let stopPromise = null;

  const isClosed = (res) => res.fixtureClosed || res.destroyed || Boolean(res.socket?.destroyed);

  /**
   * Waits for the first of: `ms` elapsed ('time'), 'drain' on res ('drain', when drain is
   * set), the client going away ('closed'), a stop call for ctx ('woken'), the fixture
   * stopping ('fixture'). Without ms and drain it waits for the last three only.
   */
  function pause(res, ctx, { ms, drain = false } = {}) {
    if (stopped) return Promise.resolve('fixture');
    if (isClosed(res)) return Promise.resolve('closed');
    if (ctx?.stopRequested) return Promise.resolve('woken');
    return new Promise((resolve) => {
      let settled = false;
      let timer = null;
      const entry = { resolve: (why) => done(why) };
      // (res, not req: IncomingMessage emits 'close' as soon as the body has been read.)
      const onClose = () => done('closed');
      const onDrain = () => done('drain');
      function done(why) {
        if (settled) return;
        settled = true;
        if (timer) clearTimeout(timer);
        res.off('close', onClose);
        res.off('drain', onDrain);
        pendingWaits.delete(entry);
        if (ctx && ctx.wake === entry.resolve) ctx.wake = null;
        resolve(stopped ? 'fixture' : why);
      }
      if (ms !== undefined && ms !== null) timer = setTimeout(() => done('time'), ms);
      res.on('close', onClose);
      if (drain) res.on('drain', onDrain);
      pendingWaits.add(entry);
      if (ctx) ctx.wake = entry.resolve;
    });
  }

  async function wait(ms, res) {
    if (!ms || ms <= 0) return !stopped;
    // The client going away also ends the wait (the answer would be discarded anyway).
    return (await pause(res, null, { ms })) === 'time';
  }

  // With a Content-Length, as Dify's answers have (werkzeug sets it on every body it is given
  // whole); Node would otherwise send them chunked.
  function send(res, status, body, headers = {}) {
    if (res.headersSent || res.destroyed) return;
    const [type, text] = typeof body === 'string' ? ['text/plain; charset=utf-8', body] : ['application/json', JSON.stringify(body)];
    res.writeHead(status, { 'Content-Type': type, 'Content-Length': Buffer.byteLength(text), ...headers });
    res.end(text);
  }

  // ---- streaming -------------------------------------------------------------
  //
  // A stream is an iterable of frames { phase, obj | raw }: phase 'pre' (before the first
  // answer chunk), 'chunk' (answer chunks) or 'post' (after the last chunk). streamFrames
  // writes them, applying the app's stream options.

  function newStream(app, res, { kind, taskId, user, stopFrames, errorEvent, run = null }) {
    const ctx = {
      app,
      run, // the workflow run record (workflow streams only)
      kind, // 'workflow' | 'chat' | 'completion' (which stop endpoint applies)
      taskId,
      user,
      record: res.fixtureRecord,
      stopRequested: false,
      wake: null,
      steps: 0,
      stopFrames,
      errorEvent,
      requestStop() {
        ctx.stopRequested = true;
        ctx.wake?.('woken');
      },
    };
    return ctx;
  }

  async function emit(res, ctx, frame) {
    if (stopped || res.writableEnded || isClosed(res)) return false;
    const text = frame.raw ?? `data: ${JSON.stringify(frame.obj)}\n\n`;
    ctx.record.sentBytes += Buffer.byteLength(text);
    if (res.write(text)) return true;
    // Backpressure: wait for the socket to drain (or a stop call, which writes on anyway).
    const why = await pause(res, ctx, { drain: true });
    return why === 'drain' || why === 'woken';
  }

  function* overrideFrames(events) {
    const n = events.length;
    for (let i = 0; i < n; i++) {
      const phase = n === 1 ? 'post' : i === 0 ? 'pre' : i === n - 1 ? 'post' : 'chunk';
      const e = events[i];
      yield typeof e === 'string' ? { phase, raw: e } : { phase, obj: e };
    }
  }

  async function streamFrames(res, ctx, generated) {
    const { app, record } = ctx;
    if (res.headersSent || isClosed(res)) return;
    record.streaming = true;
    record.clientAborted = false;
    record.sentBytes = 0;
    const override = Array.isArray(app.events);
    const frames = override ? overrideFrames(app.events) : generated;
    const behaviour = app.streamBehaviour;

    streams.add(res);
    try {
      if (behaviour === 'no_first_byte') {
        await pause(res, null); // until the client goes away or the fixture stops
        res.destroy();
        return;
      }
      res.writeHead(200, SSE_HEADERS);
      running.set(ctx.taskId, ctx);
      let sent = 0; // events written (pings and the malformed frame not counted)
      let errored = false;
      for (const f of frames) {
        if (behaviour === 'end_early' && f.phase === 'post') break;
        let frame = f;
        if (behaviour === 'error_event' && f.phase !== 'pre') {
          frame = { obj: ctx.errorEvent() };
          errored = true;
        }
        if (sent > 0) {
          if (app.eventDelayMs > 0) {
            const why = await pause(res, ctx, { ms: app.eventDelayMs });
            if (why === 'closed' || why === 'fixture') return;
          } else {
            await nextTick();
          }
        }
        if (app.holdBefore !== undefined && frame.obj?.event === app.holdBefore && !app.released && !ctx.stopRequested) {
          record.held = true;
          holding.add(ctx);
          let why;
          try {
            do why = await pause(res, ctx);
            while (why === 'released' && !app.released);
          } finally {
            holding.delete(ctx);
            record.held = false;
          }
          if (why === 'closed' || why === 'fixture') return;
        }
        if (ctx.stopRequested) {
          errored = false;
          break;
        }
        if (sent > 0 && !override && app.pingEvery > 0 && sent % app.pingEvery === 0) {
          if (!(await emit(res, ctx, { raw: PING_FRAME }))) return;
        }
        if (!(await emit(res, ctx, frame))) return;
        sent += 1;
        if (errored || ctx.stopRequested) break;
        if (sent === 1 && behaviour === 'malformed') {
          if (!(await emit(res, ctx, { raw: MALFORMED_FRAME }))) return;
        }
        if (sent === 1 && behaviour === 'hang_after_first') {
          const why = await pause(res, ctx);
          if (why !== 'woken') return;
          break;
        }
        if (sent === 1 && ctx.run && ctx.run.durationMs > 0) {
          // The run is "running": keep the stream alive with pings until its duration is over.
          const why = await runWait(res, ctx);
          if (why === 'closed' || why === 'fixture') return;
          if (why === 'woken') break; // before the next frame is generated (no node started)
        }
      }
      if (ctx.stopRequested && !errored) {
        record.stopped = true;
        for (const f of ctx.stopFrames()) if (!(await emit(res, ctx, f))) return;
      }
      res.end();
    } finally {
      streams.delete(res);
      if (running.get(ctx.taskId) === ctx) running.delete(ctx.taskId);
      if (ctx.run && ctx.run.streamEndedAt === null) ctx.run.streamEndedAt = Date.now();
    }
  }

  /** Pings every RUN_PING_INTERVAL_MS until the run's duration is over: 'time' | 'woken' | 'closed' | 'fixture'. */
  async function runWait(res, ctx) {
    const until = ctx.run.startedAt + ctx.run.durationMs;
    for (;;) {
      const left = until - Date.now();
      if (left <= 0) return 'time';
      const why = await pause(res, ctx, { ms: Math.min(RUN_PING_INTERVAL_MS, left) });
      if (why !== 'time') return why;
      // No ping in the run's last moments: a timer can fire a millisecond before the clock
      // reaches `until`, and a ping then would land on the run's end (the next event follows).
      if (until - Date.now() > RUN_PING_INTERVAL_MS / 10 && !(await emit(res, ctx, { raw: PING_FRAME }))) return 'closed';
    }
  }

  /** Chunks of `text` as `eventName` events (plus the app's `repeat` filler chunks), lazily. */
  function* answerChunks(app, text, makeEvent) {
    for (const c of splitChunks(text)) yield { phase: 'chunk', obj: makeEvent(c) };
    if (app.repeat > 0) {
      const f = filler(app.chunkBytes);
      for (let i = 0; i < app.repeat; i++) yield { phase: 'chunk', obj: makeEvent(f) };
    }
  }

  function hostIndex(nodes) {
    for (let i = nodes.length - 1; i >= 0; i--) if (nodes[i].type === 'llm') return i;
    return nodes.length - 1;
  }

  /** workflow_started, node_started/node_finished per node (chunks inside the host node), workflow_finished, tail. */
  function* graphFrames(ctx, o) {
    const { nodes } = o;
    const host = hostIndex(nodes);
    let phase = 'pre';
    yield {
      phase,
      obj: {
        event: 'workflow_started',
        ...o.base,
        data: { id: o.runId, workflow_id: o.workflowId, inputs: o.inputs, created_at: o.createdAt, reason: 'initial' },
      },
    };
    let prev = null;
    for (let i = 0; i < nodes.length; i++) {
      const n = nodes[i];
      const started = Date.now();
      const common = {
        id: randomUUID(),
        node_id: n.id,
        node_type: n.type,
        title: n.title,
        index: i + 1,
        predecessor_node_id: prev,
        inputs: i === 0 ? o.inputs : {},
        created_at: nowSec(),
      };
      ctx.steps = i + 1;
      yield { phase, obj: { event: 'node_started', ...o.base, data: common } };
      const failedHere = o.failed && i === host;
      if (i === host && !o.failed) {
        yield* o.chunks();
        phase = 'post';
      }
      if (failedHere) phase = 'post';
      yield {
        phase,
        obj: {
          event: 'node_finished',
          ...o.base,
          data: {
            ...common,
            process_data: null,
            outputs: failedHere ? null : o.nodeOutputs(n),
            status: failedHere ? 'failed' : 'succeeded',
            error: failedHere ? 'model timeout' : null,
            elapsed_time: (Date.now() - started) / 1000 + 0.01,
            execution_metadata: n.type === 'llm' && !failedHere ? { total_tokens: 20, total_price: '0.0000280', currency: 'USD' } : null,
            finished_at: nowSec(),
          },
        },
      };
      prev = n.id;
      if (failedHere) break;
    }
    yield { phase: 'post', obj: { event: 'workflow_finished', ...o.base, data: o.finished(o.failed ? 'failed' : 'succeeded', ctx.steps) } };
    yield* o.tail();
  }

  function finishedData({ runId, workflowId, createdAt, started, outputs }) {
    return (status, steps) => ({
      id: runId,
      workflow_id: workflowId,
      status,
      outputs: status === 'succeeded' ? outputs : {},
      error: status === 'failed' ? 'Node LLM failed: model timeout' : null,
      elapsed_time: (Date.now() - started) / 1000 + 0.123,
      total_tokens: status === 'succeeded' ? 20 : 0,
      total_steps: steps,
      created_at: createdAt,
      finished_at: nowSec(),
    });
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
    if (rm === undefined || rm === null) {
      return { error: ERR_INVALID_PARAM(`response_mode is required: 'blocking' or 'streaming'`) };
    }
    if (rm !== 'blocking' && rm !== 'streaming') {
      return { error: ERR_INVALID_PARAM(`response_mode must be one of 'blocking', 'streaming'`) };
    }
    return { mode: rm };
  }

  function validateUserAndInputs(app, body) {
    if (typeof body.user !== 'string' || body.user.length === 0) {
      return ERR_INVALID_PARAM('user is required and must be a non-empty string');
    }
    if (!isPlainObject(body.inputs)) return ERR_INVALID_PARAM('inputs is required and must be an object');
    const problem =
      formProblem(app.user_input_form, body.inputs) ?? filesProblem(app, body, formVariables(app.user_input_form), uploads);
    return problem ? ERR_INVALID_PARAM(problem) : null;
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
    if (app.behaviour === 'rate_limited') {
      const e = ERR_RATE_LIMITED();
      send(res, e.status, e.body, { 'Retry-After': '7' });
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
    const err = validateUserAndInputs(app, body);
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
    res.fixtureRecord.taskId = taskId;
    res.fixtureRecord.runId = runId;
    issuedTasks.set(taskId, { apiKey: app.apiKey, user: body.user, kind: 'workflow' });
    const workflowId = app.workflowId;
    const createdAt = nowSec();
    const nodeCount = app.nodes.length;
    const run = {
      id: runId,
      workflowId,
      apiKey: app.apiKey,
      user: body.user,
      taskId,
      responseMode: rm.mode,
      inputs: body.inputs,
      outputs,
      failed,
      nodeCount,
      durationMs: app.runDurationMs,
      startedAt: started,
      createdAt,
      streaming: rm.mode === 'streaming',
      streamEndedAt: null,
      stream: null, // the stream ctx (streaming runs)
      stoppedAt: null,
      stopSteps: 0,
      gets: 0, // GET /workflows/run/:id calls so far
      // pause() hooks (blocking runs wait on the run itself):
      stopRequested: false,
      wake: null,
    };
    runs.set(runId, run);
    runsByTask.set(taskId, run);
    if (rm.mode === 'blocking') {
      if (run.durationMs > 0) {
        const left = run.startedAt + run.durationMs - Date.now();
        const why = left > 0 ? await pause(res, run, { ms: left }) : 'time';
        if (why === 'closed' || why === 'fixture') {
          // The client is gone (the run goes on regardless) or the fixture is stopping.
          res.destroy();
          return;
        }
      }
      const stoppedRun = run.stoppedAt !== null;
      const data = {
        id: runId,
        workflow_id: workflowId,
        status: stoppedRun ? 'stopped' : failed ? 'failed' : 'succeeded',
        outputs: stoppedRun ? {} : outputs,
        error: !stoppedRun && failed ? RUN_FAILED_ERROR : null,
        elapsed_time: (Date.now() - started) / 1000 + 0.123,
        total_tokens: stoppedRun || failed ? 0 : 20,
        total_steps: stoppedRun ? 0 : failed ? Math.min(2, nodeCount) : nodeCount,
        created_at: createdAt,
        finished_at: nowSec(),
      };
      return send(res, 200, { workflow_run_id: runId, task_id: taskId, data });
    }

    const base = { task_id: taskId, workflow_run_id: runId };
    const finished = finishedData({ runId, workflowId, createdAt, started, outputs });
    const text =
      typeof app.text === 'string'
        ? app.text
        : typeof outputs?.text === 'string'
          ? outputs.text
          : (JSON.stringify(outputs) ?? '');
    const host = app.nodes[hostIndex(app.nodes)];
    const ctx = newStream(app, res, {
      kind: 'workflow',
      taskId,
      user: body.user,
      run,
      stopFrames: () => [{ obj: { event: 'workflow_finished', ...base, data: finished('stopped', ctx.steps) } }],
      errorEvent: () => ({ event: 'error', ...base, status: 400, code: 'provider_quota_exceeded', message: QUOTA_MESSAGE }),
    });
    const frames = graphFrames(ctx, {
      nodes: app.nodes,
      base,
      runId,
      workflowId,
      createdAt,
      inputs: body.inputs,
      failed,
      chunks: () =>
        answerChunks(app, text, (t) => ({
          event: 'text_chunk',
          ...base,
          data: { text: t, from_variable_selector: [host.id, 'text'] },
        })),
      nodeOutputs: (n) =>
        n.outputs ??
        (n.type === 'start'
          ? { ...body.inputs }
          : n.type === 'llm'
            ? { text, usage: usage(0.42), finish_reason: 'stop' }
            : n.type === 'end'
              ? outputs
              : {}),
      finished,
      tail: () => [],
    });
    run.stream = ctx;
    try {
      return await streamFrames(res, ctx, frames);
    } finally {
      if (run.streamEndedAt === null) run.streamEndedAt = Date.now();
    }
  }

  // ---- workflow run records ---------------------------------------------------

  function runStatus(run, now = Date.now()) {
    if (run.stoppedAt !== null) return 'stopped';
    if (now < run.startedAt + run.durationMs) return 'running';
    if (run.streaming && run.streamEndedAt === null) return 'running';
    return run.failed ? 'failed' : 'succeeded';
  }

  /** The body of GET /v1/workflows/run/:id for this run, now. */
  function runView(run) {
    const now = Date.now();
    const status = runStatus(run, now);
    let endedMs = null;
    if (status === 'stopped') endedMs = run.stoppedAt;
    else if (status !== 'running') endedMs = Math.max(run.startedAt + run.durationMs, run.streamEndedAt ?? run.startedAt);
    const steps =
      status === 'running'
        ? (run.stream?.steps ?? 0)
        : status === 'stopped'
          ? run.stopSteps
          : status === 'failed'
            ? Math.min(2, run.nodeCount)
            : run.nodeCount;
    return {
      id: run.id,
      workflow_id: run.workflowId,
      status,
      inputs: JSON.stringify(run.inputs),
      outputs: status === 'running' ? null : status === 'stopped' ? {} : run.outputs,
      error: status === 'failed' ? RUN_FAILED_ERROR : null,
      total_steps: steps,
      total_tokens: status === 'succeeded' ? 20 : 0,
      created_at: run.createdAt,
      finished_at: endedMs === null ? null : Math.floor(endedMs / 1000),
      elapsed_time: ((endedMs ?? now) - run.startedAt) / 1000,
    };
  }

  function getRun(app, runId, res) {
    res.fixtureRecord.runId = runId;
    if (app.mode !== 'workflow' && app.mode !== 'advanced-chat') {
      const e = ERR_APP_UNAVAILABLE('Only support workflow app.');
      return send(res, e.status, e.body);
    }
    const run = runs.get(runId);
    if (!run || run.apiKey !== app.apiKey) {
      const e = ERR_RUN_NOT_FOUND();
      return send(res, e.status, e.body);
    }
    run.gets += 1;
    if (run.gets <= app.runPollFailures) return send(res, 500, 'Internal Server Error');
    return send(res, 200, runView(run));
  }

  // Conversations as Dify keeps them: per app, bound to the end user that started one. An id
  // of another user's conversation is answered exactly like an unknown one (404), as Dify's
  // lookup filters by the user; a value that is not a UUID is 400, as Dify's uuid_value check.
  function resolveConversation(app, body) {
    const cid = body.conversation_id;
    if (cid === undefined || cid === null || cid === '') {
      const id = randomUUID();
      const conversation = { user: body.user, queries: [] };
      app.conversations.set(id, conversation);
      return { id, conversation };
    }
    if (typeof cid !== 'string' || !UUID_RE.test(cid)) {
      return { error: ERR_INVALID_PARAM('conversation_id is not a valid uuid') };
    }
    const conversation = app.conversations.get(cid);
    if (!conversation || conversation.user !== body.user) {
      return { error: difyError(404, 'not_found', 'Conversation Not Exists.') };
    }
    return { id: cid, conversation };
  }

  /** The default chat answer: the query echoed, and in a continued conversation its earlier turns. */
  function echoAnswer(query, conversation) {
    const earlier = conversation.queries.slice(0, -1);
    if (earlier.length === 0) return `echo: ${query}`;
    return `echo: ${query} (turn ${earlier.length + 1}; earlier: ${earlier.map((q) => JSON.stringify(q)).join(', ')})`;
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
    const err = validateUserAndInputs(app, body);
    if (err) return send(res, err.status, err.body);
    if (app.mode === 'agent-chat' && rm.mode === 'blocking') {
      const e = ERR_INVALID_PARAM('Agent Chat App does not support blocking mode');
      return send(res, e.status, e.body);
    }
    const conv = resolveConversation(app, body);
    if (conv.error) return send(res, conv.error.status, conv.error.body);
    if (!(await preRun(app, res))) return;
    conv.conversation.queries.push(body.query);
    const answer =
      typeof app.answer === 'function'
        ? await app.answer(body.query, body.inputs, { conversationId: conv.id, queries: [...conv.conversation.queries] })
        : app.answer !== undefined
          ? app.answer
          : echoAnswer(body.query, conv.conversation);
    return messageAnswer(app, body, rm.mode, conv.id, String(answer), res);
  }

  async function completionMessages(app, body, req, res) {
    if (app.mode !== 'completion') {
      const e = ERR_APP_UNAVAILABLE('App mode is invalid: completion-messages needs a completion app.');
      return send(res, e.status, e.body);
    }
    const rm = validateResponseMode(body);
    if (rm.error) return send(res, rm.error.status, rm.error.body);
    const err = validateUserAndInputs(app, body);
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
    return messageAnswer(app, body, rm.mode, convId, String(answer), res);
  }

  function messageAnswer(app, body, responseMode, conversationId, answer, res) {
    const taskId = randomUUID();
    res.fixtureRecord.taskId = taskId;
    issuedTasks.set(taskId, { apiKey: app.apiKey, user: body.user, kind: app.mode === 'completion' ? 'completion' : 'chat' });
    const messageId = randomUUID();
    const createdAt = nowSec();
    const started = Date.now();
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
    const messageEnd = () => ({
      phase: 'post',
      obj: { event: 'message_end', task_id: taskId, id: messageId, message_id: messageId, conversation_id: conversationId, metadata },
    });
    const errorEvent = () => ({
      event: 'error',
      task_id: taskId,
      message_id: messageId,
      conversation_id: conversationId,
      status: 400,
      code: 'provider_quota_exceeded',
      message: QUOTA_MESSAGE,
    });
    const kind = app.mode === 'completion' ? 'completion' : 'chat';

    if (app.mode === 'advanced-chat') {
      const runId = randomUUID();
      const workflowId = app.workflowId;
      // Advanced-chat events all carry the message/conversation ids too (Dify's converter adds them).
      const wfBase = {
        task_id: taskId,
        workflow_run_id: runId,
        conversation_id: conversationId,
        message_id: messageId,
        created_at: createdAt,
      };
      const finished = finishedData({ runId, workflowId, createdAt, started, outputs: { answer } });
      const ctx = newStream(app, res, {
        kind,
        taskId,
        user: body.user,
        stopFrames: () => [{ obj: { event: 'workflow_finished', ...wfBase, data: finished('stopped', ctx.steps) } }, messageEnd()],
        errorEvent,
      });
      const frames = graphFrames(ctx, {
        nodes: app.nodes,
        base: wfBase,
        runId,
        workflowId,
        createdAt,
        inputs: { ...body.inputs, 'sys.query': body.query },
        failed: false,
        chunks: () => answerChunks(app, answer, (t) => ({ event: 'message', ...base, answer: t })),
        nodeOutputs: (n) =>
          n.outputs ??
          (n.type === 'start'
            ? { ...body.inputs, 'sys.query': body.query }
            : n.type === 'llm'
              ? { text: answer, usage: usage(0.42), finish_reason: 'stop' }
              : n.type === 'answer'
                ? { answer }
                : {}),
        finished,
        tail: () => [...app.messageFiles.map((f) => ({ phase: 'post', obj: messageFileEvent(f, base) })), messageEnd()],
      });
      return streamFrames(res, ctx, frames);
    }

    const ctx = newStream(app, res, { kind, taskId, user: body.user, stopFrames: () => [messageEnd()], errorEvent });
    if (app.mode === 'agent-chat') return streamFrames(res, ctx, agentFrames(app, body, base, answer, messageEnd));
    function* plain() {
      yield* answerChunks(app, answer, (t) => ({ event: 'message', ...base, answer: t }));
      for (const f of app.messageFiles) yield { phase: 'chunk', obj: messageFileEvent(f, base) };
      yield messageEnd();
    }
    return streamFrames(res, ctx, plain());
  }

  function* agentFrames(app, body, base, answer, messageEnd) {
    const thought = (id, position, fields) => ({
      event: 'agent_thought',
      id,
      task_id: base.task_id,
      message_id: base.message_id,
      position,
      thought: '',
      observation: '',
      tool: '',
      tool_input: '',
      message_files: [],
      conversation_id: base.conversation_id,
      created_at: base.created_at,
      ...fields,
    });
    const thoughts = app.thoughts ?? [
      {
        thought: 'I should look this up.',
        tool: 'web_search',
        tool_input: { web_search: { query: body.query } },
        observation: { web_search: 'Found 3 results.' },
      },
    ];
    for (const [i, t] of thoughts.entries()) {
      yield {
        phase: 'pre',
        obj: thought(randomUUID(), i + 1, {
          thought: String(t.thought ?? ''),
          tool: Array.isArray(t.tool) ? t.tool.join(';') : String(t.tool ?? ''),
          tool_input: jsonString(t.tool_input),
          observation: jsonString(t.observation),
        }),
      };
    }
    const finalId = randomUUID();
    const pos = thoughts.length + 1;
    yield { phase: 'pre', obj: thought(finalId, pos, {}) };
    if (app.agentAnswer) {
      yield* answerChunks(app, answer, (t) => ({ event: 'agent_message', ...base, answer: t }));
      yield { phase: 'post', obj: thought(finalId, pos, { thought: app.finalThought ?? answer }) };
    } else {
      if (app.repeat > 0) {
        const f = filler(app.chunkBytes);
        for (let i = 0; i < app.repeat; i++) yield { phase: 'chunk', obj: thought(finalId, pos, { thought: f }) };
      }
      yield { phase: 'chunk', obj: thought(finalId, pos, { thought: answer }) };
    }
    yield messageEnd();
  }

  // ---- stop endpoints -------------------------------------------------------

  const STOP_FAMILIES = {
    'workflows/tasks': { kind: 'workflow', modes: new Set(['workflow']), unavailable: 'Only support workflow app.' },
    'chat-messages': {
      kind: 'chat',
      modes: CHAT_MODES,
      unavailable: 'App mode is invalid: chat-messages needs a chat, advanced-chat or agent-chat app.',
    },
    'completion-messages': {
      kind: 'completion',
      modes: new Set(['completion']),
      unavailable: 'App mode is invalid: completion-messages needs a completion app.',
    },
  };

  function stopTask(app, family, taskId, body, path, res) {
    const fam = STOP_FAMILIES[family];
    if (!fam.modes.has(app.mode)) {
      const e = ERR_APP_UNAVAILABLE(fam.unavailable);
      return send(res, e.status, e.body);
    }
    if (typeof body.user !== 'string' || body.user.length === 0) {
      const e = ERR_INVALID_PARAM('user is required and must be a non-empty string');
      return send(res, e.status, e.body);
    }
    const issued = issuedTasks.get(taskId);
    const refuse = (e) => {
      stopRefusals.push({ path, task_id: taskId, user: body.user, apiKey: app.apiKey, status: e.status, code: e.body.code });
      return send(res, e.status, e.body);
    };
    if (!issued || issued.apiKey !== app.apiKey || issued.kind !== fam.kind) return refuse(difyError(404, 'not_found', 'Task not found'));
    if (issued.user !== body.user) return refuse(difyError(403, 'forbidden', 'The task belongs to another user'));
    stops.push({ path, task_id: taskId, user: body.user, apiKey: app.apiKey });
    const run = fam.kind === 'workflow' ? runsByTask.get(taskId) : undefined;
    if (run && run.apiKey === app.apiKey && run.user === body.user && runStatus(run) === 'running') {
      run.stoppedAt = Date.now();
      run.stopSteps = run.stream?.steps ?? 0;
      run.stopRequested = true;
      run.wake?.('woken');
    }
    const ctx = running.get(taskId);
    if (ctx && ctx.app.apiKey === app.apiKey && ctx.user === body.user && ctx.kind === fam.kind) ctx.requestStop();
    return send(res, 200, { result: 'success' });
  }

  // ---- dispatcher -----------------------------------------------------------

  async function handle(req, res) {
    const url = new URL(req.url, 'http://127.0.0.1');
    const multipart = /^multipart\/form-data/i.test(req.headers['content-type'] ?? '');
    const raw = multipart ? await readRaw(req) : undefined;
    const { body, badJson } = multipart ? { body: undefined, badJson: false } : await readBody(req);
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
    res.fixtureRecord = record;
    res.on('close', () => {
      res.fixtureClosed = true;
      if (record.streaming && !res.writableFinished && !stopped) record.clientAborted = true;
    });

    const p = url.pathname.replace(/\/+$/, '') || '/';
    // A file of fileOutput(): its URL is signed, as Dify's are; no key.
    if (p.startsWith('/files/tools/') && served.has(p)) {
      if (req.method !== 'GET') return send(res, 405, ERR_METHOD().body, { Allow: 'GET' });
      const f = served.get(p);
      res.writeHead(200, { 'Content-Type': f.mimeType, 'Content-Length': f.data.length });
      return res.end(f.data);
    }
    const routes = {
      '/v1/files/upload': 'POST',
      '/v1/info': 'GET',
      '/v1/parameters': 'GET',
      '/v1/workflows/run': 'POST',
      '/v1/chat-messages': 'POST',
      '/v1/completion-messages': 'POST',
      stop: 'POST',
      runDetail: 'GET',
    };
    let route = p;
    if (/^\/v1\/workflows\/[^/]+\/run$/.test(p)) route = '/v1/workflows/run';
    const runMatch = /^\/v1\/workflows\/run\/([^/]+)$/.exec(p);
    if (runMatch) route = 'runDetail';
    const stopMatch = /^\/v1\/(workflows\/tasks|chat-messages|completion-messages)\/([^/]+)\/stop$/.exec(p);
    if (stopMatch) route = 'stop';
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
        file_upload: app.fileUpload,
        system_parameters: app.systemParameters,
      });
    }
    if (route === 'runDetail') {
      let runId;
      try {
        runId = decodeURIComponent(runMatch[1]);
      } catch {
        runId = runMatch[1];
      }
      return getRun(app, runId, res);
    }

    if (route === '/v1/files/upload') {
      const r = upload(app, uploads, raw ?? Buffer.alloc(0), req.headers['content-type']);
      record.upload = { status: r.status, id: r.body.id, name: r.body.name, size: r.body.size };
      return send(res, r.status, r.body);
    }
    // POST endpoints: body must be a JSON object.
    if (badJson || !isPlainObject(body)) {
      const e = ERR_BAD_JSON();
      return send(res, e.status, e.body);
    }
    if (route === 'stop') {
      let taskId;
      try {
        taskId = decodeURIComponent(stopMatch[2]);
      } catch {
        taskId = stopMatch[2];
      }
      return stopTask(app, stopMatch[1], taskId, body, p, res);
    }
    app.runCount += 1;
    if (route === '/v1/workflows/run') return workflowRun(app, body, req, res);
    if (route === '/v1/chat-messages') return chatMessages(app, body, req, res);
    return completionMessages(app, body, req, res);
  }

  const { server, port } = await listenLoopback(handle, (err) => ({ code: 'fixture_error', message: String(err?.stack ?? err), status: 500 }), listenPort);
  const origin = `http://127.0.0.1:${port}`;

  function normaliseSpec(spec, apiKey) {
    const mode = spec.mode;
    if (!MODES.has(mode)) throw new Error(`addApp: mode must be one of ${[...MODES].join(', ')}; got ${mode}`);
    const behaviour = spec.behaviour ?? 'ok';
    if (!BEHAVIOURS.has(behaviour)) throw new Error(`addApp: unknown behaviour ${behaviour}`);
    const streamBehaviour = spec.streamBehaviour ?? 'ok';
    if (!STREAM_BEHAVIOURS.has(streamBehaviour)) throw new Error(`addApp: unknown streamBehaviour ${streamBehaviour}`);
    if (spec.events !== undefined && spec.events !== null) {
      if (!Array.isArray(spec.events) || !spec.events.every((e) => typeof e === 'string' || isPlainObject(e))) {
        throw new Error('addApp: events must be an array of objects or strings');
      }
    }
    if (spec.thoughts !== undefined && spec.thoughts !== null && !Array.isArray(spec.thoughts)) {
      throw new Error('addApp: thoughts must be an array');
    }
    const chunkBytes = nonNegInt(spec.chunkBytes, 'chunkBytes', 1024);
    if (chunkBytes === 0) throw new Error('addApp: chunkBytes must be positive');
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
      // streaming
      nodes: normaliseNodes(spec.nodes, mode),
      text: spec.text,
      thoughts: spec.thoughts ?? undefined,
      agentAnswer: spec.agentAnswer !== false,
      finalThought: spec.finalThought === undefined || spec.finalThought === null ? undefined : String(spec.finalThought),
      holdBefore: spec.holdBefore ?? undefined,
      eventDelayMs: nonNegInt(spec.eventDelayMs, 'eventDelayMs', 0),
      pingEvery: nonNegInt(spec.pingEvery, 'pingEvery', 3),
      events: spec.events ?? undefined,
      repeat: nonNegInt(spec.repeat, 'repeat', 0),
      chunkBytes,
      streamBehaviour,
      // workflow runs
      runDurationMs: nonNegInt(spec.runDurationMs, 'runDurationMs', 0),
      runPollFailures: nonNegInt(spec.runPollFailures, 'runPollFailures', 0),
      // files
      fileUpload: spec.fileUpload ?? { image: { enabled: false } },
      systemParameters: spec.systemParameters ?? DEFAULT_SYSTEM_PARAMETERS,
      uploadLimitBytes: spec.uploadLimitBytes,
      uploadBlacklist: spec.uploadBlacklist ?? [],
      messageFiles: spec.messageFiles ?? [],
    };
  }

  return {
    origin,
    baseUrl: `${origin}/v1`,
    port,
    requests,
    /** Accepted stop calls, in arrival order: { path, task_id, user, apiKey }. */
    stops,
    /** Refused stop calls (unknown task, another app or family, another user): { path, task_id, user, apiKey, status, code }. */
    stopRefusals,

    /** Lets the streams of an app that wait at `holdBefore` go on (and later ones pass at once). */
    release(apiKey) {
      const app = apps.get(apiKey);
      if (!app) throw new Error(`release: unknown api key ${apiKey}`);
      app.released = true;
      for (const ctx of [...holding]) if (ctx.app === app) ctx.wake?.('released');
    },
    /** Workflow runs started so far: workflow_run_id → run record (see the header). */
    runs,
    /** Files uploaded with /v1/files/upload: id → {id, name, size, extension, mime_type, created_by, apiKey, user, data}. */
    uploads,
    /** A Dify file object (for outputs, messageFiles) whose url this fixture serves. */
    fileOutput(spec) {
      return fileObject(origin, served, spec);
    },

    /** What GET /v1/workflows/run/:id would answer now (not counted as a GET); undefined if unknown. */
    runState(runId) {
      const run = runs.get(runId);
      return run ? runView(run) : undefined;
    },

    /** Register an app; returns its API key. */
    addApp(spec = {}) {
      const apiKey = spec.apiKey ?? randomApiKey();
      if (apps.has(apiKey)) throw new Error(`addApp: api key ${apiKey} already registered`);
      apps.set(apiKey, {
        ...normaliseSpec(spec, apiKey),
        workflowId: randomUUID(),
        conversations: new Map(),
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
      return [...(apps.get(apiKey)?.conversations?.keys() ?? [])];
    },

    /** A chat app's conversation: {user, queries} (its turns so far), or undefined. */
    conversation(apiKey, conversationId) {
      const c = apps.get(apiKey)?.conversations?.get(conversationId);
      return c ? { user: c.user, queries: [...c.queries] } : undefined;
    },

    stop() {
      if (stopPromise) return stopPromise;
      stopped = true;
      for (const w of [...pendingWaits]) w.resolve('fixture');
      for (const s of [...streams]) s.destroy();
      stopPromise = new Promise((resolve) => {
        server.close(() => resolve());
        server.closeAllConnections();
      });
      return stopPromise;
    },
  };
}

// Standalone: `node tests/support/dify-fixture.mjs [--port N] [--key K]` (also through a symlinked
// directory, whose path import.meta.url has resolved).
if (process.argv[1] && import.meta.url === pathToFileURL(realpathSync(process.argv[1])).href) {
  const arg = (name) => {
    const i = process.argv.indexOf(name);
    return i > 0 ? process.argv[i + 1] : undefined;
  };
  const port = Number(arg('--port') ?? 5001);
  if (!Number.isInteger(port) || port < 0 || port > 65535) {
    console.error(`dify-fixture: --port wants a TCP port number, got ${arg('--port')}`);
    process.exit(2);
  }
  const key = arg('--key');
  const dify = await startDifyFixture({ port });
  const form = [{ 'text-input': { variable: 'text', label: 'Text', required: true, max_length: 200 } }];
  const workflow = dify.addApp({ mode: 'workflow', name: 'Echo Workflow', user_input_form: form, apiKey: key });
  const chat = dify.addApp({ mode: 'chat', name: 'Echo Chat', user_input_form: [], apiKey: key ? `${key}-chat` : undefined });
  // A workflow that takes files (docs/files-and-conversations.md): its echo shows each file as Dify got it.
  const filesForm = [
    ...form,
    { file: { variable: 'doc', label: 'Document', required: true, allowed_file_types: ['document'], allowed_file_upload_methods: ['remote_url', 'local_file'] } },
    { 'file-list': { variable: 'pics', label: 'Pictures', required: false, max_length: 3, allowed_file_types: ['image'], allowed_file_upload_methods: ['remote_url', 'local_file'] } },
  ];
  const files = dify.addApp({ mode: 'workflow', name: 'Echo Files', user_input_form: filesForm, apiKey: key ? `${key}-files` : undefined });
  console.log(`fake Dify Service API at ${dify.baseUrl}`);
  console.log(`  workflow app "Echo Workflow": api_key ${workflow}`);
  console.log(`  chat app "Echo Chat":         api_key ${chat}`);
  console.log(`  workflow app "Echo Files":    api_key ${files} (a document and pictures)`);
  console.log('Register one with the console (base_url and api_key), publish it, then call it. Ctrl-C stops.');
  const bye = () => dify.stop().then(() => process.exit(0));
  process.on('SIGINT', bye);
  process.on('SIGTERM', bye);
}
