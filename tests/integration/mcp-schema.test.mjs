// Every kind of message Flowgate sends, validated against the official schema of the revision
// the client speaks (tests/support/mcp-schemas.mjs; 2024-11-05 is derived from 2025-03-26):
// final responses and errors, the progress and log notifications of streamed calls, durable
// task results, and results proxied from an upstream MCP server (image, audio, embedded
// resources, resource links: each downgraded for the revisions that cannot carry it).
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';

import { startFlowgate } from '../support/harness.mjs';
import { startDifyFixture } from '../support/dify-fixture.mjs';
import { startUpstreams } from '../support/mcp-upstreams.mjs';
import { validatorFor } from '../support/mcp-schemas.mjs';
import { publish, registerApp, rpc } from '../support/flowgate-setup.mjs';

let fg;
let dify;
let ups;
const urls = {};

before(async () => {
  [fg, dify, ups] = await Promise.all([startFlowgate(), startDifyFixture(), startUpstreams()]);
  for (const mode of ['workflow', 'chat']) {
    const { app } = await registerApp(fg, dify, { mode, name: `${mode} tool` });
    urls[mode] = (await publish(fg, app.id)).url;
  }
  const broken = await registerApp(fg, dify, { mode: 'workflow', name: 'broken tool', behaviour: 'http500' });
  urls.broken = (await publish(fg, broken.app.id)).url;
  const tasked = await registerApp(fg, dify, {
    mode: 'workflow',
    name: 'task tool',
    backend: { task_support: 'optional', poll_interval_seconds: 1 },
    runDurationMs: 300,
  });
  urls.task = (await publish(fg, tasked.app.id)).url;
  const r = await fg.console('/apps', { method: 'POST', body: { name: 'Upstream', mode: 'mcp', backend: { url: ups.stateful.url, tool_name_prefix: false } } });
  assert.equal(r.status, 201, r.text);
  urls.upstream = (await publish(fg, r.json.id)).url;
});

after(async () => {
  await Promise.allSettled([fg?.stop(), dify?.stop(), ups?.stop()]);
});

const SESSIONFUL = ['2024-11-05', '2025-03-26', '2025-06-18', '2025-11-25'];
const init = (v) => ({ jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: v, capabilities: {}, clientInfo: { name: 'schema-test', version: '1' } } });
const req = (id, method, params = {}) => ({ jsonrpc: '2.0', id, method, params });

/** The upstream tools whose results carry each kind of content. */
const CONTENT_TOOLS = ['test_image_content', 'test_audio_content', 'test_embedded_resource', 'test_multiple_content_types', 'link', 'test_error_handling'];

/**
 * Validates every message of an answer (an SSE stream's notifications too) and returns them:
 * notifications as JSONRPCNotification and their own definition, the last as a response.
 */
function checkAll(check, r, resultDef, { revision }) {
  assert.equal(r.status, 200, r.text);
  const notes = r.messages.slice(0, -1);
  for (const n of notes) {
    check('JSONRPCNotification', n);
    const def = { 'notifications/progress': 'ProgressNotification', 'notifications/message': 'LoggingMessageNotification' }[n.method];
    assert.ok(def, `${revision}: unexpected notification ${n.method}`);
    check(def, n);
  }
  check(check.has('JSONRPCResultResponse') ? 'JSONRPCResultResponse' : 'JSONRPCResponse', r.json);
  check(resultDef, r.json.result);
  return { notes, result: r.json.result };
}

