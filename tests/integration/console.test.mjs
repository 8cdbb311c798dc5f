// The console API against the real Worker (wrangler dev, local D1 and KV) and a fake Dify.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import http from 'node:http';

import { startFlowgate } from '../support/harness.mjs';
import { startDifyFixture } from '../support/dify-fixture.mjs';

const sha256 = (s) => createHash('sha256').update(s).digest('hex');

let fg;
let dify;

before(async () => {
  [fg, dify] = await Promise.all([startFlowgate({ vars: { SECRET_REF_NAMES: 'DIFY_KEY' } }), startDifyFixture()]);
});

after(async () => {
  await Promise.allSettled([fg?.stop(), dify?.stop()]);
});

function workflowApp(overrides = {}) {
  return {
    name: 'Summariser',
    description: 'Summarises text',
    mode: 'workflow',
    backend: { base_url: dify.baseUrl, api_key: 'app-literal-secret-0001' },
    user_input_form: [
      { 'text-input': { variable: 'text', label: 'Text', required: true, max_length: 2000 } },
      { select: { variable: 'lang', label: 'Language', options: ['en', 'fr'], default: 'en' } },
    ],
    outputs: [{ variable: 'summary', type: 'string' }],
    ...overrides,
  };
}

async function createApp(body = workflowApp()) {
  const r = await fg.console('/apps', { method: 'POST', body });
  assert.equal(r.status, 201, r.text);
  return r.json;
}

async function createServer(appId, body = { description: 'Summarises', parameters: { text: 'The text to summarise' } }) {
  const r = await fg.console(`/apps/${appId}/server`, { method: 'POST', body });
  assert.equal(r.status, 201, r.text);
  return r.json;
}

function assertJsonError(r, status, code, mention) {
  assert.equal(r.status, status, `${r.status} ${r.text}`);
  assert.match(r.headers.get('content-type') ?? '', /application\/json/);
  assert.equal(r.json?.error, code, r.text);
  if (mention) assert.match(r.json.message, mention);
}

describe('health and auth', () => {
  test('GET /healthz answers ok with the version', async () => {
    const r = await fg.fetchJson('/healthz');
    assert.equal(r.status, 200);
    assert.equal(r.json.status, 'ok');
    assert.match(r.json.version, /^\d+\.\d+\.\d+/);
  });

  test('the console needs the admin token', async () => {
    assertJsonError(await fg.console('/apps', { token: null }), 401, 'unauthorized', /Authorization: Bearer/);
    assertJsonError(await fg.console('/apps', { token: 'wrong-token' }), 401, 'unauthorized', /not valid/);
    assertJsonError(await fg.console('/apps', { token: `${fg.adminToken}-and-more` }), 401, 'unauthorized');
    const ok = await fg.console('/apps');
    assert.equal(ok.status, 200);
    assert.ok(Array.isArray(ok.json.data));
  });

  test('unknown routes and methods get JSON 404 and 405 with Allow', async () => {
    assertJsonError(await fg.fetchJson('/nope'), 404, 'not_found', /^no route GET "\/nope"$/);
    assertJsonError(await fg.console('/widgets'), 404, 'not_found', /widgets/);
    const r = await fg.console('/apps', { method: 'PATCH', body: {} });
    assertJsonError(r, 405, 'method_not_allowed', /PATCH/);
    assert.equal(r.headers.get('allow'), 'GET, POST');
  });
});

