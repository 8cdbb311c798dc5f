// Credentials and upstream sessions stay with the origin and the caller they belong to:
// - an mcp app whose `url` moves keeps no "***" credential, and the new host never receives the
//   OAuth token minted for the old one nor the old upstream's Mcp-Session-Id;
// - callers never share an upstream session (two client keys, two Flowgate sessions), while one
//   caller's repeated calls reuse its own;
// - a redirect to another origin keeps only content-type, accept and the MCP protocol headers,
//   for every backend kind (Dify, HTTP tool, upstream MCP with its session, OAuth bearer token,
//   static and forwarded headers).
//
// Two scripted backends on 127.0.0.1 (other ports, so other origins): `a` is where apps point,
// `b` another origin (the moved url, or the redirect's target).
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';

import { startFlowgate } from '../support/harness.mjs';
import { startHostileBackend } from '../support/hostile-backend.mjs';
import { publish, rpc } from '../support/flowgate-setup.mjs';

let fg;
let a;
let b;

before(async () => {
  [fg, a, b] = await Promise.all([
    startFlowgate({ vars: { ALLOW_PRIVATE_BACKENDS: '127.0.0.1' } }),
    startHostileBackend(),
    startHostileBackend(),
  ]);
});

after(async () => {
  await Promise.allSettled([fg?.stop(), a?.stop(), b?.stop()]);
});

const V = { 'mcp-protocol-version': '2025-06-18' };
const JSON_ONLY = { ...V, accept: 'application/json' };
let serial = 0;

/**
 * A minimal Streamable HTTP MCP server at `path` on `backend` with one tool, `whoami`, that
 * answers with the session it was called in. `sessions` maps each session id it issued to the
 * request headers of the initialize that opened it. `onCall(req, res, body)` may answer a
 * tools/call itself (return true).
 */
function mcpRoute(backend, path, { onCall, prefix = 's' } = {}) {
  const sessions = new Map();
  const url = backend.route(path, async (req, res, body) => {
    const reply = (result, headers = {}) => {
      res.writeHead(200, { 'content-type': 'application/json', ...headers });
      res.end(JSON.stringify({ jsonrpc: '2.0', id: body.id, result }));
    };
    if (body.method === 'initialize') {
      const sid = `${prefix}-${serial}-${sessions.size + 1}`;
      sessions.set(sid, req.headers);
      return reply({ protocolVersion: '2025-06-18', capabilities: { tools: {} }, serverInfo: { name: 'up', version: '1' } }, { 'mcp-session-id': sid });
    }
    if (!sessions.has(req.headers['mcp-session-id'])) {
      res.writeHead(404);
      return res.end();
    }
    if (body.id === undefined) {
      res.writeHead(202);
      return res.end();
    }
    if (body.method === 'tools/list') return reply({ tools: [{ name: 'whoami', inputSchema: { type: 'object' } }] });
    if (onCall && (await onCall(req, res, body))) return;
    return reply({ content: [{ type: 'text', text: req.headers['mcp-session-id'] }] });
  });
  return { url, sessions };
}

/** A token endpoint on `backend` minting `minted-N-1`, `minted-N-2`, … */
function tokenRoute(backend) {
  let n = 0;
  const path = `/token-${++serial}`;
  const prefix = `minted-${serial}`;
  return backend.route(path, async (_req, res) => {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ access_token: `${prefix}-${++n}`, token_type: 'Bearer', expires_in: 3600 }));
  });
}

const whoamiCall = (tool, id = 1) => ({ jsonrpc: '2.0', id, method: 'tools/call', params: { name: tool, arguments: {} } });

async function mcpApp(name, backend) {
  const r = await fg.console('/apps', { method: 'POST', body: { name, description: 'd', mode: 'mcp', backend } });
  assert.equal(r.status, 201, r.text);
  return r.json.id;
}

