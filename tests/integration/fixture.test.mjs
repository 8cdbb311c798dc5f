// Pins the contract of the fake Dify Service API (tests/support/dify-fixture.mjs),
// so Flowgate's integration tests can rely on it.
// Run: node --test tests/integration/fixture.test.mjs
import test from 'node:test';
import assert from 'node:assert/strict';
import { startDifyFixture, randomApiKey } from '../support/dify-fixture.mjs';
import { readResponse } from '../support/harness.mjs';

const FORM = [
  { 'text-input': { label: 'City', variable: 'city', required: true, max_length: 48, default: '' } },
  { select: { label: 'Unit', variable: 'unit', required: false, options: ['C', 'F'], default: 'C' } },
];

let dify;
test.before(async () => {
  dify = await startDifyFixture();
});
test.after(async () => {
  await dify?.stop();
});

async function call(path, { method = 'GET', key, body, headers = {} } = {}) {
  const h = { ...headers };
  if (key !== undefined) h.Authorization = `Bearer ${key}`;
  let payload;
  if (body !== undefined) {
    payload = typeof body === 'string' ? body : JSON.stringify(body);
    h['Content-Type'] = 'application/json';
  }
  const res = await fetch(dify.origin + path, { method, headers: h, body: payload });
  return readResponse(res);
}

const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

test('baseUrl is a loopback /v1 URL', () => {
  assert.match(dify.baseUrl, /^http:\/\/127\.0\.0\.1:\d+\/v1$/);
  assert.equal(dify.baseUrl, `${dify.origin}/v1`);
});

test('api keys look like Dify app keys and are unique', () => {
  const a = dify.addApp({ mode: 'workflow', name: 'k1' });
  const b = dify.addApp({ mode: 'workflow', name: 'k2' });
  assert.match(a, /^app-[A-Za-z0-9]{24}$/);
  assert.notEqual(a, b);
  assert.match(randomApiKey(), /^app-[A-Za-z0-9]{24}$/);
  assert.equal(dify.addApp({ mode: 'chat', apiKey: 'app-explicitkey' }), 'app-explicitkey');
  assert.throws(() => dify.addApp({ mode: 'chat', apiKey: 'app-explicitkey' }), /already registered/);
  assert.throws(() => dify.addApp({ mode: 'nope' }), /mode must be one of/);
  assert.throws(() => dify.addApp({ mode: 'chat', behaviour: 'weird' }), /unknown behaviour/);
});

test('auth: missing, malformed or unknown key is 401 unauthorized', async () => {
  const expected = { code: 'unauthorized', message: 'Access token is invalid', status: 401 };
  for (const opts of [
    {},
    { key: 'app-doesnotexist000000000000' },
    { headers: { Authorization: 'Basic Zm9vOmJhcg==' } },
  ]) {
    for (const [path, method, body] of [
      ['/v1/info', 'GET'],
      ['/v1/parameters', 'GET'],
      ['/v1/workflows/run', 'POST', { inputs: {}, user: 'u' }],
      ['/v1/chat-messages', 'POST', { query: 'q', inputs: {}, user: 'u' }],
      ['/v1/completion-messages', 'POST', { inputs: {}, user: 'u' }],
    ]) {
      const r = await call(path, { method, body, ...opts });
      assert.equal(r.status, 401, `${method} ${path} ${JSON.stringify(opts)}`);
      assert.match(r.headers.get('content-type'), /application\/json/);
      assert.deepEqual(r.json, expected);
    }
  }
});

test('removeApp revokes the key', async () => {
  const key = dify.addApp({ mode: 'workflow' });
  assert.equal((await call('/v1/info', { key })).status, 200);
  assert.equal(dify.removeApp(key), true);
  assert.equal((await call('/v1/info', { key })).status, 401);
});

test('unknown path is 404, wrong method is 405', async () => {
  const key = dify.addApp({ mode: 'workflow' });
  const r404 = await call('/v1/nope', { key });
  assert.equal(r404.status, 404);
  assert.equal(r404.json.code, 'not_found');
  const r405 = await call('/v1/workflows/run', { key });
  assert.equal(r405.status, 405);
  assert.equal(r405.json.code, 'method_not_allowed');
  assert.match(r405.headers.get('allow'), /POST/);
});

