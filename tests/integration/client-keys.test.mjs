// Per-server client keys (auth mode `key`): the console routes that set the mode and issue,
// list and revoke keys; the MCP endpoint refusing requests without a valid key (401 with an
// RFC 6750 challenge) and carrying the key's name to backends as the caller's `user`; the
// official TypeScript SDK client connecting with a key.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

import { startFlowgate } from '../support/harness.mjs';
import { startDifyFixture } from '../support/dify-fixture.mjs';
import { startHttpTool } from '../support/http-tool-fixture.mjs';
import { startUpstreams } from '../support/mcp-upstreams.mjs';
import { publish, registerApp, rpc } from '../support/flowgate-setup.mjs';

const ORIGIN = 'https://console.example';
const V = { 'mcp-protocol-version': '2025-06-18' };
const KEY_SHAPE = /^fgk_[A-Za-z0-9]{32}$/;

let fg;
let dify;
let tools;
let ups;

before(async () => {
  [fg, dify, tools, ups] = await Promise.all([
    startFlowgate({ vars: { ALLOWED_ORIGINS: ORIGIN } }),
    startDifyFixture(),
    startHttpTool(),
    startUpstreams(),
  ]);
});

after(async () => {
  await Promise.allSettled([fg?.stop(), dify?.stop(), tools?.stop(), ups?.stop()]);
});

const sha256 = (s) => createHash('sha256').update(s).digest('hex');
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** A workflow app on the fake Dify, published as a Dify-style server: {server, url, app, apiKey}. */
async function workflowServer(name) {
  const { app, apiKey } = await registerApp(fg, dify, { mode: 'workflow', name });
  const { server, url } = await publish(fg, app.id);
  return { server, url, app, apiKey, tool: name.replace(/[^A-Za-z0-9_.-]+/g, '_') };
}

const setMode = (serverId, mode) => fg.console(`/servers/${serverId}/auth`, { method: 'PUT', body: { mode } });

/** Every key issued in this file (the last test looks for them in the logs). */
const issued = [];

async function newKey(serverId, name) {
  const r = await fg.console(`/servers/${serverId}/keys`, { method: 'POST', body: { name } });
  assert.equal(r.status, 201, r.text);
  issued.push(r.json.key);
  return r.json;
}

/** A server in `key` mode with one key: {server, url, app, apiKey, tool, key}. */
async function keyedServer(name, keyName) {
  const s = await workflowServer(name);
  const r = await setMode(s.server.id, 'key');
  assert.equal(r.status, 200, r.text);
  return { ...s, key: await newKey(s.server.id, keyName) };
}

const bearer = (key) => ({ authorization: `Bearer ${key}` });
const ping = (url, headers = {}, id = 'ping-1') => rpc(url, { jsonrpc: '2.0', id, method: 'ping' }, { ...V, ...headers });
const callTool = (url, tool, headers = {}, id = 'call-1', extra = {}) =>
  rpc(url, { jsonrpc: '2.0', id, method: 'tools/call', params: { name: tool, arguments: { text: 'hello' } } }, { ...V, ...headers, ...extra });

/** The official SDK client, sending `key` as a bearer token on every request. */
async function connect(url, key) {
  const requestInit = key ? { headers: { Authorization: `Bearer ${key}` } } : undefined;
  const transport = new StreamableHTTPClientTransport(new URL(url), { requestInit });
  const client = new Client({ name: 'client-keys-test', version: '1.0.0' });
  await client.connect(transport);
  return client;
}

function assertRefused(r, { id, invalidToken }) {
  assert.equal(r.status, 401, r.text);
  assert.equal(
    r.headers.get('www-authenticate'),
    invalidToken ? 'Bearer realm="flowgate", error="invalid_token"' : 'Bearer realm="flowgate"',
  );
  assert.match(r.headers.get('content-type') ?? '', /application\/json/);
  assert.equal(r.json.jsonrpc, '2.0');
  assert.equal(r.json.id, id, 'the request id is echoed');
  assert.equal(r.json.error.code, -32600);
  assert.match(r.json.error.message, /^Unauthorized: /);
}

