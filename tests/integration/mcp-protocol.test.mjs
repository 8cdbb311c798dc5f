// The MCP endpoint's transport and protocol rules, bad input of every kind, the stateless
// revision, and backend failures, with raw HTTP against the real Worker.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';

import { startFlowgate } from '../support/harness.mjs';
import { startDifyFixture } from '../support/dify-fixture.mjs';
import { publish, registerApp, rpc } from '../support/flowgate-setup.mjs';

const ALLOWED = 'https://inspector.example';
let fg;
let dify;
let url; // an active workflow server
let chatUrl;

before(async () => {
  [fg, dify] = await Promise.all([startFlowgate({ vars: { ALLOWED_ORIGINS: ALLOWED, SECRET_DIFY_KEY: 'unused', SECRET_REF_NAMES: 'NOT_SET_ANYWHERE' } }), startDifyFixture()]);
  const { app } = await registerApp(fg, dify, { mode: 'workflow', name: 'Echo Flow' });
  ({ url } = await publish(fg, app.id));
  const chat = await registerApp(fg, dify, { mode: 'chat', name: 'Chatty' });
  ({ url: chatUrl } = await publish(fg, chat.app.id));
});

after(async () => {
  await Promise.allSettled([fg?.stop(), dify?.stop()]);
});

const req = (method, params, id = 1) => ({ jsonrpc: '2.0', id, method, ...(params ? { params } : {}) });
const call = (name, args, id = 1) => req('tools/call', { name, arguments: args }, id);
const V = (v) => ({ 'mcp-protocol-version': v });
const meta = (extra = {}) => ({
  _meta: {
    'io.modelcontextprotocol/protocolVersion': '2026-07-28',
    'io.modelcontextprotocol/clientCapabilities': {},
    'io.modelcontextprotocol/clientInfo': { name: 'raw-test', version: '1' },
    ...extra,
  },
});
const stateless = (method, extraHeaders = {}) => ({ ...V('2026-07-28'), 'mcp-method': method, ...extraHeaders });

/** Asserts an HTTP status, a JSON-RPC error code, the echoed id and a message that names the problem. */
function assertRpcError(r, status, code, id, mention) {
  assert.equal(r.status, status, r.text);
  assert.match(r.headers.get('content-type') ?? '', /application\/json/, r.text);
  assert.equal(r.json?.jsonrpc, '2.0', r.text);
  assert.equal(r.json.error?.code, code, r.text);
  assert.deepEqual(r.json.id, id, r.text);
  assert.match(r.json.error.message, mention, r.text);
}

