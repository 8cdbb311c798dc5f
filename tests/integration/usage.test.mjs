// Usage metrics (issue 15): tools/call counted per server and tool in the isolate's memory and
// written to D1 by a flush off the response path; GET /console/api/servers/{id}/usage.
//
// Two Workers: one flushes on every request (USAGE_FLUSH_SECONDS=0), so the flush from an MCP
// request's wait_until is what the counts are read back from; the other flushes only once an
// hour, so calls alone must leave D1's usage tables empty (the Worker's own rows are counted,
// not time).
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';

import { startFlowgate } from '../support/harness.mjs';
import { startDifyFixture } from '../support/dify-fixture.mjs';
import { registerApp, publish, rpc } from '../support/flowgate-setup.mjs';

const V = { 'mcp-protocol-version': '2025-06-18' };
const JSON_ONLY = { accept: 'application/json' };
const MARKER = 'ARG-MARKER-7f3a9';
const QUOTA = 'Your quota for Dify Hosted Model Provider has been exhausted.';

let fg;
let fgQuiet;
let dify;

before(async () => {
  [fg, fgQuiet, dify] = await Promise.all([
    startFlowgate({ vars: { USAGE_FLUSH_SECONDS: '0' } }),
    startFlowgate({ vars: { USAGE_FLUSH_SECONDS: '3600' } }),
    startDifyFixture(),
  ]);
});

after(async () => {
  await Promise.allSettled([fg?.stop(), fgQuiet?.stop(), dify?.stop()]);
});

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const bearer = (key) => ({ authorization: `Bearer ${key}` });
let nextId = 1;
const call = (url, tool, headers, text = 'hello') =>
  rpc(url, { jsonrpc: '2.0', id: nextId++, method: 'tools/call', params: { name: tool, arguments: { text } } }, { ...V, ...headers });

/** A multi-app server of a working and a failing workflow app, in auth mode `key` with two keys. */
async function keyedServer(f, prefix) {
  const { app: ok } = await registerApp(f, dify, { mode: 'workflow', name: `${prefix} ok` });
  const { app: broken } = await registerApp(f, dify, { mode: 'workflow', name: `${prefix} broken`, behaviour: 'dify_error' });
  const s = await f.console('/servers', { method: 'POST', body: { name: `${prefix} server`, app_ids: [ok.id, broken.id] } });
  assert.equal(s.status, 201, s.text);
  const m = await f.console(`/servers/${s.json.id}/auth`, { method: 'PUT', body: { mode: 'key' } });
  assert.equal(m.status, 200, m.text);
  const keys = {};
  for (const name of ['alice', 'bob']) {
    const k = await f.console(`/servers/${s.json.id}/keys`, { method: 'POST', body: { name } });
    assert.equal(k.status, 201, k.text);
    keys[name] = k.json.key;
  }
  return { id: s.json.id, url: s.json.mcp_url, keys, ok: `${prefix}_ok`, broken: `${prefix}_broken` };
}

async function usage(f, id, query = '', token) {
  return f.console(`/servers/${id}/usage${query}`, token ? { token } : {});
}

/** Polls (on events: the Worker's own rows) until the flushed minute rows hold `calls`. */
async function waitForFlushed(f, serverId, calls) {
  let got;
  for (let i = 0; i < 100; i++) {
    const rows = await f.d1(`SELECT COALESCE(SUM(calls), 0) AS n FROM usage_minute WHERE server_id = '${serverId}'`);
    got = rows[0]?.n;
    if (got === calls) return;
    await sleep(200);
  }
  assert.fail(`usage_minute holds ${got} calls for the server, expected ${calls}`);
}

