// Conversations of Dify chat apps (`backend.conversations: true`) through real clients: the
// official TypeScript SDK client and the official Python SDK client (tests/python/client.py)
// each hold a three-turn conversation with a chat app of the fake Dify (whose answer names the
// earlier turns it saw), and a second caller (another client key of the same server) cannot
// continue the first one's conversation: a tool error in words, and Dify kept the turn out.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

import { OWN_URL, repoRoot, startFlowgate, startProcessGroup } from '../support/harness.mjs';
import { startDifyFixture } from '../support/dify-fixture.mjs';
import { publish, registerApp } from '../support/flowgate-setup.mjs';

const PYTHON = path.join(repoRoot, '.venv', 'bin', 'python');
const CLIENT = path.join(repoRoot, 'tests', 'python', 'client.py');
const RUN_TIMEOUT_MS = 60_000;
const UUID = /^[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}$/;

let fg;
let dify;
let s;
const keys = {};

before(async () => {
  if (!fs.existsSync(PYTHON)) throw new Error(`${PYTHON} is missing: run scripts/setup.sh --test-tools (or make test)`);
  [fg, dify] = await Promise.all([startFlowgate({ vars: { PUBLIC_URL: OWN_URL } }), startDifyFixture()]);
  const { app, apiKey } = await registerApp(fg, dify, {
    mode: 'chat',
    name: 'Chat in turns',
    form: [],
    backend: { conversations: true },
  });
  s = { ...(await publish(fg, app.id, { description: 'Talks in turns' })), apiKey, tool: 'Chat_in_turns' };
  const mode = await fg.console(`/servers/${s.server.id}/auth`, { method: 'PUT', body: { mode: 'key' } });
  assert.equal(mode.status, 200, mode.text);
  for (const name of ['alice', 'bob']) {
    const r = await fg.console(`/servers/${s.server.id}/keys`, { method: 'POST', body: { name } });
    assert.equal(r.status, 201, r.text);
    keys[name] = r.json.key;
  }
});

after(async () => {
  await Promise.allSettled([fg?.stop(), dify?.stop()]);
});

const chats = () => dify.requestsFor(s.apiKey).filter((r) => r.path === '/v1/chat-messages');

/** A TypeScript SDK client connected as the holder of `key`. */
async function tsClient(key) {
  const transport = new StreamableHTTPClientTransport(new URL(s.url), {
    requestInit: { headers: { authorization: `Bearer ${key}` } },
  });
  const client = new Client({ name: 'conversations-test', version: '1.0.0' });
  await client.connect(transport);
  return client;
}

/** One tools/call by the Python SDK as the holder of `key`: what client.py printed. */
async function pythonCall(key, args) {
  const argv = [CLIENT, s.url, '--timeout', String(RUN_TIMEOUT_MS / 1000 - 10), '-H', `Authorization: Bearer ${key}`,
    '--call', s.tool, '--arguments', JSON.stringify(args)];
  const p = startProcessGroup(PYTHON, argv, { capture: true, label: 'python-sdk' });
  const timer = setTimeout(() => p.stop({ graceMs: 1000 }), RUN_TIMEOUT_MS);
  await p.exited;
  clearTimeout(timer);
  await p.stop({ graceMs: 500 });
  const { stdout, stderr } = p.output();
  const out = JSON.parse(stdout.trim().split('\n').at(-1));
  assert.equal(out.ok, true, `${JSON.stringify(out.error ?? out)}\n${stderr}`);
  return { tools: out.tools, result: out.call };
}

/** The conversation a result names, checked in every place it is shown. */
function conversationOf(result) {
  assert.equal(result.isError, false, JSON.stringify(result));
  const id = result.structuredContent?.conversation_id;
  assert.match(id ?? '', UUID, JSON.stringify(result));
  assert.equal(result._meta?.['flowgate/conversationId'], id, 'and in _meta');
  assert.match(result.content.at(-1).text, new RegExp(`^conversation_id: ${id} `), 'and in words, for the model');
  return id;
}

