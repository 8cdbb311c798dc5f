// Flowgate's upstream OAuth with `backend.oauth.issuer` (discovery) and `backend.protocol_version`:
// the token endpoint found through the upstream's protected-resource metadata (RFC 9728) and the
// issuer's metadata (RFC 8414), client_secret_basic vs client_secret_post, the RFC 8707
// `resource`, a new token after the upstream's 401, and the rule that keeps the client secret
// safe: it goes only to the token endpoint of the configured issuer. A foreign authorization
// server (tests/support/oauth-issuer.mjs, which records every request) named by the upstream or
// by poisoned metadata gets nothing.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';

import { startFlowgate } from '../support/harness.mjs';
import { startUpstreams } from '../support/mcp-upstreams.mjs';
import { startOAuthIssuer } from '../support/oauth-issuer.mjs';
import { listenLoopback } from '../support/loopback-server.mjs';
import { publish, rpc } from '../support/flowgate-setup.mjs';

let fg;
let ups;
let foreign;
let gate;
let modern;

const SECRET = 'the-approved-secret';

/**
 * An upstream MCP server that always answers 401 with `resource_metadata`, whose metadata can be
 * set per test: `prm` (its protected-resource metadata) and `asMetadata` (what its origin serves
 * as authorization server metadata). Every request is recorded.
 */
async function startGate() {
  const state = { prm: null, asMetadata: null, requests: [] };
  const send = (res, status, body, headers = {}) => {
    res.writeHead(status, { 'content-type': 'application/json', ...headers });
    res.end(JSON.stringify(body));
  };
  const { server, port } = await listenLoopback(async (req, res) => {
    const chunks = [];
    for await (const c of req) chunks.push(c);
    state.requests.push({ method: req.method, path: req.url, headers: req.headers, raw: Buffer.concat(chunks).toString() });
    if (req.url === '/mcp') return send(res, 401, { error: 'invalid_token' }, { 'www-authenticate': `Bearer resource_metadata="${origin}/prm"` });
    if ((req.url === '/prm' || req.url.startsWith('/.well-known/oauth-protected-resource')) && state.prm) return send(res, 200, state.prm);
    if (req.url === '/.well-known/oauth-authorization-server' && state.asMetadata) return send(res, 200, state.asMetadata);
    return send(res, 404, { error: 'not_found' });
  }, (e) => ({ error: String(e) }));
  const origin = `http://127.0.0.1:${port}`;
  return { origin, url: `${origin}/mcp`, state, stop: () => new Promise((r) => { server.closeAllConnections?.(); server.close(() => r()); }) };
}

/** A 2026-07-28-only upstream (no initialize: 400), recording every POST {headers, body}. */
async function startModern() {
  const requests = [];
  const { server, port } = await listenLoopback(async (req, res) => {
    const chunks = [];
    for await (const c of req) chunks.push(c);
    const body = JSON.parse(Buffer.concat(chunks).toString() || '{}');
    requests.push({ headers: req.headers, body });
    const send = (status, b) => { res.writeHead(status, { 'content-type': 'application/json' }); res.end(JSON.stringify(b)); };
    const ok = (result) => send(200, { jsonrpc: '2.0', id: body.id, result: { resultType: 'complete', ...result } });
    if (body.method === 'server/discover') return ok({ supportedVersions: ['2026-07-28'], capabilities: { tools: {} } });
    if (body.method === 'tools/list') return ok({ tools: [{ name: 'now', inputSchema: { type: 'object' } }] });
    if (body.method === 'tools/call') return ok({ content: [{ type: 'text', text: body.params.name }] });
    return send(400, { jsonrpc: '2.0', id: body.id ?? null, error: { code: -32022, message: 'Unsupported protocol version', data: { supported: ['2026-07-28'] } } });
  }, (e) => ({ error: String(e) }));
  return { url: `http://127.0.0.1:${port}/mcp`, requests, stop: () => new Promise((r) => { server.closeAllConnections?.(); server.close(() => r()); }) };
}

before(async () => {
  [fg, ups, foreign, gate, modern] = await Promise.all([
    startFlowgate(),
    startUpstreams(),
    startOAuthIssuer({ clients: { approved: { secret: SECRET, sub: 'approved' } } }),
    startGate(),
    startModern(),
  ]);
});

after(async () => {
  await Promise.allSettled([fg?.stop(), ups?.stop(), foreign?.stop(), gate?.stop(), modern?.stop()]);
});

const V = { 'mcp-protocol-version': '2025-11-25' };

async function mcpApp(name, backend) {
  const r = await fg.console('/apps', { method: 'POST', body: { name, description: `${name} tools`, mode: 'mcp', backend } });
  assert.equal(r.status, 201, r.text);
  return { app: r.json, ...(await publish(fg, r.json.id)) };
}

