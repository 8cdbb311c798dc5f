// Streamed tool calls: progress and log notifications as the backend works, the final result
// for every Dify mode, long streams, the robustness rules, and cancellation.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { CallToolResultSchema, LoggingMessageNotificationSchema } from '@modelcontextprotocol/sdk/types.js';

import { startFlowgate } from '../support/harness.mjs';
import { startDifyFixture } from '../support/dify-fixture.mjs';
import { publish, registerApp, rpc } from '../support/flowgate-setup.mjs';

let fg;
let dify;

before(async () => {
  [fg, dify] = await Promise.all([startFlowgate(), startDifyFixture()]);
});

after(async () => {
  await Promise.allSettled([fg?.stop(), dify?.stop()]);
});

const FORM = [{ 'text-input': { variable: 'text', label: 'Text', required: false } }];

async function server(opts) {
  const { app, apiKey } = await registerApp(fg, dify, { form: FORM, ...opts });
  const { url } = await publish(fg, app.id);
  return { url, apiKey, tool: app.name.replace(/[^A-Za-z0-9.-]+/g, '_') };
}

async function sdk(url) {
  const client = new Client({ name: 'stream-test', version: '1.0.0' });
  await client.connect(new StreamableHTTPClientTransport(new URL(url)));
  const logs = [];
  client.setNotificationHandler(LoggingMessageNotificationSchema, (n) => logs.push({ at: Date.now(), ...n.params }));
  return { client, logs };
}

const V = { 'mcp-protocol-version': '2025-06-18' };
const callBody = (name, args = {}, id = 1, meta) => ({ jsonrpc: '2.0', id, method: 'tools/call', params: { name, arguments: args, ...(meta ? { _meta: meta } : {}) } });

describe('through the official SDK client', () => {
  test('progress and log notifications arrive while the backend works, before the result', async () => {
    const nodes = ['Start', 'Search', 'Summarise', 'Review', 'End'].map((title) => ({ title, type: 'llm' }));
    const { url, tool } = await server({ mode: 'workflow', name: 'Slow Flow', nodes, eventDelayMs: 150, outputs: [{ variable: 'echo', type: 'object' }] });
    const { client, logs } = await sdk(url);
    try {
      const progress = [];
      const started = Date.now();
      const result = await client.callTool({ name: tool, arguments: { text: 'go' } }, CallToolResultSchema, {
        onprogress: (p) => progress.push({ at: Date.now(), ...p }),
      });
      const done = Date.now();
      assert.equal(result.isError, false, JSON.stringify(result));
      assert.deepEqual(result.structuredContent, { echo: { text: 'go' } });
      assert.equal(progress.length, nodes.length, JSON.stringify(progress));
      assert.deepEqual(progress.map((p) => p.progress), [1, 2, 3, 4, 5]);
      assert.deepEqual(progress.map((p) => p.message), nodes.map((n) => `${n.title} succeeded`));
      // Spread over the run, not delivered in one burst at the end.
      assert.ok(done - progress[0].at >= 600, `first progress ${progress[0].at - started} ms after the start, result after ${done - started} ms`);
      assert.ok(progress.at(-1).at - progress[0].at >= 450, 'progress arrived all at once');
      const nodeLogs = logs.filter((l) => l.data?.event === 'node_started');
      assert.deepEqual(nodeLogs.map((l) => l.data.node), nodes.map((n) => n.title));
      assert.ok(nodeLogs.every((l) => l.level === 'info' && l.logger === 'flowgate'));
      assert.ok(nodeLogs[0].at < done - 400, 'logs arrived before the result');
    } finally {
      await client.close();
    }
  });

  const expectations = {
    workflow: (r) => assert.deepEqual(r.structuredContent, { echo: { text: 'hello' } }),
    chat: (r) => assert.equal(r.content[0].text, 'echo: Hi there'),
    'advanced-chat': (r) => assert.equal(r.content[0].text, 'echo: Hi there'),
    'agent-chat': (r) => assert.equal(r.content[0].text, 'echo: Hi there'),
    completion: (r) => assert.match(r.content[0].text, /^completion: \{"text":"hello"\}$/),
  };
  for (const [mode, check] of Object.entries(expectations)) {
    test(`final result of a streamed ${mode} call`, async () => {
      const { url, tool } = await server({ mode, name: `Streamed ${mode}` });
      const { client } = await sdk(url);
      try {
        const args = { text: 'hello', ...(mode.includes('chat') ? { query: 'Hi there' } : {}) };
        const r = await client.callTool({ name: tool, arguments: args });
        assert.equal(r.isError, false, JSON.stringify(r));
        check(r);
      } finally {
        await client.close();
      }
      const runs = dify.requests.filter((q) => q.streaming);
      assert.ok(runs.length > 0);
    });
  }

  test('agent-chat: thoughts are progress, and the last thought stands in only without an answer', async () => {
    const { url, tool } = await server({ mode: 'agent-chat', name: 'Thinker', agentAnswer: false });
    const { client, logs } = await sdk(url);
    try {
      const progress = [];
      const r = await client.callTool({ name: tool, arguments: { query: 'Why?' } }, CallToolResultSchema, { onprogress: (p) => progress.push(p) });
      assert.equal(r.isError, false);
      assert.ok(r.content[0].text.length > 0);
      assert.ok(progress.length >= 1);
      assert.ok(logs.some((l) => l.data?.event === 'agent_thought'));
    } finally {
      await client.close();
    }
  });
});

