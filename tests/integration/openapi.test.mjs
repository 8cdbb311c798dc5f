// The console API's OpenAPI 3.1 document (console/openapi.json, from console/openapi.mjs), served
// as a static asset at /console/api/openapi.json: it is current, structurally OpenAPI 3.1, and
// true: real answers of the Worker, for every operation it lists, validate against its response
// schemas (a status it does not list, or a body its schema refuses, fails the test).
// (That its paths, methods, roles and success statuses equal pure::console_routes::ROUTES is a
// `cargo test`.)
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';

import Ajv2020 from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';

import { repoRoot, startFlowgate } from '../support/harness.mjs';
import { rpc } from '../support/flowgate-setup.mjs';
import generated from '../../console/openapi.mjs';

const committed = JSON.parse(fs.readFileSync(path.join(repoRoot, 'console', 'openapi.json'), 'utf8'));
const DOC_ID = 'https://flowgate.invalid/console/api/openapi.json';
const METHODS = ['get', 'put', 'post', 'delete', 'options', 'head', 'patch', 'trace'];

// ---- OpenAPI 3.1, structurally (the parts of the specification this document uses, strictly) ----

const ext = { '^x-': true };
const ref = { type: 'object', required: ['$ref'], properties: { $ref: { type: 'string', format: 'uri-reference' }, summary: { type: 'string' }, description: { type: 'string' } }, additionalProperties: false };
const OAS31 = {
  $schema: 'https://json-schema.org/draft/2020-12/schema',
  type: 'object',
  required: ['openapi', 'info'],
  anyOf: [{ required: ['paths'] }, { required: ['components'] }, { required: ['webhooks'] }],
  properties: {
    openapi: { type: 'string', pattern: '^3\\.1\\.\\d+(-.+)?$' },
    info: {
      type: 'object',
      required: ['title', 'version'],
      properties: { title: { type: 'string' }, version: { type: 'string' }, description: { type: 'string' }, summary: { type: 'string' } },
      patternProperties: ext,
      additionalProperties: false,
    },
    servers: { type: 'array', items: { type: 'object', required: ['url'], properties: { url: { type: 'string' }, description: { type: 'string' } }, additionalProperties: false } },
    security: { $ref: '#/$defs/security' },
    paths: { type: 'object', propertyNames: { pattern: '^/' }, additionalProperties: { $ref: '#/$defs/pathItem' } },
    components: {
      type: 'object',
      properties: {
        schemas: { type: 'object', additionalProperties: { type: ['object', 'boolean'] } },
        responses: { type: 'object', additionalProperties: { oneOf: [ref, { $ref: '#/$defs/response' }] } },
        securitySchemes: {
          type: 'object',
          additionalProperties: {
            type: 'object',
            required: ['type'],
            properties: { type: { enum: ['apiKey', 'http', 'mutualTLS', 'oauth2', 'openIdConnect'] }, scheme: { type: 'string' }, description: { type: 'string' } },
            if: { properties: { type: { const: 'http' } } },
            then: { required: ['scheme'] },
          },
        },
      },
      patternProperties: ext,
      additionalProperties: false,
    },
  },
  patternProperties: ext,
  additionalProperties: false,
  $defs: {
    security: { type: 'array', items: { type: 'object', additionalProperties: { type: 'array', items: { type: 'string' } } } },
    pathItem: {
      type: 'object',
      properties: Object.fromEntries(METHODS.map((m) => [m, { $ref: '#/$defs/operation' }])),
      patternProperties: ext,
      additionalProperties: false,
    },
    operation: {
      type: 'object',
      required: ['responses'],
      properties: {
        summary: { type: 'string' },
        description: { type: 'string' },
        operationId: { type: 'string' },
        parameters: { type: 'array', items: { oneOf: [ref, { $ref: '#/$defs/parameter' }] } },
        requestBody: {
          type: 'object',
          required: ['content'],
          properties: { content: { $ref: '#/$defs/content' }, required: { type: 'boolean' }, description: { type: 'string' } },
          additionalProperties: false,
        },
        responses: {
          type: 'object',
          minProperties: 1,
          propertyNames: { pattern: '^([1-5](\\d\\d|XX)|default)$' },
          additionalProperties: { oneOf: [ref, { $ref: '#/$defs/response' }] },
        },
        security: { $ref: '#/$defs/security' },
      },
      patternProperties: ext,
      additionalProperties: false,
    },
    parameter: {
      type: 'object',
      required: ['name', 'in', 'schema'],
      properties: {
        name: { type: 'string' },
        in: { enum: ['query', 'header', 'path', 'cookie'] },
        description: { type: 'string' },
        required: { type: 'boolean' },
        schema: { type: ['object', 'boolean'] },
      },
      if: { properties: { in: { const: 'path' } } },
      then: { required: ['required'], properties: { required: { const: true } } },
      additionalProperties: false,
    },
    response: {
      type: 'object',
      required: ['description'],
      properties: { description: { type: 'string' }, content: { $ref: '#/$defs/content' } },
      additionalProperties: false,
    },
    content: {
      type: 'object',
      propertyNames: { pattern: '^[a-z]+/[a-z0-9.+-]+$' },
      additionalProperties: { type: 'object', properties: { schema: { type: ['object', 'boolean'] } }, additionalProperties: false },
    },
  },
};

