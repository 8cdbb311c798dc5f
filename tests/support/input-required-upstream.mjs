// A stateless MCP 2026-07-28 upstream, hand-written on node:http (SDK 1.32.2 does not speak that
// revision): the reference server's input_required fixture tools and prompt (SEP-2322, see the
// conformance scenarios `input-required-result-*`), its JSON Schema 2020-12 tool, and a tool with
// an `x-mcp-header` parameter (SEP-2243); its tasks (tasks-2026.mjs) and skills
// (skills-upstream.mjs) come from modules of their own. requestState is HMAC-signed, so altered state is
// refused. Every request is recorded ({headers, body}).
import http from 'node:http';
import { createHmac, randomBytes, timingSafeEqual } from 'node:crypto';

import { callTaskTool, EXTENSION as TASKS, isTaskTool, TASK_TOOL_LIST, taskMethod } from './tasks-2026.mjs';
import { createSkills } from './skills-upstream.mjs';

const V = '2026-07-28';
const CAPS = 'io.modelcontextprotocol/clientCapabilities';
const KEY = randomBytes(32);

const sign = (payload) => {
  const body = Buffer.from(JSON.stringify(payload)).toString('base64url');
  return `${body}.${createHmac('sha256', KEY).update(body).digest('base64url')}`;
};
/** The payload of a state this server signed; undefined for anything else. */
function verify(state) {
  if (typeof state !== 'string') return undefined;
  const dot = state.lastIndexOf('.');
  const [body, mac] = [state.slice(0, dot), Buffer.from(state.slice(dot + 1), 'base64url')];
  const want = createHmac('sha256', KEY).update(body).digest();
  if (dot < 0 || mac.length !== want.length || !timingSafeEqual(mac, want)) return undefined;
  return JSON.parse(Buffer.from(body, 'base64url').toString('utf8'));
}

class RpcError extends Error {
  constructor(code, message, status = 200, data) {
    super(message);
    Object.assign(this, { code, status, data });
  }
}
const badState = () => new RpcError(-32602, 'Invalid params: requestState failed its integrity check');

const elicit = (message, name) => ({
  method: 'elicitation/create',
  params: { message, requestedSchema: { type: 'object', properties: { [name]: { type: name === 'ok' ? 'boolean' : 'string' } }, required: [name] } },
});
const sample = (text, maxTokens) => ({ method: 'sampling/createMessage', params: { messages: [{ role: 'user', content: { type: 'text', text } }], maxTokens } });
const ROOTS = { method: 'roots/list', params: {} };
const text = (t) => ({ content: [{ type: 'text', text: t }] });
const ask = (inputRequests, requestState) => ({ resultType: 'input_required', inputRequests, ...(requestState ? { requestState } : {}) });

const JSON_SCHEMA_2020_12 = {
  $schema: 'https://json-schema.org/draft/2020-12/schema',
  type: 'object',
  $defs: { address: { $anchor: 'addressDef', type: 'object', properties: { street: { type: 'string' }, city: { type: 'string' } } } },
  properties: { name: { type: 'string' }, address: { $ref: '#/$defs/address' }, contactMethod: { type: 'string', enum: ['phone', 'email'] }, phone: { type: 'string' }, email: { type: 'string' } },
  allOf: [{ anyOf: [{ required: ['phone'] }, { required: ['email'] }] }],
  if: { properties: { contactMethod: { const: 'phone' } }, required: ['contactMethod'] },
  then: { required: ['phone'] },
  else: { required: ['email'] },
  additionalProperties: false,
};

