// Console hardening, round 2: admin authentication (the Bearer scheme in any case, the RFC 6750
// challenge, failed attempts throttled per client address, a too-short ADMIN_TOKEN refused),
// credentials that do not follow a backend to another origin, `$NAME` references (denied unless
// SECRET_REF_PREFIX or SECRET_REF_NAMES allows them, never to Flowgate's own configuration),
// sealed values never taken from the console, PUBLIC_URL, bounded quoting of client input, and
// server codes masked in log lines whatever the spelling of the path.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';

import { startFlowgate, startOfRateWindow } from '../support/harness.mjs';
import { startDifyFixture } from '../support/dify-fixture.mjs';
import { publish, registerApp, rpc } from '../support/flowgate-setup.mjs';

const PUBLIC_URL = 'https://flowgate.example.com';
const AUTH_LIMIT = 3;
const PREFIXED_KEY = 'app-prefixed-literal-key-77';
const OTHER_SECRET = 'value-of-a-secret-outside-the-prefix';
const LISTED_KEY = 'app-listed-by-name-key-58';

let fg; // ADMIN_AUTH_LIMIT of 3 a minute, every request logged, PUBLIC_URL (with a trailing slash)
let pre; // SECRET_REF_PREFIX=BACKEND_, SECRET_REF_NAMES=LISTED_KEY, no PUBLIC_URL
let dify;

// The single-use instance of a later test, started beside the others (the test awaits it and
// stops it; after() stops it when a filtered run never used it).
let shortTokenStarting;
const SHORT_ADMIN_TOKEN = 'short-admin-token-31-characters';

before(async () => {
  shortTokenStarting = startFlowgate({ adminToken: SHORT_ADMIN_TOKEN });
  shortTokenStarting.catch(() => {}); // reported by the test that awaits it
  [fg, pre, dify] = await Promise.all([
    startFlowgate({
      vars: { LOG_REQUESTS: 'all', PUBLIC_URL: `${PUBLIC_URL}/` },
      configure: (toml) => {
        const from = 'simple = { limit = 10, period = 60 }';
        assert.ok(toml.includes(from), 'wrangler.toml has the ADMIN_AUTH_LIMIT binding');
        return toml.replace(from, `simple = { limit = ${AUTH_LIMIT}, period = 60 }`);
      },
    }),
    startFlowgate({
      vars: { SECRET_REF_PREFIX: 'BACKEND_', SECRET_REF_NAMES: 'LISTED_KEY', BACKEND_DIFY_KEY: PREFIXED_KEY, OTHER_KEY: OTHER_SECRET, LISTED_KEY },
    }),
    startDifyFixture(),
  ]);
});

after(async () => {
  await Promise.allSettled([fg?.stop(), pre?.stop(), dify?.stop(), shortTokenStarting?.then((inst) => inst.stop())]);
});

// Each test that fails authentication uses addresses of its own, so budgets do not mix.
let lastIp = 0;
const freshIp = () => `198.51.100.${++lastIp}`;

/** GET /console/api/apps with a raw Authorization header (or none) from `ip`. */
const asClient = (inst, authorization, ip = freshIp()) =>
  inst.console('/apps', {
    token: null,
    headers: { ...(authorization === undefined ? {} : { authorization }), 'cf-connecting-ip': ip },
  });

function assertJsonError(r, status, code, message) {
  assert.equal(r.status, status, `${r.status} ${r.text}`);
  assert.match(r.headers.get('content-type') ?? '', /^application\/json/);
  assert.equal(r.json?.error, code, r.text);
  if (message instanceof RegExp) assert.match(r.json.message, message);
  else if (message !== undefined) assert.equal(r.json.message, message);
}

const workflow = (backend, extra = {}) => ({ name: 'Guarded', mode: 'workflow', backend, ...extra });

