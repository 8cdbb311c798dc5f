// Checks the fake upstream MCP servers of tests/support/mcp-upstreams.mjs with the official SDK
// client and the official conformance suite, before Flowgate is put in between.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { SSEClientTransport } from '@modelcontextprotocol/sdk/client/sse.js';
import { LoggingMessageNotificationSchema, McpError } from '@modelcontextprotocol/sdk/types.js';

import { runConformance, TOOL_SCENARIOS } from '../support/conformance.mjs';
import { EVERYTHING_TOOLS, startUpstreams } from '../support/mcp-upstreams.mjs';

let up;
const clients = new Set();

before(async () => {
  up = await startUpstreams();
});

after(async () => {
  await Promise.allSettled([...clients].map((c) => c.close()));
  await up?.stop();
});

async function connect(transport) {
  const client = new Client({ name: 'mcp-upstreams-test', version: '1.0.0' });
  await client.connect(transport);
  clients.add(client);
  return client;
}
const streamable = (url, opts) => new StreamableHTTPClientTransport(new URL(url), opts);
const legacy = (url, opts) => new SSEClientTransport(new URL(url), opts);

const ACCEPT_BOTH = 'application/json, text/event-stream';
const INIT = {
  jsonrpc: '2.0',
  id: 1,
  method: 'initialize',
  params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'raw', version: '1' } },
};
function post(url, body, headers = {}) {
  return fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: ACCEPT_BOTH, ...headers },
    body: typeof body === 'string' ? body : JSON.stringify(body),
  });
}
const since = (requests, n) => requests.slice(n);

// ---------------------------------------------------------------------------
// stateful
// ---------------------------------------------------------------------------

