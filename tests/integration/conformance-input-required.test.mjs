// Multi round-trip requests (MCP 2026-07-28, SEP-2322) of an upstream, through Flowgate: every
// `input-required-result-*` scenario through Flowgate in front of a 2026-07-28 upstream fixture
// that implements the reference server's fixture tools, and straight against the fixture, so a
// failure through Flowgate is Flowgate's. Then what the scenarios cannot see: the client gets
// Flowgate's sealed requestState and the upstream its own back; a state is bound to its server,
// tool and caller (another client key of the same server cannot continue the round); an input request the client did not declare the capability for is refused.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';

import { startFlowgate } from '../support/harness.mjs';
import { recorder, scenarioPair } from '../support/conformance.mjs';
import { startInputRequiredUpstream } from '../support/input-required-upstream.mjs';
import { rpc2026, serverOf, upstreamApp } from '../support/flowgate-setup.mjs';

const V = '2026-07-28';
const SCENARIOS = [
  'basic-elicitation',
  'basic-sampling',
  'basic-list-roots',
  'request-state',
  'multiple-input-requests',
  'multi-round',
  'missing-input-response',
  'non-tool-request',
  'result-type',
  'unsupported-methods',
  'tampered-state',
  'capability-check',
  'ignore-extra-params',
  'validate-input',
].map((s) => `input-required-result-${s}`);

const rec = recorder('conformance-input-required');
let fg;
let up;
let url;
let otherUrl;
let keyedUrl;
const keyOf = {};

before(async () => {
  [fg, up] = await Promise.all([startFlowgate(), startInputRequiredUpstream()]);
  const app = await upstreamApp(fg, 'Asker', { url: up.url, tool_name_prefix: false }, 'A 2026-07-28 upstream that asks for input');
  ({ url } = await serverOf(fg, 'Asking', [app]));
  ({ url: otherUrl } = await serverOf(fg, 'Other', [app]));
  // A server whose clients authenticate with keys: alice and bob.
  const keyed = await serverOf(fg, 'Keyed', [app]);
  keyedUrl = keyed.url;
  assert.equal((await fg.console(`/servers/${keyed.id}/auth`, { method: 'PUT', body: { mode: 'key' } })).status, 200);
  for (const name of ['alice', 'bob']) {
    const k = await fg.console(`/servers/${keyed.id}/keys`, { method: 'POST', body: { name } });
    assert.equal(k.status, 201, k.text);
    keyOf[name] = k.json.key;
  }
});

after(async () => {
  await rec.save();
  await Promise.allSettled([fg?.stop(), up?.close()]);
});

for (const scenario of SCENARIOS) {
  scenarioPair(test, rec, scenario, { revision: V, flowgate: () => url, fixture: () => up.url, fixtureName: 'fixture: input-required-upstream' });
}

const CAPS = 'io.modelcontextprotocol/clientCapabilities';
/** One 2026-07-28 request; `caps` are the client capabilities it declares. */
const call = (method, params, { to = url, caps = { elicitation: {}, sampling: {}, roots: {} } } = {}) => rpc2026(to, method, params, { caps });
const upstreamCalls = (tool) => up.requests.filter((r) => r.body.method === 'tools/call' && r.body.params?.name === tool).map((r) => r.body.params);

test('the client gets Flowgate\'s sealed requestState; the upstream gets its own back, and the client\'s capabilities', async () => {
  const tool = 'test_input_required_result_request_state';
  const first = await call('tools/call', { name: tool, arguments: {} });
  assert.equal(first.result?.resultType, 'input_required', JSON.stringify(first));
  const sealed = first.result.requestState;
  assert.match(sealed, /^fg-state\./);
  const [asked] = upstreamCalls(tool).slice(-1);
  assert.deepEqual(asked._meta[CAPS], { elicitation: {}, sampling: {}, roots: {} }, 'the client\'s capabilities reached the upstream');
  const done = await call('tools/call', { name: tool, arguments: {}, inputResponses: { confirm: { action: 'accept', content: { ok: true } } }, requestState: sealed });
  assert.match(done.result?.content?.[0]?.text ?? '', /state-ok/, JSON.stringify(done));
  const [retry] = upstreamCalls(tool).slice(-1);
  assert.ok(!retry.requestState.startsWith('fg-state.') && !sealed.includes(retry.requestState), 'the upstream got its own state, which the client never saw');
  assert.deepEqual(retry.inputResponses, { confirm: { action: 'accept', content: { ok: true } } });
});

