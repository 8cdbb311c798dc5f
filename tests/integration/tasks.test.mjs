// Durable tasks through real clients against real Durable Objects (wrangler dev).
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { CallToolResultSchema, CreateTaskResultSchema } from '@modelcontextprotocol/sdk/types.js';

import { startFlowgate } from '../support/harness.mjs';
import { startDifyFixture } from '../support/dify-fixture.mjs';
import { startHttpTool } from '../support/http-tool-fixture.mjs';
import { publish, registerApp, rpc } from '../support/flowgate-setup.mjs';

let fg;
let dify;
let tools;

// TASK_MIN_TTL_SECONDS (tests only): this Worker's floor of a task's TTL is 20 s, not the
// protocol's minute, so the tests of TTLs wait seconds, not minutes (tasks-restart.test.mjs
// checks the 1-minute floor of a Worker without it). TASK_GRACE_SECONDS: a task its TTL ended
// is deleted 10 s after (30 s by default), which the last test waits for.
const MIN_TTL_MS = 20_000;
before(async () => {
  const vars = { TASK_MIN_TTL_SECONDS: String(MIN_TTL_MS / 1000), TASK_GRACE_SECONDS: '10' };
  [fg, dify, tools] = await Promise.all([startFlowgate({ vars }), startDifyFixture(), startHttpTool()]);
});

after(async () => {
  await Promise.allSettled([fg?.stop(), dify?.stop(), tools?.stop()]);
});

const V = { 'mcp-protocol-version': '2025-11-25' };
const FAST = { poll_interval_seconds: 1, input_required_poll_seconds: 1 };
const FORM = [{ 'text-input': { variable: 'text', label: 'Text', required: true } }];

async function workflowServer(name, opts = {}, support = 'optional') {
  const { app, apiKey } = await registerApp(fg, dify, { mode: 'workflow', name, form: FORM, backend: { task_support: support, ...FAST }, ...opts });
  return { ...(await publish(fg, app.id)), apiKey, app };
}

async function asyncToolServer(name, script, extra = {}) {
  const { submitPath, statusPath, cancelPath } = tools.addAsyncTool({ apiKey: 'async-key', script, ...extra });
  const r = await fg.console('/apps', {
    method: 'POST',
    body: {
      name,
      mode: 'http-tool',
      backend: {
        api_endpoint: tools.url + submitPath,
        api_key: 'async-key',
        async: { status_endpoint: tools.url + statusPath, cancel_endpoint: tools.url + cancelPath },
        task_support: 'required',
        manifest: { parameters: [{ name: 'city', type: 'string', required: true }], outputs: [{ name: 'temperature', type: 'number' }] },
        ...FAST,
      },
    },
  });
  assert.equal(r.status, 201, r.text);
  return { ...(await publish(fg, r.json.id)), submitPath };
}

const call = (name, args, task = { ttl: 600_000 }, id = 1) => ({ jsonrpc: '2.0', id, method: 'tools/call', params: { name, arguments: args, ...(task ? { task } : {}) } });
const taskReq = (method, taskId, id = 2) => ({ jsonrpc: '2.0', id, method, params: { taskId } });

/** The official SDK client, connected (2025-11-25); closed after the test file. */
const clients = new Map();
async function sdk(url) {
  if (!clients.has(url)) {
    const client = new Client({ name: 'tasks-test', version: '1.0.0' });
    await client.connect(new StreamableHTTPClientTransport(new URL(url)));
    clients.set(url, client);
  }
  return clients.get(url);
}
after(async () => {
  await Promise.allSettled([...clients.values()].map((c) => c.close()));
});

/** Starts a task with the SDK client (tools/call with params.task). */
async function createTask(url, name, args) {
  const client = await sdk(url);
  const { task } = await client.request({ method: 'tools/call', params: { name, arguments: args, task: { ttl: 600_000 } } }, CreateTaskResultSchema);
  assert.match(task.taskId, /^[0-9a-f]{32}$/, '128 random bits');
  return task;
}

/** The task's result through the SDK client (tasks/result). */
async function taskResult(url, taskId) {
  return (await sdk(url)).experimental.tasks.getTaskResult(taskId, CallToolResultSchema);
}