describe('app validation', () => {
  const cases = [
    ['missing name', (b) => { delete b.name; }, ['name']],
    ['empty name', (b) => { b.name = '  '; }, ['name']],
    ['unknown mode', (b) => { b.mode = 'spreadsheet'; }, ['mode']],
    ['missing backend', (b) => { delete b.backend; }, ['backend']],
    ['non-http base_url', (b) => { b.backend.base_url = 'ftp://dify/v1'; }, ['backend.base_url']],
    ['credentials in the URL', (b) => { b.backend.base_url = 'https://u:p@dify/v1'; }, ['backend.base_url']],
    ['missing api_key', (b) => { delete b.backend.api_key; }, ['backend.api_key']],
    ['unknown backend setting', (b) => { b.backend.modle = 'x'; }, ['backend.modle']],
    ['bad timeout', (b) => { b.backend.timeout_seconds = 0; }, ['backend.timeout_seconds']],
    ['bad secret reference', (b) => { b.backend.api_key = '$not-a-name'; }, ['backend.api_key']],
    ['unknown form type', (b) => { b.user_input_form.push({ 'colour-picker': { variable: 'c' } }); }, ['user_input_form[2]']],
    ['select without options', (b) => { b.user_input_form[1].select.options = []; }, ['user_input_form[1].select.options']],
    ['default outside the options', (b) => { b.user_input_form[1].select.default = 'de'; }, ['user_input_form[1].select.default']],
    ['duplicate variable', (b) => { b.user_input_form.push({ paragraph: { variable: 'text' } }); }, ['user_input_form[2].variable']],
    ['invalid variable name', (b) => { b.user_input_form[0]['text-input'].variable = 'my var'; }, ['user_input_form[0].text-input.variable']],
    ['bad max_length', (b) => { b.user_input_form[0]['text-input'].max_length = 'long'; }, ['user_input_form[0].text-input.max_length']],
    ['form not a list', (b) => { b.user_input_form = { text: 1 }; }, ['user_input_form']],
    ['reserved query in a chat app', (b) => { b.mode = 'chat'; b.user_input_form[0]['text-input'].variable = 'query'; }, ['user_input_form[0]']],
    ['unknown output type', (b) => { b.outputs[0].type = 'date'; }, ['outputs[0].type']],
    ['http-tool without endpoint', (b) => { b.mode = 'http-tool'; b.backend = {}; }, ['backend.api_endpoint']],
    ['mcp without url', (b) => { b.mode = 'mcp'; b.backend = { transport: 'auto' }; }, ['backend.url']],
    ['several at once', (b) => { delete b.name; b.mode = 'x'; }, ['name', 'mode']],
  ];
  for (const [label, mutate, fields] of cases) {
    test(`400 names the field: ${label}`, async () => {
      const body = structuredClone(workflowApp());
      mutate(body);
      const r = await fg.console('/apps', { method: 'POST', body });
      assertJsonError(r, 400, 'validation_failed');
      assert.deepEqual(r.json.errors.map((e) => e.field), fields, r.text);
      for (const f of fields) assert.ok(r.json.message.includes(f), r.json.message);
    });
  }

  test('bodies that are not JSON objects', async () => {
    assertJsonError(await fg.console('/apps', { method: 'POST', body: '{"name": ' , headers: { 'content-type': 'application/json' } }), 400, 'invalid_json', /not valid JSON/);
    assertJsonError(await fg.console('/apps', { method: 'POST', body: Buffer.from('{"name": "\xe9"}', 'latin1'), headers: { 'content-type': 'application/json' } }), 400, 'invalid_json', /not UTF-8 text: invalid utf-8 sequence of 1 bytes from index 10/);
    assertJsonError(await fg.console('/apps', { method: 'POST', body: '[1,2]', headers: { 'content-type': 'application/json' } }), 400, 'bad_request', /JSON object/);
    assertJsonError(await fg.console('/apps', { method: 'POST', body: 'name=x', headers: { 'content-type': 'application/x-www-form-urlencoded' } }), 415, 'unsupported_media_type', /application\/json/);
    assertJsonError(await fg.console('/apps', { method: 'POST', body: '', headers: { 'content-type': 'application/json' } }), 400, 'bad_request', /empty/);
    const huge = JSON.stringify({ ...workflowApp(), description: 'x'.repeat(1_100_000) });
    assertJsonError(await fg.console('/apps', { method: 'POST', body: huge, headers: { 'content-type': 'application/json' } }), 413, 'payload_too_large');
  });

  test('a required file input is a tool argument; a required external_data_tool input gets a warning', async () => {
    const app = await createApp(workflowApp({ user_input_form: [{ file: { variable: 'doc', required: true } }] }));
    assert.deepEqual(app.warnings, []);
    const ext = await createApp(workflowApp({ user_input_form: [{ external_data_tool: { variable: 'ext', required: true } }] }));
    assert.equal(ext.warnings.length, 1);
    assert.match(ext.warnings[0], /'ext'.*required/);
  });
});

