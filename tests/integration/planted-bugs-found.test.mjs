// Gaps found by planting bugs in the Worker by hand: each test here failed with its bug planted
// and passes without it.
//
// Keep-alives on a silent Dify stream: only the upstream MCP relay's keep-alives were tested
// (upstream-relay.test.mjs), and the fixture Dify's own pings (every 500 ms of a running
// workflow) make Flowgate write anyway, so a relay that never sent `: keep-alive` while a Dify
// app or HTTP tool is fully silent went unnoticed. Without them a client that went away is not
// seen (a disconnect shows only on a write) and the run goes on until idle_timeout_seconds.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';

import { startFlowgate } from '../support/harness.mjs';
import { startDifyFixture } from '../support/dify-fixture.mjs';
import { publish, registerApp } from '../support/flowgate-setup.mjs';

let fg;
let dify;

before(async () => {
  [fg, dify] = await Promise.all([startFlowgate(), startDifyFixture()]);
});

after(async () => {
  await Promise.allSettled([fg?.stop(), dify?.stop()]);
});

const V = { 'mcp-protocol-version': '2025-06-18' };
const FORM = [{ 'text-input': { variable: 'text', label: 'Text', required: false } }];
let serial = 0;

/** A workflow app whose stream sends its first event and then nothing at all. */
async function silentServer(backend = {}) {
  const { app, apiKey } = await registerApp(fg, dify, { mode: 'workflow', name: `Silent${++serial}`, form: FORM, streamBehaviour: 'hang_after_first', backend });
  const { url } = await publish(fg, app.id);
  return { url, apiKey, tool: app.name };
}

const callBody = (name) => JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name, arguments: { text: 'x' } } });
const sseHeaders = { 'content-type': 'application/json', accept: 'text/event-stream', ...V };

describe('a silent Dify stream', () => {
  test('gets keep-alive comments while the app says nothing', async () => {
    const { url, tool } = await silentServer({ idle_timeout_seconds: 3 });
    const res = await fetch(url, { method: 'POST', headers: sseHeaders, body: callBody(tool) });
    assert.equal(res.status, 200);
    const text = await res.text();
    // Three silent seconds: a keep-alive goes out after each one (at least one counts, to leave
    // room for a loaded machine), then the idle timeout ends the call.
    const keepAlives = text.match(/^: keep-alive$/gm) ?? [];
    assert.ok(keepAlives.length >= 1, `expected keep-alives in a silent stream, got:\n${text}`);
    assert.match(text, /sent nothing for 3 s \(idle_timeout_seconds\)/);
  });

  test('a client that goes away while the app is silent gets the run stopped promptly', async () => {
    const { url, tool, apiKey } = await silentServer(); // idle_timeout_seconds: the default 60
    const ctl = new AbortController();
    const res = await fetch(url, { method: 'POST', headers: sseHeaders, body: callBody(tool), signal: ctl.signal });
    assert.equal(res.status, 200);
    // The run has started at Dify; leave while it is silent.
    await waitFor(() => dify.requestsFor(apiKey).find((q) => q.streaming && q.taskId));
    await new Promise((r) => setTimeout(r, 500));
    ctl.abort();
    // The next keep-alive (within a second) finds the client gone; 8 s is a wide margin, far
    // below the 60 s idle timeout that would otherwise be the first thing to stop the run.
    const stop = await waitFor(() => dify.stops.find((s) => s.apiKey === apiKey), 8_000);
    assert.match(stop.path, /^\/v1\/workflows\/tasks\/.+\/stop$/);
  });
});

async function waitFor(fn, ms = 10_000) {
  const until = Date.now() + ms;
  for (;;) {
    const v = fn();
    if (v) return v;
    if (Date.now() > until) throw new Error(`timed out after ${ms} ms waiting`);
    await new Promise((r) => setTimeout(r, 100));
  }
}
