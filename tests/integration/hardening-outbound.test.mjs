// Hardening of the one path every outbound call takes (Dify apps, HTTP tools, upstream MCP,
// OAuth token endpoints): redirects checked hop by hop, reads capped while reading, the
// first-byte timeout for JSON-only clients, batches counted by the rate limit, cancellation
// bound to the caller, and upstream sessions kept per forwarded credential.
//
// This deployment allows exactly one private host, 127.0.0.1 (ALLOW_PRIVATE_BACKENDS takes a
// list of hosts), so the fixtures are reachable while any other loopback or private target
// (127.0.0.2, localhost, [::1], 10.0.0.1 …) is refused before anything is sent there.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import zlib from 'node:zlib';

import { startFlowgate, startOfRateWindow } from '../support/harness.mjs';
import { startDifyFixture } from '../support/dify-fixture.mjs';
import { drained, startHostileBackend, writeHugeJson } from '../support/hostile-backend.mjs';
import { publish, registerApp, rpc } from '../support/flowgate-setup.mjs';

const RATE_LIMIT = 10;

let fg;
let dify;
let a; // the backend apps point at
let b; // another origin (another port on 127.0.0.1)

before(async () => {
  [fg, dify, a, b] = await Promise.all([
    startFlowgate({
      vars: { ALLOW_PRIVATE_BACKENDS: '127.0.0.1' },
      configure: (toml) => toml.replace('simple = { limit = 600, period = 60 }', `simple = { limit = ${RATE_LIMIT}, period = 60 }`),
    }),
    startDifyFixture(),
    startHostileBackend(),
    startHostileBackend(),
  ]);
});

after(async () => {
  await Promise.allSettled([fg?.stop(), dify?.stop(), a?.stop(), b?.stop()]);
});

const V = { 'mcp-protocol-version': '2025-06-18' };
const JSON_ONLY = { ...V, accept: 'application/json' };
const MANIFEST = { name: 'probe', description: 'A probe', parameters: [{ name: 'q', type: 'string', required: false, form: 'llm' }] };
let serial = 0;

/** Registers an HTTP tool at `endpoint` and publishes it; returns {url, tool}. */
async function toolServer(endpoint, backend = {}) {
  const name = `Probe${++serial}`;
  const r = await fg.console('/apps', {
    method: 'POST',
    body: { name, description: 'd', mode: 'http-tool', backend: { api_endpoint: endpoint, api_key: 'tool-key-123', manifest: MANIFEST, ...backend } },
  });
  assert.equal(r.status, 201, r.text);
  return { ...(await publish(fg, r.json.id, { description: 'd' })), tool: name };
}

const call = (tool, id = 1) => ({ jsonrpc: '2.0', id, method: 'tools/call', params: { name: tool, arguments: { q: 'hi' } } });

async function callText(url, tool, headers = JSON_ONLY) {
  const r = await rpc(url, call(tool), headers);
  assert.equal(r.status, 200, r.text);
  return r.json.result;
}

