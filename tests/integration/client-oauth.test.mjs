// Client authentication mode `oauth`: Flowgate as an OAuth 2.1 resource server (the MCP
// authorization spec). The console route that configures a server's issuer; the RFC 9728
// protected resource metadata; the official TypeScript SDK client discovering the fake
// authorization server (tests/support/oauth-issuer.mjs) from the 401 and connecting with
// client_credentials and with authorization_code + PKCE; the token's `sub` as the backend `user`;
// every kind of bad token refused with the right status and WWW-Authenticate, before any backend
// work; the token never forwarded upstream; the JWKS refetched for a rotated-in kid (begun by the
// first test, finished by the last).
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ClientCredentialsProvider } from '@modelcontextprotocol/sdk/client/auth-extensions.js';
import { UnauthorizedError } from '@modelcontextprotocol/sdk/client/auth.js';

import { OWN_URL, startFlowgate } from '../support/harness.mjs';
import { startDifyFixture } from '../support/dify-fixture.mjs';
import { startUpstreams } from '../support/mcp-upstreams.mjs';
import { newKey, signJwt, startOAuthIssuer } from '../support/oauth-issuer.mjs';
import { publish, registerApp, rpc } from '../support/flowgate-setup.mjs';

const V = { 'mcp-protocol-version': '2025-06-18' };
const CLIENTS = { 'svc-client': { secret: 'svc-secret', sub: 'svc-robot' } };

let fg;
let dify;
let ups;
let as;

before(async () => {
  [fg, dify, ups, as] = await Promise.all([startFlowgate({ vars: { PUBLIC_URL: OWN_URL } }), startDifyFixture(), startUpstreams(), startOAuthIssuer({ clients: CLIENTS })]);
});

after(async () => {
  await Promise.allSettled([fg?.stop(), dify?.stop(), ups?.stop(), as?.stop()]);
});

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const setAuth = (serverId, body) => fg.console(`/servers/${serverId}/auth`, { method: 'PUT', body });
const bearer = (t) => ({ authorization: `Bearer ${t}` });
const ping = (url, headers = {}, id = 'ping-1') => rpc(url, { jsonrpc: '2.0', id, method: 'ping' }, { ...V, ...headers });
const callTool = (url, tool, headers = {}, id = 'call-1') =>
  rpc(url, { jsonrpc: '2.0', id, method: 'tools/call', params: { name: tool, arguments: { text: 'hello' } } }, { ...V, ...headers });

/** The metadata URL of a server's MCP URL (RFC 9728 §3.1: the well-known segment first). */
const metadataUrl = (mcpUrl) => {
  const u = new URL(mcpUrl);
  return `${u.origin}/.well-known/oauth-protected-resource${u.pathname}`;
};

/** A workflow app on the fake Dify, published, in mode oauth with `oauth` settings. */
async function oauthServer(name, oauth = {}, issuer = as) {
  const { app, apiKey } = await registerApp(fg, dify, { mode: 'workflow', name });
  const { server, url } = await publish(fg, app.id);
  const r = await setAuth(server.id, { mode: 'oauth', oauth: { issuer: issuer.issuer, ...oauth } });
  assert.equal(r.status, 200, r.text);
  return { server, url, apiKey, tool: name.replace(/[^A-Za-z0-9_.-]+/g, '_') };
}

/** The official SDK client with an auth provider. */
async function connect(url, authProvider) {
  const transport = new StreamableHTTPClientTransport(new URL(url), { authProvider });
  const client = new Client({ name: 'client-oauth-test', version: '1.0.0' });
  await client.connect(transport);
  return client;
}

/** An OAuthClientProvider for authorization_code + PKCE whose "browser" follows the auto-approving authorize URL. */
class AutoApproveProvider {
  constructor() {
    this.redirectUrl = 'http://127.0.0.1/callback';
    this.code = undefined;
  }
  get clientMetadata() {
    return { client_name: 'flowgate-oauth-test', redirect_uris: [this.redirectUrl], grant_types: ['authorization_code'], response_types: ['code'], token_endpoint_auth_method: 'none' };
  }
  clientInformation() { return this._client; }
  saveClientInformation(c) { this._client = c; }
  tokens() { return this._tokens; }
  saveTokens(t) { this._tokens = t; }
  saveCodeVerifier(v) { this._verifier = v; }
  codeVerifier() { return this._verifier; }
  async redirectToAuthorization(url) {
    const r = await fetch(url, { redirect: 'manual' });
    assert.equal(r.status, 302, await r.text());
    this.code = new URL(r.headers.get('location')).searchParams.get('code');
  }
}

