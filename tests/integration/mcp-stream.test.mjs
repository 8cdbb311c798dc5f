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
    // The fake Dify holds its final event (workflow_finished) until the test releases it, so
    // "while the backend works" is an event, not a duration: every notification must reach the
    // client while the run is still going, or the test fails (no timing to go wrong under load).
    const nodes = ['Start', 'Search', 'Summarise', 'Review', 'End'].map((title) => ({ title, type: 'llm' }));
    const { url, tool, apiKey } = await server({ mode: 'workflow', name: 'Slow Flow', nodes, holdBefore: 'workflow_finished', outputs: [{ variable: 'echo', type: 'object' }] });
    const { client, logs } = await sdk(url);
    try {
      const progress = [];
      let done = false;
      const call = client
        .callTool({ name: tool, arguments: { text: 'go' } }, CallToolResultSchema, { onprogress: (p) => progress.push(p) })
        .finally(() => (done = true));
      const run = await waitFor(() => dify.requestsFor(apiKey).find((q) => q.held));
      const nodeLogs = () => logs.filter((l) => l.data?.event === 'node_started');
      await waitFor(() => progress.length === nodes.length && nodeLogs().length === nodes.length, 20_000, 'the notifications of a run that has not ended');
      assert.equal(run.held, true, 'the run is still going');
      assert.equal(done, false, 'the result came before the run ended');
      dify.release(apiKey);
      const result = await call;
      assert.equal(result.isError, false, JSON.stringify(result));
      assert.deepEqual(result.structuredContent, { echo: { text: 'go' } });
      assert.equal(progress.length, nodes.length, JSON.stringify(progress));
      assert.deepEqual(progress.map((p) => p.progress), [1, 2, 3, 4, 5]);
      assert.deepEqual(progress.map((p) => p.message), nodes.map((n, i) => `${n.title} succeeded (${i + 1} node${i ? 's' : ''} finished)`));
      assert.deepEqual(nodeLogs().map((l) => l.data.node), nodes.map((n) => n.title));
      assert.ok(nodeLogs().every((l) => l.level === 'info' && l.logger === 'flowgate'));
      assert.equal(run.body.response_mode, 'streaming');
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
  const RUN_PATHS = { workflow: '/v1/workflows/run', completion: '/v1/completion-messages' };
  /** The run requests Flowgate sent for an app (its stop calls and the like left out). */
  const runsOf = (apiKey, mode) => dify.requestsFor(apiKey).filter((q) => q.path === (RUN_PATHS[mode] ?? '/v1/chat-messages'));
  for (const [mode, check] of Object.entries(expectations)) {
    test(`final result of a streamed ${mode} call`, async () => {
      const { url, tool, apiKey } = await server({ mode, name: `Streamed ${mode}` });
      const { client } = await sdk(url);
      const args = { text: 'hello', ...(mode.includes('chat') ? { query: 'Hi there' } : {}) };
      let r;
      try {
        r = await client.callTool({ name: tool, arguments: args });
        assert.equal(r.isError, false, JSON.stringify(r));
        check(r);
      } finally {
        await client.close();
      }
      // This call, not some earlier one, streamed from Dify.
      const [run, ...more] = runsOf(apiKey, mode);
      assert.equal(more.length, 0, 'one run per call');
      assert.equal(run.body.response_mode, 'streaming');
      assert.equal(run.streaming, true);
      assert.deepEqual(run.body.inputs, { text: 'hello' });

      // A client that takes only JSON: Dify is called blocking (agent-chat only streams), and the
      // result is the same.
      const json = await rpc(url, callBody(tool, args), { ...V, accept: 'application/json' });
      assert.match(json.headers.get('content-type'), /application\/json/);
      const { structuredContent, content, isError } = json.json.result;
      assert.deepEqual({ structuredContent, content, isError }, { structuredContent: r.structuredContent, content: r.content, isError: r.isError });
      const blocking = runsOf(apiKey, mode)[1];
      assert.equal(blocking.body.response_mode, mode === 'agent-chat' ? 'streaming' : 'blocking');
      assert.equal(blocking.streaming, mode === 'agent-chat' ? true : undefined);
    });
  }

  test('agent-chat: thoughts are progress, and the last thought stands in only without an answer', async () => {
    // Without agent_message events the last thought is the answer ...
    const thinker = await server({ mode: 'agent-chat', name: 'Thinker', agentAnswer: false, answer: 'Because it is.' });
    // ... with them, the answer wins over a last thought that says something else.
    const talker = await server({ mode: 'agent-chat', name: 'Talker', answer: 'Because it is.', finalThought: 'I should answer briefly.' });
    for (const [{ url, tool }, text] of [[thinker, 'Because it is.'], [talker, 'Because it is.']]) {
      const { client, logs } = await sdk(url);
      try {
        const progress = [];
        const r = await client.callTool({ name: tool, arguments: { query: 'Why?' } }, CallToolResultSchema, { onprogress: (p) => progress.push(p) });
        assert.equal(r.isError, false);
        assert.deepEqual(r.content, [{ type: 'text', text }]);
        assert.deepEqual(r.structuredContent, { answer: text });
        // One progress step per thought: the tool call, the empty thought, the final thought.
        assert.deepEqual(progress.map((p) => [p.progress, p.message]), [[1, 'using web_search'], [2, 'thinking'], [3, 'thinking']]);
        assert.deepEqual(logs.filter((l) => l.data?.event === 'agent_thought').map((l) => l.data.thought).at(-1), tool === 'Talker' ? 'I should answer briefly.' : text);
      } finally {
        await client.close();
      }
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
    await assertStopped(apiKey, 'workflows/tasks');
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
    await assertStopped(apiKey, 'workflows/tasks');
  });

  test('a `: keep-alive` comment goes out after each second without output, and tells a client that left', async () => {
    // Only workflow_started, then silence: Flowgate has nothing to say but keep-alives until
    // idle_timeout_seconds (30 s here, well beyond this test).
    const { url, tool, apiKey } = await server({ mode: 'workflow', name: 'Quiet', streamBehaviour: 'hang_after_first', backend: { idle_timeout_seconds: 30 } });
    const res = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json', accept: 'text/event-stream', ...V }, body: JSON.stringify(callBody(tool, { text: 'x' })) });
    const started = Date.now(); // the response starts at once, before the backend has said anything
    assert.equal(res.status, 200);
    const reader = res.body.getReader();
    const dec = new TextDecoder();
    const chunks = [];
    const read = async () => {
      const { value, done } = await reader.read();
      assert.equal(done, false, 'the stream ended');
      chunks.push({ text: dec.decode(value, { stream: true }), at: Date.now() });
    };
    // Waits on the comments themselves; the timings are lower bounds, which load cannot break
    // (a missing keep-alive fails the test through its timeout: the call would sit silent for 30 s).
    while (chunks.filter((c) => c.text.includes(': keep-alive')).length < 2) await withTimeout(read(), 15_000, 'a keep-alive');
    assert.deepEqual(chunks.map((c) => c.text), [': keep-alive\n\n', ': keep-alive\n\n'], 'nothing but the comments was written');
    assert.ok(chunks[0].at - started >= 900, `first keep-alive ${chunks[0].at - started} ms after the response started`);
    assert.ok(chunks[1].at - chunks[0].at >= 900, `keep-alives ${chunks[1].at - chunks[0].at} ms apart`);
    // The client goes away: the next keep-alive cannot be written, and the run is stopped.
    await reader.cancel();
    await assertStopped(apiKey, 'workflows/tasks');
  });

  test('keep-alives still come when the backend falls silent after progress went out', async () => {
    // The relay keeps one timer for the whole call. Each piece sent ends one pull of the
    // response stream and the next wait runs in another task, so the timer must wake whichever
    // task waits now: a timer that woke the task that armed it would leave this stream silent
    // until the backend's next event (the release below, or the 30 s idle timeout).
    const nodes = ['One', 'Two', 'Three'].map((title) => ({ title, type: 'llm' }));
    const { url, tool, apiKey } = await server({ mode: 'workflow', name: 'Paused', nodes, holdBefore: 'workflow_finished', backend: { idle_timeout_seconds: 30 } });
    const res = await fetch(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', ...V },
      body: JSON.stringify(callBody(tool, { text: 'x' }, 1, { progressToken: 'k' })),
    });
    assert.equal(res.status, 200);
    const reader = res.body.getReader();
    const dec = new TextDecoder();
    let text = '';
    const readUntil = async (what, label) => {
      while (!what()) {
        const { value, done } = await withTimeout(reader.read(), 15_000, label);
        assert.equal(done, false, `the stream ended before ${label}: ${text}`);
        text += dec.decode(value, { stream: true });
      }
    };
    await readUntil(() => (text.match(/notifications\/progress/g) ?? []).length === nodes.length, 'the progress of every node');
    await waitFor(() => dify.requestsFor(apiKey).some((q) => q.held), 20_000, 'the backend to pause');
    const before = text.length;
    await readUntil(() => text.slice(before).includes(': keep-alive'), 'a keep-alive while the backend is silent');
    dify.release(apiKey);
    await readUntil(() => text.includes('"result"'), 'the result');
    assert.match(text, /"isError":false/);
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
    await assertStopped(apiKey, 'workflows/tasks');
  });

  for (const [mode, family] of [['chat', 'chat-messages'], ['completion', 'completion-messages']]) {
    test(`a ${mode} run is stopped through the ${family} stop endpoint`, async () => {
      // 200 chunks 50 ms apart: the run lasts 10 s unless it is stopped.
      const { url, tool, apiKey } = await server({ mode, name: `Cancel ${mode}`, repeat: 200, eventDelayMs: 50 });
      const ctl = new AbortController();
      const res = await fetch(url, {
        method: 'POST',
        headers: { 'content-type': 'application/json', accept: 'text/event-stream', ...V },
        body: JSON.stringify(callBody(tool, mode === 'chat' ? { query: 'x' } : { text: 'x' })),
        signal: ctl.signal,
      });
      assert.equal(res.status, 200);
      // These modes send no notifications. The fixture sends the event naming the run at once;
      // the first thing the client gets is the `: keep-alive` after a second of silence, by
      // which time Flowgate has read that event (the run is the client's to stop), and it
      // tells us the relay is reading the stream.
      await waitFor(() => dify.requestsFor(apiKey).some((q) => q.taskId), 20_000, 'the run to start');
      const reader = res.body.getReader();
      const first = await reader.read();
      assert.match(new TextDecoder().decode(first.value), /^: keep-alive/);
      ctl.abort();
      await assertStopped(apiKey, family);
    });
  }
});

