// Upstream MCP servers (apps of mode `mcp`) behind Flowgate: transports, aggregation, proxied
// calls with relayed notifications, sessions, credentials.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { CallToolResultSchema, LoggingMessageNotificationSchema } from '@modelcontextprotocol/sdk/types.js';

import http from 'node:http';

import { startFlowgate } from '../support/harness.mjs';
import { startUpstreams } from '../support/mcp-upstreams.mjs';
import { startInputRequiredUpstream } from '../support/input-required-upstream.mjs';
import { publish, rpc } from '../support/flowgate-setup.mjs';

let fg;
let ups;

before(async () => {
  [fg, ups] = await Promise.all([startFlowgate({ vars: { TEAM_KEY: 'team-secret-123', SECRET_REF_NAMES: 'TEAM_KEY' } }), startUpstreams()]);
});

after(async () => {
  await Promise.allSettled([fg?.stop(), ups?.stop()]);
});

const V = (v = '2025-06-18') => ({ 'mcp-protocol-version': v });

async function mcpApp(name, backend) {
  const r = await fg.console('/apps', { method: 'POST', body: { name, description: `${name} tools`, mode: 'mcp', backend } });
  assert.equal(r.status, 201, r.text);
  return { app: r.json, ...(await publish(fg, r.json.id)) };
}

const list = async (url, v, extra = {}) => (await rpc(url, { jsonrpc: '2.0', id: 1, method: 'tools/list' }, { ...V(v), ...extra })).json.result.tools;
const call = (url, name, args = {}, v, extra = {}) => rpc(url, { jsonrpc: '2.0', id: 2, method: 'tools/call', params: { name, arguments: args } }, { ...V(v), ...extra });

// tools_cache_ttl_seconds: the first test lists an app with the shortest TTL (60 s, KV's
// minimum); the last test checks that the list is read from the upstream again once that TTL
// has run out. The minute passes while the tests in between run, so the file waits only for
// what is left of it.
const shortLived = {};
const ttlListings = () => ups.stateless.requests.filter((q) => q.path === '/mcp?app=ttl' && q.body?.method === 'tools/list');

test('tools_cache_ttl_seconds: the upstream list is cached for that long', async () => {
  const { app, url } = await mcpApp('Shortlived', { url: `${ups.stateless.url}?app=ttl`, tools_cache_ttl_seconds: 60 });
  const from = Date.now();
  assert.equal((await list(url)).length, 13);
  const to = Date.now();
  assert.equal((await list(url)).length, 13);
  assert.equal(ttlListings().length, 1, 'the second listing came from the cache');
  const cached = (await fg.kvKeys()).find((k) => k.name === `upstream-tools:${app.id}:none`);
  assert.ok(cached, 'the list is cached in KV');
  assert.ok(cached.expiration >= Math.floor(from / 1000) + 60 - 1 && cached.expiration <= Math.ceil(to / 1000) + 60 + 1, `expires at ${cached.expiration}`);
  Object.assign(shortLived, { url, expiration: cached.expiration });
});