/** Polls tasks/get (SDK client) every `everyMs` until `done(task)`; returns every status seen and the last task. */
async function follow(url, taskId, done, ms = 30_000, everyMs = 250) {
  const seen = [];
  const until = Date.now() + ms;
  for (;;) {
    const t = await (await sdk(url)).experimental.tasks.getTask(taskId);
    if (seen.at(-1) !== t.status) seen.push(t.status);
    if (done(t)) return { seen, task: t };
    if (Date.now() > until) throw new Error(`task ${taskId} never got there; saw ${seen.join(' → ')}, last ${JSON.stringify(t)}`);
    await new Promise((res) => setTimeout(res, everyMs));
  }
}

// A task's TTL counts from its creation: a finished task's storage is deleted at its end, and a
// task still running then is ended. The shortest TTL is the floor (a client's ttl of 1 s is
// raised to it): the first test of this file starts two tasks (one whose run takes 10 s, with the
// floor's 20 s TTL, and one whose run never ends, with 25 s) and starts watching each from then
// on, while the tests in between run; the last two tests wait for what their watches saw.
const shortLived = {};
const neverDone = {};
/** The watches of the two tasks: promises that never reject ({ error } when a check failed). */
const watches = {};
const settle = (p) => p.then(() => ({}), (error) => ({ error }));

test('ttl is clamped to the floor … 7 days (default 1 day); a finished task stays readable within it', async () => {
  const { url, server } = await workflowServer('Ttl Clamp');
  const ttlOf = async (task) => (await rpc(url, call('Ttl_Clamp', { text: 'x' }, task), V)).json.result.task;
  assert.equal((await ttlOf({ ttl: 30 * 24 * 3600 * 1000 })).ttl, 7 * 24 * 3600 * 1000, '30 days are capped at 7');
  assert.equal((await ttlOf({})).ttl, 24 * 3600 * 1000, 'the default is a day');
  const { task } = await follow(url, (await ttlOf({ ttl: 1000 })).taskId, (t) => t.status === 'completed');
  assert.equal(task.ttl, MIN_TTL_MS, '1 s is raised to the floor');
  assert.equal((await fg.console(`/servers/${server.id}/tasks/${task.taskId}`)).status, 200);

  // A run of 10 s: counted from its end, the TTL would keep the task 10 s longer.
  const slow = await workflowServer('Long Run', { runDurationMs: 10_000 });
  const short = (await rpc(slow.url, call('Long_Run', { text: 'x' }, { ttl: 1000 }), V)).json.result.task;
  assert.equal(short.ttl, MIN_TTL_MS);
  Object.assign(shortLived, { ...slow, taskId: short.taskId, createdAt: Date.parse(short.createdAt), ttl: short.ttl, expiresAt: Date.parse(short.createdAt) + short.ttl });
  watches.shortLived = settle(watchFinished(shortLived));

  const stuck = await asyncToolServer('Never Done', [{ status: 'running' }]);
  const created = (await rpc(stuck.url, call('Never_Done', { city: 'Oslo' }, { ttl: 25_000 }), V)).json.result.task;
  assert.equal(created.ttl, 25_000, 'a ttl over the floor is kept');
  Object.assign(neverDone, { ...stuck, taskId: created.taskId, ttl: created.ttl, expiresAt: Date.parse(created.createdAt) + created.ttl });
  watches.neverDone = settle(watchNeverDone(neverDone));
});

