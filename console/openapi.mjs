// The source of console/openapi.json, the OpenAPI 3.1 document of the console API (served at
// /console/api/openapi.json). Run `node console/openapi.mjs` after changing it: it rewrites the
// JSON, which is what is checked in and served. Checks that keep it true:
//   - src/pure/console_routes.rs (cargo test): its paths, methods, x-flowgate-role and success
//     status equal the route table ROUTES;
//   - tests/integration/openapi.test.mjs: the JSON is this file's output, and real answers of the
//     Worker validate against the response schemas.
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const schema = (name) => ({ $ref: `#/components/schemas/${name}` });
const nullable = (type) => ({ type: [type, 'null'] });
const str = { type: 'string' };
const int = { type: 'integer' };
const strings = { type: 'array', items: str };
/** An object with exactly these properties (`?` marks the optional ones). */
function object(props, extra = {}) {
  const properties = {};
  const required = [];
  for (const [k, v] of Object.entries(props)) {
    const optional = k.endsWith('?');
    const name = optional ? k.slice(0, -1) : k;
    properties[name] = v;
    if (!optional) required.push(name);
  }
  return { type: 'object', properties, required, additionalProperties: false, ...extra };
}
const list = (item) => object({ data: { type: 'array', items: item } });
const json = (s) => ({ 'application/json': { schema: s } });

const ROLES = ['viewer', 'publisher', 'admin'];
const RUBRIC = {
  viewer: 'Role: viewer (any console token, or ADMIN_TOKEN).',
  publisher: 'Role: publisher or admin.',
  admin: 'Role: admin.',
};

/** Error answers every operation may give, and those it gives on its own. */
const ERROR_TEXT = {
  400: 'The body or a query parameter is wrong: `validation_failed` names every bad field in `errors`; `bad_request` otherwise.',
  401: 'No credential, or a wrong or revoked one (`unauthorized`; `WWW-Authenticate: Bearer`).',
  403: "The caller's role is not enough (`forbidden`; the message names both roles).",
  404: 'No such app, server, key, task or token (`not_found`).',
  409: 'Conflict with what is stored (`conflict`), e.g. a name already taken, a server the app already has, a task already finished.',
  413: 'The body is larger than the console accepts.',
  415: 'The body is not `application/json`.',
  422: 'The backend refused or could not be read (imports from Dify, upstream MCP tool lists).',
  405: 'Not allowed for this caller: a GET that writes (`…/refresh`) from a caller Cloudflare Access signed in (`method_not_allowed`; `Allow: POST`).',
  429: 'Too many failed authentications from this address (`too_many_attempts`; `Retry-After`).',
  503: 'The console is off (`console_disabled`: no usable ADMIN_TOKEN), `PUBLIC_URL` is unusable (`misconfigured`), or storage failed (`storage_unavailable`).',
};

function op(method, role, summary, { ok = 200, body, answer, params = [], errors = [], description } = {}) {
  const codes = new Set([401, 429, 503, ...errors]);
  if (role !== 'viewer') codes.add(403);
  if (body) [400, 413, 415].forEach((c) => codes.add(c));
  if (params.some((p) => p.in === 'query')) codes.add(400);
  const responses = { [ok]: { description: 'Success', content: json(answer) } };
  for (const c of [...codes].sort()) responses[c] = { $ref: `#/components/responses/E${c}` };
  const operation = {
    summary,
    description: [description, RUBRIC[role]].filter(Boolean).join('\n\n'),
    'x-flowgate-role': role,
    ...(params.length ? { parameters: params } : {}),
    ...(body ? { requestBody: { required: true, content: json(body) } } : {}),
    responses,
  };
  return [method, operation];
}

const CALL_STATUSES = ['ok', 'tool_error', 'error', 'gone'];

