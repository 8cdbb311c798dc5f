// Backends that go silent or stall: keep-alives while a Dify app says nothing, and the total
// timeout while a one-piece answer stalls after its headers. Found by planting bugs in the
// Worker by hand: each test here failed with its bug planted and passes without it.
//
// Keep-alives on a silent Dify stream: only the upstream MCP relay's keep-alives were tested
// (upstream-relay.test.mjs), and the fixture Dify's own pings (every 500 ms of a running
// workflow) make Flowgate write anyway, so a relay that never sent `: keep-alive` while a Dify
// app or HTTP tool is fully silent went unnoticed. Without them a client that went away is not
// seen (a disconnect shows only on a write) and the run goes on until idle_timeout_seconds.
//
// timeout_seconds on the blocking path after the headers (chunked, and with the length announced:
// the two ways a one-piece answer is read): only a backend that never sends its
// headers was tested (first_byte_timeout_seconds, or the 'slow' Dify behaviour), so reading
// the body of a one-piece answer with no deadline went unnoticed: a backend that sends its
// headers and then stalls held the client for as long as the connection lasted.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';

import { startFlowgate } from '../support/harness.mjs';
import { startDifyFixture } from '../support/dify-fixture.mjs';
import { startHostileBackend } from '../support/hostile-backend.mjs';
import { publish, registerApp } from '../support/flowgate-setup.mjs';

let fg;
let dify;
let hostile;

before(async () => {
  [fg, dify, hostile] = await Promise.all([startFlowgate(), startDifyFixture(), startHostileBackend()]);
});

after(async () => {
  await Promise.allSettled([fg?.stop(), dify?.stop(), hostile?.stop()]);
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

describe('a blocking call whose answer stalls after its headers', () => {
  // Both ways a one-piece answer is read: an announced length is read whole by the runtime, a
  // chunked one chunk by chunk (worker/outbound.mjs); each must end at the deadline.
  for (const [framing, head] of [
    ['chunked', {}],
    ['with its length announced', { 'content-length': '1000' }],
  ]) {
    test(`ends at timeout_seconds with isError naming the setting (${framing})`, async () => {
      const path = `/stalls-after-headers-${++serial}`;
      const endpoint = hostile.route(path, async (_req, res) => {
        res.writeHead(200, { 'content-type': 'application/json', ...head });
        res.write('{"answer": "half'); // and nothing more, until the test ends
        await new Promise((r) => res.once('close', r));
      });
      const manifest = { name: 'staller', description: 'Stalls', parameters: [{ name: 'q', type: 'string', required: false, form: 'llm' }] };
      const created = await fg.console('/apps', {
        method: 'POST',
        body: { name: `Staller${serial}`, description: 'd', mode: 'http-tool', backend: { api_endpoint: endpoint, manifest, timeout_seconds: 2, first_byte_timeout_seconds: 1 } },
      });
      assert.equal(created.status, 201, created.text);
      const { url } = await publish(fg, created.json.id, { description: 'd' });
      const started = Date.now();
      let res;
      try {
        res = await fetch(url, {
          method: 'POST',
          headers: { 'content-type': 'application/json', accept: 'application/json', ...V },
          body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: `Staller${serial}`, arguments: { q: 'x' } } }),
          signal: AbortSignal.timeout(20_000),
        });
      } catch (e) {
        assert.fail(`no answer ${Date.now() - started} ms after a call with timeout_seconds: 2 (${e.name})`);
      }
      const body = await res.json();
      assert.equal(hostile.requestsTo(path).length, 1);
      assert.equal(body.result.isError, true, JSON.stringify(body));
      assert.match(body.result.content[0].text, /did not answer within 2 s \(the app's timeout_seconds\)/);
      // The message above already names the timeout; this bound only says the call did not
      // hang until the client's 20 s abort: 10 s leaves 8 s over the 2 s timeout for load.
      assert.ok(Date.now() - started < 10_000, `took ${Date.now() - started} ms`);
    });
  }
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