describe('apps', () => {
  test('create, read, list, replace and delete; literal keys never leave the Worker', async () => {
    const app = await createApp();
    assert.match(app.id, /^[0-9a-f-]{36}$/);
    assert.equal(app.mode, 'workflow');
    assert.equal(app.backend.api_key, '***');
    assert.equal(app.backend.base_url, dify.baseUrl);
    assert.deepEqual(app.warnings, []);
    assert.equal(app.user_input_form[1].select.default, 'en');

    const got = await fg.console(`/apps/${app.id}`);
    assert.equal(got.status, 200);
    assert.equal(got.json.backend.api_key, '***');
    const list = await fg.console('/apps');
    assert.ok(list.json.data.some((a) => a.id === app.id));
    for (const r of [got, list]) assert.ok(!r.text.includes('app-literal-secret-0001'));

    // "***" sent back keeps the stored key; everything else is replaced.
    const put = await fg.console(`/apps/${app.id}`, {
      method: 'PUT',
      body: { ...workflowApp({ name: 'Summariser v2' }), backend: { base_url: dify.baseUrl, api_key: '***' } },
    });
    assert.equal(put.status, 200, put.text);
    assert.equal(put.json.name, 'Summariser v2');
    // Stored sealed (AES-256-GCM), never in the clear: not in D1, not in KV.
    const [row] = await fg.d1(`SELECT backend FROM apps WHERE id = '${app.id}'`);
    const stored = JSON.parse(row.backend).api_key;
    assert.match(stored, /^enc:v1:/);
    assert.deepEqual(await fg.stateFilesContaining('app-literal-secret-0001'), []);
    assert.ok((await fg.stateFilesContaining(stored)).length > 0, 'the scan sees the sealed value');

    // A $NAME reference is shown as it is: it names a secret, it is not one.
    const ref = await fg.console(`/apps/${app.id}`, {
      method: 'PUT',
      body: { ...workflowApp(), backend: { base_url: dify.baseUrl, api_key: '$DIFY_KEY' } },
    });
    assert.equal(ref.json.backend.api_key, '$DIFY_KEY');

    const del = await fg.console(`/apps/${app.id}`, { method: 'DELETE' });
    assert.equal(del.status, 200);
    assertJsonError(await fg.console(`/apps/${app.id}`), 404, 'not_found', new RegExp(app.id));
  });

  test('"***" sent back keeps the sealed key as it was', async () => {
    const app = await createApp();
    const [before] = await fg.d1(`SELECT backend FROM apps WHERE id = '${app.id}'`);
    await fg.console(`/apps/${app.id}`, { method: 'PUT', body: { ...workflowApp({ name: 'Again' }), backend: { base_url: dify.baseUrl, api_key: '***' } } });
    const [after] = await fg.d1(`SELECT backend FROM apps WHERE id = '${app.id}'`);
    assert.equal(JSON.parse(after.backend).api_key, JSON.parse(before.backend).api_key);
  });

  test('"***" with nothing stored is refused', async () => {
    const r = await fg.console('/apps', { method: 'POST', body: workflowApp({ backend: { base_url: dify.baseUrl, api_key: '***' } }) });
    assertJsonError(r, 400, 'validation_failed', /backend\.api_key/);
  });

  test('unknown ids get 404 everywhere', async () => {
    const id = '00000000-0000-4000-8000-000000000000';
    for (const [method, path, body] of [
      ['GET', `/apps/${id}`],
      ['PUT', `/apps/${id}`, workflowApp()],
      ['DELETE', `/apps/${id}`],
      ['GET', `/apps/${id}/server`],
      ['POST', `/apps/${id}/server`, {}],
      ['PUT', `/apps/${id}/server`, { id: 'x' }],
      ['DELETE', `/apps/${id}/server`],
      ['GET', `/apps/${id}/server/refresh`],
      ['GET', `/servers/${id}`],
      ['PUT', `/servers/${id}`, { name: 'x' }],
      ['DELETE', `/servers/${id}`],
      ['POST', `/servers/${id}/refresh`],
    ]) {
      const r = await fg.console(path, { method, body });
      assertJsonError(r, 404, 'not_found');
      assert.ok(r.json.message.includes(id), `${method} ${path}: ${r.text}`);
    }
  });
});