/** POST …/tools/call: the endpoint's own answer, an SSE stream or one JSON-RPC response. */
function playgroundCall() {
  const [method, operation] = op('post', 'publisher', 'Run a tool from the console (the tool playground)', {
    params: [SERVER],
    body: object({ name: str, 'arguments?': { type: 'object' } }),
    answer: schema('JsonRpcResponse'),
    errors: [404, 409],
    description:
      'Runs the tool as an MCP client\'s `tools/call` of revision 2025-11-25 with a progress token, through the endpoint\'s own call path (argument checks, backends, notifications, usage metrics, call log), as the console user (`console:<actor>`). ' +
      'The answer is what a client gets: for a tool that streams, `text/event-stream` whose events are `notifications/progress`, `notifications/message` and finally the JSON-RPC response; else that response as JSON. A tool error is a result with `isError`; a 409 for an inactive server. Audited.',
  });
  operation.responses['200'].content = {
    'text/event-stream': { schema: { type: 'string', description: 'SSE: each `data:` is one JSON-RPC message.' } },
    ...operation.responses['200'].content,
  };
  return [method, operation];
}

const id = (name, what) => ({ name, in: 'path', required: true, description: what, schema: str });
const GRACE_TEXT = 'The body is optional: `{"grace_seconds": n}` (0 to 604800, 7 days) keeps the previous code working that long, each use of it written to the log; a previous code still in an earlier grace stops at once.';
/** A rotation's POST takes an optional body (`RotateInput`). */
function rotation([method, operation]) {
  if (method !== 'post') return [method, operation];
  const responses = { ...operation.responses };
  for (const c of [400, 413, 415]) responses[c] = { $ref: `#/components/responses/E${c}` };
  const sorted = Object.fromEntries(Object.entries(responses).sort(([a], [b]) => a.localeCompare(b)));
  return [method, { ...operation, requestBody: { required: false, content: json(schema('RotateInput')) }, responses: sorted }];
}
const APP = id('app_id', 'The app id.');
const SERVER = id('server_id', 'The server id.');
const query = (name, description, s) => ({ name, in: 'query', required: false, description, schema: s });