describe('a moved upstream url', () => {
  const setup = async () => {
    const name = `Moved${++serial}`;
    const tokenUrl = tokenRoute(a);
    const old = mcpRoute(a, `/mcp-old-${serial}`);
    const backend = (url, secret) => ({
      url,
      transport: 'streamable-http',
      headers: { 'X-Team-Key': secret === '***' ? '***' : 'team-secret' },
      oauth: { token_url: tokenUrl, client_id: 'flowgate', client_secret: secret },
    });
    const id = await mcpApp(name, backend(old.url, 'client-secret-value'));
    const { url } = await publish(fg, id, { description: 'd' });
    const put = (mcpUrl, secret) => fg.console(`/apps/${id}`, { method: 'PUT', body: { name, description: 'd', mode: 'mcp', backend: backend(mcpUrl, secret) } });
    // One call at the old upstream: a token is minted and a session opened there.
    const first = await rpc(url, whoamiCall(`${name}_whoami`), JSON_ONLY);
    assert.notEqual(first.json.result?.isError, true, first.text);
    const oldSession = first.json.result.content[0].text;
    const oldToken = old.sessions.get(oldSession).authorization;
    assert.match(oldToken, /^Bearer minted-\d+-1$/);
    return { name, url, put, oldSession, oldToken };
  };

  test('"***" for the OAuth secret is refused when url moves, even with token_url in place', async () => {
    const { put } = await setup();
    const elsewhere = mcpRoute(b, `/mcp-new-${serial}`);
    const moved = await put(elsewhere.url, '***');
    assert.equal(moved.status, 400, moved.text);
    assert.deepEqual(moved.json.errors.map((e) => e.field), ['backend.headers.X-Team-Key', 'backend.oauth.client_secret']);
    assert.match(moved.json.errors[1].message, /\(127\.0\.0\.1:\d+ → 127\.0\.0\.1:\d+\); send the credential again$/);
  });

  test('the new host never receives the old token or the old session id', async () => {
    const { name, url, put, oldSession, oldToken } = await setup();
    // An upstream that would answer any session it is sent, as a host collecting them would.
    const path = `/mcp-new-${serial}`;
    b.route(path, async (req, res, body) => {
      if (body.id === undefined) {
        res.writeHead(202);
        return res.end();
      }
      const result = body.method === 'initialize'
        ? { protocolVersion: '2025-06-18', capabilities: { tools: {} }, serverInfo: { name: 'b', version: '1' } }
        : body.method === 'tools/list'
          ? { tools: [{ name: 'whoami', inputSchema: { type: 'object' } }] }
          : { content: [{ type: 'text', text: 'at b' }] };
      res.writeHead(200, { 'content-type': 'application/json', 'mcp-session-id': 'b-session' });
      res.end(JSON.stringify({ jsonrpc: '2.0', id: body.id, result }));
    });
    const resent = await put(`${b.baseUrl}${path}`, 'client-secret-value');
    assert.equal(resent.status, 200, resent.text);
    const r = await rpc(url, whoamiCall(`${name}_whoami`), JSON_ONLY);
    assert.notEqual(r.json.result?.isError, true, r.text);
    const atB = b.requestsTo(path);
    assert.ok(atB.length > 0, 'the call went to the moved url');
    for (const q of atB) {
      assert.notEqual(q.headers.authorization, oldToken, `the old token reached the new host (${q.body?.method})`);
      assert.notEqual(q.headers['mcp-session-id'], oldSession, `the old session reached the new host (${q.body?.method})`);
    }
    // A token was minted anew for the new host.
    assert.match(atB.at(-1).headers.authorization, /^Bearer minted-\d+-2$/);
  });
});