describe('console', () => {
  test('the mode defaults to none, is set with PUT /servers/{id}/auth, shown in the server JSON, and audit-logged', async () => {
    const { server, app } = await workflowServer('Mode app');
    assert.deepEqual(server.auth, { mode: 'none' }, 'shown when the server is created');
    assert.deepEqual((await fg.console(`/servers/${server.id}/auth`)).json, { mode: 'none' });

    const r = await setMode(server.id, 'key');
    assert.equal(r.status, 200, r.text);
    assert.deepEqual(r.json.auth, { mode: 'key' });
    assert.equal(r.json.id, server.id);
    assert.equal(r.json.server_code, undefined, 'the code is not shown again');
    assert.equal(r.json.warnings.length, 1);
    assert.match(r.json.warnings[0], /no client key yet: every MCP request is refused/);

    assert.deepEqual((await fg.console(`/servers/${server.id}`)).json.auth, { mode: 'key' });
    assert.deepEqual((await fg.console(`/apps/${app.id}/server`)).json.auth, { mode: 'key' });
    assert.deepEqual((await fg.console(`/servers/${server.id}/auth`)).json, { mode: 'key' });

    await newKey(server.id, 'someone');
    const again = await setMode(server.id, 'key');
    assert.deepEqual(again.json.warnings, [], 'no warning once a key exists');
    const back = await setMode(server.id, 'none');
    assert.deepEqual(back.json.auth, { mode: 'none' });

    const audit = (await fg.console('/audit?limit=20')).json.data;
    const puts = audit.filter((e) => e.action === 'PUT /servers/{id}/auth' && e.target === server.id);
    assert.equal(puts.length, 3, JSON.stringify(audit));
    assert.ok(puts.every((e) => e.status === 200 && e.actor === 'admin'));
    assert.ok(audit.some((e) => e.action === 'POST /servers/{id}/keys' && e.target === server.id && e.status === 201));
  });

  test('a key is shown once: listed without it, and stored only as its SHA-256 and a hint', async () => {
    const { server } = await workflowServer('Shown once');
    const created = await newKey(server.id, 'alice-laptop');
    assert.deepEqual(Object.keys(created).sort(), ['created_at', 'hint', 'id', 'key', 'name']);
    assert.match(created.key, KEY_SHAPE);
    assert.equal(created.name, 'alice-laptop');
    assert.equal(created.hint, created.key.slice(-4));
    assert.equal(typeof created.created_at, 'number');
    const second = await newKey(server.id, 'bob');
    assert.notEqual(second.key, created.key);

    const list = await fg.console(`/servers/${server.id}/keys`);
    assert.equal(list.status, 200, list.text);
    assert.deepEqual(list.json.data, [
      { id: created.id, name: 'alice-laptop', hint: created.hint, created_at: created.created_at, last_used_at: null },
      { id: second.id, name: 'bob', hint: second.hint, created_at: second.created_at, last_used_at: null },
    ]);
    for (const k of [created.key, second.key]) {
      assert.ok(!list.text.includes(k) && !list.text.includes(k.slice(4)), 'the list never carries a key');
      assert.ok(!list.text.includes(sha256(k)), 'nor its hash');
    }
    const serverJson = await fg.console(`/servers/${server.id}`);
    assert.ok(!serverJson.text.includes(created.key));

    const rows = await fg.d1(`SELECT * FROM server_keys WHERE server_id = '${server.id}' ORDER BY created_at, rowid`);
    assert.equal(rows.length, 2);
    const row = rows.find((r) => r.id === created.id);
    assert.deepEqual(Object.keys(row).sort(), ['created_at', 'hint', 'id', 'key_hash', 'last_used_at', 'name', 'server_id']);
    assert.equal(row.key_hash, sha256(created.key));
    assert.equal(row.hint, created.hint);
    // Nothing Flowgate keeps (D1, KV, Durable Objects) holds the key or its secret part.
    assert.deepEqual(fg.stateFilesContaining(created.key.slice(4)), []);
    assert.deepEqual(fg.stateFilesContaining(second.key.slice(4)), []);
  });

  test('bad input gets precise errors', async () => {
    const { server } = await workflowServer('Bad input');
    const post = (body) => fg.console(`/servers/${server.id}/keys`, { method: 'POST', body });
    const fieldError = (r, field, pattern) => {
      assert.equal(r.status, 400, r.text);
      assert.equal(r.json.error, 'validation_failed');
      const e = r.json.errors.find((x) => x.field === field);
      assert.ok(e, r.text);
      assert.match(e.message, pattern);
    };
    fieldError(await post({}), 'name', /^is required: who holds the key/);
    fieldError(await post({ name: '' }), 'name', /^must not be empty/);
    fieldError(await post({ name: 'x'.repeat(65) }), 'name', /^must be at most 64 characters \(got 65\)$/);
    fieldError(await post({ name: 42 }), 'name', /must be a string \(got a number\)/);
    fieldError(await post({ name: 'line\nbreak' }), 'name', /printable ASCII/);
    fieldError(await post({ name: 'ok', key: 'fgk_mine' }), 'key', /not a key field/);
    assert.equal((await post({ name: 'x'.repeat(64) })).status, 201, '64 characters are fine');

    await newKey(server.id, 'carol');
    const dup = await post({ name: 'carol' });
    assert.equal(dup.status, 409, dup.text);
    assert.equal(dup.json.error, 'conflict');
    assert.match(dup.json.message, /already has a client key named "carol"/);
    assert.equal((await fg.console(`/servers/${server.id}/keys`)).json.data.filter((k) => k.name === 'carol').length, 1);

    const put = (body) => fg.console(`/servers/${server.id}/auth`, { method: 'PUT', body });
    fieldError(await put({ mode: 'keys' }), 'mode', /"keys" is not a mode; expected "none" .*, "key" .* or "oauth"/);
    fieldError(await put({ mode: 'oauth' }), 'oauth', /^is required with mode "oauth"/); // see client-oauth.test.mjs
    fieldError(await put({}), 'mode', /^is required/);
    fieldError(await put({ mode: true }), 'mode', /got a boolean/);
    fieldError(await put({ mode: 'key', keys: [] }), 'keys', /not an auth field/);
    const notObject = await fg.console(`/servers/${server.id}/auth`, { method: 'PUT', body: '[1]', headers: { 'content-type': 'application/json' } });
    assert.equal(notObject.status, 400, notObject.text);
    assert.match(notObject.json.message, /must be a JSON object/);
    assert.deepEqual((await fg.console(`/servers/${server.id}/auth`)).json, { mode: 'none' }, 'refused writes change nothing');

    const ghost = '00000000-0000-4000-8000-000000000000';
    for (const r of [
      await fg.console(`/servers/${ghost}/keys`),
      await fg.console(`/servers/${ghost}/keys`, { method: 'POST', body: { name: 'x' } }),
      await fg.console(`/servers/${ghost}/auth`, { method: 'PUT', body: { mode: 'key' } }),
      await fg.console(`/servers/${server.id}/keys/${ghost}`, { method: 'DELETE' }),
    ]) {
      assert.equal(r.status, 404, r.text);
      assert.equal(r.json.error, 'not_found');
    }
    const wrongMethod = await fg.console(`/servers/${server.id}/keys/${ghost}`);
    assert.equal(wrongMethod.status, 405);
    assert.equal(wrongMethod.headers.get('allow'), 'DELETE');
    const noToken = await fg.console(`/servers/${server.id}/keys`, { token: null });
    assert.equal(noToken.status, 401);
  });

  test('at most 100 keys a server, however many are asked for at once; another server has its own 100', async () => {
    const { server } = await workflowServer('Key cap');
    // 110 at once: a count read before each insert would let every one of them see room.
    const asked = await Promise.all(
      Array.from({ length: 110 }, (_, i) => fg.console(`/servers/${server.id}/keys`, { method: 'POST', body: { name: `k${i}` } })),
    );
    const created = asked.filter((r) => r.status === 201);
    issued.push(...created.map((r) => r.json.key));
    assert.equal(created.length, 100, asked.filter((r) => r.status !== 201 && r.status !== 409).map((r) => r.text).join('\n'));
    for (const r of asked.filter((r) => r.status !== 201)) {
      assert.equal(r.status, 409, r.text);
      assert.equal(r.json.error, 'conflict');
      assert.equal(r.json.message, `server '${server.id}' has 100 client keys, the most it may have; revoke one first`);
    }
    assert.equal((await fg.console(`/servers/${server.id}/keys`)).json.data.length, 100);
    const one = await fg.console(`/servers/${server.id}/keys`, { method: 'POST', body: { name: 'one-too-many' } });
    assert.equal(one.status, 409, one.text);

    // Revoking one makes room for one.
    const first = created[0].json;
    assert.equal((await fg.console(`/servers/${server.id}/keys/${first.id}`, { method: 'DELETE' })).status, 200);
    await newKey(server.id, 'one-more');
    const other = await workflowServer('Key cap, another server');
    await newKey(other.server.id, 'k0');
  });
});