test('GET /v1/info', async () => {
  const key = dify.addApp({ mode: 'advanced-chat', name: 'Weather 天气', description: 'Tells weather', tags: ['a', 'b'] });
  const r = await call('/v1/info', { key });
  assert.equal(r.status, 200);
  assert.match(r.headers.get('content-type'), /^application\/json/);
  assert.deepEqual(r.json, {
    name: 'Weather 天气',
    description: 'Tells weather',
    tags: ['a', 'b'],
    mode: 'advanced-chat',
    author_name: 'fixture',
  });
  const d = await call('/v1/info', { key: dify.addApp({ mode: 'workflow' }) });
  assert.equal(d.json.description, '');
  assert.deepEqual(d.json.tags, []);
  assert.equal(typeof d.json.name, 'string');
});

test('GET /v1/parameters', async () => {
  const key = dify.addApp({ mode: 'workflow', user_input_form: FORM });
  const r = await call('/v1/parameters', { key });
  assert.equal(r.status, 200);
  assert.equal(r.json.opening_statement, '');
  assert.deepEqual(r.json.suggested_questions, []);
  assert.deepEqual(r.json.user_input_form, FORM);
  assert.deepEqual(r.json.file_upload, { image: { enabled: false } });
  assert.deepEqual(r.json.system_parameters, {
    file_size_limit: 15,
    image_file_size_limit: 10,
    audio_file_size_limit: 50,
    video_file_size_limit: 100,
  });
  const empty = await call('/v1/parameters', { key: dify.addApp({ mode: 'chat' }) });
  assert.deepEqual(empty.json.user_input_form, []);
});

test('updateApp changes the form and behaviour in place', async () => {
  const key = dify.addApp({ mode: 'workflow', user_input_form: [] });
  dify.updateApp(key, { user_input_form: FORM, behaviour: 'dify_error' });
  assert.deepEqual((await call('/v1/parameters', { key })).json.user_input_form, FORM);
  const r = await call('/v1/workflows/run', { method: 'POST', key, body: { inputs: {}, user: 'u' } });
  assert.equal(r.status, 400);
  dify.updateApp(key, { behaviour: 'ok' });
  assert.equal((await call('/v1/workflows/run', { method: 'POST', key, body: { inputs: {}, user: 'u' } })).status, 200);
  assert.throws(() => dify.updateApp('app-unknown', {}), /unknown api key/);
});

test('POST /v1/workflows/run blocking: default echo outputs', async () => {
  const key = dify.addApp({ mode: 'workflow', user_input_form: FORM });
  const inputs = { city: 'Oslo', unit: 'C' };
  const r = await call('/v1/workflows/run', {
    method: 'POST',
    key,
    body: { inputs, response_mode: 'blocking', user: 'flowgate-test' },
  });
  assert.equal(r.status, 200);
  assert.match(r.headers.get('content-type'), /^application\/json/);
  const j = r.json;
  assert.deepEqual(Object.keys(j).sort(), ['data', 'task_id', 'workflow_run_id']);
  assert.match(j.workflow_run_id, UUID);
  assert.match(j.task_id, UUID);
  assert.deepEqual(Object.keys(j.data).sort(), [
    'created_at', 'elapsed_time', 'error', 'finished_at', 'id', 'outputs', 'status', 'total_steps', 'total_tokens', 'workflow_id',
  ]);
  assert.equal(j.data.id, j.workflow_run_id);
  assert.match(j.data.workflow_id, UUID);
  assert.equal(j.data.status, 'succeeded');
  assert.deepEqual(j.data.outputs, { echo: inputs });
  assert.equal(j.data.error, null);
  assert.equal(typeof j.data.elapsed_time, 'number');
  assert.equal(typeof j.data.total_tokens, 'number');
  assert.equal(typeof j.data.total_steps, 'number');
  assert.ok(Number.isInteger(j.data.created_at) && Number.isInteger(j.data.finished_at));

  // The same app keeps the same workflow_id; run ids are fresh.
  const r2 = await call('/v1/workflows/run', { method: 'POST', key, body: { inputs: {}, user: 'u' } });
  assert.equal(r2.json.data.workflow_id, j.data.workflow_id);
  assert.notEqual(r2.json.workflow_run_id, j.workflow_run_id);
  // /workflows/{id}/run is accepted too.
  const r3 = await call(`/v1/workflows/${j.data.workflow_id}/run`, { method: 'POST', key, body: { inputs: {}, user: 'u' } });
  assert.equal(r3.status, 200);
});

