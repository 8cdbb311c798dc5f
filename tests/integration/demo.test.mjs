// The built-in demo (DEMO=true): worker/demo.mjs serves a Dify-style workflow and chat app and an
// HTTP tool under /demo/, and scripts/demo-setup.mjs (what `make dev` runs) publishes them as one
// MCP server through the console API. Flowgate calls its own origin here, as it does under
// `make dev`.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { CallToolResultSchema } from '@modelcontextprotocol/sdk/types.js';

import { repoRoot, startFlowgate } from '../support/harness.mjs';
import { rpc } from '../support/flowgate-setup.mjs';
import { DEMO_KEYS } from '../../worker/demo.mjs';

const run = promisify(execFile);
const ADMIN_TOKEN = 'demo-test-admin-token-for-local-tests-only';

let fg; // DEMO=true
let plain; // no DEMO
let deployed; // DEMO=true, but wrangler.toml's entry (what `wrangler deploy` uploads)
let dir;
let varsFile;
let stateFile;

before(async () => {
  dir = fs.mkdtempSync(path.join(os.tmpdir(), 'flowgate-demo-'));
  varsFile = path.join(dir, '.dev.vars');
  stateFile = path.join(dir, 'demo-mcp-url');
  fs.writeFileSync(varsFile, `ADMIN_TOKEN=${ADMIN_TOKEN}\n# a comment\nDEMO="true"\n`);
  // DEMO is set either way, as a deployment would set it (the harness keeps the checkout's .dev.vars out).
  [fg, plain, deployed] = await Promise.all([
    startFlowgate({ vars: { DEMO: 'true', ADMIN_TOKEN }, devEntry: true }),
    startFlowgate({ vars: { DEMO: 'false' }, devEntry: true }),
    startFlowgate({ vars: { DEMO: 'true' } }),
  ]);
});

after(async () => {
  await Promise.allSettled([fg?.stop(), plain?.stop(), deployed?.stop()]);
  if (dir) fs.rmSync(dir, { recursive: true, force: true });
});

/** Runs scripts/demo-setup.mjs against `fg`; resolves its stdout and the MCP URL it printed. */
async function demoSetup({ vars = varsFile } = {}) {
  const { stdout } = await run(
    process.execPath,
    ['scripts/demo-setup.mjs', '--url', fg.url, '--vars', vars, '--state', stateFile, '--wait-seconds', '60'],
    { cwd: repoRoot, timeout: 120_000 },
  );
  return { stdout, url: /MCP URL:\s+(\S+)/.exec(stdout)?.[1] };
}

async function connect(url) {
  const client = new Client({ name: 'demo-test', version: '1.0.0' });
  await client.connect(new StreamableHTTPClientTransport(new URL(url)));
  return client;
}

async function callWithProgress(client, name, args) {
  const progress = [];
  const result = await client.callTool({ name, arguments: args }, CallToolResultSchema, {
    onprogress: (p) => progress.push(p),
  });
  return { result, progress };
}

const demoApps = async () => (await fg.console('/apps')).json.data.filter((a) => a.name.startsWith('Demo '));
const demoServers = async () => (await fg.console('/servers')).json.data.filter((s) => s.name === 'Flowgate demo');

