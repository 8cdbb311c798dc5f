// A 2025 upstream's mid-call requests reach a 2026-07-28 client through the call bridge: the MCP
// Python SDK 2.x default client (which speaks 2026-07-28 with Flowgate) calls the reference
// server's asking tools through Flowgate and gets sampling, elicitation and roots as
// input_required rounds, ending with the same results it gets connecting to the upstream directly
// (where the requests come during the call, 2025-style). The upstream call is held by a CallBridge
// Durable Object under `wrangler dev --local`, across the client's retries.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';

import { repoRoot, startFlowgate, startProcessGroup } from '../support/harness.mjs';
import { startEverythingLegacySse, startUpstreams } from '../support/mcp-upstreams.mjs';
import { publish, rpc2026 } from '../support/flowgate-setup.mjs';

const PYTHON = path.join(repoRoot, '.venv-sdk2', 'bin', 'python');
const CLIENT = path.join(repoRoot, 'tests', 'python', 'sdk2', 'asking_client.py');
const RUN_TIMEOUT_MS = 90_000;

let fg;
let ups;
let legacy;
let url;
let legacyUrl;
let impatientUrl;

before(async () => {
  if (!fs.existsSync(PYTHON)) throw new Error(`${PYTHON} is missing: run scripts/setup.sh --test-tools to install the MCP Python SDK 2.x into .venv-sdk2`);
  let legacyUp;
  [fg, ups, legacyUp] = await Promise.all([startFlowgate(), startUpstreams(), startEverythingLegacySse()]);
  legacy = legacyUp;
  const app = async (name, backend) => {
    const r = await fg.console('/apps', { method: 'POST', body: { name, description: 'd', mode: 'mcp', backend: { tool_name_prefix: false, ...backend } } });
    assert.equal(r.status, 201, r.text);
    return (await publish(fg, r.json.id)).url;
  };
  url = await app('Asker', { url: ups.everything.url });
  impatientUrl = await app('Impatient', { url: ups.everything.url, tool_call_timeout: 4 });
  legacyUrl = await app('OldAsker', { url: legacy.api.url, tool_call_timeout: 30 });
});

after(async () => {
  await Promise.allSettled([fg?.stop(), ups?.stop(), legacy?.close()]);
});

/** Runs the SDK 2.x client: what it printed ({ok, protocol, text, isError, asked}). */
async function python(target, tool, args = {}, declare = 'sampling,elicitation,roots') {
  const argv = [CLIENT, target, tool, JSON.stringify(args), '--declare', declare, '--timeout', String(RUN_TIMEOUT_MS / 1000 - 10)];
  const p = startProcessGroup(PYTHON, argv, { capture: true, label: 'python-sdk2' });
  const timer = setTimeout(() => p.stop({ graceMs: 1000 }), RUN_TIMEOUT_MS);
  const { code } = await p.exited;
  clearTimeout(timer);
  await p.stop({ graceMs: 500 });
  const { stdout, stderr } = p.output();
  let out;
  try {
    out = JSON.parse(stdout.trim().split('\n').at(-1));
  } catch {
    assert.fail(`asking_client.py printed no JSON (code ${code}):\n${stdout}\n${stderr}`);
  }
  assert.ok(out.ok, `the client failed: ${JSON.stringify(out)}\n${stderr}`);
  return out;
}

const toolCalls = (up, name) => up.requests.filter((r) => r.method === 'POST' && r.body?.method === 'tools/call' && r.body.params?.name === name);

