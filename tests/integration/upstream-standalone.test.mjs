// The upstream's standalone stream: an upstream that asks for `roots/list` on its session's GET
// stream, related to no request (as FastMCP does; tests/support/standalone-upstream.mjs), gets
// its answer through Flowgate while the call runs: relayed to a client that declared roots (the
// TypeScript SDK and the Python SDK), refused at once with the reason for one that did not, so
// the call ends quickly either way instead of waiting for the upstream's timeout (20 s). Logs on
// that stream reach the client; the stream is closed when the call ends. The Python SDK 2.x
// default client speaks 2026-07-28 with Flowgate: its call is bridged, and the request on the
// stream (held by the call's object) becomes an input_required round, or is refused at once.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ListRootsRequestSchema, LoggingMessageNotificationSchema } from '@modelcontextprotocol/sdk/types.js';

import { repoRoot, startFlowgate } from '../support/harness.mjs';
import { publish, upstreamApp } from '../support/flowgate-setup.mjs';
import { startStandaloneUpstream } from '../support/standalone-upstream.mjs';

const PYTHON = path.join(repoRoot, '.venv', 'bin', 'python');
const CLIENT = path.join(repoRoot, 'tests', 'python', 'client.py');
const PYTHON2 = path.join(repoRoot, '.venv-sdk2', 'bin', 'python');
const ASKING_CLIENT = path.join(repoRoot, 'tests', 'python', 'sdk2', 'asking_client.py');
const ROOTS = [{ uri: 'file:///work/project', name: 'project' }];
/** Far below the upstream's own 20 s: the answer (or the refusal) came at once. */
const QUICK_MS = 8_000;

let fg;
let up;
let url;

before(async () => {
  [fg, up] = await Promise.all([startFlowgate(), startStandaloneUpstream()]);
  const id = await upstreamApp(fg, 'Rooted', { url: up.url, tool_name_prefix: false });
  ({ url } = await publish(fg, id));
});

after(async () => {
  await Promise.allSettled([fg?.stop(), up?.close()]);
});

async function connect(capabilities) {
  const client = new Client({ name: 'standalone-test', version: '1.0.0' }, { capabilities });
  const asked = [];
  // The SDK takes a handler only for a capability the client declares.
  if (capabilities.roots) {
    client.setRequestHandler(ListRootsRequestSchema, async (req, extra) => {
      asked.push(String(extra.requestId));
      return { roots: ROOTS };
    });
  }
  const logs = [];
  client.setNotificationHandler(LoggingMessageNotificationSchema, (n) => logs.push(n.params));
  await client.connect(new StreamableHTTPClientTransport(new URL(url)));
  return { client, asked, logs };
}

/**
 * The upstream session a call ran in: that of the first `tools/call` the upstream got after
 * `since` requests. (A client that keeps its own session's stream open also has a session of
 * Flowgate's client-session object on the upstream, for list changes: not the call's.)
 */
const callSession = (since) =>
  up.requests.slice(since).find((r) => r.method === 'POST' && r.body?.method === 'tools/call')?.headers['mcp-session-id'];

/** Waits (up to 5 s) until the upstream holds no standalone stream of session `sid`. */
async function streamsClosed(sid) {
  assert.ok(sid, 'the upstream got the call');
  for (let i = 0; i < 100 && up.openStreams(sid) > 0; i++) await new Promise((r) => setTimeout(r, 50));
  return up.openStreams(sid);
}

describe('the TypeScript SDK', () => {
  test('declared roots: the upstream\'s roots/list on its standalone stream reaches the client, and the call answers with its roots', async () => {
    const { client, asked } = await connect({ roots: {} });
    try {
      const since = up.requests.length;
      const started = Date.now();
      const r = await client.callTool({ name: 'roots', arguments: {} });
      assert.ok(Date.now() - started < QUICK_MS, `took ${Date.now() - started} ms`);
      assert.equal(r.isError, undefined, JSON.stringify(r));
      assert.deepEqual(JSON.parse(r.content[0].text), ROOTS);
      assert.equal(asked.length, 1);
      assert.match(asked[0], /^fg-relay\./, 'under a sealed id');
      const sid = callSession(since);
      const get = up.requests.slice(since).find((r) => r.method === 'GET' && r.headers['mcp-session-id'] === sid);
      assert.ok(get, 'Flowgate opened the standalone stream of the call\'s session');
      assert.equal(get.headers.accept, 'text/event-stream');
      assert.equal(await streamsClosed(sid), 0, 'closed when the call ended');
    } finally {
      await client.close();
    }
  });

  test('no roots declared: the upstream is refused at once, and the tool result names why', async () => {
    const { client, asked } = await connect({});
    try {
      const started = Date.now();
      const r = await client.callTool({ name: 'roots', arguments: {} });
      assert.ok(Date.now() - started < QUICK_MS, `took ${Date.now() - started} ms`);
      assert.equal(r.isError, true, JSON.stringify(r));
      assert.match(r.content[0].text, /did not declare the roots capability/);
      assert.equal(asked.length, 0);
      const refusal = up.requests.find((q) => q.method === 'POST' && q.body?.error && /roots/.test(q.body.error.message));
      assert.ok(refusal, 'the upstream got a JSON-RPC error');
      assert.equal(refusal.body.error.code, -32601);
    } finally {
      await client.close();
    }
  });

  test('a log message on the standalone stream reaches the client', async () => {
    const { client, logs } = await connect({});
    try {
      const r = await client.callTool({ name: 'log', arguments: { level: 'warning', data: 'from the standalone stream' } });
      assert.equal(r.content[0].text, 'logged');
      assert.deepEqual(logs, [{ level: 'warning', logger: 'standalone', data: 'from the standalone stream' }]);
    } finally {
      await client.close();
    }
  });
});