describe('the TypeScript SDK client', () => {
  test('sees conversation_id in the tool and holds a three-turn conversation', async () => {
    const client = await tsClient(keys.alice);
    try {
      const { tools } = await client.listTools();
      const [tool] = tools;
      assert.equal(tool.inputSchema.properties.conversation_id.type, 'string');
      assert.deepEqual(tool.inputSchema.required, ['query']);
      assert.equal(tool.outputSchema.properties.conversation_id.type, 'string');
      assert.match(tool.description, /^Talks in turns This tool keeps conversations/);

      const first = await client.callTool({ name: s.tool, arguments: { query: 'Which city is the capital of France?' } });
      const id = conversationOf(first);
      assert.equal(first.structuredContent.answer, 'echo: Which city is the capital of France?');
      const second = await client.callTool({ name: s.tool, arguments: { query: 'How many people live there?', conversation_id: id } });
      assert.equal(conversationOf(second), id);
      const third = await client.callTool({ name: s.tool, arguments: { query: 'And its river?', conversation_id: id } });
      assert.equal(conversationOf(third), id);
      assert.equal(
        third.structuredContent.answer,
        'echo: And its river? (turn 3; earlier: "Which city is the capital of France?", "How many people live there?")',
      );
      assert.deepEqual(dify.conversation(s.apiKey, id), {
        user: 'alice',
        queries: ['Which city is the capital of France?', 'How many people live there?', 'And its river?'],
      });
    } finally {
      await client.close();
    }
  });
});

describe('the Python SDK client', () => {
  test('holds a three-turn conversation, one process per turn', async () => {
    const first = await pythonCall(keys.alice, { query: 'one' });
    assert.equal(first.tools[0].inputSchema.properties.conversation_id.type, 'string');
    const id = conversationOf(first.result);
    const second = await pythonCall(keys.alice, { query: 'two', conversation_id: id });
    assert.equal(conversationOf(second.result), id);
    const third = await pythonCall(keys.alice, { query: 'three', conversation_id: id });
    assert.equal(conversationOf(third.result), id);
    assert.equal(third.result.structuredContent.answer, 'echo: three (turn 3; earlier: "one", "two")');
    assert.equal(third.result.content[0].text, 'echo: three (turn 3; earlier: "one", "two")');
  });
});

describe('a second caller', () => {
  test('cannot continue the first one\'s conversation, with either SDK, and is told what to do', async () => {
    const alice = await tsClient(keys.alice);
    const bob = await tsClient(keys.bob);
    try {
      const id = conversationOf(await alice.callTool({ name: s.tool, arguments: { query: 'my secret' } }));
      const before = chats().length;
      const refused = await bob.callTool({ name: s.tool, arguments: { query: 'what was the secret?', conversation_id: id } });
      assert.equal(refused.isError, true, JSON.stringify(refused));
      assert.match(refused.content[0].text, new RegExp(`^no conversation ${id} of yours: .*omit conversation_id to start a new conversation$`));
      assert.equal(refused.structuredContent, undefined);
      assert.doesNotMatch(JSON.stringify(refused), /my secret/);

      const py = await pythonCall(keys.bob, { query: 'what was the secret?', conversation_id: id });
      assert.equal(py.result.isError, true, JSON.stringify(py.result));
      assert.equal(py.result.content[0].text, refused.content[0].text, 'the same words through the Python SDK');

      // Dify was asked as bob, and refused him; alice's conversation has only her turn.
      const asked = chats().slice(before);
      assert.deepEqual(asked.map((r) => [r.body.user, r.body.conversation_id]), [['bob', id], ['bob', id]]);
      assert.deepEqual(dify.conversation(s.apiKey, id).queries, ['my secret']);
      // Bob starts his own instead; alice goes on with hers.
      const own = conversationOf(await bob.callTool({ name: s.tool, arguments: { query: 'hello' } }));
      assert.notEqual(own, id);
      const next = await alice.callTool({ name: s.tool, arguments: { query: 'still there?', conversation_id: id } });
      assert.equal(next.structuredContent.answer, 'echo: still there? (turn 2; earlier: "my secret")');
    } finally {
      await Promise.allSettled([alice.close(), bob.close()]);
    }
  });
});
