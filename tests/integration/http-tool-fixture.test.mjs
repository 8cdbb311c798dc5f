// Pins the contract of the fake custom HTTP tool (tests/support/http-tool-fixture.mjs),
// i.e. the "Custom Tool Node Protocol" and "Streaming" sections of seed 003, and the async
// submit/status/cancel tools of seed 002 (addAsyncTool).
// Run: node --test tests/integration/http-tool-fixture.test.mjs
import test from 'node:test';
import assert from 'node:assert/strict';
import { startHttpTool } from '../support/http-tool-fixture.mjs';
import { readResponse } from '../support/harness.mjs';

let tools;
test.before(async () => {
  tools = await startHttpTool();
});
test.after(async () => {
  await tools?.stop();
});

const KEY = 'tool-secret-123';
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function invoke(path, { body = {}, key = KEY, method = 'POST', headers = {}, signal } = {}) {
  const h = { ...headers };
  if (key !== null) h.Authorization = `Bearer ${key}`;
  let payload;
  if (method !== 'GET' && body !== undefined) {
    payload = typeof body === 'string' ? body : JSON.stringify(body);
    h['Content-Type'] = 'application/json';
  }
  const res = await fetch(tools.url + path, { method, headers: h, body: payload, signal });
  return readResponse(res);
}

const sse = (...events) => events.map((e) => `data: ${JSON.stringify(e)}\n\n`).join('');

async function waitFor(pred, what, ms = 20_000) {
  const deadline = Date.now() + ms;
  while (!pred()) {
    if (Date.now() > deadline) assert.fail(`timed out waiting for ${what}`);
    await sleep(10);
  }
}

test('url is a loopback base URL; every tool gets its own /tools/<random> path', () => {
  assert.match(tools.url, /^http:\/\/127\.0\.0\.1:\d+$/);
  const a = tools.addTool({ apiKey: KEY });
  const b = tools.addTool({ apiKey: KEY });
  assert.match(a, /^\/tools\/[0-9a-f]{16}$/);
  assert.notEqual(a, b);
  assert.throws(() => tools.addTool({}), /apiKey is required/);
  assert.throws(() => tools.addTool({ apiKey: '' }), /apiKey must be/);
  assert.throws(() => tools.addTool({ apiKey: KEY, behaviour: 'nope' }), /unknown behaviour/);
  assert.throws(() => tools.addTool({ apiKey: KEY, streamBehaviour: 'nope' }), /unknown streamBehaviour/);
  assert.throws(() => tools.addTool({ apiKey: KEY, resultShape: 'nope' }), /unknown resultShape/);
  assert.throws(() => tools.addTool({ apiKey: KEY, result: [1] }), /result must be/);
});

test('ok: 200 JSON result (default {echo: body}); headers and body are recorded', async () => {
  const path = tools.addTool({ apiKey: KEY });
  const body = { location: 'San Francisco, CA', unit: 'fahrenheit' };
  const r = await invoke(path, {
    body,
    headers: { 'X-Dify-Conversation-Id': 'conv-1', 'X-Dify-User-Id': 'user-9' },
  });
  assert.equal(r.status, 200);
  assert.match(r.headers.get('content-type'), /^application\/json/);
  assert.deepEqual(r.json, { echo: body });
  const [rec] = tools.requestsFor(path);
  assert.equal(rec.method, 'POST');
  assert.equal(rec.path, path);
  assert.deepEqual(rec.body, body);
  assert.equal(rec.apiKey, KEY);
  assert.equal(rec.conversationId, 'conv-1');
  assert.equal(rec.userId, 'user-9');
  assert.equal(rec.headers['x-dify-conversation-id'], 'conv-1');
  assert.equal(rec.headers['x-dify-user-id'], 'user-9');
  assert.equal(rec.headers.authorization, `Bearer ${KEY}`);
  assert.match(rec.headers['content-type'], /^application\/json/);
  assert.equal(rec.stream, false);
  assert.equal(rec.status, 200);
  assert.ok(tools.requests.includes(rec));

  // Without the Dify headers the ids are null.
  await invoke(path, { body: {} });
  const second = tools.requestsFor(path)[1];
  assert.equal(second.conversationId, null);
  assert.equal(second.userId, null);
});

