// Flowgate's upstream OAuth with `backend.oauth.issuer` (discovery) and `backend.protocol_version`:
// the token endpoint found through the upstream's protected-resource metadata (RFC 9728) and the
// issuer's metadata (RFC 8414), client_secret_basic vs client_secret_post, the RFC 8707
// `resource`, a new token after the upstream's 401, and the rule that keeps the client secret
// safe: it goes only to the token endpoint of the configured issuer. A foreign authorization
// server (tests/support/oauth-issuer.mjs, which records every request) named by the upstream or
// by poisoned metadata gets nothing. private_key_jwt (RFC 7523): a token by a client assertion the
// issuer fixture verifies with the client's public key, a wrong key refused in words the admin can
// act on, the key checked when the app is stored; and the 403 insufficient_scope step-up against
// an upstream that demands a scope per tool.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { generateKeyPairSync, randomBytes, sign, verify } from 'node:crypto';

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
let jwtAs;
let guarded;

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

/**
 * A 2026-07-28 upstream whose tokens come from `as` (tests/support/oauth-issuer.mjs): its RFC 9728
 * metadata names `as`; a request needs a token `as` signed (else 401 with resource_metadata).
 * Tools: `now` (any valid token), `write` (403 insufficient_scope until the token's scope has
 * mcp:write), `never` (403 insufficient_scope for mcp:admin whatever the token). Records every
 * POST {method, tool, status, scope}.
 */
async function startGuarded(as) {
  const calls = [];
  let origin;
  const tokenScope = (authorization) => {
    const m = /^Bearer (.+)$/.exec(authorization ?? '');
    const parts = m?.[1].split('.') ?? [];
    if (parts.length !== 3) return null;
    const ok = verify('sha256', Buffer.from(`${parts[0]}.${parts[1]}`), as.keys.rsa.publicKey, Buffer.from(parts[2], 'base64url'));
    const claims = ok ? JSON.parse(Buffer.from(parts[1], 'base64url')) : null;
    return claims && claims.exp > Date.now() / 1000 ? String(claims.scope ?? '').split(' ').filter(Boolean) : null;
  };
  const { server, port } = await listenLoopback(async (req, res) => {
    const chunks = [];
    for await (const c of req) chunks.push(c);
    const send = (status, b, headers = {}) => { res.writeHead(status, { 'content-type': 'application/json', ...headers }); res.end(JSON.stringify(b)); };
    const prm = `${origin}/.well-known/oauth-protected-resource/mcp`;
    if (req.method === 'GET' && req.url === '/.well-known/oauth-protected-resource/mcp') {
      return send(200, { resource: `${origin}/mcp`, authorization_servers: [as.issuer], scopes_supported: ['mcp:tools'] });
    }
    if (req.method !== 'POST' || req.url !== '/mcp') return send(404, { error: 'not_found' });
    const body = JSON.parse(Buffer.concat(chunks).toString() || '{}');
    const scope = tokenScope(req.headers.authorization);
    const record = { method: body.method, tool: body.params?.name, scope, status: 200 };
    calls.push(record);
    const refuse = (status, challenge) => { record.status = status; send(status, { error: 'refused' }, { 'www-authenticate': challenge }); };
    if (!scope) return refuse(401, `Bearer error="invalid_token", resource_metadata="${prm}"`);
    const needs = { write: 'mcp:write', never: 'mcp:admin' }[record.tool];
    if (needs && (record.tool === 'never' || !scope.includes(needs))) {
      return refuse(403, `Bearer error="insufficient_scope", scope="${needs}", resource_metadata="${prm}"`);
    }
    const ok = (result) => send(200, { jsonrpc: '2.0', id: body.id, result: { resultType: 'complete', ...result } });
    if (body.method === 'server/discover') return ok({ supportedVersions: ['2026-07-28'], capabilities: { tools: {} } });
    const tools = ['now', 'write', 'never'].map((name) => ({ name, inputSchema: { type: 'object' } }));
    if (body.method === 'tools/list') return ok({ tools });
    if (body.method === 'tools/call') return ok({ content: [{ type: 'text', text: `${record.tool} with ${scope.join(' ')}` }] });
    return send(400, { jsonrpc: '2.0', id: body.id ?? null, error: { code: -32601, message: 'no such method' } });
  }, (e) => ({ error: String(e) }));
  origin = `http://127.0.0.1:${port}`;
  return { url: `${origin}/mcp`, calls, stop: () => new Promise((r) => { server.closeAllConnections?.(); server.close(() => r()); }) };
}

