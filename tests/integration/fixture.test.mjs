// Pins the contract of the fake Dify Service API (tests/support/dify-fixture.mjs),
// so Flowgate's integration tests can rely on it.
// Run: node --test tests/integration/fixture.test.mjs
import test from 'node:test';
import assert from 'node:assert/strict';
import { startDifyFixture, randomApiKey, PING_FRAME, MALFORMED_FRAME, DEFAULT_NODES, RUN_PING_INTERVAL_MS, filler } from '../support/dify-fixture.mjs';
import { freePort, readResponse, startProcessGroup } from '../support/harness.mjs';

const FORM = [
  { 'text-input': { label: 'City', variable: 'city', required: true, max_length: 48, default: '' } },
  { select: { label: 'Unit', variable: 'unit', required: false, options: ['C', 'F'], default: 'C' } },
];

// The fixture checks a run's inputs against the app's form: the apps of these tests declare
// every variable they are sent (addApp below), unless a test gives its own form.
const ANY_FORM = [
  { 'text-input': { variable: 'a', label: 'A' } },
  { 'text-input': { variable: 'city', label: 'City' } },
  { 'text-input': { variable: 'topic', label: 'Topic' } },
  { 'text-input': { variable: 'q', label: 'Q' } },
  { select: { variable: 'unit', label: 'Unit', options: ['C', 'F'] } },
  { number: { variable: 'n', label: 'N' } },
  { number: { variable: 's', label: 'S' } },
  { number: { variable: 'x', label: 'X' } },
];

let dify;
const addApp = (spec = {}) => dify.addApp({ user_input_form: ANY_FORM, ...spec });
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
  const a = addApp({ mode: 'workflow', name: 'k1' });
  const b = addApp({ mode: 'workflow', name: 'k2' });
  assert.match(a, /^app-[A-Za-z0-9]{24}$/);
  assert.notEqual(a, b);
  assert.match(randomApiKey(), /^app-[A-Za-z0-9]{24}$/);
  assert.equal(addApp({ mode: 'chat', apiKey: 'app-explicitkey' }), 'app-explicitkey');
  assert.throws(() => addApp({ mode: 'chat', apiKey: 'app-explicitkey' }), /already registered/);
  assert.throws(() => addApp({ mode: 'nope' }), /mode must be one of/);
  assert.throws(() => addApp({ mode: 'chat', behaviour: 'weird' }), /unknown behaviour/);
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
  const key = addApp({ mode: 'workflow' });
  assert.equal((await call('/v1/info', { key })).status, 200);
  assert.equal(dify.removeApp(key), true);
  assert.equal((await call('/v1/info', { key })).status, 401);
});

test('unknown path is 404, wrong method is 405', async () => {
  const key = addApp({ mode: 'workflow' });
  const r404 = await call('/v1/nope', { key });
  assert.equal(r404.status, 404);
  assert.equal(r404.json.code, 'not_found');
  const r405 = await call('/v1/workflows/run', { key });
  assert.equal(r405.status, 405);
  assert.equal(r405.json.code, 'method_not_allowed');
  assert.match(r405.headers.get('allow'), /POST/);
});

test('GET /v1/info', async () => {
  const key = addApp({ mode: 'advanced-chat', name: 'Weather 天气', description: 'Tells weather', tags: ['a', 'b'] });
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
  const d = await call('/v1/info', { key: addApp({ mode: 'workflow' }) });
  assert.equal(d.json.description, '');
  assert.deepEqual(d.json.tags, []);
  assert.equal(typeof d.json.name, 'string');
});

test('GET /v1/parameters', async () => {
  const key = addApp({ mode: 'workflow', user_input_form: FORM });
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
  const key = addApp({ mode: 'workflow', user_input_form: [] });
  dify.updateApp(key, { user_input_form: FORM, behaviour: 'dify_error' });
  assert.deepEqual((await call('/v1/parameters', { key })).json.user_input_form, FORM);
  const body = { inputs: { city: 'Oslo' }, response_mode: 'blocking', user: 'u' };
  const r = await call('/v1/workflows/run', { method: 'POST', key, body });
  assert.equal(r.status, 400);
  assert.equal(r.json.code, 'provider_quota_exceeded');
  // The new form is the one inputs are checked against.
  const noCity = await call('/v1/workflows/run', { method: 'POST', key, body: { ...body, inputs: {} } });
  assert.equal(noCity.json.message, 'city is required in input form');
  dify.updateApp(key, { behaviour: 'ok' });
  assert.equal((await call('/v1/workflows/run', { method: 'POST', key, body })).status, 200);
  assert.throws(() => dify.updateApp('app-unknown', {}), /unknown api key/);
});

test('POST /v1/workflows/run blocking: default echo outputs', async () => {
  const key = addApp({ mode: 'workflow', user_input_form: FORM });
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
  const again = { inputs: { city: 'Bergen' }, response_mode: 'blocking', user: 'u' };
  const r2 = await call('/v1/workflows/run', { method: 'POST', key, body: again });
  assert.equal(r2.json.data.workflow_id, j.data.workflow_id);
  assert.notEqual(r2.json.workflow_run_id, j.workflow_run_id);
  // /workflows/{id}/run is accepted too.
  const r3 = await call(`/v1/workflows/${j.data.workflow_id}/run`, { method: 'POST', key, body: again });
  assert.equal(r3.status, 200);
});

test('POST /v1/workflows/run: outputs object or function', async () => {
  const k1 = addApp({ mode: 'workflow', outputs: { text: 'fixed' } });
  const r1 = await call('/v1/workflows/run', { method: 'POST', key: k1, body: { inputs: { a: 'one' }, response_mode: 'blocking', user: 'u' } });
  assert.deepEqual(r1.json.data.outputs, { text: 'fixed' });
  const k2 = addApp({ mode: 'workflow', outputs: (inputs) => ({ doubled: inputs.n * 2, 文字: 'ü' }) });
  const r2 = await call('/v1/workflows/run', { method: 'POST', key: k2, body: { inputs: { n: 21 }, response_mode: 'blocking', user: 'u' } });
  assert.deepEqual(r2.json.data.outputs, { doubled: 42, 文字: 'ü' });
});

test('POST /v1/workflows/run validation', async () => {
  const key = addApp({ mode: 'workflow' });
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
  // response_mode is required (Dify would take its absence as blocking; a request without it is
  // a Flowgate bug the fixture must catch).
  const missing = await post({ inputs: {}, user: 'u' });
  assert.equal(missing.status, 400);
  assert.deepEqual(missing.json, { code: 'invalid_param', message: "response_mode is required: 'blocking' or 'streaming'", status: 400 });
  const ok = await post({ inputs: {}, response_mode: 'blocking', user: 'u' });
  assert.equal(ok.status, 200);
  assert.equal(ok.json.data.status, 'succeeded');
});

test('inputs are checked against the app\'s form: unknown variables, required, types, options, max_length', async () => {
  const form = [
    { 'text-input': { variable: 'name', label: 'Name', required: true, max_length: 5 } },
    { paragraph: { variable: 'bio', label: 'Bio' } },
    { select: { variable: 'size', label: 'Size', options: ['S', 'M'] } },
    { number: { variable: 'count', label: 'Count' } },
    { checkbox: { variable: 'loud', label: 'Loud' } },
    { json_object: { variable: 'extra', label: 'Extra' } },
    { type: 'text-input', variable: 'nick', label: 'Nick', required: true }, // the flat shape
    { file: { variable: 'doc', label: 'Doc' } },
  ];
  const ok = { name: 'Ada', nick: 'a' };
  for (const mode of ['workflow', 'chat', 'completion']) {
    const key = dify.addApp({ mode, user_input_form: form });
    const [path, base] = RUNS[mode];
    const post = (inputs) => call(path, { method: 'POST', key, body: { ...base, inputs } });
    for (const [inputs, message] of [
      [{}, 'name is required in input form'],
      [{ name: '', nick: 'a' }, 'name is required in input form'],
      [{ name: null, nick: 'a' }, 'name is required in input form'],
      [{ name: 'Ada' }, 'nick is required in input form'],
      [{ ...ok, query: 'q' }, "query is not a variable of this app's input form"],
      [{ ...ok, name: 7 }, 'name in input form must be a string'],
      [{ ...ok, name: 'Adalovelace' }, 'name in input form must be less than 5 characters'],
      [{ ...ok, bio: ['x'] }, 'bio in input form must be a string'],
      [{ ...ok, size: 'XL' }, 'size in input form must be one of the following: ["S","M"]'],
      [{ ...ok, count: '3' }, 'count in input form must be a valid number'],
      [{ ...ok, loud: 'yes' }, 'loud in input form must be a boolean'],
      [{ ...ok, extra: 'x' }, 'extra in input form must be a JSON object'],
    ]) {
      const r = await post(inputs);
      assert.equal(r.status, 400, `${mode} ${JSON.stringify(inputs)}`);
      assert.deepEqual(r.json, { code: 'invalid_param', message, status: 400 }, `${mode} ${JSON.stringify(inputs)}`);
    }
    const full = { name: 'Ada', nick: 'a', bio: 'b', size: 'M', count: 2.5, loud: false, extra: { k: 1 }, doc: { any: 'thing' } };
    for (const inputs of [ok, full, { ...ok, bio: null, size: '' }]) assert.equal((await post(inputs)).status, 200, `${mode} ${JSON.stringify(inputs)}`);
    // Refused requests are still recorded, with their bodies.
    assert.equal(dify.requestsFor(key).length, 15);
  }
});