describe('admin authentication', () => {
  test('the Bearer scheme is matched in any case, with any number of spaces after it', async () => {
    for (const scheme of ['Bearer ', 'bearer ', 'BEARER ', 'bEaReR ', 'Bearer     ', 'bearer\t ']) {
      const r = await asClient(fg, `${scheme}${fg.adminToken}`);
      assert.equal(r.status, 200, `${JSON.stringify(scheme)}: ${r.text}`);
    }
  });

  test('every 401 carries an RFC 6750 challenge; invalid_token only when a token was sent', async () => {
    const none = await asClient(fg, undefined);
    assertJsonError(none, 401, 'unauthorized', 'send the admin token as `Authorization: Bearer <ADMIN_TOKEN>`');
    assert.equal(none.headers.get('www-authenticate'), 'Bearer realm="flowgate-console"');

    const basic = await asClient(fg, 'Basic YWRtaW46YWRtaW4=');
    assertJsonError(basic, 401, 'unauthorized', /not a bearer token/);
    assert.equal(basic.headers.get('www-authenticate'), 'Bearer realm="flowgate-console"');

    const wrong = await asClient(fg, 'Bearer wrong-token');
    assertJsonError(wrong, 401, 'unauthorized', 'the admin token is not valid');
    assert.equal(wrong.headers.get('www-authenticate'), 'Bearer realm="flowgate-console", error="invalid_token"');

    // A prefix of the real token is just as wrong.
    const prefix = await asClient(fg, `Bearer ${fg.adminToken.slice(0, -1)}`);
    assert.equal(prefix.status, 401);
  });

  test('failed attempts are throttled per client address: 429 with Retry-After, then 401 elsewhere', async () => {
    await startOfRateWindow();
    // wrangler dev (miniflare) keeps a CF-Connecting-IP the client sends and sets it only when it
    // is absent, so the tests can speak for several addresses. On Cloudflare's network the edge
    // overwrites it with the real client address.
    const [a, b] = [freshIp(), freshIp()];
    const statuses = [];
    for (let i = 0; i < AUTH_LIMIT; i++) statuses.push((await asClient(fg, 'Bearer guess', a)).status);
    assert.deepEqual(statuses, Array(AUTH_LIMIT).fill(401));
    const limited = await asClient(fg, 'Bearer guess', a);
    assertJsonError(
      limited,
      429,
      'too_many_attempts',
      'too many failed admin token attempts from this address; retry after 60 s with the right token',
    );
    assert.equal(limited.headers.get('retry-after'), '60');
    assert.ok(!limited.text.includes(fg.adminToken));

    // Another address has its own budget.
    assert.equal((await asClient(fg, 'Bearer guess', b)).status, 401);
    // Only failures are counted: the right token still works from the throttled address, and a
    // request without a token is not a guess.
    assert.equal((await asClient(fg, `Bearer ${fg.adminToken}`, a)).status, 200);
    assert.equal((await asClient(fg, undefined, a)).status, 401);
  });

  test('an ADMIN_TOKEN shorter than 32 characters turns the console off with 503', async () => {
    const short = SHORT_ADMIN_TOKEN;
    assert.equal(short.length, 31);
    const inst = await shortTokenStarting;
    try {
      for (const token of [short, null, 'anything-else']) {
        const r = await inst.console('/apps', { token });
        assertJsonError(
          r,
          503,
          'console_disabled',
          'the console is disabled: the ADMIN_TOKEN secret is shorter than 32 characters, too short to resist ' +
            'guessing; generate one with `openssl rand -hex 32` and set it with `wrangler secret put ADMIN_TOKEN` ' +
            '(in .dev.vars for local development)',
        );
        assert.ok(!r.text.includes(short) && !r.text.includes('31'), r.text);
      }
      // The rest of the Worker runs.
      assert.equal((await inst.fetchJson('/healthz')).status, 200);
    } finally {
      await inst.stop();
    }
  });
});