test('result: fixed object or function of (body, record)', async () => {
  const fixed = tools.addTool({ apiKey: KEY, result: { temperature: 72, condition: 'Sunny' } });
  assert.deepEqual((await invoke(fixed, { body: { location: 'x' } })).json, { temperature: 72, condition: 'Sunny' });
  const fn = tools.addTool({
    apiKey: KEY,
    result: async (body, rec) => ({ city: body.location.split(',')[0], user: rec.userId }),
  });
  const r = await invoke(fn, { body: { location: 'Oslo, NO' }, headers: { 'X-Dify-User-Id': 'u1' } });
  assert.deepEqual(r.json, { city: 'Oslo', user: 'u1' });
});

test('auth: missing, wrong or non-Bearer key is 401 {"error":"invalid api key"}', async () => {
  const path = tools.addTool({ apiKey: KEY });
  for (const opts of [{ key: null }, { key: 'wrong' }, { key: null, headers: { Authorization: `Basic ${KEY}` } }]) {
    const r = await invoke(path, { body: { a: 1 }, ...opts });
    assert.equal(r.status, 401, JSON.stringify(opts));
    assert.match(r.headers.get('content-type'), /^application\/json/);
    assert.equal(r.text, '{"error":"invalid api key"}');
  }
  assert.equal(tools.requestsFor(path).length, 3);
  // apiKey: null → no auth check.
  const open = tools.addTool({ apiKey: null });
  assert.equal((await invoke(open, { key: null, body: {} })).status, 200);
});

test('unknown path 404, wrong method 405, non-object body 400', async () => {
  const path = tools.addTool({ apiKey: KEY });
  let r = await invoke('/tools/0000000000000000', { body: {} });
  assert.equal(r.status, 404);
  assert.deepEqual(r.json, { error: 'not found' });
  r = await invoke(path, { method: 'GET' });
  assert.equal(r.status, 405);
  assert.equal(r.headers.get('allow'), 'POST');
  assert.deepEqual(r.json, { error: 'method not allowed' });
  for (const body of ['{not json', '[1,2]', '"str"', '']) {
    r = await invoke(path, { body });
    assert.equal(r.status, 400, body);
    assert.deepEqual(r.json, { error: 'invalid JSON body' });
  }
});

test('error behaviours: exact status, content type and body', async () => {
  const cases = [
    ['error400', 400, /^application\/json/, `{"error":"Invalid location format. Expected 'City, State'."}`],
    ['error500', 500, /^application\/json/, '{"error":"upstream exploded"}'],
    ['not_json', 200, /^text\/html/, '<html>oops</html>'],
    ['rate_limited', 429, /^application\/json/, '{"error":"slow down"}'],
  ];
  for (const [behaviour, status, ctype, text] of cases) {
    const path = tools.addTool({ apiKey: KEY, behaviour });
    for (const body of [{ location: 'x' }, { location: 'x', stream: true }]) {
      const r = await invoke(path, { body });
      assert.equal(r.status, status, behaviour);
      assert.match(r.headers.get('content-type'), ctype, behaviour);
      assert.equal(r.text, text, behaviour);
      if (behaviour === 'rate_limited') assert.equal(r.headers.get('retry-after'), '7');
      else assert.equal(r.headers.get('retry-after'), null);
    }
    // Auth is still checked first.
    assert.equal((await invoke(path, { key: 'wrong' })).status, 401);
  }
});

test('wrong_content_type: 200 text/plain whose body is the JSON result', async () => {
  const path = tools.addTool({ apiKey: KEY, behaviour: 'wrong_content_type', result: { temperature: 72 } });
  const r = await invoke(path, { body: {} });
  assert.equal(r.status, 200);
  assert.match(r.headers.get('content-type'), /^text\/plain/);
  assert.deepEqual(JSON.parse(r.text), { temperature: 72 });
});