describe('stateful', () => {
  test('tools/list comes in pages of 3 with nextCursor and covers every tool', async () => {
    const client = await connect(streamable(up.stateful.url));
    const pages = [];
    let all = [];
    let cursor;
    do {
      const page = await client.listTools(cursor === undefined ? undefined : { cursor });
      pages.push(page.tools.map((t) => t.name));
      all = all.concat(page.tools);
      cursor = page.nextCursor;
    } while (cursor !== undefined);
    assert.deepEqual(pages.map((p) => p.length), [3, 3, 3, 3, 1]);
    assert.deepEqual(pages.flat(), EVERYTHING_TOOLS);
    const cursors = up.stateful.requests.filter((r) => r.body?.method === 'tools/list').map((r) => r.body.params?.cursor);
    assert.equal(cursors.filter((c) => c !== undefined).length, 4);

    const def = all.find((t) => t.name === 'echo');
    assert.equal(def.title, 'Echo');
    assert.deepEqual(def.annotations, { readOnlyHint: true });
    assert.equal(def.outputSchema.type, 'object');
    assert.deepEqual(def.outputSchema.properties.text, { type: 'string' });
    assert.deepEqual(def.outputSchema.required, ['text']);
    assert.deepEqual(def.inputSchema.required, ['text']);

    await assert.rejects(client.listTools({ cursor: 'bogus' }), (err) => err instanceof McpError && err.code === -32602);
  });

  test('session id on every request, SSE answers, DELETE ends the session', async () => {
    const n = up.stateful.requests.length;
    const transport = streamable(up.stateful.url);
    const client = await connect(transport);
    const sid = transport.sessionId;
    assert.match(sid, /^[0-9a-f-]{36}$/);
    assert.ok(up.stateful.sessions().includes(sid));
    await client.callTool({ name: 'echo', arguments: { text: 'x' } });

    const reqs = since(up.stateful.requests, n);
    assert.equal(reqs[0].body.method, 'initialize');
    assert.equal(reqs[0].headers['mcp-session-id'], undefined);
    for (const r of reqs.slice(1)) {
      assert.equal(r.headers['mcp-session-id'], sid, `${r.method} ${r.body?.method}`);
      assert.equal(r.headers['mcp-protocol-version'], '2025-11-25');
    }
    assert.ok(reqs.some((r) => r.method === 'GET'), 'the SDK client opens the standalone GET stream');

    await transport.terminateSession();
    const del = up.stateful.requests.findLast((r) => r.method === 'DELETE');
    assert.equal(del.headers['mcp-session-id'], sid);
    assert.ok(up.stateful.closedSessions.includes(sid));
    assert.ok(!up.stateful.sessions().includes(sid));
    await client.close();

    // Raw HTTP: POST answers are SSE (the client accepts both), an unknown session is 404.
    const init = await post(up.stateful.url, INIT);
    assert.equal(init.status, 200);
    assert.match(init.headers.get('content-type'), /^text\/event-stream/);
    const rawSid = init.headers.get('mcp-session-id');
    assert.ok(rawSid);
    assert.match(await init.text(), /"protocolVersion":"2025-06-18"/);
    const gone = await post(up.stateful.url, { jsonrpc: '2.0', id: 2, method: 'ping' }, { 'mcp-session-id': sid });
    assert.equal(gone.status, 404);
    assert.deepEqual(await gone.json(), { jsonrpc: '2.0', error: { code: -32001, message: 'Session not found' }, id: null });
    const none = await post(up.stateful.url, { jsonrpc: '2.0', id: 2, method: 'ping' });
    assert.equal(none.status, 400);
    await none.body?.cancel();
    const del2 = await fetch(up.stateful.url, { method: 'DELETE', headers: { 'mcp-session-id': rawSid } });
    assert.equal(del2.status, 200);
  });

  test('expireSessions() → 404 for the old session, a new client initializes again', async () => {
    const transport = streamable(up.stateful.url);
    const client = await connect(transport);
    const sid = transport.sessionId;
    const expired = await up.stateful.expireSessions();
    assert.ok(expired.includes(sid));
    assert.deepEqual(up.stateful.sessions(), []);
    await assert.rejects(client.callTool({ name: 'echo', arguments: { text: 'x' } }), (err) => err.code === 404);
    const last = up.stateful.requests.findLast((r) => r.method === 'POST');
    assert.equal(last.headers['mcp-session-id'], sid);
    await client.close();

    const again = streamable(up.stateful.url);
    const client2 = await connect(again);
    assert.notEqual(again.sessionId, sid);
    const r = await client2.callTool({ name: 'echo', arguments: { text: 'back' } });
    assert.deepEqual(r.structuredContent, { text: 'back' });
  });

  test('refuseDelete(true): DELETE is 405 and the session lives on', async () => {
    const transport = streamable(up.stateful.url);
    const client = await connect(transport);
    const sid = transport.sessionId;
    up.stateful.refuseDelete(true);
    try {
      const del = await fetch(up.stateful.url, { method: 'DELETE', headers: { 'mcp-session-id': sid } });
      assert.equal(del.status, 405);
      assert.equal(del.headers.get('allow'), 'GET, POST');
      await del.body?.cancel();
      assert.ok(up.stateful.sessions().includes(sid));
      assert.ok(!up.stateful.closedSessions.includes(sid));
      assert.deepEqual((await client.callTool({ name: 'echo', arguments: { text: 'still' } })).structuredContent, { text: 'still' });
    } finally {
      up.stateful.refuseDelete(false);
    }
    await transport.terminateSession();
    assert.ok(up.stateful.closedSessions.includes(sid));
    await client.close();
  });

  test('slow_progress with a gate: its steps, then it waits until the gate opens', async () => {
    const client = await connect(streamable(up.stateful.url));
    const steps = [];
    let done = false;
    const call = client.callTool({ name: 'slow_progress', arguments: { steps: 2, delayMs: 0, gate: 'fixture-gate' } }, undefined, { onprogress: (p) => steps.push(p.progress) }).finally(() => (done = true));
    const until = Date.now() + 20_000;
    while (!(up.gateWaiting('fixture-gate') && steps.length === 2) && Date.now() < until) await new Promise((r) => setTimeout(r, 20));
    assert.deepEqual(steps, [1, 2]);
    assert.equal(up.gateWaiting('fixture-gate'), true);
    assert.equal(done, false);
    up.releaseGate('fixture-gate');
    assert.deepEqual((await call).content, [{ type: 'text', text: 'done 2' }]);
    assert.equal(up.gateWaiting('fixture-gate'), false);
    // An open gate does not hold later calls.
    assert.deepEqual((await client.callTool({ name: 'slow_progress', arguments: { steps: 0, delayMs: 0, gate: 'fixture-gate' } })).content, [{ type: 'text', text: 'done 0' }]);
  });

  test('the everything tools give the right content types', async () => {
    const client = await connect(streamable(up.stateful.url, { requestInit: { headers: { 'X-Forward-Me': 'yes', Authorization: 'Bearer up-secret' } } }));
    const call = (name, args = {}, opts) => client.callTool({ name, arguments: args }, undefined, opts);

    assert.deepEqual((await call('test_simple_text')).content, [{ type: 'text', text: 'This is a simple text response for testing.' }]);

    const [img] = (await call('test_image_content')).content;
    assert.equal(img.type, 'image');
    assert.equal(img.mimeType, 'image/png');
    assert.deepEqual([...Buffer.from(img.data, 'base64').subarray(0, 4)], [0x89, 0x50, 0x4e, 0x47]);

    const [audio] = (await call('test_audio_content')).content;
    assert.equal(audio.type, 'audio');
    assert.equal(audio.mimeType, 'audio/wav');
    assert.equal(Buffer.from(audio.data, 'base64').subarray(0, 4).toString(), 'RIFF');

    const [res] = (await call('test_embedded_resource')).content;
    assert.deepEqual(res, { type: 'resource', resource: { uri: 'test://embedded-resource', mimeType: 'text/plain', text: 'This is an embedded resource content.' } });

    assert.deepEqual((await call('test_multiple_content_types')).content.map((c) => c.type), ['text', 'image', 'resource']);

    const err = await call('test_error_handling');
    assert.equal(err.isError, true);
    assert.match(err.content[0].text, /intentionally/);

    const echo = await call('echo', { text: 'hello' });
    assert.deepEqual(echo.content, [{ type: 'text', text: 'echo: hello' }]);
    assert.deepEqual(echo.structuredContent, { text: 'hello' });

    const link = await call('link');
    assert.deepEqual(link.content.map((c) => c.type), ['text', 'resource_link']);
    assert.equal(link.content[1].uri, 'test://linked-resource');

    const h = await call('headers');
    assert.equal(h.structuredContent.headers['x-forward-me'], 'yes');
    assert.equal(h.structuredContent.headers.authorization, 'Bearer up-secret');
    assert.ok(h.structuredContent.headers['mcp-session-id']);
    assert.deepEqual(JSON.parse(h.content[0].text), h.structuredContent);

    await assert.rejects(call('fail_protocol'), (e) => e instanceof McpError && e.code === -32602 && /bad thing/.test(e.message));

    const progress = [];
    await call('test_tool_with_progress', {}, { onprogress: (p) => progress.push(p) });
    assert.deepEqual(progress.map((p) => [p.progress, p.total]), [[0, 100], [50, 100], [100, 100]]);

    const logs = [];
    client.setNotificationHandler(LoggingMessageNotificationSchema, (n) => logs.push(n.params));
    await call('test_tool_with_logging');
    assert.deepEqual(logs.map((l) => [l.level, l.data]), [
      ['info', 'Tool execution started'],
      ['info', 'Tool processing data'],
      ['info', 'Tool execution completed'],
    ]);

    logs.length = 0;
    const steps = [];
    const slow = await call('slow_progress', { steps: 3, delayMs: 20 }, { onprogress: (p) => steps.push(p) });
    assert.deepEqual(slow.content, [{ type: 'text', text: 'done 3' }]);
    assert.deepEqual(steps, [1, 2, 3].map((i) => ({ progress: i, total: 3, message: `step ${i}/3` })));
    assert.deepEqual(logs.map((l) => l.data), ['step 1/3', 'step 2/3', 'step 3/3']);
    const req = up.stateful.requests.findLast((r) => r.body?.params?.name === 'slow_progress');
    assert.ok(req.body.params._meta.progressToken !== undefined);
  });
});