const paths = {
  '/': [
    op('get', 'viewer', 'Where this document is', {
      answer: schema('Index'),
      description: 'The console API index: `openapi` is the path of this document (served without authentication), `caller` who is asking (null, and no 401, when no credential is sent).',
    }),
  ],
  '/apps': [
    op('get', 'viewer', 'List apps', { answer: list(schema('App')) }),
    op('post', 'publisher', 'Create an app', { ok: 201, body: schema('AppInput'), answer: schema('App') }),
  ],
  '/apps/import': [
    op('post', 'publisher', "Create an app from a Dify app's /v1/info and /v1/parameters", {
      ok: 201,
      body: schema('ImportInput'),
      answer: schema('App'),
      errors: [422],
    }),
  ],
  '/apps/{app_id}': [
    op('get', 'viewer', 'Read an app', { params: [APP], answer: schema('App'), errors: [404] }),
    op('put', 'publisher', 'Replace an app', { params: [APP], body: schema('AppInput'), answer: schema('App'), errors: [404] }),
    op('delete', 'publisher', 'Delete an app (its one-app server goes with it)', {
      params: [APP],
      answer: schema('Deleted'),
      errors: [404],
    }),
  ],
  '/apps/{app_id}/tools/refresh': [
    op('post', 'publisher', "Re-read an upstream MCP app's tools, resources and prompts now", {
      params: [APP],
      answer: schema('ToolsRefresh'),
      errors: [400, 404, 422],
    }),
  ],
  '/apps/{app_id}/test': [
    op('post', 'publisher', 'Test connection: probe the app\'s backend and say what is wrong and how to fix it', {
      params: [APP],
      answer: schema('ConnectionTest'),
      errors: [400, 404],
      description: "Sends only probes that run nothing, with the app's stored settings: a Dify app's `GET /info` and `GET /parameters` (key, base_url with /v1, mode, input form), an HTTP tool's endpoint by `GET`, an upstream MCP server's `initialize` and `tools/list`. The answer is 200 whatever the backend said: `ok` is false when a step failed, and `problem` and `fix` say what to do.",
    }),
  ],
  '/apps/{app_id}/server': [
    op('get', 'viewer', "Read the app's (Dify-style) server; never the code", {
      params: [APP],
      answer: schema('Server'),
      errors: [404],
    }),
    op('post', 'publisher', 'Publish the app as an MCP server: the code and MCP URL are shown this once', {
      ok: 201,
      params: [APP],
      body: schema('AppServerCreate'),
      answer: schema('ServerWithCode'),
      errors: [404, 409],
    }),
    op('put', 'publisher', "Update the app's server", {
      params: [APP],
      body: schema('AppServerUpdate'),
      answer: schema('Server'),
      errors: [404],
    }),
    op('delete', 'publisher', "Delete the app's server", { params: [APP], answer: schema('Deleted'), errors: [404] }),
  ],
  '/apps/{app_id}/server/refresh': ['get', 'post'].map((m) =>
    rotation(op(m, 'publisher', 'Rotate the server code (Dify keys this by server id; an app id works too)', {
      params: [id('app_id', 'A server id, or the id of an app with a server.')],
      answer: schema('ServerWithCode'),
      errors: m === 'get' ? [404, 405] : [404],
      description: m === 'get' ? "Dify's route: a GET that writes, so it needs a publisher, and a caller that sends an `Authorization` header (a caller Cloudflare Access signed in uses POST). No grace period: use POST for one." : GRACE_TEXT,
    })),
  ),
  '/servers': [
    op('get', 'viewer', 'List every server (one-app ones too, with `kind`)', { answer: list(schema('Server')) }),
    op('post', 'publisher', 'Create a multi-app server (one tool per app): the code is shown this once', {
      ok: 201,
      body: schema('ServerCreate'),
      answer: schema('ServerWithCode'),
    }),
  ],
  '/servers/{server_id}': [
    op('get', 'viewer', 'Read a server', { params: [SERVER], answer: schema('Server'), errors: [404] }),
    op('put', 'publisher', 'Update a server', { params: [SERVER], body: schema('ServerUpdate'), answer: schema('Server'), errors: [404] }),
    op('delete', 'publisher', 'Delete a server', { params: [SERVER], answer: schema('Deleted'), errors: [404] }),
    op('patch', 'publisher', 'Edit a server: name, description, parameter descriptions, status, apps', {
      params: [SERVER],
      body: schema('ServerEdit'),
      answer: schema('Server'),
      errors: [404],
      description: 'Any of the fields; the others stay. A one-app server keeps its app and is named after it (rename the app). Each described parameter must be an input of one of the server\'s apps; an empty description removes it. The cached definition is rewritten before the answer.',
    }),
  ],
  '/servers/{server_id}/reveal': [
    op('post', 'admin', "Show the server's MCP URL again (from its sealed code); each reveal is in the audit log", {
      params: [SERVER],
      answer: schema('ServerUrl'),
      errors: [404, 409],
      description: 'A 409 (`not_revealable`) says why a URL cannot be shown (a code drawn before codes were kept sealed, or without SECRETS_KEY) and how to get one that can: rotate the code, with a grace period so clients keep working.',
    }),
  ],
  '/servers/{server_id}/refresh': ['get', 'post'].map((m) =>
    rotation(op(m, 'publisher', 'Rotate the server code: the old one stops at once, or after the grace period a POST asks for', {
      params: [SERVER],
      answer: schema('ServerWithCode'),
      errors: m === 'get' ? [404, 405] : [404],
      description: m === 'get' ? 'A GET that writes: a caller Cloudflare Access signed in uses POST. No grace period: use POST for one.' : GRACE_TEXT,
    })),
  ),
  '/servers/{server_id}/auth': [
    op('get', 'viewer', "The server's client authentication", { params: [SERVER], answer: schema('Auth'), errors: [404] }),
    op('put', 'publisher', "Set the server's client authentication mode", {
      params: [SERVER],
      body: schema('AuthInput'),
      answer: schema('Server'),
      errors: [404],
    }),
  ],
  '/servers/{server_id}/keys': [
    op('get', 'viewer', "List the server's client keys (names and hints, never a key)", {
      params: [SERVER],
      answer: list(schema('Key')),
      errors: [404],
    }),
    op('post', 'publisher', 'Create a client key: shown this once', {
      ok: 201,
      params: [SERVER],
      body: object({ name: str }),
      answer: schema('KeyCreated'),
      errors: [404, 409],
    }),
  ],
  '/servers/{server_id}/keys/{key_id}': [
    op('delete', 'publisher', 'Revoke a client key', {
      params: [SERVER, id('key_id', 'The key id.')],
      answer: schema('Deleted'),
      errors: [404],
    }),
  ],
  '/servers/{server_id}/tasks': [
    op('get', 'viewer', "The server's durable tasks, newest first", {
      params: [
        SERVER,
        query('limit', '1 to 100 (default 50).', { type: 'integer', minimum: 1, maximum: 100 }),
        query('before', 'A `created_at` of an earlier page (`next_before`).', int),
      ],
      answer: object({ data: { type: 'array', items: schema('Task') }, next_before: nullable('integer') }),
      errors: [404],
    }),
  ],
  '/servers/{server_id}/tasks/{task_id}': [
    op('get', 'viewer', 'Read a durable task', { params: [SERVER, id('task_id', 'The task id.')], answer: schema('Task'), errors: [404] }),
  ],
  '/servers/{server_id}/tasks/{task_id}/cancel': [
    op('post', 'publisher', 'Cancel a durable task', {
      params: [SERVER, id('task_id', 'The task id.')],
      answer: schema('Task'),
      errors: [404, 409],
    }),
  ],
  '/servers/{server_id}/usage': [
    op('get', 'viewer', 'Usage metrics: series per tool and in all, and the last 50 failures', {
      params: [
        SERVER,
        query('from', 'Epoch seconds or an ISO-8601 time (default: an hour, or a day with step=hour, before `to`).', str),
        query('to', 'Epoch seconds or an ISO-8601 time (default: now).', str),
        query('step', '`minute` (default) or `hour`.', { type: 'string', enum: ['minute', 'hour'] }),
      ],
      answer: schema('Usage'),
      errors: [404],
    }),
  ],
  '/servers/{server_id}/tools': [
    op('get', 'viewer', "The server's tools as an MCP client sees them (the tool playground)", {
      params: [SERVER],
      answer: schema('PlaygroundTools'),
      errors: [404],
      description: 'The `tools/list` result a client of `protocol_version` gets: names, descriptions, input and output schemas.',
    }),
  ],
  '/servers/{server_id}/tools/call': [playgroundCall()],
  '/servers/{server_id}/calls': [
    op('get', 'viewer', "The server's call log: its recent tool calls, newest first", {
      params: [
        SERVER,
        query('tool', 'Only calls of this tool.', str),
        query('caller', 'Only calls of this caller (a client key name, an OAuth subject, a client name or a console user).', str),
        query('status', 'Only calls that ended so.', { type: 'string', enum: CALL_STATUSES }),
        query('limit', '1 to 500 (default 100).', { type: 'integer', minimum: 1, maximum: 500 }),
        query('before', 'The `next` of an earlier page.', str),
      ],
      answer: schema('CallLog'),
      errors: [404],
      description: 'The last 1,000 calls of the server, successes included. Calls are gathered in memory and written with the usage flush (`flush_seconds`); this route writes its own isolate\'s first. Arguments and results only when the server keeps them (`record_payloads`), with credentials redacted.',
    }),
  ],
  '/servers/{server_id}/calls/settings': [
    op('get', 'viewer', "Whether the server's call log keeps arguments and results", { params: [SERVER], answer: schema('CallLogSettings'), errors: [404] }),
    op('put', 'publisher', "Turn keeping arguments and results in the call log on or off", {
      params: [SERVER],
      body: schema('CallLogSettings'),
      answer: schema('CallLogSettings'),
      errors: [404],
    }),
  ],
  '/audit': [
    op('get', 'viewer', 'The audit log of console writes, newest first', {
      params: [query('limit', '1 to 500 (default 100).', { type: 'integer', minimum: 1, maximum: 500 })],
      answer: list(schema('AuditEntry')),
    }),
  ],
  '/secrets/reseal': [
    op('post', 'admin', 'Re-seal stored credentials under the current SECRETS_KEY', {
      answer: object({ resealed_apps: int, resealed_server_codes: int }),
      errors: [409],
    }),
  ],
  '/tokens': [
    op('get', 'admin', 'List console tokens (never a token)', { answer: list(schema('Token')) }),
    op('post', 'admin', 'Create a console token: shown this once', {
      ok: 201,
      body: schema('TokenInput'),
      answer: schema('TokenCreated'),
      errors: [409],
    }),
  ],
  '/tokens/{token_id}': [
    op('delete', 'admin', 'Revoke a console token', { params: [id('token_id', 'The token id.')], answer: schema('Deleted'), errors: [404] }),
  ],
};

