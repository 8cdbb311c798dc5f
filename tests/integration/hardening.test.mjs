// Hardening for the open internet: the private-backend guard, request ids and structured logs,
// the audit log of console writes, rate limiting per server code.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import http from 'node:http';

import { startFlowgate, startOfRateWindow } from '../support/harness.mjs';
import { startDifyFixture } from '../support/dify-fixture.mjs';
import { startHttpTool } from '../support/http-tool-fixture.mjs';
import { startUpstreams } from '../support/mcp-upstreams.mjs';
import { publish, registerApp, rpc, serverOf } from '../support/flowgate-setup.mjs';

let fg; // a deployment without ALLOW_PRIVATE_BACKENDS, without LOG_REQUESTS, and a small rate limit
let open; // the usual test deployment (private backends allowed), LOG_REQUESTS=all
let dify;
let tools;
let ups;

// Single-use instances of later tests, started beside the others (each test still awaits its
// own, and stops it; after() stops one a filtered run never used).
let limitedStarting;
let noKeyStarting;
const early = (start) => {
  const p = start();
  p.catch(() => {}); // reported by the test that awaits it
  return p;
};

before(async () => {
  limitedStarting = early(() => startFlowgate({ configure: (toml) => toml.replace('simple = { limit = 600, period = 60 }', 'simple = { limit = 10, period = 60 }') }));
  noKeyStarting = early(() => startFlowgate({ vars: { SECRETS_KEY: '', SECRET_REF_PREFIX: 'DIFY_' } }));
  [fg, open, dify, tools, ups] = await Promise.all([
    startFlowgate({
      vars: { ALLOW_PRIVATE_BACKENDS: 'false', RATE_LIMIT_PERIOD_SECONDS: '60', SECRET_REF_NAMES: 'K' },
      configure: (toml) => toml.replace('simple = { limit = 600, period = 60 }', 'simple = { limit = 5, period = 60 }'),
    }),
    startFlowgate({ vars: { LOG_REQUESTS: 'all' } }),
    startDifyFixture(),
    startHttpTool(),
    startUpstreams(),
  ]);
});

after(async () => {
  const stopEarly = async (p) => (await p?.catch(() => null))?.stop();
  await Promise.allSettled([fg?.stop(), open?.stop(), dify?.stop(), tools?.stop(), ups?.stop(), stopEarly(limitedStarting), stopEarly(noKeyStarting)]);
});

const app = (backend, mode = 'workflow') => ({ name: 'Guarded', mode, backend });