test('wrong mode for an endpoint is 400 app_unavailable', async () => {
  const wf = addApp({ mode: 'workflow' });
  const chat = addApp({ mode: 'chat' });
  const comp = addApp({ mode: 'completion' });
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
    const key = addApp({ mode });
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
  const key = addApp({ mode: 'chat', answer: (q, inputs) => `${q.toUpperCase()} in ${inputs.city}` });
  const r = await call('/v1/chat-messages', {
    method: 'POST',
    key,
    body: { query: 'weather', inputs: { city: 'Oslo' }, response_mode: 'blocking', user: 'u' },
  });
  assert.equal(r.json.answer, 'WEATHER in Oslo');
  const fixed = addApp({ mode: 'chat', answer: 'always this' });
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
  const key = addApp({ mode: 'agent-chat' });
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
  // Absent response_mode is refused before that.
  const r2 = await call('/v1/chat-messages', { method: 'POST', key, body: { query: 'hi', inputs: {}, user: 'u' } });
  assert.equal(r2.status, 400);
  assert.equal(r2.json.message, "response_mode is required: 'blocking' or 'streaming'");
});

// The JSON events of an SSE body; keep-alive frames (exactly `event: ping\n\n`) are skipped.
function parseSse(text) {
  assert.ok(text.endsWith('\n\n'), 'SSE body ends with a blank line');
  return text
    .split('\n\n')
    .filter((b) => b.length && b !== 'event: ping')
    .map((block) => {
      assert.match(block, /^data: /);
      return JSON.parse(block.slice('data: '.length));
    });
}

test('streaming: agent-chat emits agent_thought / agent_message / message_end', async () => {
  const key = addApp({ mode: 'agent-chat', answer: 'The answer is 42.' });
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
  const key = addApp({ mode: 'chat' });
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
  const key = addApp({ mode: 'workflow' });
  const r = await call('/v1/workflows/run', {
    method: 'POST',
    key,
    body: { inputs: { a: 'b' }, response_mode: 'streaming', user: 'u' },
  });
  // Node and text_chunk events in between (pinned in detail further down).
  const events = parseSse(r.text).filter((e) => e.event.startsWith('workflow_'));
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
  const key = addApp({ mode: 'completion' });
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
  const k2 = addApp({ mode: 'completion', answer: (q, i) => `${q}|${i.topic}` });
  const r3 = await call('/v1/completion-messages', { method: 'POST', key: k2, body: { inputs: { topic: 't' }, response_mode: 'blocking', user: 'u' } });
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
    const key = addApp({ mode, behaviour: 'http500' });
    const r = await call(path, { method: 'POST', key, body });
    assert.equal(r.status, 500);
    assert.match(r.headers.get('content-type'), /^text\/plain/);
    assert.equal(r.text, 'Internal Server Error');
    // info and parameters still work, so the app can be registered
    assert.equal((await call('/v1/info', { key })).status, 200);
    assert.equal((await call('/v1/parameters', { key })).status, 200);
  });

  test(`behaviour dify_error (${mode})`, async () => {
    const key = addApp({ mode, behaviour: 'dify_error' });
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
  const key = addApp({ mode: 'workflow', behaviour: 'http500' });
  const r = await call('/v1/workflows/run', { method: 'POST', key, body: { inputs: {} } });
  assert.equal(r.status, 400);
  assert.equal(r.json.code, 'invalid_param');
});

test('behaviour workflow_failed', async () => {
  const key = addApp({ mode: 'workflow', behaviour: 'workflow_failed', outputs: { ignored: true } });
  const r = await call('/v1/workflows/run', {
    method: 'POST',
    key,
    body: { inputs: { a: 'one' }, response_mode: 'blocking', user: 'u' },
  });
  assert.equal(r.status, 200);
  assert.equal(r.json.data.status, 'failed');
  assert.equal(r.json.data.error, 'Node LLM failed: model timeout');
  assert.deepEqual(r.json.data.outputs, {});
  assert.match(r.json.workflow_run_id, UUID);
});

test('behaviour slow: delays the answer without blocking other requests', async () => {
  const slowKey = addApp({ mode: 'workflow', behaviour: 'slow', delayMs: 600 });
  const fastKey = addApp({ mode: 'workflow' });
  const t0 = Date.now();
  let slowDone = false;
  const slow = call('/v1/workflows/run', { method: 'POST', key: slowKey, body: { inputs: { s: 1 }, response_mode: 'blocking', user: 'u' } }).finally(() => {
    slowDone = true;
  });
  await waitFor(() => dify.requestsFor(slowKey).length === 1, 'the slow request');
  const fast = await call('/v1/workflows/run', { method: 'POST', key: fastKey, body: { inputs: {}, response_mode: 'blocking', user: 'u' } });
  assert.equal(fast.status, 200);
  // Not blocked: the fast answer came while the slow one was still waiting (an event, not a
  // duration, so a loaded machine cannot make this fail).
  assert.equal(slowDone, false, 'the fast request waited for the slow one');
  const s = await slow;
  const slowMs = Date.now() - t0;
  assert.equal(s.status, 200);
  assert.deepEqual(s.json.data.outputs, { echo: { s: 1 } });
  assert.ok(slowMs >= 550, `slow answer came after ${slowMs} ms`);
});

test('explicit delayMs delays any behaviour', async () => {
  const key = addApp({ mode: 'chat', behaviour: 'dify_error', delayMs: 300 });
  const t0 = Date.now();
  const r = await call('/v1/chat-messages', { method: 'POST', key, body: RUNS.chat[1] });
  assert.ok(Date.now() - t0 >= 250);
  assert.equal(r.json.code, 'provider_quota_exceeded');
});

test('requests are recorded with method, path, headers and parsed body', async () => {
  const key = addApp({ mode: 'workflow' });
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
      const key = addApp({ mode: 'workflow', outputs: () => ({ i }) });
      const r = await call('/v1/workflows/run', { method: 'POST', key, body: { inputs: {}, response_mode: 'blocking', user: `u${i}` } });
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
  // Generous: the request would otherwise wait 30 s.
  assert.ok(Date.now() - t0 < 15_000, `stop took ${Date.now() - t0} ms`);
  await own.stop();
  await assert.rejects(fetch(`${own.baseUrl}/info`));
});

// ---- streaming in detail ------------------------------------------------------------

const STREAM_PATHS = {
  workflow: '/v1/workflows/run',
  chat: '/v1/chat-messages',
  'advanced-chat': '/v1/chat-messages',
  'agent-chat': '/v1/chat-messages',
  completion: '/v1/completion-messages',
};
const STOP_PATHS = {
  workflow: (t) => `/v1/workflows/tasks/${t}/stop`,
  chat: (t) => `/v1/chat-messages/${t}/stop`,
  'advanced-chat': (t) => `/v1/chat-messages/${t}/stop`,
  'agent-chat': (t) => `/v1/chat-messages/${t}/stop`,
  completion: (t) => `/v1/completion-messages/${t}/stop`,
};
const MODE_LIST = Object.keys(STREAM_PATHS);

function streamBody(mode, extra = {}) {
  const base = { inputs: { a: 'b' }, response_mode: 'streaming', user: 'u', ...extra };
  return mode === 'workflow' || mode === 'completion' ? base : { query: 'hello world', ...base };
}

function streamCall(mode, key, extra) {
  return call(STREAM_PATHS[mode], { method: 'POST', key, body: streamBody(mode, extra) });
}

/** The raw frames of an SSE body, each with its terminating blank line. */
function framesOf(text) {
  const out = text.match(/[\s\S]*?\n\n/g) ?? [];
  assert.equal(out.join(''), text, 'body is a sequence of complete frames');
  return out;
}

const label = (e) => (e.event === 'node_started' || e.event === 'node_finished' ? `${e.event}:${e.data.title}` : e.event);
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function waitFor(pred, what, ms = 20_000) {
  const deadline = Date.now() + ms;
  while (!pred()) {
    if (Date.now() > deadline) assert.fail(`timed out waiting for ${what}`);
    await sleep(10);
  }
}

/** Opens a stream and reads it frame by frame. */
async function openStream(mode, key, extra) {
  const ac = new AbortController();
  const t0 = Date.now();
  const res = await fetch(dify.origin + STREAM_PATHS[mode], {
    method: 'POST',
    headers: { Authorization: `Bearer ${key}`, 'Content-Type': 'application/json' },
    body: JSON.stringify(streamBody(mode, extra)),
    signal: ac.signal,
  });
  const reader = res.body.getReader();
  const dec = new TextDecoder();
  let buf = '';
  const s = {
    res,
    abort: () => ac.abort(),
    /** Next raw frame (with its \n\n) and its arrival time (ms since the request), or null at the end. */
    async next() {
      for (;;) {
        const i = buf.indexOf('\n\n');
        if (i >= 0) {
          const frame = buf.slice(0, i + 2);
          buf = buf.slice(i + 2);
          return { frame, at: Date.now() - t0 };
        }
        const { done, value } = await reader.read();
        if (done) {
          assert.equal(buf, '', 'no partial frame at the end of the stream');
          return null;
        }
        buf += dec.decode(value, { stream: true });
      }
    },
    /** Next JSON event (pings skipped). */
    async nextEvent() {
      for (;;) {
        const f = await s.next();
        if (!f) return null;
        if (f.frame === PING_FRAME) continue;
        return { ...f, event: JSON.parse(f.frame.slice('data: '.length, -2)) };
      }
    },
    async restEvents() {
      const out = [];
      for (let e; (e = await s.nextEvent()); ) out.push(e.event);
      return out;
    },
  };
  return s;
}