describe('2025-11-25 through the official SDK client', () => {
  test('a task that completes; tasks/result equals a direct tools/call', async () => {
    const { url } = await workflowServer('Slow Report', { runDurationMs: 1500 });
    const client = new Client({ name: 'tasks-test', version: '1.0.0' });
    await client.connect(new StreamableHTTPClientTransport(new URL(url)));
    try {
      assert.ok(client.getServerCapabilities().tasks?.requests?.tools?.call, 'tasks capability');
      const { tools: listed } = await client.listTools();
      assert.equal(listed[0].execution.taskSupport, 'optional');
      const kinds = [];
      let result;
      for await (const m of client.experimental.tasks.callToolStream({ name: 'Slow_Report', arguments: { text: 'q3' } }, undefined, { task: { ttl: 600_000 } })) {
        kinds.push(m.type === 'taskStatus' ? `status:${m.task.status}` : m.type);
        if (m.type === 'result') result = m.result;
        if (m.type === 'error') throw m.error;
      }
      assert.equal(kinds[0], 'taskCreated');
      assert.ok(kinds.includes('status:working'), kinds.join());
      assert.ok(kinds.includes('status:completed'), kinds.join());
      assert.equal(result._meta['io.modelcontextprotocol/related-task'].taskId.length, 32);
      const direct = await client.callTool({ name: 'Slow_Report', arguments: { text: 'q3' } });
      const { _meta, ...payload } = result;
      assert.deepEqual(payload, direct, 'tasks/result returns exactly what a direct call returns');
      assert.deepEqual(direct.structuredContent, { echo: { text: 'q3' } });
    } finally {
      await client.close();
    }
  });

  test('a task that fails reports failed, and tasks/result gives the tool error', async () => {
    const { url } = await workflowServer('Doomed', { runDurationMs: 500, behaviour: 'workflow_failed' });
    const task = await createTask(url, 'Doomed', { text: 'x' });
    const { task: t } = await follow(url, task.taskId, (x) => x.status !== 'working');
    assert.equal(t.status, 'failed');
    assert.match(t.statusMessage, /model timeout/);
    const r = await taskResult(url, task.taskId);
    assert.equal(r.isError, true);
    assert.match(r.content[0].text, /model timeout/);
    assert.equal(r._meta['io.modelcontextprotocol/related-task'].taskId, task.taskId);
  });

  test('a task cancelled while running stops the Dify run; cancelling again is -32602', async () => {
    const { url, apiKey } = await workflowServer('Long Haul', { runDurationMs: 60_000 });
    const client = new Client({ name: 'tasks-test', version: '1.0.0' });
    await client.connect(new StreamableHTTPClientTransport(new URL(url)));
    try {
      const created = await client.request(
        { method: 'tools/call', params: { name: 'Long_Haul', arguments: { text: 'x' }, task: { ttl: 600_000 } } },
        (await import('@modelcontextprotocol/sdk/types.js')).CreateTaskResultSchema,
      );
      const taskId = created.task.taskId;
      await follow(url, taskId, () => dify.requestsFor(apiKey).some((q) => q.runId));
      await client.experimental.tasks.cancelTask(taskId);
      const { task } = await follow(url, taskId, (t) => t.status === 'cancelled');
      assert.equal(task.status, 'cancelled');
      const stop = dify.stops.find((s) => s.apiKey === apiKey);
      assert.ok(stop, 'the stop endpoint was called');
      const run = [...dify.runs.values()].find((r) => r.apiKey === apiKey);
      assert.equal(stop.task_id, run.taskId);
      assert.equal(dify.runState(run.id).status, 'stopped');
      const again = await rpc(url, taskReq('tasks/cancel', taskId), V);
      assert.equal(again.json.error.code, -32602);
      assert.match(again.json.error.message, /already cancelled/);
    } finally {
      await client.close();
    }
  });
});

