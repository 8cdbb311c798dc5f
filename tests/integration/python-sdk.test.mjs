// The official MCP Python SDK (`mcp` from PyPI, pinned in tests/python/requirements.txt and
// installed into .venv by scripts/setup.sh --test-tools) against the real Worker: tests/python/client.py runs
// one scenario per process (initialize, tools/list, tools/call, ping) and prints what the SDK saw
// as one JSON object, which these tests assert on. Covers a `none` server, a `key` server (the
// key's name is the Dify user; no key, a wrong or a revoked one are refused with 401 and the SDK
// reports the HTTP status), an `oauth` server (client credentials from the fake authorization
// server, discovered from the 401), progress and log notifications of a streamed call, bad arguments,
// and a durable task through the SDK's experimental tasks API.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { promisify } from 'node:util';

import { OWN_URL, repoRoot, startFlowgate, startProcessGroup } from '../support/harness.mjs';
import { startDifyFixture } from '../support/dify-fixture.mjs';
import { FORM, publish, registerApp } from '../support/flowgate-setup.mjs';
import { startOAuthIssuer } from '../support/oauth-issuer.mjs';

const PYTHON = path.join(repoRoot, '.venv', 'bin', 'python');
const CLIENT = path.join(repoRoot, 'tests', 'python', 'client.py');
const PINNED = fs.readFileSync(path.join(repoRoot, 'tests', 'python', 'requirements.txt'), 'utf8').match(/^mcp==(\S+)/m)?.[1];
const RUN_TIMEOUT_MS = 120_000;
const run = promisify(execFile);

// Not a skip: CI runs scripts/setup.sh --test-tools first (make test), so a missing venv is a broken setup,
// reported by the first test with what to do (and every other test fails with it).
const MISSING = fs.existsSync(PYTHON)
  ? null
  : `${PYTHON} is missing: run scripts/setup.sh --test-tools --test-tools (or make test) to install the MCP Python SDK into .venv`;

let fg;
let dify;

before(async () => {
  if (MISSING) throw new Error(MISSING);
  [fg, dify] = await Promise.all([startFlowgate({ vars: { PUBLIC_URL: OWN_URL } }), startDifyFixture()]);
});

test('the MCP Python SDK is installed in .venv at the pinned version (scripts/setup.sh --test-tools)', async () => {
  assert.equal(MISSING, null, MISSING);
  assert.ok(PINNED, 'tests/python/requirements.txt pins mcp==<version>');
  const { stdout } = await run(PYTHON, ['-c', 'import importlib.metadata as m; print(m.version("mcp"))']);
  assert.equal(stdout.trim(), PINNED, 'the venv holds the pinned SDK: run scripts/setup.sh --test-tools --test-tools');
});

after(async () => {
  await Promise.allSettled([fg?.stop(), dify?.stop()]);
});

/**
 * Runs tests/python/client.py against `url`; resolves {code, out, stderr} where `out` is the JSON
 * object it printed. Options: headers, call (tool name), args, progress, task (ttl ms), offer
 * (protocol revision offered in initialize).
 */
async function python(url, { headers = {}, call, args, progress = false, task, offer, oauth } = {}) {
  const argv = [CLIENT, url, '--timeout', String(RUN_TIMEOUT_MS / 1000 - 10)];
  if (oauth) argv.push('--oauth-client-id', oauth.clientId, '--oauth-client-secret', oauth.clientSecret, '--oauth-issuer', oauth.issuer);
  for (const [k, v] of Object.entries(headers)) argv.push('-H', `${k}: ${v}`);
  if (offer) argv.push('--offer', offer);
  if (call) argv.push('--call', call, '--arguments', JSON.stringify(args ?? {}));
  if (progress) argv.push('--progress');
  if (task !== undefined) argv.push('--task', String(task));
  const p = startProcessGroup(PYTHON, argv, { capture: true, label: 'python-sdk' });
  const timer = setTimeout(() => p.stop({ graceMs: 1000 }), RUN_TIMEOUT_MS);
  const { code, signal } = await p.exited;
  clearTimeout(timer);
  await p.stop({ graceMs: 500 });
  const { stdout, stderr } = p.output();
  const line = stdout.trim().split('\n').at(-1);
  let out;
  try {
    out = JSON.parse(line);
  } catch {
    assert.fail(`client.py printed no JSON (code ${code}, signal ${signal}):\n--- stdout ---\n${stdout}\n--- stderr ---\n${stderr}`);
  }
  assert.equal(code, out.ok ? 0 : 1, `the exit status follows ok: ${line}\n${stderr}`);
  return { code, out, stderr };
}

