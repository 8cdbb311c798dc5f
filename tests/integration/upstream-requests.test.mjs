// Requests an upstream MCP server sends while one of its tools runs (sampling, elicitation,
// roots) reach Flowgate's client over the call's SSE stream when the client declared the
// capability, and the client's answer, POSTed back to Flowgate, reaches the upstream; otherwise
// the upstream gets an error naming why. Relayed ids are sealed: altered, made up, or another
// server's ids are refused, and so are answers by another client (another client key, or on a
// server without client authentication another client name) than the one the call was made by.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { CreateMessageRequestSchema, ElicitRequestSchema, ListRootsRequestSchema } from '@modelcontextprotocol/sdk/types.js';

import { startFlowgate } from '../support/harness.mjs';
import { startUpstreams } from '../support/mcp-upstreams.mjs';
import { publish, rpc } from '../support/flowgate-setup.mjs';

let fg;
let ups;
let url;

before(async () => {
  [fg, ups] = await Promise.all([startFlowgate(), startUpstreams()]);
  const r = await fg.console('/apps', {
    method: 'POST',
    body: { name: 'Asker', description: 'd', mode: 'mcp', backend: { url: ups.everything.url, tool_name_prefix: false } },
  });
  assert.equal(r.status, 201, r.text);
  ({ url } = await publish(fg, r.json.id));
});

after(async () => {
  await Promise.allSettled([fg?.stop(), ups?.stop()]);
});

/** An SDK client that declared `capabilities`, with `handlers` [schema, fn] for requests. */
async function connect(capabilities, handlers = []) {
  const client = new Client({ name: 'relay-test', version: '1.0.0' }, { capabilities });
  for (const [schema, fn] of handlers) client.setRequestHandler(schema, fn);
  const transport = new StreamableHTTPClientTransport(new URL(url));
  await client.connect(transport);
  return { client, transport };
}

const textOf = (result) => result.content.map((c) => c.text).join('\n');

/** The upstream's answers to Flowgate: POSTs that carry a response (no method). */
const answersUpstream = () => ups.everything.requests.filter((r) => r.method === 'POST' && r.body && !r.body.method && r.body.id !== undefined);

describe('a client that declared the capability', () => {
  test('sampling: the request reaches the client under a sealed id, and its answer reaches the upstream', async () => {
    const seen = [];
    const { client, transport } = await connect({ sampling: {} }, [
      [CreateMessageRequestSchema, async (req, extra) => {
        seen.push({ params: req.params, id: extra.requestId });
        return { role: 'assistant', content: { type: 'text', text: 'sampled by the client' }, model: 'm', stopReason: 'endTurn' };
      }],
    ]);
    try {
      assert.match(transport.sessionId ?? '', /^fg-session\./, 'Flowgate gave a session id that carries the capabilities');
      const before = answersUpstream().length;
      const result = await client.callTool({ name: 'test_sampling', arguments: { prompt: 'Say hi' } });
      assert.equal(textOf(result), 'LLM response: sampled by the client');
      assert.equal(result.isError, undefined);
      assert.equal(seen.length, 1);
      assert.equal(seen[0].params.messages[0].content.text, 'Say hi');
      assert.match(String(seen[0].id), /^fg-relay\./);
      assert.ok(!String(seen[0].id).includes(ups.everything.url.split('//')[1]), 'the id does not show where it goes');
      // The upstream got the answer under its own id, on the call's session.
      const [answer] = answersUpstream().slice(before);
      assert.equal(answer.body.result.content.text, 'sampled by the client');
      assert.notEqual(answer.body.id, seen[0].id);
      assert.ok(answer.headers['mcp-session-id']);
    } finally {
      await client.close();
    }
  });

  test('form elicitation, URL elicitation and roots', async () => {
    const { client } = await connect({ elicitation: { form: {}, url: {} }, roots: {} }, [
      [ElicitRequestSchema, async (req) =>
        req.params.mode === 'url' ? { action: 'accept' } : { action: 'accept', content: { username: 'ada', email: 'ada@example.com' } }],
      [ListRootsRequestSchema, async () => ({ roots: [{ uri: 'file:///work', name: 'work' }] })],
    ]);
    try {
      const form = await client.callTool({ name: 'test_elicitation', arguments: { message: 'Who are you?' } });
      assert.equal(textOf(form), 'User response: action=accept, content={"username":"ada","email":"ada@example.com"}');
      const viaUrl = await client.callTool({ name: 'test_url_elicitation', arguments: {} });
      assert.equal(textOf(viaUrl), 'URL elicitation: action=accept, content={}');
      const roots = await client.callTool({ name: 'test_list_roots', arguments: {} });
      assert.equal(textOf(roots), 'Roots: file:///work');
    } finally {
      await client.close();
    }
  });

  test("a client's refusal reaches the upstream as its error", async () => {
    const { client } = await connect({ sampling: {} }, [
      [CreateMessageRequestSchema, async () => {
        throw new Error('the user declined to sample');
      }],
    ]);
    try {
      const result = await client.callTool({ name: 'test_sampling', arguments: { prompt: 'x' } });
      assert.equal(result.isError, true);
      assert.match(textOf(result), /the user declined to sample/);
    } finally {
      await client.close();
    }
  });
});