describe('raw SSE', () => {
  test('a client that takes only JSON gets the same final result (agent-chat read from the stream)', async () => {
    const { url, tool } = await server({ mode: 'agent-chat', name: 'Json Agent' });
    const sse = await rpc(url, callBody(tool, { query: 'Hi there' }), V);
    const json = await rpc(url, callBody(tool, { query: 'Hi there' }), { ...V, accept: 'application/json' });
    assert.match(sse.headers.get('content-type'), /text\/event-stream/);
    assert.match(json.headers.get('content-type'), /application\/json/);
    assert.deepEqual(json.json.result, sse.json.result);
    assert.equal(json.json.result.content[0].text, 'echo: Hi there');
  });

  test('a long stream (20,000 events, ~20 MB) passes through, keeping only what the result needs', async () => {
    const { url, tool, apiKey } = await server({ mode: 'workflow', name: 'Long Flow', repeat: 20000, chunkBytes: 1024, pingEvery: 0 });
    const r = await rpc(url, callBody(tool, { text: 'big' }, 1, { progressToken: 'p' }), V);
    assert.equal(r.status, 200);
    assert.deepEqual(r.json.result.structuredContent, { echo: { text: 'big' } });
    assert.equal(r.json.result.isError, false);
    const sent = dify.requestsFor(apiKey).find((q) => q.streaming);
    assert.ok(sent.sentBytes > 20_000_000, `only ${sent.sentBytes} bytes streamed`);
  });

  test('a long answer is capped at max_result_bytes with a note', async () => {
    const { url, tool } = await server({ mode: 'chat', name: 'Chatterbox', repeat: 3000, chunkBytes: 1024, backend: { max_result_bytes: 100_000 } });
    const r = await rpc(url, callBody(tool, { query: 'talk' }), V);
    const text = r.json.result.content[0].text;
    assert.equal(r.json.result.isError, false);
    assert.ok(text.length < 101_000 && text.length > 99_000, `length ${text.length}`);
    assert.match(text, /\[truncated: the answer was longer than 100000 bytes/);
  });

  test('progress notifications come only with a progress token; logs follow the 2026 logLevel', async () => {
    const { url, tool } = await server({ mode: 'workflow', name: 'Quiet Flow' });
    const plain = await rpc(url, callBody(tool, { text: 'x' }), V);
    assert.ok(plain.messages.every((m) => m.method !== 'notifications/progress'));
    assert.ok(plain.messages.some((m) => m.method === 'notifications/message'));
    const meta = (extra = {}) => ({ 'io.modelcontextprotocol/protocolVersion': '2026-07-28', 'io.modelcontextprotocol/clientCapabilities': {}, ...extra });
    const h26 = { 'mcp-protocol-version': '2026-07-28', 'mcp-method': 'tools/call', 'mcp-name': tool };
    const silent = await rpc(url, callBody(tool, { text: 'x' }, 2, meta()), h26);
    assert.deepEqual(silent.messages.map((m) => m.method ?? 'response'), ['response']);
    assert.equal(silent.json.result.resultType, 'complete');
    const chatty = await rpc(url, callBody(tool, { text: 'x' }, 3, meta({ 'io.modelcontextprotocol/logLevel': 'info', progressToken: 9 })), h26);
    assert.ok(chatty.messages.some((m) => m.method === 'notifications/message'));
    assert.ok(chatty.messages.some((m) => m.method === 'notifications/progress' && m.params.progressToken === 9));
  });
});

describe('robustness', () => {
  const cases = [
    ['a stream that ends early', { streamBehaviour: 'end_early' }, /backend stream ended before a result/],
    ['an error event', { streamBehaviour: 'error_event' }, /reported an error \(provider_quota_exceeded\)/],
    ['no event for idle_timeout_seconds', { streamBehaviour: 'hang_after_first', backend: { idle_timeout_seconds: 1 } }, /sent nothing for 1 s \(idle_timeout_seconds\)/],
    ['no first byte', { streamBehaviour: 'no_first_byte', backend: { first_byte_timeout_seconds: 1 } }, /did not answer within 1 s \(first_byte_timeout_seconds\)/],
    ['HTTP 429', { behaviour: 'rate_limited' }, /HTTP 429, too_many_requests\).*retry after 7 s/],
  ];
  for (const [label, opts, message] of cases) {
    test(`${label} → isError with the documented message`, async () => {
      const { url, tool } = await server({ mode: 'chat', name: `Robust ${label}`, ...opts });
      const r = await rpc(url, callBody(tool, { query: 'q' }), V);
      assert.equal(r.status, 200, r.text);
      assert.equal(r.json.result.isError, true, r.text);
      assert.match(r.json.result.content[0].text, message);
    });
  }

  test('a stream that outlasts timeout_seconds → isError naming it, and the run is stopped', async () => {
    const nodes = Array.from({ length: 40 }, (_, i) => ({ title: `N${i}`, type: 'llm' }));
    const { url, tool, apiKey } = await server({ mode: 'workflow', name: 'Too Slow', nodes, eventDelayMs: 100, backend: { timeout_seconds: 2 } });
    const r = await rpc(url, callBody(tool, { text: 'x' }), V);
    assert.equal(r.json.result.isError, true);
    assert.match(r.json.result.content[0].text, /did not finish within 2 s \(timeout_seconds\)/);
    await waitFor(() => dify.stops.find((s) => s.apiKey === apiKey));
  });

  test('a malformed event is skipped with a warning; the result is unaffected', async () => {
    const { url, tool } = await server({ mode: 'chat', name: 'Malformed', streamBehaviour: 'malformed' });
    const r = await rpc(url, callBody(tool, { query: 'fine' }), V);
    assert.equal(r.json.result.isError, false, r.text);
    assert.equal(r.json.result.content[0].text, 'echo: fine');
    assert.ok(r.messages.some((m) => m.params?.level === 'warning' && m.params.data.event === 'malformed'));
  });

  test('an idle timeout stops the run at the backend', async () => {
    const { url, tool, apiKey } = await server({ mode: 'workflow', name: 'Hanger', streamBehaviour: 'hang_after_first', backend: { idle_timeout_seconds: 1 } });
    await rpc(url, callBody(tool, { text: 'x' }), V);
    const stop = await waitFor(() => dify.stops.find((s) => s.apiKey === apiKey));
    assert.match(stop.path, /^\/v1\/workflows\/tasks\/.+\/stop$/);
    assert.match(stop.user, /^mcp-/);
  });
});