test('POST /v1/workflows/run: outputs object or function', async () => {
  const k1 = dify.addApp({ mode: 'workflow', outputs: { text: 'fixed' } });
  const r1 = await call('/v1/workflows/run', { method: 'POST', key: k1, body: { inputs: { a: 1 }, response_mode: 'blocking', user: 'u' } });
  assert.deepEqual(r1.json.data.outputs, { text: 'fixed' });
  const k2 = dify.addApp({ mode: 'workflow', outputs: (inputs) => ({ doubled: inputs.n * 2, 文字: 'ü' }) });
  const r2 = await call('/v1/workflows/run', { method: 'POST', key: k2, body: { inputs: { n: 21 }, response_mode: 'blocking', user: 'u' } });
  assert.deepEqual(r2.json.data.outputs, { doubled: 42, 文字: 'ü' });
});

test('POST /v1/workflows/run validation', async () => {
  const key = dify.addApp({ mode: 'workflow' });
  const post = (body) => call('/v1/workflows/run', { method: 'POST', key, body });
  for (const body of [
    { inputs: {}, response_mode: 'blocking' }, // no user
    { inputs: {}, response_mode: 'blocking', user: '' },
    { inputs: {}, response_mode: 'blocking', user: 42 },
    { response_mode: 'blocking', user: 'u' }, // no inputs
    { inputs: [], response_mode: 'blocking', user: 'u' },
    { inputs: null, response_mode: 'blocking', user: 'u' },
    { inputs: 'x', response_mode: 'blocking', user: 'u' },
    { inputs: {}, response_mode: 'fast', user: 'u' },
  ]) {
    const r = await post(body);
    assert.equal(r.status, 400, JSON.stringify(body));
    assert.equal(r.json.code, 'invalid_param', JSON.stringify(body));
    assert.equal(r.json.status, 400);
    assert.equal(typeof r.json.message, 'string');
  }
  // Not JSON / not an object.
  for (const raw of ['{not json', '[1,2]', '']) {
    const r = await post(raw);
    assert.equal(r.status, 400, raw);
    assert.equal(r.json.code, 'bad_request');
  }
  // response_mode absent means blocking.
  const ok = await post({ inputs: {}, user: 'u' });
  assert.equal(ok.status, 200);
  assert.equal(ok.json.data.status, 'succeeded');
});

test('wrong mode for an endpoint is 400 app_unavailable', async () => {
  const wf = dify.addApp({ mode: 'workflow' });
  const chat = dify.addApp({ mode: 'chat' });
  const comp = dify.addApp({ mode: 'completion' });
  for (const [key, path, body] of [
    [chat, '/v1/workflows/run', { inputs: {}, user: 'u', response_mode: 'blocking' }],
    [comp, '/v1/workflows/run', { inputs: {}, user: 'u', response_mode: 'blocking' }],
    [wf, '/v1/chat-messages', { query: 'q', inputs: {}, user: 'u', response_mode: 'blocking' }],
    [comp, '/v1/chat-messages', { query: 'q', inputs: {}, user: 'u', response_mode: 'blocking' }],
    [wf, '/v1/completion-messages', { inputs: {}, user: 'u', response_mode: 'blocking' }],
    [chat, '/v1/completion-messages', { inputs: {}, user: 'u', response_mode: 'blocking' }],
  ]) {
    const r = await call(path, { method: 'POST', key, body });
    assert.equal(r.status, 400, path);
    assert.equal(r.json.code, 'app_unavailable', path);
    assert.equal(r.json.status, 400);
  }
});