const NO_ARGS = { type: 'object', properties: {} };
// name -> (responses, state, caps) => result. `responses[key]` is the client's answer to one
// input request (validated to be an object); `state` is the verified requestState payload.
const TOOLS = {
  test_input_required_result_elicitation: (r) => (r.user_name ? text(`Hello, ${r.user_name.content?.name}!`) : ask({ user_name: elicit('What is your name?', 'name') })),
  test_input_required_result_sampling: (r) =>
    r.capital_question ? text(`The model said: ${r.capital_question.content?.text}`) : ask({ capital_question: sample('What is the capital of France?', 100) }),
  test_input_required_result_list_roots: (r) =>
    r.client_roots ? text(`Roots: ${(r.client_roots.roots ?? []).map((x) => x.uri).join(', ')}`) : ask({ client_roots: ROOTS }),
  test_input_required_result_request_state: (r, s) => stateful(r, s, 'request_state', { confirm: elicit('Please confirm', 'ok') }, () => text('state-ok: confirmed')),
  test_input_required_result_tampered_state: (r, s) => stateful(r, s, 'tampered', { confirm: elicit('Please confirm', 'ok') }, () => text('state-ok')),
  test_input_required_result_multiple_inputs: (r, s) =>
    stateful(r, s, 'multiple', { user_name: elicit('What is your name?', 'name'), greeting: sample('Generate a greeting', 50), client_roots: ROOTS }, () => text(`Hello, ${r.user_name.content?.name}: ${r.greeting.content?.text}`)),
  test_input_required_result_multi_round: (r, s) => {
    if (s?.step === 2 && r.step2) return text(`${s.name} likes ${r.step2.content?.color}`);
    if (s?.step === 1 && r.step1) return ask({ step2: elicit('Step 2: What is your favorite color?', 'color') }, sign({ tool: 'multi', step: 2, name: r.step1.content?.name }));
    return ask({ step1: elicit('Step 1: What is your name?', 'name') }, sign({ tool: 'multi', step: 1 }));
  },
  // Asks only for what the client declared in _meta (and nothing when it declared none).
  test_input_required_result_capabilities: (r, s, caps) => {
    if (Object.keys(r).length) return text('answered');
    const wanted = {};
    if (caps.sampling) wanted.greeting = sample('Say hello', 20);
    if (caps.elicitation) wanted.user_name = elicit('What is your name?', 'name');
    if (caps.roots) wanted.client_roots = ROOTS;
    return Object.keys(wanted).length ? ask(wanted) : text('the client declared nothing to ask for');
  },
  // The reference server's diagnostic tools of the server-stateless scenario (SEP-2575).
  test_missing_capability: (r, s, caps) => {
    if (!caps.sampling) throw new RpcError(-32021, 'Missing required client capability: this tool samples', 400, { requiredCapabilities: { sampling: {} } });
    return text('the client can sample');
  },
  test_streaming_elicitation: (r) => (r.user_name ? text(`Hello, ${r.user_name.content?.name}!`) : ask({ user_name: elicit('What is your name?', 'name') })),
  test_logging_tool: () => text('no log messages: the request set no logLevel'),
  json_schema_2020_12_tool: () => text('ok'),
  test_custom_header: (r, s, c, args) => text(`region ${args.region}`),
};
/** A tool whose round trips carry signed state: the retry must bring this tool's state back. */
function stateful(r, s, tool, requests, done) {
  if (s === undefined) return ask(requests, sign({ tool }));
  if (s.tool !== tool) throw badState();
  return Object.keys(requests).every((k) => r[k]) ? done() : ask(requests, sign({ tool }));
}

const TOOL_LIST = [
  ...Object.keys(TOOLS)
    .filter((n) => n.startsWith('test_input') || ['test_missing_capability', 'test_streaming_elicitation', 'test_logging_tool'].includes(n))
    .map((name) => ({ name, description: `The reference ${name} fixture`, inputSchema: NO_ARGS })),
  { name: 'json_schema_2020_12_tool', description: 'Tool with JSON Schema 2020-12 features', inputSchema: JSON_SCHEMA_2020_12 },
  {
    name: 'test_custom_header',
    description: 'Its region travels in the Mcp-Param-Region header too',
    inputSchema: { type: 'object', properties: { region: { type: 'string', 'x-mcp-header': 'Region' } }, required: ['region'] },
  },
];
const PROMPT = 'test_input_required_result_prompt';

