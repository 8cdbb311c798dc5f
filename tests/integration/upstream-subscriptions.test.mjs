// Clients that stay: the TypeScript SDK client opens its Flowgate session's standalone GET stream
// after initialize (as it does by default), subscribes to a resource of an upstream (the SDK
// everything fixture of tests/support/mcp-upstreams.mjs), and gets the upstream's
// notifications/resources/updated for it, and the upstream's tools list change, on that
// stream; after unsubscribe no more updates come. Without subscribing, it gets the upstream's
// list change (from a session of the client session object's own) and then reads the new list,
// not the cached one; the object's session ends with the client's. A client that never opens the
// stream is refused subscribe with words saying to open it, and nothing reaches the upstream.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { ResourceUpdatedNotificationSchema, ToolListChangedNotificationSchema } from '@modelcontextprotocol/sdk/types.js';

import { startFlowgate } from '../support/harness.mjs';
import { publish, rpc as mcpPost } from '../support/flowgate-setup.mjs';
import { startUpstreams } from '../support/mcp-upstreams.mjs';

const URI = 'test://watched-resource';
let fg;
let ups;
let url;

before(async () => {
  [fg, ups] = await Promise.all([startFlowgate(), startUpstreams()]);
  const r = await fg.console('/apps', { method: 'POST', body: { name: 'everything', description: 'An upstream', mode: 'mcp', backend: { url: ups.everything.url, tool_name_prefix: false } } });
  assert.equal(r.status, 201, r.text);
  ({ url } = await publish(fg, r.json.id));
});

after(async () => {
  await Promise.allSettled([fg?.stop(), ups?.stop()]);
});

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** Waits (up to 5 s) for `check` to hold. */
async function until(check, what) {
  for (let i = 0; i < 100; i++) {
    if (await check()) return;
    await sleep(50);
  }
  assert.fail(`timed out waiting for ${what}`);
}

test('the TypeScript SDK client subscribes on its session stream and gets the updates and list changes', async () => {
  const client = new Client({ name: 'subscriptions-test', version: '1.0.0' });
  const updates = [];
  const listChanges = [];
  client.setNotificationHandler(ResourceUpdatedNotificationSchema, (n) => updates.push(n.params.uri));
  client.setNotificationHandler(ToolListChangedNotificationSchema, () => listChanges.push(1));
  await client.connect(new StreamableHTTPClientTransport(new URL(url)));
  try {
    const caps = client.getServerCapabilities();
    assert.equal(caps.resources?.subscribe, true, JSON.stringify(caps));
    assert.equal(caps.tools?.listChanged, true, 'the upstream tells its list changes, and so does Flowgate');
    const before = ups.everything.subscriptions().length;
    assert.deepEqual(await client.subscribeResource({ uri: URI }), {});
    assert.equal(ups.everything.subscriptions().length, before + 1, 'forwarded to the upstream');
    // The object opens the upstream session's stream as it records the subscription: notify
    // until it is open.
    await until(async () => {
      await ups.everything.notifyResourceUpdated(URI);
      return updates.length > 0;
    }, 'the update');
    assert.ok(updates.every((u) => u === URI), JSON.stringify(updates));
    await until(async () => {
      await ups.everything.notifyToolListChanged();
      return listChanges.length > 0;
    }, 'the tools list change');

    assert.deepEqual(await client.unsubscribeResource({ uri: URI }), {});
    assert.equal(ups.everything.subscriptions().length, before, 'unsubscribed upstream');
    const seen = updates.length;
    assert.equal(await ups.everything.notifyResourceUpdated(URI), 0, 'no upstream session is subscribed now');
    await sleep(300);
    assert.equal(updates.length, seen);
  } finally {
    await client.close();
  }
});

test('a client that stays gets a list change without subscribing, and then the new list', async () => {
  const client = new Client({ name: 'list-changes-test', version: '1.0.0' });
  let changes = 0;
  client.setNotificationHandler(ToolListChangedNotificationSchema, () => {
    changes += 1;
  });
  const closedBefore = ups.everything.closedSessions.length;
  await client.connect(new StreamableHTTPClientTransport(new URL(url)));
  let closed = false;
  try {
    const names = async () => (await client.listTools()).tools.map((t) => t.name);
    // The object opens its own upstream session once the stream is open: notify until it hears.
    await until(async () => {
      await ups.everything.notifyToolListChanged();
      return changes > 0;
    }, 'a list change without a subscription');
    assert.ok(!(await names()).includes('late_tool'), 'read (and cached) before the change');
    assert.ok(!(await names()).includes('late_tool'));
    changes = 0;
    ups.everything.addTool('late_tool', 'late');
    await until(() => changes > 0, 'the tools list change');
    assert.ok((await names()).includes('late_tool'), 'the list is read again, not served from the cache');
    const result = await client.callTool({ name: 'late_tool', arguments: {} });
    assert.equal(result.content[0].text, 'late');
    await client.close();
    closed = true;
    await until(() => ups.everything.closedSessions.length > closedBefore, 'the object\'s session ended (DELETE)');
  } finally {
    if (!closed) await client.close();
  }
});

test('a client that never opens the stream is refused subscribe, saying to open it', async () => {
  const init = await mcpPost(url, { jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'raw', version: '1' } } });
  const sid = init.headers.get('mcp-session-id');
  assert.ok(sid?.startsWith('fg-session.'), init.text);
  const before = ups.everything.subscriptions().length;
  const started = Date.now();
  const r = await mcpPost(url, { jsonrpc: '2.0', id: 2, method: 'resources/subscribe', params: { uri: URI } }, { 'mcp-session-id': sid, 'mcp-protocol-version': '2025-06-18' });
  assert.equal(r.json.error?.code, -32601, r.text);
  assert.match(r.json.error.message, /open this session's stream first \(GET/);
  assert.ok(Date.now() - started < 5_000, 'refused within the short wait for the stream');
  assert.equal(ups.everything.subscriptions().length, before, 'nothing reached the upstream');
});