function assertMessageShape(j, mode) {
  assert.deepEqual(Object.keys(j).sort(), [
    'answer', 'conversation_id', 'created_at', 'event', 'id', 'message_id', 'metadata', 'mode', 'task_id',
  ]);
  assert.equal(j.event, 'message');
  assert.equal(j.mode, mode);
  assert.match(j.task_id, UUID);
  assert.match(j.id, UUID);
  assert.equal(j.message_id, j.id);
  assert.match(j.conversation_id, UUID);
  assert.ok(Number.isInteger(j.created_at));
  assert.equal(typeof j.metadata.usage.total_tokens, 'number');
  assert.equal(typeof j.metadata.usage.prompt_tokens, 'number');
  assert.equal(typeof j.metadata.usage.completion_tokens, 'number');
  assert.equal(j.metadata.usage.currency, 'USD');
  assert.deepEqual(j.metadata.retriever_resources, []);
}

for (const mode of ['chat', 'advanced-chat']) {
  test(`POST /v1/chat-messages blocking (${mode})`, async () => {
    const key = dify.addApp({ mode });
    const r = await call('/v1/chat-messages', {
      method: 'POST',
      key,
      body: { query: 'hello there', inputs: { x: 1 }, response_mode: 'blocking', user: 'u1' },
    });
    assert.equal(r.status, 200);
    assertMessageShape(r.json, mode);
    assert.equal(r.json.answer, 'echo: hello there');

    // Continuing the conversation keeps its id; an unknown id is 404.
    const cid = r.json.conversation_id;
    assert.deepEqual(dify.conversationsOf(key), [cid]);
    const r2 = await call('/v1/chat-messages', {
      method: 'POST',
      key,
      body: { query: 'again', inputs: {}, response_mode: 'blocking', user: 'u1', conversation_id: cid },
    });
    assert.equal(r2.status, 200);
    assert.equal(r2.json.conversation_id, cid);
    const r3 = await call('/v1/chat-messages', {
      method: 'POST',
      key,
      body: { query: 'x', inputs: {}, response_mode: 'blocking', user: 'u1', conversation_id: '00000000-0000-0000-0000-000000000000' },
    });
    assert.equal(r3.status, 404);
    assert.deepEqual(r3.json, { code: 'not_found', message: 'Conversation Not Exists.', status: 404 });
    // Empty conversation_id starts a new conversation.
    const r4 = await call('/v1/chat-messages', {
      method: 'POST',
      key,
      body: { query: 'x', inputs: {}, response_mode: 'blocking', user: 'u1', conversation_id: '' },
    });
    assert.equal(r4.status, 200);
    assert.notEqual(r4.json.conversation_id, cid);
  });
}

test('POST /v1/chat-messages: answer function and validation', async () => {
  const key = dify.addApp({ mode: 'chat', answer: (q, inputs) => `${q.toUpperCase()} in ${inputs.city}` });
  const r = await call('/v1/chat-messages', {
    method: 'POST',
    key,
    body: { query: 'weather', inputs: { city: 'Oslo' }, response_mode: 'blocking', user: 'u' },
  });
  assert.equal(r.json.answer, 'WEATHER in Oslo');
  const fixed = dify.addApp({ mode: 'chat', answer: 'always this' });
  const rf = await call('/v1/chat-messages', {
    method: 'POST',
    key: fixed,
    body: { query: 'q', inputs: {}, response_mode: 'blocking', user: 'u' },
  });
  assert.equal(rf.json.answer, 'always this');
  for (const body of [
    { inputs: {}, response_mode: 'blocking', user: 'u' }, // no query
    { query: 1, inputs: {}, response_mode: 'blocking', user: 'u' },
    { query: 'q', response_mode: 'blocking', user: 'u' }, // no inputs
    { query: 'q', inputs: {}, response_mode: 'blocking' }, // no user
  ]) {
    const e = await call('/v1/chat-messages', { method: 'POST', key, body });
    assert.equal(e.status, 400, JSON.stringify(body));
    assert.equal(e.json.code, 'invalid_param');
  }
});