describe('transports', () => {
  test('auto picks Streamable HTTP with a session for a stateful upstream, and reuses the session', async () => {
    const { url } = await mcpApp('Stateful', { url: ups.stateful.url });
    const before = ups.stateful.sessions().length;
    const n = ups.stateful.requests.length;
    for (let i = 0; i < 3; i++) assert.equal((await call(url, 'Stateful_echo', { text: `n${i}` })).json.result.structuredContent.text, `n${i}`);
    // The tool list is read in a session of the app's own; the caller's calls share one other.
    assert.ok(ups.stateful.sessions().length - before <= 2, 'a session for the list and one for the caller');
    const posts = ups.stateful.requests.slice(n).filter((r) => r.method === 'POST' && r.body?.method === 'tools/call');
    assert.equal(posts.length, 3);
    assert.equal(new Set(posts.map((r) => r.headers['mcp-session-id'])).size, 1, 'one session for all calls');
    assert.ok(posts.every((r) => r.headers['mcp-session-id'] && r.headers['mcp-protocol-version']));
    // The only GETs: each call's standalone stream, on the calls' session (never a resumption).
    const gets = ups.stateful.requests.slice(n).filter((r) => r.method === 'GET');
    assert.equal(gets.length, 3, 'one standalone stream a call');
    assert.ok(gets.every((r) => r.headers['mcp-session-id'] === posts[0].headers['mcp-session-id'] && !r.headers['last-event-id']));
  });

  test('an upstream that answers the standalone GET with 405 is asked once, not before every call', async () => {
    const { url } = await mcpApp('NoStream', { url: `${ups.stateful.url}?standalone=no` });
    const mine = () => ups.stateful.requests.filter((r) => r.path === '/mcp?standalone=no');
    for (let i = 0; i < 3; i++) assert.equal((await call(url, 'NoStream_echo', { text: `s${i}` })).json.result.structuredContent.text, `s${i}`);
    assert.equal(mine().filter((r) => r.method === 'POST' && r.body?.method === 'tools/call').length, 3);
    assert.equal(mine().filter((r) => r.method === 'GET').length, 1, 'the 405 was remembered');
  });

  test('a stateless upstream needs no session', async () => {
    const { url } = await mcpApp('Stateless', { url: ups.stateless.url });
    assert.equal((await call(url, 'Stateless_echo', { text: 'x' })).json.result.structuredContent.text, 'x');
    assert.ok(ups.stateless.requests.filter((r) => r.method === 'POST').every((r) => !r.headers['mcp-session-id']));
  });

  test('a legacy SSE-only upstream: /sse goes straight to SSE; another URL falls back after the old-server signal', async () => {
    const direct = await mcpApp('LegacyDirect', { url: ups.legacySse.url });
    assert.equal((await call(direct.url, 'LegacyDirect_echo', { text: 'a' })).json.result.structuredContent.text, 'a');
    const fallback = await mcpApp('LegacyAuto', { url: ups.legacySse.baseUrl });
    assert.equal((await call(fallback.url, 'LegacyAuto_echo', { text: 'b' })).json.result.structuredContent.text, 'b');
    const onBase = ups.legacySse.requests.filter((r) => r.path.startsWith('/mcp'));
    assert.equal(onBase[0].method, 'POST', 'Streamable HTTP was tried first');
    assert.ok(onBase.some((r) => r.method === 'GET'), 'then the SSE stream');
    // Found once, remembered: later calls go to the stream without a probe it would refuse.
    const probes = () => ups.legacySse.requests.filter((r) => r.path.startsWith('/mcp') && r.method === 'POST').length;
    const probed = probes();
    for (const text of ['c', 'd']) assert.equal((await call(fallback.url, 'LegacyAuto_echo', { text })).json.result.structuredContent.text, text);
    assert.equal(probes(), probed, 'no Streamable HTTP probe after the transport was found');
  });

  test('an upstream that hangs on POST fails over to SSE within session_init_timeout', async () => {
    const started = Date.now();
    const { url } = await mcpApp('Hanger', { url: ups.hangingPost.url, session_init_timeout: 2 });
    const r = await call(url, 'Hanger_echo', { text: 'late' });
    assert.equal(r.json.result.structuredContent.text, 'late');
    // Generous for a loaded machine; without the setting the hang would last the default 60 s.
    const took = (Date.now() - started) / 1000;
    assert.ok(took < 30, `took ${took} s`);
    // The next call goes to the SSE stream without another POST left hanging.
    const posts = () => ups.hangingPost.requests.filter((q) => q.method === 'POST' && q.path.startsWith('/mcp')).length;
    const before = posts();
    assert.equal((await call(url, 'Hanger_echo', { text: 'again' })).json.result.structuredContent.text, 'again');
    assert.equal(posts(), before, 'no second hanging POST');
  });

  test('an SSE upstream that never sends its endpoint fails within the timeout, naming it', async () => {
    const { app } = await mcpApp('Silent', { url: ups.hangingGet.url, transport: 'sse', session_init_timeout: 2 });
    const started = Date.now();
    const r = await fg.console(`/apps/${app.id}/tools/refresh`, { method: 'POST' });
    assert.equal(r.status, 422);
    assert.match(r.json.message, /session_init_timeout/);
    // Generous for a loaded machine; without the setting the wait would be the default 60 s.
    assert.ok(Date.now() - started < 30_000, `took ${Date.now() - started} ms`);
  });

  test('401 surfaces at once with the WWW-Authenticate details and never falls back', async () => {
    const { app } = await mcpApp('Locked', { url: ups.unauthorized.url });
    const r = await fg.console(`/apps/${app.id}/tools/refresh`, { method: 'POST' });
    assert.equal(r.status, 422);
    assert.match(r.json.message, /401/);
    assert.match(r.json.message, /tools\.read/);
    assert.match(r.json.message, /oauth-protected-resource/);
    assert.equal(ups.unauthorized.requests.filter((q) => q.method === 'GET').length, 0, 'no SSE fallback');
  });

  test('an SSE endpoint on another origin is refused', async () => {
    const { app } = await mcpApp('Evil', { url: ups.legacySse.evilEndpointUrl, session_init_timeout: 3 });
    const r = await fg.console(`/apps/${app.id}/tools/refresh`, { method: 'POST' });
    assert.equal(r.status, 422);
    assert.match(r.json.message, /origin/i);
    assert.equal(ups.legacySse.evilRequests.length, 0);
  });

  test('an expired session is re-initialized once; a refresh ends the old session with DELETE, and a 405 to it is tolerated', async () => {
    const { app, url } = await mcpApp('Resumer', { url: ups.stateful.url });
    assert.equal((await call(url, 'Resumer_echo', { text: '1' })).json.result.structuredContent.text, '1');
    const n = ups.stateful.requests.length;
    const expired = await ups.stateful.expireSessions();
    assert.equal((await call(url, 'Resumer_echo', { text: '2' })).json.result.structuredContent.text, '2');
    const posts = ups.stateful.requests.slice(n).filter((r) => r.method === 'POST');
    assert.deepEqual(posts.filter((r) => r.body?.method === 'initialize').length, 1, 'initialized exactly once more');
    // The call's standalone stream (GET) found the session expired (404), so the call went
    // once, on the new session.
    const [first] = ups.stateful.requests.slice(n);
    assert.equal(first.method, 'GET');
    assert.ok(expired.includes(first.headers['mcp-session-id']), 'the first try used the expired session');
    const calls = posts.filter((r) => r.body?.method === 'tools/call');
    assert.equal(calls.length, 1, 'the call went once, on the new session');
    const renewed = calls[0].headers['mcp-session-id'];
    assert.ok(renewed && !expired.includes(renewed));
    assert.deepEqual(ups.stateful.sessions(), [renewed]);

    // A refresh ends the list's session it replaces (a caller's session is the caller's).
    assert.equal((await fg.console(`/apps/${app.id}/tools/refresh`, { method: 'POST' })).status, 200);
    const [listed] = ups.stateful.sessions().filter((s) => s !== renewed);
    assert.ok(listed, 'the refresh read the list in a new session');
    assert.equal((await fg.console(`/apps/${app.id}/tools/refresh`, { method: 'POST' })).status, 200);
    assert.ok(ups.stateful.closedSessions.includes(listed), 'the old session got a DELETE');
    assert.ok(!ups.stateful.closedSessions.includes(renewed), "the caller's session lives on");
    const [current] = ups.stateful.sessions().filter((s) => s !== renewed);
    assert.ok(current && current !== listed);

    // An upstream that does not let clients end sessions answers the DELETE 405: the refresh
    // still succeeds, and calls go on with a new session.
    ups.stateful.refuseDelete(true);
    try {
      const m = ups.stateful.requests.length;
      const refresh = await fg.console(`/apps/${app.id}/tools/refresh`, { method: 'POST' });
      assert.equal(refresh.status, 200, refresh.text);
      const del = ups.stateful.requests.slice(m).filter((r) => r.method === 'DELETE');
      assert.deepEqual(del.map((r) => r.headers['mcp-session-id']), [current]);
      assert.ok(!ups.stateful.closedSessions.includes(current), 'the upstream refused to end it');
      const k = ups.stateful.requests.length;
      assert.equal((await call(url, 'Resumer_echo', { text: '3' })).json.result.structuredContent.text, '3');
      const used = ups.stateful.requests.slice(k).find((r) => r.body?.method === 'tools/call').headers['mcp-session-id'];
      assert.equal(used, renewed, "the call goes on in the caller's own session");
    } finally {
      ups.stateful.refuseDelete(false);
    }
  });

  test('a session the upstream keeps rejecting is re-initialized only once, then the call fails as a tool error', async () => {
    const upstream = await adhocUpstream((msg, req, res) => {
      if (msg.method === 'initialize') return reply(res, msg, INIT_RESULT, { 'mcp-session-id': `s-${Date.now()}-${Math.random()}` });
      if (msg.id === undefined) return void res.writeHead(202).end();
      if (msg.method === 'tools/list') return reply(res, msg, { tools: [{ name: 'poke', inputSchema: { type: 'object' } }] });
      res.writeHead(404, { 'content-type': 'application/json' }).end(JSON.stringify({ jsonrpc: '2.0', id: null, error: { code: -32001, message: 'Session not found' } }));
    });
    try {
      const { url } = await mcpApp('Forgetful', { url: upstream.url, transport: 'streamable-http' });
      assert.equal((await list(url)).length, 1);
      const n = upstream.seen.length;
      const r = await call(url, 'Forgetful_poke');
      assert.equal(r.json.error, undefined, r.text);
      assert.equal(r.json.result.isError, true, r.text);
      assert.match(r.json.result.content[0].text, /Forgetful keeps rejecting its session \(404\)/);
      const seen = upstream.seen.slice(n).map((m) => m.method);
      assert.equal(seen.filter((m) => m === 'tools/call').length, 2, seen.join());
      // The caller's own session (the list's is not shared), then once more after the 404.
      assert.equal(seen.filter((m) => m === 'initialize').length, 2, seen.join());
    } finally {
      await upstream.close();
    }
  });

  test('tool_call_timeout bounds a call: an upstream still working gets an isError answer', { timeout: 120_000 }, async () => {
    // The tool waits at a gate that opens only after the answer: an answer at all, while the
    // upstream is still working, is the timeout's doing (the default would be 300 s; the test's
    // own timeout is 120 s).
    const { url } = await mcpApp('Patient', { url: ups.stateful.url, tool_call_timeout: 2 });
    const gate = 'patient-never';
    try {
      const r = await call(url, 'Patient_slow_progress', { steps: 0, delayMs: 0, gate });
      assert.equal(r.json.error, undefined, r.text);
      assert.equal(r.json.result.isError, true, r.text);
      assert.match(r.json.result.content[0].text, /^upstream Patient: .*(in time|within 2 s)/);
      // The gate never opened, so the tool could not have finished: the answer is the
      // timeout's doing. The relay then cancels the call upstream (which ends the wait at the
      // gate), so "still working" is told by the cancel, not by the gate.
      const sent = ups.stateful.requests.findLast((q) => q.body?.method === 'tools/call' && q.body.params?.arguments?.gate === gate);
      assert.ok(sent, 'the call reached the upstream');
      const deadline = Date.now() + 20_000;
      while (!ups.stateful.requests.some((q) => q.body?.method === 'notifications/cancelled' && q.body.params?.requestId === sent.body.id)) {
        assert.ok(Date.now() < deadline, 'the upstream was never told the call is cancelled');
        await new Promise((res) => setTimeout(res, 50));
      }
    } finally {
      ups.releaseGate(gate);
    }
  });

  test('upstream transport failures are isError tool results, for SSE and JSON-only clients', async () => {
    const upstream = await adhocUpstream((msg, req, res) => {
      if (msg.method === 'initialize') return reply(res, msg, INIT_RESULT);
      if (msg.id === undefined) return void res.writeHead(202).end();
      if (msg.method === 'tools/list') return reply(res, msg, { tools: [{ name: 'boom', inputSchema: { type: 'object' } }] });
      req.socket.destroy(); // the connection breaks mid-call
    });
    const { url } = await mcpApp('Brittle', { url: upstream.url, transport: 'streamable-http' });
    try {
      assert.equal((await list(url)).length, 1);
      for (const accept of [{}, { accept: 'application/json' }]) {
        const r = await call(url, 'Brittle_boom', {}, undefined, accept);
        assert.equal(r.status, 200, r.text);
        assert.equal(r.json.error, undefined, r.text);
        assert.equal(r.json.result.isError, true, r.text);
        assert.match(r.json.result.content[0].text, /Brittle/);
      }
    } finally {
      await upstream.close();
    }
    // Gone altogether (the tool list is still cached): connection refused, also a tool error.
    const gone = await call(url, 'Brittle_boom');
    assert.equal(gone.json.error, undefined, gone.text);
    assert.equal(gone.json.result.isError, true, gone.text);
    assert.match(gone.json.result.content[0].text, /could not reach upstream Brittle/);
  });
});