describe('credentials and origins', () => {
  const otherHost = () => dify.baseUrl.replace('127.0.0.1', 'localhost');
  const port = () => new URL(dify.baseUrl).port;

  test('"***" is refused when the backend moves to another origin; sending the key again works', async () => {
    const created = await fg.console('/apps', { method: 'POST', body: workflow({ base_url: dify.baseUrl, api_key: 'app-moving-key-1' }) });
    assert.equal(created.status, 201, created.text);
    const id = created.json.id;
    const [before] = await fg.d1(`SELECT backend FROM apps WHERE id = '${id}'`);

    const moved = await fg.console(`/apps/${id}`, { method: 'PUT', body: workflow({ base_url: otherHost(), api_key: '***' }) });
    assertJsonError(moved, 400, 'validation_failed');
    assert.deepEqual(moved.json.errors, [
      {
        field: 'backend.api_key',
        message: `the backend's origin changed (127.0.0.1:${port()} → localhost:${port()}); send the credential again`,
      },
    ]);
    const [unchanged] = await fg.d1(`SELECT backend FROM apps WHERE id = '${id}'`);
    assert.equal(unchanged.backend, before.backend);

    const resent = await fg.console(`/apps/${id}`, { method: 'PUT', body: workflow({ base_url: otherHost(), api_key: 'app-moving-key-2' }) });
    assert.equal(resent.status, 200, resent.text);
    assert.equal(resent.json.backend.base_url, otherHost());
    assert.equal(resent.json.backend.api_key, '***');
  });

  test('"***" keeps the stored key when only the path changes', async () => {
    const created = await fg.console('/apps', { method: 'POST', body: workflow({ base_url: dify.baseUrl, api_key: 'app-staying-key' }) });
    const id = created.json.id;
    const [before] = await fg.d1(`SELECT backend FROM apps WHERE id = '${id}'`);
    const r = await fg.console(`/apps/${id}`, { method: 'PUT', body: workflow({ base_url: `${dify.baseUrl}/other/`, api_key: '***' }) });
    assert.equal(r.status, 200, r.text);
    const [after] = await fg.d1(`SELECT backend FROM apps WHERE id = '${id}'`);
    assert.equal(JSON.parse(after.backend).api_key, JSON.parse(before.backend).api_key);
    assert.equal(JSON.parse(after.backend).base_url, `${dify.baseUrl}/other`);
  });

  test('MCP headers follow the upstream URL and OAuth secrets follow the token URL', async () => {
    const backend = (url, tokenUrl, secret) => ({
      url,
      headers: { 'X-Team-Key': secret },
      oauth: { token_url: tokenUrl, client_id: 'flowgate', client_secret: secret },
    });
    const created = await fg.console('/apps', {
      method: 'POST',
      body: { name: 'Upstream', mode: 'mcp', backend: backend('http://127.0.0.1:9/mcp', 'http://127.0.0.1:9/token', 'literal-upstream-secret') },
    });
    assert.equal(created.status, 201, created.text);
    const put = (b) => fg.console(`/apps/${created.json.id}`, { method: 'PUT', body: { name: 'Upstream', mode: 'mcp', backend: b } });
    const moved = await put(backend('http://localhost:9/mcp', 'http://localhost:9/token', '***'));
    assertJsonError(moved, 400, 'validation_failed');
    assert.deepEqual(moved.json.errors.map((e) => e.field), ['backend.headers.X-Team-Key', 'backend.oauth.client_secret']);
    assert.match(moved.json.errors[1].message, /\(127\.0\.0\.1:9 → localhost:9\); send the credential again$/);
    assert.equal((await put(backend('http://127.0.0.1:9/v2/mcp', 'http://127.0.0.1:9/oauth/token', '***'))).status, 200);
  });

  test('an HTTP tool key does not follow a status endpoint to another origin', async () => {
    const backend = (status, key) => ({
      api_endpoint: 'http://127.0.0.1:9/run',
      api_key: key,
      async: { status_endpoint: status, cancel_endpoint: 'http://127.0.0.1:9/cancel' },
    });
    const created = await fg.console('/apps', { method: 'POST', body: { name: 'Tool', mode: 'http-tool', backend: backend('http://127.0.0.1:9/status', 'tool-key') } });
    assert.equal(created.status, 201, created.text);
    const r = await fg.console(`/apps/${created.json.id}`, {
      method: 'PUT',
      body: { name: 'Tool', mode: 'http-tool', backend: backend('http://localhost:9/status', '***') },
    });
    assertJsonError(r, 400, 'validation_failed', "backend.api_key: the backend's origin changed (127.0.0.1:9 → localhost:9); send the credential again");
  });
});

