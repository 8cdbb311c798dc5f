// Apps of mode http-tool (seed 003's custom tool protocol) through the MCP endpoint.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { CallToolResultSchema, LoggingMessageNotificationSchema } from '@modelcontextprotocol/sdk/types.js';

import { startFlowgate } from '../support/harness.mjs';
import { startHttpTool } from '../support/http-tool-fixture.mjs';
import { publish, rpc } from '../support/flowgate-setup.mjs';

let fg;
let tools;

before(async () => {
  [fg, tools] = await Promise.all([startFlowgate(), startHttpTool()]);
});

after(async () => {
  await Promise.allSettled([fg?.stop(), tools?.stop()]);
});

const MANIFEST = {
  name: 'get_weather',
  description: 'Retrieves the current weather for a location.',
  parameters: [
    { name: 'location', type: 'string', required: true, description: 'The city and state, e.g. San Francisco, CA', form: 'llm' },
    { name: 'days', type: 'integer', required: false, description: 'Days ahead', default: 0 },
    { name: 'unit', type: 'string', required: false, description: 'Temperature unit', form: 'form', default: 'celsius' },
  ],
  outputs: [
    { name: 'temperature', type: 'number', description: 'The current temperature.' },
    { name: 'condition', type: 'string' },
  ],
};

/** Registers a fixture tool as a Flowgate http-tool app and publishes it. */
async function toolServer(spec = {}, backend = {}) {
  const apiKey = 'tool-secret-key';
  const path = tools.addTool({ apiKey, result: { temperature: 72, condition: 'Sunny' }, ...spec });
  const r = await fg.console('/apps', {
    method: 'POST',
    body: {
      name: 'Weather',
      description: 'Current weather',
      mode: 'http-tool',
      backend: { api_endpoint: tools.url + path, api_key: apiKey, manifest: MANIFEST, form_values: { unit: 'fahrenheit' }, ...backend },
    },
  });
  assert.equal(r.status, 201, r.text);
  return { ...(await publish(fg, r.json.id, { description: 'Current weather' })), path };
}

const V = { 'mcp-protocol-version': '2025-06-18' };
const call = (args, id = 1, meta) => ({ jsonrpc: '2.0', id, method: 'tools/call', params: { name: 'Weather', arguments: args, ...(meta ? { _meta: meta } : {}) } });