// The private_key_jwt clients: their keys are made here, the issuer knows only the public halves.
const ecKey = generateKeyPairSync('ec', { namedCurve: 'P-256' });
const rsaKey = generateKeyPairSync('rsa', { modulusLength: 2048 });
const otherEcKey = generateKeyPairSync('ec', { namedCurve: 'P-256' });
const pem = (k) => k.privateKey.export({ format: 'pem', type: 'pkcs8' }).toString();

before(async () => {
  [fg, ups, foreign, gate, modern, jwtAs] = await Promise.all([
    startFlowgate(),
    startUpstreams(),
    startOAuthIssuer({ clients: { approved: { secret: SECRET, sub: 'approved' } } }),
    startGate(),
    startModern(),
    startOAuthIssuer({
      clients: {
        'jwt-client': { publicKey: ecKey.publicKey, alg: 'ES256', sub: 'jwt-client' },
        'rsa-client': { publicKey: rsaKey.publicKey, alg: 'RS256', sub: 'rsa-client' },
      },
      scopesSupported: ['mcp:tools', 'mcp:write'],
    }),
  ]);
  guarded = await startGuarded(jwtAs);
});

after(async () => {
  await Promise.allSettled([fg?.stop(), ups?.stop(), foreign?.stop(), gate?.stop(), modern?.stop(), jwtAs?.stop(), guarded?.stop()]);
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
      [{ issuer: gate.origin, client_id: 'c', client_secret: 's', token_endpoint_auth_method: 'tls_client_auth' }, 'backend.oauth', /client_secret_basic, client_secret_post, private_key_jwt or none/],
      [{ issuer: gate.origin, client_id: 'c', client_secret: 's', token_endpoint_auth_method: 'private_key_jwt' }, 'backend.oauth', /private_key is required/],
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
    // The list is read in the app's own session, the call in the caller's: each discovers.
    assert.deepEqual(posts.map((p) => p.body.method), ['server/discover', 'tools/list', 'server/discover', 'tools/call']);
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

describe('private_key_jwt (RFC 7523 client assertions)', () => {
  const jwtApp = (name, oauth) =>
    mcpApp(name, { url: guarded.url, protocol_version: '2026-07-28', oauth: { issuer: jwtAs.issuer, ...oauth } });
  const callText = async (url, name) => {
    const r = await call(url, name);
    assert.equal(r.json.result?.isError, undefined, r.text);
    return r.json.result?.content?.[0]?.text;
  };
  const tokenPosts = () => jwtAs.requests.filter((r) => r.path === '/token');

  test('the fixture refuses a bad signature, a wrong aud, an expired or replayed assertion', async () => {
    const now = Math.floor(Date.now() / 1000);
    const assertion = (claims, key = ecKey.privateKey) => {
      const input = `${Buffer.from(JSON.stringify({ alg: 'ES256', typ: 'JWT' })).toString('base64url')}.${Buffer.from(JSON.stringify(claims)).toString('base64url')}`;
      return `${input}.${sign('sha256', Buffer.from(input), { key, dsaEncoding: 'ieee-p1363' }).toString('base64url')}`;
    };
    const good = { iss: 'jwt-client', sub: 'jwt-client', aud: jwtAs.issuer, iat: now, exp: now + 60 };
    const post = async (a) => {
      const body = new URLSearchParams({ grant_type: 'client_credentials', client_id: 'jwt-client', client_assertion_type: 'urn:ietf:params:oauth:client-assertion-type:jwt-bearer', client_assertion: a });
      const r = await fetch(`${jwtAs.issuer}/token`, { method: 'POST', body });
      return { status: r.status, body: await r.json() };
    };
    const jti = () => randomBytes(8).toString('hex');
    assert.equal((await post(assertion({ ...good, jti: jti() }))).status, 200, 'a good assertion gets a token');
    for (const [a, why] of [
      [assertion({ ...good, jti: jti() }, otherEcKey.privateKey), /signature/],
      [assertion({ ...good, aud: 'https://elsewhere.example', jti: jti() }), /aud/],
      [assertion({ ...good, iat: now - 120, exp: now - 60, jti: jti() }), /expired/],
      [assertion({ ...good, iss: 'someone', jti: jti() }), /iss and sub/],
    ]) {
      const r = await post(a);
      assert.equal(r.status, 401, JSON.stringify(r.body));
      assert.match(r.body.error_description, why);
    }
    const once = assertion({ ...good, jti: jti() });
    assert.equal((await post(once)).status, 200);
    assert.match((await post(once)).body.error_description, /jti/, 'a replayed assertion is refused');
  });

  test('ES256: a call through Flowgate gets its token by an assertion the issuer verifies', async () => {
    const n = jwtAs.assertions.length;
    const before = tokenPosts().length;
    const { app, url } = await jwtApp('JwtEs', { client_id: 'jwt-client', private_key: pem(ecKey), token_endpoint_auth_method: 'private_key_jwt' });
    assert.equal(await callText(url, 'JwtEs_now'), 'now with mcp:tools');
    const [checked] = jwtAs.assertions.slice(n);
    assert.equal(checked.error, undefined, JSON.stringify(checked));
    assert.deepEqual(checked.header, { alg: 'ES256', typ: 'JWT' }, 'ES256 chosen from the P-256 key');
    const c = checked.claims;
    assert.equal(c.iss, 'jwt-client');
    assert.equal(c.sub, 'jwt-client');
    assert.equal(c.aud, jwtAs.issuer, 'aud: the issuer identifier of the configured authorization server');
    assert.equal(c.exp - c.iat, 60, 'a short-lived assertion');
    assert.ok(Math.abs(c.iat - Date.now() / 1000) < 60, `iat is now: ${c.iat}`);
    assert.match(c.jti, /^[\w-]{16,}$/);
    const [req] = tokenPosts().slice(before);
    const form = new URLSearchParams(req.raw);
    assert.equal(form.get('client_assertion_type'), 'urn:ietf:params:oauth:client-assertion-type:jwt-bearer');
    assert.equal(form.get('client_secret'), null);
    assert.equal(req.headers.authorization, undefined, 'no Basic header either');
    assert.ok(!req.raw.includes('PRIVATE') && !req.raw.includes(pem(ecKey).split('\n')[1]), 'the key itself is never sent');
    // The console shows the key masked; "***" sent back keeps it.
    const shown = await fg.console(`/apps/${app.id}`);
    assert.equal(shown.json.backend.oauth.private_key, '***');
    assert.ok(!shown.text.includes(pem(ecKey).split('\n')[1]));
    const put = await fg.console(`/apps/${app.id}`, { method: 'PUT', body: { name: 'JwtEs', description: 'x', mode: 'mcp', backend: shown.json.backend } });
    assert.equal(put.status, 200, put.text);
  });

  test('RS256 with a key id: the header names it, and a step-up token is signed with a fresh jti', async () => {
    const n = jwtAs.assertions.length;
    const { url } = await jwtApp('JwtRs', { client_id: 'rsa-client', private_key: pem(rsaKey), signing_alg: 'RS256', key_id: 'rsa-2026' });
    assert.equal(await callText(url, 'JwtRs_now'), 'now with mcp:tools');
    // 403 insufficient_scope: one new token with the scope asked before plus mcp:write, then the call goes through.
    const calls = guarded.calls.length;
    assert.equal(await callText(url, 'JwtRs_write'), 'write with mcp:tools mcp:write');
    const writes = guarded.calls.slice(calls).filter((c) => c.tool === 'write');
    assert.deepEqual(writes.map((c) => c.status), [403, 200]);
    const checks = jwtAs.assertions.slice(n);
    assert.equal(checks.length, 2, JSON.stringify(checks));
    for (const ch of checks) {
      assert.equal(ch.error, undefined, ch.error);
      assert.deepEqual(ch.header, { alg: 'RS256', typ: 'JWT', kid: 'rsa-2026' });
    }
    assert.notEqual(checks[0].claims.jti, checks[1].claims.jti, 'the issuer would refuse a replayed jti');
  });

  test('a step-up that the upstream still refuses is retried once per request, not forever', async () => {
    const { url } = await jwtApp('JwtNever', { client_id: 'jwt-client', private_key: pem(ecKey) });
    assert.equal(await callText(url, 'JwtNever_now'), 'now with mcp:tools');
    for (let round = 1; round <= 2; round++) {
      const calls = guarded.calls.length;
      const tokens = jwtAs.assertions.length;
      const r = await call(url, 'JwtNever_never');
      const refused = r.json.result?.isError === true || r.json.error !== undefined;
      assert.ok(refused, `the refusal reaches the client: ${r.text}`);
      const nevers = guarded.calls.slice(calls).filter((c) => c.tool === 'never');
      assert.deepEqual(nevers.map((c) => c.status), [403, 403], `round ${round}: the first try and one retry`);
      assert.equal(jwtAs.assertions.length - tokens, 1, `round ${round}: one new token`);
    }
    const scopes = guarded.calls.filter((c) => c.tool === 'never').map((c) => c.scope?.join(' '));
    assert.ok(scopes.at(-1).includes('mcp:admin'), `the retry asked for the challenged scope: ${scopes}`);
  });

  test('a key the authorization server does not hold is refused with what to check', async () => {
    const n = jwtAs.assertions.length;
    const { app } = await jwtApp('JwtWrongKey', { client_id: 'jwt-client', private_key: pem(otherEcKey) });
    const err = await listError(app);
    assert.equal(jwtAs.assertions.slice(n)[0]?.error, 'signature verification failed');
    assert.match(err, /refused the request \(HTTP 401, invalid_client\)/, err);
    assert.match(err, /public half of backend\.oauth\.private_key for client 'jwt-client'/, err);
    assert.match(err, new RegExp(`ES256 assertions with aud '${jwtAs.issuer}'`), err);
    assert.ok(!err.includes('PRIVATE KEY') && !err.includes(pem(otherEcKey).split('\n')[1]), 'the key is never quoted');
  });

  test('the key is checked when the app is stored, and the errors name the field, never the key', async () => {
    const der = ecKey.privateKey.export({ format: 'der', type: 'pkcs8' });
    // The PKCS#8 wrapper intact, the EC key inside it zeroed: only WebCrypto's import can tell.
    const broken = Buffer.from(der);
    broken.fill(0, 36);
    const brokenPem = `-----BEGIN PRIVATE KEY-----\n${broken.toString('base64')}\n-----END PRIVATE KEY-----\n`;
    const sec1 = ecKey.privateKey.export({ format: 'pem', type: 'sec1' }).toString();
    for (const [oauth, needle] of [
      [{ private_key: 'not a key' }, /must start with -----BEGIN PRIVATE KEY-----/],
      [{ private_key: sec1 }, /EC PRIVATE KEY .*openssl pkcs8 -topk8/],
      [{ private_key: pem(ecKey), signing_alg: 'RS256' }, /is an EC P-256 key, but backend\.oauth\.signing_alg is RS256/],
      [{ private_key: pem(rsaKey), signing_alg: 'PS256' }, /signing_alg must be ES256 or RS256/],
      [{ private_key: brokenPem }, /could not be imported as an ES256 signing key/],
    ]) {
      const r = await fg.console('/apps', { method: 'POST', body: { name: 'BadKey', description: 'x', mode: 'mcp', backend: { url: guarded.url, oauth: { issuer: jwtAs.issuer, client_id: 'jwt-client', ...oauth } } } });
      assert.equal(r.status, 400, r.text);
      assert.ok(r.json.errors.some((e) => e.field.startsWith('backend.oauth') && needle.test(e.message)), r.text);
      assert.ok(!r.text.includes(broken.toString('base64').slice(0, 40)) && !r.text.includes(pem(ecKey).split('\n')[1]), r.text);
    }
    const both = await fg.console('/apps', { method: 'POST', body: { name: 'BadKey', description: 'x', mode: 'mcp', backend: { url: guarded.url, oauth: { issuer: jwtAs.issuer, client_id: 'c', client_secret: 's', private_key: pem(ecKey) } } } });
    assert.equal(both.status, 400);
    assert.match(both.text, /client_secret or private_key, not both/);
  });
});