const MODES = ['workflow', 'chat', 'advanced-chat', 'agent-chat', 'completion', 'http-tool', 'mcp'];
const parametersMap = { type: 'object', additionalProperties: str, description: 'Variable name → the description MCP clients see.' };
const oauth = object({ issuer: str, 'audience?': nullable('string'), 'scopes?': strings, 'jwks_uri?': nullable('string') });
const stats = {
  calls: int,
  errors: int,
  streamed: int,
  p50_ms: nullable('number'),
  p95_ms: nullable('number'),
  callers: int,
  callers_capped: { type: 'boolean' },
};
const series = { type: 'array', items: object({ t: int, ...stats }) };
const serverProps = {
  id: str,
  name: str,
  description: str,
  status: { type: 'string', enum: ['active', 'inactive'] },
  parameters: parametersMap,
  server_code_hint: { type: 'string', description: 'The last 4 characters of the code.' },
  auth: schema('Auth'),
  kind: { type: 'string', enum: ['app', 'multi'], description: '`app`: managed under /apps/{app_id}/server; `multi`: under /servers/{id}.' },
  'app_id?': { ...str, description: 'kind `app`: the app.' },
  'app_ids?': { ...strings, description: 'kind `multi`: its apps, in tool order.' },
  created_at: int,
  updated_at: int,
  url_revealable: { type: 'boolean', description: 'Whether an admin can see the MCP URL again (POST /servers/{id}/reveal): the code is kept sealed under SECRETS_KEY.' },
  'previous_code?': {
    ...object({ hint: str, until_ms: { ...int, description: 'Unix milliseconds.' } }),
    description: 'While a rotation\'s grace lasts: the previous code\'s last 4 characters and when it stops working.',
  },
  'server_code?': { ...str, description: 'Only in the answer that drew it: keep it secret.' },
  'mcp_url?': { type: 'string', format: 'uri', description: 'Only with `server_code`.' },
  'warnings?': strings,
};
const REVISIONS = ['2024-11-05', '2025-03-26', '2025-06-18', '2025-11-25', '2026-07-28'];
/** The settings every mode shares are free-form; the mcp ones with fixed values are spelled out. */
const backendSchema = {
  type: 'object',
  properties: {
    conversations: {
      type: 'boolean',
      default: false,
      description: 'Dify chat, advanced-chat and agent-chat apps: results carry the `conversation_id` Dify assigned (structuredContent and _meta) and a call may pass it back as the optional `conversation_id` argument to continue that conversation; a conversation belongs to the caller that started it. Refused for workflow and completion apps. See docs/files-and-conversations.md.',
    },
    protocol_version: {
      type: 'string',
      enum: REVISIONS,
      description: 'mcp: the one MCP revision spoken with the upstream (2026-07-28: no initialize probe); absent: negotiated.',
    },
    oauth: {
      type: 'object',
      description: 'mcp: client credentials for the upstream. `token_url`, or `issuer` (the authorization server, found by RFC 9728/8414 discovery and accepted only when its metadata names this exact issuer).',
      properties: { token_url: { type: 'string', format: 'uri' }, issuer: { type: 'string', format: 'uri' }, client_id: str },
    },
  },
};
const appProps = {
  id: str,
  name: str,
  description: str,
  mode: { type: 'string', enum: MODES },
  backend: { ...backendSchema, description: 'The backend settings; literal credentials are shown as "***".' },
  user_input_form: { type: 'array', items: { type: 'object' } },
  outputs: { type: 'array', items: { type: 'object' } },
  created_at: { ...int, description: 'Unix seconds.' },
  updated_at: int,
  'warnings?': strings,
  'note?': { ...str, description: 'Imports of workflows without declared outputs: how to declare them.' },
  'servers?': {
    type: 'array',
    items: object({ id: str, name: str, kind: { type: 'string', enum: ['app', 'multi'] } }),
    description: 'GET only: the servers that publish the app.',
  },
};