describe('callers do not share upstream sessions', () => {
  test('two client keys get distinct upstream sessions; one key reuses its own', async () => {
    const name = `Keyed${++serial}`;
    const up = mcpRoute(a, `/mcp-keyed-${serial}`);
    const id = await mcpApp(name, { url: up.url, transport: 'streamable-http' });
    const { server, url } = await publish(fg, id, { description: 'd' });
    assert.equal((await fg.console(`/servers/${server.id}/auth`, { method: 'PUT', body: { mode: 'key' } })).status, 200);
    const key = async (n) => {
      const r = await fg.console(`/servers/${server.id}/keys`, { method: 'POST', body: { name: n } });
      assert.equal(r.status, 201, r.text);
      return r.json.key;
    };
    const [k1, k2] = [await key('client-one'), await key('client-two')];
    const whoami = async (k) => {
      const r = await rpc(url, whoamiCall(`${name}_whoami`), { ...JSON_ONLY, authorization: `Bearer ${k}` });
      assert.notEqual(r.json.result?.isError, true, r.text);
      return r.json.result.content[0].text;
    };
    const one = await whoami(k1);
    const two = await whoami(k2);
    assert.notEqual(one, two, 'two client keys share one upstream session');
    assert.equal(await whoami(k1), one);
    assert.equal(await whoami(k2), two);
    // The client key is Flowgate's credential: it never reaches the upstream.
    for (const q of a.requestsTo(`/mcp-keyed-${serial}`)) assert.equal(q.headers.authorization, undefined);
  });

  test('without client keys, two MCP sessions with Flowgate get distinct upstream sessions', async () => {
    const name = `Open${++serial}`;
    const up = mcpRoute(a, `/mcp-open-${serial}`);
    const id = await mcpApp(name, { url: up.url, transport: 'streamable-http' });
    const { url } = await publish(fg, id, { description: 'd' });
    const connect = async () => {
      const init = await rpc(url, { jsonrpc: '2.0', id: 0, method: 'initialize', params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'c', version: '1' } } }, JSON_ONLY);
      const sid = init.headers.get('mcp-session-id');
      assert.ok(sid, 'Flowgate gave no session id');
      return sid;
    };
    const whoami = async (sid) => {
      const r = await rpc(url, whoamiCall(`${name}_whoami`), { ...JSON_ONLY, 'mcp-session-id': sid });
      assert.notEqual(r.json.result?.isError, true, r.text);
      return r.json.result.content[0].text;
    };
    const [c1, c2] = [await connect(), await connect()];
    const one = await whoami(c1);
    const two = await whoami(c2);
    assert.notEqual(one, two, 'two clients share one upstream session');
    assert.equal(await whoami(c1), one);
    // Without a session with Flowgate, the address tells callers apart.
    const fromAddress = async (ip) => {
      const r = await rpc(url, whoamiCall(`${name}_whoami`), { ...JSON_ONLY, 'cf-connecting-ip': ip });
      assert.notEqual(r.json.result?.isError, true, r.text);
      return r.json.result.content[0].text;
    };
    const x = await fromAddress('198.51.100.7');
    assert.notEqual(x, await fromAddress('198.51.100.8'));
    assert.equal(await fromAddress('198.51.100.7'), x);
  });
});