describe("references to Flowgate's own configuration", () => {
  const own = (name) => new RegExp(`^backend\\.[\\w.-]+: refers to \\$${name}, which is Flowgate's own configuration and is never sent to a backend`);

  test('$ADMIN_TOKEN, $SECRETS_KEY and the bindings are refused when an app is stored', async () => {
    for (const name of ['ADMIN_TOKEN', 'SECRETS_KEY', 'SECRETS_KEY_PREVIOUS', 'DB', 'ADMIN_AUTH_LIMIT']) {
      const r = await fg.console('/apps', { method: 'POST', body: workflow({ base_url: dify.baseUrl, api_key: `$${name}` }) });
      assertJsonError(r, 400, 'validation_failed', own(name));
      assert.deepEqual(r.json.errors.map((e) => e.field), ['backend.api_key']);
    }
    const mcp = await fg.console('/apps', {
      method: 'POST',
      body: { name: 'm', mode: 'mcp', backend: { url: 'http://127.0.0.1:9/mcp', headers: { Authorization: '$ADMIN_TOKEN' } } },
    });
    assertJsonError(mcp, 400, 'validation_failed', own('ADMIN_TOKEN'));
    assert.deepEqual(mcp.json.errors.map((e) => e.field), ['backend.headers.Authorization']);
  });

  test('an import naming $ADMIN_TOKEN is refused before anything is sent', async () => {
    const seen = dify.requests.length;
    const r = await fg.console('/apps/import', { method: 'POST', body: { base_url: dify.baseUrl, api_key: '$ADMIN_TOKEN' } });
    assertJsonError(r, 400, 'validation_failed', /^api_key: refers to \$ADMIN_TOKEN, which is Flowgate's own configuration/);
    assert.equal(dify.requests.length, seen, 'nothing reached the backend');
  });

  test('a reference that reached D1 by other means is refused at call time', async () => {
    const { app } = await registerApp(fg, dify, { name: 'Smuggled', form: [] });
    await fg.d1(`UPDATE apps SET backend = '{"base_url":"${dify.baseUrl}","api_key":"$SECRETS_KEY"}' WHERE id = '${app.id}'`);
    const { code } = await publish(fg, app.id);
    const seen = dify.requests.length;
    // (mcp_url points at PUBLIC_URL on this instance: call the local address.)
    const r = await rpc(`${fg.url}/mcp/server/${code}/mcp`, { jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'Smuggled', arguments: {} } }, { 'mcp-protocol-version': '2025-06-18', accept: 'application/json' });
    assert.equal(r.json.result.isError, true, r.text);
    assert.match(r.json.result.content[0].text, /^the API key of app 'Smuggled' refers to \$SECRETS_KEY, which is Flowgate's own configuration/);
    assert.equal(dify.requests.length, seen, 'nothing reached the backend');
  });
});

describe('SECRET_REF_PREFIX', () => {
  test('references must start with the prefix when an app is stored', async () => {
    const refused = await pre.console('/apps', { method: 'POST', body: workflow({ base_url: dify.baseUrl, api_key: '$OTHER_KEY' }) });
    assertJsonError(
      refused,
      400,
      'validation_failed',
      'backend.api_key: refers to $OTHER_KEY, but on this Worker backend credentials may only refer to secrets whose ' +
        'names start with BACKEND_ (SECRET_REF_PREFIX) or are listed in SECRET_REF_NAMES; store it as BACKEND_OTHER_KEY ' +
        'and refer to $BACKEND_OTHER_KEY, or list OTHER_KEY in SECRET_REF_NAMES',
    );
    // Own names stay refused whatever the prefix.
    assertJsonError(await pre.console('/apps', { method: 'POST', body: workflow({ base_url: dify.baseUrl, api_key: '$ADMIN_TOKEN' }) }), 400, 'validation_failed', /own configuration/);

    dify.addApp({ mode: 'workflow', name: 'Prefixed', user_input_form: [], apiKey: PREFIXED_KEY });
    const ok = await pre.console('/apps', { method: 'POST', body: workflow({ base_url: dify.baseUrl, api_key: '$BACKEND_DIFY_KEY' }, { name: 'Prefixed' }) });
    assert.equal(ok.status, 201, ok.text);
    assert.equal(ok.json.backend.api_key, '$BACKEND_DIFY_KEY');
    const { url } = await publish(pre, ok.json.id);
    const call = (u) => rpc(u, { jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'Prefixed', arguments: {} } }, { 'mcp-protocol-version': '2025-06-18', accept: 'application/json' });
    assert.equal((await call(url)).json.result.isError, false);
    assert.ok(dify.requestsFor(PREFIXED_KEY).length > 0);

    // Outside the prefix at call time (written to D1 behind the console's back): refused.
    const other = await pre.console('/apps', { method: 'POST', body: workflow({ base_url: dify.baseUrl, api_key: '$BACKEND_DIFY_KEY' }, { name: 'Prefixed' }) });
    await pre.d1(`UPDATE apps SET backend = '{"base_url":"${dify.baseUrl}","api_key":"$OTHER_KEY"}' WHERE id = '${other.json.id}'`);
    const { url: url2 } = await publish(pre, other.json.id);
    const r = await call(url2);
    assert.equal(r.json.result.isError, true, r.text);
    assert.match(r.json.result.content[0].text, /refers to \$OTHER_KEY, but on this Worker backend credentials may only refer to secrets whose names start with BACKEND_/);
    assert.ok(!r.text.includes(OTHER_SECRET));
  });

  test('SECRET_REF_NAMES allows the names it lists, beside the prefix', async () => {
    dify.addApp({ mode: 'workflow', name: 'Listed', user_input_form: [], apiKey: LISTED_KEY });
    const ok = await pre.console('/apps', { method: 'POST', body: workflow({ base_url: dify.baseUrl, api_key: '$LISTED_KEY' }, { name: 'Listed' }) });
    assert.equal(ok.status, 201, ok.text);
    const { url } = await publish(pre, ok.json.id);
    const r = await rpc(url, { jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'Listed', arguments: {} } }, { 'mcp-protocol-version': '2025-06-18', accept: 'application/json' });
    assert.equal(r.json.result.isError, false, r.text);
    assert.ok(dify.requestsFor(LISTED_KEY).length > 0);
  });
});