const schemas = {
  Error: object({
    error: { type: 'string', description: 'A stable code: validation_failed, unauthorized, forbidden, not_found, ...' },
    message: { type: 'string', description: 'What went wrong and what to do, for a person.' },
    'errors?': { type: 'array', items: object({ field: str, message: str }) },
  }),
  Index: object({
    openapi: { type: 'string', const: '/console/api/openapi.json' },
    version: str,
    caller: {
      description: 'Who is asking; null without credentials (the index is the one answer given to anyone).',
      oneOf: [
        { type: 'null' },
        object({
          actor: { type: 'string', description: '`admin` (ADMIN_TOKEN), `token:<name>` (a console token) or `access:<email>` (Cloudflare Access).' },
          role: { type: 'string', enum: ['viewer', 'publisher', 'admin'] },
        }),
      ],
    },
  }),
  App: object(appProps),
  AppInput: {
    type: 'object',
    required: ['name', 'mode', 'backend'],
    properties: {
      name: str,
      description: str,
      mode: { type: 'string', enum: MODES },
      backend: { ...backendSchema, description: 'Dify: {base_url, api_key, ...}; http-tool: {api_endpoint, manifest, ...}; mcp: {url, protocol_version?, oauth?, ...}. See docs/backends.md.' },
      user_input_form: { type: 'array', items: { type: 'object' } },
      outputs: { type: 'array', items: object({ variable: str, type: str, 'description?': str }) },
    },
  },
  ImportInput: object({
    base_url: { type: 'string', format: 'uri' },
    api_key: str,
    'outputs?': { type: 'array', items: { type: 'object' } },
    'mode?': { type: 'string', enum: ['workflow', 'chat', 'advanced-chat', 'agent-chat', 'completion'], description: 'The mode you expect the Dify app to have: an app of another mode is refused (400, field `mode`) instead of imported.' },
  }),
  Deleted: object({ result: { const: 'success' }, id: str }),
  ToolsRefresh: object({
    upstream_tools: strings,
    exposed_tools: strings,
    'capabilities?': { type: 'object' },
    'servers?': { type: 'array', items: { type: 'object' } },
    'catalog_error?': str,
  }),
  Auth: object({ mode: { type: 'string', enum: ['none', 'key', 'oauth'] }, 'oauth?': oauth }),
  AuthInput: object({ mode: { type: 'string', enum: ['none', 'key', 'oauth'] }, 'oauth?': { type: ['object', 'null'] } }),
  Server: object(serverProps),
  ServerWithCode: { type: 'object', allOf: [schema('Server')], required: ['server_code', 'mcp_url'] },
  AppServerCreate: object({ 'description?': str, 'parameters?': parametersMap }),
  AppServerUpdate: object({
    id: { ...str, description: "The server's id (from GET)." },
    'name?': { ...str, description: 'Accepted and ignored: a one-app server is named after its app.' },
    'description?': str,
    'parameters?': parametersMap,
    'status?': { type: 'string', enum: ['active', 'inactive'] },
  }),
  ServerCreate: object({ name: str, app_ids: strings, 'description?': str, 'parameters?': parametersMap }),
  ServerUpdate: object({
    'name?': str,
    'app_ids?': strings,
    'description?': str,
    'parameters?': parametersMap,
    'status?': { type: 'string', enum: ['active', 'inactive'] },
  }),
  ServerEdit: object({
    'name?': { ...str, description: 'Multi-app servers only: a one-app server is named after its app.' },
    'description?': str,
    'parameters?': { ...parametersMap, description: 'Variable name → description, replacing the stored ones; each variable an input of one of the server\'s apps; an empty description drops it.' },
    'status?': { type: 'string', enum: ['active', 'inactive'] },
    'app_ids?': { ...strings, description: 'Multi-app servers only: its apps, in tool order.' },
  }),
  ServerUrl: object({
    id: str,
    name: str,
    server_code: { ...str, description: 'Keep it secret: it is the credential of the URL.' },
    server_code_hint: str,
    mcp_url: { type: 'string', format: 'uri' },
  }),
  RotateInput: object({
    'grace_seconds?': { type: ['integer', 'null'], minimum: 0, maximum: 604800, description: 'How long the previous code keeps working (default 0: it stops at once).' },
  }),
  ConnectionTest: object({
    ok: { type: 'boolean', description: 'No step failed (warnings allowed).' },
    checks: {
      type: 'array',
      items: object({
        step: { ...str, description: 'e.g. `GET /info`, `GET api_endpoint`, `initialize and tools/list`.' },
        level: { type: 'string', enum: ['ok', 'warning', 'error'] },
        detail: { ...str, description: 'What happened.' },
        'fix?': { ...str, description: 'What to do (warnings and errors).' },
      }),
    },
    'problem?': { ...str, description: 'The first failed step\'s detail.' },
    'fix?': { ...str, description: 'The first failed step\'s fix.' },
  }),
  Key: object({ id: str, name: str, hint: str, created_at: int, last_used_at: nullable('integer') }),
  KeyCreated: object({ id: str, name: str, key: { ...str, description: 'fgk_…: shown this once.' }, hint: str, created_at: int }),
  Task: object({
    id: str,
    app_id: str,
    tool: str,
    status: { type: 'string', enum: ['submitted', 'working', 'input_required', 'completed', 'failed', 'cancelled'] },
    status_message: nullable('string'),
    created_at: { ...int, description: 'Unix milliseconds.' },
    updated_at: int,
    poll_count: int,
    consecutive_errors: int,
    last_error: nullable('string'),
    next_poll_at: nullable('integer'),
    degraded: { type: 'boolean' },
    cancel_requested: { type: 'boolean' },
    completed_at: nullable('integer'),
    'result?': { description: 'A finished task read alone: its CallToolResult (null otherwise).', type: ['object', 'null'] },
    'error?': { description: 'A finished task read alone: its JSON-RPC error {code, message}, or why the result is gone.', type: ['object', 'null'] },
  }),
  Usage: object({
    server_id: str,
    step: { type: 'string', enum: ['minute', 'hour'] },
    from: int,
    to: int,
    from_iso: str,
    to_iso: str,
    flush_seconds: int,
    total: object({ ...stats, series }),
    tools: { type: 'array', items: object({ tool: str, ...stats, series }) },
    failures: { type: 'array', items: object({ at: int, at_iso: str, tool: nullable('string'), message: nullable('string') }) },
  }),
  AuditEntry: object({
    at: { ...int, description: 'Unix milliseconds.' },
    request_id: str,
    actor: { ...str, description: '`admin` (ADMIN_TOKEN) or `token:<name>`.' },
    action: { ...str, description: 'e.g. `PUT /apps/{id}/server`.' },
    target: nullable('string'),
    status: int,
    summary: { ...str, description: 'The entry in words, with the target\'s current name, e.g. `Changed the server of app “Summariser”`.' },
    target_name: { ...nullable('string'), description: 'The current name of the app, server or token the entry is about (null when it is gone).' },
  }),
  PlaygroundTools: object({
    server_id: str,
    protocol_version: { type: 'string', description: 'The MCP revision the list is for (the playground\'s).' },
    status: { type: 'string', enum: ['active', 'inactive'] },
    tools: { type: 'array', items: { type: 'object', required: ['name', 'inputSchema'], properties: { name: str, description: str, inputSchema: { type: 'object' }, outputSchema: { type: 'object' } } } },
  }),
  JsonRpcResponse: {
    type: 'object',
    required: ['jsonrpc', 'id'],
    properties: { jsonrpc: { const: '2.0' }, id: {}, result: { type: 'object' }, error: { type: 'object' } },
    description: 'A JSON-RPC response: `result` (content, structuredContent, isError) or `error`.',
  },
  CallLogSettings: object({ record_payloads: { type: 'boolean', description: 'Keep arguments and results (credentials redacted, clipped to 2,000 characters).' } }),
  CallLog: object({
    server_id: str,
    record_payloads: { type: 'boolean' },
    flush_seconds: int,
    next: { ...nullable('string'), description: 'The `before` of the next page; null on the last.' },
    data: {
      type: 'array',
      items: object({
        at: { ...int, description: 'Unix milliseconds: when the call finished.' },
        at_iso: str,
        tool: str,
        caller_kind: { type: 'string', enum: ['key', 'oauth', 'client', 'console'] },
        caller: str,
        status: { type: 'string', enum: CALL_STATUSES },
        duration_ms: int,
        streamed: { type: 'boolean' },
        error: { ...nullable('string'), description: 'What the client was told, for a call that failed.' },
        arguments: { ...nullable('string'), description: 'Redacted JSON text, when the server keeps payloads.' },
        result: { ...nullable('string'), description: 'Redacted JSON text, when the server keeps payloads.' },
      }),
    },
  }),
  TokenInput: object({ name: str, role: { type: 'string', enum: ROLES } }),
  Token: object({
    id: str,
    name: str,
    role: { type: 'string', enum: ROLES },
    hint: str,
    created_by: str,
    created_at: int,
    last_used_at: nullable('integer'),
  }),
};
schemas.TokenCreated = {
  ...schemas.Token,
  properties: { ...schemas.Token.properties, token: { ...str, description: 'fgc_…: shown this once.' } },
  required: [...schemas.Token.required, 'token'],
};

