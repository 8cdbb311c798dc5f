// An upstream's own tasks, relayed (MCP tasks: the 2026-07-28 `io.modelcontextprotocol/tasks`
// extension, SEP-2663; 2025-11-25 tasks for older clients): every `tasks-*` scenario of the
// suite through Flowgate in front of a 2026-07-28 upstream fixture that keeps the tasks
// (tests/support/tasks-2026.mjs), and straight against the fixture, so that a failure through
// Flowgate is Flowgate's. Then what the scenarios cannot see: the client gets Flowgate's sealed
// task ids, never the upstream's; another server's code cannot reach a task, nor can a made-up
// id; a 2025-11-25 client (the TypeScript SDK's task client) works the same upstream task.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { CallToolResultSchema } from '@modelcontextprotocol/sdk/types.js';

import { startFlowgate } from '../support/harness.mjs';
import { recorder, runConformance, scenarioPair, summary } from '../support/conformance.mjs';
import { startInputRequiredUpstream } from '../support/input-required-upstream.mjs';
import { createdTasks, EXTENSION } from '../support/tasks-2026.mjs';
import { startTasks2025Upstream } from '../support/tasks-2025.mjs';
import { rpc, rpc2026, serverOf, upstreamApp } from '../support/flowgate-setup.mjs';

const SCENARIOS = [
  'tasks-lifecycle',
  'tasks-capability-negotiation',
  'tasks-wire-fields',
  'tasks-request-state-removal',
  'tasks-mrtr-input',
  'tasks-request-headers',
  'tasks-dispatch-and-envelope',
  'tasks-required-task-error',
  'tasks-mrtr-composition',
];
// The suite skips this one itself ("pending subscriptions/listen rewrite"); it is run so that
// the table shows it, and so that the day it checks something, this test says so.
const SKIPPED_BY_SUITE = 'tasks-status-notifications';

const rec = recorder('conformance-tasks');
let fg;
let up;
let url;
let otherUrl;
let up2025;
let url2025;
let appId;
let bare; // an upstream that declares the extension, its tools no execution.taskSupport (as FastMCP does)
let bareUrl;

before(async () => {
  [fg, up, up2025, bare] = await Promise.all([
    startFlowgate(),
    startInputRequiredUpstream(),
    startTasks2025Upstream(),
    startInputRequiredUpstream({ bareTaskTools: true }),
  ]);
  ({ url: bareUrl } = await serverOf(fg, 'Bare tasks', [await upstreamApp(fg, 'Bare', { url: bare.url, tool_name_prefix: false })]));
  const old = await upstreamApp(fg, 'Tasker 2025', { url: up2025.url, tool_name_prefix: false }, 'A 2025-11-25 upstream (the SDK\'s task API)');
  ({ url: url2025 } = await serverOf(fg, 'Tasks 2025', [old]));
  appId = await upstreamApp(fg, 'Tasker', { url: up.url, tool_name_prefix: false }, 'A 2026-07-28 upstream that runs tasks');
  ({ url } = await serverOf(fg, 'Tasks', [appId]));
  ({ url: otherUrl } = await serverOf(fg, 'Other', [appId]));
});

after(async () => {
  await rec.save();
  await Promise.allSettled([fg?.stop(), up?.close(), up2025?.close(), bare?.close()]);
});

for (const scenario of SCENARIOS) {
  scenarioPair(test, rec, scenario, { revision: 'extension', flowgate: () => url, fixture: () => up.url, fixtureName: 'fixture: input-required-upstream' });
}

test(`${SKIPPED_BY_SUITE}: the suite skips it (status notifications are optional)`, async () => {
  for (const [target, to] of [['Flowgate', url], ['fixture: input-required-upstream', up.url]]) {
    const { code, out } = await runConformance(['server', '--url', to, '--scenario', SKIPPED_BY_SUITE]);
    rec.add(SKIPPED_BY_SUITE, 'extension', target, code, out);
    assert.equal(code, 0, summary(out));
    assert.match(out, /SKIPPED/, `the suite now checks ${SKIPPED_BY_SUITE}; run it for real:\n${summary(out)}`);
  }
});

const CAPS = 'io.modelcontextprotocol/clientCapabilities';
const WITH_TASKS = { elicitation: {}, extensions: { [EXTENSION]: {} } };
/** One 2026-07-28 request; `caps` are the client capabilities it declares. */
const call = (method, params, { to = url, caps = WITH_TASKS, headers = {} } = {}) => rpc2026(to, method, params, { caps, headers });
const upstreamRequests = (method) => up.requests.filter((r) => r.body.method === method);