/** Resolves to 'silent' if the promise has not settled after ms. */
function silentFor(p, ms) {
  return Promise.race([p.then(() => 'settled', () => 'settled'), sleep(ms).then(() => 'silent')]);
}

test('streaming workflow: default Start/LLM/End graph, exact order and shapes', async () => {
  const outputs = { text: 'Sunny and warm today', temp: 21 };
  const key = addApp({ mode: 'workflow', outputs });
  const r = await call('/v1/workflows/run', {
    method: 'POST',
    key,
    body: { inputs: { city: 'Oslo' }, response_mode: 'streaming', user: 'u' },
  });
  assert.equal(r.status, 200);
  assert.equal(r.headers.get('content-type'), 'text/event-stream; charset=utf-8');
  const frames = framesOf(r.text);
  for (const f of frames) assert.ok(f === PING_FRAME || /^data: \{[^\n]*\}\n\n$/.test(f), f);
  const events = parseSse(r.text);
  assert.deepEqual(events.map(label), [
    'workflow_started',
    'node_started:Start',
    'node_finished:Start',
    'node_started:LLM',
    'text_chunk',
    'text_chunk',
    'text_chunk',
    'node_finished:LLM',
    'node_started:End',
    'node_finished:End',
    'workflow_finished',
  ]);
  // A ping before every 3rd event: never first, never last.
  assert.equal(frames.filter((f) => f === PING_FRAME).length, Math.floor((events.length - 1) / 3));
  assert.notEqual(frames[0], PING_FRAME);
  assert.notEqual(frames.at(-1), PING_FRAME);
  assert.equal(frames[3], PING_FRAME);

  const taskId = events[0].task_id;
  const runId = events[0].workflow_run_id;
  assert.match(taskId, UUID);
  assert.match(runId, UUID);
  for (const e of events) {
    assert.deepEqual(Object.keys(e).sort(), ['data', 'event', 'task_id', 'workflow_run_id'], e.event);
    assert.equal(e.task_id, taskId);
    assert.equal(e.workflow_run_id, runId);
  }
  const started = events[0].data;
  assert.deepEqual(Object.keys(started).sort(), ['created_at', 'id', 'inputs', 'reason', 'workflow_id']);
  assert.equal(started.id, runId);
  assert.deepEqual(started.inputs, { city: 'Oslo' });

  const nodeStarted = events.filter((e) => e.event === 'node_started').map((e) => e.data);
  const nodeFinished = events.filter((e) => e.event === 'node_finished').map((e) => e.data);
  assert.deepEqual(nodeStarted.map((d) => [d.title, d.node_type, d.index]), [
    ['Start', 'start', 1],
    ['LLM', 'llm', 2],
    ['End', 'end', 3],
  ]);
  assert.deepEqual(DEFAULT_NODES.workflow.map((n) => n.title), ['Start', 'LLM', 'End']);
  for (const [i, d] of nodeStarted.entries()) {
    assert.deepEqual(Object.keys(d).sort(), [
      'created_at', 'id', 'index', 'inputs', 'node_id', 'node_type', 'predecessor_node_id', 'title',
    ]);
    assert.match(d.id, UUID);
    assert.equal(d.predecessor_node_id, i === 0 ? null : nodeStarted[i - 1].node_id);
    const f = nodeFinished[i];
    assert.equal(f.id, d.id);
    assert.equal(f.node_id, d.node_id);
    assert.equal(f.status, 'succeeded');
    assert.equal(f.error, null);
    assert.equal(typeof f.elapsed_time, 'number');
    for (const k of ['outputs', 'process_data', 'execution_metadata', 'finished_at']) assert.ok(k in f, k);
  }
  assert.deepEqual(nodeFinished[0].outputs, { city: 'Oslo' });
  assert.equal(nodeFinished[1].outputs.text, 'Sunny and warm today');
  assert.equal(nodeFinished[1].execution_metadata.total_tokens, 20);
  assert.deepEqual(nodeFinished[2].outputs, outputs);

  const chunks = events.filter((e) => e.event === 'text_chunk');
  assert.equal(chunks.map((e) => e.data.text).join(''), 'Sunny and warm today');
  for (const c of chunks) assert.deepEqual(c.data.from_variable_selector, [nodeStarted[1].node_id, 'text']);

  const fin = events.at(-1).data;
  assert.deepEqual(Object.keys(fin).sort(), [
    'created_at', 'elapsed_time', 'error', 'finished_at', 'id', 'outputs', 'status', 'total_steps', 'total_tokens', 'workflow_id',
  ]);
  assert.equal(fin.status, 'succeeded');
  assert.deepEqual(fin.outputs, outputs);
  assert.equal(fin.error, null);
  assert.equal(fin.total_steps, 3);
  assert.equal(fin.total_tokens, 20);
  assert.equal(fin.id, runId);

  const [rec] = dify.requestsFor(key);
  assert.equal(rec.streaming, true);
  assert.equal(rec.clientAborted, false);
  assert.equal(rec.taskId, taskId);
  assert.equal(rec.sentBytes, Buffer.byteLength(r.text));
});

test('streaming workflow: custom nodes, text option, chunks inside the last LLM node', async () => {
  const nodes = [
    { title: 'Begin', type: 'start' },
    { title: 'Search', type: 'tool' },
    { title: 'Draft', type: 'llm' },
    { title: 'Polish', type: 'llm', id: 'polish' },
    { title: 'Format', type: 'code', outputs: { formatted: true } },
    { title: 'Done', type: 'end' },
  ];
  const key = addApp({ mode: 'workflow', nodes, text: 'custom streamed text', outputs: { x: 1 } });
  const events = parseSse((await streamCall('workflow', key)).text);
  const labels = events.map(label);
  assert.deepEqual(labels.filter((l) => l.startsWith('node_started')), nodes.map((n) => `node_started:${n.title}`));
  assert.deepEqual(labels.filter((l) => l.startsWith('node_finished')), nodes.map((n) => `node_finished:${n.title}`));
  const first = labels.indexOf('text_chunk');
  assert.equal(labels[first - 1], 'node_started:Polish');
  assert.equal(labels[labels.lastIndexOf('text_chunk') + 1], 'node_finished:Polish');
  const chunks = events.filter((e) => e.event === 'text_chunk');
  assert.equal(chunks.length, 3);
  assert.equal(chunks.map((e) => e.data.text).join(''), 'custom streamed text');
  assert.deepEqual(chunks[0].data.from_variable_selector, ['polish', 'text']);
  const byTitle = Object.fromEntries(events.filter((e) => e.event === 'node_finished').map((e) => [e.data.title, e.data]));
  assert.deepEqual(byTitle.Format.outputs, { formatted: true });
  assert.equal(byTitle.Search.node_type, 'tool');
  assert.equal(events.at(-1).data.total_steps, nodes.length);
  // The start event never reveals the node count.
  assert.deepEqual(Object.keys(events[0].data).sort(), ['created_at', 'id', 'inputs', 'reason', 'workflow_id']);
  assert.ok(!JSON.stringify(events[0]).includes('total'));

  // Without `text`, the chunks carry the outputs as JSON (or outputs.text when it is a string).
  const k2 = addApp({ mode: 'workflow', outputs: { x: 1 } });
  const e2 = parseSse((await streamCall('workflow', k2)).text);
  assert.equal(e2.filter((e) => e.event === 'text_chunk').map((e) => e.data.text).join(''), '{"x":1}');
  // Blocking total_steps follows the graph too.
  const k3 = addApp({ mode: 'workflow', nodes });
  const b = await call('/v1/workflows/run', { method: 'POST', key: k3, body: { inputs: {}, response_mode: 'blocking', user: 'u' } });
  assert.equal(b.json.data.total_steps, nodes.length);

  assert.throws(() => addApp({ mode: 'workflow', nodes: [] }), /nodes must be/);
  assert.throws(() => addApp({ mode: 'workflow', nodes: ['x'] }), /nodes must be/);
});

test('streaming workflow_failed: the LLM node fails, workflow_finished failed, no text', async () => {
  const key = addApp({ mode: 'workflow', behaviour: 'workflow_failed' });
  const events = parseSse((await streamCall('workflow', key)).text);
  assert.deepEqual(events.map(label), [
    'workflow_started',
    'node_started:Start',
    'node_finished:Start',
    'node_started:LLM',
    'node_finished:LLM',
    'workflow_finished',
  ]);
  assert.equal(events[4].data.status, 'failed');
  assert.equal(events[4].data.error, 'model timeout');
  const fin = events.at(-1).data;
  assert.equal(fin.status, 'failed');
  assert.equal(fin.error, 'Node LLM failed: model timeout');
  assert.deepEqual(fin.outputs, {});
  assert.equal(fin.total_steps, 2);
});