describe('the Python SDK 2.x default client, through Flowgate and directly', () => {
  for (const [tool, args, expected] of [
    ['test_sampling', { prompt: 'Say hi' }, 'LLM response: sampled by the client'],
    ['test_elicitation', { message: 'Who are you?' }, 'User response: action=accept'],
    ['test_list_roots', {}, 'Roots: file:///work/project'],
  ]) {
    test(`${tool}: the same result, asked the same things`, async () => {
      const direct = await python(ups.everything.url, tool, args);
      const before = toolCalls(ups.everything, tool).length;
      const through = await python(url, tool, args);
      assert.notEqual(direct.protocol, '2026-07-28', 'directly, a 2025 session');
      assert.equal(through.protocol, '2026-07-28', 'through Flowgate, the stateless revision');
      assert.ok(direct.text.startsWith(expected), direct.text);
      assert.equal(through.text, direct.text);
      assert.equal(through.isError, false);
      assert.deepEqual(through.asked, direct.asked);
      assert.equal(toolCalls(ups.everything, tool).length, before + 1, 'one upstream call across the client retries');
    });
  }

  test('a legacy HTTP+SSE upstream is bridged too', async () => {
    const through = await python(legacyUrl, 'test_elicitation', { message: 'Over SSE?' });
    assert.equal(through.protocol, '2026-07-28');
    assert.match(through.text, /^User response: action=accept, content=\{"username":"ada"/);
    assert.deepEqual(through.asked, [{ method: 'elicitation/create', message: 'Over SSE?' }]);
  });

  test('a capability the client did not declare is never asked for: the upstream was told the client has none', async () => {
    // The upstream's session declares what this client declared (sampling only), so the
    // reference server answers on its own that the client cannot elicit; nothing is asked.
    const through = await python(url, 'test_elicitation', { message: 'x' }, 'sampling');
    assert.equal(through.isError, true);
    assert.match(through.text, /does not support elicitation/);
    assert.deepEqual(through.asked, []);
  });
});

describe('the round trip on the wire', () => {
  test('input_required with a sealed fg-bridge. state; a replay of an answered round is -32602', async () => {
    const caps = { elicitation: {} };
    const first = await rpc2026(url, 'tools/call', { name: 'test_elicitation', arguments: { message: 'Name?' } }, { caps });
    assert.equal(first.result?.resultType, 'input_required', JSON.stringify(first));
    const [[key, request]] = Object.entries(first.result.inputRequests);
    assert.equal(request.method, 'elicitation/create');
    assert.equal(request.params.message, 'Name?');
    const state = first.result.requestState;
    assert.match(state, /^fg-bridge\./);
    const retry = { name: 'test_elicitation', arguments: { message: 'Name?' }, inputResponses: { [key]: { action: 'accept', content: { username: 'u', email: 'e@x' } } }, requestState: state };
    const done = await rpc2026(url, 'tools/call', retry, { caps });
    assert.equal(done.result?.resultType, 'complete', JSON.stringify(done));
    assert.match(done.result.content[0].text, /^User response: action=accept, content=\{"username":"u"/);
    const replay = await rpc2026(url, 'tools/call', retry, { caps });
    assert.equal(replay.error?.code, -32602, JSON.stringify(replay));
    assert.match(replay.error.message, /answered already/);
  });
});

describe('bounds', () => {
  test('a client that never comes back: the object gives the call up at tool_call_timeout and cancels it upstream', async () => {
    const caps = { elicitation: {} };
    const message = `Anyone there? ${Date.now()}`;
    const first = await rpc2026(impatientUrl, 'tools/call', { name: 'test_elicitation', arguments: { message } }, { caps });
    assert.equal(first.result?.resultType, 'input_required', JSON.stringify(first));
    const call = toolCalls(ups.everything, 'test_elicitation').find((r) => r.body.params.arguments.message === message);
    assert.ok(call, 'the upstream got the call');
    const cancelled = () => ups.everything.requests.find((r) => r.body?.method === 'notifications/cancelled' && r.body.params?.requestId === call.body.id);
    const deadline = Date.now() + 15_000;
    while (!cancelled() && Date.now() < deadline) await new Promise((r) => setTimeout(r, 250));
    assert.ok(cancelled(), 'the upstream was told the call is cancelled');
    assert.match(cancelled().body.params.reason, /did not answer within 4 s/);
    // The state has expired with the round: a late answer is refused.
    const [[key]] = Object.entries(first.result.inputRequests);
    const late = await rpc2026(impatientUrl, 'tools/call', {
      name: 'test_elicitation', arguments: { message }, inputResponses: { [key]: { action: 'decline' } }, requestState: first.result.requestState,
    }, { caps });
    assert.equal(late.error?.code, -32602, JSON.stringify(late));
  });
});