describe('$NAME references are denied by default', () => {
  const denied = (name) =>
    new RegExp(`refers to \\$${name}, but this Worker allows no \\$NAME references until an admin allows them: set the SECRET_REF_PREFIX variable .* or list ${name} in the SECRET_REF_NAMES variable`);

  test('with neither SECRET_REF_PREFIX nor SECRET_REF_NAMES, a reference is refused when stored', async () => {
    const r = await fg.console('/apps', { method: 'POST', body: workflow({ base_url: dify.baseUrl, api_key: '$DIFY_KEY' }) });
    assertJsonError(r, 400, 'validation_failed', denied('DIFY_KEY'));
    assert.deepEqual(r.json.errors.map((e) => e.field), ['backend.api_key']);
    const mcp = await fg.console('/apps', {
      method: 'POST',
      body: { name: 'm', mode: 'mcp', backend: { url: 'http://127.0.0.1:9/mcp', headers: { 'X-Team-Key': '$TEAM_KEY' } } },
    });
    assertJsonError(mcp, 400, 'validation_failed', denied('TEAM_KEY'));
    assert.deepEqual(mcp.json.errors.map((e) => e.field), ['backend.headers.X-Team-Key']);
  });

  test('an import naming a secret sends nothing', async () => {
    const seen = dify.requests.length;
    const r = await fg.console('/apps/import', { method: 'POST', body: { base_url: dify.baseUrl, api_key: '$BACKEND_DIFY_KEY' } });
    assertJsonError(r, 400, 'validation_failed', denied('BACKEND_DIFY_KEY'));
    assert.deepEqual(r.json.errors.map((e) => e.field), ['api_key']);
    assert.equal(dify.requests.length, seen, 'nothing reached the backend');
  });

  test('an app stored with a reference before the rule fails at call time, naming the settings', async () => {
    const { app } = await registerApp(fg, dify, { name: 'Older', form: [] });
    await fg.d1(`UPDATE apps SET backend = '{"base_url":"${dify.baseUrl}","api_key":"$BACKEND_DIFY_KEY"}' WHERE id = '${app.id}'`);
    const { code } = await publish(fg, app.id);
    const seen = dify.requests.length;
    const r = await rpc(`${fg.url}/mcp/server/${code}/mcp`, { jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'Older', arguments: {} } }, { 'mcp-protocol-version': '2025-06-18', accept: 'application/json' });
    assert.equal(r.json.result.isError, true, r.text);
    assert.match(r.json.result.content[0].text, new RegExp(`^the API key of app 'Older' ${denied('BACKEND_DIFY_KEY').source}`));
    assert.equal(dify.requests.length, seen, 'nothing reached the backend');
  });
});