function assertRefused(r, { status = 401, challenge, id, message }) {
  assert.equal(r.status, status, r.text);
  assert.equal(r.headers.get('www-authenticate'), challenge);
  assert.equal(r.json.jsonrpc, '2.0');
  assert.equal(r.json.id, id);
  assert.equal(r.json.error.code, -32600);
  if (message) assert.match(r.json.error.message, message);
}

// A kid rotated into an issuer's JWKS: the first half runs first, the second last, so the 30 s
// the Worker waits before fetching the JWKS again pass while the tests in between run.
const rotation = {};
after(async () => {
  await rotation.issuer?.stop();
});

test('a kid rotated into the JWKS is refused until the JWKS may be fetched again (at most once per 30 s)', async () => {
  const issuer = await startOAuthIssuer();
  rotation.issuer = issuer;
  const s = await oauthServer('Rotation', {}, issuer);
  assert.equal((await ping(s.url, bearer(issuer.mint({ aud: s.url, sub: 'a' })))).status, 200);
  assert.equal(issuer.counts.jwks, 1);
  const next = newKey('ES256', 'rotated-in');
  const rotated = issuer.mint({ aud: s.url, sub: 'b' }, { key: next });
  // Not published yet: refused, and the JWKS fetched just now is not fetched again.
  for (let i = 0; i < 3; i++) assert.equal((await ping(s.url, bearer(rotated), `early-${i}`)).status, 401);
  assert.equal(issuer.counts.jwks, 1, 'an unknown kid refetches at most once per 30 s');
  issuer.rotate(next);
  assert.equal((await ping(s.url, bearer(rotated))).status, 401, 'still within 30 s of the last fetch');
  Object.assign(rotation, { url: s.url, rotated, refusedAt: Date.now() });
});