/** A header value as SEP-2243 encodes it: `=?base64?…?=` (strict base64) or literal. */
function decodeHeader(v) {
  const m = /^=\?base64\?(.*)\?=$/.exec(v);
  if (!m) return v;
  if (!/^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$/.test(m[1])) throw new RpcError(-32020, 'Header mismatch: Mcp-Param value is not valid base64', 400);
  return Buffer.from(m[1], 'base64').toString('utf8');
}

/** SEP-2575: every request carries its revision and the client's capabilities in `_meta`. */
function checkMeta(headers, msg) {
  const meta = msg.params?._meta;
  const invalid = (why) => new RpcError(-32602, `Invalid params: ${why}`, 400);
  if (typeof meta !== 'object' || meta === null) throw invalid('_meta is required');
  const version = meta['io.modelcontextprotocol/protocolVersion'];
  if (typeof version !== 'string') throw invalid('_meta needs io.modelcontextprotocol/protocolVersion');
  if (typeof meta[CAPS] !== 'object' || meta[CAPS] === null) throw invalid(`_meta needs ${CAPS}`);
  if (headers['mcp-protocol-version'] !== version) throw new RpcError(-32020, 'Header mismatch: MCP-Protocol-Version does not match _meta', 400);
  if (version !== V) throw new RpcError(-32022, `Unsupported protocol version: ${version}`, 400, { supported: [V], requested: version });
}

function checkHeaders(headers, msg) {
  const mismatch = (why) => new RpcError(-32020, `Header mismatch: ${why}`, 400);
  checkMeta(headers, msg);
  if (headers['mcp-method'] !== msg.method) throw mismatch('Mcp-Method does not match the body');
  const name = msg.method === 'resources/read' ? msg.params?.uri : ['tasks/get', 'tasks/update', 'tasks/cancel'].includes(msg.method) ? msg.params?.taskId : msg.params?.name;
  if (name !== undefined && decodeHeader(String(headers['mcp-name'] ?? '').trim()) !== name) throw mismatch('Mcp-Name does not match the body');
  const tool = msg.method === 'tools/call' && TOOL_LIST.find((t) => t.name === name);
  for (const [arg, schema] of Object.entries(tool?.inputSchema?.properties ?? {})) {
    const h = schema['x-mcp-header'];
    const value = msg.params?.arguments?.[arg];
    if (!h || value === undefined) continue;
    const sent = headers[`mcp-param-${h.toLowerCase()}`];
    if (sent === undefined || decodeHeader(String(sent).trim()) !== String(value)) throw mismatch(`Mcp-Param-${h} does not match arguments.${arg}`);
  }
}

