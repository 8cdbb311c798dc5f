// The official TypeScript SDK client against Flowgate, for every blocking Dify mode and every
// protocol revision the SDK speaks.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

import { startFlowgate } from '../support/harness.mjs';
import { startDifyFixture } from '../support/dify-fixture.mjs';
import { publish, registerApp } from '../support/flowgate-setup.mjs';

const REVISIONS = ['2024-11-05', '2025-03-26', '2025-06-18', '2025-11-25'];
const MODES = ['workflow', 'chat', 'advanced-chat', 'completion'];

let fg;
let dify;
const servers = {};

before(async () => {
  [fg, dify] = await Promise.all([startFlowgate(), startDifyFixture()]);
  for (const mode of MODES) {
    const { app } = await registerApp(fg, dify, { mode, name: `My ${mode} app` });
    servers[mode] = await publish(fg, app.id);
  }
});

after(async () => {
  await Promise.allSettled([fg?.stop(), dify?.stop()]);
});

/** An SDK client that offers `revision` in initialize (the SDK itself always offers its latest). */
async function connect(url, revision, userAgent) {
  const offer = (u, init) => {
    if (init?.body && typeof init.body === 'string') {
      const msg = JSON.parse(init.body);
      if (msg.method === 'initialize') {
        msg.params.protocolVersion = revision;
        init = { ...init, body: JSON.stringify(msg) };
      }
    }
    return fetch(u, init);
  };
  const requestInit = userAgent ? { headers: { 'user-agent': userAgent } } : undefined;
  const transport = new StreamableHTTPClientTransport(new URL(url), { fetch: offer, requestInit });
  const client = new Client({ name: 'flowgate-sdk-test', version: '1.0.0' });
  await client.connect(transport);
  return { client, transport };
}

for (const revision of REVISIONS) {
  describe(`SDK client on ${revision}`, () => {
    for (const mode of MODES) {
      test(`${mode}: initialize, tools/list, tools/call`, async () => {
        const { url } = servers[mode];
        const { client, transport } = await connect(url, revision);
        try {
          assert.equal(transport.protocolVersion, revision, 'the server echoes the offered revision');
          assert.equal(client.getServerVersion().name, 'Flowgate');
          assert.equal(client.getInstructions(), 'A test server');
          assert.ok(client.getServerCapabilities().tools);

          const { tools } = await client.listTools();
          assert.equal(tools.length, 1);
          const tool = tools[0];
          assert.equal(tool.name, `My_${mode}_app`);
          assert.equal(tool.description, 'A test server');
          const props = Object.keys(tool.inputSchema.properties);
          const chat = mode.includes('chat');
          assert.deepEqual(props, [...(chat ? ['query'] : []), 'text', 'lang', 'count', 'loud']);
          assert.deepEqual(tool.inputSchema.required, [...(chat ? ['query'] : []), 'text']);
          assert.equal(tool.inputSchema.properties.text.description, 'The text to work on');
          assert.equal(tool.inputSchema.properties.text.maxLength, 50);
          assert.deepEqual(tool.inputSchema.properties.lang.enum, ['en', 'fr']);
          const structured = revision >= '2025-06-18';
          assert.equal(tool.title, structured ? `My ${mode} app` : undefined);
          assert.equal(tool.outputSchema !== undefined, structured);

          const args = { text: 'hello', lang: 'fr', count: 3, loud: true, ...(chat ? { query: 'What is up?' } : {}) };
          const result = await client.callTool({ name: tool.name, arguments: args });
          assert.equal(result.isError, false);
          const text = result.content[0].text;
          if (mode === 'workflow') {
            assert.deepEqual(JSON.parse(text), { echo: { text: 'hello', lang: 'fr', count: 3, loud: true } });
            if (structured) assert.deepEqual(result.structuredContent, { echo: { text: 'hello', lang: 'fr', count: 3, loud: true } });
          } else if (chat) {
            assert.equal(text, 'echo: What is up?');
            if (structured) assert.deepEqual(result.structuredContent, { answer: 'echo: What is up?' });
          } else {
            assert.match(text, /^completion: /);
            assert.deepEqual(JSON.parse(text.slice('completion: '.length)), { text: 'hello', lang: 'fr', count: 3, loud: true });
          }
          if (!structured) assert.equal(result.structuredContent, undefined);
          await client.ping();
        } finally {
          await client.close();
        }
      });
    }
  });
}

test('SDK calls stream from Dify with a user that is stable per client and server, and differs between them', async () => {
  const { app, apiKey } = await registerApp(fg, dify, { mode: 'chat', name: 'Stable user' });
  const { url } = await publish(fg, app.id);
  // A second server (a workspace server) in front of the same app.
  const ws = await fg.console('/servers', { method: 'POST', body: { name: 'Workspace', app_ids: [app.id] } });
  assert.equal(ws.status, 201, ws.text);
  const calls = [
    [url, undefined], // the SDK's own User-Agent ...
    [url, undefined], // ... again, on a new connection: the same client
    [url, 'another-client/2.0'], // another client of the same server
    [ws.json.mcp_url, undefined], // the first client, on another server
  ];
  for (const [i, [u, userAgent]] of calls.entries()) {
    const { client } = await connect(u, '2025-06-18', userAgent);
    await client.callTool({ name: 'Stable_user', arguments: { query: `q${i}`, text: 't' } });
    await client.close();
  }
  const runs = dify.requestsFor(apiKey).filter((r) => r.path === '/v1/chat-messages');
  assert.deepEqual(runs.map((r) => r.body.query), ['q0', 'q1', 'q2', 'q3']);
  for (const r of runs) {
    assert.equal(r.body.response_mode, 'streaming');
    assert.deepEqual(r.body.inputs, { text: 't' });
    assert.match(r.body.user, /^mcp-[0-9a-f]{24}$/);
  }
  const [first, again, otherClient, otherServer] = runs.map((r) => r.body.user);
  assert.equal(again, first, 'the same client on the same server keeps its user');
  assert.notEqual(otherClient, first, 'another client gets another user');
  assert.notEqual(otherServer, first, 'another server gets another user');
  assert.notEqual(otherServer, otherClient);
});
