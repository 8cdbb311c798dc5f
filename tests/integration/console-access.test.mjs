// Cloudflare Access as a console sign-in (ACCESS_TEAM_DOMAIN, ACCESS_AUD, ACCESS_ROLE): the
// signed assertion Access adds to each request it lets through (Cf-Access-Jwt-Assertion) is the
// caller's identity. Access here is the OAuth issuer fixture, which publishes its keys at
// /cdn-cgi/access/certs as Access does and signs assertions with them.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { chromium } from 'playwright-core';

import { startFlowgate } from '../support/harness.mjs';
import { newKey, startOAuthIssuer } from '../support/oauth-issuer.mjs';
import { rpc } from '../support/flowgate-setup.mjs';

const AUD = 'access-aud-tag-0123456789abcdef';
const CHROMIUM = '/usr/bin/chromium';
const ARGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
  '--disable-background-networking', '--disable-component-update', '--disable-sync'];

let access;
let fg; // Access configured, Access users are publishers
let half; // only ACCESS_AUD set: misconfigured
const now = () => Math.floor(Date.now() / 1000);

before(async () => {
  access = await startOAuthIssuer();
  [fg, half] = await Promise.all([
    startFlowgate({ vars: { ACCESS_TEAM_DOMAIN: access.issuer, ACCESS_AUD: AUD, ACCESS_ROLE: 'publisher' } }),
    startFlowgate({ vars: { ACCESS_AUD: AUD } }),
  ]);
});

after(async () => {
  await Promise.allSettled([fg?.stop(), half?.stop(), access?.stop()]);
});

/** An assertion as Access signs it: its team domain as `iss`, the app's AUD tag as `aud`. */
const assertion = (claims = {}, opts = {}) => access.mint({ aud: [AUD], sub: 'user-uuid-1', email: 'ada@example.com', ...claims }, opts);
const asAccess = (inst, p, jwt, opts = {}) =>
  inst.console(p, { ...opts, token: null, headers: { 'cf-access-jwt-assertion': jwt, ...(opts.headers ?? {}) } });