// ---------------------------------------------------------------------------
// stateless
// ---------------------------------------------------------------------------

describe('stateless', () => {
  test('JSON answers, no session, GET/DELETE 405', async () => {
    const n = up.stateless.requests.length;
    const transport = streamable(up.stateless.url);
    const client = await connect(transport);
    assert.equal(transport.sessionId, undefined);
    const list = await client.listTools();
    assert.deepEqual(list.tools.map((t) => t.name), EVERYTHING_TOOLS);
    assert.equal(list.nextCursor, undefined);
    const r = await client.callTool({ name: 'echo', arguments: { text: 'sl' } });
    assert.deepEqual(r.structuredContent, { text: 'sl' });
    assert.ok(since(up.stateless.requests, n).some((q) => q.method === 'GET'), 'the SDK client tried the GET stream (405)');

    const res = await post(up.stateless.url, { jsonrpc: '2.0', id: 7, method: 'tools/call', params: { name: 'fail_protocol', arguments: {} } });
    assert.equal(res.status, 200);
    assert.match(res.headers.get('content-type'), /^application\/json/);
    assert.equal(res.headers.get('mcp-session-id'), null);
    assert.deepEqual(await res.json(), { jsonrpc: '2.0', id: 7, error: { code: -32602, message: 'bad thing' } });

    for (const method of ['GET', 'DELETE']) {
      const x = await fetch(up.stateless.url, { method, headers: { accept: 'text/event-stream' } });
      assert.equal(x.status, 405, method);
      assert.equal(x.headers.get('allow'), 'POST');
      await x.body?.cancel();
    }
  });
});