describe('private backends', () => {
  const cases = [
    ['loopback', { base_url: 'http://127.0.0.1:5001/v1', api_key: 'k' }, 'backend.base_url'],
    ['localhost', { base_url: 'http://localhost/v1', api_key: 'k' }, 'backend.base_url'],
    ['private range', { base_url: 'http://10.0.0.7/v1', api_key: 'k' }, 'backend.base_url'],
    ['cloud metadata', { base_url: 'http://169.254.169.254/latest', api_key: 'k' }, 'backend.base_url'],
    ['IPv6 loopback', { base_url: 'http://[::1]:8080/v1', api_key: 'k' }, 'backend.base_url'],
    // Spellings the URL standard maps to a private host, judged by the runtime's own URL parser
    // (the one its fetch uses), not by a second parser that might read them otherwise.
    ['loopback in hex and short form', { base_url: 'http://0x7f.1/v1', api_key: 'k' }, 'backend.base_url'],
    ['IPv4-mapped IPv6 loopback', { base_url: 'http://[::ffff:7f00:1]/v1', api_key: 'k' }, 'backend.base_url'],
    ['percent-encoded loopback', { base_url: 'http://%31%32%37.0.0.1/v1', api_key: 'k' }, 'backend.base_url'],
    ['a backslash before @', { base_url: 'http://127.0.0.1\\@evil.example/v1', api_key: 'k' }, 'backend.base_url'],
    ['localhost with a trailing dot', { base_url: 'http://LOCALHOST./v1', api_key: 'k' }, 'backend.base_url'],
  ];
  for (const [label, backend, field] of cases) {
    test(`refused without ALLOW_PRIVATE_BACKENDS: ${label}`, async () => {
      const r = await fg.console('/apps', { method: 'POST', body: app(backend) });
      assert.equal(r.status, 400, r.text);
      assert.equal(r.json.errors[0].field, field);
      assert.match(r.json.errors[0].message, /ALLOW_PRIVATE_BACKENDS/);
    });
  }
  test('MCP upstreams and OAuth token endpoints are guarded too; public hosts are fine', async () => {
    const r = await fg.console('/apps', { method: 'POST', body: app({ url: 'http://192.168.1.5/mcp', oauth: { token_url: 'http://127.0.0.1/token', client_id: 'c', client_secret: 's' } }, 'mcp') });
    assert.deepEqual(r.json.errors.map((e) => e.field), ['backend.url', 'backend.oauth.token_url']);
    const ok = await fg.console('/apps', { method: 'POST', body: app({ base_url: 'https://api.dify.ai/v1', api_key: 'k' }) });
    assert.equal(ok.status, 201, ok.text);
  });
  test('replacing an app (PUT) is guarded like creating one: a move to a private host is refused', async () => {
    // Found by planting a bug: PUT /apps/{id} without the check went unnoticed (only POST was tested).
    const created = await fg.console('/apps', { method: 'POST', body: app({ base_url: 'https://api.dify.ai/v1', api_key: 'k' }) });
    assert.equal(created.status, 201, created.text);
    const moved = await fg.console(`/apps/${created.json.id}`, { method: 'PUT', body: app({ base_url: 'http://10.0.0.7/v1', api_key: 'k' }) });
    assert.equal(moved.status, 400, moved.text);
    assert.equal(moved.json.errors[0].field, 'backend.base_url');
    assert.match(moved.json.errors[0].message, /ALLOW_PRIVATE_BACKENDS/);
    const kept = await fg.console(`/apps/${created.json.id}`);
    assert.equal(kept.json.backend.base_url, 'https://api.dify.ai/v1');
  });
  test('a backend that became private is not called: the guard also holds at call time', async () => {
    const created = await fg.console('/apps', { method: 'POST', body: { name: 'Moved', mode: 'workflow', backend: { base_url: 'https://api.dify.ai/v1', api_key: 'k' } } });
    await fg.d1(`UPDATE apps SET backend = '{"base_url":"${dify.baseUrl}","api_key":"k"}' WHERE id = '${created.json.id}'`);
    const { url } = await publish(fg, created.json.id);
    const r = await rpc(url, { jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'Moved', arguments: {} } }, { 'mcp-protocol-version': '2025-06-18' });
    assert.equal(r.json.result.isError, true, r.text);
    assert.match(r.json.result.content[0].text, /blocked: the backend host is a loopback address; private backends need ALLOW_PRIVATE_BACKENDS=true/);
  });

  // The same at call time for every other kind of outbound call: an app stored with a public
  // host whose stored backend now names a loopback one (as if edited behind the console's back)
  // is refused before anything is sent there.
  const BLOCKED = /blocked: the backend host is a loopback address; private backends need ALLOW_PRIVATE_BACKENDS=true/;
  const callTool = (url, name) => rpc(url, { jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name, arguments: {} } }, { 'mcp-protocol-version': '2025-06-18' });
  /** Creates an app on public hosts, then points `field` (a JSON path) of its stored backend at `target`. */
  async function movedApp(body, field, target) {
    const created = await fg.console('/apps', { method: 'POST', body });
    assert.equal(created.status, 201, created.text);
    await fg.d1(`UPDATE apps SET backend = json_set(backend, '${field}', '${target}') WHERE id = '${created.json.id}'`);
    return { app: created.json, ...(await publish(fg, created.json.id)) };
  }
  /** An upstream app's tool list as Flowgate would have cached it while its host was public
   * (for clients that declared no capabilities, as these calls do). */
  const seedTools = (appId) => fg.kvPut(`upstream-tools:${appId}:none`, JSON.stringify({ at: Date.now(), tools: [{ name: 'echo', inputSchema: { type: 'object' } }] }));

  test('a stored Unicode spelling of a loopback host is mapped by the runtime and not called', async () => {
    // The console refuses a non-ASCII host (write it in Punycode); stored behind its back, the
    // runtime's parser maps full-width digits and an ideographic full stop to 127.0.0.1, and
    // the guard judges that.
    const path = tools.addTool({ apiKey: 'tool-key' });
    const port = new URL(tools.url).port;
    const { url } = await movedApp(
      { name: 'WideTool', mode: 'http-tool', backend: { api_endpoint: 'https://tools.example.com/x', api_key: 'tool-key', manifest: { name: 'wide', description: 'd', parameters: [] } } },
      '$.api_endpoint',
      `http://\uff11\uff12\uff17\u3002\uff10.\uff10.\uff11:${port}${path}`,
    );
    const r = await callTool(url, 'WideTool');
    assert.equal(r.json.result.isError, true, r.text);
    assert.match(r.json.result.content[0].text, BLOCKED);
    assert.equal(tools.requestsFor(path).length, 0);
    const refused = await fg.console('/apps', { method: 'POST', body: app({ base_url: 'https://b\u00fccher.example/v1', api_key: 'k' }) });
    assert.equal(refused.status, 400, refused.text);
    assert.match(refused.json.errors[0].message, /non-ASCII characters; write it in its Punycode form/);
  });

  test('an HTTP tool that became private is not called', async () => {
    const path = tools.addTool({ apiKey: 'tool-key' });
    const { url } = await movedApp(
      { name: 'MovedTool', mode: 'http-tool', backend: { api_endpoint: 'https://tools.example.com/x', api_key: 'tool-key', manifest: { name: 'moved', description: 'd', parameters: [] } } },
      '$.api_endpoint',
      tools.url + path,
    );
    const r = await callTool(url, 'MovedTool');
    assert.equal(r.json.result.isError, true, r.text);
    assert.match(r.json.result.content[0].text, BLOCKED);
    assert.equal(tools.requestsFor(path).length, 0);
  });

  for (const [label, transport, target] of [
    ['an upstream MCP server (Streamable HTTP)', 'streamable-http', () => ups.stateless],
    ['an upstream SSE endpoint', 'sse', () => ups.legacySse],
  ]) {
    test(`${label} that became private is not called: tools refresh and tools/call`, async () => {
      const up = target();
      const name = transport === 'sse' ? 'MovedSse' : 'MovedMcp';
      const { app, url } = await movedApp({ name, mode: 'mcp', backend: { url: 'https://mcp.example.com/mcp', transport } }, '$.url', up.url);
      const n = up.requests.length;
      const refresh = await fg.console(`/apps/${app.id}/tools/refresh`, { method: 'POST' });
      assert.equal(refresh.status, 422, refresh.text);
      assert.match(refresh.json.message, BLOCKED);
      await seedTools(app.id);
      const r = await callTool(url, `${name}_echo`);
      assert.equal(r.json.result?.isError, true, r.text);
      assert.match(r.json.result.content[0].text, BLOCKED);
      assert.equal(up.requests.length, n, 'the upstream was called');
    });
  }

  test('an OAuth token endpoint that became private is not called', async () => {
    const { app, url } = await movedApp(
      {
        name: 'MovedAuth',
        mode: 'mcp',
        backend: { url: 'https://mcp.example.com/mcp', oauth: { token_url: 'https://auth.example.com/token', client_id: ups.oauth.clientId, client_secret: ups.oauth.clientSecret } },
      },
      '$.oauth.token_url',
      ups.oauth.tokenUrl,
    );
    const n = ups.oauth.requests.length;
    const refresh = await fg.console(`/apps/${app.id}/tools/refresh`, { method: 'POST' });
    assert.equal(refresh.status, 422, refresh.text);
    assert.match(refresh.json.message, BLOCKED);
    await seedTools(app.id);
    const r = await callTool(url, 'MovedAuth_echo');
    assert.equal(r.json.result?.isError, true, r.text);
    assert.match(r.json.result.content[0].text, BLOCKED);
    assert.equal(ups.oauth.requests.length, n, 'the token endpoint was called');
  });
});