/** Asserts the scenario completed, with the JSON (and the SDK's stderr) in the message if not. */
function completed({ out, stderr }) {
  assert.equal(out.ok, true, `${JSON.stringify(out.error ?? out)}\n${stderr}`);
  return out;
}

const ARGS = { text: 'hello from python', lang: 'fr', count: 3, loud: true };
const runsOf = (apiKey) => dify.requestsFor(apiKey).filter((r) => r.path === '/v1/workflows/run');

async function workflowServer(name, opts = {}) {
  const { app, apiKey } = await registerApp(fg, dify, { mode: 'workflow', name, ...opts });
  const { server, url } = await publish(fg, app.id);
  return { server, url, app, apiKey, tool: name.replace(/[^A-Za-z0-9_.-]+/g, '_') };
}

describe('a none server', () => {
  let s;
  before(async () => {
    s = await workflowServer('Py workflow');
  });

  test('the Python SDK initializes, lists the tool with its schemas, calls it and gets the backend\'s answer', async () => {
    const out = completed(await python(s.url, { call: s.tool, args: ARGS }));
    assert.equal(out.sdk.version, PINNED, 'the venv holds the pinned SDK');
    assert.deepEqual(out.steps, ['initialize', 'tools/list', 'tools/call', 'ping']);

    assert.equal(out.initialize.protocolVersion, '2025-11-25', 'the SDK offers its latest revision and Flowgate echoes it');
    assert.equal(out.initialize.serverInfo.name, 'Flowgate');
    assert.equal(out.initialize.instructions, 'A test server');
    assert.ok(out.initialize.capabilities.tools, JSON.stringify(out.initialize.capabilities));

    assert.deepEqual(out.tools.map((t) => t.name), ['Py_workflow']);
    const [tool] = out.tools;
    assert.equal(tool.title, 'Py workflow');
    assert.equal(tool.description, 'A test server');
    assert.equal(tool.inputSchema.type, 'object');
    assert.deepEqual(Object.keys(tool.inputSchema.properties), ['text', 'lang', 'count', 'loud']);
    assert.deepEqual(tool.inputSchema.required, ['text']);
    assert.deepEqual(tool.inputSchema.properties.text, { type: 'string', description: 'The text to work on', maxLength: 50 });
    assert.deepEqual(tool.inputSchema.properties.lang.enum, ['en', 'fr']);
    assert.equal(tool.inputSchema.properties.lang.default, 'en');
    assert.equal(tool.inputSchema.properties.count.type, 'number');
    assert.equal(tool.inputSchema.properties.loud.type, 'boolean');
    assert.deepEqual(tool.outputSchema?.properties?.echo, { type: 'object' }, JSON.stringify(tool.outputSchema));

    // The fake Dify's workflow echoes its inputs as the output `echo`.
    assert.equal(out.call.isError, false, JSON.stringify(out.call));
    assert.deepEqual(out.call.content.map((c) => c.type), ['text']);
    assert.deepEqual(JSON.parse(out.call.content[0].text), { echo: ARGS });
    assert.deepEqual(out.call.structuredContent, { echo: ARGS });
    assert.deepEqual(out.call.progress, [], 'no progress callback, no progress token: no progress');

    const runs = runsOf(s.apiKey);
    assert.equal(runs.length, 1);
    assert.equal(runs[0].body.response_mode, 'streaming', 'the SDK accepts SSE, so Dify is called streaming');
    assert.deepEqual(runs[0].body.inputs, ARGS);
    assert.match(runs[0].body.user, /^mcp-[0-9a-f]{24}$/, 'on a none server the user is derived from the client');
  });

  for (const offer of ['2024-11-05', '2025-03-26', '2025-06-18']) {
    test(`an SDK offering ${offer} gets that revision, and structured results only from 2025-06-18`, async () => {
      const out = completed(await python(s.url, { offer, call: s.tool, args: { text: offer } }));
      assert.equal(out.initialize.protocolVersion, offer);
      const structured = offer >= '2025-06-18';
      assert.equal(out.tools[0].title, structured ? 'Py workflow' : undefined);
      assert.equal(out.tools[0].outputSchema !== undefined, structured);
      assert.deepEqual(JSON.parse(out.call.content[0].text), { echo: { text: offer } });
      assert.deepEqual(out.call.structuredContent, structured ? { echo: { text: offer } } : null);
    });
  }

  test('bad arguments: a tool error on 2025-11-25 (SEP-1303), a JSON-RPC -32602 the SDK raises before', async () => {
    const before = runsOf(s.apiKey).length;
    const latest = completed(await python(s.url, { call: s.tool, args: { lang: 'de' } }));
    assert.equal(latest.call.isError, true);
    assert.match(latest.call.content[0].text, /text/, JSON.stringify(latest.call));

    const older = await python(s.url, { offer: '2025-06-18', call: s.tool, args: { lang: 'de' } });
    assert.equal(older.code, 1);
    assert.equal(older.out.ok, false);
    assert.deepEqual(older.out.steps, ['initialize', 'tools/list']);
    assert.equal(older.out.error.step, 'tools/call');
    assert.equal(older.out.error.type, 'McpError', JSON.stringify(older.out.error));
    assert.equal(older.out.error.code, -32602);
    assert.equal(runsOf(s.apiKey).length, before, 'nothing reached Dify');
  });

  test('a streamed call reports progress per workflow node and log messages through the SDK callbacks', async () => {
    const nodes = ['Start', 'Search', 'Summarise', 'End'].map((title) => ({ title, type: 'llm' }));
    const p = await workflowServer('Py progress', { nodes, form: [{ 'text-input': { variable: 'text', label: 'Text', required: true } }] });
    const out = completed(await python(p.url, { call: p.tool, args: { text: 'go' }, progress: true }));
    assert.equal(out.call.isError, false, JSON.stringify(out.call));
    assert.deepEqual(out.call.structuredContent, { echo: { text: 'go' } });
    assert.deepEqual(out.call.progress.map((x) => x.progress), [1, 2, 3, 4], JSON.stringify(out.call.progress));
    assert.deepEqual(out.call.progress.map((x) => x.message), nodes.map((n, i) => `${n.title} succeeded (${i + 1} node${i ? 's' : ''} finished)`));
    const nodeLogs = out.logs.filter((l) => l.data?.event === 'node_started');
    assert.deepEqual(nodeLogs.map((l) => l.data.node), nodes.map((n) => n.title));
    assert.ok(nodeLogs.every((l) => l.level === 'info' && l.logger === 'flowgate'), JSON.stringify(nodeLogs));
  });
});