describe('one-piece answers', () => {
  test('the manifest shapes the tool; form parameters stay hidden and are sent', async () => {
    const { url, path } = await toolServer();
    const list = await rpc(url, { jsonrpc: '2.0', id: 1, method: 'tools/list' }, V);
    const tool = list.json.result.tools[0];
    assert.deepEqual(Object.keys(tool.inputSchema.properties), ['location', 'days']);
    assert.deepEqual(tool.inputSchema.required, ['location']);
    // The manifest's `integer` is JSON Schema's `integer`, not `number`.
    assert.equal(tool.inputSchema.properties.days.type, 'integer');
    assert.equal(tool.inputSchema.properties.location.description, 'The city and state, e.g. San Francisco, CA');
    assert.deepEqual(tool.outputSchema.properties, { temperature: { type: 'number', description: 'The current temperature.' }, condition: { type: 'string' } });

    const r = await rpc(url, call({ location: 'Paris, FR' }), V);
    assert.equal(r.json.result.isError, false, r.text);
    assert.deepEqual(r.json.result.structuredContent, { temperature: 72, condition: 'Sunny' });
    assert.deepEqual(JSON.parse(r.json.result.content[0].text), { temperature: 72, condition: 'Sunny' });
    const [sent] = tools.requestsFor(path);
    assert.deepEqual(sent.body, { location: 'Paris, FR', unit: 'fahrenheit' });
    assert.equal(sent.headers.authorization, 'Bearer tool-secret-key');
    assert.match(sent.conversationId, /^mcp-[0-9a-f]{24}$/);
    assert.match(sent.userId, /^mcp-[0-9a-f]{24}$/);
    assert.match(sent.headers['content-type'], /application\/json/);
  });

  test('the official SDK client calls a one-piece tool', async () => {
    const { url } = await toolServer();
    const client = new Client({ name: 'http-tool-test', version: '1.0.0' });
    await client.connect(new StreamableHTTPClientTransport(new URL(url)));
    try {
      const r = await client.callTool({ name: 'Weather', arguments: { location: 'Lima' } });
      assert.equal(r.isError, false);
      assert.deepEqual(r.structuredContent, { temperature: 72, condition: 'Sunny' });
    } finally {
      await client.close();
    }
  });

  test('bad arguments never reach the tool', async () => {
    const { url, path } = await toolServer();
    const r = await rpc(url, call({ days: 'two' }), { 'mcp-protocol-version': '2025-11-25' });
    assert.equal(r.json.result.isError, true);
    assert.match(r.json.result.content[0].text, /missing required argument 'location'.*'days' must be a whole number \(got a string\)/);
    const half = await rpc(url, call({ location: 'Oslo', days: 1.5 }), { 'mcp-protocol-version': '2025-11-25' });
    assert.match(half.json.result.content[0].text, /'days' must be a whole number \(got 1\.5\)/);
    assert.equal(tools.requestsFor(path).length, 0);
  });

  const failures = [
    ['error400', /the tool 'Weather' failed \(HTTP 400\): Invalid location format\. Expected 'City, State'\./],
    ['error500', /the tool 'Weather' failed \(HTTP 500\): upstream exploded/],
    ['not_json', /the tool 'Weather' answered with text\/html; charset=utf-8 instead of application\/json/],
    // 204 and no body: read as an empty answer (it used to fail as "could not reach ... body is
    // not streamable", blaming the network for what the tool said).
    ['no_content', /the tool 'Weather' answered with no Content-Type instead of application\/json/],
    ['wrong_content_type', /the tool 'Weather' answered with text\/plain; charset=utf-8 instead of application\/json/],
    ['rate_limited', /the tool 'Weather' failed \(HTTP 429\): slow down; retry after 7 s/],
  ];
  for (const [behaviour, message] of failures) {
    test(`${behaviour} → isError naming the problem`, async () => {
      const { url } = await toolServer({ behaviour });
      const r = await rpc(url, call({ location: 'x' }), V);
      assert.equal(r.status, 200);
      assert.equal(r.json.result.isError, true, r.text);
      assert.match(r.json.result.content[0].text, message);
    });
  }

  test('a wrong key is the tool\'s 401, said as such', async () => {
    const { url } = await toolServer({}, { api_key: 'not-the-key' });
    const r = await rpc(url, call({ location: 'x' }), V);
    assert.match(r.json.result.content[0].text, /failed \(HTTP 401\): invalid api key/);
  });
});

describe('streamed answers (stream: true)', () => {
  test('thoughts become logs, percentages become progress, the result comes last (SDK client)', async () => {
    // The tool holds its result until the test releases it: the notifications must arrive while
    // it is still working (an event, not a time spread that load could squeeze).
    const { url, path } = await toolServer(
      { thoughts: ['Looking up the station', 'Reading the sensor'], progress: [{ percent: 25, message: 'station found' }, 60, 60, 90], holdResult: true },
      { stream: true },
    );
    const client = new Client({ name: 'http-tool-test', version: '1.0.0' });
    await client.connect(new StreamableHTTPClientTransport(new URL(url)));
    const logs = [];
    client.setNotificationHandler(LoggingMessageNotificationSchema, (n) => logs.push(n.params));
    try {
      const progress = [];
      let done = false;
      const pending = client
        .callTool({ name: 'Weather', arguments: { location: 'Oslo' } }, CallToolResultSchema, { onprogress: (p) => progress.push(p) })
        .finally(() => (done = true));
      const thoughts = () => logs.filter((l) => l.data.event === 'thought').map((l) => l.data.thought);
      for (const until = Date.now() + 20_000; !(progress.length === 3 && thoughts().length === 2) && Date.now() < until; ) await new Promise((r) => setTimeout(r, 50));
      assert.equal(tools.requestsFor(path)[0].held, true, 'the tool is still working');
      assert.equal(done, false);
      // A repeated percentage is dropped: progress only grows.
      assert.deepEqual(progress.map((p) => [p.progress, p.total]), [[25, 100], [60, 100], [90, 100]]);
      assert.equal(progress[0].message, 'station found');
      assert.deepEqual(thoughts(), ['Looking up the station', 'Reading the sensor']);
      tools.release(path);
      const r = await pending;
      assert.equal(r.isError, false, JSON.stringify(r));
      assert.deepEqual(r.structuredContent, { temperature: 72, condition: 'Sunny' });
      assert.equal(tools.requestsFor(path)[0].body.stream, true);
    } finally {
      await client.close();
    }
  });

  test('the flat result shape of seed 003\'s example is read too; JSON-only clients get the same result', async () => {
    const { url } = await toolServer({ resultShape: 'flat' }, { stream: true });
    const sse = await rpc(url, call({ location: 'Rome' }), V);
    const json = await rpc(url, call({ location: 'Rome' }), { ...V, accept: 'application/json' });
    assert.deepEqual(sse.json.result.structuredContent, { temperature: 72, condition: 'Sunny' });
    assert.deepEqual(json.json.result, sse.json.result);
  });

  test('a stream without a result → isError', async () => {
    const { url } = await toolServer({ streamBehaviour: 'end_early' }, { stream: true });
    const r = await rpc(url, call({ location: 'x' }), V);
    assert.equal(r.json.result.isError, true);
    assert.match(r.json.result.content[0].text, /backend stream ended before a result/);
  });
});