describe('redirects', () => {
  for (const [label, location] of [
    ['another loopback address', () => `http://127.0.0.2:${a.port}/landing`],
    ['a loopback name', () => `http://localhost:${a.port}/landing`],
    ['IPv6 loopback', () => `http://[::1]:${a.port}/landing`],
    ['a private range', () => 'http://10.0.0.1/landing'],
    ['cloud metadata in another spelling', () => 'http://0xa9fea9fe/latest/meta-data'],
  ]) {
    test(`a redirect to ${label} is refused, naming the redirect`, async () => {
      const path = `/to-private-${++serial}`;
      const { url, tool } = await toolServer(a.route(path, async (_req, res) => {
        res.writeHead(307, { location: location() });
        res.end();
      }));
      const result = await callText(url, tool);
      assert.equal(result.isError, true);
      assert.match(result.content[0].text, /redirected \(HTTP 307\) to .*, which is blocked: the backend host is/);
      assert.equal(a.requestsTo('/landing').length, 0);
    });
  }

  test('a same-origin 307 is followed with method, body and credentials', async () => {
    const landing = a.route(`/landing-same-${++serial}`, async (_req, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ answer: 'landed' }));
    });
    const { url, tool } = await toolServer(a.route(`/same-${serial}`, async (_req, res) => {
      res.writeHead(307, { location: new URL(landing).pathname });
      res.end();
    }));
    const result = await callText(url, tool);
    assert.equal(result.isError, false, JSON.stringify(result));
    const [landed] = a.requestsTo(new URL(landing).pathname);
    assert.equal(landed.method, 'POST');
    assert.deepEqual(landed.body, { q: 'hi' });
    assert.equal(landed.headers.authorization, 'Bearer tool-key-123');
  });

  test('a redirect to another origin is followed without credentials', async () => {
    const landing = b.route(`/landing-cross-${++serial}`, async (_req, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ answer: 'landed elsewhere' }));
    });
    const first = `/cross-${serial}`;
    const { url, tool } = await toolServer(a.route(first, async (_req, res) => {
      res.writeHead(308, { location: landing });
      res.end();
    }));
    const result = await callText(url, tool);
    assert.equal(result.isError, false, JSON.stringify(result));
    const [landed] = b.requestsTo(new URL(landing).pathname);
    assert.equal(landed.method, 'POST');
    assert.deepEqual(landed.body, { q: 'hi' });
    assert.equal(landed.headers.authorization, undefined);
    assert.equal(landed.headers['x-dify-user-id'], undefined);
    // The first hop did carry them: the app's own origin is trusted with its key.
    assert.equal(a.requestsTo(first)[0].headers.authorization, 'Bearer tool-key-123');
  });

  test('302 after POST becomes a GET without a body', async () => {
    const landing = `/landing-get-${++serial}`;
    a.route(landing, async (_req, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ answer: 'got' }));
    });
    const { url, tool } = await toolServer(a.route(`/found-${serial}`, async (_req, res) => {
      res.writeHead(302, { location: landing });
      res.end();
    }));
    await callText(url, tool);
    const [landed] = a.requestsTo(landing);
    assert.equal(landed.method, 'GET');
    assert.equal(landed.body, undefined);
  });

  test('a redirect loop ends after a few hops with a message', async () => {
    const path = `/loop-${++serial}`;
    const { url, tool } = await toolServer(a.route(path, async (_req, res) => {
      res.writeHead(307, { location: path });
      res.end();
    }));
    const result = await callText(url, tool);
    assert.equal(result.isError, true);
    assert.match(result.content[0].text, /redirected more than 3 times/);
    assert.equal(a.requestsTo(path).length, 4);
  });

  test('a Dify app redirecting into a private network is refused too (the same path for every kind)', async () => {
    const path = `/v1-${++serial}`;
    a.route(`${path}/workflows/run`, async (_req, res) => {
      res.writeHead(307, { location: 'http://192.168.0.1/v1/workflows/run' });
      res.end();
    });
    const r = await fg.console('/apps', {
      method: 'POST',
      body: { name: `Flow${serial}`, mode: 'workflow', backend: { base_url: a.baseUrl + path, api_key: 'app-k' }, user_input_form: [] },
    });
    assert.equal(r.status, 201, r.text);
    const { url } = await publish(fg, r.json.id, { description: 'd' });
    const res = await rpc(url, { jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: `Flow${serial}`, arguments: {} } }, V);
    assert.equal(res.json.result.isError, true, res.text);
    assert.match(res.json.result.content.at(-1)?.text ?? res.text, /redirected \(HTTP 307\) to 192\.168\.0\.1, which is blocked: the backend host is a private address/);
  });

  test('an OAuth token endpoint may not redirect its credentials to another origin', async () => {
    const landing = b.route(`/token-landing-${++serial}`, async (_req, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ access_token: 'stolen', token_type: 'Bearer', expires_in: 3600 }));
    });
    const tokenUrl = a.route(`/token-${serial}`, async (_req, res) => {
      res.writeHead(307, { location: landing });
      res.end();
    });
    const r = await fg.console('/apps', {
      method: 'POST',
      body: { name: `Up${serial}`, mode: 'mcp', backend: { url: `${a.baseUrl}/mcp-none`, oauth: { token_url: tokenUrl, client_id: 'c', client_secret: 'client-secret-value' } } },
    });
    assert.equal(r.status, 201, r.text);
    const refresh = await fg.console(`/apps/${r.json.id}/tools/refresh`, { method: 'POST' });
    assert.equal(refresh.status, 422, refresh.text);
    assert.match(refresh.text, /redirected \(HTTP 307\) to another origin/);
    assert.equal(b.requestsTo(new URL(landing).pathname).length, 0);
  });
});