for (const revision of SESSIONFUL) {
  test(`responses, notifications and proxied results are valid ${revision} messages`, async () => {
    const check = validatorFor(revision);
    const h = { 'mcp-protocol-version': revision };
    const ok = async (u, body, resultDef, headers = h) => checkAll(check, await rpc(u, body, headers), resultDef, { revision }).result;
    const err = async (u, body) => {
      const r = await rpc(u, body, h);
      check('JSONRPCError', r.json);
    };
    const initResult = await ok(urls.workflow, init(revision), 'InitializeResult');
    assert.equal(initResult.protocolVersion, revision);
    await ok(urls.workflow, req(2, 'ping'), 'Result');
    await ok(urls.workflow, req(3, 'logging/setLevel', { level: 'info' }), 'Result');
    for (const u of [urls.workflow, urls.chat]) {
      const list = await ok(u, req(4, 'tools/list'), 'ListToolsResult');
      const tool = list.tools[0];
      const args = { text: 'x', ...(tool.inputSchema.properties.query ? { query: 'q' } : {}) };
      // Both paths: JSON (Dify blocking) and SSE with progress and log notifications.
      await ok(u, req(5, 'tools/call', { name: tool.name, arguments: args }), 'CallToolResult', { ...h, accept: 'application/json' });
      const streamed = checkAll(check, await rpc(u, req(5, 'tools/call', { name: tool.name, arguments: args, _meta: { progressToken: `p-${revision}` } }), h), 'CallToolResult', { revision });
      if (u === urls.workflow) {
        assert.deepEqual(streamed.notes.filter((n) => n.method === 'notifications/progress').map((n) => n.params.progress), [1, 2, 3]);
        assert.equal(streamed.notes.filter((n) => n.method === 'notifications/message').length, 3);
      }
    }
    const failed = await ok(urls.broken, req(6, 'tools/call', { name: 'broken_tool', arguments: { text: 'x' } }), 'CallToolResult');
    assert.equal(failed.isError, true);
    await err(urls.workflow, req(7, 'resources/list'));
    await err(urls.workflow, req(8, 'tools/call', { name: 'missing' }));
    if (revision === '2025-11-25') {
      const bad = await ok(urls.workflow, req(9, 'tools/call', { name: 'workflow_tool', arguments: {} }), 'CallToolResult');
      assert.equal(bad.isError, true);
    } else {
      await err(urls.workflow, req(9, 'tools/call', { name: 'workflow_tool', arguments: {} }));
    }
    await err(urls.workflow.replace(/server\/\w+\//, 'server/AAAAAAAAAAAAAAAA/'), req(10, 'tools/list'));

    // Proxied from an upstream MCP server: its tool list, and each kind of content.
    const upstreamTools = await ok(urls.upstream, req(11, 'tools/list'), 'ListToolsResult');
    assert.equal(upstreamTools.tools.length, 13);
    const kinds = new Set();
    for (const name of CONTENT_TOOLS) {
      const result = await ok(urls.upstream, req(12, 'tools/call', { name, arguments: {} }), 'CallToolResult');
      for (const c of result.content) kinds.add(c.type);
    }
    // What each revision can carry passes through; the rest is downgraded (and still valid).
    const expected = revision === '2024-11-05' ? ['image', 'resource', 'text'] : revision === '2025-03-26' ? ['audio', 'image', 'resource', 'text'] : ['audio', 'image', 'resource', 'resource_link', 'text'];
    assert.deepEqual([...kinds].sort(), expected);
    const relayed = checkAll(check, await rpc(urls.upstream, req(13, 'tools/call', { name: 'test_tool_with_progress', arguments: {}, _meta: { progressToken: 7 } }), h), 'CallToolResult', { revision });
    assert.deepEqual(relayed.notes.map((n) => n.params.progress), [0, 50, 100]);
    const logged = checkAll(check, await rpc(urls.upstream, req(14, 'tools/call', { name: 'test_tool_with_logging', arguments: {} }), h), 'CallToolResult', { revision });
    assert.equal(logged.notes.length, 3);

    if (revision === '2025-11-25') {
      // Durable tasks: creation, status, the result, and a cancel of a finished task.
      const created = await ok(urls.task, req(20, 'tools/call', { name: 'task_tool', arguments: { text: 't' }, task: { ttl: 600_000 } }), 'CreateTaskResult');
      const taskId = created.task.taskId;
      let status;
      for (let i = 0; i < 120 && status !== 'completed'; i++) {
        status = (await ok(urls.task, req(21, 'tasks/get', { taskId }), 'GetTaskResult')).status;
        if (status !== 'completed') await new Promise((res) => setTimeout(res, 250));
      }
      assert.equal(status, 'completed');
      const payload = await ok(urls.task, req(22, 'tasks/result', { taskId }), 'GetTaskPayloadResult');
      check('CallToolResult', payload);
      await err(urls.task, req(23, 'tasks/cancel', { taskId }));
      const running = await ok(urls.task, req(24, 'tools/call', { name: 'task_tool', arguments: { text: 'u' }, task: { ttl: 600_000 } }), 'CreateTaskResult');
      const cancelled = await ok(urls.task, req(25, 'tasks/cancel', { taskId: running.task.taskId }), 'CancelTaskResult');
      assert.equal(cancelled.taskId, running.task.taskId);
      await err(urls.task, req(26, 'tasks/get', { taskId: 'f'.repeat(32) }));
    }
  });
}

test('responses, notifications, task results and proxied results are valid 2026-07-28 messages', async () => {
  const check = validatorFor('2026-07-28');
  const capabilities = (ext) => (ext ? { extensions: { 'io.modelcontextprotocol/tasks': {} } } : {});
  const meta = (extra = {}, ext = false) => ({
    _meta: { 'io.modelcontextprotocol/protocolVersion': '2026-07-28', 'io.modelcontextprotocol/clientCapabilities': capabilities(ext), ...extra },
  });
  const send = (u, id, method, params = {}, name, extra, ext) =>
    rpc(u, req(id, method, { ...params, ...meta(extra, ext) }), { 'mcp-protocol-version': '2026-07-28', 'mcp-method': method, ...(name ? { 'mcp-name': name } : {}) });
  const ok = async (r, def) => checkAll(check, r, def, { revision: '2026-07-28' });
  await ok(await send(urls.workflow, 1, 'server/discover'), 'DiscoverResult');
  await ok(await send(urls.workflow, 2, 'tools/list'), 'ListToolsResult');
  await ok(await send(urls.workflow, 3, 'tools/call', { name: 'workflow_tool', arguments: { text: 'x' } }, 'workflow_tool'), 'CallToolResult');
  await ok(await send(urls.chat, 4, 'tools/call', { name: 'chat_tool', arguments: { query: 'q' } }, 'chat_tool'), 'CallToolResult');
  await ok(await send(urls.workflow, 5, 'tools/call', { name: 'workflow_tool', arguments: {} }, 'workflow_tool'), 'CallToolResult');
  // Streamed, with a log level and a progress token: every notification is checked.
  const streamed = await ok(
    await send(urls.workflow, 6, 'tools/call', { name: 'workflow_tool', arguments: { text: 'x' } }, 'workflow_tool', { 'io.modelcontextprotocol/logLevel': 'info', progressToken: 'p' }),
    'CallToolResult',
  );
  assert.deepEqual(streamed.notes.map((n) => n.method).sort(), [...Array(3).fill('notifications/message'), ...Array(3).fill('notifications/progress')]);
  // Proxied results and relayed notifications.
  await ok(await send(urls.upstream, 7, 'tools/list'), 'ListToolsResult');
  for (const name of CONTENT_TOOLS) await ok(await send(urls.upstream, 8, 'tools/call', { name, arguments: {} }, name), 'CallToolResult');
  const relayed = await ok(
    await send(urls.upstream, 9, 'tools/call', { name: 'test_tool_with_logging', arguments: {} }, 'test_tool_with_logging', { 'io.modelcontextprotocol/logLevel': 'debug' }),
    'CallToolResult',
  );
  assert.equal(relayed.notes.length, 3);
  // The tasks extension: creation, tasks/get until the result is inlined, update and cancel acks.
  const created = await ok(await send(urls.task, 10, 'tools/call', { name: 'task_tool', arguments: { text: 't' } }, 'task_tool', {}, true), 'Result');
  assert.equal(created.result.resultType, 'task');
  const taskId = created.result.taskId;
  let got;
  for (let i = 0; i < 120; i++) {
    got = (await ok(await send(urls.task, 11, 'tasks/get', { taskId }, taskId, {}, true), 'Result')).result;
    if (got.status === 'completed') break;
    await new Promise((res) => setTimeout(res, 250));
  }
  assert.equal(got.status, 'completed');
  check('CallToolResult', got.result);
  await ok(await send(urls.task, 12, 'tasks/update', { taskId }, taskId, {}, true), 'Result');
  await ok(await send(urls.task, 13, 'tasks/cancel', { taskId }, taskId, {}, true), 'Result');
  for (const r of [
    await send(urls.workflow, 14, 'ping'),
    await send(urls.workflow, 15, 'tools/call', { name: 'nope', arguments: {} }, 'nope'),
    await rpc(urls.workflow, req(16, 'tools/list', meta()), { 'mcp-protocol-version': '2026-07-28', 'mcp-method': 'tools/call' }),
    await send(urls.task, 17, 'tasks/get', { taskId }, taskId),
  ]) {
    check('JSONRPCErrorResponse', r.json);
  }
});