test('a streamed call shares its cancel record in KV only once it has run 2 s', async () => {
  const quick = await server({ mode: 'workflow', name: 'Quick Stream', nodes: [{ title: 'One', type: 'llm' }] });
  const slow = await server({
    mode: 'workflow',
    name: 'Slow Stream',
    nodes: Array.from({ length: 20 }, (_, i) => ({ title: `Step ${i}`, type: 'llm' })),
    eventDelayMs: 200,
  });
  const run = async ({ url, tool }, id) => {
    const res = await fetch(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'text/event-stream', 'user-agent': 'share-test/1', ...V },
      body: JSON.stringify(callBody(tool, { text: 'x' }, id, { progressToken: id })),
    });
    const text = await res.text();
    assert.match(text, /"isError":false/, text.slice(-300));
  };
  const before = await cancelRecords();
  await run(quick, 501);
  await run(slow, 502); // about 4 s of events
  const added = (await cancelRecords()).filter((k) => !before.includes(k));
  // Only the slow call's record: the quick one ended before it was worth a KV write.
  assert.equal(added.length, 1, JSON.stringify(added));
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
    await assertStopped(apiKey, 'workflows/tasks');
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
  // The first notification: Flowgate records the run for notifications/cancelled before it
  // writes anything after the backend's first event (which names the run).
  await reader.read();
  const note = await rpc(url, { jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: 77, reason: 'test' } }, { 'user-agent': 'cancel-test/1', ...V });
  assert.equal(note.status, 202);
  await assertStopped(apiKey, 'workflows/tasks');
  let rest = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    rest += new TextDecoder().decode(value);
  }
  assert.match(rest, /the workflow ended stopped/);
});