const doc = {
  openapi: '3.1.0',
  info: {
    title: 'Flowgate console API',
    version: '1.0.0',
    description:
      'Register backends (Dify apps, HTTP tools, upstream MCP servers) and publish them as remote MCP servers. ' +
      'Every operation needs `Authorization: Bearer <ADMIN_TOKEN or a console token>`; `x-flowgate-role` is the least ' +
      'role it needs (viewer < publisher < admin). Errors are `Error` objects with a 4xx or 503 status.',
  },
  servers: [{ url: '/console/api' }],
  security: [{ bearer: [] }, { cloudflareAccess: [] }],
  paths: Object.fromEntries(Object.entries(paths).map(([p, ops]) => [p, Object.fromEntries(ops)])),
  components: {
    securitySchemes: {
      bearer: { type: 'http', scheme: 'bearer', description: 'ADMIN_TOKEN, or a console token (fgc_…).' },
      cloudflareAccess: {
        type: 'apiKey',
        in: 'header',
        name: 'Cf-Access-Jwt-Assertion',
        description: 'When ACCESS_TEAM_DOMAIN and ACCESS_AUD are set: the assertion Cloudflare Access adds to each request it lets through (with no Authorization header).',
      },
    },
    schemas,
    responses: Object.fromEntries(
      Object.entries(ERROR_TEXT).map(([c, d]) => [`E${c}`, { description: d, content: json(schema('Error')) }]),
    ),
  },
};

export default doc;

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const out = path.join(path.dirname(fileURLToPath(import.meta.url)), 'openapi.json');
  fs.writeFileSync(out, `${JSON.stringify(doc, null, 2)}\n`);
  console.log(`wrote ${path.relative(process.cwd(), out)}`);
}