test('a requestState is refused when altered, made up, or taken to another server or tool; the upstream is not called', async () => {
  const tool = 'test_input_required_result_tampered_state';
  const first = await call('tools/call', { name: tool, arguments: {} });
  const sealed = first.result.requestState;
  const before = up.requests.length;
  const retry = (state, opts, name = tool) => call('tools/call', { name, arguments: {}, inputResponses: { confirm: { action: 'accept', content: { ok: true } } }, requestState: state }, opts);
  const cases = [
    [await retry(`${sealed.slice(0, -2)}AA`), /not one Flowgate gave/],
    [await retry('upstream-made-up-state'), /not one Flowgate gave/],
    [await retry(sealed, { to: otherUrl }), /another MCP server/],
    [await retry(sealed, {}, 'test_input_required_result_request_state'), /another request/],
  ];
  for (const [r, why] of cases) {
    assert.equal(r.error?.code, -32602, JSON.stringify(r));
    assert.match(r.error.message, why);
  }
  assert.equal(up.requests.length, before, 'no refused retry reached the upstream');
  const ok = await retry(sealed);
  assert.match(ok.result?.content?.[0]?.text ?? '', /state-ok/, JSON.stringify(ok));
});

test('an input request the client did not declare the capability for is refused with -32021', async () => {
  // This fixture tool asks for elicitation whatever the client declared.
  const r = await call('tools/call', { name: 'test_input_required_result_elicitation', arguments: {} }, { caps: { sampling: {} } });
  assert.equal(r.error?.code, -32021, JSON.stringify(r));
  assert.deepEqual(r.error.data, { requiredCapabilities: { elicitation: {} } });
  assert.deepEqual(upstreamCalls('test_input_required_result_elicitation').at(-1)._meta[CAPS], { sampling: {} });
  // prompts/get too.
  const p = await call('prompts/get', { name: 'test_input_required_result_prompt' }, { caps: {} });
  assert.equal(p.error?.code, -32021, JSON.stringify(p));
});

test('a requestState is bound to its caller: client key bob cannot continue alice\'s round, and is not told whose it is', async () => {
  const tool = 'test_input_required_result_request_state';
  const keyedCall = (params, who) => rpc2026(keyedUrl, 'tools/call', params, { caps: { elicitation: {}, sampling: {}, roots: {} }, headers: { authorization: `Bearer ${keyOf[who]}` } });
  const first = await keyedCall({ name: tool, arguments: {} }, 'alice');
  assert.equal(first.result?.resultType, 'input_required', JSON.stringify(first));
  const sealed = first.result.requestState;
  const before = up.requests.length;
  const answer = { name: tool, arguments: {}, inputResponses: { confirm: { action: 'accept', content: { ok: true } } }, requestState: sealed };
  const bob = await keyedCall(answer, 'bob');
  assert.equal(bob.error?.code, -32602, JSON.stringify(bob));
  assert.match(bob.error.message, /another client/);
  assert.doesNotMatch(JSON.stringify(bob), /alice/, 'the refusal does not say whose the state is');
  assert.equal(up.requests.length, before, 'bob\'s retry did not reach the upstream');
  const alice = await keyedCall(answer, 'alice');
  assert.match(alice.result?.content?.[0]?.text ?? '', /state-ok/, JSON.stringify(alice));
});