describe('the demo, set up as make dev does', () => {
  let url;
  let client;

  before(async () => {
    const out = await demoSetup();
    assert.match(out.stdout, /created the demo apps and server/, out.stdout);
    assert.ok(out.stdout.includes(`Console:  ${fg.url}/console`), out.stdout);
    url = out.url;
    assert.ok(url?.startsWith(`${fg.url}/mcp/server/`), out.stdout);
    client = await connect(url);
  });

  after(async () => {
    await client?.close();
  });

  test('the server has a tool for each demo app', async () => {
    const { tools } = await client.listTools();
    assert.deepEqual(tools.map((t) => t.name).sort(), ['Demo_HTTP_tool', 'Demo_chat', 'Demo_workflow']);
    const workflow = tools.find((t) => t.name === 'Demo_workflow');
    assert.deepEqual(workflow.inputSchema.required, ['topic']);
    assert.equal(workflow.inputSchema.properties.topic.description, 'What the briefing is about');
    assert.deepEqual(Object.keys(workflow.outputSchema.properties).sort(), ['summary', 'word_count']);
  });

  test('the workflow tool streams one progress step per node, then its outputs', async () => {
    const { result, progress } = await callWithProgress(client, 'Demo_workflow', { topic: 'sea otters' });
    assert.equal(result.isError, false, JSON.stringify(result));
    assert.deepEqual(
      progress.map((p) => [p.progress, p.message]),
      [
        [1, 'Start succeeded (1 node finished)'],
        [2, 'Look up sources succeeded (2 nodes finished)'],
        [3, 'Draft the briefing succeeded (3 nodes finished)'],
        [4, 'Review succeeded (4 nodes finished)'],
        [5, 'End succeeded (5 nodes finished)'],
      ],
    );
    assert.match(result.structuredContent.summary, /^sea otters: /);
    assert.equal(result.structuredContent.word_count, result.structuredContent.summary.split(/\s+/).length);
    assert.deepEqual(JSON.parse(result.content[0].text), result.structuredContent);
  });

  test('the answer is an SSE stream: the notifications come before the result', async () => {
    const r = await rpc(url, {
      jsonrpc: '2.0',
      id: 7,
      method: 'tools/call',
      params: { name: 'Demo_workflow', arguments: { topic: 'x' }, _meta: { progressToken: 'p' } },
    }, { 'mcp-protocol-version': '2025-06-18' });
    assert.match(r.headers.get('content-type'), /text\/event-stream/);
    const methods = r.messages.map((m) => m.method ?? `result ${m.id}`);
    assert.equal(methods.filter((m) => m === 'notifications/progress').length, 5, methods.join());
    assert.equal(methods.at(-1), 'result 7');
  });

  test('the chat tool streams its answer through, with node progress', async () => {
    const { result, progress } = await callWithProgress(client, 'Demo_chat', { query: 'What is Flowgate?' });
    assert.equal(result.isError, false, JSON.stringify(result));
    assert.match(result.content[0].text, /^You asked: "What is Flowgate\?"\. This answer comes from/);
    assert.equal(result.structuredContent.answer, result.content[0].text);
    assert.deepEqual(progress.map((p) => p.message), ['Start succeeded (1 node finished)', 'Think it over succeeded (2 nodes finished)', 'Answer succeeded (3 nodes finished)']);
  });

  test('the HTTP tool streams percentages, then its result', async () => {
    const { result, progress } = await callWithProgress(client, 'Demo_HTTP_tool', { text: 'one three fifteen' });
    assert.equal(result.isError, false, JSON.stringify(result));
    assert.deepEqual(progress.map((p) => [p.progress, p.total]), [[25, 100], [50, 100], [75, 100]]);
    assert.deepEqual(result.structuredContent, { words: 3, characters: 17, longest_word: 'fifteen' });
  });

  test('a second start reuses the apps, the server and the URL', async () => {
    const [apps, servers] = [await demoApps(), await demoServers()];
    const again = await demoSetup();
    assert.match(again.stdout, /its code is unchanged/, again.stdout);
    assert.equal(again.url, url);
    assert.deepEqual((await demoApps()).map((a) => a.id).sort(), apps.map((a) => a.id).sort());
    assert.equal(apps.length, 3);
    assert.deepEqual((await demoServers()).map((s) => s.id), servers.map((s) => s.id));
    assert.equal(servers.length, 1);
  });

  test('without the saved URL the code is rotated and said so; the old URL stops working', async () => {
    fs.rmSync(stateFile);
    const rotated = await demoSetup();
    assert.match(rotated.stdout, /rotated the demo server code/, rotated.stdout);
    assert.notEqual(rotated.url, url);
    assert.equal(fs.readFileSync(stateFile, 'utf8').trim(), rotated.url);
    const init = { jsonrpc: '2.0', id: 1, method: 'ping' };
    assert.equal((await rpc(url, init)).status, 404);
    assert.equal((await rpc(rotated.url, init)).status, 200);
    assert.equal((await demoApps()).length, 3);
    assert.equal((await demoServers()).length, 1);
    url = rotated.url;
  });

  test('on another port the apps move along and the code is kept', async () => {
    await client.close();
    const oldPort = fg.port;
    await fg.stop({ keepState: true });
    fg = await startFlowgate({ vars: { DEMO: 'true', ADMIN_TOKEN }, persistDir: fg.persistDir, devEntry: true });
    assert.notEqual(fg.port, oldPort);
    const moved = await demoSetup();
    assert.match(moved.stdout, /its code is unchanged/, moved.stdout);
    assert.equal(moved.url, url.replace(`:${oldPort}/`, `:${fg.port}/`));
    const apps = await demoApps();
    assert.equal(apps.length, 3);
    for (const a of apps) assert.ok((a.backend.base_url ?? a.backend.api_endpoint).startsWith(`${fg.url}/demo/`), JSON.stringify(a.backend));
    client = await connect(moved.url);
    const { result, progress } = await callWithProgress(client, 'Demo_HTTP_tool', { text: 'moved along' });
    assert.equal(result.isError, false, JSON.stringify(result));
    assert.equal(progress.length, 3);
    const chat = await callWithProgress(client, 'Demo_chat', { query: 'still there?' });
    assert.equal(chat.result.isError, false, JSON.stringify(chat.result));
  });
});