describe('bad input gets a precise error', () => {
  const cases = [
    ['parse error', () => rpc(url, '{"jsonrpc": "2.0", "id": 1, "method": '), 400, -32700, null, /Parse error/],
    ['body not UTF-8', () => rpc(url, Buffer.from('{"jsonrpc": "2.0", "id": 1, "method": "\xff"}', 'latin1')), 400, -32700, null, /Parse error: the body is not UTF-8 text \(invalid utf-8 sequence of 1 bytes from index 39\)/],
    ['wrong content type', () => rpc(url, JSON.stringify(req('ping')), { 'content-type': 'text/plain' }), 415, -32600, null, /application\/json/],
    ['oversized body', () => rpc(url, JSON.stringify(req('ping', { pad: 'x'.repeat(1_100_000) }))), 413, -32600, null, /Too Large/],
    ['not acceptable', () => rpc(url, req('ping'), { accept: 'text/html' }), 406, -32600, null, /Accept/],
    ['not a JSON-RPC message', () => rpc(url, '"hello"'), 400, -32600, null, /JSON object/],
    ['wrong jsonrpc version', () => rpc(url, { jsonrpc: '1.0', id: 3, method: 'ping' }), 400, -32600, 3, /jsonrpc/],
    ['missing id on a request', () => rpc(url, { jsonrpc: '2.0', method: 'tools/list' }), 400, -32600, null, /tools\/list.*needs an `id`/],
    ['batch on 2025-06-18', () => rpc(url, [req('ping', null, 1), req('ping', null, 2)], V('2025-06-18')), 400, -32600, null, /batches.*2025-06-18/],
    ['empty batch', () => rpc(url, []), 400, -32600, null, /empty/],
    ['unknown method', () => rpc(url, req('tools/explode', {}, 4), V('2025-06-18')), 200, -32601, 4, /tools\/explode/],
    ['resources are not offered', () => rpc(url, req('resources/list', {}, 5), V('2025-06-18')), 200, -32601, 5, /resources\/list/],
    ['prompts are not offered', () => rpc(url, req('prompts/list', {}, 6), V('2025-11-25')), 200, -32601, 6, /prompts\/list/],
    ['unsupported version header', () => rpc(url, req('tools/list', {}, 7), V('1999-01-01')), 400, -32600, 7, /Unsupported MCP-Protocol-Version: 1999-01-01/],
    ['header mismatch (2026)', () => rpc(url, req('tools/list', meta(), 8), stateless('tools/call')), 400, -32020, 8, /Mcp-Method.*tools\/call.*tools\/list/],
    ['missing Mcp-Method (2026)', () => rpc(url, req('tools/list', meta(), 9), V('2026-07-28')), 400, -32020, 9, /Mcp-Method header is required/],
    ['version header vs _meta (2026)', () => rpc(url, req('tools/list', meta(), 10), stateless('tools/list', V('2025-11-25'))), 400, -32020, 10, /does not match/],
    ['unsupported stateless version', () => rpc(url, req('tools/list', meta({ 'io.modelcontextprotocol/protocolVersion': 'v999' }), 11), stateless('tools/list', V('v999'))), 400, -32022, 11, /v999/],
    ['missing clientCapabilities (2026)', () => rpc(url, req('tools/list', { _meta: { 'io.modelcontextprotocol/protocolVersion': '2026-07-28' } }, 12), stateless('tools/list')), 400, -32602, 12, /clientCapabilities/],
    ['initialize is gone in 2026', () => rpc(url, req('initialize', meta(), 13), stateless('initialize')), 404, -32601, 13, /initialize/],
    ['unknown tool', () => rpc(url, call('nope', {}, 14), V('2025-06-18')), 200, -32602, 14, /Unknown tool: 'nope'.*Echo_Flow/],
    ['missing tool name', () => rpc(url, req('tools/call', { arguments: {} }, 15), V('2025-06-18')), 200, -32602, 15, /`name`/],
    ['arguments not an object', () => rpc(url, req('tools/call', { name: 'Echo_Flow', arguments: [1] }, 16), V('2025-06-18')), 200, -32602, 16, /`arguments`/],
    ['missing argument (2025-06-18)', () => rpc(url, call('Echo_Flow', {}, 17), V('2025-06-18')), 200, -32602, 17, /missing required argument 'text'/],
    ['ill-typed argument (2025-06-18)', () => rpc(url, call('Echo_Flow', { text: 5 }, 18), V('2025-06-18')), 200, -32602, 18, /'text' must be a string \(got a number\)/],
    ['out-of-enum argument (2024-11-05)', () => rpc(url, call('Echo_Flow', { text: 'a', lang: 'de' }, 19), V('2024-11-05')), 200, -32602, 19, /'lang' must be one of "en", "fr" \(got "de"\)/],
    ['too long argument', () => rpc(url, call('Echo_Flow', { text: 'x'.repeat(51) }, 20), V('2025-03-26')), 200, -32602, 20, /at most 50/],
    ['bad log level', () => rpc(url, req('logging/setLevel', { level: 'shouty' }, 21)), 200, -32602, 21, /level/],
    ['unknown server code', () => rpc(url.replace(/server\/\w+\//, 'server/AAAAAAAAAAAAAAAA/'), req('tools/list', {}, 22)), 404, -32600, 22, /Server not found/],
    ['malformed server code', () => rpc(url.replace(/server\/\w+\//, 'server/short/'), req('tools/list', {}, 23)), 404, -32600, 23, /Server not found/],
    ['foreign Origin', () => rpc(url, req('ping', null, 24), { origin: 'https://evil.example' }), 403, -32600, null, /Origin https:\/\/evil\.example is not allowed/],
  ];
  for (const [label, send, status, code, id, mention] of cases) {
    test(label, async () => assertRpcError(await send(), status, code, id, mention));
  }

  test('from 2025-11-25 bad arguments are tool errors (SEP-1303)', async () => {
    const r = await rpc(url, call('Echo_Flow', { lang: 'de', count: 'many' }, 30), V('2025-11-25'));
    assert.equal(r.status, 200);
    assert.equal(r.json.result.isError, true);
    const text = r.json.result.content[0].text;
    for (const m of [/missing required argument 'text'/, /'lang' must be one of/, /'count' must be a number/]) assert.match(text, m);
    const stateless2026 = await rpc(url, { ...call('Echo_Flow', {}, 31), params: { name: 'Echo_Flow', arguments: {}, ...meta() } }, stateless('tools/call', { 'mcp-name': 'Echo_Flow' }));
    assert.equal(stateless2026.json.result.isError, true);
    assert.equal(stateless2026.json.result.resultType, 'complete');
  });

  test('inactive and rotated codes stop working at once', async () => {
    const { app } = await registerApp(fg, dify, { mode: 'workflow', name: 'Short lived' });
    const { server, url: u } = await publish(fg, app.id);
    assert.equal((await rpc(u, req('tools/list', {}, 1))).status, 200);
    await fg.console(`/apps/${app.id}/server`, { method: 'PUT', body: { id: server.id, status: 'inactive' } });
    assertRpcError(await rpc(u, req('tools/list', {}, 2)), 403, -32600, 2, /inactive/);
    await fg.console(`/apps/${app.id}/server`, { method: 'PUT', body: { id: server.id, status: 'active' } });
    assert.equal((await rpc(u, req('tools/list', {}, 3))).status, 200);
    const rotated = await fg.console(`/apps/${server.id}/server/refresh`);
    assertRpcError(await rpc(u, req('tools/list', {}, 4)), 404, -32600, 4, /Server not found/);
    assert.equal((await rpc(rotated.json.mcp_url, req('tools/list', {}, 5))).status, 200);
  });
});

/**
 * POSTs a body sent chunked (no Content-Length): `chunks` of `chunkBytes` each, then, unless
 * `end` is false, the end of the body. Resolves with the answer's status and parsed JSON as soon
 * as the answer arrives, whether or not the body was finished; rejects after `timeoutMs`.
 */
function postChunked(target, { headers = {}, chunks, chunkBytes = 64 * 1024, fill = ' ', end = true, lead = '', timeoutMs = 20_000 }) {
  return new Promise((resolve, reject) => {
    const u = new URL(target);
    const r = http.request({ host: u.hostname, port: u.port, path: u.pathname, method: 'POST', headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'transfer-encoding': 'chunked', ...headers } });
    const timer = setTimeout(() => { r.destroy(); reject(new Error(`no answer within ${timeoutMs} ms: the body was waited for whole`)); }, timeoutMs);
    r.on('response', (res) => {
      let text = '';
      res.setEncoding('utf8');
      res.on('data', (d) => { text += d; });
      res.on('end', () => { clearTimeout(timer); r.destroy(); let json = null; try { json = JSON.parse(text); } catch {} resolve({ status: res.statusCode, headers: { get: (n) => res.headers[n.toLowerCase()] ?? null }, json, text }); });
    });
    r.on('error', (e) => { if (!r.destroyed) reject(e); });
    if (lead) r.write(lead);
    const piece = Buffer.alloc(chunkBytes, fill);
    for (let i = 0; i < chunks; i++) r.write(piece);
    if (end) r.end();
  });
}

describe('bodies sent without a length', () => {
  test('a small chunked body is read and answered', async () => {
    const body = JSON.stringify(req('ping', null, 41));
    const r = await postChunked(url, { chunks: 0, lead: body });
    assert.equal(r.status, 200, r.text);
    assert.deepEqual(r.json, { jsonrpc: '2.0', id: 41, result: {} });
  });

  test('an oversized chunked body is refused once it passes the limit, before it ends', async () => {
    // 1.5 MiB sent and the body never finished: only a reader that stops at the limit answers.
    const r = await postChunked(url, { chunks: 24, end: false, lead: '{"jsonrpc":"2.0","id":1,"method":"ping","params":{"pad":"' });
    assertRpcError(r, 413, -32600, null, /Payload Too Large.*1024 KiB/);
  });

  test('the console refuses an oversized chunked body the same way', async () => {
    const r = await postChunked(`${fg.url}/console/api/apps`, { headers: { authorization: `Bearer ${fg.adminToken}` }, chunks: 24, end: false, lead: '{"name":"' });
    assert.equal(r.status, 413, r.text);
    assert.equal(r.json?.error, 'payload_too_large', r.text);
    assert.match(r.json.message, /larger than 1024 KiB/);
  });
});

describe('transport', () => {
  test('notifications and responses get 202 with an empty body, whatever the header', async () => {
    for (const [body, headers] of [
      [{ jsonrpc: '2.0', method: 'notifications/initialized' }, V('1999-01-01')],
      [{ jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: 1 } }, {}],
      [{ jsonrpc: '2.0', id: 9, result: {} }, {}],
    ]) {
      const r = await rpc(url, body, headers);
      assert.equal(r.status, 202);
      assert.equal(r.text, '');
    }
  });

  test('initialize ignores the version header, echoes or falls back', async () => {
    for (const [asked, answered] of [['2025-03-26', '2025-03-26'], ['2030-01-01', '2025-11-25']]) {
      const r = await rpc(url, req('initialize', { protocolVersion: asked, capabilities: {}, clientInfo: { name: 'c', version: '1' } }), V('garbage'));
      assert.equal(r.status, 200, r.text);
      assert.equal(r.json.result.protocolVersion, answered);
      assert.deepEqual(Object.keys(r.json.result.capabilities).sort(), ['logging', 'tools']);
    }
  });

  test('a client that accepts only application/json gets JSON', async () => {
    const r = await rpc(url, req('tools/list', {}, 1), { accept: 'application/json' });
    assert.equal(r.status, 200);
    assert.match(r.headers.get('content-type'), /application\/json/);
    assert.equal(r.json.result.tools[0].name, 'Echo_Flow');
  });

  test('batches on 2025-03-26 are answered per item', async () => {
    const r = await rpc(url, [req('ping', null, 1), { jsonrpc: '2.0', method: 'notifications/initialized' }, req('nope', null, 2), req('tools/list', {}, 3)]);
    assert.equal(r.status, 200, r.text);
    assert.deepEqual(r.json.map((m) => m.id), [1, 2, 3]);
    assert.deepEqual(r.json[0].result, {});
    assert.equal(r.json[1].error.code, -32601);
    assert.equal(r.json[2].result.tools.length, 1);
    const notes = await rpc(url, [{ jsonrpc: '2.0', method: 'notifications/initialized' }]);
    assert.equal(notes.status, 202);
  });

  // Found by planting a bug: an Origin check skipped for older revisions went unnoticed (only a
  // ping without a revision was tested). Each revision as it says which one it speaks: in
  // `initialize` (before 2026-07-28), in MCP-Protocol-Version afterwards, and in `_meta` too
  // from 2026-07-28.
  for (const revision of ['2024-11-05', '2025-03-26', '2025-06-18', '2025-11-25', '2026-07-28']) {
    test(`a browser Origin not in ALLOWED_ORIGINS is refused for ${revision}; a listed one is served`, async () => {
      const sends = [];
      if (revision !== '2026-07-28') {
        const init = req('initialize', { protocolVersion: revision, capabilities: {}, clientInfo: { name: 'origin-test', version: '1' } }, 30);
        sends.push(['initialize', (origin) => rpc(url, init, { origin })]);
        sends.push(['tools/list with the header', (origin) => rpc(url, req('tools/list', {}, 31), { origin, 'mcp-protocol-version': revision })]);
      } else {
        const meta = { 'io.modelcontextprotocol/protocolVersion': revision, 'io.modelcontextprotocol/clientCapabilities': {}, 'io.modelcontextprotocol/clientInfo': { name: 'origin-test', version: '1' } };
        const headers = { 'mcp-protocol-version': revision, 'mcp-method': 'tools/list' };
        sends.push(['tools/list', (origin) => rpc(url, req('tools/list', { _meta: meta }, 32), { origin, ...headers })]);
      }
      for (const [what, send] of sends) {
        for (const origin of ['https://evil.example', 'http://localhost:1', 'null']) {
          const refused = await send(origin);
          assert.equal(refused.status, 403, `${what} from ${origin}: ${refused.text}`);
          assert.equal(refused.json.error.code, -32600);
          assert.match(refused.json.error.message, /is not allowed; add it to ALLOWED_ORIGINS/);
        }
        const served = await send(ALLOWED);
        assert.equal(served.status, 200, `${what} from ${ALLOWED}: ${served.text}`);
        assert.ok(served.json.result, `${what}: ${served.text}`);
      }
    });
  }

  test('GET and DELETE get 405 with Allow; CORS preflight and allowed origins work', async () => {
    for (const method of ['GET', 'DELETE']) {
      const r = await fetch(url, { method, headers: { accept: 'text/event-stream' } });
      assert.equal(r.status, 405);
      assert.equal(r.headers.get('allow'), 'POST, OPTIONS');
      assert.equal((await r.json()).error.code, -32600);
    }
    const pre = await fetch(url, { method: 'OPTIONS', headers: { origin: ALLOWED, 'access-control-request-method': 'POST', 'access-control-request-headers': 'content-type, mcp-protocol-version' } });
    assert.equal(pre.status, 204);
    assert.equal(pre.headers.get('access-control-allow-origin'), ALLOWED);
    assert.match(pre.headers.get('access-control-allow-headers'), /mcp-protocol-version/);
    // SEP-2243's Mcp-Param-<Name> headers come from tool schemas: those asked about are allowed.
    const params = await fetch(url, { method: 'OPTIONS', headers: { origin: ALLOWED, 'access-control-request-method': 'POST', 'access-control-request-headers': 'content-type, mcp-param-region, x-other' } });
    const allowed = params.headers.get('access-control-allow-headers').split(',').map((h) => h.trim().toLowerCase());
    assert.ok(allowed.includes('mcp-param-region') && !allowed.includes('x-other'), allowed.join(', '));
    const ok = await rpc(url, req('ping', null, 1), { origin: ALLOWED });
    assert.equal(ok.status, 200);
    assert.equal(ok.headers.get('access-control-allow-origin'), ALLOWED);
    const badPre = await fetch(url, { method: 'OPTIONS', headers: { origin: 'https://evil.example' } });
    assert.equal(badPre.status, 403);
  });

  test('2026-07-28: server/discover, tools/list and tools/call without initialize', async () => {
    const d = await rpc(url, req('server/discover', meta(), 1), stateless('server/discover'));
    assert.equal(d.status, 200, d.text);
    assert.equal(d.json.result.resultType, 'complete');
    assert.ok(d.json.result.supportedVersions.includes('2026-07-28'));
    assert.equal(d.json.result._meta['io.modelcontextprotocol/serverInfo'].name, 'Flowgate');
    const l = await rpc(url, req('tools/list', meta(), 2), stateless('tools/list'));
    assert.deepEqual([l.json.result.ttlMs, l.json.result.cacheScope, l.json.result.resultType], [0, 'private', 'complete']);
    assert.equal(l.json.result.tools[0].title, 'Echo Flow');
    const c = await rpc(url, req('tools/call', { name: 'Echo_Flow', arguments: { text: 'hi' }, ...meta() }, 3), stateless('tools/call', { 'mcp-name': 'Echo_Flow' }));
    assert.equal(c.json.result.isError, false, c.text);
    assert.deepEqual(c.json.result.structuredContent, { echo: { text: 'hi' } });
    const wrongName = await rpc(url, req('tools/call', { name: 'Echo_Flow', arguments: { text: 'hi' }, ...meta() }, 4), stateless('tools/call', { 'mcp-name': 'Other' }));
    assertRpcError(wrongName, 400, -32020, 4, /Mcp-Name/);
  });

  test('calls record the end user off the response path', async () => {
    await rpc(chatUrl, call('Chatty', { query: 'hi', text: 't' }, 1), { ...V('2025-06-18'), 'user-agent': 'end-user-test/1.0' });
    let rows = [];
    for (let i = 0; i < 20 && rows.length === 0; i++) {
      rows = await fg.d1("SELECT name FROM end_users WHERE name = 'end-user-test/1.0'");
    }
    assert.equal(rows.length, 1);
  });

  test('an end user is written once per server, user and hour, not on every call', async () => {
    const as = (ua, id) => rpc(chatUrl, call('Chatty', { query: 'hi', text: 't' }, id), { ...V('2025-06-18'), 'user-agent': ua });
    const rowsOf = (ua) => fg.d1(`SELECT last_seen_at FROM end_users WHERE name = '${ua}'`);
    const waitForRow = async (ua) => {
      for (let i = 0; i < 40; i++) {
        const rows = await rowsOf(ua);
        if (rows.length === 1) return rows;
        await new Promise((r) => setTimeout(r, 100));
      }
      throw new Error(`no end_users row for ${ua}`);
    };
    await as('once-an-hour/1.0', 1);
    await waitForRow('once-an-hour/1.0');
    // Mark the row, then call again: a write on this call would overwrite the mark.
    await fg.d1("UPDATE end_users SET last_seen_at = 7 WHERE name = 'once-an-hour/1.0'");
    const again = await as('once-an-hour/1.0', 2);
    assert.equal(again.status, 200, again.text);
    // A new user's row is written off the response path of a later call: once it is there,
    // a write from the earlier call would have landed too.
    await as('once-an-hour-control/1.0', 3);
    await waitForRow('once-an-hour-control/1.0');
    assert.deepEqual(await rowsOf('once-an-hour/1.0'), [{ last_seen_at: 7 }]);
  });
});

describe('backend failures are tool errors with the backend message', () => {
  // Every failure on both of Flowgate's paths to Dify: streaming (the client takes SSE) and
  // blocking (the client takes only JSON), each checked to be the path it claims.
  const PATHS = [
    ['streaming', V('2025-06-18')],
    ['blocking', { ...V('2025-06-18'), accept: 'application/json' }],
  ];
  let serial = 0;
  async function failingServer(opts) {
    const { app, apiKey } = await registerApp(fg, dify, { mode: 'workflow', name: 'Flaky', ...opts });
    return { url: (await publish(fg, app.id)).url, apiKey };
  }
  async function callFlaky(u, headers) {
    const r = await rpc(u, call('Flaky', { text: 'x' }, 1), headers);
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.error, undefined, r.text);
    assert.equal(r.json.result.isError, true, r.text);
    assert.deepEqual(r.json.result.structuredContent, undefined, r.text);
    return r.json.result.content[0].text;
  }

  const cases = [
    ['HTTP 500', () => ({ behaviour: 'http500' }), /answered HTTP 500: Internal Server Error/],
    ['HTTP 401 (wrong key)', () => ({ backend: { api_key: `app-wrong-key-${++serial}` } }), /HTTP 401, unauthorized\): Access token is invalid/],
    ['HTTP 429', () => ({ behaviour: 'rate_limited' }), /HTTP 429, too_many_requests\): Too many requests, please retry later; retry after 7 s/],
    ['Dify error body', () => ({ behaviour: 'dify_error' }), /HTTP 400, provider_quota_exceeded\): Your quota for Dify Hosted Model Provider has been exhausted\./],
    ['failed workflow', () => ({ behaviour: 'workflow_failed' }), /workflow ended failed: Node LLM failed: model timeout/],
    ['timeout', () => ({ behaviour: 'slow', delayMs: 10_000, backend: { timeout_seconds: 1 } }), /did not answer within 1 s/],
  ];
  for (const [label, opts, message] of cases) {
    for (const [path, headers] of PATHS) {
      test(`${label} (${path})`, async () => {
        const o = opts();
        const { url: u, apiKey } = await failingServer(o);
        const text = await callFlaky(u, headers);
        assert.match(text, message);
        const runs = dify.requestsFor(o.backend?.api_key ?? apiKey).filter((q) => q.path === '/v1/workflows/run');
        assert.equal(runs.length, 1, 'one request to Dify');
        assert.equal(runs[0].body.response_mode, path);
      });
    }
  }

  for (const [path, headers] of PATHS) {
    test(`connection refused (${path})`, async () => {
      const s = http.createServer();
      await new Promise((r) => s.listen(0, '127.0.0.1', r));
      const port = s.address().port;
      await new Promise((r) => s.close(r));
      const { url: u } = await failingServer({ backend: { base_url: `http://127.0.0.1:${port}/v1` } });
      assert.match(await callFlaky(u, headers), new RegExp(`could not reach the Dify app 'Flaky' at 127\\.0\\.0\\.1:${port}: `));
    });
    test(`a $SECRET that is not set (${path})`, async () => {
      const { url: u } = await failingServer({ backend: { api_key: '$NOT_SET_ANYWHERE' } });
      assert.match(await callFlaky(u, headers), /\$NOT_SET_ANYWHERE, which is not set/);
    });
  }
});