describe('aggregation', () => {
  test('prefixed names, pagination followed, schemas passed through and downgraded for older clients', async () => {
    const { app, url } = await mcpApp('Everything', { url: ups.stateful.url });
    const listedFrom = Date.now();
    const tools = await list(url);
    const listedTo = Date.now();
    assert.equal(tools.length, 13, 'all pages of the upstream list');
    const echo = tools.find((t) => t.name === 'Everything_echo');
    assert.equal(echo.title, 'Echo');
    assert.deepEqual(echo.outputSchema.required, ['text']);
    assert.equal(echo.annotations.readOnlyHint, true);
    const old = (await list(url, '2024-11-05')).find((t) => t.name === 'Everything_echo');
    assert.equal(old.title, undefined);
    assert.equal(old.outputSchema, undefined);
    assert.equal(old.annotations, undefined);
    const cached = (await fg.kvKeys()).find((k) => k.name === `upstream-tools:${app.id}:none`);
    assert.ok(cached, 'the list is cached in KV');
    // For tools_cache_ttl_seconds, by default 300 s (bracketed by times taken around the listing).
    assert.ok(cached.expiration >= Math.floor(listedFrom / 1000) + 300 - 1 && cached.expiration <= Math.ceil(listedTo / 1000) + 300 + 1, `expires at ${cached.expiration}`);
  });

  test('tool_name_prefix false, allowed_tools and denied_tools (upstream names)', async () => {
    const { url } = await mcpApp('Filtered', { url: ups.stateless.url, tool_name_prefix: false, allowed_tools: ['echo', 'link', 'headers'], denied_tools: ['headers'] });
    assert.deepEqual((await list(url)).map((t) => t.name).sort(), ['echo', 'link']);
  });
});