describe('sealed values never come from the console', () => {
  const sealedRefused = /^(backend\.)?api_key: is a sealed value \(enc:v1:…\), which Flowgate never takes from the console/;

  test("another app's sealed key is refused on create, replace and import", async () => {
    const victim = await fg.console('/apps', { method: 'POST', body: workflow({ base_url: dify.baseUrl, api_key: 'victim-literal-key-31' }, { name: 'Victim' }) });
    assert.equal(victim.status, 201, victim.text);
    const [row] = await fg.d1(`SELECT backend FROM apps WHERE id = '${victim.json.id}'`);
    const sealed = JSON.parse(row.backend).api_key;
    assert.match(sealed, /^enc:v1:/);

    const created = await fg.console('/apps', { method: 'POST', body: workflow({ base_url: 'http://127.0.0.1:9/v1', api_key: sealed }, { name: 'Thief' }) });
    assertJsonError(created, 400, 'validation_failed', sealedRefused);
    assert.deepEqual(created.json.errors.map((e) => e.field), ['backend.api_key']);
    const replaced = await fg.console(`/apps/${victim.json.id}`, { method: 'PUT', body: workflow({ base_url: dify.baseUrl, api_key: sealed }, { name: 'Victim' }) });
    assertJsonError(replaced, 400, 'validation_failed', sealedRefused);

    const seen = dify.requests.length;
    const imported = await fg.console('/apps/import', { method: 'POST', body: { base_url: dify.baseUrl, api_key: sealed } });
    assertJsonError(imported, 400, 'validation_failed', sealedRefused);
    assert.deepEqual(imported.json.errors.map((e) => e.field), ['api_key']);
    assert.equal(dify.requests.length, seen, 'nothing reached the backend');
    assert.equal(dify.requestsFor('victim-literal-key-31').length, 0, 'the sealed key was never opened for a caller');
  });
});

describe('PUBLIC_URL', () => {
  test('mcp_url uses PUBLIC_URL when set (trailing slash tolerated), for creation and rotation', async () => {
    const created = await fg.console('/apps', { method: 'POST', body: workflow({ base_url: dify.baseUrl, api_key: 'k' }) });
    const { server, code } = await publish(fg, created.json.id);
    assert.equal(server.mcp_url, `${PUBLIC_URL}/mcp/server/${code}/mcp`);
    const rotated = await fg.console(`/apps/${server.id}/server/refresh`, { method: 'POST' });
    assert.equal(rotated.json.mcp_url, `${PUBLIC_URL}/mcp/server/${rotated.json.server_code}/mcp`);
  });

  test('without PUBLIC_URL, mcp_url uses the address the request came to', async () => {
    const created = await pre.console('/apps', { method: 'POST', body: workflow({ base_url: dify.baseUrl, api_key: '$BACKEND_X' }) });
    const { server, code } = await publish(pre, created.json.id);
    assert.equal(server.mcp_url, `${pre.url}/mcp/server/${code}/mcp`);
  });
});

