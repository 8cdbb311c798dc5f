// A task survives a restart of the Worker: stop `wrangler dev` mid-flight, start it again on
// the same state dir, and the task completes with its result intact. This file's Worker runs
// with the default settings, so it is also where the 1-minute floor of a task's TTL is seen
// (tasks.test.mjs lowers it with TASK_MIN_TTL_SECONDS to test TTLs in seconds).
import { after, test } from 'node:test';
import assert from 'node:assert/strict';

import { startFlowgate } from '../support/harness.mjs';
import { startDifyFixture } from '../support/dify-fixture.mjs';
import { publish, registerApp, rpc } from '../support/flowgate-setup.mjs';

const running = [];
/** The restarted Worker and the task server's MCP URL, for the test after the first. */
const restarted = {};
after(async () => {
  await Promise.allSettled(running.map((r) => r.stop()));
});

test('a task in flight survives a restart of wrangler dev', async () => {
  const dify = await startDifyFixture();
  running.push(dify);
  let fg = await startFlowgate();
  running.push(fg);
  const { app, apiKey } = await registerApp(fg, dify, {
    mode: 'workflow',
    name: 'Survivor',
    form: [{ 'text-input': { variable: 'text', label: 'Text', required: true } }],
    runDurationMs: 6000,
    backend: { task_support: 'optional', poll_interval_seconds: 1 },
  });
  const { code } = await publish(fg, app.id);
  const url = (base) => `${base}/mcp/server/${code}/mcp`;
  const V = { 'mcp-protocol-version': '2025-11-25' };
  const created = await rpc(url(fg.url), { jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'Survivor', arguments: { text: 'persist me' }, task: { ttl: 600_000 } } }, V);
  const taskId = created.json.result.task.taskId;

  // Mid-flight: the run has started at Dify and is being polled.
  const until = Date.now() + 30_000;
  while (!dify.requestsFor(apiKey).some((q) => q.method === 'GET') && Date.now() < until) await new Promise((r) => setTimeout(r, 100));
  assert.ok(dify.requestsFor(apiKey).some((q) => q.method === 'GET'), 'the run was never polled');
  const get = (base) => rpc(url(base), { jsonrpc: '2.0', id: 2, method: 'tasks/get', params: { taskId } }, V);
  assert.equal((await get(fg.url)).json.result.status, 'working');

  await fg.stop({ keepState: true });
  const getsBefore = dify.requestsFor(apiKey).filter((q) => q.method === 'GET').length;
  fg = await startFlowgate({ persistDir: fg.persistDir });
  running.push(fg);

  // Waits for the task's end (generous: the run itself lasts 6 s from its start).
  let task;
  for (const deadline = Date.now() + 60_000; Date.now() < deadline; await new Promise((r) => setTimeout(r, 250))) {
    task = (await get(fg.url)).json.result;
    if (task.status !== 'working') break;
  }
  assert.equal(task.status, 'completed', JSON.stringify(task));
  assert.ok(dify.requestsFor(apiKey).filter((q) => q.method === 'GET').length > getsBefore, 'polling resumed after the restart');
  const result = await rpc(url(fg.url), { jsonrpc: '2.0', id: 3, method: 'tasks/result', params: { taskId } }, V);
  assert.deepEqual(result.json.result.structuredContent, { echo: { text: 'persist me' } });
  assert.equal(result.json.result.isError, false);
  Object.assign(restarted, { url: url(fg.url), V });
});

test('without TASK_MIN_TTL_SECONDS a ttl of 1 s is raised to the 1-minute floor', async () => {
  const { url, V } = restarted;
  assert.ok(url, 'the first test of this file did not run');
  const created = await rpc(url, { jsonrpc: '2.0', id: 4, method: 'tools/call', params: { name: 'Survivor', arguments: { text: 'short' }, task: { ttl: 1000 } } }, V);
  assert.equal(created.json.result?.task?.ttl, 60_000, created.text);
  const got = await rpc(url, { jsonrpc: '2.0', id: 5, method: 'tasks/get', params: { taskId: created.json.result.task.taskId } }, V);
  assert.equal(got.json.result.ttl, 60_000, got.text);
});