describe('request ids and logs', () => {
  test('every response carries a fresh x-request-id', async () => {
    const ids = new Set();
    for (const r of [await fg.fetchJson('/healthz'), await fg.console('/apps'), await fg.fetchJson('/nope'), await fg.console('/apps', { token: null })]) {
      assert.match(r.headers.get('x-request-id') ?? '', /^[0-9a-f]{16}$/);
      ids.add(r.headers.get('x-request-id'));
    }
    assert.equal(ids.size, 4);
  });

  test('log lines are JSON with the request id; server codes and secrets never appear', async () => {
    const { app: a, apiKey } = await registerApp(open, dify, { mode: 'workflow', name: 'Logged', form: [] });
    const { url, code } = await publish(open, a.id);
    const r = await rpc(url, { jsonrpc: '2.0', id: 1, method: 'tools/list' });
    const rid = r.headers.get('x-request-id');
    const mine = await waitFor(() => {
      const found = ownLines(open).filter((l) => l.request_id === rid);
      return found.length ? found : null;
    }, `a log line with request id ${rid}`);
    assert.equal(mine[0].path, '/mcp/server/<code>/mcp');
    assert.equal(mine[0].status, 200);
    const ours = ownLines(open).map((l) => JSON.stringify(l)).join('\n');
    assert.ok(!ours.includes(code), 'the server code is never logged');
    assert.ok(!ours.includes(apiKey), 'no API key in the logs');
  });

  // Found by planting a bug: a server code written to a log line on the 401 path went unnoticed
  // (only a success was checked). Every refusal and error path, each request's line awaited,
  // then every line Flowgate wrote searched for the codes, keys and API keys in play.
  test('no server code or secret is logged on any refusal or error path', async () => {
    const { app: a, apiKey } = await registerApp(open, dify, { mode: 'workflow', name: 'Log paths', form: [] });
    const { url, code } = await publish(open, a.id);
    const failing = await registerApp(open, dify, { mode: 'workflow', name: 'Log failures', form: [], behaviour: 'http500' });
    const failed = await publish(open, failing.app.id);
    const keyed = await registerApp(open, dify, { mode: 'workflow', name: 'Log keyed', form: [] });
    const k = await publish(open, keyed.app.id);
    assert.equal((await open.console(`/servers/${k.server.id}/auth`, { method: 'PUT', body: { mode: 'key' } })).status, 200);
    const key = (await open.console(`/servers/${k.server.id}/keys`, { method: 'POST', body: { name: 'logger' } })).json.key;
    assert.match(key ?? '', /^fgk_/);
    const limited = await fg.console('/apps', { method: 'POST', body: app({ base_url: 'https://api.dify.ai/v1', api_key: 'app-limited-secret' }) });
    const l = await publish(fg, limited.json.id);
    const secrets = [code, failed.code, k.code, l.code, apiKey, failing.apiKey, keyed.apiKey, key, 'app-limited-secret'];
    const base = new URL(url).origin;
    const V = { 'mcp-protocol-version': '2025-06-18' };
    const list = { jsonrpc: '2.0', id: 1, method: 'tools/list' };
    const call = (name) => ({ jsonrpc: '2.0', id: 2, method: 'tools/call', params: { name, arguments: {} } });
    const paths = [
      ['401 without a key', 401, () => rpc(k.url, list, V)],
      ['401 with a wrong key', 401, () => rpc(k.url, list, { ...V, authorization: `Bearer fgk_${'x'.repeat(32)}` })],
      ['403 foreign Origin', 403, () => rpc(url, list, { ...V, origin: 'https://evil.example' })],
      ['404 code in a longer run', 404, () => rpc(`${base}/mcps/server/${code}0/mcp`, list, V)],
      ['404 code after a letter', 404, () => rpc(`${base}/y/a${code}`, list, V)],
      ['404 code under four encodings', 404, () => rpc(`${base}/y/%25252541${code.slice(1)}`, list, V)],
      ['404 code with one more character', 404, () => rpc(url.replace(code, `${code}x`), list, V)],
      ['405 GET', 405, () => fetch(url, { headers: { accept: 'text/event-stream', ...V } })],
      ['413 too large', 413, () => rpc(url, JSON.stringify({ ...list, pad: 'x'.repeat(1 << 20) }), V)],
      ['backend failure', 200, () => rpc(failed.url, call('Log_failures'), V)],
    ];
    const check = async (instance, label, status, send) => {
      const r = await send();
      assert.equal(r.status, status, `${label}: ${r.text}`);
      const rid = r.headers.get('x-request-id');
      await waitFor(() => ownLines(instance).some((l) => l.request_id === rid), `the line of ${label}`);
      const ours = ownLines(instance).map((l) => JSON.stringify(l)).join('\n');
      for (const secret of secrets) assert.ok(!ours.includes(secret), `${label}: a code or secret was logged`);
      return r;
    };
    for (const [label, status, send] of paths) await check(open, label, status, send);
    // 429: past the limit (5 a minute on `fg`), within one of the limiter's windows.
    await startOfRateWindow();
    let refused;
    for (let i = 0; i < 8 && !refused; i++) {
      const r = await rpc(l.url, call('no_such_tool'), V);
      if (r.status === 429) refused = r;
    }
    assert.ok(refused, 'the limit was reached');
    await check(fg, '429', 429, async () => refused);
  });

  test('without LOG_REQUESTS=all only refused and failed requests are logged', async () => {
    const quiet = [await fg.fetchJson('/healthz'), await fg.console('/apps')];
    const loud = [await fg.fetchJson('/nope'), await fg.console('/apps', { token: 'not-the-token' })];
    assert.deepEqual(quiet.map((r) => r.status), [200, 200]);
    assert.deepEqual(loud.map((r) => r.status), [404, 401]);
    const id = (r) => r.headers.get('x-request-id');
    // Wait for the last refused request's line: lines come out in order, so a line for any of the
    // earlier requests would be there by then (no fixed sleep).
    await waitFor(() => ownLines(fg).some((l) => l.request_id === id(loud[1])), 'the 401 line');
    const lines = ownLines(fg);
    for (const r of loud) {
      const line = lines.find((l) => l.request_id === id(r));
      assert.ok(line, `no line for the ${r.status}`);
      assert.equal(line.status, r.status);
    }
    for (const r of quiet) assert.equal(lines.filter((l) => l.request_id === id(r)).length, 0, 'a 200 was logged');
  });
});