test('streaming: "stream": true gives the seed\'s SSE frames, nested result by default', async () => {
  const path = tools.addTool({ apiKey: KEY, result: { temperature: 72, condition: 'Sunny' } });
  const r = await invoke(path, { body: { location: 'SF', stream: true } });
  assert.equal(r.status, 200);
  assert.equal(r.headers.get('content-type'), 'text/event-stream; charset=utf-8');
  assert.equal(
    r.text,
    'data: {"type":"thought","message":"Working on it..."}\n\n' +
      'data: {"type":"progress","percent":50}\n\n' +
      'data: {"type":"result","result":{"temperature":72,"condition":"Sunny"}}\n\n',
  );
  const rec = tools.requestsFor(path)[0];
  assert.equal(rec.stream, true);
  assert.equal(rec.clientAborted, false);
  // Only a literal true streams.
  for (const stream of [false, 'true', 1]) {
    const j = await invoke(path, { body: { stream } });
    assert.match(j.headers.get('content-type'), /^application\/json/);
    assert.deepEqual(j.json, { temperature: 72, condition: 'Sunny' });
  }
  // The default result echoes the body, stream flag included.
  const echo = tools.addTool({ apiKey: KEY, thoughts: [], progress: [] });
  assert.equal((await invoke(echo, { body: { q: 1, stream: true } })).text, sse({ type: 'result', result: { echo: { q: 1, stream: true } } }));
});

test('streaming: custom thoughts/progress and the flat result shape', async () => {
  const path = tools.addTool({
    apiKey: KEY,
    result: { temperature: 72 },
    thoughts: ['Querying weather database...', 'Parsing'],
    progress: [25, { percent: 75, message: 'almost' }, 100],
    resultShape: 'flat',
  });
  const r = await invoke(path, { body: { stream: true } });
  assert.equal(
    r.text,
    sse(
      { type: 'thought', message: 'Querying weather database...' },
      { type: 'thought', message: 'Parsing' },
      { type: 'progress', percent: 25 },
      { type: 'progress', percent: 75, message: 'almost' },
      { type: 'progress', percent: 100 },
      { type: 'result', temperature: 72 },
    ),
  );
});

/** Reads an SSE response frame by frame with arrival times. */
async function readFrames(res, t0) {
  const out = [];
  let buf = '';
  const dec = new TextDecoder();
  for await (const chunk of res.body) {
    buf += dec.decode(chunk, { stream: true });
    let i;
    while ((i = buf.indexOf('\n\n')) >= 0) {
      out.push({ frame: buf.slice(0, i + 2), at: Date.now() - t0 });
      buf = buf.slice(i + 2);
    }
  }
  assert.equal(buf, '');
  return out;
}

test('streaming: eventDelayMs spaces the events', async () => {
  // Gaps are lower bounds (load only makes them longer); the first event must come well
  // before one delay has passed, which a first event delayed like the others would not.
  const path = tools.addTool({ apiKey: KEY, eventDelayMs: 1000, progress: [30, 60] });
  const t0 = Date.now();
  const res = await fetch(tools.url + path, {
    method: 'POST',
    headers: { Authorization: `Bearer ${KEY}`, 'Content-Type': 'application/json' },
    body: JSON.stringify({ stream: true }),
  });
  const frames = await readFrames(res, t0);
  assert.deepEqual(frames.map((f) => JSON.parse(f.frame.slice(6)).type), ['thought', 'progress', 'progress', 'result']);
  for (let i = 1; i < frames.length; i++) {
    const gap = frames[i].at - frames[i - 1].at;
    assert.ok(gap >= 980, `gap ${i} was ${gap} ms`);
  }
  assert.ok(frames[0].at < 500, `first event after ${frames[0].at} ms`);
});

test('streaming: holdResult waits before the result until release(path)', async () => {
  const path = tools.addTool({ apiKey: KEY, holdResult: true, progress: [10] });
  const res = await fetch(tools.url + path, {
    method: 'POST',
    headers: { Authorization: `Bearer ${KEY}`, 'Content-Type': 'application/json' },
    body: JSON.stringify({ stream: true }),
  });
  const body = res.text();
  await waitFor(() => tools.requestsFor(path)[0].held === true, 'the hold');
  let ended = false;
  body.then(() => (ended = true));
  await sleep(100);
  assert.equal(ended, false);
  tools.release(path);
  assert.equal(await body, sse({ type: 'thought', message: 'Working on it...' }, { type: 'progress', percent: 10 }, { type: 'result', result: { echo: { stream: true } } }));
  assert.equal(tools.requestsFor(path)[0].held, false);
  assert.throws(() => tools.release('/tools/nope'), /no tool/);
});