async function until(taskId, done, { to } = {}) {
  for (;;) {
    const r = await call('tasks/get', { taskId }, { to });
    if (r.error || done(r.result)) return r;
    await new Promise((resolve) => setTimeout(resolve, 50));
  }
}

test('the client gets Flowgate\'s sealed task id, the upstream its own; the result comes through tasks/get', async () => {
  const r = await call('tools/call', { name: 'slow_compute', arguments: { seconds: 0.2, label: 'sealed' } });
  assert.equal(r.result?.resultType, 'task', JSON.stringify(r));
  const id = r.result.taskId;
  assert.match(id, /^fg-task\./);
  const mine = createdTasks().filter((t) => t.tool === 'slow_compute').at(-1);
  assert.ok(!id.includes(mine.taskId), 'the upstream\'s id is not readable in Flowgate\'s');
  assert.equal(r.result.ttlMs, mine.ttlMs);
  const done = await until(id, (t) => t.status === 'completed');
  assert.equal(done.result.taskId, id);
  assert.equal(done.result.result?.content?.[0]?.text, 'computed sealed after 0.2s');
  // The upstream was asked with its own id, in Mcp-Name too, and with the tasks extension.
  const asked = upstreamRequests('tasks/get').at(-1);
  assert.equal(asked.body.params.taskId, mine.taskId);
  assert.equal(asked.headers['mcp-name'], mine.taskId);
  assert.ok(asked.body.params._meta[CAPS].extensions[EXTENSION]);
  const created = up.requests.filter((q) => q.body.method === 'tools/call' && q.body.params.name === 'slow_compute').at(-1);
  assert.ok(created.body.params._meta[CAPS].extensions[EXTENSION], 'the upstream was asked for a task');
});

test('a task is unknown through another server\'s code, or by a made-up or altered id; the upstream is not asked', async () => {
  const r = await call('tools/call', { name: 'slow_compute', arguments: { seconds: 30, label: 'private' } });
  const id = r.result.taskId;
  const before = up.requests.length;
  const altered = `${id.slice(0, -3)}${id.endsWith('AAA') ? 'BBB' : 'AAA'}`;
  for (const [taskId, to] of [[id, otherUrl], ['fg-task.made-up', url], [altered, url]]) {
    for (const method of ['tasks/get', 'tasks/cancel']) {
      const e = await call(method, { taskId }, { to });
      assert.equal(e.error?.code, -32602, JSON.stringify(e));
      assert.match(e.error.message, /unknown task/);
    }
  }
  assert.equal(up.requests.length, before, 'no refused request reached the upstream');
  // The right server can cancel it, and the upstream's task is cancelled.
  const c = await call('tasks/cancel', { taskId: id });
  assert.deepEqual(c.result?.resultType, 'complete', JSON.stringify(c));
  const got = await call('tasks/get', { taskId: id });
  assert.equal(got.result.status, 'cancelled');
  assert.equal(createdTasks().filter((t) => t.tool === 'slow_compute').at(-1).status, 'cancelled');
});

test('input a task waits for goes to the client on tasks/get, and its answer to the upstream by tasks/update', async () => {
  const r = await call('tools/call', { name: 'confirm_delete', arguments: { filename: 'a.txt' } });
  const id = r.result.taskId;
  const waiting = await until(id, (t) => t.status === 'input_required');
  assert.equal(waiting.result.inputRequests.confirm.method, 'elicitation/create');
  const ack = await call('tasks/update', { taskId: id, inputResponses: { confirm: { action: 'accept', content: { confirm: true } } } });
  assert.deepEqual(Object.keys(ack.result).sort(), ['_meta', 'resultType']);
  const done = await until(id, (t) => t.status === 'completed');
  assert.equal(done.result.result.content[0].text, 'deleted a.txt');
  const update = upstreamRequests('tasks/update').at(-1).body.params;
  assert.deepEqual(update.inputResponses, { confirm: { action: 'accept', content: { confirm: true } } });
});

test('a task tool without the extension: required is -32021 from Flowgate, optional runs as a plain call', async () => {
  const before = upstreamRequests('tools/call').length;
  const r = await call('tools/call', { name: 'failing_job', arguments: {} }, { caps: {} });
  assert.equal(r.error?.code, -32021, JSON.stringify(r));
  assert.deepEqual(r.error.data, { requiredCapabilities: { extensions: { [EXTENSION]: {} } } });
  assert.equal(upstreamRequests('tools/call').length, before, 'refused before the upstream');
  const sync = await call('tools/call', { name: 'slow_compute', arguments: { seconds: 0, label: 'sync' } }, { caps: {} });
  assert.equal(sync.result?.resultType, 'complete', JSON.stringify(sync));
  assert.equal(sync.result.content[0].text, 'computed sync after 0s');
});