test('streaming advanced-chat: workflow events around the message chunks, message_end last', async () => {
  const answer = 'Paris is the capital of France.';
  const key = addApp({ mode: 'advanced-chat', answer });
  const r = await streamCall('advanced-chat', key);
  assert.match(r.headers.get('content-type'), /^text\/event-stream/);
  const events = parseSse(r.text);
  assert.deepEqual(events.map(label), [
    'workflow_started',
    'node_started:Start',
    'node_finished:Start',
    'node_started:LLM',
    'message',
    'message',
    'message',
    'node_finished:LLM',
    'node_started:Answer',
    'node_finished:Answer',
    'workflow_finished',
    'message_end',
  ]);
  const { task_id: taskId, conversation_id: cid, message_id: mid } = events[0];
  assert.match(cid, UUID);
  assert.match(mid, UUID);
  for (const e of events) {
    assert.equal(e.task_id, taskId, e.event);
    assert.equal(e.conversation_id, cid, e.event);
    assert.equal(e.message_id, mid, e.event);
  }
  for (const e of events.filter((x) => x.event.startsWith('workflow_') || x.event.startsWith('node_'))) {
    assert.match(e.workflow_run_id, UUID);
    assert.equal(typeof e.data, 'object');
  }
  assert.equal(events.filter((e) => e.event === 'message').map((e) => e.answer).join(''), answer);
  assert.equal(events.at(-2).data.status, 'succeeded');
  assert.equal(events.at(-2).data.total_steps, DEFAULT_NODES['advanced-chat'].length);
  assert.equal(events.at(-1).metadata.usage.total_tokens, 20);
  assert.deepEqual(dify.conversationsOf(key), [cid]);
});

test('streaming chat and completion: exactly three message chunks then message_end', async () => {
  for (const [mode, answer] of [
    ['chat', 'echo: hello world'],
    ['completion', `completion: ${JSON.stringify({ a: 'b' })}`],
  ]) {
    const key = addApp({ mode });
    const r = await streamCall(mode, key);
    const frames = framesOf(r.text);
    const events = parseSse(r.text);
    assert.deepEqual(events.map((e) => e.event), ['message', 'message', 'message', 'message_end'], mode);
    assert.equal(frames[3], PING_FRAME, mode);
    assert.equal(events.slice(0, 3).map((e) => e.answer).join(''), answer, mode);
    for (const m of events.slice(0, 3)) {
      assert.deepEqual(Object.keys(m).sort(), ['answer', 'conversation_id', 'created_at', 'event', 'id', 'message_id', 'task_id']);
      assert.equal(m.message_id, events[0].message_id);
    }
    const end = events[3];
    assert.deepEqual(Object.keys(end).sort(), ['conversation_id', 'event', 'id', 'message_id', 'metadata', 'task_id']);
    assert.equal(end.metadata.usage.total_tokens, 20);
    assert.deepEqual(end.metadata.retriever_resources, []);
  }
});

test('streaming agent-chat: tool thought, empty thought, agent_message chunks, final thought, message_end', async () => {
  const key = addApp({ mode: 'agent-chat', answer: 'It is 12:00.' });
  const events = parseSse((await streamCall('agent-chat', key, { query: 'what time is it' })).text);
  assert.deepEqual(events.map((e) => e.event), [
    'agent_thought', 'agent_thought', 'agent_message', 'agent_message', 'agent_message', 'agent_thought', 'message_end',
  ]);
  const [tool, open, , , , last] = events;
  for (const t of [tool, open, last]) {
    for (const k of ['id', 'task_id', 'message_id', 'position', 'thought', 'observation', 'tool', 'tool_input', 'message_files', 'conversation_id']) {
      assert.ok(k in t, k);
    }
  }
  assert.equal(tool.position, 1);
  assert.equal(tool.tool, 'web_search');
  assert.deepEqual(JSON.parse(tool.tool_input), { web_search: { query: 'what time is it' } });
  assert.equal(typeof tool.observation, 'string');
  assert.ok(tool.thought.length > 0);
  assert.equal(open.position, 2);
  assert.equal(open.thought, '');
  assert.equal(last.position, 2);
  assert.equal(last.id, open.id);
  assert.equal(last.thought, 'It is 12:00.');
  assert.equal(events.filter((e) => e.event === 'agent_message').map((e) => e.answer).join(''), 'It is 12:00.');

  // Custom thoughts; agentAnswer: false → only thoughts, the last one carries the answer.
  const k2 = addApp({
    mode: 'agent-chat',
    answer: 'Final.',
    agentAnswer: false,
    thoughts: [
      { thought: 'search first', tool: ['search', 'calc'], tool_input: { search: { q: 1 }, calc: {} }, observation: 'ok' },
      { thought: 'then compute' },
    ],
  });
  const e2 = parseSse((await streamCall('agent-chat', k2)).text);
  assert.deepEqual(e2.map((e) => e.event), ['agent_thought', 'agent_thought', 'agent_thought', 'agent_thought', 'message_end']);
  assert.deepEqual(e2.slice(0, 4).map((e) => e.position), [1, 2, 3, 3]);
  assert.equal(e2[0].tool, 'search;calc');
  assert.deepEqual(JSON.parse(e2[0].tool_input), { search: { q: 1 }, calc: {} });
  assert.equal(e2[0].observation, 'ok');
  assert.equal(e2[1].tool, '');
  assert.equal(e2[3].thought, 'Final.');
});

test('eventDelayMs spaces the events; pings travel with the event they precede', async () => {
  // Gaps are lower bounds (a loaded machine only makes them longer); the upper bounds are half
  // the delay, which a first event delayed like the others, or a ping sent on its own, exceeds.
  const DELAY = 1000;
  const key = addApp({ mode: 'chat', answer: 'one two three', eventDelayMs: DELAY });
  const s = await openStream('chat', key);
  const frames = [];
  for (let f; (f = await s.next()); ) frames.push(f);
  assert.deepEqual(frames.map((f) => (f.frame === PING_FRAME ? 'ping' : JSON.parse(f.frame.slice(6)).event)), [
    'message', 'message', 'message', 'ping', 'message_end',
  ]);
  const data = frames.filter((f) => f.frame !== PING_FRAME);
  for (let i = 1; i < data.length; i++) {
    const gap = data[i].at - data[i - 1].at;
    assert.ok(gap >= DELAY - 20, `gap ${i} was ${gap} ms`);
  }
  assert.ok(data[0].at < DELAY / 2, `first event after ${data[0].at} ms`);
  assert.ok(frames[4].at - frames[3].at < DELAY / 2, 'the ping comes with the event after it');

  // Default: no delay (three gaps of even 500 ms would take 1.5 s).
  const k2 = addApp({ mode: 'chat', answer: 'one two three' });
  const t0 = Date.now();
  await streamCall('chat', k2);
  assert.ok(Date.now() - t0 < 1500);
});

test('events override: objects as data frames, strings verbatim, no pings', async () => {
  const events = [
    { event: 'workflow_started', task_id: 't1', workflow_run_id: 'r1', data: {} },
    'event: ping\n\n',
    ': a comment\n\n',
    'data: {"event":"text_chunk","task_id":"t1","workflow_run_id":"r1","data":{"text":"hi"}}\n\n',
    'data: {"half":',
    ' "joined"}\n\n',
    { event: 'workflow_finished', task_id: 't1', workflow_run_id: 'r1', data: { status: 'succeeded', outputs: {} } },
  ];
  const wire = events.map((e) => (typeof e === 'string' ? e : `data: ${JSON.stringify(e)}\n\n`));
  const key = addApp({ mode: 'workflow', events });
  const r = await streamCall('workflow', key);
  assert.equal(r.status, 200);
  assert.match(r.headers.get('content-type'), /^text\/event-stream/);
  assert.equal(r.text, wire.join(''));
  // Blocking calls are unaffected.
  const b = await call('/v1/workflows/run', { method: 'POST', key, body: { inputs: {}, response_mode: 'blocking', user: 'u' } });
  assert.equal(b.json.data.status, 'succeeded');
  // streamBehaviour applies on top: end_early drops the last entry.
  const k2 = addApp({ mode: 'chat', events, streamBehaviour: 'end_early' });
  assert.equal((await streamCall('chat', k2)).text, wire.slice(0, -1).join(''));
  assert.throws(() => addApp({ mode: 'chat', events: 'data: x\n\n' }), /events must be/);
  assert.throws(() => addApp({ mode: 'chat', events: [1] }), /events must be/);
});