describe('calls', () => {
  test('results come through intact, and are downgraded for older clients', async () => {
    const { url } = await mcpApp('Content', { url: ups.stateful.url, tool_name_prefix: false });
    const img = (await call(url, 'test_image_content')).json.result;
    assert.equal(img.content[0].type, 'image');
    assert.equal(img.content[0].mimeType, 'image/png');
    const audio = (await call(url, 'test_audio_content')).json.result;
    assert.equal(audio.content[0].type, 'audio');
    const res = (await call(url, 'test_embedded_resource')).json.result;
    assert.equal(res.content[0].type, 'resource');
    const link = (await call(url, 'link')).json.result;
    assert.ok(link.content.some((c) => c.type === 'resource_link'));
    const oldLink = (await call(url, 'link', {}, '2024-11-05')).json.result;
    assert.ok(oldLink.content.every((c) => c.type === 'text'), 'resource_link becomes text for 2024-11-05');
    const oldAudio = (await call(url, 'test_audio_content', {}, '2024-11-05')).json.result;
    assert.ok(oldAudio.content.every((c) => c.type !== 'audio'));
    const echoOld = (await call(url, 'echo', { text: 'z' }, '2025-03-26')).json.result;
    assert.equal(echoOld.structuredContent, undefined);
    const err = (await call(url, 'test_error_handling')).json.result;
    assert.equal(err.isError, true);
  });

  test('upstream JSON-RPC errors are translated with context', async () => {
    const { url } = await mcpApp('Grumpy', { url: ups.stateful.url });
    const r = await call(url, 'Grumpy_fail_protocol');
    assert.equal(r.json.error.code, -32602);
    assert.match(r.json.error.message, /^upstream Grumpy said: bad thing/);
  });

  test("upstream progress and log notifications are relayed with the client's token as they happen", async () => {
    const { url } = await mcpApp('Relay', { url: ups.stateful.url });
    const client = new Client({ name: 'relay-test', version: '1.0.0' });
    await client.connect(new StreamableHTTPClientTransport(new URL(url)));
    const logs = [];
    client.setNotificationHandler(LoggingMessageNotificationSchema, (n) => logs.push({ at: Date.now(), ...n.params }));
    // The upstream tool waits at a gate after its four steps until the test opens it: the
    // notifications must arrive while it is still working (an event, not a time spread).
    const gate = 'relay-gate';
    try {
      const progress = [];
      let done = false;
      const pending = client
        .callTool({ name: 'Relay_slow_progress', arguments: { steps: 4, delayMs: 0, gate } }, CallToolResultSchema, { onprogress: (p) => progress.push(p) })
        .finally(() => (done = true));
      const until = Date.now() + 20_000;
      while (!(progress.length === 4 && logs.length === 4) && Date.now() < until) await new Promise((res) => setTimeout(res, 50));
      assert.deepEqual(progress.map((p) => p.progress), [1, 2, 3, 4], 'the progress of a call still running');
      assert.deepEqual(logs.map((l) => l.data), ['step 1/4', 'step 2/4', 'step 3/4', 'step 4/4']);
      assert.equal(ups.gateWaiting(gate), true);
      assert.equal(done, false);
      ups.releaseGate(gate);
      const r = await pending;
      assert.equal(r.content[0].text, 'done 4');
    } finally {
      ups.releaseGate(gate);
      await client.close();
    }
  });
});