describe('what is not relayed: the upstream gets an error saying why', () => {
  test('a capability the client did not declare', async () => {
    const { client } = await connect({ elicitation: {} }, [[ElicitRequestSchema, async () => ({ action: 'accept' })]]);
    try {
      // The upstream is told what the client declared (no sampling), so it does not ask.
      const sampling = await client.callTool({ name: 'test_sampling', arguments: { prompt: 'x' } });
      assert.equal(sampling.isError, true);
      assert.equal(textOf(sampling), 'The client does not support sampling');
      // An upstream that asks anyway is refused by Flowgate: elicitation: {} is form mode only.
      const viaUrl = await client.callTool({ name: 'test_url_elicitation', arguments: {} });
      assert.match(textOf(viaUrl), /did not declare the elicitation\.url capability/);
      const roots = await client.callTool({ name: 'test_list_roots', arguments: {} });
      assert.match(textOf(roots), /did not declare the roots capability/);
    } finally {
      await client.close();
    }
  });

  test('a method outside sampling, elicitation and roots', async () => {
    const { client } = await connect({ sampling: {}, elicitation: {}, roots: {} });
    try {
      const result = await client.callTool({ name: 'test_ask_ping', arguments: {} });
      assert.equal(result.isError, true);
      assert.match(textOf(result), /Flowgate does not relay ping/);
    } finally {
      await client.close();
    }
  });

  test('a client without a session id (no initialize seen), or one that takes only JSON', async () => {
    const call = { jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'test_sampling', arguments: { prompt: 'x' } } };
    // Without Flowgate's session id a client declared nothing, and the upstream is told so.
    const noSession = await rpc(url, call, { 'mcp-protocol-version': '2025-11-25' });
    assert.equal(noSession.json.result.content[0].text, 'The client does not support sampling');
    const sid = await initialize({ sampling: {} });
    const jsonOnly = await rpc(url, call, { 'mcp-protocol-version': '2025-11-25', 'mcp-session-id': sid, accept: 'application/json' });
    assert.match(jsonOnly.json.result.content[0].text, /takes only JSON answers/);
    // A session id that is not Flowgate's counts as declaring nothing.
    const forged = await rpc(url, call, { 'mcp-protocol-version': '2025-11-25', 'mcp-session-id': 'fg-session.AAAA' });
    assert.equal(forged.json.result.content[0].text, 'The client does not support sampling');
  });

  test('a 2026-07-28 client: no requests mid-call (one that declared the capability gets input_required, see upstream-bridge)', async () => {
    const call26 = async (caps) => {
      const meta = {
        'io.modelcontextprotocol/protocolVersion': '2026-07-28',
        'io.modelcontextprotocol/clientCapabilities': caps,
        'io.modelcontextprotocol/clientInfo': { name: 't', version: '1' },
      };
      const call = { jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'test_sampling', arguments: { prompt: 'x' }, _meta: meta } };
      return rpc(url, call, { 'mcp-protocol-version': '2026-07-28', 'mcp-method': 'tools/call', 'mcp-name': 'test_sampling' });
    };
    // Declaring nothing, it is not asked: the upstream was told so (catalogs per client) and
    // says itself that the client cannot sample.
    const r = await call26({});
    assert.equal(r.json.result.isError, true);
    assert.match(r.json.result.content[0].text, /does not support sampling/);
    const bridged = await call26({ sampling: {} });
    assert.equal(bridged.json.result.resultType, 'input_required', bridged.text);
  });
});