test('repeat: a long stream (tens of MB, thousands of events) arrives complete and quickly', async () => {
  const repeat = 20000;
  const chunkBytes = 1024;
  const key = addApp({ mode: 'chat', answer: 'short answer here', repeat, chunkBytes });
  const t0 = Date.now();
  const res = await fetch(dify.origin + STREAM_PATHS.chat, {
    method: 'POST',
    headers: { Authorization: `Bearer ${key}`, 'Content-Type': 'application/json' },
    body: JSON.stringify(streamBody('chat')),
  });
  assert.equal(res.status, 200);
  let bytes = 0;
  let dataFrames = 0;
  let pings = 0;
  let prev = -1;
  let atStart = true;
  let head = '';
  let tail = Buffer.alloc(0);
  const dec = new TextDecoder();
  for await (const chunk of res.body) {
    if (head.length < 65536) head += dec.decode(chunk, { stream: true });
    tail = Buffer.concat([tail, chunk]).subarray(-8192);
    bytes += chunk.length;
    for (let i = 0; i < chunk.length; i++) {
      const b = chunk[i];
      if (atStart) {
        if (b === 0x64) dataFrames += 1; // 'd'
        else if (b === 0x65) pings += 1; // 'e'
        else assert.fail(`unexpected frame start byte ${b}`);
        atStart = false;
      }
      if (b === 10 && prev === 10) {
        atStart = true;
        prev = -1;
      } else {
        prev = b;
      }
    }
  }
  const ms = Date.now() - t0;
  assert.ok(atStart, 'ends on a frame boundary');
  assert.equal(dataFrames, 3 + repeat + 1);
  assert.equal(pings, Math.floor((dataFrames - 1) / 3));
  assert.ok(bytes > repeat * chunkBytes, `${bytes} bytes`);
  assert.ok(bytes > 20e6, `${bytes} bytes`);
  const rec = dify.requestsFor(key)[0];
  assert.equal(rec.sentBytes, bytes);
  assert.equal(rec.clientAborted, false);
  // The filler chunks follow the three answer chunks; message_end is last.
  const headEvents = framesOf(head.slice(0, head.lastIndexOf('\n\n') + 2))
    .filter((f) => f !== PING_FRAME)
    .map((f) => JSON.parse(f.slice(6)));
  assert.equal(headEvents.slice(0, 3).map((e) => e.answer).join(''), 'short answer here');
  assert.equal(headEvents[3].answer, filler(chunkBytes));
  assert.equal(Buffer.byteLength(headEvents[3].answer), chunkBytes);
  const tailText = tail.toString('utf8');
  const lastFrame = tailText.slice(tailText.lastIndexOf('\n\ndata: ') + 2);
  assert.equal(JSON.parse(lastFrame.slice(6)).event, 'message_end');
  // Not throttled: generous for a loaded machine (it takes about a second on an idle one).
  assert.ok(ms < 30_000, `long stream took ${ms} ms`);
});

test('repeat respects backpressure: a client that stops reading stops the writer', async () => {
  const repeat = 40000; // ~48 MB if it were all written
  const key = addApp({ mode: 'workflow', repeat, chunkBytes: 1024 });
  const s = await openStream('workflow', key);
  assert.equal((await s.nextEvent()).event.event, 'workflow_started');
  const rec = dify.requestsFor(key)[0];
  // The writer fills the socket buffers, then waits for 'drain'. On a loaded machine filling
  // them takes a while, so wait for the count to settle (unchanged over 300 ms), up to 20 s;
  // a writer that ignored backpressure would write all ~48 MB instead.
  let a = -1;
  let b = rec.sentBytes;
  const until = Date.now() + 20_000;
  while (a !== b && Date.now() < until) {
    a = b;
    await sleep(300);
    b = rec.sentBytes;
  }
  assert.ok(b < 16e6, `writer ran ahead of a non-reading client: ${b} bytes`);
  assert.equal(b, a, `writer kept going: ${a} → ${b}`);
  s.abort();
  await waitFor(() => rec.clientAborted === true, 'clientAborted');
  const c = rec.sentBytes;
  await sleep(100);
  assert.equal(rec.sentBytes, c, 'nothing written after the client left');
});

const LAST_CHUNK = { workflow: 'text_chunk', chat: 'message', 'advanced-chat': 'message', 'agent-chat': 'agent_message', completion: 'message' };

for (const mode of MODE_LIST) {
  test(`streamBehaviour end_early (${mode}): closes after the last chunk, no final event`, async () => {
    const key = addApp({ mode, streamBehaviour: 'end_early', repeat: 2, chunkBytes: 10 });
    const r = await streamCall(mode, key);
    assert.equal(r.status, 200);
    const events = parseSse(r.text);
    assert.equal(events.at(-1).event, LAST_CHUNK[mode]);
    assert.equal(events.filter((e) => e.event === LAST_CHUNK[mode]).length, 5);
    for (const e of events) assert.ok(!['workflow_finished', 'message_end'].includes(e.event), e.event);
    assert.equal(dify.requestsFor(key)[0].clientAborted, false);
  });

  test(`streamBehaviour error_event (${mode}): error event, then close`, async () => {
    const key = addApp({ mode, streamBehaviour: 'error_event' });
    const r = await streamCall(mode, key);
    assert.equal(r.status, 200);
    const events = parseSse(r.text);
    const err = events.at(-1);
    assert.equal(err.event, 'error');
    assert.equal(err.status, 400);
    assert.equal(err.code, 'provider_quota_exceeded');
    assert.equal(typeof err.message, 'string');
    assert.equal(err.task_id, events[0].task_id);
    if (mode === 'workflow') {
      assert.equal(err.workflow_run_id, events[0].workflow_run_id);
      assert.deepEqual(events.map(label), ['workflow_started', 'node_started:Start', 'node_finished:Start', 'node_started:LLM', 'error']);
    } else {
      assert.match(err.message_id, UUID);
      assert.match(err.conversation_id, UUID);
    }
    if (mode === 'chat' || mode === 'completion') assert.equal(events.length, 1);
    if (mode === 'agent-chat') assert.deepEqual(events.map((e) => e.event), ['agent_thought', 'agent_thought', 'error']);
    assert.ok(!events.some((e) => LAST_CHUNK[mode] === e.event));
  });

  test(`streamBehaviour malformed (${mode}): one broken frame after the first, then normal`, async () => {
    const key = addApp({ mode, answer: 'a b c', streamBehaviour: 'malformed' });
    const r = await streamCall(mode, key);
    const frames = framesOf(r.text);
    assert.equal(frames.filter((f) => f === MALFORMED_FRAME).length, 1);
    assert.equal(frames[1], MALFORMED_FRAME);
    const events = frames.filter((f) => f !== MALFORMED_FRAME && f !== PING_FRAME).map((f) => JSON.parse(f.slice(6)));
    assert.equal(events.at(-1).event, mode === 'workflow' ? 'workflow_finished' : 'message_end');
  });

  test(`streamBehaviour hang_after_first (${mode}): first event, then silence until the client leaves`, async () => {
    const key = addApp({ mode, streamBehaviour: 'hang_after_first' });
    const s = await openStream(mode, key);
    const first = await s.nextEvent();
    assert.ok(first.event.task_id);
    assert.equal(await silentFor(s.next(), 300), 'silent');
    const rec = dify.requestsFor(key)[0];
    assert.equal(rec.clientAborted, false);
    s.abort();
    await waitFor(() => rec.clientAborted === true, 'clientAborted');
  });

  test(`behaviour rate_limited (${mode}): 429 with Retry-After, blocking and streaming`, async () => {
    const key = addApp({ mode, behaviour: 'rate_limited' });
    const bodies = mode === 'agent-chat' ? [streamBody(mode)] : [streamBody(mode), streamBody(mode, { response_mode: 'blocking' })];
    for (const body of bodies) {
      const r = await call(STREAM_PATHS[mode], { method: 'POST', key, body });
      assert.equal(r.status, 429);
      assert.equal(r.headers.get('retry-after'), '7');
      assert.match(r.headers.get('content-type'), /^application\/json/);
      assert.equal(r.text, '{"code":"too_many_requests","message":"Too many requests, please retry later","status":429}');
    }
    assert.equal((await call('/v1/info', { key })).status, 200);
  });

  test(`stop endpoint ends a running ${mode} stream`, async () => {
    const key = addApp({ mode, streamBehaviour: 'hang_after_first' });
    const s = await openStream(mode, key, { user: 'stopper' });
    const first = (await s.nextEvent()).event;
    const taskId = first.task_id;
    const path = STOP_PATHS[mode](taskId);
    const t0 = Date.now();
    const r = await call(path, { method: 'POST', key, body: { user: 'stopper' } });
    assert.equal(r.status, 200);
    assert.deepEqual(r.json, { result: 'success' });
    const rest = await s.restEvents();
    // hang_after_first never ends on its own: ending at all is the stop's doing.
    assert.ok(Date.now() - t0 < 10_000);
    const expected = mode === 'workflow' ? ['workflow_finished'] : mode === 'advanced-chat' ? ['workflow_finished', 'message_end'] : ['message_end'];
    assert.deepEqual(rest.map((e) => e.event), expected);
    if (mode === 'workflow' || mode === 'advanced-chat') {
      assert.equal(rest[0].data.status, 'stopped');
      assert.deepEqual(rest[0].data.outputs, {});
      assert.equal(rest[0].workflow_run_id, first.workflow_run_id);
    }
    for (const e of rest) assert.equal(e.task_id, taskId);
    assert.deepEqual(dify.stops.filter((x) => x.task_id === taskId), [{ path, task_id: taskId, user: 'stopper', apiKey: key }]);
    const [run, stop] = dify.requestsFor(key);
    assert.equal(run.stopped, true);
    assert.equal(run.clientAborted, false);
    assert.equal(stop.path, path);
    assert.deepEqual(stop.body, { user: 'stopper' });
  });
}