const call = (url, name, args = {}) => rpc(url, { jsonrpc: '2.0', id: 2, method: 'tools/call', params: { name, arguments: args } }, V);
/** Why the app's upstream could not be listed (the console's refresh answers 422 with it). */
const listError = async (app) => {
  const r = await fg.console(`/apps/${app.id}/tools/refresh`, { method: 'POST' });
  assert.equal(r.status, 422, r.text);
  return r.json.message;
};

describe('discovery from backend.oauth.issuer', () => {
  test('finds the token endpoint, authenticates with client_secret_basic, sends resource, and calls', async () => {
    const o = ups.oauth;
    const n = o.tokenRequests.length;
    const { url } = await mcpApp('Discovered', { url: o.url, oauth: { issuer: new URL(o.url).origin, client_id: o.clientId, client_secret: o.clientSecret } });
    assert.equal((await call(url, 'Discovered_echo', { text: 'hi' })).json.result.structuredContent.text, 'hi');
    const reqs = o.tokenRequests.slice(n);
    assert.equal(reqs.length, 1, JSON.stringify(reqs));
    assert.equal(reqs[0].clientAuth, 'basic', 'the server lists client_secret_basic first among what Flowgate does');
    assert.equal(reqs[0].form.client_secret, undefined, 'the secret is not in the form as well');
    assert.equal(reqs[0].form.resource, o.url, 'RFC 8707 resource: the metadata resource as published');
    assert.equal(reqs[0].form.scope, 'tools.read', 'scope: the upstream scopes_supported when nothing else names one');
    assert.equal(reqs[0].grant, 'client_credentials');
  });

  test('token_endpoint_auth_method client_secret_post puts the credentials in the form', async () => {
    const o = ups.oauth;
    const n = o.tokenRequests.length;
    const { url } = await mcpApp('DiscoveredPost', {
      url: o.url,
      oauth: { issuer: new URL(o.url).origin, client_id: o.clientId, client_secret: o.clientSecret, token_endpoint_auth_method: 'client_secret_post' },
    });
    assert.equal((await call(url, 'DiscoveredPost_echo', { text: 'p' })).json.result.structuredContent.text, 'p');
    const [req] = o.tokenRequests.slice(n);
    assert.equal(req.clientAuth, 'form');
    assert.equal(req.form.client_secret, o.clientSecret);
  });

  test('a token the upstream stops accepting (401) is replaced once and the call goes through', async () => {
    const o = ups.oauth;
    const { url } = await mcpApp('Revoked', { url: o.url, oauth: { issuer: new URL(o.url).origin, client_id: o.clientId, client_secret: o.clientSecret } });
    assert.equal((await call(url, 'Revoked_echo', { text: 'a' })).json.result.structuredContent.text, 'a');
    const n = o.tokenRequests.length;
    o.revokeAll();
    assert.equal((await call(url, 'Revoked_echo', { text: 'b' })).json.result.structuredContent.text, 'b');
    const after = o.tokenRequests.slice(n);
    assert.equal(after.length, 1, `one new token after the 401: ${JSON.stringify(after.map((t) => t.grant))}`);
    assert.equal(after[0].grant, 'client_credentials', 'the refresh token went with the refused access token');
  });
});