describe('seed-002 async tools', () => {
  test('a task that hits input_required and continues', async () => {
    const { url } = await asyncToolServer('Asker', [
      { status: 'running' },
      { status: 'input_required', input_required: { question: 'Which city?' } },
      { status: 'running' },
      { status: 'completed', result: { temperature: 72 } },
    ]);
    const task = await createTask(url, 'Asker', { city: 'Oslo' });
    const { seen, task: t } = await follow(url, task.taskId, (x) => ['completed', 'failed', 'cancelled'].includes(x.status));
    assert.deepEqual(seen.filter((s) => s !== 'working').slice(0, 2), ['input_required', 'completed'], seen.join(' → '));
    assert.equal(t.status, 'completed');
    const r = await taskResult(url, task.taskId);
    assert.deepEqual(r.structuredContent, { temperature: 72 });
  });

  test('three backend errors mark tracking degraded without failing the task, then it recovers', async () => {
    const { url, server } = await asyncToolServer('Flaky Tracker', [
      { httpStatus: 500 }, { httpStatus: 500 }, { httpStatus: 500 }, { status: 'running' }, { status: 'completed', result: { temperature: 1 } },
    ]);
    const task = await createTask(url, 'Flaky_Tracker', { city: 'x' });
    const { task: degraded } = await follow(url, task.taskId, (t) => /degraded/.test(t.statusMessage ?? ''));
    assert.equal(degraded.status, 'working');
    const row = await fg.console(`/servers/${server.id}/tasks/${task.taskId}`);
    assert.equal(row.status, 200, row.text);
    assert.equal(row.json.degraded, true);
    assert.equal(row.json.consecutive_errors, 3);
    assert.match(row.json.last_error, /HTTP 500/);
    const { task: done } = await follow(url, task.taskId, (t) => t.status === 'completed');
    assert.equal(done.statusMessage, undefined);
    const after = await fg.console(`/servers/${server.id}/tasks/${task.taskId}`);
    assert.equal(after.json.degraded, false);
    assert.ok(after.json.poll_count >= 2);
  });

  test('the poll intervals follow the backoff rule (1 s base: 1, 2, 4 s after errors)', async () => {
    const { url, submitPath } = await asyncToolServer('Backoff', [
      { httpStatus: 503 }, { httpStatus: 503 }, { httpStatus: 503 }, { status: 'completed', result: { temperature: 2 } },
    ]);
    const task = await createTask(url, 'Backoff', { city: 'x' });
    await follow(url, task.taskId, (t) => t.status === 'completed');
    const statusCalls = tools.callsFor(submitPath).filter((c) => c.kind === 'status');
    const gaps = statusCalls.slice(1).map((c, i) => (c.at - statusCalls[i].at) / 1000);
    assert.equal(gaps.length, 3);
    // The durations are the behaviour, and an alarm only ever fires late (a loaded 2-core
    // machine delays alarms and calls by seconds), so only the lower bounds are tight: they
    // alone tell the rule from no backoff (1, 1, 1) and make the gaps grow. Comparing one gap
    // with the next is not done: a late first poll would make a right rule look flat. The
    // upper bound only says the poller came back at all (each is half a minute over); the exact
    // doubling, off-by-ones included, is pinned by pure::task's unit tests of `backoff_s`.
    for (const [gap, want] of gaps.map((g, i) => [g, [1, 2, 4][i]])) {
      assert.ok(gap >= want - 0.05 && gap < want + 30, `gaps ${gaps.join(', ')} s`);
    }
  });

  test('a status read that loses its connection is sent again at once, not counted as an error', async () => {
    const { url, server, submitPath } = await asyncToolServer('Dropped', [{ drop: true }, { status: 'completed', result: { temperature: 3 } }]);
    const task = await createTask(url, 'Dropped', { city: 'x' });
    const { task: done } = await follow(url, task.taskId, (t) => t.status === 'completed');
    assert.doesNotMatch(done.statusMessage ?? '', /degraded|connection/i);
    const statusCalls = tools.callsFor(submitPath).filter((c) => c.kind === 'status');
    assert.equal(statusCalls.length, 2);
    // Sent again within the same poll, not after a backoff: the task applied one status answer
    // (the resent one's), and no error. A dropped read counted as an error would show two polls
    // and the error, whatever the timing (no wall-clock bound: load only delays the resend).
    const row = await fg.console(`/servers/${server.id}/tasks/${task.taskId}`);
    assert.equal(row.json.poll_count, 1, JSON.stringify(row.json));
    assert.equal(row.json.consecutive_errors, 0);
    assert.equal(row.json.last_error ?? null, null);
  });

  test('a remote id over 255 characters fails the task and cancels the work it started', async () => {
    const long = 'r'.repeat(300);
    const { url, submitPath } = await asyncToolServer('Too Long', [{ status: 'running' }], { submitResponse: { task_id: long, status: 'running' } });
    const task = await createTask(url, 'Too_Long', { city: 'x' });
    const { task: t } = await follow(url, task.taskId, (x) => x.status !== 'working');
    assert.equal(t.status, 'failed');
    assert.match(t.statusMessage, /255/);
    const cancels = tools.callsFor(submitPath).filter((c) => c.kind === 'cancel');
    assert.equal(cancels.length, 1);
    assert.equal(cancels[0].body.task_id, long);
  });

  test('a required tool refuses a plain call', async () => {
    const { url } = await asyncToolServer('Only Async', [{ status: 'completed', result: {} }]);
    const r = await rpc(url, call('Only_Async', { city: 'x' }, null), V);
    assert.equal(r.json.error.code, -32601);
    assert.match(r.json.error.message, /params\.task/);
  });
});