test('agent-chat refuses blocking mode', async () => {
  const key = dify.addApp({ mode: 'agent-chat' });
  const r = await call('/v1/chat-messages', {
    method: 'POST',
    key,
    body: { query: 'hi', inputs: {}, response_mode: 'blocking', user: 'u' },
  });
  assert.equal(r.status, 400);
  assert.deepEqual(r.json, {
    code: 'invalid_param',
    message: 'Agent Chat App does not support blocking mode',
    status: 400,
  });
  // Absent response_mode is blocking too.
  const r2 = await call('/v1/chat-messages', { method: 'POST', key, body: { query: 'hi', inputs: {}, user: 'u' } });
  assert.equal(r2.status, 400);
  assert.equal(r2.json.message, 'Agent Chat App does not support blocking mode');
});

function parseSse(text) {
  assert.ok(text.endsWith('\n\n'), 'SSE body ends with a blank line');
  return text
    .split('\n\n')
    .filter((b) => b.length)
    .map((block) => {
      assert.match(block, /^data: /);
      return JSON.parse(block.slice('data: '.length));
    });
}

test('streaming: agent-chat emits agent_thought / agent_message / message_end', async () => {
  const key = dify.addApp({ mode: 'agent-chat', answer: 'The answer is 42.' });
  const r = await call('/v1/chat-messages', {
    method: 'POST',
    key,
    body: { query: 'q', inputs: {}, response_mode: 'streaming', user: 'u' },
  });
  assert.equal(r.status, 200);
  assert.match(r.headers.get('content-type'), /^text\/event-stream/);
  const events = parseSse(r.text);
  assert.deepEqual([...new Set(events.map((e) => e.event))], ['agent_thought', 'agent_message', 'message_end']);
  assert.ok(events.filter((e) => e.event === 'agent_message').length > 1, 'answer is chunked');
  const answer = events.filter((e) => e.event === 'agent_message').map((e) => e.answer).join('');
  assert.equal(answer, 'The answer is 42.');
  const last = events.at(-1);
  assert.equal(last.event, 'message_end');
  assert.equal(typeof last.metadata.usage.total_tokens, 'number');
  const cid = events[0].conversation_id;
  assert.match(cid, UUID);
  for (const e of events) assert.equal(e.conversation_id, cid);
  assert.equal(events.filter((e) => e.event === 'agent_thought').at(-1).thought, 'The answer is 42.');
});

test('streaming: chat emits message chunks then message_end', async () => {
  const key = dify.addApp({ mode: 'chat' });
  const r = await call('/v1/chat-messages', {
    method: 'POST',
    key,
    body: { query: 'a b c', inputs: {}, response_mode: 'streaming', user: 'u' },
  });
  const events = parseSse(r.text);
  assert.equal(events.at(-1).event, 'message_end');
  const msgs = events.filter((e) => e.event === 'message');
  assert.equal(msgs.map((e) => e.answer).join(''), 'echo: a b c');
  for (const m of msgs) assert.ok(m.message_id && m.task_id && m.conversation_id);
});

test('streaming: workflow emits workflow_started and workflow_finished', async () => {
  const key = dify.addApp({ mode: 'workflow' });
  const r = await call('/v1/workflows/run', {
    method: 'POST',
    key,
    body: { inputs: { a: 'b' }, response_mode: 'streaming', user: 'u' },
  });
  const events = parseSse(r.text);
  assert.deepEqual(events.map((e) => e.event), ['workflow_started', 'workflow_finished']);
  for (const e of events) {
    assert.match(e.task_id, UUID);
    assert.match(e.workflow_run_id, UUID);
  }
  assert.deepEqual(events[0].data.inputs, { a: 'b' });
  assert.equal(events[1].data.status, 'succeeded');
  assert.deepEqual(events[1].data.outputs, { echo: { a: 'b' } });
});