describe('client input quoted in messages is bounded', () => {
  test('a long path is quoted to 64 characters with its length', async () => {
    // Dashes break the letters into short runs: a run of 16 or more letters and digits could
    // hold a server code, and is masked whole (the next assertion).
    const long = `/${'a-'.repeat(2500)}`;
    assertJsonError(await fg.fetchJson(long), 404, 'not_found', `no route GET "${long.slice(0, 64)}…" (5001 characters)`);
    assertJsonError(await fg.fetchJson(`/${'a'.repeat(5000)}`), 404, 'not_found', 'no route GET "/<code>"');
    const inConsole = `/console/api/${'b-'.repeat(2500)}`;
    assertJsonError(await fg.fetchJson(inConsole, { token: fg.adminToken }), 404, 'not_found', `no console route GET "${inConsole.slice(0, 64)}…" (5013 characters)`);
  });

  test('a long Content-Type, mode or backend key is quoted, not echoed', async () => {
    const ct = `text/plain; x=${'c'.repeat(3000)}`;
    const r = await fg.console('/apps', { method: 'POST', body: 'x', headers: { 'content-type': ct } });
    assertJsonError(r, 415, 'unsupported_media_type', `send the body as JSON with \`Content-Type: application/json\` (got "${ct.slice(0, 64)}…" (${ct.length} characters))`);

    const mode = await fg.console('/apps', { method: 'POST', body: { name: 'x', mode: 'm'.repeat(10_000), backend: {} } });
    assertJsonError(mode, 400, 'validation_failed');
    assert.match(mode.json.errors.find((e) => e.field === 'mode').message, /^unknown mode "m{64}…" \(10000 characters\); expected one of /);
    assert.ok(mode.text.length < 2000, `${mode.text.length} bytes`);

    const key = 'k'.repeat(4000);
    const bad = await fg.console('/apps', { method: 'POST', body: workflow({ base_url: dify.baseUrl, api_key: 'x', [key]: 1 }) });
    assert.deepEqual(bad.json.errors.map((e) => e.field), [`backend."${'k'.repeat(64)}…" (4000 characters)`]);
    assert.ok(bad.text.length < 2000, `${bad.text.length} bytes`);
  });
});

describe('server codes never reach a log line', () => {
  test('whatever the spelling of the path', async () => {
    const created = await fg.console('/apps', { method: 'POST', body: workflow({ base_url: dify.baseUrl, api_key: 'k' }) });
    const { code } = await publish(fg, created.json.id);
    const hex = `%${code.charCodeAt(0).toString(16).toUpperCase()}`;
    const ping = { jsonrpc: '2.0', id: 1, method: 'ping' };
    const spellings = [
      [`//mcp/server/${code}/mcp`, 200],
      [`/mcp//server///${code}//mcp/`, 200],
      [`/MCP/Server/${code}/mcp`, 404],
      [`/mcp/server/${code}/mcp/extra`, 404],
      [`/mcp/server/${hex}${code.slice(1)}/mcp`, null],
      [`/mcp/server/${code}`, 404],
      [`/x/${code}.json`, 404],
      [`/console/api/apps/${code}`, 404],
    ];
    const ids = [];
    for (const [p, status] of spellings) {
      const r = p.startsWith('/console')
        ? await fg.fetchJson(p, { token: fg.adminToken })
        : await rpc(`${fg.url}${p}`, ping);
      if (status !== null) assert.equal(r.status, status, `${p}: ${r.text}`);
      // A refused spelling is not echoed back either.
      if (r.status === 404 && r.json?.message?.startsWith('no route')) assert.ok(!r.text.includes(code), r.text);
      ids.push([p, r.headers.get('x-request-id')]);
    }
    // Wait for the Worker's lines (not wrangler's access lines, which show URLs) of every request.
    const ours = () =>
      fg.log().split('\n').map((l) => l.trim()).filter((l) => l.startsWith('{"level"')).map((l) => JSON.parse(l));
    const deadline = Date.now() + 15_000;
    let lines = ours();
    while (!ids.every(([, id]) => lines.some((l) => l.request_id === id && l.msg === 'request'))) {
      assert.ok(Date.now() < deadline, `no log line for ${ids.filter(([, id]) => !lines.some((l) => l.request_id === id)).map(([p]) => p)}`);
      await new Promise((r) => setTimeout(r, 100));
      lines = ours();
    }
    for (const [p, id] of ids) {
      const line = lines.find((l) => l.request_id === id && l.msg === 'request');
      assert.ok(line.path.includes('<code>'), `${p} logged as ${line.path}`);
      assert.ok(!JSON.stringify(line).includes(code.slice(2)), `${p} logged as ${line.path}`);
    }
    assert.equal(lines.find((l) => l.request_id === ids[0][1]).path, '/mcp/server/<code>/mcp');
    assert.equal(lines.find((l) => l.request_id === ids[2][1]).path, '/MCP/Server/<code>/mcp');
    assert.ok(!lines.some((l) => JSON.stringify(l).includes(code)), 'no line of the Worker holds the code');
  });
});