describe('bounded reads', () => {
  test('a 50 MB one-piece answer is not read past the cap', async () => {
    let written;
    const { url, tool } = await toolServer(a.route(`/huge-${++serial}`, async (_req, res) => {
      written = await writeHugeJson(res, 50 * 1024 * 1024);
    }));
    const result = await callText(url, tool);
    assert.equal(result.isError, true);
    assert.match(result.content[0].text, /answered more than 2112 KiB in one piece, more than its max_result_bytes \(1048576 bytes\) allows/);
    await waitFor(() => written !== undefined);
    assert.ok(written < 50 * 1024 * 1024, `the fixture wrote ${written} bytes: Flowgate kept reading`);
  });

  test('a small compressed answer that inflates past the cap is refused like a long one', async () => {
    // Its Content-Length (the compressed size) is well within the cap; what fetch decodes is not.
    const inflated = `{"result": "${'a'.repeat(20 * 1024 * 1024)}"}`;
    const packed = zlib.gzipSync(inflated);
    assert.ok(packed.length < 100 * 1024, `${packed.length} bytes compressed`);
    const { url, tool } = await toolServer(a.route(`/bomb-${++serial}`, async (_req, res) => {
      res.writeHead(200, { 'content-type': 'application/json', 'content-encoding': 'gzip', 'content-length': packed.length });
      res.end(packed);
    }));
    const result = await callText(url, tool);
    assert.equal(result.isError, true, JSON.stringify(result).slice(0, 300));
    assert.match(result.content[0].text, /answered more than 2112 KiB in one piece, more than its max_result_bytes \(1048576 bytes\) allows/);
  });

  test('max_result_bytes applies to one-piece answers: a long chat answer is cut with a note', async () => {
    const path = `/v1-chat-${++serial}`;
    a.route(`${path}/chat-messages`, async (_req, res) => {
      res.writeHead(200, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ answer: 'a'.repeat(5000), conversation_id: 'c', message_id: 'm', task_id: 't' }));
    });
    const r = await fg.console('/apps', {
      method: 'POST',
      body: { name: `Chat${serial}`, mode: 'chat', backend: { base_url: a.baseUrl + path, api_key: 'app-k', max_result_bytes: 2000 }, user_input_form: [] },
    });
    assert.equal(r.status, 201, r.text);
    const { url } = await publish(fg, r.json.id, { description: 'd' });
    const res = await rpc(url, { jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: `Chat${serial}`, arguments: { query: 'q' } } }, JSON_ONLY);
    const text = res.json.result.content[0].text;
    assert.equal(res.json.result.isError, false, res.text);
    assert.ok(text.startsWith('a'.repeat(2000) + '\n\n[truncated: the answer was longer than 2000 bytes'), text.slice(1990, 2100));
    assert.equal(res.json.result.structuredContent.answer, text);
  });

  test('an SSE event that never ends is bounded for a JSON-only client too', async () => {
    let written = 0;
    const { url, tool } = await toolServer(a.route(`/endless-event-${++serial}`, async (_req, res) => {
      res.writeHead(200, { 'content-type': 'text/event-stream' });
      res.write('data: {"type": "progress", "percent": 1, "message": "');
      const chunk = 'y'.repeat(64 * 1024);
      while (!res.destroyed && written < 20 * 1024 * 1024) {
        written += chunk.length;
        if (!res.write(chunk)) await drained(res);
      }
      res.end();
    }), { stream: true });
    const result = await callText(url, tool);
    assert.equal(result.isError, true);
    assert.match(result.content[0].text, /sent a bad stream: .*(larger|exceeds|limit)/i);
    assert.ok(written < 20 * 1024 * 1024, `the fixture wrote ${written} bytes`);
  });

  test('first_byte_timeout_seconds holds for a JSON-only client', async () => {
    const { url, tool } = await toolServer(a.route(`/no-first-byte-${++serial}`, async (_req, res) => {
      await new Promise((r) => res.once('close', r)); // never answers
    }), { first_byte_timeout_seconds: 1, timeout_seconds: 120 });
    const result = await callText(url, tool);
    assert.equal(result.isError, true);
    // The first-byte timer fired, not the 120 s total one.
    assert.match(result.content[0].text, /did not answer within 1 s \(first_byte_timeout_seconds\)/);
  });

  test('tool errors name the app and host, never the URL query or userinfo', async () => {
    const { url, tool } = await toolServer(`http://127.0.0.1:1/secret-path?api_key=sekrit-query-value`);
    const result = await callText(url, tool);
    assert.equal(result.isError, true);
    const text = result.content[0].text;
    assert.match(text, /could not reach the tool 'Probe\d+' at 127\.0\.0\.1:1/);
    assert.doesNotMatch(text, /sekrit|secret-path|api_key/);
  });
});