/** Initializes as a raw client that declared `capabilities`; Flowgate's session id. */
async function initialize(capabilities, at = url) {
  const r = await rpc(at, { jsonrpc: '2.0', id: 0, method: 'initialize', params: { protocolVersion: '2025-11-25', capabilities, clientInfo: { name: 'raw', version: '1' } } });
  assert.equal(r.status, 200, r.text);
  const sid = r.headers.get('mcp-session-id');
  assert.match(sid ?? '', /^fg-session\./);
  return sid;
}

/** Reads SSE events from a fetch response as they come. */
function sseReader(res) {
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  let buffer = '';
  return async function next() {
    for (;;) {
      const end = buffer.indexOf('\n\n');
      if (end >= 0) {
        const block = buffer.slice(0, end);
        buffer = buffer.slice(end + 2);
        const data = block.split('\n').filter((l) => l.startsWith('data:')).map((l) => l.slice(5).trim()).join('\n');
        if (data) return JSON.parse(data);
        continue;
      }
      const { value, done } = await reader.read();
      if (done) return undefined;
      buffer += decoder.decode(value, { stream: true }).replace(/\r\n?/g, '\n');
    }
  };
}

describe('answers', () => {
  test('an altered, made-up or other server\'s id is refused; the right answer completes the call', async () => {
    const sid = await initialize({ sampling: {} });
    const headers = { 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2025-11-25', 'mcp-session-id': sid };
    const res = await fetch(url, {
      method: 'POST',
      headers,
      body: JSON.stringify({ jsonrpc: '2.0', id: 5, method: 'tools/call', params: { name: 'test_sampling', arguments: { prompt: 'raw' } } }),
    });
    assert.match(res.headers.get('content-type'), /text\/event-stream/);
    const next = sseReader(res);
    let request;
    while (!request) {
      const m = await next();
      assert.ok(m, 'the stream ended before the relayed request');
      if (m.method === 'sampling/createMessage') request = m;
    }
    assert.match(request.id, /^fg-relay\./);
    const answer = (id) => ({ jsonrpc: '2.0', id, result: { role: 'assistant', content: { type: 'text', text: 'raw answer' }, model: 'm' } });
    const post = (at, body) => rpc(at, body, { 'mcp-protocol-version': '2025-11-25', 'mcp-session-id': sid });

    const chars = [...request.id];
    const i = Math.floor(chars.length / 2);
    chars[i] = chars[i] === 'A' ? 'B' : 'A';
    const altered = await post(url, answer(chars.join('')));
    assert.equal(altered.status, 400, altered.text);
    assert.equal(altered.json.id, null);
    assert.match(altered.json.error.message, /not one Flowgate gave to a request it relayed/);

    const madeUp = await post(url, answer('fg-relay.' + Buffer.alloc(90, 7).toString('base64url')));
    assert.equal(madeUp.status, 400);

    // The same upstream behind another server: the id belongs to the first one.
    const twin = await fg.console('/apps', {
      method: 'POST',
      body: { name: 'Twin', description: 'd', mode: 'mcp', backend: { url: ups.everything.url, tool_name_prefix: false } },
    });
    assert.equal(twin.status, 201, twin.text);
    const other = await publish(fg, twin.json.id);
    const elsewhere = await post(other.url, answer(request.id));
    assert.equal(elsewhere.status, 400, elsewhere.text);
    assert.match(elsewhere.json.error.message, /relayed through another MCP server/);

    // Another client of the same server (without client authentication: another client name).
    const otherClient = await rpc(url, answer(request.id), { 'mcp-protocol-version': '2025-11-25', 'mcp-session-id': sid, 'user-agent': 'someone-else/1.0' });
    assert.equal(otherClient.status, 400, otherClient.text);
    assert.match(otherClient.json.error.message, /relayed to another client/);

    const noResult = await post(url, { jsonrpc: '2.0', id: request.id, result: 'text' });
    assert.equal(noResult.status, 400);
    assert.match(noResult.json.error.message, /needs a `result` object/);

    const ok = await post(url, answer(request.id));
    assert.equal(ok.status, 202, ok.text);
    let final;
    for (let m = await next(); m; m = await next()) if (m.id === 5) final = m;
    assert.equal(final.result.content[0].text, 'LLM response: raw answer');
  });
});

describe('answers on a server with client keys', () => {
  test('client key bob cannot answer a request relayed to alice\'s call, and is not told whose it is', async () => {
    const app = await fg.console('/apps', {
      method: 'POST',
      body: { name: 'KeyedAsker', description: 'd', mode: 'mcp', backend: { url: ups.everything.url, tool_name_prefix: false } },
    });
    assert.equal(app.status, 201, app.text);
    const server = await publish(fg, app.json.id);
    assert.equal((await fg.console(`/servers/${server.server.id}/auth`, { method: 'PUT', body: { mode: 'key' } })).status, 200);
    const keys = {};
    for (const name of ['alice', 'bob']) {
      const k = await fg.console(`/servers/${server.server.id}/keys`, { method: 'POST', body: { name } });
      assert.equal(k.status, 201, k.text);
      keys[name] = { authorization: `Bearer ${k.json.key}` };
    }
    const init = await rpc(server.url, { jsonrpc: '2.0', id: 0, method: 'initialize', params: { protocolVersion: '2025-11-25', capabilities: { sampling: {} }, clientInfo: { name: 'raw', version: '1' } } }, keys.alice);
    assert.equal(init.status, 200, init.text);
    const sid = init.headers.get('mcp-session-id');
    const headers = { 'content-type': 'application/json', accept: 'application/json, text/event-stream', 'mcp-protocol-version': '2025-11-25', 'mcp-session-id': sid };
    const res = await fetch(server.url, {
      method: 'POST',
      headers: { ...headers, ...keys.alice },
      body: JSON.stringify({ jsonrpc: '2.0', id: 7, method: 'tools/call', params: { name: 'test_sampling', arguments: { prompt: 'keyed' } } }),
    });
    assert.equal(res.status, 200);
    const next = sseReader(res);
    let request;
    while (!request) {
      const m = await next();
      assert.ok(m, 'the stream ended before the relayed request');
      if (m.method === 'sampling/createMessage') request = m;
    }
    const answer = { jsonrpc: '2.0', id: request.id, result: { role: 'assistant', content: { type: 'text', text: 'alice answers' }, model: 'm' } };
    const before = answersUpstream().length;
    const bob = await rpc(server.url, answer, { 'mcp-protocol-version': '2025-11-25', 'mcp-session-id': sid, ...keys.bob });
    assert.equal(bob.status, 400, bob.text);
    assert.match(bob.json.error.message, /relayed to another client/);
    assert.doesNotMatch(bob.text, /alice/, 'the refusal does not say whose the call is');
    assert.equal(answersUpstream().length, before, 'bob\'s answer did not reach the upstream');
    const alice = await rpc(server.url, answer, { 'mcp-protocol-version': '2025-11-25', 'mcp-session-id': sid, ...keys.alice });
    assert.equal(alice.status, 202, alice.text);
    let final;
    for (let m = await next(); m; m = await next()) if (m.id === 7) final = m;
    assert.equal(final.result.content[0].text, 'LLM response: alice answers');
  });
});