test('a 2025-11-25 client (the TypeScript SDK\'s task client) runs the 2026-07-28 upstream\'s task', async () => {
  const client = new Client({ name: 'v1-task-client', version: '1.0.0' });
  await client.connect(new StreamableHTTPClientTransport(new URL(url)));
  try {
    assert.ok(client.getServerCapabilities()?.tasks?.requests?.tools?.call, 'Flowgate declares tasks for tools/call');
    const { tools } = await client.listTools();
    assert.equal(tools.find((t) => t.name === 'slow_compute')?.execution?.taskSupport, 'optional');
    const seen = [];
    for await (const m of client.experimental.tasks.callToolStream({ name: 'slow_compute', arguments: { seconds: 0.3, label: 'v1' } }, CallToolResultSchema, { task: { ttl: 60_000 } })) {
      seen.push(m);
    }
    const created = seen.find((m) => m.type === 'taskCreated');
    assert.ok(created, `no task was created: ${JSON.stringify(seen)}`);
    assert.match(created.task.taskId, /^fg-task\./);
    assert.equal(typeof created.task.ttl, 'number');
    const result = seen.find((m) => m.type === 'result');
    assert.equal(result?.result?.content?.[0]?.text, 'computed v1 after 0.3s', JSON.stringify(seen));
    const task = await client.experimental.tasks.getTask(created.task.taskId);
    assert.equal(task.status, 'completed');
    assert.equal(task.ttlMs, undefined, '2025-11-25 names: ttl, not ttlMs');
  } finally {
    await client.close();
  }
});

test('a 2025-11-25 upstream\'s task (the SDK\'s task API) through Flowgate, for a 2025-11-25 SDK client', async () => {
  const client = new Client({ name: 'v1-task-client', version: '1.0.0' });
  await client.connect(new StreamableHTTPClientTransport(new URL(url2025)));
  try {
    assert.ok(client.getServerCapabilities()?.tasks?.requests?.tools?.call, 'Flowgate declares tasks because the upstream does');
    const seen = [];
    for await (const m of client.experimental.tasks.callToolStream({ name: 'slow_job', arguments: { label: 'old' } }, CallToolResultSchema, { task: { ttl: 60_000 } })) {
      seen.push(m);
    }
    const created = seen.find((m) => m.type === 'taskCreated');
    assert.match(created?.task?.taskId ?? '', /^fg-task\./, JSON.stringify(seen));
    const result = seen.find((m) => m.type === 'result')?.result;
    assert.equal(result?.content?.[0]?.text, 'slow old done', JSON.stringify(seen));
    assert.equal(result._meta['io.modelcontextprotocol/related-task'].taskId, created.task.taskId, 'the result names Flowgate\'s task id');
    const asked = up2025.requests.find((r) => r.body.method === 'tools/call' && r.body.params?.name === 'slow_job');
    assert.deepEqual(asked.body.params.task, { ttl: 60_000 }, 'the upstream was asked for a task its way');
    const upstreamId = up2025.requests.filter((r) => r.body.method === 'tasks/get').at(-1).body.params.taskId;
    assert.ok(!created.task.taskId.includes(upstreamId));
    // Cancelled while it runs: the 2025-11-25 answer is the task, now cancelled, under Flowgate's id.
    let running;
    for await (const m of client.experimental.tasks.callToolStream({ name: 'slow_job', arguments: { label: 'stop', ms: 60_000 } }, CallToolResultSchema, { task: { ttl: 60_000 } })) {
      if (m.type === 'taskCreated') {
        running = m.task.taskId;
        break;
      }
    }
    const cancelled = await client.experimental.tasks.cancelTask(running);
    assert.equal(cancelled.taskId, running);
    assert.equal(cancelled.status, 'cancelled');
    assert.equal(up2025.requests.filter((r) => r.body.method === 'tasks/cancel').length, 1, 'the upstream was told');
  } finally {
    await client.close();
  }
});