describe('cancellation', () => {
  test('a client that disconnects mid-stream stops the backend run', async () => {
    const nodes = Array.from({ length: 20 }, (_, i) => ({ title: `Step ${i}`, type: 'llm' }));
    const { url, tool, apiKey } = await server({ mode: 'workflow', name: 'Cancel Me', nodes, eventDelayMs: 200 });
    const ctl = new AbortController();
    const res = await fetch(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', ...V },
      body: JSON.stringify(callBody(tool, { text: 'x' }, 1, { progressToken: 'c' })),
      signal: ctl.signal,
    });
    const reader = res.body.getReader();
    await reader.read(); // the first notification: the run is going
    ctl.abort();
    const stop = await waitFor(() => dify.stops.find((s) => s.apiKey === apiKey));
    const run = dify.requestsFor(apiKey).find((q) => q.streaming);
    assert.equal(stop.task_id, run.taskId);
    assert.match(stop.path, new RegExp(`/v1/workflows/tasks/${run.taskId}/stop`));
  });

  test('a chat run is stopped through the chat-messages stop endpoint', async () => {
    const { url, tool, apiKey } = await server({ mode: 'chat', name: 'Cancel Chat', repeat: 200, eventDelayMs: 50 });
    const ctl = new AbortController();
    const res = await fetch(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'text/event-stream', ...V },
      body: JSON.stringify(callBody(tool, { query: 'x' })),
      signal: ctl.signal,
    });
    await new Promise((r) => setTimeout(r, 400));
    ctl.abort();
    void res;
    const stop = await waitFor(() => dify.stops.find((s) => s.apiKey === apiKey));
    assert.match(stop.path, /^\/v1\/chat-messages\/.+\/stop$/);
  });
});