describe('a key server', () => {
  let s;
  let key;
  before(async () => {
    s = await workflowServer('Py keyed');
    const mode = await fg.console(`/servers/${s.server.id}/auth`, { method: 'PUT', body: { mode: 'key' } });
    assert.equal(mode.status, 200, mode.text);
    const r = await fg.console(`/servers/${s.server.id}/keys`, { method: 'POST', body: { name: 'py-laptop' } });
    assert.equal(r.status, 201, r.text);
    key = r.json;
  });

  test('the Python SDK connects with the key, and Dify sees the key\'s name as the user', async () => {
    const out = completed(await python(s.url, { headers: { Authorization: `Bearer ${key.key}` }, call: s.tool, args: { text: 'keyed' } }));
    assert.deepEqual(out.tools.map((t) => t.name), ['Py_keyed']);
    assert.equal(out.call.isError, false, JSON.stringify(out.call));
    assert.deepEqual(out.call.structuredContent, { echo: { text: 'keyed' } });
    const runs = runsOf(s.apiKey);
    assert.deepEqual(runs.map((r) => r.body.user), ['py-laptop']);
    assert.deepEqual(runs[0].body.inputs, { text: 'keyed' });
  });

  /** A refusal as the SDK reports it: httpx's HTTPStatusError on the initialize POST. */
  function assertRefused({ out }, { invalidToken }) {
    assert.equal(out.ok, false);
    assert.deepEqual(out.steps, [], 'nothing got past initialize');
    assert.equal(out.initialize, undefined);
    const e = out.error;
    assert.equal(e.step, 'initialize', JSON.stringify(e));
    assert.equal(e.type, 'HTTPStatusError');
    assert.equal(e.status, 401);
    assert.match(e.message, /^Client error '401 Unauthorized' for url /);
    assert.equal(e.wwwAuthenticate, invalidToken ? 'Bearer realm="flowgate", error="invalid_token"' : 'Bearer realm="flowgate"');
    assert.equal(e.body?.error?.code, -32600, JSON.stringify(e));
    assert.match(e.body.error.message, /^Unauthorized: /);
  }

  test('without a key, with a wrong key and with a revoked key the SDK fails with 401 and calls nothing', async () => {
    const before = runsOf(s.apiKey).length;
    assertRefused(await python(s.url, { call: s.tool, args: { text: 'x' } }), { invalidToken: false });
    assertRefused(await python(s.url, { headers: { Authorization: `Bearer fgk_${'A'.repeat(32)}` }, call: s.tool, args: { text: 'x' } }), { invalidToken: true });

    const other = await fg.console(`/servers/${s.server.id}/keys`, { method: 'POST', body: { name: 'py-revoked' } });
    assert.equal(other.status, 201, other.text);
    completed(await python(s.url, { headers: { Authorization: `Bearer ${other.json.key}` } }));
    const del = await fg.console(`/servers/${s.server.id}/keys/${other.json.id}`, { method: 'DELETE' });
    assert.equal(del.status, 200, del.text);
    assertRefused(await python(s.url, { headers: { Authorization: `Bearer ${other.json.key}` }, call: s.tool, args: { text: 'x' } }), { invalidToken: true });
    assert.equal(runsOf(s.apiKey).length, before, 'no refused call reached Dify');
  });
});