describe('audit log', () => {
  test('newest first', async () => {
    const ids = [];
    const write = async (path, opts) => {
      const r = await fg.console(path, opts);
      assert.ok(r.status < 300, r.text);
      ids.push(r.headers.get('x-request-id'));
      return r;
    };
    const a = await write('/apps', { method: 'POST', body: app({ base_url: 'https://api.dify.ai/v1', api_key: '$K' }) });
    await write(`/apps/${a.json.id}`, { method: 'PUT', body: { ...app({ base_url: 'https://api.dify.ai/v1', api_key: '$K' }), name: 'Renamed' } });
    await write(`/apps/${a.json.id}/server`, { method: 'POST', body: {} });
    await write(`/apps/${a.json.id}`, { method: 'DELETE' });
    const log = await fg.console('/audit?limit=500');
    assert.equal(log.status, 200, log.text);
    const mine = log.json.data.filter((e) => ids.includes(e.request_id));
    assert.deepEqual(mine.map((e) => e.request_id), [...ids].reverse());
    assert.deepEqual(mine.map((e) => e.action), ['DELETE /apps/{id}', 'POST /apps/{id}/server', 'PUT /apps/{id}', 'POST /apps']);
    for (let i = 1; i < log.json.data.length; i++) assert.ok(log.json.data[i - 1].at >= log.json.data[i].at, 'not newest first');
  });

  test('console writes are recorded: who, what, when, never a secret', async () => {
    const created = await fg.console('/apps', { method: 'POST', body: app({ base_url: 'https://api.dify.ai/v1', api_key: 'app-very-secret-key' }) });
    const server = await fg.console(`/apps/${created.json.id}/server`, { method: 'POST', body: {} });
    await fg.console(`/apps/${server.json.id}/server/refresh`);
    await fg.console(`/apps/${created.json.id}`, { method: 'DELETE' });
    const log = await fg.console('/audit?limit=10');
    assert.equal(log.status, 200, log.text);
    const actions = log.json.data.map((e) => e.action);
    for (const a of ['DELETE /apps/{id}', 'GET /apps/{id}/server/refresh', 'POST /apps/{id}/server', 'POST /apps']) assert.ok(actions.includes(a), `${a} in ${actions}`);
    const entry = log.json.data.find((e) => e.action === 'DELETE /apps/{id}');
    assert.equal(entry.target, created.json.id);
    assert.equal(entry.actor, 'admin');
    assert.equal(entry.status, 200);
    assert.match(entry.request_id, /^[0-9a-f]{16}$/);
    assert.ok(!log.text.includes('app-very-secret-key') && !log.text.includes(server.json.server_code));
  });
});