// ---------------------------------------------------------------------------
// legacy SSE, hanging upstreams
// ---------------------------------------------------------------------------

describe('legacy HTTP+SSE', () => {
  test('via /sse and via baseUrl GET; POST on baseUrl 405', async () => {
    assert.match(up.legacySse.url, /\/sse$/);
    assert.doesNotMatch(up.legacySse.baseUrl, /\/sse$/);
    for (const url of [up.legacySse.url, up.legacySse.baseUrl]) {
      const n = up.legacySse.requests.length;
      const client = await connect(legacy(url));
      const r = await client.callTool({ name: 'echo', arguments: { text: 'old' } });
      assert.deepEqual(r.content, [{ type: 'text', text: 'echo: old' }]);
      const reqs = since(up.legacySse.requests, n);
      assert.equal(reqs[0].method, 'GET');
      assert.equal(reqs[0].path, new URL(url).pathname);
      assert.ok(reqs.slice(1).every((q) => q.method === 'POST' && /^\/messages\?sessionId=[0-9a-f-]{36}$/.test(q.path)));
      assert.deepEqual(reqs.slice(1).map((q) => q.body.method), ['initialize', 'notifications/initialized', 'tools/call']);
      await client.close();
    }
    const res = await post(up.legacySse.baseUrl, INIT);
    assert.equal(res.status, 405);
    await res.body?.cancel();
    const bad = await post(`${new URL(up.legacySse.url).origin}/messages?sessionId=nope`, INIT);
    assert.equal(bad.status, 404);
    await bad.body?.cancel();
  });

  test('evilEndpointUrl announces another origin; the SDK client refuses it', async () => {
    const ac = new AbortController();
    const res = await fetch(up.legacySse.evilEndpointUrl, { headers: { accept: 'text/event-stream' }, signal: ac.signal });
    const reader = res.body.getReader();
    const { value } = await reader.read();
    ac.abort();
    const text = Buffer.from(value).toString();
    assert.match(text, /^event: endpoint\ndata: (\S+)\n\n/);
    const endpoint = new URL(/data: (\S+)/.exec(text)[1]);
    assert.equal(endpoint.origin, up.legacySse.evilOrigin);
    assert.notEqual(endpoint.origin, new URL(up.legacySse.url).origin);

    const client = new Client({ name: 't', version: '1' });
    await assert.rejects(client.connect(legacy(up.legacySse.evilEndpointUrl)), /origin/i);
    await client.close();
    assert.deepEqual(up.legacySse.evilRequests, []);
  });

  test('hangingPost: POST never answers, GET serves legacy SSE', async () => {
    const n = up.hangingPost.requests.length;
    await assert.rejects(
      fetch(up.hangingPost.url, { method: 'POST', headers: { 'content-type': 'application/json', accept: ACCEPT_BOTH }, body: JSON.stringify(INIT), signal: AbortSignal.timeout(300) }),
      { name: 'TimeoutError' },
    );
    assert.ok(since(up.hangingPost.requests, n).some((q) => q.method === 'POST' && q.body?.method === 'initialize'));

    const client = await connect(legacy(up.hangingPost.url));
    const r = await client.callTool({ name: 'echo', arguments: { text: 'fallback' } });
    assert.deepEqual(r.structuredContent, { text: 'fallback' });
    await client.close();
  });

  test('hangingGet: GET never answers; headersOnlyUrl sends headers only', async () => {
    await assert.rejects(fetch(up.hangingGet.url, { headers: { accept: 'text/event-stream' }, signal: AbortSignal.timeout(300) }), { name: 'TimeoutError' });
    assert.equal(up.hangingGet.requests.at(-1).method, 'GET');
    const res = await fetch(up.hangingGet.headersOnlyUrl, { headers: { accept: 'text/event-stream' }, signal: AbortSignal.timeout(300) });
    assert.equal(res.status, 200);
    assert.match(res.headers.get('content-type'), /^text\/event-stream/);
    await assert.rejects(res.text(), { name: 'TimeoutError' });
    const p = await post(up.hangingGet.baseUrl, INIT);
    assert.equal(p.status, 405);
    await p.body?.cancel();
  });
});