test('2026-07-28: relayed upstream log messages only with a log level in _meta, at that level and above', async () => {
  const { url } = await mcpApp('Quiet', { url: ups.stateful.url });
  const call26 = (logLevel) =>
    rpc(
      url,
      {
        jsonrpc: '2.0',
        id: 9,
        method: 'tools/call',
        params: {
          name: 'Quiet_test_tool_with_logging',
          arguments: {},
          _meta: { 'io.modelcontextprotocol/protocolVersion': '2026-07-28', 'io.modelcontextprotocol/clientCapabilities': {}, ...(logLevel ? { 'io.modelcontextprotocol/logLevel': logLevel } : {}) },
        },
      },
      { ...V('2026-07-28'), 'mcp-method': 'tools/call', 'mcp-name': 'Quiet_test_tool_with_logging' },
    );
  const kinds = (r) => r.messages.map((m) => m.method ?? 'response');
  const none = await call26();
  assert.equal(none.json.result.content[0].text, 'Logging test completed', none.text);
  assert.deepEqual(kinds(none), ['response']);
  const info = await call26('info');
  assert.deepEqual(kinds(info), ['notifications/message', 'notifications/message', 'notifications/message', 'response']);
  assert.deepEqual(info.messages.slice(0, 3).map((m) => m.params.data), ['Tool execution started', 'Tool processing data', 'Tool execution completed']);
  assert.deepEqual(kinds(await call26('warning')), ['response'], 'info messages are below warning');
  // The same upstream call on an older revision relays them (info and above).
  const old = await call(url, 'Quiet_test_tool_with_logging');
  assert.equal(old.messages.filter((m) => m.method === 'notifications/message').length, 3);
});

describe('credentials', () => {
  test('static headers with $NAME expansion', async () => {
    const { url } = await mcpApp('Keyed', { url: ups.stateless.url, headers: { 'X-Team-Key': '$TEAM_KEY', 'X-Plain': 'literal-value' } });
    const seen = (await call(url, 'Keyed_headers')).json.result.structuredContent.headers;
    assert.equal(seen['x-team-key'], 'team-secret-123');
    assert.equal(seen['x-plain'], 'literal-value');
    const shown = await fg.console(`/apps/${(await fg.console('/apps')).json.data.find((a) => a.name === 'Keyed').id}`);
    assert.equal(shown.json.backend.headers['X-Team-Key'], '$TEAM_KEY');
    assert.equal(shown.json.backend.headers['X-Plain'], '***');
  });

  test('forwarded headers: deny on missing, passthrough when configured, unsafe values refused without echo, forwarded wins', async () => {
    const deny = await mcpApp('Forwarder', { url: ups.stateless.url, headers: { Authorization: 'Bearer static' }, forward_headers: { Authorization: 'X-User-Token' } });
    const missing = (await call(deny.url, 'Forwarder_headers')).json.result;
    assert.equal(missing.isError, true);
    assert.match(missing.content[0].text, /X-User-Token/);
    const ok = (await call(deny.url, 'Forwarder_headers', {}, undefined, { 'x-user-token': 'Bearer user-42' })).json.result;
    assert.equal(ok.structuredContent.headers.authorization, 'Bearer user-42', 'forwarded beats static');
    const bad = (await call(deny.url, 'Forwarder_headers', {}, undefined, { 'x-user-token': 'caf\u00e9-secret' })).json.result;
    assert.equal(bad.isError, true);
    assert.match(bad.content[0].text, /X-User-Token/);
    assert.ok(!bad.content[0].text.includes('secret'), 'the value is never echoed');
    const pass = await mcpApp('Passer', { url: ups.stateless.url, forward_headers: { 'X-Tenant': 'X-Tenant-Id' }, on_missing: 'passthrough' });
    const without = (await call(pass.url, 'Passer_headers')).json.result;
    assert.equal(without.isError, undefined);
    assert.equal(without.structuredContent.headers['x-tenant'], undefined);
  });

  test("tool lists use only static and OAuth credentials, never a client's forwarded headers; calls forward them", async () => {
    const forward = { forward_headers: { 'X-User-Token': 'X-User-Token' } };
    const plain = await mcpApp('Lister', { url: `${ups.stateless.url}?app=lister`, headers: { 'X-Team-Key': '$TEAM_KEY' }, ...forward });
    assert.equal((await list(plain.url, undefined, { 'x-user-token': 'user-secret-1' })).length, 13);
    const lists = ups.stateless.requests.filter((q) => q.path === '/mcp?app=lister' && q.body?.method === 'tools/list');
    assert.equal(lists.length, 1);
    assert.equal(lists[0].headers['x-team-key'], 'team-secret-123');
    assert.equal(lists[0].headers['x-user-token'], undefined);
    const seen = (await call(plain.url, 'Lister_headers', {}, undefined, { 'x-user-token': 'user-secret-1' })).json.result.structuredContent.headers;
    assert.equal(seen['x-user-token'], 'user-secret-1', 'a call forwards it');
    assert.equal(seen['x-team-key'], 'team-secret-123');

    const n = ups.oauth.requests.length;
    const guarded = await mcpApp('OAuthLister', {
      url: ups.oauth.url,
      oauth: { token_url: ups.oauth.tokenUrl, client_id: ups.oauth.clientId, client_secret: ups.oauth.clientSecret },
      ...forward,
    });
    assert.equal((await list(guarded.url, undefined, { 'x-user-token': 'user-secret-2' })).length, 13);
    const oauthLists = ups.oauth.requests.slice(n).filter((q) => q.body?.method === 'tools/list');
    assert.equal(oauthLists.length, 1);
    const token = oauthLists[0].headers.authorization?.replace(/^Bearer /, '');
    assert.ok(ups.oauth.issuedTokens.some((t) => t.access_token === token), 'the list was read with an issued OAuth token');
    assert.equal(oauthLists[0].headers['x-user-token'], undefined);
  });

  test('OAuth: the token is reused until near expiry, then refreshed once under concurrent calls', async () => {
    // Refreshed 60 s (the default skew) before it expires: 25 s after it was issued. The first
    // two calls must both fall in that window, which used to be 8 s and could close on a loaded
    // 2-core machine (two calls through wrangler, one with a 300 ms token fetch); 25 s is
    // ample, at the price of a longer wait below. Then the test waits for that moment itself,
    // read from the token endpoint's own record, with a margin (later is harmless: the token
    // is valid for 85 s).
    const LIFETIME_S = 85;
    const DUE_MS = (LIFETIME_S - 60) * 1000;
    ups.oauth.setExpiresIn(LIFETIME_S);
    ups.oauth.setTokenDelayMs(300);
    const { url } = await mcpApp('Guarded', {
      url: ups.oauth.url,
      oauth: { token_url: ups.oauth.tokenUrl, client_id: ups.oauth.clientId, client_secret: ups.oauth.clientSecret, scope: 'tools.read' },
    });
    const startCount = ups.oauth.tokenRequests.length;
    assert.equal((await call(url, 'Guarded_echo', { text: 'a' })).json.result.structuredContent.text, 'a');
    assert.equal((await call(url, 'Guarded_echo', { text: 'b' })).json.result.structuredContent.text, 'b');
    assert.equal(ups.oauth.tokenRequests.length - startCount, 1, 'one token for both calls');
    const issued = ups.oauth.tokenRequests[startCount];
    assert.ok(Date.now() < issued.answeredAt + DUE_MS, 'the first calls took longer than the token was fresh: the check above proved nothing');
    const due = issued.answeredAt + DUE_MS + 3000;
    await new Promise((r) => setTimeout(r, Math.max(0, due - Date.now())));
    const results = await Promise.all([1, 2, 3, 4, 5].map((i) => call(url, 'Guarded_echo', { text: `c${i}` })));
    assert.ok(results.every((r, i) => r.json.result.structuredContent.text === `c${i + 1}`));
    const grants = ups.oauth.tokenRequests.slice(startCount).map((t) => t.grant ?? t.form?.grant_type ?? t.body?.grant_type);
    assert.equal(grants.length, 2, `token requests: ${JSON.stringify(grants)}`);
    assert.equal(grants[1], 'refresh_token');
    ups.oauth.setExpiresIn(3600);
    ups.oauth.setTokenDelayMs(0);
  });
});