describe('async tools (submit/status/cancel) called without a task', () => {
  /** An async fixture tool as an http-tool app whose tasks are optional: a plain call is allowed. */
  async function asyncServer(script, backend = {}) {
    const apiKey = 'async-key';
    const t = tools.addAsyncTool({ apiKey, script });
    const r = await fg.console('/apps', {
      method: 'POST',
      body: {
        name: 'Weather',
        mode: 'http-tool',
        backend: {
          api_endpoint: tools.url + t.submitPath,
          api_key: apiKey,
          async: { status_endpoint: tools.url + t.statusPath, cancel_endpoint: tools.url + t.cancelPath },
          task_support: 'optional',
          poll_interval_seconds: 1,
          manifest: MANIFEST,
          ...backend,
        },
      },
    });
    assert.equal(r.status, 201, r.text);
    return { ...(await publish(fg, r.json.id)), ...t };
  }
  const RESULT = { temperature: 21, condition: 'Rain' };
  const SCRIPT = [{ status: 'running' }, { status: 'running', poll_after_seconds: 1 }, { status: 'completed', result: RESULT }];

  test('the call polls the status to the end and answers the result, with progress per check (SDK client)', async () => {
    const { url, submitPath } = await asyncServer(SCRIPT);
    const client = new Client({ name: 'http-tool-test', version: '1.0.0' });
    await client.connect(new StreamableHTTPClientTransport(new URL(url)));
    try {
      const progress = [];
      const r = await client.callTool({ name: 'Weather', arguments: { location: 'Oslo' } }, CallToolResultSchema, { onprogress: (p) => progress.push(p) });
      assert.equal(r.isError, false, JSON.stringify(r));
      assert.deepEqual(r.structuredContent, RESULT, 'the result, not the submission receipt');
      const [task] = tools.tasksOf(submitPath);
      assert.equal(task.statusCalls, 3);
      assert.equal(tools.tasksOf(submitPath).length, 1, 'submitted once');
      assert.deepEqual(progress.map((p) => p.progress), [1, 2], 'one progress notification per check that found it running');
      assert.match(progress[0].message, /still working/);
    } finally {
      await client.close();
    }
    // A client that takes only JSON gets the same result, with no notifications.
    const json = await rpc(url, call({ location: 'Oslo' }), { ...V, accept: 'application/json' });
    assert.deepEqual(json.json.result.structuredContent, RESULT, json.text);
  });

  test('a failed run is a tool error naming the tool\'s message; the app\'s timeout ends a run that never does, and cancels it', async () => {
    const failed = await asyncServer([{ status: 'running' }, { status: 'failed', error: 'no such station' }]);
    const f = await rpc(failed.url, call({ location: 'Nowhere' }), V);
    assert.equal(f.json.result.isError, true, f.text);
    assert.match(f.json.result.content[0].text, /no such station/);

    const stuck = await asyncServer([{ status: 'running' }], { timeout_seconds: 3 });
    const r = await rpc(stuck.url, call({ location: 'Oslo' }), V);
    assert.equal(r.json.result.isError, true, r.text);
    assert.match(r.json.result.content[0].text, /did not finish within 3 s \(timeout_seconds\)/);
    // The cancel goes out once the call gave up (an event to wait for, bounded generously).
    for (const until = Date.now() + 20_000; !tools.tasksOf(stuck.submitPath)[0]?.cancelled && Date.now() < until; ) await new Promise((res) => setTimeout(res, 100));
    assert.equal(tools.tasksOf(stuck.submitPath)[0].cancelled, true, 'the run was cancelled at the backend');
  });

  test('notifications/cancelled alone (the stream stays open) cancels the run, and the call ends', async () => {
    const { url, submitPath } = await asyncServer([{ status: 'running' }]);
    const headers = { 'content-type': 'application/json', accept: 'text/event-stream', 'user-agent': 'async-cancel-test/1', ...V };
    const body = { jsonrpc: '2.0', id: 78, method: 'tools/call', params: { name: 'Weather', arguments: { location: 'Oslo' }, _meta: { progressToken: 'p' } } };
    const res = await fetch(url, { method: 'POST', headers, body: JSON.stringify(body) });
    const reader = res.body.getReader();
    // Read up to the first progress notification: the run was recorded for cancellation once
    // submitted, before its first status check (an event, not a guessed time).
    let seen = '';
    while (!seen.includes('notifications/progress')) {
      const { value, done } = await reader.read();
      assert.ok(!done, `the stream ended before any progress: ${seen}`);
      seen += new TextDecoder().decode(value);
    }
    const note = await rpc(url, { jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: 78, reason: 'test' } }, { 'user-agent': 'async-cancel-test/1', ...V });
    assert.equal(note.status, 202);
    for (const until = Date.now() + 20_000; !tools.tasksOf(submitPath)[0]?.cancelled && Date.now() < until; ) await new Promise((res) => setTimeout(res, 100));
    assert.equal(tools.tasksOf(submitPath)[0].cancelled, true, 'the run was cancelled at the backend');
    // The stream was left open: the next status check reads `cancelled` and ends the call.
    let rest = '';
    for (;;) {
      const { value, done } = await reader.read();
      if (done) break;
      rest += new TextDecoder().decode(value);
    }
    assert.match(rest, /the tool 'Weather' cancelled the run before it finished/);
  });

  test('a client\'s cancellation cancels the run at the backend (SDK client, notifications/cancelled)', async () => {
    const { url, submitPath } = await asyncServer([{ status: 'running' }]);
    const client = new Client({ name: 'http-tool-test', version: '1.0.0' });
    await client.connect(new StreamableHTTPClientTransport(new URL(url)));
    try {
      const controller = new AbortController();
      let checks = 0;
      const pending = client
        .callTool({ name: 'Weather', arguments: { location: 'Oslo' } }, CallToolResultSchema, { signal: controller.signal, onprogress: () => (checks += 1) })
        .catch((e) => e);
      // Cancel once the run is known to be polled (its first progress), not after a guessed time.
      for (const until = Date.now() + 20_000; checks === 0 && Date.now() < until; ) await new Promise((res) => setTimeout(res, 50));
      assert.ok(checks > 0, 'the call reported progress');
      controller.abort('changed my mind');
      assert.ok((await pending) instanceof Error);
      for (const until = Date.now() + 20_000; !tools.tasksOf(submitPath)[0]?.cancelled && Date.now() < until; ) await new Promise((res) => setTimeout(res, 100));
      assert.equal(tools.tasksOf(submitPath)[0].cancelled, true, 'the run was cancelled at the backend');
    } finally {
      await client.close();
    }
  });
});

test('manifest errors are refused by the console, naming the field', async () => {
  const r = await fg.console('/apps', {
    method: 'POST',
    body: { name: 'Bad', mode: 'http-tool', backend: { api_endpoint: 'https://t.example/x', stream: 'yes', manifest: { parameters: [{ name: 'list', type: 'array' }, { name: 'mode', form: 'form', required: true }] } } },
  });
  assert.equal(r.status, 400);
  assert.deepEqual(r.json.errors.map((e) => e.field), ['backend.stream', 'backend.manifest.parameters[0].type', 'backend.manifest.parameters[1]']);
});
