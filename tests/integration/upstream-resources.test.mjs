// Resources, resource templates, prompts and completions of upstream MCP apps, through a Flowgate
// server with two upstream apps, driven by the official TypeScript SDK client.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

import { startFlowgate } from '../support/harness.mjs';
import { startUpstreams } from '../support/mcp-upstreams.mjs';
import { publish, rpc } from '../support/flowgate-setup.mjs';

let fg;
let ups;
let url; // the two-upstream server
let toolsOnlyUrl; // a server whose one upstream offers tools only
let otherAppId;
let client;

async function createApp(body) {
  const r = await fg.console('/apps', { method: 'POST', body: { mode: 'mcp', description: 'an upstream', ...body } });
  assert.equal(r.status, 201, r.text);
  return r.json;
}

async function connect(mcpUrl) {
  const c = new Client({ name: 'resources-test', version: '1.0.0' });
  await c.connect(new StreamableHTTPClientTransport(new URL(mcpUrl)));
  return c;
}

const V = { 'mcp-protocol-version': '2025-06-18' };
const req = (method, params = {}) => ({ jsonrpc: '2.0', id: 7, method, params });

before(async () => {
  [fg, ups] = await Promise.all([startFlowgate(), startUpstreams()]);
  const everything = await createApp({ name: 'Everything', backend: { url: ups.everything.url } });
  const other = await createApp({
    name: 'Other',
    backend: { url: ups.catalog.url, denied_resources: ['other://secret', 'other://item/secret'], denied_prompts: ['hidden'] },
  });
  otherAppId = other.id;
  const r = await fg.console('/servers', { method: 'POST', body: { name: 'Gateway', description: 'Two upstreams', app_ids: [everything.id, other.id] } });
  assert.equal(r.status, 201, r.text);
  url = r.json.mcp_url;
  const toolsOnly = await createApp({ name: 'Plain', backend: { url: ups.stateless.url } });
  ({ url: toolsOnlyUrl } = await publish(fg, toolsOnly.id));
  client = await connect(url);
});

after(async () => {
  await client?.close().catch(() => {});
  await Promise.allSettled([fg?.stop(), ups?.stop()]);
});