/** Every `$ref` string in `v`. */
function refs(v, out = []) {
  if (Array.isArray(v)) v.forEach((x) => refs(x, out));
  else if (v && typeof v === 'object') for (const [k, x] of Object.entries(v)) (k === '$ref' && typeof x === 'string' ? out.push(x) : refs(x, out));
  return out;
}

/** The value a local JSON pointer (`#/a/b~1c`) names in `doc`, or undefined. */
function pointer(doc, r) {
  return r
    .slice(2)
    .split('/')
    .map((s) => s.replace(/~1/g, '/').replace(/~0/g, '~'))
    .reduce((v, k) => (v === undefined ? undefined : v[k]), doc);
}

// ---- validating real answers ------------------------------------------------------------

const ajv = new Ajv2020({ strict: false, allErrors: true });
addFormats(ajv);
ajv.addSchema(committed, DOC_ID);
const validators = new Map();

/** The operation of `doc` a concrete console path and method land on (`/apps/abc` → `/apps/{app_id}`). */
function operationOf(method, concrete) {
  const segs = concrete.split('/').filter(Boolean);
  for (const [template, item] of Object.entries(committed.paths)) {
    const t = template.split('/').filter(Boolean);
    if (t.length === segs.length && t.every((s, i) => s.startsWith('{') || s === segs[i]) && item[method]) {
      // A literal segment wins over a template one (`/apps/import` is not `/apps/{app_id}`).
      const literal = Object.keys(committed.paths).find((p) => p === `/${segs.join('/')}` && committed.paths[p][method]);
      const chosen = literal ?? template;
      return { template: chosen, operation: committed.paths[chosen][method] };
    }
  }
  return undefined;
}

/** Why `body` (answered `status` to `method concrete`) does not fit the document, or null. */
function mismatch(method, concrete, status, body) {
  const found = operationOf(method, concrete);
  if (!found) return `the document has no operation ${method.toUpperCase()} ${concrete}`;
  let response = found.operation.responses[String(status)];
  if (!response) return `${method.toUpperCase()} ${found.template} does not list status ${status}`;
  let pointerToResponse = `#/paths/${found.template.replace(/~/g, '~0').replace(/\//g, '~1')}/${method}/responses/${status}`;
  if (response.$ref) {
    pointerToResponse = response.$ref;
    response = pointer(committed, response.$ref);
  }
  const key = `${pointerToResponse}/content/application~1json/schema`;
  if (!response.content?.['application/json']?.schema) return `${key} has no JSON schema`;
  if (!validators.has(key)) validators.set(key, ajv.compile({ $ref: `${DOC_ID}${key}` }));
  const validate = validators.get(key);
  if (validate(body)) return null;
  return `${method.toUpperCase()} ${found.template} ${status}: ${ajv.errorsText(validate.errors)}\n${JSON.stringify(body)}`;
}

let fg;
const exercised = new Set(); // "METHOD /template" of every operation a real answer was checked for

// Started by the first suite that needs it (the document's own checks do not).
async function flowgate() {
  fg ??= await startFlowgate();
}

after(async () => {
  await fg?.stop();
});

/** A console request whose answer must fit the document; returns it. */
async function call(method, p, { body, token, headers, status } = {}) {
  const r = await fg.console(p, { method: method.toUpperCase(), body, token, headers });
  if (status !== undefined) assert.equal(r.status, status, `${method.toUpperCase()} ${p}: ${r.text}`);
  assert.match(r.headers.get('content-type') ?? '', /^application\/json/, `${method} ${p}`);
  const why = mismatch(method, p.split('?')[0] || '/', r.status, r.json);
  assert.equal(why, null, why);
  exercised.add(`${method.toUpperCase()} ${operationOf(method, p.split('?')[0] || '/').template}`);
  return r;
}

