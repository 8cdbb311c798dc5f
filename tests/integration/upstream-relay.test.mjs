// Upstream MCP calls go through the same SSE relay as every other backend kind: keep-alives
// during silence, the call's timeouts, and cancellation (a client that goes away, a timeout, or
// the client's notifications/cancelled) passed on to the upstream as notifications/cancelled.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';

import { startFlowgate } from '../support/harness.mjs';
import { startUpstreams } from '../support/mcp-upstreams.mjs';
import { publish, rpc } from '../support/flowgate-setup.mjs';

let fg;
let ups;

before(async () => {
  [fg, ups] = await Promise.all([startFlowgate(), startUpstreams()]);
});

after(async () => {
  await Promise.allSettled([fg?.stop(), ups?.stop()]);
});

const V = { 'mcp-protocol-version': '2025-06-18' };
let serial = 0;

async function mcpApp(backend = {}) {
  const name = `Relay${++serial}`;
  const r = await fg.console('/apps', { method: 'POST', body: { name, description: 'd', mode: 'mcp', backend: { url: ups.stateful.url, ...backend } } });
  assert.equal(r.status, 201, r.text);
  return { name, ...(await publish(fg, r.json.id)) };
}

const slowCall = (tool, id, steps, delayMs) => JSON.stringify({ jsonrpc: '2.0', id, method: 'tools/call', params: { name: `${tool}_slow_progress`, arguments: { steps, delayMs } } });

/** The upstream's record of the tools/call Flowgate made for `steps`/`delayMs`, once it exists. */
const upstreamCall = (steps, delayMs) =>
  waitFor(() => ups.stateful.requests.find((r) => r.body?.method === 'tools/call' && r.body.params?.arguments?.steps === steps && r.body.params.arguments.delayMs === delayMs));

const cancelsOf = (requestId) =>
  ups.stateful.requests.filter((r) => r.body?.method === 'notifications/cancelled' && r.body.params?.requestId === requestId);

test('a silent upstream call gets keep-alive comments, then its result', async () => {
  const { name, url } = await mcpApp();
  const res = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json', accept: 'text/event-stream', ...V }, body: slowCall(name, 1, 1, 2500) });
  const text = await res.text();
  // 2.5 s of silence from the upstream: keep-alives go out every second meanwhile.
  assert.match(text, /^: keep-alive$/m);
  assert.match(text, /"done 1"/);
});

test('a client that goes away cancels the upstream request', async () => {
  const { name, url } = await mcpApp();
  const res = await fetch(url, { method: 'POST', headers: { 'content-type': 'application/json', accept: 'text/event-stream', ...V }, body: slowCall(name, 2, 30, 1000) });
  const reader = res.body.getReader();
  const call = await upstreamCall(30, 1000);
  await reader.read(); // the relay is writing (a keep-alive at least)
  await reader.cancel();
  const [cancel] = await waitFor(() => cancelsOf(call.body.id).length && cancelsOf(call.body.id));
  assert.equal(cancel.headers['mcp-session-id'], call.headers['mcp-session-id']);
});

test("the call's timeout cancels the upstream request and ends the call with a message", async () => {
  const { name, url } = await mcpApp({ tool_call_timeout: 2 });
  const r = await rpc(url, slowCall(name, 3, 1, 20_000), V);
  assert.equal(r.json.result.isError, true, r.text);
  assert.match(r.json.result.content[0].text, /^upstream Relay\d+: no answer within 2 s \(tool_call_timeout\)/);
  const call = await upstreamCall(1, 20_000);
  await waitFor(() => cancelsOf(call.body.id).length);
});

test("the client's notifications/cancelled reaches the upstream", async () => {
  const { name, url } = await mcpApp();
  const headers = { 'content-type': 'application/json', accept: 'text/event-stream', 'user-agent': 'relay-cancel/1', ...V };
  const res = await fetch(url, { method: 'POST', headers, body: slowCall(name, 44, 20, 1000) });
  const reader = res.body.getReader();
  const call = await upstreamCall(20, 1000);
  // The relay records the upstream request as the call starts; until that record exists a
  // cancel finds nothing, so the client's cancel is repeated until the upstream hears it (the
  // call runs 20 s, far longer than this takes).
  const cancel = { jsonrpc: '2.0', method: 'notifications/cancelled', params: { requestId: 44, reason: 'stop' } };
  await waitFor(async () => {
    const note = await rpc(url, cancel, { 'user-agent': 'relay-cancel/1', ...V });
    assert.equal(note.status, 202);
    await new Promise((r) => setTimeout(r, 200));
    return cancelsOf(call.body.id).length;
  });
  await reader.cancel();
});

async function waitFor(fn, ms = 20_000) {
  const until = Date.now() + ms;
  for (;;) {
    const v = await fn();
    if (v) return v;
    if (Date.now() > until) throw new Error('timed out waiting');
    await new Promise((r) => setTimeout(r, 50));
  }
}
