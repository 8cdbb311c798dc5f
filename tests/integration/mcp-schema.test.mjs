// Every kind of response Flowgate gives, validated against the official schema of the
// revision the client speaks.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import path from 'node:path';

import Ajv from 'ajv';
import Ajv2020 from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';

import { repoRoot, startFlowgate } from '../support/harness.mjs';
import { startDifyFixture } from '../support/dify-fixture.mjs';
import { publish, registerApp, rpc } from '../support/flowgate-setup.mjs';

let fg;
let dify;
const urls = {};

before(async () => {
  [fg, dify] = await Promise.all([startFlowgate(), startDifyFixture()]);
  for (const mode of ['workflow', 'chat']) {
    const { app } = await registerApp(fg, dify, { mode, name: `${mode} tool` });
    urls[mode] = (await publish(fg, app.id)).url;
  }
  const { app } = await registerApp(fg, dify, { mode: 'workflow', name: 'broken tool', behaviour: 'http500' });
  urls.broken = (await publish(fg, app.id)).url;
});

after(async () => {
  await Promise.allSettled([fg?.stop(), dify?.stop()]);
});

function validatorFor(revision) {
  const schema = JSON.parse(readFileSync(path.join(repoRoot, `tests/schemas/mcp-${revision}.json`), 'utf8'));
  const ajv = schema.$schema.includes('2020-12') ? new Ajv2020({ strict: false, allErrors: true }) : new Ajv({ strict: false, allErrors: true });
  addFormats(ajv);
  ajv.addSchema(schema, 'mcp');
  const defs = schema.$defs ? '$defs' : 'definitions';
  // 2025-11-25 renamed JSONRPCError to JSONRPCErrorResponse.
  const alias = { JSONRPCError: schema[defs].JSONRPCError ? 'JSONRPCError' : 'JSONRPCErrorResponse' };
  return (def, value) => {
    const validate = ajv.getSchema(`mcp#/${defs}/${alias[def] ?? def}`);
    assert.ok(validate, `${revision} has no ${def}`);
    assert.ok(validate(value), `${revision} ${def}: ${ajv.errorsText(validate.errors)}\n${JSON.stringify(value).slice(0, 600)}`);
  };
}

const SESSIONFUL = ['2025-03-26', '2025-06-18', '2025-11-25'];
const init = (v) => ({ jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: v, capabilities: {}, clientInfo: { name: 'schema-test', version: '1' } } });
const req = (id, method, params = {}) => ({ jsonrpc: '2.0', id, method, params });

for (const revision of SESSIONFUL) {
  test(`responses are valid ${revision} messages`, async () => {
    const check = validatorFor(revision);
    const h = { 'mcp-protocol-version': revision };
    const ok = async (u, body, resultDef) => {
      const r = await rpc(u, body, h);
      assert.equal(r.status, 200, r.text);
      check('JSONRPCResponse', r.json);
      check(resultDef, r.json.result);
      return r.json.result;
    };
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
      await ok(u, req(5, 'tools/call', { name: tool.name, arguments: args }), 'CallToolResult');
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
  });
}

test('responses are valid 2026-07-28 messages', async () => {
  const check = validatorFor('2026-07-28');
  const meta = { _meta: { 'io.modelcontextprotocol/protocolVersion': '2026-07-28', 'io.modelcontextprotocol/clientCapabilities': {} } };
  const send = (u, id, method, params = {}, name) =>
    rpc(u, req(id, method, { ...params, ...meta }), { 'mcp-protocol-version': '2026-07-28', 'mcp-method': method, ...(name ? { 'mcp-name': name } : {}) });
  const ok = async (r, def) => {
    assert.equal(r.status, 200, r.text);
    check('JSONRPCResultResponse', r.json);
    check(def, r.json.result);
    return r.json.result;
  };
  await ok(await send(urls.workflow, 1, 'server/discover'), 'DiscoverResult');
  await ok(await send(urls.workflow, 2, 'tools/list'), 'ListToolsResult');
  await ok(await send(urls.workflow, 3, 'tools/call', { name: 'workflow_tool', arguments: { text: 'x' } }, 'workflow_tool'), 'CallToolResult');
  await ok(await send(urls.chat, 4, 'tools/call', { name: 'chat_tool', arguments: { query: 'q' } }, 'chat_tool'), 'CallToolResult');
  await ok(await send(urls.workflow, 5, 'tools/call', { name: 'workflow_tool', arguments: {} }, 'workflow_tool'), 'CallToolResult');
  for (const r of [
    await send(urls.workflow, 6, 'ping'),
    await send(urls.workflow, 7, 'tools/call', { name: 'nope', arguments: {} }, 'nope'),
    await rpc(urls.workflow, req(8, 'tools/list', meta), { 'mcp-protocol-version': '2026-07-28', 'mcp-method': 'tools/call' }),
  ]) {
    check('JSONRPCErrorResponse', r.json);
  }
});