test('stop during eventDelayMs ends the stream at once', async () => {
  const key = addApp({ mode: 'chat', answer: 'a b c', eventDelayMs: 20_000 });
  const s = await openStream('chat', key);
  const first = (await s.nextEvent()).event;
  const t0 = Date.now();
  await call(STOP_PATHS.chat(first.task_id), { method: 'POST', key, body: { user: 'u' } });
  const rest = await s.restEvents();
  // The next event was 20 s away: ending well before that is the stop's doing.
  assert.ok(Date.now() - t0 < 10_000, `took ${Date.now() - t0} ms`);
  assert.deepEqual(rest.map((e) => e.event), ['message_end']);
});

test('stop endpoint: checks, and stops only the caller\'s own running task', async () => {
  const key = addApp({ mode: 'workflow', streamBehaviour: 'hang_after_first' });
  const s = await openStream('workflow', key, { user: 'owner' });
  const taskId = (await s.nextEvent()).event.task_id;
  const other = addApp({ mode: 'workflow' });
  const chatKey = addApp({ mode: 'chat' });
  const before = dify.stops.length;
  const refusedBefore = dify.stopRefusals.length;
  // Another user, another app, or an unknown task: refused (stricter than Dify, so that a
  // wrong stop call fails a test), and the stream keeps hanging.
  for (const [k, user, t, status, code] of [
    [key, 'intruder', taskId, 403, 'forbidden'],
    [other, 'owner', taskId, 404, 'not_found'],
    [key, 'owner', 'no-such-task', 404, 'not_found'],
  ]) {
    const r = await call(`/v1/workflows/tasks/${t}/stop`, { method: 'POST', key: k, body: { user } });
    assert.equal(r.status, status, `${user} ${t}`);
    assert.equal(r.json.code, code);
  }
  assert.equal(dify.stops.length, before);
  assert.deepEqual(dify.stopRefusals.slice(refusedBefore).map((x) => [x.user, x.task_id, x.status, x.code]), [
    ['intruder', taskId, 403, 'forbidden'],
    ['owner', taskId, 404, 'not_found'],
    ['owner', 'no-such-task', 404, 'not_found'],
  ]);
  // Wrong family for the app, missing user, bad JSON, no auth, wrong method.
  let r = await call(`/v1/chat-messages/${taskId}/stop`, { method: 'POST', key, body: { user: 'owner' } });
  assert.equal(r.status, 400);
  assert.equal(r.json.code, 'app_unavailable');
  r = await call(`/v1/workflows/tasks/${taskId}/stop`, { method: 'POST', key: chatKey, body: { user: 'owner' } });
  assert.equal(r.json.code, 'app_unavailable');
  r = await call(`/v1/workflows/tasks/${taskId}/stop`, { method: 'POST', key, body: {} });
  assert.equal(r.status, 400);
  assert.equal(r.json.code, 'invalid_param');
  r = await call(`/v1/workflows/tasks/${taskId}/stop`, { method: 'POST', key, body: 'nope' });
  assert.equal(r.json.code, 'bad_request');
  r = await call(`/v1/workflows/tasks/${taskId}/stop`, { method: 'POST', body: { user: 'owner' } });
  assert.equal(r.status, 401);
  r = await call(`/v1/workflows/tasks/${taskId}/stop`, { method: 'GET', key });
  assert.equal(r.status, 405);
  assert.equal(dify.stops.length, before);
  const pending = s.nextEvent();
  assert.equal(await silentFor(pending, 200), 'silent');
  // The owner's stop works.
  r = await call(`/v1/workflows/tasks/${taskId}/stop`, { method: 'POST', key, body: { user: 'owner' } });
  assert.deepEqual(r.json, { result: 'success' });
  const fin = (await pending).event;
  assert.deepEqual([fin.event, fin.data.status], ['workflow_finished', 'stopped']);
  assert.deepEqual(await s.restEvents(), []);
});

test('a stop for a finished run (blocking or streamed) is accepted, by its own user only', async () => {
  for (const mode of ['workflow', 'chat', 'completion']) {
    const key = addApp({ mode });
    const [path, body] = RUNS[mode];
    const blocking = await call(path, { method: 'POST', key, body });
    const streamed = parseSse((await streamCall(mode, key)).text)[0].task_id;
    for (const taskId of [blocking.json.task_id, streamed]) {
      assert.deepEqual((await call(STOP_PATHS[mode](taskId), { method: 'POST', key, body: { user: 'u' } })).json, { result: 'success' });
      assert.equal((await call(STOP_PATHS[mode](taskId), { method: 'POST', key, body: { user: 'someone-else' } })).status, 403);
    }
  }
});

test('holdBefore: the stream waits before that event until release(), then goes on', async () => {
  const key = addApp({ mode: 'workflow', holdBefore: 'workflow_finished', outputs: { text: 'done' } });
  const s = await openStream('workflow', key);
  // Every event up to the last node_finished comes, then nothing until the release.
  let e;
  while ((e = await s.nextEvent()) && label(e.event) !== 'node_finished:End');
  assert.ok(e, 'the stream ended before the last node finished');
  await waitFor(() => dify.requestsFor(key)[0].held === true, 'the hold');
  const pending = s.nextEvent();
  assert.equal(await silentFor(pending, 200), 'silent');
  dify.release(key);
  assert.equal((await pending).event.event, 'workflow_finished');
  assert.equal(await s.nextEvent(), null);
  assert.equal(dify.requestsFor(key)[0].held, false);
  // Released apps do not hold again; a stop call ends a held stream too.
  assert.equal(parseSse((await streamCall('workflow', key)).text).at(-1).event, 'workflow_finished');
  const k2 = addApp({ mode: 'chat', holdBefore: 'message_end' });
  const s2 = await openStream('chat', k2);
  const first = (await s2.nextEvent()).event;
  await waitFor(() => dify.requestsFor(k2)[0].held === true, 'the hold');
  await call(STOP_PATHS.chat(first.task_id), { method: 'POST', key: k2, body: { user: 'u' } });
  const rest = await s2.restEvents();
  assert.deepEqual(rest.map((x) => x.event), ['message', 'message', 'message_end']);
  assert.throws(() => dify.release('app-unknown'), /unknown api key/);
});

test('finalThought: the last agent_thought may differ from the answer', async () => {
  const key = addApp({ mode: 'agent-chat', answer: 'The answer.', finalThought: 'Summing up.' });
  const events = parseSse((await streamCall('agent-chat', key)).text);
  assert.equal(events.filter((x) => x.event === 'agent_message').map((x) => x.answer).join(''), 'The answer.');
  assert.equal(events.filter((x) => x.event === 'agent_thought').at(-1).thought, 'Summing up.');
});

test('streamBehaviour no_first_byte: no status line until the client gives up', async () => {
  const key = addApp({ mode: 'chat', streamBehaviour: 'no_first_byte' });
  const t0 = Date.now();
  await assert.rejects(
    fetch(dify.origin + STREAM_PATHS.chat, {
      method: 'POST',
      headers: { Authorization: `Bearer ${key}`, 'Content-Type': 'application/json' },
      body: JSON.stringify(streamBody('chat')),
      signal: AbortSignal.timeout(300),
    }),
    (e) => e.name === 'TimeoutError',
  );
  assert.ok(Date.now() - t0 >= 280);
  const rec = dify.requestsFor(key)[0];
  assert.equal(rec.streaming, true);
  await waitFor(() => rec.clientAborted === true, 'clientAborted');
  assert.equal(rec.sentBytes, 0);
});

test('clientAborted: false for complete streams, true when the client leaves mid-stream', async () => {
  const key = addApp({ mode: 'completion', eventDelayMs: 200 });
  const s = await openStream('completion', key);
  await s.nextEvent();
  const rec = dify.requestsFor(key)[0];
  assert.equal(rec.clientAborted, false);
  s.abort();
  await waitFor(() => rec.clientAborted === true, 'clientAborted');
  assert.equal(rec.stopped, undefined);
  // Blocking requests carry no stream fields.
  const k2 = addApp({ mode: 'completion' });
  await call('/v1/completion-messages', { method: 'POST', key: k2, body: { inputs: {}, response_mode: 'blocking', user: 'u' } });
  assert.equal(dify.requestsFor(k2)[0].clientAborted, undefined);
  assert.equal(dify.requestsFor(k2)[0].streaming, undefined);
});

test('fixture stop() ends hanging and header-less streams promptly', async () => {
  const own = await startDifyFixture();
  const hang = own.addApp({ mode: 'workflow', streamBehaviour: 'hang_after_first', user_input_form: ANY_FORM });
  const mute = own.addApp({ mode: 'workflow', streamBehaviour: 'no_first_byte', user_input_form: ANY_FORM });
  const post = (key) =>
    fetch(`${own.baseUrl}/workflows/run`, {
      method: 'POST',
      headers: { Authorization: `Bearer ${key}`, 'Content-Type': 'application/json' },
      body: JSON.stringify(streamBody('workflow')),
    });
  const hanging = (await post(hang)).text().then(() => 'ended', () => 'aborted');
  const muted = post(mute).then((r) => r.text()).then(() => 'ended', () => 'aborted');
  await waitFor(() => own.requests.length === 2 && own.requests.every((r) => r.streaming), 'both requests');
  const t0 = Date.now();
  await own.stop();
  assert.equal(await muted, 'aborted');
  assert.ok(['ended', 'aborted'].includes(await hanging));
  assert.ok(Date.now() - t0 < 10_000);
  for (const r of own.requests) assert.equal(r.clientAborted, false);
  // (Generous: without stop() both would hang forever.)
});