describe('batches and the rate limit', () => {
  test('a batch longer than 32 messages is refused with a clear error', async () => {
    const { url } = await toolServer(a.route(`/unused-${++serial}`, async (_req, res) => res.end('{}')));
    const batch = Array.from({ length: 33 }, (_, i) => ({ jsonrpc: '2.0', id: i, method: 'ping' }));
    const r = await rpc(url, batch, { 'mcp-protocol-version': '2025-03-26' });
    assert.equal(r.status, 400, r.text);
    assert.equal(r.json.error.code, -32600);
    assert.match(r.json.error.message, /at most 32 messages \(this one has 33\)/);
  });

  test('every message of a batch counts against the per-code rate limit', async () => {
    const { url } = await toolServer(a.route(`/unused-${++serial}`, async (_req, res) => res.end('{}')));
    // tools/call counts (ping would not: it is answered from the isolate's memory); an unknown
    // tool fails before any backend.
    const call = (id) => ({ jsonrpc: '2.0', id, method: 'tools/call', params: { name: 'no_such_tool', arguments: {} } });
    const batch = Array.from({ length: RATE_LIMIT }, (_, i) => call(i));
    // The batch and the call after it in one of the simulator's windows (a boundary between
    // them made the budget whole again: a CI flake).
    await startOfRateWindow();
    const first = await rpc(url, batch, { 'mcp-protocol-version': '2025-03-26' });
    assert.equal(first.status, 200, first.text);
    assert.equal(first.json.length, RATE_LIMIT);
    // The batch used up the whole budget, so one more message is over it.
    const next = await rpc(url, call(99), { 'mcp-protocol-version': '2025-03-26' });
    assert.equal(next.status, 429, next.text);
    assert.equal(next.json.id, 99);
  });
});

describe('cancellation is bound to the caller', () => {
  test('a client sharing the User-Agent and request id from another address cannot stop the run', async () => {
    const { app, apiKey } = await registerApp(fg, dify, { mode: 'workflow', name: `Hang${++serial}`, form: [], streamBehaviour: 'hang_after_first' });
    const { url } = await publish(fg, app.id, { description: 'd' });
    const ua = { 'user-agent': 'same-client/1.0' };
    const owner = { ...ua, 'cf-connecting-ip': '198.51.100.1' };
    const res = await fetch(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'text/event-stream', ...V, ...owner },
      body: JSON.stringify({ jsonrpc: '2.0', id: 5, method: 'tools/call', params: { name: app.name, arguments: {} } }),
    });
    const reader = res.body.getReader();
    // Flowgate records the run for cancellation before it writes anything after the backend's
    // first event (which names the run), so once bytes arrive here the record exists.
    await reader.read();
    const run = await waitFor(() => dify.requestsFor(apiKey).find((q) => q.streaming && q.taskId));
    const cancel = { jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: 5, reason: 'not yours' } };
    const other = await rpc(url, cancel, { ...V, ...ua, 'cf-connecting-ip': '198.51.100.2' });
    assert.equal(other.status, 202);
    // A cancel that matched would stop the run within milliseconds (a KV read and the stop
    // call); two seconds without a stop is a wide margin on a loaded machine.
    await new Promise((r) => setTimeout(r, 2000));
    assert.equal(dify.stops.filter((s) => s.apiKey === apiKey).length, 0, 'the other client stopped the run');
    const mine = await rpc(url, cancel, { ...V, ...owner });
    assert.equal(mine.status, 202);
    const stop = await waitFor(() => dify.stops.find((s) => s.apiKey === apiKey));
    assert.equal(stop.task_id, run.taskId);
    await new Promise((r) => setTimeout(r, 300)); // a second stop would have arrived by now
    assert.equal(dify.stops.filter((s) => s.apiKey === apiKey).length, 1);
    await reader.cancel();
  });
});