describe('an Access assertion signs the caller in', () => {
  test('a valid assertion is the caller: its email, the ACCESS_ROLE role; writes are audited under it', async () => {
    const jwt = assertion();
    const index = await asAccess(fg, '/', jwt);
    assert.equal(index.status, 200, index.text);
    assert.deepEqual(index.json.caller, { actor: 'access:ada@example.com', role: 'publisher' });
    const created = await asAccess(fg, '/apps', jwt, {
      method: 'POST',
      body: { name: 'Via Access', mode: 'workflow', backend: { base_url: 'https://api.dify.ai/v1', api_key: 'k' } },
    });
    assert.equal(created.status, 201, created.text);
    const audit = (await fg.console('/audit?limit=20')).json.data;
    const entry = audit.find((e) => e.action === 'POST /apps' && e.status === 201);
    assert.equal(entry?.actor, 'access:ada@example.com', JSON.stringify(audit.slice(0, 3)));
    // A person without an email is named by the sub.
    const noEmail = await asAccess(fg, '/', assertion({ email: undefined, sub: 'user-uuid-7' }));
    assert.equal(noEmail.json.caller.actor, 'access:user-uuid-7');
  });

  test('a service token (empty sub, its Client ID in common_name) gets in with ACCESS_ROLE', async () => {
    // What Access signs for a request that presented CF-Access-Client-Id / CF-Access-Client-Secret.
    const svc = assertion({ email: undefined, sub: '', common_name: '88bf3b6d86161464f6509f7219099e57.access', type: 'app' });
    const index = await asAccess(fg, '/', svc);
    assert.equal(index.status, 200, index.text);
    assert.deepEqual(index.json.caller, { actor: 'access:88bf3b6d86161464f6509f7219099e57.access', role: 'publisher' });
    const created = await asAccess(fg, '/apps', svc, {
      method: 'POST',
      body: { name: 'Via a service token', mode: 'workflow', backend: { base_url: 'https://api.dify.ai/v1', api_key: 'k' } },
    });
    assert.equal(created.status, 201, created.text);
    // Neither a sub nor a common_name: nobody to name, refused.
    const nobody = await asAccess(fg, '/', assertion({ email: undefined, sub: '' }));
    assert.equal(nobody.status, 401, nobody.text);
    assert.match(nobody.json.message, /no usable sub claim/);
  });

  test('a GET that writes (…/refresh) is refused to Access callers, who use POST; token callers keep GET', async () => {
    const app = await fg.console('/apps', { method: 'POST', body: { name: 'Rotated', mode: 'workflow', backend: { base_url: 'https://api.dify.ai/v1', api_key: 'k' } } });
    assert.equal(app.status, 201, app.text);
    const server = await fg.console(`/apps/${app.json.id}/server`, { method: 'POST', body: {} });
    assert.equal(server.status, 201, server.text);
    const code = server.json.server_code;
    for (const p of [`/servers/${server.json.id}/refresh`, `/apps/${app.json.id}/server/refresh`]) {
      const r = await asAccess(fg, p, assertion());
      assert.equal(r.status, 405, `${p}: ${r.text}`);
      assert.equal(r.headers.get('allow'), 'POST');
      assert.match(r.json.message, /^GET is not allowed on .* for a caller signed in through Cloudflare Access .*: use POST/);
    }
    // The code was not rotated: its MCP URL still answers.
    const ping = await rpc(server.json.mcp_url, { jsonrpc: '2.0', id: 1, method: 'ping' }, { 'mcp-protocol-version': '2025-06-18' });
    assert.equal(ping.status, 200, ping.text);
    const posted = await asAccess(fg, `/servers/${server.json.id}/refresh`, assertion(), { method: 'POST' });
    assert.equal(posted.status, 200, posted.text);
    assert.notEqual(posted.json.server_code, code);
    const byToken = await fg.console(`/servers/${server.json.id}/refresh`);
    assert.equal(byToken.status, 200, byToken.text);
    assert.notEqual(byToken.json.server_code, posted.json.server_code);
  });

  test('the role is ACCESS_ROLE: an admin-only route is refused, naming the Access user', async () => {
    const r = await asAccess(fg, '/tokens', assertion(), { method: 'POST', body: { name: 'bot', role: 'viewer' } });
    assert.equal(r.status, 403, r.text);
    assert.match(r.json.message, /needs the admin role; Cloudflare Access user "ada@example.com" \(ACCESS_ROLE\) has the publisher role/);
  });

  test('bad assertions are refused with 401 saying why, and never reach a route', async () => {
    const cases = [
      ['another application (aud)', assertion({ aud: ['some-other-app'] }), /another Access application/],
      ['another team (iss)', assertion({ iss: 'https://evil.cloudflareaccess.com' }), /another Access team/],
      ['expired', assertion({ exp: now() - 3600, iat: now() - 7200 }), /expired/i],
      ['signed by another key', assertion({}, { key: newKey('RS256', 'rsa-1') }), /signature/i],
      ['not a JWT', 'not.a.jwt', /JWT|not/i],
    ];
    for (const [what, jwt, why] of cases) {
      const r = await asAccess(fg, '/apps', jwt);
      assert.equal(r.status, 401, `${what}: ${r.text}`);
      assert.match(r.json.message, /Cf-Access-Jwt-Assertion\) was refused/, what);
      assert.match(r.json.message, why, what);
    }
    // HS256 with the public key as the secret: refused before any key is looked at.
    const hs = assertion({}, { alg: 'HS256', hmacSecret: access.publicPem() });
    assert.equal((await asAccess(fg, '/apps', hs)).status, 401);
  });

  test('an Authorization header decides alone: a wrong token is not rescued by a valid assertion', async () => {
    const r = await fg.console('/apps', { token: 'wrong-token-of-the-right-length-0000000', headers: { 'cf-access-jwt-assertion': assertion() } });
    assert.equal(r.status, 401, r.text);
    assert.match(r.json.message, /admin token is not valid/);
    assert.equal((await fg.console('/apps')).status, 200, 'ADMIN_TOKEN still works');
  });

  test('half a configuration answers 503 saying what to set; without an assertion nothing changes', async () => {
    const r = await asAccess(half, '/apps', assertion());
    assert.equal(r.status, 503, r.text);
    assert.match(r.json.message, /ACCESS_AUD is set but ACCESS_TEAM_DOMAIN is not/);
    assert.equal((await half.console('/apps', { token: null })).status, 401);
    assert.equal((await half.console('/apps')).status, 200);
  });
});

test('the web console opens signed in behind Access, without asking for a token', async () => {
  assert.ok(fs.existsSync(CHROMIUM), `${CHROMIUM} is missing: run scripts/setup.sh --test-tools --test-tools`);
  const profile = fs.mkdtempSync(path.join(os.tmpdir(), 'flowgate-chromium-'));
  // The edge adds the assertion to every request Access lets through; here the browser does.
  const context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    args: ARGS,
    extraHTTPHeaders: { 'cf-access-jwt-assertion': assertion() },
  });
  const errors = [];
  try {
    const page = context.pages()[0] ?? (await context.newPage());
    page.on('pageerror', (e) => errors.push(e.message));
    page.on('console', (m) => m.type() === 'error' && errors.push(m.text()));
    await page.goto(`${fg.url}/console/`);
    await page.getByRole('heading', { name: 'Apps' }).waitFor({ timeout: 15_000 });
    assert.equal(await page.locator('input[name=token]').count(), 0, 'no token is asked for');
    assert.match(await page.locator('#sign-out').textContent(), /ada@example\.com/);
    // The app the Access user created is listed (the API calls carry the assertion too).
    await page.getByText('Via Access').first().waitFor({ timeout: 15_000 });
    assert.deepEqual(errors, []);
  } finally {
    await context.close();
    fs.rmSync(profile, { recursive: true, force: true });
  }
});