test('a chat app runs to completion inside its task', async () => {
  const { app } = await registerApp(fg, dify, { mode: 'chat', name: 'Chat Task', form: [], backend: { task_support: 'optional', ...FAST } });
  const { url } = await publish(fg, app.id);
  const task = await createTask(url, 'Chat_Task', { query: 'hello task' });
  await follow(url, task.taskId, (t) => t.status === 'completed');
  const r = await taskResult(url, task.taskId);
  assert.equal(r.content[0].text, 'echo: hello task');
  assert.deepEqual(r.structuredContent, { answer: 'echo: hello task' });
});

describe('2026-07-28 tasks extension', () => {
  const meta = { 'io.modelcontextprotocol/protocolVersion': '2026-07-28', 'io.modelcontextprotocol/clientCapabilities': { extensions: { 'io.modelcontextprotocol/tasks': {} } } };
  const send = (url, method, params, name) =>
    rpc(url, { jsonrpc: '2.0', id: 7, method, params: { ...params, _meta: meta } }, { 'mcp-protocol-version': '2026-07-28', 'mcp-method': method, ...(name ? { 'mcp-name': name } : {}) });

  test('tasks/update is acknowledged with the extension, refused without it and on 2025-11-25', async () => {
    const { url } = await workflowServer('Updated Flow', { runDurationMs: 60_000 });
    const created = (await send(url, 'tools/call', { name: 'Updated_Flow', arguments: { text: 'u' } }, 'Updated_Flow')).json.result;
    assert.equal(created.resultType, 'task');
    const ack = await send(url, 'tasks/update', { taskId: created.taskId }, created.taskId);
    assert.equal(ack.status, 200, ack.text);
    assert.equal(ack.json.result.resultType, 'complete');
    assert.deepEqual(Object.keys(ack.json.result).filter((k) => k !== '_meta'), ['resultType'], 'an empty ack');
    assert.equal((await send(url, 'tasks/get', { taskId: created.taskId }, created.taskId)).json.result.status, 'working', 'the task goes on');
    const unknown = await send(url, 'tasks/update', { taskId: 'f'.repeat(32) }, 'f'.repeat(32));
    assert.equal(unknown.json.error.code, -32602);
    const plainMeta = { 'io.modelcontextprotocol/protocolVersion': '2026-07-28', 'io.modelcontextprotocol/clientCapabilities': {} };
    const without = await rpc(url, { jsonrpc: '2.0', id: 8, method: 'tasks/update', params: { taskId: created.taskId, _meta: plainMeta } }, { 'mcp-protocol-version': '2026-07-28', 'mcp-method': 'tasks/update', 'mcp-name': created.taskId });
    assert.equal(without.status, 400);
    assert.equal(without.json.error.code, -32021);
    const old = await rpc(url, taskReq('tasks/update', created.taskId), V);
    assert.equal(old.json.error.code, -32601);
    await send(url, 'tasks/cancel', { taskId: created.taskId }, created.taskId);
  });

  test('server-directed creation, result inlined in tasks/get, cancel acknowledged', async () => {
    const { url } = await workflowServer('Modern Flow', { runDurationMs: 800 });
    const d = await send(url, 'server/discover', {});
    assert.deepEqual(d.json.result.capabilities.extensions, { 'io.modelcontextprotocol/tasks': {} });
    const c = await send(url, 'tools/call', { name: 'Modern_Flow', arguments: { text: 'now' } }, 'Modern_Flow');
    const created = c.json.result;
    assert.equal(created.resultType, 'task', c.text);
    assert.ok(Number.isInteger(created.ttlMs) && Number.isInteger(created.pollIntervalMs));
    assert.equal(created.task, undefined);
    let got;
    for (let i = 0; i < 60; i++) {
      got = (await send(url, 'tasks/get', { taskId: created.taskId }, created.taskId)).json.result;
      if (got.status === 'completed') break;
      await new Promise((r) => setTimeout(r, 250));
    }
    assert.equal(got.status, 'completed');
    assert.equal(got.resultType, 'complete');
    assert.deepEqual(got.result.structuredContent, { echo: { text: 'now' } });
    assert.equal(got.result._meta, undefined);
    const cancel = await send(url, 'tasks/cancel', { taskId: created.taskId }, created.taskId);
    assert.equal(cancel.json.result.resultType, 'complete');
    assert.deepEqual(Object.keys(cancel.json.result).sort(), ['_meta', 'resultType']);
    const gone = await send(url, 'tasks/result', { taskId: created.taskId }, created.taskId);
    assert.equal(gone.json.error.code, -32601);
  });
});