describe('the client secret goes to the configured issuer only', () => {
  const foreignTokenRequests = () => foreign.requests.filter((r) => r.path === '/token');

  test('an upstream whose metadata names another authorization server is refused; that server gets nothing', async () => {
    gate.state.prm = { resource: gate.url, authorization_servers: [foreign.issuer] };
    gate.state.asMetadata = null;
    const before = foreign.requests.length;
    const { app } = await mcpApp('ForeignAs', { url: gate.url, oauth: { issuer: gate.origin, client_id: 'approved', client_secret: SECRET } });
    const err = await listError(app);
    assert.match(err, /not the configured backend\.oauth\.issuer/, err);
    assert.equal(foreign.requests.length, before, 'no request of any kind reached the foreign authorization server');
    assert.deepEqual(foreignTokenRequests(), []);
  });

  test('authorization server metadata naming another issuer is refused; its token endpoint gets nothing', async () => {
    gate.state.prm = { resource: gate.url, authorization_servers: [gate.origin] };
    // Poisoned: fetched from the approved issuer's well-known URL, but naming the foreign one and
    // pointing at its token endpoint.
    gate.state.asMetadata = { issuer: foreign.issuer, token_endpoint: `${foreign.issuer}/token`, token_endpoint_auth_methods_supported: ['client_secret_post'] };
    const before = foreign.requests.length;
    const { app } = await mcpApp('PoisonedAs', { url: gate.url, oauth: { issuer: gate.origin, client_id: 'approved', client_secret: SECRET } });
    const err = await listError(app);
    assert.match(err, /names the issuer .*not the configured/, err);
    assert.equal(foreign.requests.length, before);
    assert.ok(!gate.state.requests.some((r) => r.raw.includes(SECRET) || String(r.headers.authorization ?? '').startsWith('Basic')), 'the secret went nowhere');
  });

  test('protected-resource metadata for another resource is refused', async () => {
    gate.state.prm = { resource: 'https://evil.example/mcp', authorization_servers: [gate.origin] };
    gate.state.asMetadata = { issuer: gate.origin, token_endpoint: `${foreign.issuer}/token` };
    const before = foreign.requests.length;
    const { app } = await mcpApp('OtherResource', { url: gate.url, oauth: { issuer: gate.origin, client_id: 'approved', client_secret: SECRET } });
    assert.match(await listError(app), /not for this MCP server/);
    assert.equal(foreign.requests.length, before);
  });

  test('the settings are checked: token_url or issuer, not both; a known client authentication method', async () => {
    for (const [oauth, field, needle] of [
      [{ client_id: 'c', client_secret: 's' }, 'backend.oauth', /token_url .* or issuer/],
      [{ issuer: gate.origin, token_url: `${gate.origin}/token`, client_id: 'c', client_secret: 's' }, 'backend.oauth', /not both/],
      [{ issuer: 'as.example', client_id: 'c', client_secret: 's' }, 'backend.oauth.issuer', /http/],
      [{ issuer: gate.origin, client_id: 'c', client_secret: 's', token_endpoint_auth_method: 'private_key_jwt' }, 'backend.oauth', /client_secret_basic/],
    ]) {
      const r = await fg.console('/apps', { method: 'POST', body: { name: 'Bad', description: 'x', mode: 'mcp', backend: { url: gate.url, oauth } } });
      assert.equal(r.status, 400, r.text);
      assert.ok(r.json.errors.some((e) => e.field === field && needle.test(e.message)), r.text);
    }
  });
});

describe('backend.protocol_version', () => {
  test('pinned to 2026-07-28: no initialize, every POST carries the version header, _meta and Mcp-Method', async () => {
    const { url } = await mcpApp('Pinned', { url: modern.url, protocol_version: '2026-07-28' });
    const r = await call(url, 'Pinned_now');
    assert.equal(r.json.result?.content?.[0]?.text, 'now', r.text);
    const posts = modern.requests;
    assert.deepEqual(posts.map((p) => p.body.method), ['server/discover', 'tools/list', 'tools/call']);
    for (const p of posts) {
      assert.equal(p.headers['mcp-protocol-version'], '2026-07-28', p.body.method);
      assert.equal(p.headers['mcp-method'], p.body.method);
      const meta = p.body.params?._meta ?? {};
      assert.equal(meta['io.modelcontextprotocol/protocolVersion'], '2026-07-28', p.body.method);
      assert.ok(meta['io.modelcontextprotocol/clientInfo'] && meta['io.modelcontextprotocol/clientCapabilities'], p.body.method);
    }
    const apps = (await fg.console('/apps')).json.data;
    const shown = await fg.console(`/apps/${apps.find((a) => a.name === 'Pinned').id}`);
    assert.equal(shown.json.backend.protocol_version, '2026-07-28', 'the console shows the pin');
  });

  test('pinned to a 2025 revision: initialize offers that revision', async () => {
    const s = ups.stateful;
    const n = s.requests.length;
    const { url } = await mcpApp('Pinned0618', { url: s.url, protocol_version: '2025-06-18' });
    assert.equal((await call(url, 'Pinned0618_echo', { text: 'y' })).json.result.structuredContent.text, 'y');
    const init = s.requests.slice(n).find((r) => r.body?.method === 'initialize');
    assert.equal(init.body.params.protocolVersion, '2025-06-18');
  });

  test('a revision Flowgate does not speak, or 2026-07-28 over SSE, is refused with the field named', async () => {
    for (const [backend, needle] of [
      [{ url: gate.url, protocol_version: '2030-01-01' }, /not an MCP revision Flowgate speaks/],
      [{ url: gate.url, protocol_version: 20260728 }, /must be a string/],
      [{ url: gate.url, protocol_version: '2026-07-28', transport: 'sse' }, /Streamable HTTP only/],
    ]) {
      const r = await fg.console('/apps', { method: 'POST', body: { name: 'BadPin', description: 'x', mode: 'mcp', backend } });
      assert.equal(r.status, 400, r.text);
      assert.ok(r.json.errors.some((e) => e.field === 'backend.protocol_version' && needle.test(e.message)), r.text);
    }
  });
});