describe('the document', () => {
  test('console/openapi.json is what console/openapi.mjs generates (run `node console/openapi.mjs`)', () => {
    assert.deepEqual(committed, JSON.parse(JSON.stringify(generated)));
  });

  test('is OpenAPI 3.1, structurally, with every $ref resolving and every component a valid 2020-12 schema', () => {
    const meta = new Ajv2020({ strict: true, strictRequired: false, strictTypes: false, allErrors: true });
    addFormats(meta);
    const ok = meta.validate(OAS31, committed);
    assert.ok(ok, meta.errorsText(meta.errors));
    for (const r of refs(committed)) assert.notEqual(pointer(committed, r), undefined, `unresolved $ref ${r}`);
    // Component schemas compile under strict 2020-12 rules (unknown keywords, types).
    const strict = new Ajv2020({ strict: true, strictRequired: false, allowUnionTypes: true });
    addFormats(strict);
    strict.addKeyword('components');
    strict.addSchema({ $id: 'urn:flowgate:doc', components: committed.components });
    for (const name of Object.keys(committed.components.schemas)) {
      strict.compile({ $ref: `urn:flowgate:doc#/components/schemas/${name}` });
    }
  });

  test('every path template variable is a required path parameter, and nothing else is', () => {
    for (const [template, item] of Object.entries(committed.paths)) {
      const vars = [...template.matchAll(/\{([^}]+)\}/g)].map((m) => m[1]).sort();
      for (const m of METHODS.filter((x) => item[x])) {
        const declared = (item[m].parameters ?? []).filter((p) => p.in === 'path').map((p) => p.name).sort();
        assert.deepEqual(declared, vars, `${m.toUpperCase()} ${template}`);
      }
    }
  });

  test('a body that does not fit fails the check (the check is not vacuous)', () => {
    const app = { id: 'a', name: 'n', description: '', mode: 'workflow', backend: {}, user_input_form: [], outputs: [], created_at: 1, updated_at: 1 };
    assert.equal(mismatch('get', '/apps/a', 200, app), null);
    assert.match(mismatch('get', '/apps/a', 200, { ...app, surprise: 1 }), /must NOT have additional properties/);
    assert.match(mismatch('get', '/apps/a', 200, { ...app, created_at: 'now' }), /created_at must be integer/);
    assert.match(mismatch('get', '/apps/a', 418, {}), /does not list status 418/);
    assert.match(mismatch('get', '/nope', 200, {}), /no operation/);
  });
});

describe('served by wrangler dev', () => {
  before(flowgate);

  test('at /console/api/openapi.json, without the console auth and without the Worker', async () => {
    const r = await fg.fetchJson('/console/api/openapi.json');
    assert.equal(r.status, 200, r.text);
    assert.match(r.headers.get('content-type') ?? '', /^application\/json/);
    assert.deepEqual(r.json, committed);
    // Every answer of the Worker carries x-request-id; a static asset does not.
    assert.equal(r.headers.get('x-request-id'), null);
  });

  test('GET /console/api points to it, names the caller, and answers anyone without credentials with caller null', async () => {
    const r = await call('get', '/', { status: 200 });
    assert.equal(r.json.openapi, '/console/api/openapi.json');
    assert.deepEqual(r.json.caller, { actor: 'admin', role: 'admin' });
    const doc = await fg.fetchJson(r.json.openapi);
    assert.equal(doc.status, 200);
    // No credential at all: the index only (the web console asks it to learn whether Cloudflare
    // Access signed the user in); every other route still answers 401.
    const anonymous = await call('get', '/', { token: null, status: 200 });
    assert.equal(anonymous.json.caller, null);
    assert.equal(anonymous.json.openapi, '/console/api/openapi.json');
    assert.equal((await call('get', '/apps', { token: null })).status, 401);
    // A wrong credential is not anonymous: 401.
    assert.equal((await call('get', '/', { token: 'not-the-admin-token' })).status, 401);
    const r405 = await fg.console('/', { method: 'POST', body: {} });
    assert.equal(r405.status, 405);
    assert.equal(r405.headers.get('allow'), 'GET');
  });
});