describe('rate limit', () => {
  test('per server code: 429 with Retry-After and a JSON-RPC error echoing the id; ping and tools/list are not counted', async () => {
    const created = await fg.console('/apps', { method: 'POST', body: app({ base_url: 'https://api.dify.ai/v1', api_key: 'k' }) });
    const { url } = await publish(fg, created.json.id);
    // Requests answered from the isolate's memory are not counted: more than the limit of
    // them, and the budget (5) is still whole afterwards.
    for (let i = 0; i < 8; i++) {
      const method = i % 2 ? 'ping' : 'tools/list';
      const r = await rpc(url, { jsonrpc: '2.0', id: i, method }, { 'mcp-protocol-version': '2025-06-18' });
      assert.equal(r.status, 200, `${method} #${i}: ${r.text}`);
    }
    // A tools/call counts (even one of an unknown tool, which fails before any backend). The
    // calls and the refusals after them must fall in one of the simulator's windows.
    await startOfRateWindow();
    const call = (i) => rpc(url, { jsonrpc: '2.0', id: i, method: 'tools/call', params: { name: 'no_such_tool', arguments: {} } }, { 'mcp-protocol-version': '2025-06-18' });
    const statuses = [];
    let limited;
    for (let i = 0; i < 7; i++) {
      const r = await call(i);
      statuses.push(r.status);
      if (r.status === 429) limited = r;
    }
    assert.deepEqual(statuses, [200, 200, 200, 200, 200, 429, 429]);
    assert.equal(limited.headers.get('retry-after'), '60');
    assert.equal(limited.json.error.code, -32000);
    assert.match(limited.json.error.message, /retry after 60 s/);
    assert.equal(typeof limited.json.id, 'number');
    // Another server's code has its own budget.
    const other = await fg.console('/apps', { method: 'POST', body: app({ base_url: 'https://api.dify.ai/v1', api_key: 'k' }) });
    const { url: url2 } = await publish(fg, other.json.id);
    assert.equal((await rpc(url2, { jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'no_such_tool', arguments: {} } }, { 'mcp-protocol-version': '2025-06-18' })).status, 200);
  });
});

