// The bad-input matrix: well over 100 malformed or hostile requests across every endpoint. For
// each: no 5xx, a JSON error body a person can act on, and no echo of a secret or a server code.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';

import { startFlowgate, TEST_SECRETS_KEY } from '../support/harness.mjs';
import { startDifyFixture } from '../support/dify-fixture.mjs';
import { publish, registerApp, rpc } from '../support/flowgate-setup.mjs';

let fg;
let dify;
let fixtures;
const LITERAL_KEY = 'app-matrix-literal-key-42';

before(async () => {
  [fg, dify] = await Promise.all([startFlowgate(), startDifyFixture()]);
  const apiKey = dify.addApp({ mode: 'workflow', name: 'Matrix', user_input_form: [] });
  const app = await fg.console('/apps', {
    method: 'POST',
    body: { name: 'Matrix', mode: 'workflow', backend: { base_url: dify.baseUrl, api_key: LITERAL_KEY }, user_input_form: [{ 'text-input': { variable: 'text', required: true } }] },
  });
  const server = await publish(fg, app.json.id);
  const task = await fg.console('/apps', { method: 'POST', body: { name: 'TaskApp', mode: 'workflow', backend: { base_url: dify.baseUrl, api_key: apiKey, task_support: 'optional' } } });
  const taskServer = await publish(fg, task.json.id);
  // A server with client keys (auth mode `key`) and one key.
  const keyedApp = await fg.console('/apps', { method: 'POST', body: { name: 'Keyed', mode: 'workflow', backend: { base_url: dify.baseUrl, api_key: apiKey } } });
  const keyed = await publish(fg, keyedApp.json.id);
  assert.equal((await fg.console(`/servers/${keyed.server.id}/auth`, { method: 'PUT', body: { mode: 'key' } })).status, 200);
  const key = await fg.console(`/servers/${keyed.server.id}/keys`, { method: 'POST', body: { name: 'matrix-key' } });
  assert.equal(key.status, 201, key.text);
  fixtures = { app: app.json, server, taskServer, keyed: { ...keyed, key: key.json.key } };
});

after(async () => {
  await Promise.allSettled([fg?.stop(), dify?.stop()]);
});

const SECRETS = () => [
  LITERAL_KEY, fg.adminToken, TEST_SECRETS_KEY, fixtures.server.code, fixtures.taskServer.code, fixtures.keyed.code, fixtures.keyed.key,
];

function check(label, r) {
  assert.ok(r.status < 500, `${label}: HTTP ${r.status} ${r.text}`);
  assert.ok(r.status >= 400 || r.json?.result?.isError || r.json?.error, `${label}: not an error: ${r.status} ${r.text.slice(0, 200)}`);
  assert.match(r.headers.get('content-type') ?? '', /application\/json/, `${label}: ${r.text}`);
  const body = r.json;
  assert.ok(body, `${label}: body is not JSON: ${r.text}`);
  const message = body.message ?? body.error?.message ?? body.result?.content?.[0]?.text;
  assert.ok(typeof message === 'string' && message.length > 10, `${label}: no message: ${r.text}`);
  for (const s of SECRETS()) assert.ok(!r.text.includes(s), `${label}: echoed a secret or code`);
  // Client input is quoted at most 64 characters at a time (the long cases send 5000).
  assert.ok(!r.text.includes('Z'.repeat(65)), `${label}: quoted more than 64 characters of client input`);
}

const JSON_HDR = { 'content-type': 'application/json' };
const id0 = '00000000-0000-4000-8000-000000000000';