describe('upstream MCP sessions', () => {
  test('each forwarded credential gets its own upstream session', async () => {
    const sessions = new Map(); // session id -> token that created it
    let n = 0;
    const mcpUrl = a.route(`/mcp-${++serial}`, async (req, res, body) => {
      const reply = (result) => {
        res.writeHead(200, { 'content-type': 'application/json' });
        res.end(JSON.stringify({ jsonrpc: '2.0', id: body.id, result }));
      };
      if (body.method === 'initialize') {
        const sid = `session-${++n}`;
        sessions.set(sid, req.headers['x-user-token'] ?? null);
        res.setHeader('mcp-session-id', sid);
        return reply({ protocolVersion: '2025-06-18', capabilities: { tools: {} }, serverInfo: { name: 'up', version: '1' } });
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
      return reply({ content: [{ type: 'text', text: `session ${req.headers['mcp-session-id']}` }] });
    });
    const created = await fg.console('/apps', {
      method: 'POST',
      body: { name: `Up${serial}`, mode: 'mcp', backend: { url: mcpUrl, transport: 'streamable-http', forward_headers: { 'X-User-Token': 'X-User-Token' } } },
    });
    assert.equal(created.status, 201, created.text);
    const { url } = await publish(fg, created.json.id, { description: 'd' });
    const whoami = async (token) => {
      const r = await rpc(url, { jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: `Up${serial}_whoami`, arguments: {} } }, { ...JSON_ONLY, 'x-user-token': token });
      assert.notEqual(r.json.result.isError, true, r.text);
      return r.json.result.content[0].text.replace('session ', '');
    };
    const alice = await whoami('alice-token');
    const bob = await whoami('bob-token');
    assert.notEqual(alice, bob);
    assert.equal(sessions.get(alice), 'alice-token');
    assert.equal(sessions.get(bob), 'bob-token');
    // Alice's next call reuses her session.
    assert.equal(await whoami('alice-token'), alice);
  });

  test('an upstream answer larger than the cap is an error, not read to its end', async () => {
    let written;
    const mcpUrl = a.route(`/mcp-huge-${++serial}`, async (_req, res, body) => {
      if (body.method === 'tools/call') {
        written = await writeHugeJson(res, 50 * 1024 * 1024);
        return;
      }
      if (body.id === undefined) {
        res.writeHead(202);
        return res.end();
      }
      res.writeHead(200, { 'content-type': 'application/json' });
      const result = body.method === 'initialize'
        ? { protocolVersion: '2025-06-18', capabilities: { tools: {} }, serverInfo: { name: 'up', version: '1' } }
        : { tools: [{ name: 'dump', inputSchema: { type: 'object' } }] };
      res.end(JSON.stringify({ jsonrpc: '2.0', id: body.id, result }));
    });
    const created = await fg.console('/apps', { method: 'POST', body: { name: `Big${serial}`, mode: 'mcp', backend: { url: mcpUrl, transport: 'streamable-http' } } });
    assert.equal(created.status, 201, created.text);
    const { url } = await publish(fg, created.json.id, { description: 'd' });
    const r = await rpc(url, { jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: `Big${serial}_dump`, arguments: {} } }, JSON_ONLY);
    assert.equal(r.json.result.isError, true, r.text.slice(0, 500));
    assert.match(r.json.result.content[0].text, /larger than its app's max_result_bytes \(1048576 bytes\)/);
    await waitFor(() => written !== undefined);
    assert.ok(written < 50 * 1024 * 1024);
  });
});

async function waitFor(fn, ms = 20_000) {
  const until = Date.now() + ms;
  for (;;) {
    const v = fn();
    if (v) return v;
    if (Date.now() > until) throw new Error('timed out waiting');
    await new Promise((r) => setTimeout(r, 50));
  }
}