describe('the MCP endpoint', () => {
  test('the SDK client connects and calls a tool with a key; the key name is the Dify user', async () => {
    const s = await keyedServer('SDK keyed', 'alice-laptop');
    const client = await connect(s.url, s.key.key);
    try {
      const { tools: listed } = await client.listTools();
      assert.deepEqual(listed.map((t) => t.name), [s.tool]);
      const result = await client.callTool({ name: s.tool, arguments: { text: 'from the sdk' } });
      assert.equal(result.isError, false, JSON.stringify(result));
      await client.ping();
    } finally {
      await client.close();
    }
    // A JSON-only client takes the blocking path: the same user.
    const blocking = await callTool(s.url, s.tool, bearer(s.key.key), 'call-json', { accept: 'application/json' });
    assert.equal(blocking.status, 200, blocking.text);
    assert.equal(blocking.json.result.isError, false, blocking.text);

    const runs = dify.requestsFor(s.apiKey).filter((r) => r.path === '/v1/workflows/run');
    assert.deepEqual(runs.map((r) => r.body.response_mode), ['streaming', 'blocking']);
    assert.deepEqual(runs.map((r) => r.body.user), ['alice-laptop', 'alice-laptop']);
    assert.deepEqual(runs[0].body.inputs, { text: 'from the sdk' });

    // Recorded off the response path: the key's last use and the end user.
    let keys;
    for (let i = 0; i < 100; i++) {
      keys = (await fg.console(`/servers/${s.server.id}/keys`)).json.data;
      if (keys[0].last_used_at !== null) break;
      await sleep(100);
    }
    assert.equal(typeof keys[0].last_used_at, 'number', JSON.stringify(keys));
    assert.ok(keys[0].last_used_at >= s.key.created_at);
    const users = await fg.d1(`SELECT session_key, name FROM end_users WHERE server_id = '${s.server.id}'`);
    assert.deepEqual(users.map((u) => u.session_key), ['alice-laptop']);
  });

  test('last_used_at is written at most once an hour per isolate', async () => {
    const s = await keyedServer('Once an hour', 'hourly');
    assert.equal((await ping(s.url, bearer(s.key.key))).status, 200);
    let row;
    for (let i = 0; i < 100; i++) {
      [row] = await fg.d1(`SELECT last_used_at FROM server_keys WHERE id = '${s.key.id}'`);
      if (row.last_used_at !== null) break;
      await sleep(100);
    }
    assert.notEqual(row.last_used_at, null);
    await fg.d1(`UPDATE server_keys SET last_used_at = 7 WHERE id = '${s.key.id}'`);
    for (let i = 0; i < 3; i++) assert.equal((await ping(s.url, bearer(s.key.key), `p${i}`)).status, 200);
    await sleep(500);
    const [again] = await fg.d1(`SELECT last_used_at FROM server_keys WHERE id = '${s.key.id}'`);
    assert.equal(again.last_used_at, 7, 'the isolate recorded this key within the hour: no write');
  });

  test('the key name reaches an HTTP tool as X-Dify-User-Id', async () => {
    const apiKey = 'tool-secret-key';
    const path = tools.addTool({ apiKey, result: { ok: true } });
    const app = await fg.console('/apps', {
      method: 'POST',
      body: {
        name: 'Keyed tool',
        mode: 'http-tool',
        backend: { api_endpoint: tools.url + path, api_key: apiKey, manifest: { name: 'keyed', parameters: [{ name: 'q', type: 'string', required: true, form: 'llm' }] } },
      },
    });
    assert.equal(app.status, 201, app.text);
    const { server, url } = await publish(fg, app.json.id);
    assert.equal((await setMode(server.id, 'key')).status, 200);
    const key = await newKey(server.id, 'ci-runner');
    const r = await rpc(url, { jsonrpc: '2.0', id: 3, method: 'tools/call', params: { name: 'Keyed_tool', arguments: { q: 'x' } } }, { ...V, ...bearer(key.key) });
    assert.equal(r.json.result?.isError, false, r.text);
    const [sent] = tools.requestsFor(path);
    assert.equal(sent.userId, 'ci-runner');
    assert.equal(sent.conversationId, 'ci-runner');
  });

  test('a client key is never forwarded to an upstream MCP server, even one that forwards Authorization', async () => {
    const r = await fg.console('/apps', {
      method: 'POST',
      body: { name: 'Fwd', mode: 'mcp', backend: { url: ups.stateless.url, forward_headers: { Authorization: 'Authorization', 'X-Team': 'X-Team' }, on_missing: 'passthrough' } },
    });
    assert.equal(r.status, 201, r.text);
    const { server, url } = await publish(fg, r.json.id);
    const call = (headers) => rpc(url, { jsonrpc: '2.0', id: 5, method: 'tools/call', params: { name: 'Fwd_headers', arguments: {} } }, { ...V, ...headers });
    // In mode none the client's Authorization is its own credential for the upstream: forwarded.
    const open = await call({ authorization: 'Bearer upstream-token', 'x-team': 'blue' });
    assert.equal(open.json.result?.structuredContent?.headers.authorization, 'Bearer upstream-token', open.text);
    // In mode key it is Flowgate's: kept back; other forwarded headers still go.
    assert.equal((await setMode(server.id, 'key')).status, 200);
    const key = await newKey(server.id, 'forwarder');
    const keyed = await call({ ...bearer(key.key), 'x-team': 'blue' });
    const seen = keyed.json.result?.structuredContent?.headers;
    assert.ok(seen, keyed.text);
    assert.equal(seen.authorization, undefined);
    assert.equal(seen['x-team'], 'blue');
    assert.ok(!JSON.stringify(ups.stateless.requests.map((q) => q.headers)).includes(key.key.slice(4)), 'no upstream request carried the key');
  });

  test('no key, a wrong key or another scheme: 401 with a challenge, and nothing reaches the backend', async () => {
    const s = await keyedServer('Refusing', 'dave');
    const before = dify.requestsFor(s.apiKey).length;
    const usersBefore = await fg.d1(`SELECT COUNT(*) AS n FROM end_users WHERE server_id = '${s.server.id}'`);

    const none = await callTool(s.url, s.tool, {}, 'no-key');
    assertRefused(none, { id: 'no-key', invalidToken: false });
    assert.match(none.json.error.message, /requires a client key; send it as `Authorization: Bearer fgk_…`/);

    const wrongKey = 'fgk_' + 'Q'.repeat(32);
    const wrong = await callTool(s.url, s.tool, bearer(wrongKey), 42);
    assertRefused(wrong, { id: 42, invalidToken: true });
    assert.match(wrong.json.error.message, /not valid for this MCP server \(it may have been revoked\)/);
    assert.ok(!wrong.text.includes(wrongKey));

    for (const token of ['nonsense', fg.adminToken, sha256(s.key.key), s.key.key + 'x']) {
      assertRefused(await ping(s.url, bearer(token), 'p'), { id: 'p', invalidToken: true });
    }
    const basic = await ping(s.url, { authorization: 'Basic YTpi' }, 7);
    assertRefused(basic, { id: 7, invalidToken: false });
    assert.match(basic.json.error.message, /not a bearer token/);

    // Every method is refused, initialize and notifications included.
    const init = await rpc(s.url, { jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'x', version: '1' } } });
    assertRefused(init, { id: 1, invalidToken: false });
    const note = await rpc(s.url, { jsonrpc: '2.0', method: 'notifications/initialized' }, V);
    assertRefused(note, { id: null, invalidToken: false });

    // The scheme is case-insensitive and the key works alongside the refusals above.
    assert.equal((await ping(s.url, { authorization: `bEaReR ${s.key.key}` })).status, 200);

    // The SDK client without a key, or with a wrong one, cannot connect.
    // (The SDK shows the message, so the person setting it up reads what to do.)
    await assert.rejects(connect(s.url), (e) => e.code === 401 && /requires a client key/.test(e.message));
    await assert.rejects(connect(s.url, wrongKey), (e) => e.code === 401 && /may have been revoked/.test(e.message));

    assert.equal(dify.requestsFor(s.apiKey).length, before, 'no refused call reached Dify');
    const usersAfter = await fg.d1(`SELECT COUNT(*) AS n FROM end_users WHERE server_id = '${s.server.id}'`);
    assert.deepEqual(usersAfter, usersBefore, 'a refusal records no end user');
  });

  test('a revoked key is refused on the next request; the others keep working', async () => {
    const s = await keyedServer('Revoking', 'erin');
    const frank = await newKey(s.server.id, 'frank');
    assert.equal((await ping(s.url, bearer(s.key.key))).status, 200);
    assert.equal((await ping(s.url, bearer(frank.key))).status, 200);

    const del = await fg.console(`/servers/${s.server.id}/keys/${s.key.id}`, { method: 'DELETE' });
    assert.equal(del.status, 200, del.text);
    assert.deepEqual(del.json, { result: 'success', id: s.key.id });

    assertRefused(await ping(s.url, bearer(s.key.key), 'after'), { id: 'after', invalidToken: true });
    assert.equal((await ping(s.url, bearer(frank.key))).status, 200);
    assert.deepEqual((await fg.console(`/servers/${s.server.id}/keys`)).json.data.map((k) => k.name), ['frank']);
    assert.equal((await fg.console(`/servers/${s.server.id}/keys/${s.key.id}`, { method: 'DELETE' })).status, 404);
    const audit = (await fg.console('/audit?limit=10')).json.data;
    assert.ok(audit.some((e) => e.action === 'DELETE /servers/{id}/keys/{id}' && e.target === s.server.id && e.status === 200));

    // A new key under the revoked name is the same caller again, with a new secret.
    const erin2 = await newKey(s.server.id, 'erin');
    assert.notEqual(erin2.key, s.key.key);
    assert.equal((await ping(s.url, bearer(erin2.key))).status, 200);
    assertRefused(await ping(s.url, bearer(s.key.key), 'old'), { id: 'old', invalidToken: true });

    // A key opens only its own server.
    const other = await keyedServer('Other keyed', 'erin');
    assertRefused(await ping(other.url, bearer(erin2.key), 'x'), { id: 'x', invalidToken: true });

    // Deleting the server takes its keys with it.
    assert.equal((await fg.console(`/servers/${other.server.id}`, { method: 'DELETE' })).status, 200);
    assert.deepEqual(await fg.d1(`SELECT id FROM server_keys WHERE server_id = '${other.server.id}'`), []);
  });

  test('a none server ignores Authorization; switching a server back to none opens it', async () => {
    const open = await workflowServer('Open server');
    const r = await callTool(open.url, open.tool, bearer('whatever-the-client-sends'), 'open-1', { 'user-agent': 'open-client/1.0' });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.result.isError, false, r.text);
    assert.equal((await ping(open.url, { authorization: 'Basic YTpi' })).status, 200);
    const [run] = dify.requestsFor(open.apiKey).filter((x) => x.path === '/v1/workflows/run');
    assert.match(run.body.user, /^mcp-[0-9a-f]{24}$/, 'the user is derived from the client, as before');

    const s = await keyedServer('Reopened', 'gina');
    assertRefused(await ping(s.url, {}, 'closed'), { id: 'closed', invalidToken: false });
    assert.equal((await setMode(s.server.id, 'none')).status, 200);
    assert.equal((await ping(s.url)).status, 200, 'open at once on the isolate that changed it');
    const call = await callTool(s.url, s.tool, bearer(s.key.key), 'reopened', { 'user-agent': 'reopened/1.0' });
    assert.equal(call.json.result.isError, false, call.text);
    const runs = dify.requestsFor(s.apiKey).filter((x) => x.path === '/v1/workflows/run');
    assert.match(runs.at(-1).body.user, /^mcp-/, 'in mode none a key is not an identity');
  });

  test('on a key server a durable task is reachable only by the key that created it', async () => {
    const { app, apiKey } = await registerApp(fg, dify, {
      mode: 'workflow',
      name: 'Keyed task',
      form: [{ 'text-input': { variable: 'text', label: 'Text', required: true } }],
      backend: { task_support: 'optional', poll_interval_seconds: 1 },
      runDurationMs: 200,
    });
    const { server, url } = await publish(fg, app.id);
    assert.equal((await setMode(server.id, 'key')).status, 200);
    const [alice, bob] = [await newKey(server.id, 'alice'), await newKey(server.id, 'bob')];
    const T = { 'mcp-protocol-version': '2025-11-25' };
    const created = await rpc(url, { jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'Keyed_task', arguments: { text: 'x' }, task: { ttl: 600_000 } } }, { ...T, ...bearer(alice.key) });
    const taskId = created.json.result?.task?.taskId;
    assert.ok(taskId, created.text);
    const get = (key, method = 'tasks/get') => rpc(url, { jsonrpc: '2.0', id: 2, method, params: { taskId } }, { ...T, ...bearer(key) });

    const mine = await get(alice.key);
    assert.equal(mine.json.result?.taskId, taskId, mine.text);
    for (const method of ['tasks/get', 'tasks/cancel', 'tasks/result']) {
      const theirs = await get(bob.key, method);
      assert.equal(theirs.json.error?.code, -32602, `${method}: ${theirs.text}`);
      assert.match(theirs.json.error.message, /unknown task/);
    }
    assertRefused(await rpc(url, { jsonrpc: '2.0', id: 3, method: 'tasks/get', params: { taskId } }, T), { id: 3, invalidToken: false });

    // The console sees every task of the server; the run went out as alice.
    assert.equal((await fg.console(`/servers/${server.id}/tasks/${taskId}`)).status, 200);
    const result = await get(alice.key, 'tasks/result');
    assert.equal(result.json.result?.isError, false, result.text);
    const runs = dify.requestsFor(apiKey).filter((r) => r.path === '/v1/workflows/run' && r.method === 'POST');
    assert.deepEqual(runs.map((r) => r.body.user), ['alice']);
  });

  test('browsers: the preflight allows Authorization, and a 401 exposes its challenge', async () => {
    const s = await keyedServer('Browser keyed', 'browser');
    const pre = await fetch(s.url, {
      method: 'OPTIONS',
      headers: { origin: ORIGIN, 'access-control-request-method': 'POST', 'access-control-request-headers': 'authorization, content-type' },
    });
    assert.equal(pre.status, 204);
    assert.match(pre.headers.get('access-control-allow-headers'), /(^|, )authorization(,|$)/);
    assert.equal(pre.headers.get('access-control-allow-origin'), ORIGIN);

    const refused = await ping(s.url, { origin: ORIGIN }, 'b');
    assertRefused(refused, { id: 'b', invalidToken: false });
    assert.equal(refused.headers.get('access-control-allow-origin'), ORIGIN);
    assert.match(refused.headers.get('access-control-expose-headers'), /www-authenticate/);
    const ok = await ping(s.url, { origin: ORIGIN, ...bearer(s.key.key) });
    assert.equal(ok.status, 200, ok.text);
  });
});