test('POST /v1/completion-messages blocking', async () => {
  const key = dify.addApp({ mode: 'completion' });
  const inputs = { topic: 'cats', n: 3 };
  const r = await call('/v1/completion-messages', {
    method: 'POST',
    key,
    body: { inputs, response_mode: 'blocking', user: 'u', query: '' },
  });
  assert.equal(r.status, 200);
  assertMessageShape(r.json, 'completion');
  assert.equal(r.json.answer, `completion: ${JSON.stringify(inputs)}`);
  // query is optional
  const r2 = await call('/v1/completion-messages', { method: 'POST', key, body: { inputs: {}, response_mode: 'blocking', user: 'u' } });
  assert.equal(r2.status, 200);
  assert.equal(r2.json.answer, 'completion: {}');
  // answer function gets (query, inputs)
  const k2 = dify.addApp({ mode: 'completion', answer: (q, i) => `${q}|${i.topic}` });
  const r3 = await call('/v1/completion-messages', { method: 'POST', key: k2, body: { inputs: { topic: 't' }, user: 'u' } });
  assert.equal(r3.json.answer, '|t');
  // validation
  for (const body of [{ inputs: {} }, { user: 'u' }, { inputs: [], user: 'u' }]) {
    const e = await call('/v1/completion-messages', { method: 'POST', key, body });
    assert.equal(e.status, 400, JSON.stringify(body));
    assert.equal(e.json.code, 'invalid_param');
  }
});

const RUNS = {
  workflow: ['/v1/workflows/run', { inputs: {}, response_mode: 'blocking', user: 'u' }],
  chat: ['/v1/chat-messages', { query: 'q', inputs: {}, response_mode: 'blocking', user: 'u' }],
  'advanced-chat': ['/v1/chat-messages', { query: 'q', inputs: {}, response_mode: 'blocking', user: 'u' }],
  completion: ['/v1/completion-messages', { inputs: {}, response_mode: 'blocking', user: 'u' }],
};

for (const [mode, [path, body]] of Object.entries(RUNS)) {
  test(`behaviour http500 (${mode})`, async () => {
    const key = dify.addApp({ mode, behaviour: 'http500' });
    const r = await call(path, { method: 'POST', key, body });
    assert.equal(r.status, 500);
    assert.match(r.headers.get('content-type'), /^text\/plain/);
    assert.equal(r.text, 'Internal Server Error');
    // info and parameters still work, so the app can be registered
    assert.equal((await call('/v1/info', { key })).status, 200);
    assert.equal((await call('/v1/parameters', { key })).status, 200);
  });

  test(`behaviour dify_error (${mode})`, async () => {
    const key = dify.addApp({ mode, behaviour: 'dify_error' });
    const r = await call(path, { method: 'POST', key, body });
    assert.equal(r.status, 400);
    assert.match(r.headers.get('content-type'), /^application\/json/);
    assert.deepEqual(r.json, {
      code: 'provider_quota_exceeded',
      message: 'Your quota for Dify Hosted Model Provider has been exhausted.',
      status: 400,
    });
  });
}

test('behaviours still validate the request first', async () => {
  const key = dify.addApp({ mode: 'workflow', behaviour: 'http500' });
  const r = await call('/v1/workflows/run', { method: 'POST', key, body: { inputs: {} } });
  assert.equal(r.status, 400);
  assert.equal(r.json.code, 'invalid_param');
});

test('behaviour workflow_failed', async () => {
  const key = dify.addApp({ mode: 'workflow', behaviour: 'workflow_failed', outputs: { ignored: true } });
  const r = await call('/v1/workflows/run', {
    method: 'POST',
    key,
    body: { inputs: { a: 1 }, response_mode: 'blocking', user: 'u' },
  });
  assert.equal(r.status, 200);
  assert.equal(r.json.data.status, 'failed');
  assert.equal(r.json.data.error, 'Node LLM failed: model timeout');
  assert.deepEqual(r.json.data.outputs, {});
  assert.match(r.json.workflow_run_id, UUID);
});