describe('console', () => {
  test('PUT /servers/{id}/auth sets mode oauth with its issuer; GET and the server JSON show it', async () => {
    const { app } = await registerApp(fg, dify, { mode: 'workflow', name: 'Console oauth' });
    const { server } = await publish(fg, app.id);
    const r = await setAuth(server.id, { mode: 'oauth', oauth: { issuer: as.issuer, scopes: ['mcp:tools'], audience: 'api://flowgate' } });
    assert.equal(r.status, 200, r.text);
    const shown = { mode: 'oauth', oauth: { issuer: as.issuer, audience: 'api://flowgate', scopes: ['mcp:tools'], jwks_uri: null } };
    assert.deepEqual(r.json.auth, shown);
    assert.deepEqual((await fg.console(`/servers/${server.id}/auth`)).json, shown);
    assert.deepEqual((await fg.console(`/servers/${server.id}`)).json.auth, shown);
    const [row] = await fg.d1(`SELECT client_auth, oauth FROM mcp_servers WHERE id = '${server.id}'`);
    assert.equal(row.client_auth, 'oauth');
    assert.deepEqual(JSON.parse(row.oauth), { issuer: as.issuer, audience: 'api://flowgate', scopes: ['mcp:tools'] });
    // Back to none clears the settings.
    const back = await setAuth(server.id, { mode: 'none' });
    assert.deepEqual(back.json.auth, { mode: 'none' });
    const [cleared] = await fg.d1(`SELECT client_auth, oauth FROM mcp_servers WHERE id = '${server.id}'`);
    assert.deepEqual(cleared, { client_auth: 'none', oauth: null });
  });

  test('bad oauth settings get precise field errors and change nothing', async () => {
    const { app } = await registerApp(fg, dify, { mode: 'workflow', name: 'Bad oauth' });
    const { server } = await publish(fg, app.id);
    const fieldError = async (body, field, pattern) => {
      const r = await setAuth(server.id, body);
      assert.equal(r.status, 400, r.text);
      assert.equal(r.json.error, 'validation_failed');
      const e = r.json.errors.find((x) => x.field === field);
      assert.ok(e, r.text);
      assert.match(e.message, pattern);
    };
    await fieldError({ mode: 'oauth' }, 'oauth', /^is required with mode "oauth"/);
    await fieldError({ mode: 'oauth', oauth: {} }, 'oauth.issuer', /^is required: the authorization server's issuer URL/);
    await fieldError({ mode: 'oauth', oauth: { issuer: 'http://auth.example.com' } }, 'oauth.issuer', /must be an https:\/\/ URL/);
    await fieldError({ mode: 'oauth', oauth: { issuer: 'https://auth.example.com?tenant=1' } }, 'oauth.issuer', /query/);
    await fieldError({ mode: 'oauth', oauth: { issuer: 'https://auth.example.com', scopes: 'mcp' } }, 'oauth.scopes', /must be a list/);
    await fieldError({ mode: 'oauth', oauth: { issuer: 'https://auth.example.com', scopes: ['a b'] } }, 'oauth.scopes[0]', /is not a scope/);
    await fieldError({ mode: 'oauth', oauth: { issuer: 'https://auth.example.com', jwks_uri: 'nope' } }, 'oauth.jwks_uri', /http/);
    await fieldError({ mode: 'oauth', oauth: { issuer: 'https://auth.example.com', client_secret: 'x' } }, 'oauth.client_secret', /not an oauth field/);
    await fieldError({ mode: 'key', oauth: { issuer: 'https://auth.example.com' } }, 'oauth', /only for mode "oauth"/);
    await fieldError({ mode: 'oauht' }, 'mode', /"oauht" is not a mode; expected .*"oauth"/);
    assert.deepEqual((await fg.console(`/servers/${server.id}/auth`)).json, { mode: 'none' });
  });
});

describe('protected resource metadata (RFC 9728)', () => {
  test('served at the well-known path and beside the endpoint; 404 for servers without oauth', async () => {
    const s = await oauthServer('Metadata', { scopes: ['mcp:tools'] });
    const expected = {
      resource: s.url,
      authorization_servers: [as.issuer],
      scopes_supported: ['mcp:tools'],
      bearer_methods_supported: ['header'],
      resource_name: 'Metadata',
    };
    for (const u of [metadataUrl(s.url), s.url.replace(/\/mcp$/, '/.well-known/oauth-protected-resource')]) {
      const r = await fetch(u);
      assert.equal(r.status, 200, u);
      assert.equal(r.headers.get('access-control-allow-origin'), '*');
      assert.deepEqual(await r.json(), expected);
    }
    assert.equal((await setAuth(s.server.id, { mode: 'none' })).status, 200);
    const none = await fetch(metadataUrl(s.url));
    assert.equal(none.status, 404);
    assert.equal((await none.json()).error, 'not_found');
    const unknown = await fetch(metadataUrl(s.url.replace(/server\/[A-Za-z0-9]{16}/, 'server/AAAAAAAAAAAAAAAA')));
    assert.equal(unknown.status, 404);
  });
});

describe('the MCP endpoint', () => {
  test('the SDK client discovers the issuer from the 401 and connects with client_credentials; sub is the Dify user', async () => {
    const s = await oauthServer('SDK oauth');
    const provider = new ClientCredentialsProvider({ clientId: 'svc-client', clientSecret: 'svc-secret', expectedIssuer: as.issuer });
    const client = await connect(s.url, provider);
    try {
      const { tools } = await client.listTools();
      assert.deepEqual(tools.map((t) => t.name), [s.tool]);
      const result = await client.callTool({ name: s.tool, arguments: { text: 'from the sdk' } });
      assert.equal(result.isError, false, JSON.stringify(result));
    } finally {
      await client.close();
    }
    const token = provider.tokens()?.access_token;
    assert.ok(token, 'the SDK got a token');
    const claims = JSON.parse(Buffer.from(token.split('.')[1], 'base64url'));
    assert.equal(claims.aud, s.url, 'the SDK asked for the resource the metadata names (RFC 8707)');
    const runs = dify.requestsFor(s.apiKey).filter((r) => r.path === '/v1/workflows/run');
    assert.deepEqual(runs.map((r) => r.body.user), ['svc-robot']);
    const users = await fg.d1(`SELECT session_key FROM end_users WHERE server_id = '${s.server.id}'`);
    assert.deepEqual(users.map((u) => u.session_key), ['svc-robot']);
  });

  test('the SDK client connects with authorization_code + PKCE after dynamic registration', async () => {
    const s = await oauthServer('SDK code flow');
    const provider = new AutoApproveProvider();
    const first = new StreamableHTTPClientTransport(new URL(s.url), { authProvider: provider });
    await assert.rejects(new Client({ name: 'code-flow', version: '1.0.0' }).connect(first), UnauthorizedError);
    assert.ok(provider.code, 'the authorize URL was followed');
    await first.finishAuth(provider.code);
    const client = await connect(s.url, provider);
    try {
      const result = await client.callTool({ name: s.tool, arguments: { text: 'code flow' } });
      assert.equal(result.isError, false, JSON.stringify(result));
    } finally {
      await client.close();
    }
    const [run] = dify.requestsFor(s.apiKey).filter((r) => r.path === '/v1/workflows/run');
    assert.equal(run.body.user, `user-${provider.clientInformation().client_id}`);
  });

  test('RS256 and ES256 tokens are accepted; a verified token is remembered (no JWKS fetch per request)', async () => {
    const s = await oauthServer('Both algs');
    const rs = as.mint({ aud: s.url, sub: 'rs-user' });
    const es = as.mint({ aud: s.url, sub: 'es-user' }, { key: as.keys.ec });
    assert.equal((await ping(s.url, bearer(rs))).status, 200);
    assert.equal((await ping(s.url, bearer(es))).status, 200);
    const fetched = as.counts.jwks;
    for (let i = 0; i < 3; i++) assert.equal((await ping(s.url, bearer(rs), `again-${i}`)).status, 200);
    assert.equal(as.counts.jwks, fetched);
    const r = await callTool(s.url, s.tool, bearer(es));
    assert.equal(r.json.result?.isError, false, r.text);
    assert.equal(dify.requestsFor(s.apiKey).at(-1).body.user, 'es-user');
  });

  // Found by planting a bug: a remembered token accepted past its exp went unnoticed. A token
  // is accepted up to 60 s past exp (clock skew), so one minted 57 s past it is valid, verified
  // and remembered at once, and past the skew four seconds later: then it is refused, though
  // this isolate remembered it (the memo keeps its exp and judges every hit by it).
  test('a remembered token is refused once it has expired', async () => {
    const s = await oauthServer('Memo expiry');
    const meta = metadataUrl(s.url);
    const exp = Math.floor(Date.now() / 1000) - 57;
    const token = as.mint({ aud: s.url, sub: 'soon-gone', exp, iat: exp - 300 });
    for (let i = 0; i < 3; i++) assert.equal((await ping(s.url, bearer(token), `valid-${i}`)).status, 200, 'accepted, and remembered');
    await sleep((exp + 60 + 2) * 1000 - Date.now());
    assertRefused(await ping(s.url, bearer(token), 'expired'), {
      id: 'expired',
      challenge: `Bearer resource_metadata="${meta}", error="invalid_token", error_description="the token has expired"`,
      message: /^Unauthorized: /,
    });
    const before = dify.requestsFor(s.apiKey).length;
    assertRefused(await callTool(s.url, s.tool, bearer(token), 'expired-call'), {
      id: 'expired-call',
      challenge: `Bearer resource_metadata="${meta}", error="invalid_token", error_description="the token has expired"`,
    });
    assert.equal(dify.requestsFor(s.apiKey).length, before, 'no backend work');
  });

  test('bad tokens are refused with 401 invalid_token (403 insufficient_scope), before any backend work', async () => {
    const s = await oauthServer('Refusals');
    const scoped = await oauthServer('Scoped', { scopes: ['mcp:tools', 'read'] });
    const meta = metadataUrl(s.url);
    const now = Math.floor(Date.now() / 1000);
    const good = { aud: s.url, sub: 'mallory' };
    const invalid = (description) => `Bearer resource_metadata="${meta}", error="invalid_token", error_description="${description}"`;
    const forged = newKey('RS256', 'rsa-1'); // the issuer's kid, another key
    const tampered = (() => {
      const [h, , sig] = as.mint(good).split('.');
      const payload = Buffer.from(JSON.stringify({ iss: as.issuer, aud: s.url, sub: 'admin', exp: now + 300 })).toString('base64url');
      return `${h}.${payload}.${sig}`;
    })();
    const before = dify.requestsFor(s.apiKey).length;
    const usersBefore = await fg.d1(`SELECT COUNT(*) AS n FROM end_users WHERE server_id = '${s.server.id}'`);

    assertRefused(await callTool(s.url, s.tool, {}, 'none'), {
      id: 'none',
      challenge: `Bearer resource_metadata="${meta}"`,
      message: /requires an OAuth access token/,
    });
    assertRefused(await callTool(s.url, s.tool, { authorization: 'Basic YTpi' }, 'basic'), {
      id: 'basic',
      challenge: `Bearer resource_metadata="${meta}"`,
      message: /not a bearer token/,
    });
    const table = [
      ['wrong signature', signJwt({ iss: as.issuer, exp: now + 300, ...good }, { key: forged }), 'the token\'s signature does not verify'],
      ['tampered payload', tampered, 'the token\'s signature does not verify'],
      ['expired', as.mint({ ...good, exp: now - 120, iat: now - 400 }), 'the token has expired'],
      ['not yet valid', as.mint({ ...good, nbf: now + 300 }), 'the token is not valid yet (nbf)'],
      ['wrong audience', as.mint({ ...good, aud: scoped.url }), 'the token\'s audience is not this MCP server'],
      ['wrong issuer', as.mint({ ...good, iss: 'https://evil.example.com' }), 'the token was issued by another authorization server'],
      ['unknown kid', as.mint(good, { key: newKey('RS256', 'never-published') }), 'no key of the issuer\'s JWKS matches the token\'s kid'],
      ['alg none', as.mint(good, { alg: 'none' }), 'the token is not signed with RS256 or ES256'],
      ['HS256 with the public key', as.mint(good, { alg: 'HS256', hmacSecret: as.publicPem() }), 'the token is not signed with RS256 or ES256'],
      ['ES256 header on an RSA signature', as.mint(good, { header: { alg: 'ES256', kid: 'ec-1' } }), 'the token\'s signature does not verify'],
      ['not a JWT', 'fgk_' + 'Q'.repeat(32), 'the access token is not a JWT (header.payload.signature)'],
    ];
    for (const [what, token, description] of table) {
      const r = await callTool(s.url, s.tool, bearer(token), what);
      assertRefused(r, { id: what, challenge: invalid(description), message: /^Unauthorized: / });
      assert.ok(!r.text.includes(token), `${what}: the token is not echoed`);
    }
    // Required scopes: a signed token without them is 403, naming what to ask for.
    const scopedMeta = metadataUrl(scoped.url);
    const few = await callTool(scoped.url, scoped.tool, bearer(as.mint({ aud: scoped.url, sub: 'x', scope: 'read' })), 'scope');
    assertRefused(few, {
      status: 403,
      id: 'scope',
      challenge: `Bearer resource_metadata="${scopedMeta}", error="insufficient_scope", error_description="the token lacks a scope this MCP server requires", scope="mcp:tools read"`,
      message: /^Forbidden: /,
    });
    assertRefused(await ping(scoped.url, {}, 's0'), { id: 's0', challenge: `Bearer resource_metadata="${scopedMeta}", scope="mcp:tools read"` });
    assert.equal((await ping(scoped.url, bearer(as.mint({ aud: scoped.url, sub: 'x', scope: 'read mcp:tools' })))).status, 200);
    assert.equal((await ping(scoped.url, bearer(as.mint({ aud: scoped.url, sub: 'x', scp: ['read', 'mcp:tools'] })))).status, 200);
    // A forged token with a missing scope is 401 (the signature is checked first), not 403.
    const forgedFew = signJwt({ iss: as.issuer, exp: now + 300, aud: scoped.url, sub: 'x' }, { key: forged });
    assert.equal((await ping(scoped.url, bearer(forgedFew))).status, 401);

    assert.equal(dify.requestsFor(s.apiKey).length, before, 'no refused call reached Dify');
    const usersAfter = await fg.d1(`SELECT COUNT(*) AS n FROM end_users WHERE server_id = '${s.server.id}'`);
    assert.deepEqual(usersAfter, usersBefore, 'a refusal records no end user');
    // The good token works next to all that.
    assert.equal((await ping(s.url, bearer(as.mint(good)))).status, 200);
    // A token for one server does not open another.
    assert.equal((await ping(scoped.url, bearer(as.mint({ ...good, scope: 'mcp:tools read' })))).status, 401);
  });

  test('the SDK client without an auth provider gets the 401 and its message', async () => {
    const s = await oauthServer('No provider');
    const transport = new StreamableHTTPClientTransport(new URL(s.url));
    await assert.rejects(new Client({ name: 'x', version: '1' }).connect(transport), (e) => /401|OAuth access token/.test(String(e?.message ?? e)));
  });

  test('the bearer token is never forwarded to an upstream MCP server, even one that forwards Authorization', async () => {
    const r = await fg.console('/apps', {
      method: 'POST',
      body: { name: 'Fwd', mode: 'mcp', backend: { url: ups.stateless.url, forward_headers: { Authorization: 'Authorization', 'X-Team': 'X-Team' }, on_missing: 'passthrough' } },
    });
    assert.equal(r.status, 201, r.text);
    const { server, url } = await publish(fg, r.json.id);
    assert.equal((await setAuth(server.id, { mode: 'oauth', oauth: { issuer: as.issuer } })).status, 200);
    const token = as.mint({ aud: url, sub: 'forwarder' });
    const call = await rpc(url, { jsonrpc: '2.0', id: 5, method: 'tools/call', params: { name: 'Fwd_headers', arguments: {} } }, { ...V, ...bearer(token), 'x-team': 'blue' });
    const seen = call.json.result?.structuredContent?.headers;
    assert.ok(seen, call.text);
    assert.equal(seen.authorization, undefined);
    assert.equal(seen['x-team'], 'blue');
    assert.ok(!JSON.stringify(ups.stateless.requests.map((q) => q.headers)).includes(token.split('.')[2]), 'no upstream request carried the token');
  });

  test('a none server is unaffected by bearer tokens', async () => {
    const { app, apiKey } = await registerApp(fg, dify, { mode: 'workflow', name: 'Open oauth' });
    const { url } = await publish(fg, app.id);
    const r = await callTool(url, 'Open_oauth', { ...bearer(as.mint({ aud: url, sub: 'ignored' })), 'user-agent': 'open/1.0' }, 'open');
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.result.isError, false, r.text);
    const [run] = dify.requestsFor(apiKey).filter((x) => x.path === '/v1/workflows/run');
    assert.match(run.body.user, /^mcp-[0-9a-f]{24}$/);
    assert.equal((await ping(url, bearer('garbage'))).status, 200);
  });
});