test('notifications/cancelled from the SDK client stops the backend run', async () => {
  const nodes = Array.from({ length: 30 }, (_, i) => ({ title: `Step ${i}`, type: 'llm' }));
  const { url, tool, apiKey } = await server({ mode: 'workflow', name: 'Cancel By Note', nodes, eventDelayMs: 150 });
  const { client } = await sdk(url);
  try {
    const ctl = new AbortController();
    const pending = client.callTool({ name: tool, arguments: { text: 'x' } }, CallToolResultSchema, {
      signal: ctl.signal,
      onprogress: () => ctl.abort('changed my mind'),
    });
    await assert.rejects(pending);
    const stop = await waitFor(() => dify.stops.find((s) => s.apiKey === apiKey));
    const run = dify.requestsFor(apiKey).find((q) => q.streaming);
    assert.equal(stop.task_id, run.taskId);
    assert.equal(stop.user, run.body.user);
  } finally {
    await client.close();
  }
});

test('notifications/cancelled alone (the stream stays open) stops the run, and the call ends', async () => {
  const nodes = Array.from({ length: 30 }, (_, i) => ({ title: `Step ${i}`, type: 'llm' }));
  const { url, tool, apiKey } = await server({ mode: 'workflow', name: 'Cancel Raw', nodes, eventDelayMs: 150 });
  const headers = { 'content-type': 'application/json', accept: 'text/event-stream', 'user-agent': 'cancel-test/1', ...V };
  const res = await fetch(url, { method: 'POST', headers, body: JSON.stringify(callBody(tool, { text: 'x' }, 77, { progressToken: 1 })) });
  const reader = res.body.getReader();
  await reader.read(); // the run is going and recorded
  await new Promise((r) => setTimeout(r, 300));
  const note = await rpc(url, { jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: 77, reason: 'test' } }, { 'user-agent': 'cancel-test/1', ...V });
  assert.equal(note.status, 202);
  const stop = await waitFor(() => dify.stops.find((s) => s.apiKey === apiKey));
  assert.equal(stop.task_id, dify.requestsFor(apiKey).find((q) => q.streaming).taskId);
  let rest = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    rest += new TextDecoder().decode(value);
  }
  assert.match(rest, /the workflow ended stopped/);
});

async function waitFor(fn, ms = 10_000) {
  const until = Date.now() + ms;
  for (;;) {
    const v = fn();
    if (v) return v;
    if (Date.now() > until) throw new Error('timed out waiting');
    await new Promise((r) => setTimeout(r, 100));
  }
}