describe('the demo backend', () => {
  test('answers Dify errors for a wrong key and an unknown path', async () => {
    const r = await fg.fetchJson('/demo/v1/info', { token: 'app-wrong' });
    assert.equal(r.status, 401);
    assert.equal(r.json.code, 'unauthorized');
    const info = await fg.fetchJson('/demo/v1/info', { token: DEMO_KEYS.chat });
    assert.deepEqual([info.status, info.json.mode, info.json.name], [200, 'advanced-chat', 'Demo chat']);
    const wrong = await fg.fetchJson('/demo/v1/completion-messages', { token: DEMO_KEYS.chat, body: {} });
    assert.equal(wrong.status, 404);
    const tool = await fg.fetchJson('/demo/tool', { body: { text: 'x' } });
    assert.equal(tool.status, 401);
  });

  /** One request to each of the demo's backends, with its key. */
  const DEMO_REQUESTS = [
    ['/demo/v1/info', { token: DEMO_KEYS.workflow }],
    ['/demo/tool', { token: DEMO_KEYS.tool, body: { text: 'x' } }],
  ];

  test('without DEMO, /demo/ is the Worker’s usual JSON 404', async () => {
    for (const [p, opts] of DEMO_REQUESTS) {
      const r = await plain.fetchJson(p, opts);
      assert.equal(r.status, 404, r.text);
      assert.equal(r.json.error, 'not_found');
      assert.match(r.json.message, /^no route (GET|POST) "\/demo\//);
    }
  });

  test('the deployed entry has no demo: /demo/ is a 404 even with DEMO=true', async () => {
    for (const [p, opts] of DEMO_REQUESTS) {
      const r = await deployed.fetchJson(p, opts);
      assert.equal(r.status, 404, r.text);
      assert.equal(r.json.error, 'not_found');
    }
  });

  test('demo-setup does nothing when the vars file does not set DEMO=true', async () => {
    const off = path.join(dir, 'off.vars');
    fs.writeFileSync(off, `ADMIN_TOKEN=${ADMIN_TOKEN}\nDEMO=false\n`);
    const before = await plain.console('/apps');
    const { stdout } = await run(process.execPath, ['scripts/demo-setup.mjs', '--url', plain.url, '--vars', off, '--state', path.join(dir, 'x')], {
      cwd: repoRoot,
      timeout: 60_000,
    });
    assert.equal(stdout, '');
    assert.deepEqual((await plain.console('/apps')).json, before.json);
    assert.equal(fs.existsSync(path.join(dir, 'x')), false);
  });
});

// `make dev` runs without [assets] (scripts/dev-config.mjs): worker/dev.mjs serves the console's
// files itself. `deployed` runs wrangler.toml, whose files the platform's asset Workers serve.
describe('the console under make dev', () => {
  const PATHS = [
    '/console', '/console/', '/console/index.html', '/console/index', '/console/?tab=apps', '/console?tab=apps',
    '/console/main.js', '/console/style.css', '/console/main.js?v=2', '/console/api/openapi.json',
    '/console/nope', '/console/main.js/', '/console/api', '/consoles', '/healthz',
  ];
  const SAME = ['location', 'content-type', 'cache-control', 'content-security-policy', 'x-content-type-options',
    'referrer-policy', 'x-frame-options', 'cross-origin-opener-policy', 'permissions-policy'];
  const answer = async (base, p, method, headers = {}) => {
    const res = await fetch(base + p, { method, headers, redirect: 'manual' });
    const body = await res.text();
    // The Worker's own answers carry a request id of their instance.
    return { status: res.status, headers: Object.fromEntries(SAME.map((h) => [h, res.headers.get(h)])), etag: res.headers.get('etag'), body: body.replace(/"request_id":"[^"]*"/, '') };
  };

  test('every console path is answered as the platform answers it from dist/', async () => {
    for (const p of PATHS) {
      for (const method of ['GET', 'HEAD', 'POST']) {
        const [dev, platform] = await Promise.all([answer(fg.url, p, method), answer(deployed.url, p, method)]);
        assert.equal(dev.status, platform.status, `${method} ${p}: status`);
        assert.deepEqual(dev.headers, platform.headers, `${method} ${p}: headers`);
        assert.equal(dev.body, platform.body, `${method} ${p}: body`);
        assert.equal(Boolean(dev.etag), Boolean(platform.etag), `${method} ${p}: an ETag on one side only`);
      }
    }
  });

  test('a file asked for again with its ETag is a 304, as the platform answers it', async () => {
    for (const p of ['/console/', '/console/main.js']) {
      for (const base of [fg.url, deployed.url]) {
        const first = await answer(base, p, 'GET');
        assert.ok(first.etag, `${base}${p}: no ETag`);
        const again = await answer(base, p, 'GET', { 'If-None-Match': first.etag });
        assert.equal(again.status, 304, `${base}${p}: revalidated`);
        assert.equal(again.body, '');
        assert.equal(again.headers['content-security-policy'], first.headers['content-security-policy']);
        const stale = await answer(base, p, 'GET', { 'If-None-Match': '"0000"' });
        assert.equal(stale.status, 200, `${base}${p}: a stale ETag gets the file`);
      }
    }
  });

  test('make dev runs without the [assets] table and with worker/dev.mjs', async () => {
    const { devConfig } = await import('../../scripts/dev-config.mjs');
    const text = devConfig(fs.readFileSync(path.join(repoRoot, 'wrangler.toml'), 'utf8'));
    assert.doesNotMatch(text, /^\s*\[assets\]/m);
    assert.match(text, /^main = "worker\/dev\.mjs"$/m);
    // Everything else is wrangler.toml's: bindings, migrations, vars.
    for (const binding of ['DB', 'CACHE', 'TASKS', 'OAUTH']) assert.match(text, new RegExp(`"${binding}"`));
  });
});
