// What real clients show for a wrong MCP URL (docs/troubleshooting.md quotes these): a
// mistyped server code and a URL missing its `/mcp`, through the TypeScript SDK's Streamable
// HTTP transport, its SSE transport (what mcp-remote falls back to after a 404: a GET, now
// answered 404 with the JSON-RPC error instead of 405), a plain GET, and the Python SDK.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { SSEClientTransport } from '@modelcontextprotocol/sdk/client/sse.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

import { OWN_URL, repoRoot, startFlowgate, startProcessGroup } from '../support/harness.mjs';
import { startDifyFixture } from '../support/dify-fixture.mjs';
import { publish, registerApp } from '../support/flowgate-setup.mjs';

const PYTHON = path.join(repoRoot, '.venv', 'bin', 'python');
const CLIENT = path.join(repoRoot, 'tests', 'python', 'client.py');

let fg;
let dify;
let good;
let typo;
let noMcp;

before(async () => {
  if (!fs.existsSync(PYTHON)) throw new Error(`${PYTHON} is missing: run scripts/setup.sh --test-tools (or make test)`);
  [fg, dify] = await Promise.all([startFlowgate({ vars: { PUBLIC_URL: OWN_URL } }), startDifyFixture()]);
  const { app } = await registerApp(fg, dify, { mode: 'chat', name: 'Echo chat', form: [] });
  good = (await publish(fg, app.id)).url;
  // The code with one character changed, and the URL without its last segment.
  typo = good.replace(/\/server\/(.)/, (_, c) => `/server/${c === 'A' ? 'B' : 'A'}`);
  noMcp = good.replace(/\/mcp$/, '');
}, { timeout: 120_000 });

after(async () => {
  await Promise.allSettled([fg?.stop(), dify?.stop()]);
});

const NOT_FOUND = 'Server not found: no MCP server has this code; check the URL (the code may have been rotated)';
const ADD_MCP = 'add /mcp to the end of the URL';

async function connectError(transport) {
  const client = new Client({ name: 'error-messages-test', version: '1.0.0' });
  try {
    await client.connect(transport);
  } catch (e) {
    return e.message;
  } finally {
    await client.close().catch(() => {});
  }
  assert.fail('the client connected');
}

async function python(url) {
  const p = startProcessGroup(PYTHON, [CLIENT, url, '--timeout', '30'], { capture: true, label: 'python-sdk' });
  await p.exited;
  await p.stop({ graceMs: 500 });
  return JSON.parse(p.output().stdout.trim().split('\n').at(-1));
}

// Each step is bounded well under the run's per-file limit, so a client that hangs (seen once in
// CI, 300 s, not reproduced) fails with the step's name instead of the whole file's timeout.
const STEP = { timeout: 90_000 };

describe('a mistyped server code', STEP, () => {
  test('a GET is 404 with the JSON-RPC error (it was 405), a GET of the real code still 405', async () => {
    const r = await fetch(typo, { headers: { accept: 'text/event-stream' } });
    assert.equal(r.status, 404);
    assert.equal(r.headers.get('content-type'), 'application/json');
    assert.deepEqual(await r.json(), { jsonrpc: '2.0', id: null, error: { code: -32600, message: NOT_FOUND } });
    const real = await fetch(good, { headers: { accept: 'text/event-stream' } });
    assert.equal(real.status, 405);
  });

  test('the TypeScript SDK shows the reason; its SSE transport (mcp-remote\'s fallback) a 404, not a 405', async () => {
    const streamable = await connectError(new StreamableHTTPClientTransport(new URL(typo)));
    assert.ok(streamable.startsWith('Streamable HTTP error: Error POSTing to endpoint: ') && streamable.includes(NOT_FOUND), streamable);
    assert.equal(await connectError(new SSEClientTransport(new URL(typo))), 'SSE error: Non-200 status code (404)');
  });

  test('the Python SDK 1.x reports only "Session terminated" for any 404 (what the troubleshooting page says)', async () => {
    const out = await python(typo);
    assert.equal(out.ok, false);
    assert.deepEqual(out.error, { step: 'initialize', type: 'McpError', message: 'Session terminated', code: 32600 });
  });
});

describe('a URL missing its /mcp', STEP, () => {
  test('POST and GET are 404 with a JSON-RPC error that says to add /mcp, never the code', async () => {
    for (const method of ['POST', 'GET']) {
      const r = await fetch(noMcp, {
        method,
        headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
        body: method === 'POST' ? JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'ping' }) : undefined,
      });
      assert.equal(r.status, 404, method);
      const body = await r.json();
      assert.equal(body.error.code, -32600);
      assert.match(body.error.message, new RegExp(`^Not found: the URL ends after the server code: .*${ADD_MCP}$`));
      assert.ok(!JSON.stringify(body).includes(good.split('/').at(-2)), 'the code is not said back');
    }
  });

  test('the TypeScript SDK shows the fix', async () => {
    assert.match(await connectError(new StreamableHTTPClientTransport(new URL(noMcp))), new RegExp(ADD_MCP));
  });
});