test('no client key reaches the Worker\'s logs or its storage', async () => {
  assert.ok(issued.length > 10, `${issued.length} keys issued`);
  // A refusal (always logged) of a real key on a server it does not open, seen in the log.
  const s = await keyedServer('Logged', 'someone');
  const r = await ping(s.url, bearer(issued[0]), 'logged');
  assert.equal(r.status, 401);
  const requestId = r.headers.get('x-request-id');
  for (let i = 0; i < 100 && !fg.log().includes(requestId); i++) await sleep(100);
  const log = fg.log();
  assert.ok(log.includes(requestId), 'the refusal was logged');
  for (const key of issued) {
    assert.ok(!log.includes(key.slice(4)), 'a key is never logged');
    assert.deepEqual(fg.stateFilesContaining(key.slice(4)), [], 'nor stored');
  }
});

describe('mode oauth needs PUBLIC_URL', () => {
  test('without it an oauth server answers 503 naming PUBLIC_URL: the audience never comes from the Host header', async () => {
    const { server, url } = await workflowServer('Audience');
    const set = await fg.console(`/servers/${server.id}/auth`, { method: 'PUT', body: { mode: 'oauth', oauth: { issuer: 'https://auth.example.com' } } });
    assert.equal(set.status, 200, set.text);
    const r = await rpc(url, { jsonrpc: '2.0', id: 1, method: 'ping' }, { ...V, authorization: 'Bearer x.y.z' });
    assert.equal(r.status, 503, r.text);
    assert.match(r.json.error.message, /^Service unavailable: this MCP server uses OAuth, whose token audience .* the PUBLIC_URL variable, which is not set/);
    const u = new URL(url);
    const meta = await fetch(`${u.origin}/.well-known/oauth-protected-resource${u.pathname}`);
    const body = await meta.json();
    assert.equal(meta.status, 503, JSON.stringify(body));
    assert.equal(body.error, 'misconfigured');
    assert.match(body.message, /PUBLIC_URL variable, which is not set/);
  });
});