function consoleCases() {
  const a = () => fixtures.app.id;
  const s = () => fixtures.server.server.id;
  // [method, path, allowed methods] for every console route
  const routes = [
    ['POST', () => '/apps'], ['POST', () => '/apps/import'], ['PUT', () => `/apps/${a()}`], ['POST', () => `/apps/${a()}/server`],
    ['PUT', () => `/apps/${a()}/server`], ['POST', () => '/servers'], ['PUT', () => `/servers/${s()}`],
    ['PUT', () => `/servers/${s()}/auth`], ['POST', () => `/servers/${s()}/keys`],
  ];
  const cases = [];
  for (const [method, path] of routes) {
    cases.push([`${method} ${path()} malformed JSON`, () => fg.console(path(), { method, body: '{"name":', headers: JSON_HDR })]);
    cases.push([`${method} ${path()} wrong content type`, () => fg.console(path(), { method, body: 'a=b', headers: { 'content-type': 'text/plain' } })]);
    cases.push([`${method} ${path()} oversized`, () => fg.console(path(), { method, body: JSON.stringify({ x: 'y'.repeat(1_100_000) }), headers: JSON_HDR })]);
    cases.push([`${method} ${path()} array body`, () => fg.console(path(), { method, body: '[1,2,3]', headers: JSON_HDR })]);
    cases.push([`${method} ${path()} number body`, () => fg.console(path(), { method, body: '42', headers: JSON_HDR })]);
    cases.push([`${method} ${path()} wrong types`, () => fg.console(path(), { method, body: { name: 7, mode: [], backend: 'x', app_ids: 'y', description: {}, parameters: [], status: 9, id: 3, base_url: 1, api_key: 2 } })]);
    cases.push([`${method} ${path()} no token`, () => fg.console(path(), { method, body: {}, token: null })]);
    cases.push([`${method} ${path()} wrong token`, () => fg.console(path(), { method, body: {}, token: 'nope' })]);
  }
  cases.push(['PATCH /apps', () => fg.console('/apps', { method: 'PATCH', body: {} })]);
  cases.push(['PATCH /servers', () => fg.console('/servers', { method: 'PATCH', body: {} })]);
  const reads = [`/apps/${id0}`, `/apps/${id0}/server`, `/servers/${id0}`, `/servers/${id0}/tasks`, `/servers/${id0}/tasks/abc`, '/audit?limit=0', '/audit?limit=x', '/nothing/here', `/apps/${id0}/server/refresh`, `/servers/${id0}/refresh`, `/servers/${id0}/auth`, `/servers/${id0}/keys`, `/servers/${id0}/keys/${id0}`];
  for (const p of reads) {
    cases.push([`GET ${p}`, () => fg.console(p)]);
    cases.push([`PATCH ${p}`, () => fg.console(p, { method: 'PATCH', body: {} })]);
  }
  cases.push(['DELETE unknown app', () => fg.console(`/apps/${id0}`, { method: 'DELETE' })]);
  cases.push(['DELETE unknown server', () => fg.console(`/servers/${id0}`, { method: 'DELETE' })]);
  cases.push(['cancel unknown task', () => fg.console(`/servers/${id0}/tasks/abc/cancel`, { method: 'POST' })]);
  cases.push(['tools refresh of a workflow app', () => fg.console(`/apps/${a()}/tools/refresh`, { method: 'POST' })]);
  cases.push(['import from an unreachable host', () => fg.console('/apps/import', { method: 'POST', body: { base_url: 'http://127.0.0.1:9/v1', api_key: 'k' } })]);
  cases.push(['task list bad limit', () => fg.console(`/servers/${s()}/tasks?limit=1000`)]);
  cases.push(['app with a header-injection name', () => fg.console('/apps', { method: 'POST', body: { name: 'x', mode: 'mcp', backend: { url: 'https://m.example/mcp', headers: { 'X-A': 'a\r\nInjected: 1' } } } })]);
  cases.push(['app with a bad secret ref', () => fg.console('/apps', { method: 'POST', body: { name: 'x', mode: 'workflow', backend: { base_url: 'https://d.example/v1', api_key: '$1bad' } } })]);
  // Hardening round 2: authentication, credentials that must not move, own configuration.
  const other = { 'cf-connecting-ip': '192.0.2.99' };
  cases.push(['lower-case scheme, wrong token', () => fg.console('/apps', { token: null, headers: { ...other, authorization: 'bearer nope' } })]);
  cases.push(['Basic scheme', () => fg.console('/apps', { token: null, headers: { ...other, authorization: 'Basic YTpi' } })]);
  cases.push(['app naming $ADMIN_TOKEN', () => fg.console('/apps', { method: 'POST', body: { name: 'x', mode: 'workflow', backend: { base_url: 'https://d.example/v1', api_key: '$ADMIN_TOKEN' } } })]);
  cases.push(['app naming $SECRETS_KEY in a header', () => fg.console('/apps', { method: 'POST', body: { name: 'x', mode: 'mcp', backend: { url: 'https://m.example/mcp', headers: { 'X-K': '$SECRETS_KEY' } } } })]);
  cases.push(['import naming $ADMIN_TOKEN', () => fg.console('/apps/import', { method: 'POST', body: { base_url: dify.baseUrl, api_key: '$ADMIN_TOKEN' } })]);
  cases.push(['"***" following the backend to another origin', () => fg.console(`/apps/${a()}`, { method: 'PUT', body: { name: 'Matrix', mode: 'workflow', backend: { base_url: dify.baseUrl.replace('127.0.0.1', 'localhost'), api_key: '***' } } })]);
  // Client input is quoted, not echoed: these answers stay short however long the input.
  cases.push(['a 6000-character path', () => fg.fetchJson(`/${'p'.repeat(6000)}`), 400]);
  cases.push(['a 6000-character console path', () => fg.console(`/${'p'.repeat(6000)}`), 400]);
  cases.push(['a 4000-character Content-Type', () => fg.console('/apps', { method: 'POST', body: 'x', headers: { 'content-type': `text/plain; p=${'q'.repeat(4000)}` } }), 400]);
  cases.push(['a 10000-character mode', () => fg.console('/apps', { method: 'POST', body: { name: 'x', mode: 'm'.repeat(10_000), backend: {} } }), 1000]);
  cases.push(['a 5000-character app id', () => fg.console(`/apps/${'i'.repeat(5000)}`), 400]);
  const k = () => fixtures.keyed.server.id;
  cases.push(['client key without a name', () => fg.console(`/servers/${k()}/keys`, { method: 'POST', body: {} })]);
  cases.push(['client key with a 65-character name', () => fg.console(`/servers/${k()}/keys`, { method: 'POST', body: { name: 'n'.repeat(65) } })]);
  cases.push(['client key with a duplicate name', () => fg.console(`/servers/${k()}/keys`, { method: 'POST', body: { name: 'matrix-key' } })]);
  cases.push(['client key with a control character', () => fg.console(`/servers/${k()}/keys`, { method: 'POST', body: { name: 'a\u0000b' } })]);
  cases.push(['client key for an unknown server', () => fg.console(`/servers/${id0}/keys`, { method: 'POST', body: { name: 'x' } })]);
  cases.push(['revoking an unknown client key', () => fg.console(`/servers/${k()}/keys/${id0}`, { method: 'DELETE' })]);
  cases.push(['unknown auth mode', () => fg.console(`/servers/${k()}/auth`, { method: 'PUT', body: { mode: 'oauth' } })]);
  cases.push(['a 5000-character client key name', () => fg.console(`/servers/${k()}/keys`, { method: 'POST', body: { name: 'Z'.repeat(5000) } }), 1000]);
  cases.push(['a 5000-character auth mode', () => fg.console(`/servers/${k()}/auth`, { method: 'PUT', body: { mode: 'Z'.repeat(5000) } }), 1000]);
  cases.push(['a 5000-character server status', () => fg.console(`/apps/${a()}/server`, { method: 'PUT', body: { id: 'x', status: 's'.repeat(5000) } }), 1000]);
  return cases;
}