test('a durable task through the SDK\'s experimental tasks API: created, polled to completed, its result fetched', async () => {
  const t = await workflowServer('Py task', {
    form: [{ 'text-input': { variable: 'text', label: 'Text', required: true } }],
    backend: { task_support: 'optional', poll_interval_seconds: 1 },
    runDurationMs: 1500,
  });
  const out = completed(await python(t.url, { call: t.tool, args: { text: 'q3' }, task: 600_000 }));
  assert.ok(out.initialize.capabilities.tasks?.requests?.tools?.call, JSON.stringify(out.initialize.capabilities));
  assert.equal(out.tools[0].execution?.taskSupport, 'optional');
  const { task } = out.call;
  assert.equal(task.taskId.length, 32, task.taskId);
  assert.equal(task.ttl, 600_000);
  assert.equal(task.statuses[0], 'working', JSON.stringify(task.statuses));
  assert.equal(task.statuses.at(-1), 'completed', JSON.stringify(task.statuses));
  assert.equal(task.relatedTask?.taskId, task.taskId);
  assert.equal(out.call.isError, false, JSON.stringify(out.call));
  assert.deepEqual(out.call.structuredContent, { echo: { text: 'q3' } });
  assert.deepEqual(JSON.parse(out.call.content[0].text), { echo: { text: 'q3' } });
  assert.equal((await fg.console(`/servers/${t.server.id}/tasks/${task.taskId}`)).status, 200);
});

describe('an oauth server', () => {
  let s;
  let issuer;
  before(async () => {
    issuer = await startOAuthIssuer({ clients: { 'py-client': { secret: 'py-secret', sub: 'py-robot' } } });
    s = await workflowServer('Py oauth');
    const mode = await fg.console(`/servers/${s.server.id}/auth`, { method: 'PUT', body: { mode: 'oauth', oauth: { issuer: issuer.issuer } } });
    assert.equal(mode.status, 200, mode.text);
  });
  after(async () => {
    await issuer?.stop();
  });

  test('the Python SDK discovers the issuer from the 401, gets a token with client credentials, and Dify sees its sub', async () => {
    const oauth = { clientId: 'py-client', clientSecret: 'py-secret', issuer: issuer.issuer };
    const out = completed(await python(s.url, { oauth, call: s.tool, args: { text: 'oauth' } }));
    assert.equal(out.call.isError, false, JSON.stringify(out.call));
    assert.deepEqual(runsOf(s.apiKey).map((r) => r.body.user), ['py-robot']);
    assert.ok(issuer.counts.token >= 1, 'a token was issued');
  });

  test('without a token the SDK fails with 401 and the challenge names the resource metadata', async () => {
    const { out } = await python(s.url);
    assert.equal(out.ok, false);
    assert.equal(out.error.status, 401, JSON.stringify(out.error));
    const u = new URL(s.url);
    assert.equal(out.error.wwwAuthenticate, `Bearer resource_metadata="${u.origin}/.well-known/oauth-protected-resource${u.pathname}"`);
  });
});