describe('isolation and the console', () => {
  test('a task is reachable only through the server code that created it', async () => {
    const a = await workflowServer('Owner', { runDurationMs: 200 });
    const b = await workflowServer('Stranger');
    const task = await createTask(a.url, 'Owner', { text: 'x' });
    const r = await rpc(b.url, taskReq('tasks/get', task.taskId), V);
    assert.equal(r.json.error.code, -32602);
    assert.match(r.json.error.message, /unknown task/);
    assert.equal((await fg.console(`/servers/${b.server.id}/tasks/${task.taskId}`)).status, 404);
  });

  test('the console lists, shows and cancels tasks', async () => {
    const { url, server } = await workflowServer('Console Tasks', { runDurationMs: 60_000 });
    const t1 = await createTask(url, 'Console_Tasks', { text: '1' });
    const t2 = await createTask(url, 'Console_Tasks', { text: '2' });
    const list = await fg.console(`/servers/${server.id}/tasks?limit=1`);
    assert.equal(list.status, 200, list.text);
    assert.deepEqual(list.json.data.map((t) => t.id), [t2.taskId]);
    const page2 = await fg.console(`/servers/${server.id}/tasks?limit=1&before=${list.json.next_before}`);
    assert.deepEqual(page2.json.data.map((t) => t.id), [t1.taskId]);
    assert.equal((await fg.console(`/servers/${server.id}/tasks?limit=500`)).status, 400);
    const c = await fg.console(`/servers/${server.id}/tasks/${t1.taskId}/cancel`, { method: 'POST' });
    assert.equal(c.status, 200, c.text);
    assert.equal(c.json.cancel_requested, true);
    await follow(url, t1.taskId, (t) => t.status === 'cancelled');
    const shown = await fg.console(`/servers/${server.id}/tasks/${t1.taskId}`);
    assert.equal(shown.json.status, 'cancelled');
    assert.equal((await fg.console(`/servers/${server.id}/tasks/${t1.taskId}/cancel`, { method: 'POST' })).status, 409);
  });
});

/**
 * Watches the finished task from its creation to its deletion (started by the first test, run
 * beside the tests in between): it completes, then is "unknown" from the end of its TTL counted
 * from its creation, not before and not as late as the TTL counted from its end; then its D1
 * row and console entry go.
 */