test('no access token reaches the Worker\'s logs or its storage', async () => {
  const s = await oauthServer('Logged oauth');
  const good = as.mint({ aud: s.url, sub: 'logged-user' });
  const bad = as.mint({ aud: s.url, sub: 'logged-user', exp: Math.floor(Date.now() / 1000) - 600 });
  assert.equal((await callTool(s.url, s.tool, bearer(good), 'ok')).json.result?.isError, false);
  const r = await ping(s.url, bearer(bad), 'logged');
  assert.equal(r.status, 401);
  const requestId = r.headers.get('x-request-id');
  for (let i = 0; i < 100 && !fg.log().includes(requestId); i++) await sleep(100);
  const log = fg.log();
  assert.ok(log.includes(requestId), 'the refusal was logged');
  for (const token of [good, bad]) {
    const signature = token.split('.')[2];
    assert.ok(!log.includes(signature), 'a token is never logged');
    assert.deepEqual(fg.stateFilesContaining(signature), [], 'nor stored');
  }
});

test('a kid rotated into the JWKS is accepted after a refetch, at most one refetch per 30 s', async () => {
  const { issuer, url, rotated, refusedAt } = rotation;
  assert.ok(refusedAt, 'the first half (the first test of this file) did not run');
  await sleep(Math.max(0, refusedAt + 30_500 - Date.now()));
  assert.equal((await ping(url, bearer(rotated), 'late')).status, 200, 'refetched: the new kid is known');
  assert.equal(issuer.counts.jwks, 2);
});