test('a 2025-11-25 upstream\'s task for a 2026-07-28 client: the result inlined in tasks/get, a tool error completed with isError', async () => {
  const r = await call('tools/call', { name: 'slow_job', arguments: { label: 'new', ms: 100 } }, { to: url2025 });
  assert.equal(r.result?.resultType, 'task', JSON.stringify(r));
  assert.equal(typeof r.result.ttlMs, 'number');
  assert.ok(!('ttl' in r.result));
  const done = await until(r.result.taskId, (t) => t.status === 'completed', { to: url2025 });
  assert.equal(done.result.result?.content?.[0]?.text, 'slow new done', JSON.stringify(done));
  assert.equal(done.result.result._meta, undefined, 'no related-task key on an inlined result');
  const f = await call('tools/call', { name: 'flaky_job', arguments: { ms: 50 } }, { to: url2025 });
  const failed = await until(f.result.taskId, (t) => t.status !== 'working', { to: url2025 });
  assert.equal(failed.result.status, 'completed');
  assert.equal(failed.result.result.isError, true);
  // tasks/update is a 2026-07-28 method: a 2025-11-25 upstream's task takes none.
  const u = await call('tasks/update', { taskId: f.result.taskId, inputResponses: {} }, { to: url2025 });
  assert.equal(u.error?.code, -32601, JSON.stringify(u));
  assert.match(u.error.message, /speaks 2025-11-25/);
});

test('on a server with client keys, a task is reachable only with the key that started it', async () => {
  const s = await serverOf(fg, 'Keyed tasks', [appId]);
  assert.equal((await fg.console(`/servers/${s.id}/auth`, { method: 'PUT', body: { mode: 'key' } })).status, 200);
  const key = async (name) => (await fg.console(`/servers/${s.id}/keys`, { method: 'POST', body: { name } })).json.key;
  const [alice, bob] = [await key('alice'), await key('bob')];
  const as = (k) => ({ to: s.url, headers: { authorization: `Bearer ${k}` } });
  const r = await call('tools/call', { name: 'slow_compute', arguments: { seconds: 30, label: 'alice' } }, as(alice));
  const id = r.result?.taskId;
  assert.match(id ?? '', /^fg-task\./, JSON.stringify(r));
  for (const method of ['tasks/get', 'tasks/cancel']) {
    const e = await call(method, { taskId: id }, as(bob));
    assert.equal(e.error?.code, -32602, JSON.stringify(e));
    assert.match(e.error.message, /unknown task/);
  }
  assert.equal((await call('tasks/get', { taskId: id }, as(alice))).result?.status, 'working');
  assert.equal((await call('tasks/cancel', { taskId: id }, as(alice))).result?.resultType, 'complete');
});

test('an upstream that declares the extension but no taskSupport on its tools: the opt-in goes through, its task comes back', async () => {
  const args = { name: 'slow_compute', arguments: { seconds: 0.2, label: 'bare' } };
  const asked = () => bare.requests.filter((q) => q.body.method === 'tools/call' && q.body.params.name === 'slow_compute');
  // Straight to the upstream, the opted-in call is a task.
  const straight = await rpc2026(bare.url, 'tools/call', args, { caps: WITH_TASKS });
  assert.equal(straight.result?.resultType, 'task', JSON.stringify(straight));
  // Through Flowgate: the same, under Flowgate's id, and the result through tasks/get.
  const r = await call('tools/call', args, { to: bareUrl });
  assert.equal(r.result?.resultType, 'task', JSON.stringify(r));
  assert.match(r.result.taskId, /^fg-task\./);
  assert.ok(asked().at(-1).body.params._meta[CAPS].extensions[EXTENSION], 'the opt-in reached the upstream');
  const done = await until(r.result.taskId, (t) => t.status === 'completed', { to: bareUrl });
  assert.equal(done.result.result?.content?.[0]?.text, 'computed bare after 0.2s');
  // Without the opt-in the upstream answers at once, and so does Flowgate.
  const sync = await call('tools/call', { ...args, arguments: { seconds: 0, label: 'plain' } }, { to: bareUrl, caps: {} });
  assert.equal(sync.result?.resultType, 'complete', JSON.stringify(sync));
  assert.equal(sync.result.content[0].text, 'computed plain after 0s');
  assert.equal(asked().at(-1).body.params._meta?.[CAPS]?.extensions?.[EXTENSION], undefined, 'no opt-in the client did not send');
  // A 2025-11-25 client's params.task likewise: the upstream's task, in 2025-11-25 naming.
  const old = await rpc(bareUrl, { jsonrpc: '2.0', id: 1, method: 'tools/call', params: { ...args, task: { ttl: 60_000 } } }, { 'mcp-protocol-version': '2025-11-25' });
  assert.match(old.json?.result?.task?.taskId ?? '', /^fg-task\./, old.text);
  assert.equal(typeof old.json.result.task.ttl, 'number');
  assert.ok(asked().at(-1).body.params._meta[CAPS].extensions[EXTENSION], 'asked for a task the 2026-07-28 way');
});