describe('the Python SDK', () => {
  const run = promisify(execFile);
  async function python(extra) {
    assert.ok(fs.existsSync(PYTHON), `${PYTHON} is missing: run scripts/setup.sh --test-tools`);
    const argv = [CLIENT, url, '--timeout', '60', '--call', 'roots', ...extra];
    const started = Date.now();
    const { stdout } = await run(PYTHON, argv, { timeout: 90_000 }).catch((e) => e);
    return { out: JSON.parse(stdout.trim().split('\n').at(-1)), ms: Date.now() - started };
  }

  test('declared roots: answered through Flowgate, the call ends quickly with them', async () => {
    const { out, ms } = await python(['--roots', 'file:///work/python']);
    assert.equal(out.ok, true, JSON.stringify(out));
    assert.ok(ms < QUICK_MS + 5_000, `took ${ms} ms`);
    assert.deepEqual(out.rootsAsked, ['roots/list']);
    assert.equal(out.call.isError, false);
    assert.deepEqual(JSON.parse(out.call.content[0].text), [{ uri: 'file:///work/python', name: 'file:///work/python' }]);
  });

  test('no roots declared: a quick tool error that names why', async () => {
    const { out, ms } = await python([]);
    assert.equal(out.ok, true, JSON.stringify(out));
    assert.ok(ms < QUICK_MS + 5_000, `took ${ms} ms`);
    assert.deepEqual(out.rootsAsked, []);
    assert.equal(out.call.isError, true);
    assert.match(out.call.content[0].text, /did not declare the roots capability/);
  });
});

describe('the Python SDK 2.x default client (2026-07-28: the call is bridged)', () => {
  const run = promisify(execFile);
  async function python2(declare) {
    assert.ok(fs.existsSync(PYTHON2), `${PYTHON2} is missing: run scripts/setup.sh --test-tools`);
    const argv = [ASKING_CLIENT, url, 'roots', '{}', '--declare', declare, '--timeout', '60'];
    const started = Date.now();
    const { stdout } = await run(PYTHON2, argv, { timeout: 90_000 }).catch((e) => e);
    return { out: JSON.parse(stdout.trim().split('\n').at(-1)), ms: Date.now() - started };
  }

  test('declared roots: the roots/list on the standalone stream is a round, and the call answers with its roots', async () => {
    const since = up.requests.length;
    const { out, ms } = await python2('roots');
    assert.equal(out.ok, true, JSON.stringify(out));
    assert.equal(out.protocol, '2026-07-28');
    assert.ok(ms < QUICK_MS + 5_000, `took ${ms} ms`);
    assert.deepEqual(out.asked, [{ method: 'roots/list' }]);
    assert.equal(out.isError, false, out.text);
    assert.deepEqual(JSON.parse(out.text), ROOTS);
    const sid = callSession(since);
    const gets = up.requests.slice(since).filter((r) => r.method === 'GET' && r.headers['mcp-session-id'] === sid);
    assert.equal(gets.length, 1, 'one standalone stream for the call, the object\'s');
    assert.equal(await streamsClosed(sid), 0, 'closed when the call ended');
  });

  test('roots not declared (sampling only): refused to the upstream at once, and the tool result names why', async () => {
    const since = up.requests.length;
    const { out, ms } = await python2('sampling');
    assert.equal(out.ok, true, JSON.stringify(out));
    assert.ok(ms < QUICK_MS + 5_000, `took ${ms} ms`);
    assert.deepEqual(out.asked, []);
    assert.equal(out.isError, true);
    assert.match(out.text, /did not declare the roots capability/);
    assert.equal(await streamsClosed(callSession(since)), 0);
  });
});