async function waitFor(fn, ms = 20_000, what = 'a condition') {
  const until = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > until) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

function withTimeout(promise, ms, what) {
  let timer;
  return Promise.race([promise, new Promise((_, reject) => (timer = setTimeout(() => reject(new Error(`timed out waiting for ${what}`)), ms)))]).finally(() =>
    clearTimeout(timer),
  );
}

/** The KV keys under which Flowgate records running calls for notifications/cancelled. */
async function cancelRecords() {
  return (await fg.kvKeys()).map((k) => k.name).filter((n) => n.startsWith('cancel:'));
}

/**
 * Waits for the one stop call of the app's one run and checks that it names that run's task
 * and user on the stop endpoint of its family (the fake Dify refuses any other, see stopRefusals).
 */
async function assertStopped(apiKey, family) {
  const stop = await waitFor(() => dify.stops.find((s) => s.apiKey === apiKey), 20_000, 'the stop call');
  const runs = dify.requestsFor(apiKey).filter((q) => q.taskId);
  assert.equal(runs.length, 1, 'one run');
  assert.equal(stop.task_id, runs[0].taskId);
  assert.equal(stop.user, runs[0].body.user);
  assert.match(stop.user, /^mcp-[0-9a-f]{24}$/);
  assert.equal(stop.path, `/v1/${family}/${runs[0].taskId}/stop`);
  assert.deepEqual(dify.stopRefusals.filter((s) => s.apiKey === apiKey), []);
  return stop;
}