test('addApp validates the stream options', () => {
  assert.throws(() => addApp({ mode: 'chat', streamBehaviour: 'weird' }), /unknown streamBehaviour/);
  assert.throws(() => addApp({ mode: 'chat', repeat: -1 }), /repeat/);
  assert.throws(() => addApp({ mode: 'chat', eventDelayMs: 'x' }), /eventDelayMs/);
  assert.throws(() => addApp({ mode: 'chat', chunkBytes: 0 }), /chunkBytes/);
  assert.throws(() => addApp({ mode: 'chat', behaviour: 'rate_limitted' }), /unknown behaviour/);
  const key = addApp({ mode: 'chat' });
  assert.throws(() => dify.updateApp(key, { streamBehaviour: 'nope' }), /unknown streamBehaviour/);
  dify.updateApp(key, { streamBehaviour: 'end_early', repeat: 3 });
});

// ---- workflow runs: GET /v1/workflows/run/:id, runDurationMs, runPollFailures -----------

const RUN_KEYS = ['id', 'workflow_id', 'status', 'inputs', 'outputs', 'error', 'total_steps', 'total_tokens', 'created_at', 'finished_at', 'elapsed_time'];

function getRun(key, runId) {
  return call(`/v1/workflows/run/${runId}`, { key });
}

function runBlocking(key, inputs = { city: 'Oslo' }, user = 'u') {
  return call('/v1/workflows/run', { method: 'POST', key, body: { inputs, response_mode: 'blocking', user } });
}

test('GET /v1/workflows/run/:id: a finished blocking run, exact shape', async () => {
  const key = addApp({ mode: 'workflow', outputs: { text: 'hi', n: 1 } });
  const t0 = Math.floor(Date.now() / 1000);
  const post = await runBlocking(key, { city: 'Oslo', n: 2 });
  const runId = post.json.workflow_run_id;
  const r = await getRun(key, runId);
  assert.equal(r.status, 200);
  assert.match(r.headers.get('content-type'), /^application\/json/);
  assert.deepEqual(Object.keys(r.json), RUN_KEYS);
  const { created_at, finished_at, elapsed_time, ...rest } = r.json;
  assert.deepEqual(rest, {
    id: runId,
    workflow_id: post.json.data.workflow_id,
    status: 'succeeded',
    inputs: '{"city":"Oslo","n":2}', // a JSON string, as Dify sends it
    outputs: { text: 'hi', n: 1 },
    error: null,
    total_steps: 3,
    total_tokens: 20,
  });
  assert.ok(Number.isInteger(created_at) && created_at >= t0 && created_at <= t0 + 2);
  assert.ok(Number.isInteger(finished_at) && finished_at >= created_at);
  assert.equal(typeof elapsed_time, 'number');
  assert.ok(elapsed_time >= 0 && elapsed_time < 1);
  assert.deepEqual(dify.runState(runId), r.json);
  assert.equal(dify.runState('nope'), undefined);
  const run = dify.runs.get(runId);
  assert.equal(run.taskId, post.json.task_id);
  assert.equal(run.apiKey, key);
  assert.deepEqual(run.inputs, { city: 'Oslo', n: 2 });
  assert.deepEqual(run.outputs, { text: 'hi', n: 1 });
  assert.equal(typeof run.startedAt, 'number');
  // Both calls are recorded, with the run id.
  const [p, g] = dify.requestsFor(key);
  assert.equal(p.runId, runId);
  assert.deepEqual([g.method, g.path, g.runId, g.app], ['GET', `/v1/workflows/run/${runId}`, runId, key]);
});

test('GET run: unknown id or another app\'s run is 404; auth, method and mode checks', async () => {
  const key = addApp({ mode: 'workflow' });
  const other = addApp({ mode: 'workflow' });
  const runId = (await runBlocking(key)).json.workflow_run_id;
  const NOT_FOUND = { code: 'not_found', message: 'Workflow run not found', status: 404 };
  for (const [k, id] of [[key, 'no-such-run'], [key, '3c90c3cc-0d44-4b50-8888-8dd25736052a'], [other, runId]]) {
    const r = await getRun(k, id);
    assert.equal(r.status, 404);
    assert.match(r.headers.get('content-type'), /^application\/json/);
    assert.deepEqual(r.json, NOT_FOUND);
  }
  let r = await call(`/v1/workflows/run/${runId}`, {});
  assert.equal(r.status, 401);
  assert.equal(r.json.code, 'unauthorized');
  r = await call(`/v1/workflows/run/${runId}`, { method: 'POST', key, body: {} });
  assert.equal(r.status, 405);
  assert.match(r.headers.get('allow'), /GET/);
  r = await getRun(addApp({ mode: 'chat' }), runId);
  assert.equal(r.status, 400);
  assert.equal(r.json.code, 'app_unavailable');
  // The other endpoints are untouched: /v1/workflows/:workflow_id/run is still a POST run.
  r = await call('/v1/workflows/some-id/run', { method: 'POST', key, body: { inputs: {}, response_mode: 'blocking', user: 'u' } });
  assert.equal(r.status, 200);
  // Behaviours do not apply to GET.
  dify.updateApp(key, { behaviour: 'http500' });
  assert.equal((await getRun(key, runId)).json.status, 'succeeded');
});

test('runDurationMs, blocking: the answer waits; GET says running (outputs null) until then', async () => {
  const key = addApp({ mode: 'workflow', runDurationMs: 400, outputs: { text: 'done' } });
  const t0 = Date.now();
  const pending = runBlocking(key);
  await waitFor(() => dify.requestsFor(key)[0]?.runId, 'the run to start');
  const runId = dify.requestsFor(key)[0].runId;
  const during = await getRun(key, runId);
  assert.equal(during.status, 200);
  assert.deepEqual(Object.keys(during.json), RUN_KEYS);
  assert.equal(during.json.status, 'running');
  assert.equal(during.json.outputs, null);
  assert.equal(during.json.error, null);
  assert.equal(during.json.finished_at, null);
  assert.equal(during.json.total_tokens, 0);
  assert.ok(during.json.elapsed_time < 0.4);
  const post = await pending;
  assert.ok(Date.now() - t0 >= 380, `answered after ${Date.now() - t0} ms`);
  assert.equal(post.json.workflow_run_id, runId);
  assert.equal(post.json.data.status, 'succeeded');
  assert.deepEqual(post.json.data.outputs, { text: 'done' });
  const after = await getRun(key, runId);
  assert.equal(after.json.status, 'succeeded');
  assert.deepEqual(after.json.outputs, { text: 'done' });
  assert.ok(after.json.elapsed_time >= 0.38 && after.json.elapsed_time < 1, String(after.json.elapsed_time));
  assert.ok(Number.isInteger(after.json.finished_at));
});

test('runDurationMs, streaming: workflow_started at once, pings every 500 ms, then the rest', async () => {
  assert.equal(RUN_PING_INTERVAL_MS, 500);
  // Timings are lower bounds (a loaded machine only makes them later), except that
  // workflow_started must come well before the run's duration is over.
  const DURATION = 3000;
  const key = addApp({ mode: 'workflow', runDurationMs: DURATION, outputs: { text: 'abc' } });
  const s = await openStream('workflow', key);
  const first = await s.next();
  assert.ok(first.at < DURATION / 2, `workflow_started after ${first.at} ms`);
  const started = JSON.parse(first.frame.slice(6, -2));
  assert.equal(started.event, 'workflow_started');
  assert.match(started.workflow_run_id, UUID);
  assert.match(started.task_id, UUID);
  const runId = started.workflow_run_id;
  const during = await getRun(key, runId);
  assert.equal(during.json.status, 'running');
  assert.equal(during.json.outputs, null);
  assert.equal(during.json.total_steps, 0);
  const pings = [];
  let f;
  while ((f = await s.next()).frame === PING_FRAME) pings.push(f.at);
  assert.ok(pings.length >= 1, 'no ping while the run was running');
  assert.ok(pings[0] >= RUN_PING_INTERVAL_MS - 50, `ping 1 at ${pings[0]}`);
  for (let i = 1; i < pings.length; i++) assert.ok(pings[i] - pings[i - 1] >= RUN_PING_INTERVAL_MS - 50, `pings at ${pings}`);
  assert.ok(pings.at(-1) < DURATION, `a ping after the run's duration: ${pings}`);
  const next = { at: f.at, event: JSON.parse(f.frame.slice(6, -2)) };
  assert.ok(next.at >= DURATION - 20, `node_started at ${next.at}`);
  assert.equal(label(next.event), 'node_started:Start');
  const rest = await s.restEvents();
  assert.equal(rest.at(-1).event, 'workflow_finished');
  assert.equal(rest.at(-1).data.status, 'succeeded');
  const after = await getRun(key, runId);
  assert.equal(after.json.status, 'succeeded');
  assert.deepEqual(after.json.outputs, { text: 'abc' });
  assert.equal(after.json.total_steps, 3);
  assert.equal(dify.runs.get(runId).taskId, started.task_id);
});