// ---------------------------------------------------------------------------
// auth
// ---------------------------------------------------------------------------

describe('auth', () => {
  test('unauthorized: 401 with WWW-Authenticate, the SDK client does not fall back to GET', async () => {
    const res = await post(up.unauthorized.url, INIT);
    assert.equal(res.status, 401);
    const port = new URL(up.unauthorized.url).port;
    assert.equal(
      res.headers.get('www-authenticate'),
      `Bearer resource_metadata="http://127.0.0.1:${port}/.well-known/oauth-protected-resource", scope="tools.read"`,
    );
    assert.equal(up.unauthorized.wwwAuthenticate, res.headers.get('www-authenticate'));
    assert.equal((await res.json()).error, 'invalid_token');

    const n = up.unauthorized.requests.length;
    const client = new Client({ name: 't', version: '1' });
    await assert.rejects(client.connect(streamable(up.unauthorized.url)), (err) => err.code === 401 || /401|Unauthorized/i.test(err.message));
    await client.close();
    const reqs = since(up.unauthorized.requests, n);
    assert.deepEqual(reqs.map((q) => q.method), ['POST']);
  });

  test('oauth: client_credentials, Basic, refresh rotation, expiry, revocation, delay', async () => {
    const { oauth } = up;
    const form = (fields, headers = {}) =>
      fetch(oauth.tokenUrl, { method: 'POST', headers: { 'content-type': 'application/x-www-form-urlencoded', ...headers }, body: new URLSearchParams(fields) });

    const ok = await form({ grant_type: 'client_credentials', client_id: oauth.clientId, client_secret: oauth.clientSecret });
    assert.equal(ok.status, 200);
    const tok = await ok.json();
    assert.deepEqual(Object.keys(tok).sort(), ['access_token', 'expires_in', 'refresh_token', 'token_type']);
    assert.equal(tok.token_type, 'Bearer');
    assert.equal(tok.expires_in, 3600);
    assert.deepEqual(
      { grant: oauth.tokenRequests.at(-1).grant, clientAuth: oauth.tokenRequests.at(-1).clientAuth, status: oauth.tokenRequests.at(-1).status },
      { grant: 'client_credentials', clientAuth: 'form', status: 200 },
    );

    const basic = `Basic ${Buffer.from(`${encodeURIComponent(oauth.clientId)}:${encodeURIComponent(oauth.clientSecret)}`).toString('base64')}`;
    const viaBasic = await form({ grant_type: 'client_credentials', scope: 'tools.read', audience: 'https://api.example' }, { authorization: basic });
    assert.equal(viaBasic.status, 200);
    assert.equal((await viaBasic.json()).scope, 'tools.read');
    assert.equal(oauth.tokenRequests.at(-1).clientAuth, 'basic');
    assert.equal(oauth.tokenRequests.at(-1).form.audience, 'https://api.example');

    const badClient = await form({ grant_type: 'client_credentials', client_id: oauth.clientId, client_secret: 'nope' });
    assert.equal(badClient.status, 401);
    assert.equal((await badClient.json()).error, 'invalid_client');
    const badGrant = await form({ grant_type: 'password', client_id: oauth.clientId, client_secret: oauth.clientSecret });
    assert.equal((await badGrant.json()).error, 'unsupported_grant_type');

    // The MCP endpoint with the token.
    const client = await connect(streamable(oauth.url, { requestInit: { headers: { Authorization: `Bearer ${tok.access_token}` } } }));
    const h = await client.callTool({ name: 'headers', arguments: {} });
    assert.equal(h.structuredContent.headers.authorization, `Bearer ${tok.access_token}`);
    assert.equal(oauth.requests.findLast((q) => q.path === '/mcp').headers.authorization, `Bearer ${tok.access_token}`);

    // Wrong token / no token → 401 with a challenge.
    const wrong = await post(oauth.url, INIT, { authorization: 'Bearer not-a-token' });
    assert.equal(wrong.status, 401);
    assert.equal(wrong.headers.get('www-authenticate'), `Bearer error="invalid_token", resource_metadata="${oauth.resourceMetadataUrl}"`);
    await wrong.body?.cancel();
    const missing = await post(oauth.url, INIT);
    assert.equal(missing.headers.get('www-authenticate'), `Bearer resource_metadata="${oauth.resourceMetadataUrl}"`);
    await missing.body?.cancel();
    const c2 = new Client({ name: 't', version: '1' });
    await assert.rejects(c2.connect(streamable(oauth.url, { requestInit: { headers: { Authorization: 'Bearer wrong' } } })));
    await c2.close();

    // Refresh: a new pair, the old refresh token is spent.
    const refreshed = await form({ grant_type: 'refresh_token', refresh_token: tok.refresh_token, client_id: oauth.clientId, client_secret: oauth.clientSecret });
    assert.equal(refreshed.status, 200);
    const tok2 = await refreshed.json();
    assert.notEqual(tok2.access_token, tok.access_token);
    const reused = await form({ grant_type: 'refresh_token', refresh_token: tok.refresh_token, client_id: oauth.clientId, client_secret: oauth.clientSecret });
    assert.equal(reused.status, 400);
    assert.equal((await reused.json()).error, 'invalid_grant');

    // Expiry.
    oauth.setExpiresIn(0);
    const expired = await (await form({ grant_type: 'client_credentials', client_id: oauth.clientId, client_secret: oauth.clientSecret })).json();
    assert.equal(expired.expires_in, 0);
    const exp = await post(oauth.url, INIT, { authorization: `Bearer ${expired.access_token}` });
    assert.equal(exp.status, 401);
    await exp.body?.cancel();
    oauth.setExpiresIn(3600);

    // Delay makes concurrent token requests overlap (a second: long enough that the second
    // request arrives before the first is answered on a loaded machine too).
    oauth.setTokenDelayMs(1000);
    const n = oauth.tokenRequests.length;
    const both = await Promise.all([1, 2].map(() => form({ grant_type: 'client_credentials', client_id: oauth.clientId, client_secret: oauth.clientSecret })));
    oauth.setTokenDelayMs(0);
    assert.deepEqual(both.map((r) => r.status), [200, 200]);
    const [a, b] = oauth.tokenRequests.slice(n);
    assert.ok(a.at < b.answeredAt && b.at < a.answeredAt, 'the two token requests overlapped');
    assert.ok(a.answeredAt - a.at >= 990);

    // Revocation.
    oauth.revokeAll();
    const revoked = await post(oauth.url, INIT, { authorization: `Bearer ${tok2.access_token}` });
    assert.equal(revoked.status, 401);
    await revoked.body?.cancel();
  });
});

