// Legacy HTTP+SSE upstreams keep one session per caller across requests (the LegacySession
// Durable Object holds the upstream's event stream between them): a stateful tool of an upstream
// written with the TypeScript SDK's SSEServerTransport sees the state of the caller's earlier
// calls, another client key has its own, and a request the upstream sends while no call runs is
// refused at once instead of waiting for the upstream's timeout.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

import { startFlowgate } from '../support/harness.mjs';
import { publish } from '../support/flowgate-setup.mjs';
import { startLegacySessionUpstream } from '../support/legacy-session-upstream.mjs';

let fg;
let up;
let url;
const keys = {};

before(async () => {
  [fg, up] = await Promise.all([startFlowgate(), startLegacySessionUpstream()]);
  const r = await fg.console('/apps', { method: 'POST', body: { name: 'Machine', description: 'A stateful legacy upstream', mode: 'mcp', backend: { url: up.url } } });
  assert.equal(r.status, 201, r.text);
  const published = await publish(fg, r.json.id);
  url = published.url;
  const mode = await fg.console(`/servers/${published.server.id}/auth`, { method: 'PUT', body: { mode: 'key' } });
  assert.equal(mode.status, 200, mode.text);
  for (const name of ['alice', 'bob']) {
    const k = await fg.console(`/servers/${published.server.id}/keys`, { method: 'POST', body: { name } });
    assert.equal(k.status, 201, k.text);
    keys[name] = k.json.key;
  }
});

after(async () => {
  await Promise.allSettled([fg?.stop(), up?.close()]);
});

/** The official SDK client with a client key. */
async function connect(key) {
  const transport = new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers: { Authorization: `Bearer ${key}` } } });
  const client = new Client({ name: 'legacy-session-test', version: '1.0.0' });
  await client.connect(transport);
  return client;
}

const text = async (client, name) => {
  const r = await client.callTool({ name, arguments: {} });
  assert.ok(!r.isError, JSON.stringify(r));
  return r.content[0].text;
};

test('one client calling twice: the second call sees the state of the first', async () => {
  const alice = await connect(keys.alice);
  try {
    assert.equal(await text(alice, 'Machine_toggle'), 'Started');
    assert.equal(await text(alice, 'Machine_toggle'), 'Stopped');
  } finally {
    await alice.close();
  }
  // Another connection with the same key is the same caller: the same upstream session.
  const again = await connect(keys.alice);
  try {
    assert.equal(await text(again, 'Machine_toggle'), 'Started');
  } finally {
    await again.close();
  }
});

test('a second client key has its own upstream session and state', async () => {
  const opened = up.opened();
  const bob = await connect(keys.bob);
  try {
    assert.equal(await text(bob, 'Machine_toggle'), 'Started');
    assert.equal(await text(bob, 'Machine_toggle'), 'Stopped');
  } finally {
    await bob.close();
  }
  assert.equal(up.opened() - opened, 1, 'one new session, for bob');
  // The list's session, alice's and bob's: each kept open between requests.
  assert.equal(up.open(), 3);
});

test('a request the upstream sends while no call runs is refused at once, with the reason', async () => {
  const alice = await connect(keys.alice);
  try {
    assert.equal(await text(alice, 'Machine_roots_later'), 'asked later');
    // The upstream asks 300 ms after answering; no call of alice's runs then.
    await new Promise((r) => setTimeout(r, 1_000));
    let outcome = null;
    for (let i = 0; i < 50 && !outcome; i++) {
      await new Promise((r) => setTimeout(r, 100));
      outcome = JSON.parse(await text(alice, 'Machine_roots_outcome'));
    }
    assert.ok(outcome, 'the upstream got an answer to its roots/list');
    assert.match(outcome.error ?? '', /no call is running on this session/);
    assert.ok(outcome.ms < 5_000, `it waited ${outcome.ms} ms`);
  } finally {
    await alice.close();
  }
});