function mcpCases() {
  const url = () => fixtures.server.url;
  const turl = () => fixtures.taskServer.url;
  const H = (v) => ({ 'mcp-protocol-version': v });
  const req = (method, params, id = 1) => ({ jsonrpc: '2.0', id, method, ...(params ? { params } : {}) });
  const bodies = [
    ['parse error', '{"jsonrpc":'], ['empty body', ''], ['string', '"x"'], ['null', 'null'], ['array of junk', '[1,2]'],
    ['no jsonrpc', JSON.stringify({ id: 1, method: 'ping' })], ['id object', JSON.stringify({ jsonrpc: '2.0', id: {}, method: 'ping' })],
    ['method number', JSON.stringify({ jsonrpc: '2.0', id: 1, method: 5 })], ['params array', JSON.stringify(req('tools/list', [1]))],
    ['unknown method', JSON.stringify(req('nope/nope'))], ['resources', JSON.stringify(req('resources/read', { uri: 'x' }))],
    ['tool missing', JSON.stringify(req('tools/call', { name: 'ghost' }))], ['tool name number', JSON.stringify(req('tools/call', { name: 1 }))],
    ['arguments string', JSON.stringify(req('tools/call', { name: 'Matrix', arguments: 'x' }))],
    ['missing argument', JSON.stringify(req('tools/call', { name: 'Matrix', arguments: {} }))],
    ['wrong argument type', JSON.stringify(req('tools/call', { name: 'Matrix', arguments: { text: [] } }))],
    ['bad cursor', JSON.stringify(req('tools/list', { cursor: 'zzz' }))], ['bad log level', JSON.stringify(req('logging/setLevel', { level: 'loud' }))],
    ['request without id', JSON.stringify({ jsonrpc: '2.0', method: 'tools/call' })],
  ];
  const cases = [];
  for (const [label, body] of bodies) {
    for (const v of ['2025-06-18', '2025-11-25']) cases.push([`MCP ${label} (${v})`, () => rpc(url(), body, H(v))]);
  }
  cases.push(['MCP unsupported version', () => rpc(url(), req('tools/list'), H('1999-01-01'))]);
  cases.push(['MCP batch on 2025-06-18', () => rpc(url(), [req('ping')], H('2025-06-18'))]);
  cases.push(['MCP wrong content type', () => rpc(url(), JSON.stringify(req('ping')), { 'content-type': 'text/plain' })]);
  cases.push(['MCP not acceptable', () => rpc(url(), req('ping'), { accept: 'image/png' })]);
  cases.push(['MCP oversized', () => rpc(url(), JSON.stringify(req('ping', { pad: 'p'.repeat(1_100_000) })))]);
  cases.push(['MCP foreign origin', () => rpc(url(), req('ping'), { origin: 'https://evil.example' })]);
  cases.push(['MCP unknown code', () => rpc(url().replace(/server\/\w+\//, 'server/ZZZZZZZZZZZZZZZZ/'), req('ping'))]);
  cases.push(['MCP code with symbols', () => rpc(url().replace(/server\/\w+\//, 'server/%27%22%3Cx%3E/'), req('ping'))]);
  cases.push(['MCP 2026 missing header', () => rpc(url(), req('tools/list', { _meta: { 'io.modelcontextprotocol/protocolVersion': '2026-07-28', 'io.modelcontextprotocol/clientCapabilities': {} } }))]);
  cases.push(['MCP 2026 method mismatch', () => rpc(url(), req('tools/list', { _meta: { 'io.modelcontextprotocol/protocolVersion': '2026-07-28', 'io.modelcontextprotocol/clientCapabilities': {} } }), { ...H('2026-07-28'), 'mcp-method': 'ping' })]);
  cases.push(['MCP tasks/get unknown', () => rpc(turl(), req('tasks/get', { taskId: 'f'.repeat(32) }), H('2025-11-25'))]);
  cases.push(['MCP tasks/get no id', () => rpc(turl(), req('tasks/get', {}), H('2025-11-25'))]);
  cases.push(['MCP tasks/list', () => rpc(turl(), req('tasks/list', {}), H('2025-11-25'))]);
  cases.push(['MCP batch of 33 messages', () => rpc(url(), Array.from({ length: 33 }, (_, i) => req('ping', undefined, i)), H('2025-03-26'))]);
  cases.push(['MCP empty batch', () => rpc(url(), [], H('2025-03-26'))]);
  const LONG = 'Z'.repeat(5000);
  cases.push(['MCP 5000-character method', () => rpc(url(), req(LONG), H('2025-06-18'))]);
  cases.push(['MCP 5000-character tool name', () => rpc(url(), req('tools/call', { name: LONG }), H('2025-06-18'))]);
  cases.push(['MCP 5000-character protocol version', () => rpc(url(), req('ping'), H(LONG))]);
  cases.push(['MCP 5000-character origin', () => rpc(url(), req('ping'), { origin: `https://${LONG}.example` })]);
  cases.push(['MCP 5000-character Accept', () => rpc(url(), req('ping'), { accept: `image/${LONG}` })]);
  cases.push(['MCP 5000-character content type', () => rpc(url(), JSON.stringify(req('ping')), { 'content-type': `text/${LONG}` })]);
  cases.push(['MCP 5000-character task id', () => rpc(turl(), req('tasks/get', { taskId: LONG }), H('2025-11-25'))]);
  cases.push(['MCP task on a forbidden tool', () => rpc(url(), req('tools/call', { name: 'Matrix', arguments: { text: 'x' }, task: {} }), H('2025-11-25'))]);
  // A server with client keys: no key, a wrong one, a huge one; the key is never echoed back.
  const kurl = () => fixtures.keyed.url;
  cases.push(['MCP key server without a key', () => rpc(kurl(), req('tools/list'), H('2025-06-18'))]);
  cases.push(['MCP key server with a wrong key', () => rpc(kurl(), req('tools/list'), { ...H('2025-06-18'), authorization: `Bearer fgk_${'W'.repeat(32)}` })]);
  cases.push(['MCP key server with the key twice', () => rpc(kurl(), req('ping'), { authorization: `Bearer ${fixtures.keyed.key} ${fixtures.keyed.key}` })]);
  cases.push(['MCP key server with a Basic header', () => rpc(kurl(), req('ping'), { authorization: `Basic ${Buffer.from(`u:${fixtures.keyed.key}`).toString('base64')}` })]);
  cases.push(['MCP key server with a 5000-character token', () => rpc(kurl(), req('ping'), { authorization: `Bearer ${'Z'.repeat(5000)}` })]);
  cases.push(['MCP key server, bad JSON, right key', () => rpc(kurl(), '{"jsonrpc":', { authorization: `Bearer ${fixtures.keyed.key}` })]);
  // Other spellings of a server's path: the code is never echoed back.
  cases.push(['MCP path in other case', () => rpc(url().replace('/mcp/server/', '/MCP/Server/'), req('ping'))]);
  cases.push(['MCP path with an extra segment', () => rpc(`${url()}/extra`, req('ping'))]);
  cases.push(['MCP path without its tail', () => rpc(url().replace(/\/mcp$/, ''), req('ping'))]);
  cases.push(['MCP path with double slashes, bad JSON', () => rpc(url().replace('/mcp/server/', '//mcp//server/'), '{"jsonrpc":')]);
  return cases;
}

test('the matrix covers more than 100 cases', () => {
  assert.ok(consoleCases().length + mcpCases().length > 100, `${consoleCases().length + mcpCases().length} cases`);
});

test('console API: no 5xx, a JSON error, no secret echoed', async () => {
  for (const [label, send, maxBytes] of consoleCases()) {
    const r = await send();
    check(label, r);
    if (maxBytes) assert.ok(r.text.length <= maxBytes, `${label}: ${r.text.length} bytes: ${r.text.slice(0, 300)}`);
  }
});

test('MCP endpoint: no 5xx, a JSON error, no secret echoed', async () => {
  for (const [label, send] of mcpCases()) check(label, await send());
});