describe('upstream resources, prompts and completions', () => {
  test('initialize declares what the upstreams offer, subscriptions and list changes on the session\'s stream', () => {
    // The SDK client has a session, whose GET stream delivers them (upstream-subscriptions.test.mjs);
    // the everything upstream (with a session and its stream) tells its list changes.
    const caps = client.getServerCapabilities();
    assert.deepEqual(caps.resources, { subscribe: true, listChanged: true });
    assert.deepEqual(caps.prompts, { listChanged: true });
    assert.deepEqual(caps.completions, {});
    assert.ok(caps.tools);
  });

  test('resources are aggregated in app order, one page per app, denied and colliding URIs left out', async () => {
    const first = await client.listResources();
    assert.deepEqual(first.resources.map((r) => r.uri), ['test://static-text', 'test://static-binary', 'test://watched-resource']);
    assert.equal(first.resources[0].name, 'static-text', 'the upstream definition passes through');
    assert.ok(first.nextCursor, 'a cursor to the second upstream');
    const second = await client.listResources({ cursor: first.nextCursor });
    // The catalog upstream pages by 2 itself: Flowgate followed its cursor. other://secret is
    // denied; its test://static-text collides with Everything's, which comes first.
    assert.deepEqual(second.resources.map((r) => r.uri), ['other://alpha', 'other://beta']);
    assert.equal(second.nextCursor, undefined);

    const t1 = await client.listResourceTemplates();
    assert.deepEqual(t1.resourceTemplates.map((t) => t.uriTemplate), ['test://template/{id}/data']);
    const t2 = await client.listResourceTemplates({ cursor: t1.nextCursor });
    assert.deepEqual(t2.resourceTemplates.map((t) => t.uriTemplate), ['other://item/{id}']);
  });

  test('prompts are aggregated with the app name as prefix; denied prompts are left out', async () => {
    const p1 = await client.listPrompts();
    assert.deepEqual(p1.prompts.map((p) => p.name), [
      'Everything_test_simple_prompt',
      'Everything_test_prompt_with_arguments',
      'Everything_test_prompt_with_embedded_resource',
      'Everything_test_prompt_with_image',
    ]);
    assert.deepEqual(p1.prompts[1].arguments.map((a) => a.name), ['arg1', 'arg2']);
    const p2 = await client.listPrompts({ cursor: p1.nextCursor });
    assert.deepEqual(p2.prompts.map((p) => p.name), ['Other_hello']);
    assert.equal(p2.nextCursor, undefined);
  });

  test('reads are routed by URI: listed, colliding (first app wins) and by template', async () => {
    const text = async (uri) => (await client.readResource({ uri })).contents[0].text;
    assert.equal(await text('test://static-text'), 'This is the content of the static text resource.', 'Everything serves the colliding URI');
    assert.equal(await text('other://alpha'), 'alpha from catalog');
    assert.equal(await text('other://item/7'), 'item 7 from catalog');
    assert.match(await text('test://template/123/data'), /Data for ID: 123/);
    const bin = (await client.readResource({ uri: 'test://static-binary' })).contents[0];
    assert.equal(bin.mimeType, 'image/png');
    assert.ok(bin.blob.length > 20);
    const readsOfCatalog = ups.catalog.requests.filter((r) => r.body?.method === 'resources/read').map((r) => r.body.params.uri);
    assert.deepEqual(readsOfCatalog, ['other://alpha', 'other://item/7'], 'only its own URIs reached the catalog upstream');
  });

  test('prompts/get and completion/complete reach the owning upstream under its own names', async () => {
    const hello = await client.getPrompt({ name: 'Other_hello', arguments: { who: 'Ada' } });
    assert.equal(hello.messages[0].content.text, 'Hello, Ada!');
    const args = await client.getPrompt({ name: 'Everything_test_prompt_with_arguments', arguments: { arg1: 'a', arg2: 'b' } });
    assert.equal(args.messages[0].content.text, "Prompt with arguments: arg1='a', arg2='b'");
    const gets = ups.catalog.requests.filter((r) => r.body?.method === 'prompts/get').map((r) => r.body.params.name);
    assert.deepEqual(gets, ['hello'], 'the prefix is removed upstream');

    const values = async (ref, name, value) => (await client.complete({ ref, argument: { name, value } })).completion.values;
    assert.deepEqual(await values({ type: 'ref/prompt', name: 'Other_hello' }, 'who', 'w'), ['world', 'walrus']);
    assert.deepEqual(await values({ type: 'ref/prompt', name: 'Everything_test_prompt_with_arguments' }, 'arg1', 'par'), ['paris', 'park', 'party']);
    assert.deepEqual(await values({ type: 'ref/resource', uri: 'other://item/{id}' }, 'id', 't'), ['two', 'three']);
    assert.deepEqual(await values({ type: 'ref/resource', uri: 'test://template/{id}/data' }, 'id', '1'), ['1', '123']);
  });

  test('bad cursors, unknown URIs and prompts get precise JSON-RPC errors', async () => {
    const bad = await rpc(url, req('resources/list', { cursor: 'not-a-cursor' }), V);
    assert.equal(bad.status, 200);
    assert.equal(bad.json.error.code, -32602);
    assert.match(bad.json.error.message, /cursor is not one this server handed out for resources\/list/);
    // A cursor of one list does not page another.
    const page = await client.listPrompts();
    const cross = await rpc(url, req('resources/list', { cursor: page.nextCursor }), V);
    assert.equal(cross.json.error.code, -32602);
    assert.match(cross.json.error.message, /another list/);

    for (const uri of ['test://nowhere', 'other://secret']) {
      const r = await rpc(url, req('resources/read', { uri }), V);
      assert.equal(r.json.error.code, -32002, uri);
      assert.match(r.json.error.message, /^Resource not found/);
      assert.deepEqual(r.json.error.data, { uri });
    }
    assert.equal(ups.catalog.requests.filter((r) => r.body?.params?.uri === 'other://secret').length, 0, 'a denied URI is never forwarded');

    for (const name of ['Other_hidden', 'hello']) {
      const r = await rpc(url, req('prompts/get', { name }), V);
      assert.equal(r.json.error.code, -32602, name);
      assert.match(r.json.error.message, new RegExp(`Unknown prompt: ${name}\\. This server has: Everything_test_simple_prompt`));
    }
    // A denied URI that the app's template other://item/{id} matches: refused on every route.
    const denied = await rpc(url, req('resources/read', { uri: 'other://item/secret' }), V);
    assert.equal(denied.json.error?.code, -32002, JSON.stringify(denied.json));
    assert.match(denied.json.error.message, /^Resource not found: other:\/\/item\/secret \(this server does not expose it: an app's denied_resources names it\)/);
    assert.deepEqual(denied.json.error.data, { uri: 'other://item/secret' });
    const completed = await rpc(url, req('completion/complete', { ref: { type: 'ref/resource', uri: 'other://item/secret' }, argument: { name: 'id', value: '' } }), V);
    assert.equal(completed.json.error.code, -32602);
    assert.match(completed.json.error.message, /other:\/\/item\/secret \(an app of this server denies it\)/);
    const subscribed = await rpc(url, req('resources/subscribe', { uri: 'other://item/secret' }), V);
    assert.equal(subscribed.json.error.code, -32002, 'not found, before anything else');
    const mentions = ups.catalog.requests.filter((r) => JSON.stringify(r.body ?? {}).includes('other://item/secret'));
    assert.equal(mentions.length, 0, 'a denied URI is never forwarded, even where a template matches it');
    assert.equal((await client.readResource({ uri: 'other://item/8' })).contents[0].text, 'item 8 from catalog', 'the template still serves other URIs');

    const sub = await rpc(url, req('resources/subscribe', { uri: 'test://watched-resource' }), V);
    assert.equal(sub.json.error.code, -32601);
    assert.match(sub.json.error.message, /it needs this server's session: send the Mcp-Session-Id/);
  });

  test('a server whose upstreams offer no resources or prompts declares none and answers -32601', async () => {
    const c = await connect(toolsOnlyUrl);
    try {
      const caps = c.getServerCapabilities();
      assert.ok(caps.tools);
      assert.equal(caps.resources, undefined);
      assert.equal(caps.prompts, undefined);
      assert.equal(caps.completions, undefined);
    } finally {
      await c.close();
    }
    for (const method of ['resources/list', 'prompts/get', 'completion/complete']) {
      const r = await rpc(toolsOnlyUrl, req(method), V);
      assert.equal(r.json.error.code, -32601, method);
      assert.match(r.json.error.message, /no upstream MCP server of this Flowgate server offers/);
    }
  });

  test('the console refresh re-reads the catalog and shows the collision', async () => {
    const r = await fg.console(`/apps/${otherAppId}/tools/refresh`, { method: 'POST' });
    assert.equal(r.status, 200, r.text);
    assert.ok(r.json.capabilities.resources);
    const [server] = r.json.servers;
    assert.deepEqual(server.prompts, ['Everything_test_simple_prompt', 'Everything_test_prompt_with_arguments', 'Everything_test_prompt_with_embedded_resource', 'Everything_test_prompt_with_image', 'Other_hello']);
    assert.equal(server.collisions.length, 1, JSON.stringify(server.collisions));
    assert.match(server.collisions[0], /test:\/\/static-text is listed by apps 'Everything' and 'Other'; 'Everything' comes first/);
  });
});