test('runDurationMs, streaming: a client leaving after workflow_started does not stop the run', async () => {
  // 3 s: long enough for the checks below to see it running on a loaded machine.
  const key = addApp({ mode: 'workflow', runDurationMs: 3000, outputs: { x: 1 } });
  const s = await openStream('workflow', key);
  const started = (await s.nextEvent()).event;
  s.abort();
  const rec = dify.requestsFor(key)[0];
  await waitFor(() => rec.clientAborted === true, 'clientAborted');
  assert.equal((await getRun(key, started.workflow_run_id)).json.status, 'running');
  await waitFor(() => dify.runState(started.workflow_run_id).status !== 'running', 'the end of the run');
  const after = await getRun(key, started.workflow_run_id);
  assert.equal(after.json.status, 'succeeded');
  assert.deepEqual(after.json.outputs, { x: 1 });
  assert.equal(after.json.total_steps, 3);
  assert.ok(after.json.elapsed_time >= 0.39, String(after.json.elapsed_time));
  assert.equal(rec.stopped, undefined);
});

test('runDurationMs + workflow_failed: running, then failed with an error', async () => {
  const key = addApp({ mode: 'workflow', behaviour: 'workflow_failed', runDurationMs: 300 });
  const s = await openStream('workflow', key);
  const runId = (await s.nextEvent()).event.workflow_run_id;
  assert.equal((await getRun(key, runId)).json.status, 'running');
  const rest = await s.restEvents();
  assert.equal(rest.at(-1).data.status, 'failed');
  const r = await getRun(key, runId);
  assert.equal(r.json.status, 'failed');
  assert.equal(r.json.error, 'Node LLM failed: model timeout');
  assert.deepEqual(r.json.outputs, {});
  assert.equal(r.json.total_steps, 2);
  assert.equal(r.json.total_tokens, 0);
  // Blocking too.
  const b = await runBlocking(key);
  assert.equal(b.json.data.status, 'failed');
  assert.equal((await getRun(key, b.json.workflow_run_id)).json.status, 'failed');
});

test('stop endpoint makes a running run stopped: streaming, after a disconnect, blocking', async () => {
  // Runs of 30 s, so that "ended at once" (below 10 s) cannot be their natural end.
  const key = addApp({ mode: 'workflow', runDurationMs: 30_000 });
  const stop = (taskId, user = 'u') => call(`/v1/workflows/tasks/${taskId}/stop`, { method: 'POST', key, body: { user } });

  // Streaming: the stop ends the ping wait at once with workflow_finished stopped.
  const s = await openStream('workflow', key);
  const started = (await s.nextEvent()).event;
  // Another user's stop changes nothing.
  assert.equal((await stop(started.task_id, 'intruder')).status, 403);
  assert.equal((await getRun(key, started.workflow_run_id)).json.status, 'running');
  const t0 = Date.now();
  assert.deepEqual((await stop(started.task_id)).json, { result: 'success' });
  const rest = await s.restEvents();
  assert.ok(Date.now() - t0 < 10_000);
  assert.deepEqual(rest.map((e) => [e.event, e.data.status, e.data.total_steps]), [['workflow_finished', 'stopped', 0]]);
  const r = await getRun(key, started.workflow_run_id);
  assert.deepEqual(
    [r.json.status, r.json.outputs, r.json.error, r.json.total_tokens],
    ['stopped', {}, null, 0],
  );
  assert.ok(Number.isInteger(r.json.finished_at));
  assert.ok(r.json.elapsed_time < 10);

  // After the client went away: only the stop call stops it.
  const s2 = await openStream('workflow', key);
  const started2 = (await s2.nextEvent()).event;
  s2.abort();
  await waitFor(() => dify.requestsFor(key).some((x) => x.runId === started2.workflow_run_id && x.clientAborted), 'abort');
  assert.equal((await getRun(key, started2.workflow_run_id)).json.status, 'running');
  await stop(started2.task_id);
  assert.equal((await getRun(key, started2.workflow_run_id)).json.status, 'stopped');

  // Blocking: the waiting answer comes at once, stopped.
  const t1 = Date.now();
  const pending = runBlocking(key);
  const runPosts = () => dify.requestsFor(key).filter((x) => x.method === 'POST' && x.path === '/v1/workflows/run');
  await waitFor(() => runPosts().length === 3 && runPosts()[2].runId, 'the blocking run');
  const rec = runPosts()[2];
  await stop(rec.taskId);
  const b = await pending;
  assert.ok(Date.now() - t1 < 10_000);
  assert.deepEqual([b.json.data.status, b.json.data.outputs], ['stopped', {}]);
  assert.equal((await getRun(key, rec.runId)).json.status, 'stopped');
});

test('stop after the run finished leaves it finished', async () => {
  const key = addApp({ mode: 'workflow', runDurationMs: 200 });
  const s = await openStream('workflow', key);
  const started = (await s.nextEvent()).event;
  await s.restEvents();
  await call(`/v1/workflows/tasks/${started.task_id}/stop`, { method: 'POST', key, body: { user: 'u' } });
  assert.equal((await getRun(key, started.workflow_run_id)).json.status, 'succeeded');
});

test('runDurationMs 0: a stream is running until it ends; a stop during it makes it stopped', async () => {
  const key = addApp({ mode: 'workflow', streamBehaviour: 'hang_after_first' });
  const s = await openStream('workflow', key);
  const started = (await s.nextEvent()).event;
  assert.equal((await getRun(key, started.workflow_run_id)).json.status, 'running');
  await call(`/v1/workflows/tasks/${started.task_id}/stop`, { method: 'POST', key, body: { user: 'u' } });
  await s.restEvents();
  assert.equal((await getRun(key, started.workflow_run_id)).json.status, 'stopped');
});

test('runPollFailures: the first N GETs of every run answer a plain-text 500', async () => {
  const key = addApp({ mode: 'workflow', runPollFailures: 2 });
  for (let i = 0; i < 2; i++) {
    const runId = (await runBlocking(key)).json.workflow_run_id;
    for (let j = 0; j < 2; j++) {
      const r = await getRun(key, runId);
      assert.equal(r.status, 500);
      assert.match(r.headers.get('content-type'), /^text\/plain/);
      assert.equal(r.text, 'Internal Server Error');
    }
    for (let j = 0; j < 2; j++) assert.equal((await getRun(key, runId)).json.status, 'succeeded');
    assert.equal(dify.runs.get(runId).gets, 4);
  }
  // 404 for unknown runs is not affected; every GET is recorded.
  assert.equal((await getRun(key, 'nope')).status, 404);
  assert.equal(dify.requestsFor(key).filter((r) => r.method === 'GET').length, 9);
});

test('addApp validates runDurationMs and runPollFailures', () => {
  assert.throws(() => addApp({ mode: 'workflow', runDurationMs: -1 }), /runDurationMs/);
  assert.throws(() => addApp({ mode: 'workflow', runDurationMs: 1.5 }), /runDurationMs/);
  assert.throws(() => addApp({ mode: 'workflow', runPollFailures: 'x' }), /runPollFailures/);
});

test('fixture stop() ends a blocking run that is waiting for runDurationMs', async () => {
  const own = await startDifyFixture();
  const key = own.addApp({ mode: 'workflow', runDurationMs: 30000 });
  const pending = fetch(`${own.baseUrl}/workflows/run`, {
    method: 'POST',
    headers: { Authorization: `Bearer ${key}`, 'Content-Type': 'application/json' },
    body: JSON.stringify({ inputs: {}, response_mode: 'blocking', user: 'u' }),
  }).then((r) => r.text().then(() => 'answered', () => 'aborted'), () => 'aborted');
  for (let i = 0; i < 100 && own.runs.size === 0; i++) await sleep(10);
  assert.equal(own.runs.size, 1);
  const t0 = Date.now();
  await own.stop();
  assert.equal(await pending, 'aborted');
  assert.ok(Date.now() - t0 < 10_000); // generous: the run would wait 30 s
});

test('standalone: `node tests/support/dify-fixture.mjs --port N --key K` serves a workflow and a chat app', async () => {
  const port = await freePort();
  const proc = startProcessGroup(process.execPath, ['tests/support/dify-fixture.mjs', '--port', String(port), '--key', 'app-standalone'], { label: 'dify-fixture' });
  try {
    const until = Date.now() + 15_000;
    while (!proc.log().includes('Ctrl-C stops')) {
      assert.ok(Date.now() < until, `the fixture did not start:\n${proc.log()}`);
      await new Promise((r) => setTimeout(r, 50));
    }
    assert.match(proc.log(), new RegExp(`fake Dify Service API at http://127\\.0\\.0\\.1:${port}/v1`));
    for (const [key, mode] of [['app-standalone', 'workflow'], ['app-standalone-chat', 'chat']]) {
      const r = await fetch(`http://127.0.0.1:${port}/v1/info`, { headers: { authorization: `Bearer ${key}` } });
      assert.equal(r.status, 200);
      assert.equal((await r.json()).mode, mode);
    }
  } finally {
    await proc.stop();
  }
});