describe('usage metrics', () => {
  let s;

  test('calls, errors, a streamed call and two callers are counted per tool and in all', async () => {
    s = await keyedServer(fg, 'Usage');
    // 3 successful JSON calls (alice 2, bob 1), 2 failing ones (alice), 1 streamed (bob), and
    // 1 naming no tool of the server (alice): 7 calls, 3 errors, 1 streamed, 2 callers.
    for (const who of ['alice', 'alice', 'bob']) {
      const r = await call(s.url, s.ok, { ...JSON_ONLY, ...bearer(s.keys[who]) });
      assert.equal(r.status, 200, r.text);
      assert.equal(r.json.result.isError, false, r.text);
    }
    for (let i = 0; i < 2; i++) {
      const r = await call(s.url, s.broken, { ...JSON_ONLY, ...bearer(s.keys.alice) }, MARKER);
      assert.equal(r.json.result.isError, true, r.text);
      assert.match(r.json.result.content[0].text, /quota/);
    }
    const streamed = await call(s.url, s.ok, bearer(s.keys.bob));
    assert.match(streamed.headers.get('content-type'), /text\/event-stream/);
    assert.equal(streamed.json.result.isError, false, streamed.text);
    const unknown = await call(s.url, 'no_such_tool', { ...JSON_ONLY, ...bearer(s.keys.alice) });
    assert.equal(unknown.json.error.code, -32602, unknown.text);
    // Any request that reaches the Worker flushes (USAGE_FLUSH_SECONDS=0), after its response.
    const ping = await rpc(s.url, { jsonrpc: '2.0', id: 'p', method: 'ping' }, { ...V, ...bearer(s.keys.bob) });
    assert.equal(ping.status, 200, ping.text);
    await waitForFlushed(fg, s.id, 7);

    const r = await usage(fg, s.id);
    assert.equal(r.status, 200, r.text);
    const u = r.json;
    assert.equal(u.step, 'minute');
    assert.equal(u.server_id, s.id);
    assert.equal(u.flush_seconds, 0);
    const t = u.total;
    assert.deepEqual(
      { calls: t.calls, errors: t.errors, streamed: t.streamed, callers: t.callers, capped: t.callers_capped },
      { calls: 7, errors: 3, streamed: 1, callers: 2, capped: false },
    );
    assert.ok(t.p50_ms > 0 && t.p50_ms <= t.p95_ms, `p50 ${t.p50_ms} p95 ${t.p95_ms}`);
    // Dense minute series over the last hour (61 buckets with the current one), summing to the total.
    assert.ok(t.series.length >= 60 && t.series.length <= 62, `${t.series.length} points`);
    assert.equal(t.series.reduce((n, p) => n + p.calls, 0), 7);
    const byTool = Object.fromEntries(u.tools.map((x) => [x.tool, x]));
    assert.deepEqual(Object.keys(byTool).sort(), ['(unknown)', s.broken, s.ok].sort());
    const pick = (x) => ({ calls: x.calls, errors: x.errors, streamed: x.streamed, callers: x.callers });
    assert.deepEqual(pick(byTool[s.ok]), { calls: 4, errors: 0, streamed: 1, callers: 2 });
    assert.deepEqual(pick(byTool[s.broken]), { calls: 2, errors: 2, streamed: 0, callers: 1 });
    assert.deepEqual(pick(byTool['(unknown)']), { calls: 1, errors: 1, streamed: 0, callers: 1 });

    // The failures: newest first, the message the client got, never the arguments.
    assert.equal(u.failures.length, 3);
    assert.equal(u.failures[0].tool, '(unknown)');
    assert.match(u.failures[0].message, /^Unknown tool/);
    for (const f of u.failures.slice(1)) {
      assert.equal(f.tool, s.broken);
      assert.ok(f.message.includes(QUOTA), f.message);
    }
    for (const f of u.failures) {
      assert.ok(f.message.length <= 301, f.message);
      assert.match(f.at_iso, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ$/);
    }
    assert.ok(!r.text.includes(MARKER), 'an argument reached the usage answer');
    const stored = JSON.stringify(await fg.d1('SELECT * FROM usage_failures')) + JSON.stringify(await fg.d1('SELECT * FROM usage_minute'));
    assert.ok(!stored.includes(MARKER), 'an argument reached D1');
    assert.ok(!stored.includes('alice'), 'callers are stored as hashes');
  });

  test('hour buckets hold the same counts', async () => {
    const r = await usage(fg, s.id, '?step=hour');
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.step, 'hour');
    assert.deepEqual(
      { calls: r.json.total.calls, errors: r.json.total.errors, streamed: r.json.total.streamed, callers: r.json.total.callers },
      { calls: 7, errors: 3, streamed: 1, callers: 2 },
    );
  });

  test('from and to as ISO-8601 or epoch seconds', async () => {
    const now = Math.floor(Date.now() / 1000);
    const iso = new Date((now - 600) * 1000).toISOString();
    const r = await usage(fg, s.id, `?from=${encodeURIComponent(iso)}&to=${now + 60}&step=minute`);
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.total.calls, 7);
    assert.equal(r.json.from % 60, 0);
  });

  test('bad parameters are a precise 400; an unknown server is a 404', async () => {
    const cases = [
      ['?from=yesterday', 'from', /^must be epoch seconds or an ISO-8601 time such as 2026-12-01T10:00:00Z \(got "yesterday"\)$/],
      ['?step=day', 'step', /^must be minute or hour \(got "day"\)$/],
      ['?from=2000-01-01T00:00:00Z', 'from', /too old: minute buckets are kept for 24 hours; use step=hour/],
      ['?from=2000-01-01T00:00:00Z&step=hour', 'from', /hour buckets are kept for 30 days/],
      [`?from=${Math.floor(Date.now() / 1000)}&to=${Math.floor(Date.now() / 1000) - 60}`, 'from', /must be before to/],
    ];
    for (const [q, field, message] of cases) {
      const r = await usage(fg, s.id, q);
      assert.equal(r.status, 400, `${q}: ${r.text}`);
      assert.equal(r.json.error, 'validation_failed');
      assert.equal(r.json.errors[0].field, field, q);
      assert.match(r.json.errors[0].message, message, q);
    }
    const missing = await usage(fg, '00000000-0000-0000-0000-000000000000');
    assert.equal(missing.status, 404, missing.text);
  });

  test('a viewer token reads usage', async () => {
    const t = await fg.console('/tokens', { method: 'POST', body: { name: 'usage-viewer', role: 'viewer' } });
    assert.equal(t.status, 201, t.text);
    const r = await usage(fg, s.id, '', t.json.token);
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.total.calls, 7);
  });

  test('calls write nothing to D1: the counts wait in memory for the flush', async () => {
    const q = await keyedServer(fgQuiet, 'Quiet');
    for (const who of ['alice', 'bob', 'bob']) {
      const r = await call(q.url, q.ok, { ...JSON_ONLY, ...bearer(q.keys[who]) });
      assert.equal(r.json.result.isError, false, r.text);
    }
    const streamed = await call(q.url, q.ok, bearer(q.keys.alice));
    assert.equal(streamed.json.result.isError, false, streamed.text);
    await rpc(q.url, { jsonrpc: '2.0', id: 'p', method: 'ping' }, { ...V, ...bearer(q.keys.bob) });
    // USAGE_FLUSH_SECONDS=3600: no request found a flush due, so no usage row exists.
    const count = async () =>
      (await fgQuiet.d1('SELECT (SELECT COUNT(*) FROM usage_minute) + (SELECT COUNT(*) FROM usage_hour) + (SELECT COUNT(*) FROM usage_failures) AS n'))[0].n;
    assert.equal(await count(), 0);
    // The console's read flushes this isolate's counts first.
    const r = await usage(fgQuiet, q.id);
    assert.equal(r.status, 200, r.text);
    assert.deepEqual(
      { calls: r.json.total.calls, streamed: r.json.total.streamed, callers: r.json.total.callers, flush: r.json.flush_seconds },
      { calls: 4, streamed: 1, callers: 2, flush: 3600 },
    );
    assert.ok((await count()) >= 2, 'the read wrote the minute and hour rows');
  });
});