test('streaming: end_early closes without the result event', async () => {
  const path = tools.addTool({ apiKey: KEY, streamBehaviour: 'end_early' });
  const r = await invoke(path, { body: { stream: true } });
  assert.equal(r.status, 200);
  assert.equal(r.text, sse({ type: 'thought', message: 'Working on it...' }, { type: 'progress', percent: 50 }));
  assert.equal(tools.requestsFor(path)[0].clientAborted, false);
});

test('streaming: a client leaving mid-stream is recorded', async () => {
  const path = tools.addTool({ apiKey: KEY, eventDelayMs: 300 });
  const ac = new AbortController();
  const res = await fetch(tools.url + path, {
    method: 'POST',
    headers: { Authorization: `Bearer ${KEY}`, 'Content-Type': 'application/json' },
    body: JSON.stringify({ stream: true }),
    signal: ac.signal,
  });
  const reader = res.body.getReader();
  const { value } = await reader.read();
  assert.match(new TextDecoder().decode(value), /^data: \{"type":"thought"/);
  ac.abort();
  const rec = tools.requestsFor(path)[0];
  await waitFor(() => rec.clientAborted === true, 'clientAborted');
});

test('delayMs delays the answer; stop() ends pending requests promptly and is idempotent', async () => {
  const path = tools.addTool({ apiKey: KEY, delayMs: 250 });
  const t0 = Date.now();
  const r = await invoke(path, { body: { a: 1 } });
  assert.ok(Date.now() - t0 >= 230);
  assert.deepEqual(r.json, { echo: { a: 1 } });

  const own = await startHttpTool();
  const slow = own.addTool({ apiKey: KEY, delayMs: 30000 });
  const hang = own.addTool({ apiKey: KEY, eventDelayMs: 30000 });
  const post = (p, body) =>
    fetch(own.url + p, {
      method: 'POST',
      headers: { Authorization: `Bearer ${KEY}`, 'Content-Type': 'application/json' },
      body: JSON.stringify(body),
    });
  const pendingSlow = post(slow, {}).then((x) => x.text()).then(() => 'answered', () => 'aborted');
  const streaming = await post(hang, { stream: true });
  const pendingStream = streaming.text().then(() => 'ended', () => 'aborted');
  await waitFor(() => own.requests.length === 2, 'both requests');
  const t1 = Date.now();
  await Promise.all([own.stop(), own.stop()]);
  assert.equal(await pendingSlow, 'aborted');
  assert.ok(['ended', 'aborted'].includes(await pendingStream));
  assert.ok(Date.now() - t1 < 10_000); // generous: both would wait 30 s
  await assert.rejects(fetch(own.url + slow, { method: 'POST' }));
});

test('concurrent tools do not interfere', async () => {
  const paths = await Promise.all(
    Array.from({ length: 10 }, async (_, i) => {
      const path = tools.addTool({ apiKey: `key-${i}`, result: (body) => ({ i, got: body.n }) });
      const r = await invoke(path, { key: `key-${i}`, body: { n: i * 10 } });
      assert.deepEqual(r.json, { i, got: i * 10 });
      return path;
    }),
  );
  for (const [i, path] of paths.entries()) {
    const mine = tools.requestsFor(path);
    assert.equal(mine.length, 1);
    assert.equal(mine[0].apiKey, `key-${i}`);
  }
});

// ---- async tools: the submit/status/cancel protocol of seed 002 ----------------------

const post = (path, body, opts = {}) => invoke(path, { body, ...opts });

test('addAsyncTool: three POST endpoints under one random prefix; spec validation', () => {
  const t = tools.addAsyncTool({ apiKey: KEY });
  const m = /^(\/tools\/[0-9a-f]{16})\/submit$/.exec(t.submitPath);
  assert.ok(m, t.submitPath);
  assert.equal(t.statusPath, `${m[1]}/status`);
  assert.equal(t.cancelPath, `${m[1]}/cancel`);
  assert.deepEqual(t.calls, []);
  assert.notEqual(tools.addAsyncTool({ apiKey: KEY }).submitPath, t.submitPath);
  assert.throws(() => tools.addAsyncTool({}), /apiKey is required/);
  assert.throws(() => tools.addAsyncTool({ apiKey: '' }), /apiKey must be/);
  assert.throws(() => tools.addAsyncTool({ apiKey: KEY, script: [] }), /script must be/);
  assert.throws(() => tools.addAsyncTool({ apiKey: KEY, script: ['running'] }), /script must be/);
  assert.throws(() => tools.addAsyncTool({ apiKey: KEY, script: [{ httpStatus: 42 }] }), /httpStatus/);
  assert.throws(() => tools.addAsyncTool({ apiKey: KEY, script: [{ isError: true }] }), /needs text/);
  assert.throws(() => tools.addAsyncTool({ apiKey: KEY, cancelFailures: -1 }), /cancelFailures/);
});

test('async: same checks as a plain tool (404, 405, 401, 400); those calls are not in `calls`', async () => {
  const t = tools.addAsyncTool({ apiKey: KEY });
  const prefix = t.submitPath.slice(0, -'/submit'.length);
  for (const p of [prefix, `${prefix}/other`, `${prefix}/submit/x`]) {
    assert.equal((await post(p, {})).status, 404, p);
  }
  for (const p of [t.submitPath, t.statusPath, t.cancelPath]) {
    let r = await invoke(p, { method: 'GET' });
    assert.equal(r.status, 405);
    assert.equal(r.headers.get('allow'), 'POST');
    r = await post(p, { task_id: 'x' }, { key: 'wrong' });
    assert.equal(r.status, 401);
    assert.deepEqual(r.json, { error: 'invalid api key' });
    r = await post(p, '[1]');
    assert.equal(r.status, 400);
    assert.deepEqual(r.json, { error: 'invalid JSON body' });
  }
  assert.deepEqual(t.calls, []);
  assert.equal(tools.requestsFor(t.statusPath).length, 3); // still in `requests`
  // apiKey null: no auth check.
  const open = tools.addAsyncTool({ apiKey: null });
  assert.equal((await post(open.submitPath, {}, { key: null })).status, 200);
});

test('async submit: {task_id: "remote-<hex>", status: "running"}; default script completes with an echo', async () => {
  const t = tools.addAsyncTool({ apiKey: KEY });
  const r = await post(t.submitPath, { topic: 'weather', days: 3 });
  assert.equal(r.status, 200);
  assert.match(r.headers.get('content-type'), /^application\/json/);
  assert.deepEqual(Object.keys(r.json), ['task_id', 'status']);
  assert.match(r.json.task_id, /^remote-[0-9a-f]{16}$/);
  assert.equal(r.json.status, 'running');
  const again = await post(t.submitPath, {});
  assert.notEqual(again.json.task_id, r.json.task_id);
  for (let i = 0; i < 2; i++) {
    const s = await post(t.statusPath, { task_id: r.json.task_id });
    assert.equal(s.status, 200);
    assert.deepEqual(s.json, { task_id: r.json.task_id, status: 'completed', result: { echo: { topic: 'weather', days: 3 } } });
  }
  const [task] = tools.tasksOf(t.cancelPath);
  assert.equal(task.task_id, r.json.task_id);
  assert.deepEqual(task.submitBody, { topic: 'weather', days: 3 });
  assert.equal(task.statusCalls, 2);
});

test('async status: follows the script one entry per call, the last one repeated, per task', async () => {
  const script = [
    { status: 'running' },
    { status: 'input_required', input_required: { question: 'Which city?' }, poll_after_seconds: 1 },
    { status: 'running', poll_after_seconds: 0.5 },
    { status: 'completed', result: { temperature: 72 } },
  ];
  const t = tools.addAsyncTool({ apiKey: KEY, script });
  const a = (await post(t.submitPath, { q: 'a' })).json.task_id;
  const b = (await post(t.submitPath, { q: 'b' })).json.task_id;
  const seen = [];
  for (let i = 0; i < 6; i++) seen.push((await post(t.statusPath, { task_id: a })).json);
  assert.deepEqual(seen, [
    { task_id: a, status: 'running' },
    { task_id: a, status: 'input_required', input_required: { question: 'Which city?' }, poll_after_seconds: 1 },
    { task_id: a, status: 'running', poll_after_seconds: 0.5 },
    { task_id: a, status: 'completed', result: { temperature: 72 } },
    { task_id: a, status: 'completed', result: { temperature: 72 } },
    { task_id: a, status: 'completed', result: { temperature: 72 } },
  ]);
  // Task b has its own cursor.
  assert.deepEqual((await post(t.statusPath, { task_id: b })).json, { task_id: b, status: 'running' });
  assert.deepEqual(tools.tasksOf(t.submitPath).map((x) => [x.task_id, x.cursor]), [[a, 6], [b, 1]]);
  // The spec's script is not changed by the answers.
  assert.deepEqual(script[0], { status: 'running' });
});

test('async status entries: httpStatus (plain text), isError, raw, own task_id', async () => {
  const t = tools.addAsyncTool({
    apiKey: KEY,
    script: [
      { httpStatus: 500 },
      { isError: true, text: 'busy' },
      { raw: { status: 'running', poll_after_seconds: 'NaN' } },
      { raw: 'just a string' },
      { status: 'running', task_id: 'remote-other' },
      { httpStatus: 503 },
      { status: 'failed', error: 'boom', error_code: 'upstream' },
    ],
  });
  const id = (await post(t.submitPath, {})).json.task_id;
  const s = () => post(t.statusPath, { task_id: id });
  let r = await s();
  assert.equal(r.status, 500);
  assert.match(r.headers.get('content-type'), /^text\/plain/);
  assert.equal(r.text, 'Internal Server Error');
  r = await s();
  assert.equal(r.status, 200);
  assert.deepEqual(r.json, { isError: true, content: [{ type: 'text', text: 'busy' }] });
  r = await s();
  assert.equal(r.text, '{"status":"running","poll_after_seconds":"NaN"}');
  r = await s();
  assert.match(r.headers.get('content-type'), /^application\/json/);
  assert.equal(r.text, '"just a string"');
  assert.deepEqual((await s()).json, { task_id: 'remote-other', status: 'running' });
  r = await s();
  assert.equal(r.status, 503);
  assert.equal(r.text, 'Service Unavailable');
  assert.deepEqual((await s()).json, { task_id: id, status: 'failed', error: 'boom', error_code: 'upstream' });
  assert.deepEqual(
    t.calls.filter((c) => c.kind === 'status').map((c) => c.httpStatus),
    [500, 200, 200, 200, 200, 503, 200],
  );
});

test('async: unknown task → task_not_found; missing task_id → 400', async () => {
  const t = tools.addAsyncTool({ apiKey: KEY });
  const other = tools.addAsyncTool({ apiKey: KEY });
  const foreign = (await post(other.submitPath, {})).json.task_id;
  for (const path of [t.statusPath, t.cancelPath]) {
    for (const id of ['remote-nope', foreign]) {
      const r = await post(path, { task_id: id });
      assert.equal(r.status, 200);
      assert.deepEqual(r.json, { task_id: id, status: 'failed', error_code: 'task_not_found', error: 'Task not found' });
    }
    for (const body of [{}, { task_id: 7 }]) {
      const r = await post(path, body);
      assert.equal(r.status, 400);
      assert.deepEqual(r.json, { error: 'task_id is required' });
    }
  }
});

test('async submitResponse replaces the submit answer verbatim (object or function)', async () => {
  const t = tools.addAsyncTool({ apiKey: KEY, submitResponse: { task_id: 'fixed-1', status: 'completed', extra: true } });
  const r = await post(t.submitPath, {});
  assert.deepEqual(r.json, { task_id: 'fixed-1', status: 'completed', extra: true });
  // The task is registered under that id.
  assert.equal((await post(t.statusPath, { task_id: 'fixed-1' })).json.status, 'completed');
  const bad = tools.addAsyncTool({ apiKey: KEY, submitResponse: (body) => ({ status: 'running', got: body.x }) });
  assert.deepEqual((await post(bad.submitPath, { x: 5 })).json, { status: 'running', got: 5 });
  const long = tools.addAsyncTool({ apiKey: KEY, submitResponse: () => ({ task_id: 'x'.repeat(300), status: 'running' }) });
  assert.equal((await post(long.submitPath, {})).json.task_id.length, 300);
  const nul = tools.addAsyncTool({ apiKey: KEY, submitResponse: null });
  const n = await post(nul.submitPath, {});
  assert.equal(n.status, 200);
  assert.equal(n.text, 'null');
});

test('async cancel: cancelled, idempotent; status then says cancelled; cancelFailures', async () => {
  const t = tools.addAsyncTool({ apiKey: KEY, script: [{ status: 'running' }], cancelFailures: 2 });
  const id = (await post(t.submitPath, {})).json.task_id;
  assert.equal((await post(t.statusPath, { task_id: id })).json.status, 'running');
  for (let i = 0; i < 2; i++) {
    const r = await post(t.cancelPath, { task_id: id });
    assert.equal(r.status, 500);
    assert.match(r.headers.get('content-type'), /^text\/plain/);
    assert.equal(r.text, 'Internal Server Error');
    assert.equal((await post(t.statusPath, { task_id: id })).json.status, 'running');
  }
  for (let i = 0; i < 2; i++) {
    const r = await post(t.cancelPath, { task_id: id });
    assert.equal(r.status, 200);
    assert.deepEqual(r.json, { task_id: id, status: 'cancelled' });
  }
  for (let i = 0; i < 2; i++) assert.deepEqual((await post(t.statusPath, { task_id: id })).json, { task_id: id, status: 'cancelled' });
  const [task] = tools.tasksOf(t.statusPath);
  assert.equal(task.cancelled, true);
  assert.equal(task.cancelCalls, 4);
  assert.equal(task.cursor, 3); // status answers after the cancel do not consume the script
  // cancelFailures count per task.
  const id2 = (await post(t.submitPath, {})).json.task_id;
  assert.equal((await post(t.cancelPath, { task_id: id2 })).status, 500);
});

test('async calls: every call recorded with kind, arrival time, body, task and answer', async () => {
  const t = tools.addAsyncTool({ apiKey: KEY, script: [{ status: 'running' }, { status: 'running' }, { status: 'completed', result: { ok: 1 } }] });
  const id = (await post(t.submitPath, { a: 1 })).json.task_id;
  for (let i = 0; i < 3; i++) {
    await sleep(120);
    await post(t.statusPath, { task_id: id });
  }
  await post(t.cancelPath, { task_id: id });
  assert.equal(tools.callsFor(t.statusPath), t.calls);
  assert.equal(tools.callsFor(t.submitPath), t.calls);
  assert.deepEqual(tools.callsFor('/tools/nope'), []);
  assert.deepEqual(t.calls.map((c) => c.kind), ['submit', 'status', 'status', 'status', 'cancel']);
  assert.deepEqual(t.calls[0].body, { a: 1 });
  assert.deepEqual(t.calls[0].response, { task_id: id, status: 'running' });
  for (const c of t.calls) {
    assert.equal(c.task_id, id);
    assert.equal(c.httpStatus, 200);
    assert.equal(typeof c.at, 'number');
  }
  assert.deepEqual(t.calls[3].response, { task_id: id, status: 'completed', result: { ok: 1 } });
  for (let i = 2; i <= 3; i++) {
    const gap = t.calls[i].at - t.calls[i - 1].at;
    // `at` is the arrival time: at least the 120 ms the test waited between calls.
    assert.ok(gap >= 110, `gap ${gap}`);
  }
  // The usual request records exist too.
  assert.equal(tools.requestsFor(t.statusPath).length, 3);
  assert.equal(tools.requestsFor(t.statusPath)[0].status, 200);
});

test('async delayMs delays every answer', async () => {
  const t = tools.addAsyncTool({ apiKey: KEY, delayMs: 200 });
  const t0 = Date.now();
  const id = (await post(t.submitPath, {})).json.task_id;
  assert.ok(Date.now() - t0 >= 180);
  assert.equal(t.calls[0].httpStatus, 200);
  assert.ok(id);
});