function handle(msg, headers, skills, { bareTaskTools }) {
  checkHeaders(headers, msg);
  const p = msg.params ?? {};
  const done = (r) => ({ resultType: 'complete', ...r });
  const list = (key, items) => done({ [key]: items, ttlMs: 0, cacheScope: 'public' });
  const skilled = skills.handle(msg.method, p, { RpcError });
  if (skilled) return done(skilled);
  switch (msg.method) {
    case 'server/discover':
      return done({
        supportedVersions: [V],
        capabilities: { tools: {}, prompts: {}, resources: {}, extensions: { [TASKS]: {}, ...skills.capability } },
        ttlMs: 0,
        cacheScope: 'public',
        _meta: { 'io.modelcontextprotocol/serverInfo': { name: 'input-required-upstream', version: '1.0.0' } },
      });
    case 'tools/list':
      // bareTaskTools: the task tools without execution.taskSupport (as FastMCP lists them), still
      // run as tasks for a client that speaks the extension.
      return list('tools', [...TOOL_LIST, ...(bareTaskTools ? TASK_TOOL_LIST.map(({ execution, ...t }) => t) : TASK_TOOL_LIST)]);
    case 'resources/list':
      return list('resources', skills.resources);
    case 'prompts/list':
      return list('prompts', [{ name: PROMPT, description: 'A prompt that asks for its context first' }]);
    case 'tasks/get':
    case 'tasks/update':
    case 'tasks/cancel':
    case 'tasks/result':
    case 'tasks/list':
      return taskMethod(msg.method, p, { RpcError });
    case 'tools/call':
    case 'prompts/get': {
      if (msg.method === 'tools/call' && isTaskTool(p.name)) {
        const state = p.requestState === undefined ? undefined : verify(p.requestState);
        if (p.requestState !== undefined && state === undefined) throw badState();
        return Promise.resolve(callTaskTool(p, { RpcError, ask, sign, state })).then((r) => (r.resultType ? r : done(r)));
      }
      const run = msg.method === 'tools/call' ? TOOLS[p.name] : p.name === PROMPT && ((r) => (r.user_context ? done({ messages: [{ role: 'user', content: { type: 'text', text: `Context: ${r.user_context.content?.context}` } }] }) : ask({ user_context: elicit('What context should the prompt use?', 'context') })));
      if (!run) throw new RpcError(-32602, `Invalid params: no ${msg.method === 'tools/call' ? 'tool' : 'prompt'} ${p.name}`);
      const responses = p.inputResponses ?? {};
      if (p.inputResponses !== undefined && (typeof responses !== 'object' || responses === null || Array.isArray(responses) || Object.values(responses).some((v) => typeof v !== 'object' || v === null))) {
        throw new RpcError(-32602, 'Invalid params: inputResponses must be an object of response objects');
      }
      const state = p.requestState === undefined ? undefined : verify(p.requestState);
      if (p.requestState !== undefined && state === undefined) throw badState();
      const result = run(responses, state, p._meta?.[CAPS] ?? {}, p.arguments ?? {});
      return result.resultType ? result : done(result);
    }
    default:
      throw new RpcError(-32601, `Method not found: ${msg.method}`, 404);
  }
}

/** Starts the upstream on a free loopback port: {url, requests, skills, close()}. Its skills are
 * under `skillPrefix` (tests/support/skills-upstream.mjs); `bareTaskTools` lists its task tools
 * without `execution.taskSupport`. */
export async function startInputRequiredUpstream({ skillPrefix = '', bareTaskTools = false } = {}) {
  const requests = [];
  const skills = createSkills(skillPrefix);
  const server = http.createServer(async (req, res) => {
    const chunks = [];
    for await (const c of req) chunks.push(c);
    const send = (status, body) => {
      res.writeHead(status, { 'content-type': 'application/json' });
      res.end(JSON.stringify(body));
    };
    if (req.method !== 'POST') return send(405, { jsonrpc: '2.0', id: null, error: { code: -32000, message: 'Method not allowed' } });
    let msg;
    try {
      msg = JSON.parse(Buffer.concat(chunks).toString('utf8'));
    } catch {
      return send(400, { jsonrpc: '2.0', id: null, error: { code: -32700, message: 'Parse error' } });
    }
    requests.push({ headers: req.headers, body: msg });
    if (msg.id === undefined) return res.writeHead(202).end();
    try {
      send(200, { jsonrpc: '2.0', id: msg.id, result: await handle(msg, req.headers, skills, { bareTaskTools }) });
    } catch (e) {
      if (!(e instanceof RpcError)) return send(500, { error: String(e?.stack ?? e) });
      send(e.status, { jsonrpc: '2.0', id: msg.id, error: { code: e.code, message: e.message, ...(e.data ? { data: e.data } : {}) } });
    }
  });
  server.keepAliveTimeout = 65_000;
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${server.address().port}/mcp`,
    requests,
    skills,
    close: () => new Promise((resolve) => {
      server.closeAllConnections();
      server.close(() => resolve());
    }),
  };
}