describe('real answers fit the document', () => {
  before(flowgate);

  let app;
  let multi;
  let viewer;

  const appBody = (name) => ({
    name,
    description: 'An app for the document test',
    mode: 'workflow',
    // Nothing listens on port 9: a call fails at once, which usage records as a failure.
    backend: { base_url: 'http://127.0.0.1:9/v1', api_key: 'app-literal-key-for-openapi-test' },
    user_input_form: [{ 'text-input': { variable: 'text', label: 'Text', required: true } }],
    outputs: [{ variable: 'summary', type: 'string' }],
  });

  test('apps', async () => {
    app = (await call('post', '/apps', { body: appBody('Doc app'), status: 201 })).json;
    await call('get', '/apps', { status: 200 });
    await call('get', `/apps/${app.id}`, { status: 200 });
    await call('put', `/apps/${app.id}`, { body: { ...appBody('Doc app'), description: 'changed' }, status: 200 });
    await call('post', '/apps/import', { body: { base_url: 'http://127.0.0.1:9/v1', api_key: 'app-x' }, status: 422 });
    await call('post', `/apps/${app.id}/tools/refresh`, { status: 400 });
  });

  test('one-app servers', async () => {
    const created = await call('post', `/apps/${app.id}/server`, { body: { description: 'd', parameters: { text: 'The text' } }, status: 201 });
    await call('post', `/apps/${app.id}/server`, { body: {}, status: 409 });
    await call('get', `/apps/${app.id}/server`, { status: 200 });
    await call('put', `/apps/${app.id}/server`, { body: { id: created.json.id, status: 'inactive' }, status: 200 });
    await call('put', `/apps/${app.id}/server`, { body: { id: created.json.id, status: 'active' }, status: 200 });
    await call('get', `/apps/${created.json.id}/server/refresh`, { status: 200 });
    const rotated = await call('post', `/apps/${app.id}/server/refresh`, { status: 200 });
    // A failed call, so that usage has a series, a tool and a failure to show.
    const r = await rpc(rotated.json.mcp_url, { jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'Doc_app', arguments: { text: 'x' } } });
    assert.equal(r.json.result.isError, true, r.text);
    const usage = await call('get', `/servers/${created.json.id}/usage`, { status: 200 });
    assert.equal(usage.json.total.calls, 1, usage.text);
    assert.equal(usage.json.failures.length, 1, usage.text);
    await call('get', `/servers/${created.json.id}/usage?step=hour&from=2000-01-01T00:00:00Z`, { status: 400 });
    // The tool playground and the call log (a run's stream is not JSON: a JSON-RPC error is).
    const tools = await call('get', `/servers/${created.json.id}/tools`, { status: 200 });
    assert.equal(tools.json.tools[0].name, 'Doc_app', tools.text);
    const unknown = await call('post', `/servers/${created.json.id}/tools/call`, { body: { name: 'Nope' }, status: 200 });
    assert.match(unknown.json.error.message, /Unknown tool/, unknown.text);
    await call('post', `/servers/${created.json.id}/tools/call`, { body: {}, status: 400 });
    const log = await call('get', `/servers/${created.json.id}/calls`, { status: 200 });
    assert.equal(log.json.data.length, 2, log.text);
    await call('get', `/servers/${created.json.id}/calls?status=nope`, { status: 400 });
    await call('get', `/servers/${created.json.id}/calls/settings`, { status: 200 });
    await call('put', `/servers/${created.json.id}/calls/settings`, { body: { record_payloads: true }, status: 200 });
  });

  test('multi-app servers, auth, keys, tasks', async () => {
    multi = (await call('post', '/servers', { body: { name: 'Doc multi', app_ids: [app.id] }, status: 201 })).json;
    await call('get', '/servers', { status: 200 });
    await call('get', `/servers/${multi.id}`, { status: 200 });
    await call('put', `/servers/${multi.id}`, { body: { description: 'multi', parameters: { text: 'T' } }, status: 200 });
    await call('get', `/servers/${multi.id}/refresh`, { status: 200 });
    await call('post', `/servers/${multi.id}/refresh`, { status: 200 });
    await call('get', `/servers/${multi.id}/auth`, { status: 200 });
    const auth = await call('put', `/servers/${multi.id}/auth`, { body: { mode: 'key' }, status: 200 });
    assert.equal(auth.json.warnings.length, 1);
    await call('put', `/servers/${multi.id}/auth`, { body: { mode: 'oauth', oauth: { issuer: 'https://auth.example.com', scopes: ['a'] } }, status: 200 });
    await call('get', `/servers/${multi.id}/auth`, { status: 200 });
    const key = (await call('post', `/servers/${multi.id}/keys`, { body: { name: 'alice' }, status: 201 })).json;
    await call('post', `/servers/${multi.id}/keys`, { body: { name: 'alice' }, status: 409 });
    await call('get', `/servers/${multi.id}/keys`, { status: 200 });
    await call('delete', `/servers/${multi.id}/keys/${key.id}`, { status: 200 });
    await call('delete', `/servers/${multi.id}/keys/${key.id}`, { status: 404 });
    await call('get', `/servers/${multi.id}/tasks?limit=5`, { status: 200 });
    await call('get', `/servers/${multi.id}/tasks?limit=500`, { status: 400 });
    await call('get', `/servers/${multi.id}/tasks/0123456789abcdef0123456789abcdef`, { status: 404 });
    await call('post', `/servers/${multi.id}/tasks/0123456789abcdef0123456789abcdef/cancel`, { status: 404 });
  });

  test('reveal, grace rotation, edits, test connection', async () => {
    const shown = await call('post', `/servers/${multi.id}/reveal`, { status: 200 });
    assert.match(shown.json.mcp_url, /\/mcp\/server\/\w{16}\/mcp$/);
    await call('post', '/servers/no-such-server/reveal', { status: 404 });
    const rotated = await call('post', `/servers/${multi.id}/refresh`, { body: { grace_seconds: 60 }, status: 200 });
    assert.equal(typeof rotated.json.previous_code.until_ms, 'number', rotated.text);
    await call('post', `/servers/${multi.id}/refresh`, { body: { grace_seconds: 604801 }, status: 400 });
    await call('get', `/servers/${multi.id}`, { status: 200 });
    await call('patch', `/servers/${multi.id}`, { body: { name: 'Doc multi', parameters: { text: 'The text' } }, status: 200 });
    await call('patch', `/servers/${multi.id}`, { body: { parameters: { nope: 'x' } }, status: 400 });
    await call('patch', '/servers/no-such-server', { body: { description: 'x' }, status: 404 });
    // Nothing listens on port 9: the report says so (200, ok false).
    const tested = await call('post', `/apps/${app.id}/test`, { status: 200 });
    assert.equal(tested.json.ok, false, tested.text);
    await call('post', '/apps/no-such-app/test', { status: 404 });
    // As a server created before codes were kept sealed.
    await fg.d1(`UPDATE mcp_servers SET code_sealed = NULL WHERE id = '${multi.id}'`);
    await call('post', `/servers/${multi.id}/reveal`, { status: 409 });
  });

  test('tokens, roles, audit, reseal', async () => {
    viewer = (await call('post', '/tokens', { body: { name: 'doc-viewer', role: 'viewer' }, status: 201 })).json;
    await call('post', '/tokens', { body: { name: 'doc-viewer', role: 'viewer' }, status: 409 });
    await call('get', '/tokens', { status: 200 });
    await call('get', '/apps', { token: viewer.token, status: 200 });
    await call('post', '/apps', { body: appBody('refused'), token: viewer.token, status: 403 });
    await call('post', `/servers/${multi.id}/reveal`, { token: viewer.token, status: 403 });
    await call('get', '/audit?limit=20', { status: 200 });
    await call('get', '/audit?limit=0', { status: 400 });
    await call('post', '/secrets/reseal', { status: 200 });
    await call('delete', `/tokens/${viewer.id}`, { status: 200 });
    await call('delete', `/tokens/${viewer.id}`, { status: 404 });
  });

  test('errors: 400, 401, 404, 415', async () => {
    const bad = await call('post', '/apps', { body: { mode: 'nope' }, status: 400 });
    assert.equal(bad.json.error, 'validation_failed');
    assert.ok(bad.json.errors.length >= 2, bad.text);
    await call('get', '/apps', { token: null, status: 401 });
    await call('get', '/apps', { token: 'wrong-token', status: 401 });
    await call('get', '/apps/no-such-app', { status: 404 });
    await call('get', '/servers/no-such-server', { status: 404 });
    await call('post', '/servers', { body: 'name=x', headers: { 'content-type': 'text/plain' }, status: 415 });
  });

  test('deletes', async () => {
    await call('delete', `/servers/${multi.id}`, { status: 200 });
    await call('delete', `/apps/${app.id}/server`, { status: 200 });
    await call('delete', `/apps/${app.id}`, { status: 200 });
    await call('get', `/apps/${app.id}/server`, { status: 404 });
  });

  test('every operation of the document was checked against a real answer', () => {
    const all = Object.entries(committed.paths).flatMap(([p, item]) => METHODS.filter((m) => item[m]).map((m) => `${m.toUpperCase()} ${p}`));
    assert.deepEqual(all.filter((o) => !exercised.has(o)), []);
  });
});