// ---------------------------------------------------------------------------
// toolsets
// ---------------------------------------------------------------------------

describe('toolsets', () => {
  test('submit → status script → completed; isError entries; cancel', async () => {
    const { toolsets } = up;
    const client = await connect(streamable(toolsets.url));
    assert.deepEqual((await client.listTools()).tools.map((t) => t.name).sort(), ['echo', 'report_cancel', 'report_status', 'report_submit']);
    const call = async (name, args) => client.callTool({ name, arguments: args });

    const sub = await call('report_submit', { topic: 'cats' });
    assert.match(sub.structuredContent.task_id, /^rt-[0-9a-f]{16}$/);
    assert.equal(sub.structuredContent.status, 'running');
    const { task_id } = sub.structuredContent;
    assert.deepEqual((await call('report_status', { task_id })).structuredContent, { task_id, status: 'running' });
    const done = { task_id, status: 'completed', result: { report: 'cats done' } };
    assert.deepEqual((await call('report_status', { task_id })).structuredContent, done);
    assert.deepEqual((await call('report_status', { task_id })).structuredContent, done, 'the last entry repeats');

    toolsets.setScript([{ isError: true, text: 'try later' }, { status: 'running', poll_after_seconds: 2 }, { status: 'failed', error: '<topic> broke' }]);
    const t2 = (await call('report_submit', { topic: 'dogs' })).structuredContent.task_id;
    const e = await call('report_status', { task_id: t2 });
    assert.equal(e.isError, true);
    assert.deepEqual(e.content, [{ type: 'text', text: 'try later' }]);
    assert.deepEqual((await call('report_status', { task_id: t2 })).structuredContent, { task_id: t2, status: 'running', poll_after_seconds: 2 });
    assert.deepEqual((await call('report_status', { task_id: t2 })).structuredContent, { task_id: t2, status: 'failed', error: 'dogs broke' });
    toolsets.setScript(null);

    const t3 = (await call('report_submit', { topic: 'birds' })).structuredContent.task_id;
    assert.deepEqual((await call('report_cancel', { task_id: t3 })).structuredContent, { task_id: t3, status: 'cancelled' });
    assert.deepEqual((await call('report_cancel', { task_id: t3 })).structuredContent, { task_id: t3, status: 'cancelled' });
    assert.deepEqual((await call('report_status', { task_id: t3 })).structuredContent, { task_id: t3, status: 'cancelled' });
    assert.equal((await call('report_status', { task_id: 'rt-unknown' })).structuredContent.error_code, 'task_not_found');

    assert.equal(toolsets.toolCalls.report_submit.length, 3);
    assert.equal(toolsets.toolCalls.report_status.length, 8);
    assert.equal(toolsets.toolCalls.report_cancel.length, 2);
    assert.deepEqual(toolsets.toolCalls.report_submit[0].arguments, { topic: 'cats' });
    assert.ok(toolsets.toolCalls.report_status.every((c, i, all) => typeof c.at === 'number' && (i === 0 || c.at >= all[i - 1].at)));
    assert.equal(toolsets.tasks().find((t) => t.task_id === t3).cancelled, true);
  });
});

// ---------------------------------------------------------------------------
// The official conformance scenarios, directly against the stateful fixture
// ---------------------------------------------------------------------------


// One at a time, with runConformance's default timeout (120 s): eight conformance processes at
// once on a 2-CPU machine timed each other out.
describe('conformance scenarios against the stateful fixture', () => {
  for (const scenario of TOOL_SCENARIOS) {
    test(scenario, async () => {
      const { code, out } = await runConformance(['server', '--url', up.stateful.url, '--scenario', scenario]);
      assert.equal(code, 0, out);
      assert.match(out, new RegExp(`\\[${scenario}\\s*\\] SUCCESS`));
      const m = /Passed: (\d+)\/(\d+), (\d+) failed/.exec(out);
      assert.ok(m, out);
      assert.equal(m[1], m[2], out);
      assert.ok(Number(m[1]) >= 2, out);
    });
  }
});