describe('task toolsets', () => {
  const TOOLSET = { name: 'reports', submit_tool: 'report_submit', status_tool: 'report_status', cancel_tool: 'report_cancel' };
  const V25 = V('2025-11-25');
  async function toolsetServer(name) {
    return mcpApp(name, { url: ups.toolsets.url, task_toolsets: [TOOLSET], poll_interval_seconds: 1 });
  }
  async function follow(url, taskId, done) {
    for (let i = 0; i < 80; i++) {
      const t = (await rpc(url, { jsonrpc: '2.0', id: 3, method: 'tasks/get', params: { taskId } }, V25)).json.result;
      if (done(t)) return t;
      await new Promise((r) => setTimeout(r, 250));
    }
    throw new Error('task never got there');
  }

  test('submit is a task-capable tool; status and cancel are hidden and driven by the task runner', async () => {
    const { url } = await toolsetServer('Reporter');
    const tools = await list(url, '2025-11-25');
    assert.deepEqual(tools.map((t) => t.name).sort(), ['Reporter_echo', 'Reporter_report_submit']);
    assert.equal(tools.find((t) => t.name === 'Reporter_report_submit').execution.taskSupport, 'required');
    const created = await rpc(url, { jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'Reporter_report_submit', arguments: { topic: 'Q3' }, task: { ttl: 600_000 } } }, V25);
    const taskId = created.json.result.task.taskId;
    const t = await follow(url, taskId, (x) => x.status !== 'working');
    assert.equal(t.status, 'completed');
    const r = await rpc(url, { jsonrpc: '2.0', id: 4, method: 'tasks/result', params: { taskId } }, V25);
    assert.deepEqual(r.json.result.structuredContent, { report: 'Q3 done' });
    assert.ok(ups.toolsets.toolCalls.report_status.length >= 1, 'the runner polled the status tool');
  });

  test('cancelling a toolset task calls its cancel tool', async () => {
    ups.toolsets.setScript([{ status: 'running' }]);
    const { url } = await toolsetServer('Canceller');
    const created = await rpc(url, { jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'Canceller_report_submit', arguments: { topic: 'never' }, task: { ttl: 600_000 } } }, V25);
    const taskId = created.json.result.task.taskId;
    await follow(url, taskId, () => (ups.toolsets.toolCalls.report_status ?? []).some((c) => c.arguments.task_id));
    await rpc(url, { jsonrpc: '2.0', id: 5, method: 'tasks/cancel', params: { taskId } }, V25);
    const t = await follow(url, taskId, (x) => x.status !== 'working');
    assert.equal(t.status, 'cancelled');
    assert.ok(ups.toolsets.toolCalls.report_cancel.length >= 1);
    ups.toolsets.setScript(null);
  });

  test("background polls use only the app's static credentials, never the submitting client's forwarded headers", async () => {
    const { url } = await mcpApp('Polled', {
      url: ups.toolsets.url,
      task_toolsets: [TOOLSET],
      poll_interval_seconds: 1,
      headers: { 'X-Team-Key': '$TEAM_KEY' },
      forward_headers: { 'X-User-Token': 'X-User-Token' },
    });
    const before = ups.toolsets.toolCalls.report_status.length;
    const created = await rpc(url, { jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'Polled_report_submit', arguments: { topic: 'creds' }, task: { ttl: 600_000 } } }, { ...V25, 'x-user-token': 'user-secret-3' });
    const t = await follow(url, created.json.result.task.taskId, (x) => x.status !== 'working');
    assert.equal(t.status, 'completed');
    const polls = ups.toolsets.toolCalls.report_status.slice(before);
    assert.ok(polls.length >= 1);
    for (const p of polls) {
      assert.equal(p.headers['x-team-key'], 'team-secret-123');
      assert.equal(p.headers['x-user-token'], undefined);
    }
  });

  test('the console refuses a tool bound to two roles', async () => {
    const r = await fg.console('/apps', { method: 'POST', body: { name: 'Broken', mode: 'mcp', backend: { url: ups.toolsets.url, task_toolsets: [{ name: 'x', submit_tool: 'a', status_tool: 'a', cancel_tool: 'c' }] } } });
    assert.equal(r.status, 400);
    assert.match(r.json.message, /task_toolsets\[0\]\.status_tool/);
  });
});