describe('servers and codes', () => {
  test('a server code is shown once, stored only as its SHA-256, and cached in KV by hash', async () => {
    const app = await createApp();
    const server = await createServer(app.id);
    assert.match(server.server_code, /^[A-Za-z0-9]{16}$/);
    assert.equal(server.status, 'active');
    assert.equal(server.name, app.name);
    assert.equal(server.description, 'Summarises');
    assert.deepEqual(server.parameters, { text: 'The text to summarise' });
    assert.equal(server.mcp_url, `${fg.url}/mcp/server/${server.server_code}/mcp`);
    assert.equal(typeof server.created_at, 'number');

    const got = await fg.console(`/apps/${app.id}/server`);
    assert.equal(got.status, 200);
    assert.equal(got.json.server_code, undefined);
    assert.equal(got.json.server_code_hint, server.server_code.slice(-4));
    assert.ok(!got.text.includes(server.server_code));

    const hash = sha256(server.server_code);
    const rows = await fg.d1(`SELECT code_hash FROM mcp_servers WHERE id = '${server.id}'`);
    assert.equal(rows[0].code_hash, hash);
    assert.ok((await fg.kvKeys()).some((k) => k.name === `server:${hash}`));
    const def = JSON.parse(await fg.kvGet(`server:${hash}`));
    assert.equal(def.server_id, server.id);
    assert.equal(def.apps[0].id, app.id);

    // The scan finds what is stored (the hash) and never the code itself.
    assert.ok((await fg.stateFilesContaining(hash)).length > 0, 'the state scan must see D1/KV contents');
    assert.deepEqual(await fg.stateFilesContaining(server.server_code), []);

    assertJsonError(await fg.console(`/apps/${app.id}/server`, { method: 'POST', body: {} }), 409, 'conflict', /already has/);
  });

  test('two servers get different codes', async () => {
    const [a, b] = await Promise.all([createApp(), createApp()]);
    const [sa, sb] = await Promise.all([createServer(a.id), createServer(b.id)]);
    assert.notEqual(sa.server_code, sb.server_code);
    assert.notEqual(sha256(sa.server_code), sha256(sb.server_code));
  });

  test('rotation issues a new code and removes the old code from the cache at once', async () => {
    const app = await createApp();
    const server = await createServer(app.id);
    const oldKey = `server:${sha256(server.server_code)}`;
    assert.ok(await fg.kvGet(oldKey));

    // Dify's route: GET /apps/<server_id>/server/refresh
    const r = await fg.console(`/apps/${server.id}/server/refresh`);
    assert.equal(r.status, 200, r.text);
    const code = r.json.server_code;
    assert.match(code, /^[A-Za-z0-9]{16}$/);
    assert.notEqual(code, server.server_code);
    assert.equal(await fg.kvGet(oldKey), null);
    assert.ok(await fg.kvGet(`server:${sha256(code)}`));
    const [row] = await fg.d1(`SELECT code_hash FROM mcp_servers WHERE id = '${server.id}'`);
    assert.equal(row.code_hash, sha256(code));
    assert.deepEqual(await fg.stateFilesContaining(code), []);

    // POST and the app id work too.
    const again = await fg.console(`/apps/${app.id}/server/refresh`, { method: 'POST' });
    assert.equal(again.status, 200);
    assert.equal(await fg.kvGet(`server:${sha256(code)}`), null);
  });

  test('PUT updates description, parameters and status, and the cache follows', async () => {
    const app = await createApp();
    const server = await createServer(app.id);
    const key = `server:${sha256(server.server_code)}`;
    const bad = await fg.console(`/apps/${app.id}/server`, { method: 'PUT', body: { id: server.id, status: 'paused' } });
    assertJsonError(bad, 400, 'validation_failed', /status/);
    const wrongId = await fg.console(`/apps/${app.id}/server`, { method: 'PUT', body: { id: 'someone-else' } });
    assertJsonError(wrongId, 400, 'validation_failed', /^id:/);
    const noId = await fg.console(`/apps/${app.id}/server`, { method: 'PUT', body: { status: 'inactive' } });
    assertJsonError(noId, 400, 'validation_failed', /^id:/);

    const r = await fg.console(`/apps/${app.id}/server`, {
      method: 'PUT',
      body: { id: server.id, description: 'Now inactive', parameters: { text: 'Text' }, status: 'inactive' },
    });
    assert.equal(r.status, 200, r.text);
    assert.equal(r.json.status, 'inactive');
    const def = JSON.parse(await fg.kvGet(key));
    assert.equal(def.status, 'inactive');
    assert.equal(def.description, 'Now inactive');
    assert.deepEqual(def.parameters, { text: 'Text' });

    // Editing the app rewrites the definitions of its servers.
    await fg.console(`/apps/${app.id}`, { method: 'PUT', body: { ...workflowApp({ name: 'Renamed' }), backend: { base_url: dify.baseUrl, api_key: '***' } } });
    assert.equal(JSON.parse(await fg.kvGet(key)).apps[0].name, 'Renamed');
    assert.equal((await fg.console(`/apps/${app.id}/server`)).json.name, 'Renamed');

    const del = await fg.console(`/apps/${app.id}/server`, { method: 'DELETE' });
    assert.equal(del.status, 200);
    assert.equal(await fg.kvGet(key), null);
    assertJsonError(await fg.console(`/apps/${app.id}/server`), 404, 'not_found', /no MCP server/);
  });

  test('deleting an app deletes its server and its cache entry', async () => {
    const app = await createApp();
    const server = await createServer(app.id);
    const key = `server:${sha256(server.server_code)}`;
    assert.equal((await fg.console(`/apps/${app.id}`, { method: 'DELETE' })).status, 200);
    assert.equal(await fg.kvGet(key), null);
    assert.deepEqual(await fg.d1(`SELECT id FROM mcp_servers WHERE id = '${server.id}'`), []);
  });

  test('multi-app servers expose several apps and follow their changes', async () => {
    const [a, b] = await Promise.all([createApp(), createApp(workflowApp({ name: 'Chatter', mode: 'chat', user_input_form: [], outputs: [] }))]);
    const bad = await fg.console('/servers', { method: 'POST', body: { name: 'Workspace', app_ids: [a.id, 'no-such-app'] } });
    assertJsonError(bad, 400, 'validation_failed', /no-such-app/);
    assertJsonError(await fg.console('/servers', { method: 'POST', body: { app_ids: [] } }), 400, 'validation_failed', /name.*app_ids/s);

    const r = await fg.console('/servers', { method: 'POST', body: { name: 'Workspace', description: 'All tools', app_ids: [a.id, b.id] } });
    assert.equal(r.status, 201, r.text);
    const server = r.json;
    assert.deepEqual(server.app_ids, [a.id, b.id]);
    const key = `server:${sha256(server.server_code)}`;
    assert.deepEqual(JSON.parse(await fg.kvGet(key)).apps.map((x) => x.name), ['Summariser', 'Chatter']);

    // Every server is listed, with its kind: this one and the one-app server of `a`.
    const single = await createServer(a.id);
    const list = await fg.console('/servers');
    const listed = (id) => list.json.data.find((s) => s.id === id);
    assert.equal(listed(server.id)?.kind, 'multi');
    assert.equal(listed(server.id).server_code, undefined);
    assert.deepEqual(listed(server.id).app_ids, [a.id, b.id]);
    assert.equal(listed(single.id)?.kind, 'app');
    assert.equal(listed(single.id).app_id, a.id);
    const got = await fg.console(`/servers/${server.id}`);
    assert.equal(got.json.server_code_hint, server.server_code.slice(-4));

    const put = await fg.console(`/servers/${server.id}`, { method: 'PUT', body: { app_ids: [b.id, a.id], name: 'WS' } });
    assert.equal(put.status, 200, put.text);
    assert.deepEqual(put.json.app_ids, [b.id, a.id]);
    assert.deepEqual(JSON.parse(await fg.kvGet(key)).apps.map((x) => x.id), [b.id, a.id]);

    // Deleting one of its apps leaves the server with the other.
    await fg.console(`/apps/${a.id}`, { method: 'DELETE' });
    assert.deepEqual(JSON.parse(await fg.kvGet(key)).apps.map((x) => x.id), [b.id]);
    assert.deepEqual((await fg.console(`/servers/${server.id}`)).json.app_ids, [b.id]);

    const rot = await fg.console(`/servers/${server.id}/refresh`, { method: 'POST' });
    assert.equal(rot.status, 200);
    assert.equal(await fg.kvGet(key), null);
    const newKey = `server:${sha256(rot.json.server_code)}`;
    assert.equal((await fg.console(`/servers/${server.id}`, { method: 'DELETE' })).status, 200);
    assert.equal(await fg.kvGet(newKey), null);
  });
});