async function watchFinished({ url, server, taskId, createdAt, ttl, expiresAt }) {
  const { task } = await follow(url, taskId, (t) => t.status === 'completed', Math.max(0, expiresAt - Date.now()), 500);
  const completedAt = Date.parse(task.lastUpdatedAt);
  assert.ok(completedAt >= createdAt + 9_000, `the run took only ${completedAt - createdAt} ms: the check below would prove nothing`);
  // The Worker answers "unknown task" from the TTL's end on, by its own clock (the alarm that
  // deletes the storage may come later), so both bounds are sharp: not before the TTL counted
  // from the creation, and before the TTL counted from the end (≥ 9 s later) would be.
  let r;
  let goneAt;
  for (const until = completedAt + ttl; Date.now() < until; await new Promise((res) => setTimeout(res, 250))) {
    r = await rpc(url, taskReq('tasks/get', taskId), V);
    if (r.json.error) {
      goneAt = Date.now();
      break;
    }
    assert.equal(r.json.result.status, 'completed');
  }
  assert.equal(r.json.error?.code, -32602, `still there ${Date.now() - expiresAt} ms after its TTL from creation: ${r.text}`);
  assert.match(r.json.error.message, /unknown task/);
  assert.ok(goneAt >= expiresAt, `gone ${expiresAt - goneAt} ms before its TTL ran out`);
  // The alarm deletes the D1 row (and so the console entry): waited for, bounded generously.
  let shown;
  for (const until = Date.now() + 30_000; Date.now() < until; await new Promise((res) => setTimeout(res, 500))) {
    shown = await fg.console(`/servers/${server.id}/tasks/${taskId}`);
    if (shown.status === 404) break;
  }
  assert.equal(shown.status, 404);
  assert.deepEqual(await fg.d1(`SELECT id FROM tasks WHERE id = '${taskId}'`), []);
}

/**
 * Watches the task whose run never ends (started by the first test, run beside the tests in
 * between): the TTL ends it, not before, failed and naming the TTL; its run is cancelled at the
 * backend; after the grace it is deleted.
 */
async function watchNeverDone({ url, server, submitPath, taskId, ttl, expiresAt }) {
  // The run never finishes: the TTL is what ends the task (its alarm is set for the TTL's end).
  const { task } = await follow(url, taskId, (t) => t.status !== 'working', Math.max(0, expiresAt - Date.now()) + 60_000, 500);
  const endedAt = Date.now();
  // Lower bound only (a loaded machine makes the end later, never earlier): not before the TTL.
  assert.ok(endedAt >= expiresAt, `ended ${expiresAt - endedAt} ms before its TTL ran out`);
  assert.equal(task.status, 'failed', JSON.stringify(task));
  assert.match(task.statusMessage, new RegExp(`did not finish within its ttl of ${ttl} ms \\(counted from its creation\\)`));
  const result = await rpc(url, taskReq('tasks/result', taskId), V);
  assert.equal(result.json.result.isError, true, result.text);
  assert.match(result.json.result.content[0].text, new RegExp(`ttl of ${ttl} ms`));
  // The backend's run is cancelled as tasks/cancel would (an event to wait for, bounded).
  for (const until = Date.now() + 20_000; !tools.tasksOf(submitPath)[0]?.cancelled && Date.now() < until; ) await new Promise((r) => setTimeout(r, 250));
  assert.equal(tools.tasksOf(submitPath)[0].cancelled, true, 'the run at the backend was cancelled');
  // Then it is deleted: the grace is 10 s after it ended here; the deadline adds 60 s and more for a loaded machine.
  let r;
  for (const until = endedAt + 90_000; Date.now() < until; await new Promise((res) => setTimeout(res, 1000))) {
    r = await rpc(url, taskReq('tasks/get', taskId), V);
    if (r.json.error) break;
  }
  assert.equal(r.json.error?.code, -32602, r.text);
  assert.match(r.json.error.message, /unknown task/);
  let shown;
  for (const until = Date.now() + 30_000; Date.now() < until; await new Promise((res) => setTimeout(res, 500))) {
    shown = await fg.console(`/servers/${server.id}/tasks/${taskId}`);
    if (shown.status === 404) break;
  }
  assert.equal(shown.status, 404);
  assert.deepEqual(await fg.d1(`SELECT id FROM tasks WHERE id = '${taskId}'`), []);
}

test('a finished task is deleted at the end of its TTL, counted from its creation, not its end: storage, D1 row and console entry', { timeout: 240_000 }, async () => {
  assert.ok(watches.shortLived, 'the first test of this file did not run');
  const { error } = await watches.shortLived;
  if (error) throw error;
});

test('a task still running at the end of its TTL (from creation) fails naming it, its run is cancelled, and it is deleted after a bounded grace', { timeout: 240_000 }, async () => {
  assert.ok(watches.neverDone, 'the first test of this file did not run');
  const { error } = await watches.neverDone;
  if (error) throw error;
});