test('a stateless 2026-07-28 upstream: server/discover instead of initialize, _meta and Mcp-* headers on every request', async () => {
  const seen = [];
  const server = http.createServer(async (req, res) => {
    let raw = '';
    for await (const c of req) raw += c;
    const msg = JSON.parse(raw || '{}');
    seen.push({ method: msg.method, headers: req.headers, meta: msg.params?._meta });
    const send = (status, body) => { res.writeHead(status, { 'content-type': 'application/json' }); res.end(JSON.stringify(body)); };
    if (msg.method === 'initialize') return send(404, { jsonrpc: '2.0', id: msg.id, error: { code: -32601, message: 'Method not found: initialize' } });
    if (req.headers['mcp-protocol-version'] !== '2026-07-28' || msg.params?._meta?.['io.modelcontextprotocol/protocolVersion'] !== '2026-07-28') {
      return send(400, { jsonrpc: '2.0', id: msg.id, error: { code: -32022, message: 'version' } });
    }
    if (req.headers['mcp-method'] !== msg.method) return send(400, { jsonrpc: '2.0', id: msg.id, error: { code: -32020, message: 'header mismatch' } });
    const ok = (result) => send(200, { jsonrpc: '2.0', id: msg.id, result: { resultType: 'complete', ...result } });
    if (msg.method === 'server/discover') return ok({ supportedVersions: ['2026-07-28'], capabilities: { tools: {} }, ttlMs: 0, cacheScope: 'private' });
    if (msg.method === 'tools/list') return ok({ tools: [{ name: 'now', inputSchema: { type: 'object' } }], ttlMs: 0, cacheScope: 'private' });
    if (msg.method === 'tools/call') return ok({ content: [{ type: 'text', text: `it is ${msg.params.name} o'clock` }] });
    return send(404, { jsonrpc: '2.0', id: msg.id, error: { code: -32601, message: 'nope' } });
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  try {
    const { url } = await mcpApp('Modern', { url: `http://127.0.0.1:${server.address().port}/mcp` });
    const r = await call(url, 'Modern_now');
    assert.equal(r.json.result.content[0].text, "it is now o'clock", r.text);
    const callSeen = seen.find((s) => s.method === 'tools/call');
    assert.equal(callSeen.headers['mcp-name'], 'now');
    assert.ok(callSeen.meta['io.modelcontextprotocol/clientCapabilities']);
    assert.ok(seen.some((s) => s.method === 'server/discover'));
  } finally {
    server.closeAllConnections();
    server.close();
  }
});

test('SEP-2243: x-mcp-header arguments travel in Mcp-Param-* headers, checked from the client and sent upstream', async () => {
  const up = await startInputRequiredUpstream();
  try {
    const { url } = await mcpApp('Regional', { url: up.url });
    const meta = { 'io.modelcontextprotocol/protocolVersion': '2026-07-28', 'io.modelcontextprotocol/clientCapabilities': {} };
    const call26 = (region, headers) =>
      rpc(url, { jsonrpc: '2.0', id: 5, method: 'tools/call', params: { name: 'Regional_test_custom_header', arguments: { region }, _meta: meta } }, {
        'mcp-protocol-version': '2026-07-28',
        'mcp-method': 'tools/call',
        'mcp-name': 'Regional_test_custom_header',
        ...headers,
      });
    const upstreamCalls = () => up.requests.filter((r) => r.body.method === 'tools/call');

    // The header from the client is checked; the upstream gets the one Flowgate makes.
    let r = await call26('us-west1', { 'mcp-param-region': 'us-west1' });
    assert.equal(r.json.result?.content?.[0]?.text, 'region us-west1', r.text);
    assert.equal(upstreamCalls().at(-1).headers['mcp-param-region'], 'us-west1');
    r = await call26('Région ouest', { 'Mcp-Param-Region': '=?base64?UsOpZ2lvbiBvdWVzdA==?=' });
    assert.equal(r.json.result?.content?.[0]?.text, 'region Région ouest', r.text);
    assert.equal(upstreamCalls().at(-1).headers['mcp-param-region'], '=?base64?UsOpZ2lvbiBvdWVzdA==?=', 'non-ASCII goes base64-encoded');
    // A 2025 client sends no such headers; Flowgate still sends the upstream its own.
    r = await call(url, 'Regional_test_custom_header', { region: 'eu-north1' }, '2025-11-25');
    assert.equal(r.json.result?.content?.[0]?.text, 'region eu-north1', r.text);
    assert.equal(upstreamCalls().at(-1).headers['mcp-param-region'], 'eu-north1');

    // Missing, mismatched or badly encoded: -32020 with HTTP 400, and nothing goes upstream.
    const before = upstreamCalls().length;
    for (const [headers, message] of [
      [{}, /^Header mismatch: the Mcp-Param-Region header is required: arguments\.region is set \(send us-west1\)$/],
      [{ 'mcp-param-region': 'eu-west1' }, /^Header mismatch: the Mcp-Param-Region header \(eu-west1\) does not match arguments\.region \(us-west1\)$/],
      [{ 'mcp-param-region': '=?base64?dXMtd2VzdDE?=' }, /Mcp-Param-Region header is invalid: .*not valid base64/],
    ]) {
      r = await call26('us-west1', headers);
      assert.equal(r.status, 400, r.text);
      assert.equal(r.json.error?.code, -32020, r.text);
      assert.match(r.json.error.message, message);
    }
    assert.equal(upstreamCalls().length, before);
  } finally {
    await up.close();
  }
});

test('a multi-app server whose apps would expose the same tool name is refused', async () => {
  const a = await mcpApp('TwinA', { url: ups.stateless.url, tool_name_prefix: false });
  const b = await mcpApp('TwinB', { url: ups.stateless.url, tool_name_prefix: false });
  const refreshed = await fg.console(`/apps/${a.app.id}/tools/refresh`, { method: 'POST' });
  await fg.console(`/apps/${b.app.id}/tools/refresh`, { method: 'POST' });
  const r = await fg.console('/servers', { method: 'POST', body: { name: 'Clash', app_ids: [a.app.id, b.app.id] } });
  assert.equal(r.status, 400, r.text);
  assert.match(r.json.message, /both expose a tool named/);
  // The advice fits upstream apps without a prefix: the prefix or a deny entry, not a rename alone.
  assert.match(r.json.message, /set "tool_name_prefix": true on app 'TwinB'.* or add "[^"]+" to its denied_tools/);
  // A workflow app named like an upstream tool: that app can only be renamed.
  const [first] = refreshed.json.exposed_tools;
  assert.ok(first, refreshed.text);
  const namesake = await fg.console('/apps', { method: 'POST', body: { name: first, description: 'd', mode: 'http-tool', backend: { api_endpoint: 'https://tool.example.com/x' } } });
  assert.equal(namesake.status, 201, namesake.text);
  const clash = await fg.console('/servers', { method: 'POST', body: { name: 'Clash2', app_ids: [namesake.json.id, a.app.id] } });
  assert.equal(clash.status, 400, clash.text);
  assert.match(clash.json.message, /rename app '[^']+' \(its tool is named after it\)/);
  const prefixed = await mcpApp('TwinC', { url: ups.stateless.url });
  const ok = await fg.console('/servers', { method: 'POST', body: { name: 'NoClash', app_ids: [a.app.id, prefixed.app.id] } });
  assert.equal(ok.status, 201, ok.text);
});

const INIT_RESULT = { protocolVersion: '2025-06-18', capabilities: { tools: {} }, serverInfo: { name: 'adhoc', version: '1' } };

function reply(res, msg, result, headers = {}) {
  res.writeHead(200, { 'content-type': 'application/json', ...headers });
  res.end(JSON.stringify({ jsonrpc: '2.0', id: msg.id, result }));
}

/** A throwaway upstream on 127.0.0.1: handle(message, req, res) for each JSON-RPC POST; `seen` records the messages. */
async function adhocUpstream(handle) {
  const seen = [];
  const server = http.createServer(async (req, res) => {
    let raw = '';
    for await (const c of req) raw += c;
    if (req.method !== 'POST') return void res.writeHead(405, { allow: 'POST' }).end();
    const msg = JSON.parse(raw || '{}');
    seen.push(msg);
    handle(msg, req, res);
  });
  await new Promise((r) => server.listen(0, '127.0.0.1', r));
  return {
    url: `http://127.0.0.1:${server.address().port}/mcp`,
    seen,
    close: () => {
      server.closeAllConnections();
      return new Promise((r) => server.close(r));
    },
  };
}

test('tools_cache_ttl_seconds: once it has run out, the list is read from the upstream again', { timeout: 180_000 }, async () => {
  assert.ok(shortLived.url, 'the first test of this file did not run');
  assert.equal(ttlListings().length, 1, 'read again before the TTL ran out');
  // Until the expiry the cache recorded (whole seconds), plus a margin.
  const left = shortLived.expiration * 1000 + 1500 - Date.now();
  if (left > 0) await new Promise((r) => setTimeout(r, left));
  assert.equal((await list(shortLived.url)).length, 13);
  assert.equal(ttlListings().length, 2, 'the expired list was read from the upstream again');
});