describe('import from Dify', () => {
  test('creates the app from /v1/info and /v1/parameters', async () => {
    const form = [
      { 'text-input': { variable: 'topic', label: 'Topic', required: true, max_length: 100, default: '' } },
      { select: { variable: 'tone', label: 'Tone', required: false, options: ['formal', 'casual'], default: 'casual' } },
      { number: { variable: 'words', label: 'Words', required: false, default: '200' } },
      { paragraph: { variable: 'notes', label: 'Notes', required: false } },
    ];
    const apiKey = dify.addApp({ mode: 'advanced-chat', name: 'Writer', description: 'Writes things', user_input_form: form });
    const r = await fg.console('/apps/import', { method: 'POST', body: { base_url: dify.baseUrl, api_key: apiKey } });
    assert.equal(r.status, 201, r.text);
    assert.equal(r.json.mode, 'advanced-chat');
    assert.equal(r.json.name, 'Writer');
    assert.equal(r.json.description, 'Writes things');
    assert.equal(r.json.backend.api_key, '***');
    assert.deepEqual(r.json.user_input_form.map((i) => Object.keys(i)[0]), ['text-input', 'select', 'number', 'paragraph']);
    assert.deepEqual(r.json.user_input_form[1].select.options, ['formal', 'casual']);
    assert.equal(r.json.user_input_form[2].number.default, 200);
    assert.equal(r.json.user_input_form[0]['text-input'].max_length, 100);
    assert.ok(!r.text.includes(apiKey));
    const seen = dify.requests.filter((q) => q.headers.authorization === `Bearer ${apiKey}`).map((q) => q.path);
    assert.deepEqual(seen.sort(), ['/v1/info', '/v1/parameters']);
  });

  test('a workflow imported without outputs says how to declare them; declared ones are kept', async () => {
    const form = [{ 'text-input': { variable: 'text', label: 'Text', required: true } }];
    const apiKey = dify.addApp({ mode: 'workflow', name: 'Undeclared', user_input_form: form });
    const bare = await fg.console('/apps/import', { method: 'POST', body: { base_url: dify.baseUrl, api_key: apiKey } });
    assert.equal(bare.status, 201, bare.text);
    assert.match(bare.json.note, /does not say what a workflow returns/);
    assert.ok(bare.json.note.includes(`PUT /console/api/apps/${bare.json.id}`), bare.json.note);
    const declared = await fg.console('/apps/import', {
      method: 'POST',
      body: { base_url: dify.baseUrl, api_key: dify.addApp({ mode: 'workflow', name: 'Declared', user_input_form: form }), outputs: [{ variable: 'echo', type: 'object' }] },
    });
    assert.equal(declared.status, 201, declared.text);
    assert.equal(declared.json.note, undefined);
    assert.deepEqual(declared.json.outputs.map((o) => o.variable), ['echo']);
    const badOutputs = await fg.console('/apps/import', {
      method: 'POST',
      body: { base_url: dify.baseUrl, api_key: dify.addApp({ mode: 'workflow', name: 'Bad Outputs', user_input_form: form }), outputs: 'summary' },
    });
    assert.equal(badOutputs.status, 422, badOutputs.text);
    assert.match(badOutputs.json.message, /outputs/);
  });

  test('a refused key, an unreachable host and a non-Dify URL each name the cause', async () => {
    assertJsonError(
      await fg.console('/apps/import', { method: 'POST', body: { base_url: dify.baseUrl, api_key: 'app-not-a-real-key' } }),
      422, 'dify_unauthorized', /refused the API key \(401/,
    );
    const closed = await closedPort();
    assertJsonError(
      await fg.console('/apps/import', { method: 'POST', body: { base_url: `http://127.0.0.1:${closed}/v1`, api_key: 'app-x' } }),
      422, 'dify_unreachable', new RegExp(`127\\.0\\.0\\.1:${closed}`),
    );
    const other = await plainServer();
    try {
      assertJsonError(
        await fg.console('/apps/import', { method: 'POST', body: { base_url: other.url, api_key: 'app-x' } }),
        422, 'not_a_dify_app', /Service API/,
      );
    } finally {
      other.close();
    }
    assertJsonError(await fg.console('/apps/import', { method: 'POST', body: {} }), 400, 'validation_failed', /base_url.*api_key/s);
  });
});

/** A port nothing listens on. */
async function closedPort() {
  const s = http.createServer();
  await new Promise((r) => s.listen(0, '127.0.0.1', r));
  const { port } = s.address();
  await new Promise((r) => s.close(r));
  return port;
}

/** An HTTP server that is not Dify: HTML for every path. */
async function plainServer() {
  const s = http.createServer((req, res) => { res.writeHead(200, { 'content-type': 'text/html' }); res.end('<h1>hello</h1>'); });
  await new Promise((r) => s.listen(0, '127.0.0.1', r));
  return { url: `http://127.0.0.1:${s.address().port}/v1`, close: () => { s.closeAllConnections(); s.close(); } };
}