test('behaviour slow: delays the answer without blocking other requests', async () => {
  const slowKey = dify.addApp({ mode: 'workflow', behaviour: 'slow', delayMs: 600 });
  const fastKey = dify.addApp({ mode: 'workflow' });
  const t0 = Date.now();
  const slow = call('/v1/workflows/run', { method: 'POST', key: slowKey, body: { inputs: { s: 1 }, user: 'u' } });
  const fast = await call('/v1/workflows/run', { method: 'POST', key: fastKey, body: { inputs: {}, user: 'u' } });
  const fastMs = Date.now() - t0;
  assert.equal(fast.status, 200);
  assert.ok(fastMs < 400, `fast request took ${fastMs} ms while a slow one was pending`);
  const s = await slow;
  const slowMs = Date.now() - t0;
  assert.equal(s.status, 200);
  assert.deepEqual(s.json.data.outputs, { echo: { s: 1 } });
  assert.ok(slowMs >= 550, `slow answer came after ${slowMs} ms`);
});

test('explicit delayMs delays any behaviour', async () => {
  const key = dify.addApp({ mode: 'chat', behaviour: 'dify_error', delayMs: 300 });
  const t0 = Date.now();
  const r = await call('/v1/chat-messages', { method: 'POST', key, body: RUNS.chat[1] });
  assert.ok(Date.now() - t0 >= 250);
  assert.equal(r.json.code, 'provider_quota_exceeded');
});

test('requests are recorded with method, path, headers and parsed body', async () => {
  const key = dify.addApp({ mode: 'workflow' });
  await call('/v1/parameters?x=1', { key });
  await call('/v1/workflows/run', {
    method: 'POST',
    key,
    body: { inputs: { q: 'z' }, response_mode: 'blocking', user: 'rec' },
    headers: { 'X-Trace': 't1' },
  });
  const mine = dify.requestsFor(key);
  assert.equal(mine.length, 2);
  assert.equal(mine[0].method, 'GET');
  assert.equal(mine[0].path, '/v1/parameters');
  assert.deepEqual(mine[0].query, { x: '1' });
  assert.equal(mine[0].body, undefined);
  assert.equal(mine[1].method, 'POST');
  assert.equal(mine[1].path, '/v1/workflows/run');
  assert.equal(mine[1].headers.authorization, `Bearer ${key}`);
  assert.equal(mine[1].headers['x-trace'], 't1');
  assert.deepEqual(mine[1].body, { inputs: { q: 'z' }, response_mode: 'blocking', user: 'rec' });
  assert.ok(dify.requests.includes(mine[1]));
  // unauthenticated requests are recorded too
  const before = dify.requests.length;
  await call('/v1/info');
  assert.equal(dify.requests.length, before + 1);
  assert.equal(dify.requests.at(-1).apiKey, null);
});

test('concurrent apps do not interfere', async () => {
  const keys = await Promise.all(
    Array.from({ length: 20 }, async (_, i) => {
      const key = dify.addApp({ mode: 'workflow', outputs: () => ({ i }) });
      const r = await call('/v1/workflows/run', { method: 'POST', key, body: { inputs: {}, user: `u${i}` } });
      assert.deepEqual(r.json.data.outputs, { i });
      return key;
    }),
  );
  for (const [i, key] of keys.entries()) {
    const mine = dify.requestsFor(key);
    assert.equal(mine.length, 1);
    assert.equal(mine[0].body.user, `u${i}`);
  }
});

test('stop() ends pending slow requests promptly and is idempotent', async () => {
  const own = await startDifyFixture();
  const key = own.addApp({ mode: 'workflow', behaviour: 'slow' }); // default 30 s
  const pending = fetch(`${own.baseUrl}/workflows/run`, {
    method: 'POST',
    headers: { Authorization: `Bearer ${key}`, 'Content-Type': 'application/json' },
    body: JSON.stringify({ inputs: {}, response_mode: 'blocking', user: 'u' }),
  }).then(
    (r) => r.text().then(() => 'answered', () => 'aborted'),
    () => 'aborted',
  );
  // Make sure the request has arrived before stopping.
  for (let i = 0; i < 100 && own.requests.length === 0; i++) await new Promise((r) => setTimeout(r, 10));
  assert.equal(own.requests.length, 1);
  const t0 = Date.now();
  await Promise.all([own.stop(), own.stop()]);
  assert.equal(await pending, 'aborted');
  assert.ok(Date.now() - t0 < 2000, `stop took ${Date.now() - t0} ms`);
  await own.stop();
  await assert.rejects(fetch(`${own.baseUrl}/info`));
});