/** An upstream MCP server that is down: every request gets 503, and is counted; `revive(url)`
 * brings it back as a proxy to a live upstream. */
async function startDeadUpstream() {
  const seen = [];
  let live;
  const server = http.createServer(async (req, res) => {
    seen.push(`${req.method} ${req.url}`);
    const chunks = [];
    for await (const c of req) chunks.push(c);
    if (!live) {
      res.writeHead(503, { 'content-type': 'application/json' }).end(JSON.stringify({ error: 'down for maintenance' }));
      return;
    }
    const headers = Object.fromEntries(Object.entries(req.headers).filter(([k]) => !['host', 'content-length', 'connection'].includes(k)));
    const r = await fetch(live, { method: req.method, headers, body: req.method === 'POST' ? Buffer.concat(chunks) : undefined });
    res.writeHead(r.status, Object.fromEntries([...r.headers].filter(([k]) => !['content-length', 'transfer-encoding', 'connection', 'content-encoding'].includes(k))));
    res.end(Buffer.from(await r.arrayBuffer()));
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${server.address().port}/mcp`,
    seen,
    revive: (url) => {
      live = url;
    },
    close: () => new Promise((resolve) => {
      server.closeAllConnections();
      server.close(() => resolve());
    }),
  };
}

describe('rate limit and a failing upstream', () => {
  test('tools/list and the handshake of a server with a dead upstream count, and ask the upstream a bounded number of times', async () => {
    const [limited, dead] = await Promise.all([limitedStarting, startDeadUpstream()]);
    try {
      const created = await limited.console('/apps', { method: 'POST', body: { name: 'Dead', mode: 'mcp', description: 'down', backend: { url: dead.url } } });
      assert.equal(created.status, 201, created.text);
      const { url } = await publish(limited, created.json.id);
      await startOfRateWindow();
      const V = { 'mcp-protocol-version': '2025-06-18' };
      const init = { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'hardening', version: '1' } };
      const send = (i, method) => rpc(url, { jsonrpc: '2.0', id: i, method, ...(method === 'initialize' ? { params: init } : {}) }, V);
      // What one failed fetch of each list costs the upstream.
      const before = dead.seen.length;
      assert.equal((await send(0, 'tools/list')).status, 200);
      const toolsCost = dead.seen.length - before;
      assert.equal((await send(1, 'initialize')).status, 200);
      const cost = dead.seen.length - before;
      assert.ok(toolsCost > 0 && cost > toolsCost, `each list was asked for once: ${dead.seen.join(', ')}`);
      const started = Date.now();
      const statuses = [];
      for (let i = 2; i < 12; i++) statuses.push((await send(i, i % 2 ? 'initialize' : 'tools/list')).status);
      // A failed fetch is remembered for 5 s: at most one more attempt per list and window.
      const windows = Math.ceil((Date.now() - started) / 5000) + 1;
      const asked = dead.seen.length - before;
      assert.ok(asked <= cost * windows, `${asked} upstream requests for 12 messages in ${Date.now() - started} ms (one attempt costs ${cost})`);
      // Ten messages pass the limit of 10 (the two above and eight more), then 429.
      assert.deepEqual(statuses, [200, 200, 200, 200, 200, 200, 200, 200, 429, 429]);
      // The upstream is back and the console's refresh finds it: the endpoint asks again at
      // once (another server of the app, whose budget is whole), not after the window.
      dead.revive(ups.stateless.url);
      const refreshed = await limited.console(`/apps/${created.json.id}/tools/refresh`, { method: 'POST' });
      assert.equal(refreshed.status, 200, refreshed.text);
      const { url: again } = await serverOf(limited, 'Dead again', [created.json.id]);
      const listed = await rpc(again, { jsonrpc: '2.0', id: 1, method: 'tools/list' }, V);
      assert.ok(listed.json.result.tools.some((t) => t.name === 'Dead_echo'), listed.text);
    } finally {
      await Promise.allSettled([limited.stop(), dead.close()]);
    }
  });
});

test('secrets at rest: a key rotation keeps every credential readable (previous key, then reseal)', async () => {
  const K1 = 'aa'.repeat(32);
  const K2 = 'bb'.repeat(32);
  let inst = await startFlowgate({ vars: { SECRETS_KEY: K1 } });
  try {
    const { app: a } = await registerApp(inst, dify, { mode: 'workflow', name: 'Rotated', form: [] });
    const { code } = await publish(inst, a.id);
    const callOk = async (base) => {
      const r = await rpc(`${base}/mcp/server/${code}/mcp`, { jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'Rotated', arguments: {} } }, { 'mcp-protocol-version': '2025-06-18', accept: 'application/json' });
      return r.json.result;
    };
    assert.equal((await callOk(inst.url)).isError, false);
    const [sealedByK1] = await inst.d1(`SELECT backend FROM apps WHERE id = '${a.id}'`);

    // Step 1: the new key, the old one as previous: everything still opens.
    await inst.stop({ keepState: true });
    inst = await startFlowgate({ persistDir: inst.persistDir, vars: { SECRETS_KEY: K2, SECRETS_KEY_PREVIOUS: K1 } });
    assert.equal((await callOk(inst.url)).isError, false);
    // Step 2: reseal under the new key.
    const r = await inst.console('/secrets/reseal', { method: 'POST' });
    assert.equal(r.status, 200, r.text);
    assert.ok(r.json.resealed_apps >= 1);
    const [sealedByK2] = await inst.d1(`SELECT backend FROM apps WHERE id = '${a.id}'`);
    assert.notEqual(JSON.parse(sealedByK2.backend).api_key, JSON.parse(sealedByK1.backend).api_key);

    // Step 3: the old key can go.
    await inst.stop({ keepState: true });
    inst = await startFlowgate({ persistDir: inst.persistDir, vars: { SECRETS_KEY: K2 } });
    assert.equal((await callOk(inst.url)).isError, false);
  } finally {
    await inst.stop();
  }
});

test('without SECRETS_KEY a literal credential is refused, a $NAME reference is fine', async () => {
  const inst = await noKeyStarting;
  try {
    const lit = await inst.console('/apps', { method: 'POST', body: { name: 'L', mode: 'workflow', backend: { base_url: 'https://api.dify.ai/v1', api_key: 'app-literal' } } });
    assert.equal(lit.status, 400);
    assert.equal(lit.json.errors[0].field, 'backend.api_key');
    assert.match(lit.json.errors[0].message, /SECRETS_KEY/);
    const ref = await inst.console('/apps', { method: 'POST', body: { name: 'R', mode: 'workflow', backend: { base_url: 'https://api.dify.ai/v1', api_key: '$DIFY_KEY' } } });
    assert.equal(ref.status, 201, ref.text);
  } finally {
    await inst.stop();
  }
});

/** The Worker's own JSON log lines (wrangler's access log lines are not ours: they show the URL). */
function ownLines(instance) {
  return instance
    .log()
    .split('\n')
    .map((l) => l.trim())
    .filter((l) => l.startsWith('{"level"'))
    .map((l) => JSON.parse(l));
}

async function waitFor(fn, what, ms = 20_000) {
  const until = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > until) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 50));
  }
}