describe('a redirect to another origin keeps only the allow list', () => {
  // What may follow a redirect to another origin, and what the runtime's fetch sets on every
  // hop by itself (not Flowgate's to keep or drop).
  const ALLOWED = new Set(['content-type', 'accept', 'mcp-protocol-version', 'mcp-method', 'mcp-name']);
  const TRANSPORT = new Set(['host', 'content-length', 'connection', 'accept-encoding', 'transfer-encoding', 'user-agent', 'cf-worker']);

  /** Every header Flowgate sent on the first hop that is not on the allow list is absent after it. */
  function assertOnlyAllowed(first, landed, mustDrop) {
    assert.ok(first && landed, 'both hops were made');
    for (const h of mustDrop) assert.ok(first.headers[h], `the first hop carried ${h}`);
    const leaked = Object.keys(landed.headers).filter((h) => !ALLOWED.has(h) && !TRANSPORT.has(h));
    assert.deepEqual(leaked, [], `headers that followed the redirect: ${leaked.join(', ')}`);
    for (const h of mustDrop) assert.equal(landed.headers[h], undefined, `${h} followed the redirect`);
  }

  const redirectTo = (landing) => async (_req, res) => {
    res.writeHead(307, { location: landing });
    res.end();
  };

  test('a Dify app', async () => {
    const path = `/v1-${++serial}`;
    const landing = b.route(`/dify-landing-${serial}`, async (_req, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ data: { status: 'succeeded', outputs: {} } }));
    });
    a.route(`${path}/workflows/run`, redirectTo(landing));
    const r = await fg.console('/apps', {
      method: 'POST',
      body: { name: `Flow${serial}`, mode: 'workflow', backend: { base_url: a.baseUrl + path, api_key: 'app-dify-key' }, user_input_form: [] },
    });
    assert.equal(r.status, 201, r.text);
    const { url } = await publish(fg, r.json.id, { description: 'd' });
    await rpc(url, whoamiCall(`Flow${serial}`), V);
    const [first] = a.requestsTo(`${path}/workflows/run`);
    const [landed] = b.requestsTo(new URL(landing).pathname);
    assertOnlyAllowed(first, landed, ['authorization']);
    assert.equal(landed.headers['content-type'], 'application/json');
  });

  test('an HTTP tool', async () => {
    const landing = b.route(`/tool-landing-${++serial}`, async (_req, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ answer: 'landed' }));
    });
    const first = a.route(`/tool-${serial}`, redirectTo(landing));
    const manifest = { name: 'probe', description: 'A probe', parameters: [{ name: 'q', type: 'string', required: false, form: 'llm' }] };
    const r = await fg.console('/apps', {
      method: 'POST',
      body: { name: `Tool${serial}`, description: 'd', mode: 'http-tool', backend: { api_endpoint: first, api_key: 'tool-key-123', manifest } },
    });
    assert.equal(r.status, 201, r.text);
    const { url } = await publish(fg, r.json.id, { description: 'd' });
    const res = await rpc(url, { jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: `Tool${serial}`, arguments: { q: 'hi' } } }, JSON_ONLY);
    assert.equal(res.json.result?.isError, false, res.text);
    assertOnlyAllowed(a.requestsTo(new URL(first).pathname)[0], b.requestsTo(new URL(landing).pathname)[0], ['authorization']);
  });

  test('an upstream MCP server: its session id, OAuth token, static and forwarded headers stay behind', async () => {
    const name = `Redir${++serial}`;
    const landingPath = `/mcp-landing-${serial}`;
    const landing = b.route(landingPath, async (_req, res, body) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ jsonrpc: '2.0', id: body.id, result: { content: [{ type: 'text', text: 'landed' }] } }));
    });
    const path = `/mcp-redirecting-${serial}`;
    const up = mcpRoute(a, path, { onCall: async (req, res) => (await redirectTo(landing)(req, res), true) });
    const id = await mcpApp(name, {
      url: up.url,
      transport: 'streamable-http',
      headers: { 'X-Team-Key': 'team-secret' },
      forward_headers: { 'X-User-Token': 'X-User-Token' },
      oauth: { token_url: tokenRoute(a), client_id: 'flowgate', client_secret: 'client-secret-value' },
    });
    const { url } = await publish(fg, id, { description: 'd' });
    const r = await rpc(url, whoamiCall(`${name}_whoami`), { ...JSON_ONLY, 'x-user-token': 'user-token-1' });
    assert.notEqual(r.json.result?.isError, true, r.text);
    const first = a.requestsTo(path).find((q) => q.body?.method === 'tools/call');
    const [landed] = b.requestsTo(landingPath);
    assertOnlyAllowed(first, landed, ['mcp-session-id', 'authorization', 'x-team-key', 'x-user-token']);
    // The protocol headers did follow.
    assert.equal(landed.headers['mcp-protocol-version'], '2025-06-18');
    assert.match(landed.headers.accept, /text\/event-stream/);
  });
});
