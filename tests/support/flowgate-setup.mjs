// Shared steps of the MCP tests: register fake-Dify apps in Flowgate and publish servers.
import assert from 'node:assert/strict';

import { readResponse } from './harness.mjs';

export const FORM = [
  { 'text-input': { variable: 'text', label: 'Text', required: true, max_length: 50 } },
  { select: { variable: 'lang', label: 'Language', options: ['en', 'fr'], default: 'en' } },
  { number: { variable: 'count', label: 'Count' } },
  { checkbox: { variable: 'loud', label: 'Loud' } },
];

/** Adds an app of `mode` to the fake Dify and registers it in Flowgate; returns {app, apiKey}. */
export async function registerApp(fg, dify, { mode = 'workflow', name = `${mode} app`, behaviour = 'ok', delayMs, form = FORM, outputs, backend = {}, ...rest } = {}) {
  const apiKey = dify.addApp({ mode, name, user_input_form: form, behaviour, delayMs, ...rest });
  const r = await fg.console('/apps', {
    method: 'POST',
    body: {
      name,
      description: `${name} description`,
      mode,
      backend: { base_url: dify.baseUrl, api_key: apiKey, ...backend },
      user_input_form: form,
      outputs: outputs ?? (mode === 'workflow' ? [{ variable: 'echo', type: 'object' }] : []),
    },
  });
  assert.equal(r.status, 201, r.text);
  return { app: r.json, apiKey };
}

/** Publishes a Dify-style server for one app; returns {server, code, url}. */
export async function publish(fg, appId, body = { description: 'A test server', parameters: { text: 'The text to work on' } }) {
  const r = await fg.console(`/apps/${appId}/server`, { method: 'POST', body });
  assert.equal(r.status, 201, r.text);
  return { server: r.json, code: r.json.server_code, url: r.json.mcp_url };
}

/**
 * POSTs one raw JSON-RPC body to an MCP URL; returns {status, headers, text, json, messages}.
 * An SSE answer is parsed: `messages` are its JSON-RPC messages in order and `json` is the last
 * one (the response), so callers read both kinds of answer the same way.
 */
export async function rpc(url, body, headers = {}) {
  const res = await fetch(url, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream', ...headers },
    body: typeof body === 'string' || body instanceof Uint8Array ? body : JSON.stringify(body),
  });
  if ((res.headers.get('content-type') ?? '').includes('text/event-stream')) {
    const text = await res.text();
    const messages = parseSse(text).map((e) => JSON.parse(e.data));
    return { status: res.status, headers: res.headers, text, json: messages.at(-1), messages };
  }
  const r = await readResponse(res);
  return { ...r, messages: r.json === undefined ? [] : [r.json] };
}

/** The events of a complete SSE text (enough for tests; the Worker has the real parser). */
export function parseSse(text) {
  const events = [];
  for (const block of text.replace(/\r\n?/g, '\n').split('\n\n')) {
    const data = block.split('\n').filter((l) => l.startsWith('data:')).map((l) => l.slice(5).replace(/^ /, ''));
    if (data.length) events.push({ data: data.join('\n') });
  }
  return events;
}

const V2026 = '2026-07-28';
let nextStatelessId = 1;
/** The name SEP-2243 wants repeated in `Mcp-Name` for a method, if it has one. */
function nameOf(method, params) {
  if (method === 'resources/read') return params.uri;
  if (method === 'tools/call' || method === 'prompts/get') return params.name;
  if (['tasks/get', 'tasks/update', 'tasks/cancel'].includes(method)) return params.taskId;
  return undefined;
}
/**
 * One 2026-07-28 (stateless) request to an MCP URL with what that revision requires: `_meta`
 * with the revision, the client's capabilities (`caps`) and its info, and the standard headers
 * (plus `headers`); the JSON-RPC response.
 */
export async function rpc2026(url, method, params = {}, { caps = {}, headers = {} } = {}) {
  const meta = { 'io.modelcontextprotocol/protocolVersion': V2026, 'io.modelcontextprotocol/clientCapabilities': caps, 'io.modelcontextprotocol/clientInfo': { name: 't', version: '1' } };
  const body = { jsonrpc: '2.0', id: nextStatelessId++, method, params: { ...params, _meta: meta } };
  const name = nameOf(method, params);
  const r = await rpc(url, body, { 'mcp-protocol-version': V2026, 'mcp-method': method, ...(name === undefined ? {} : { 'mcp-name': name }), ...headers });
  return r.json;
}

/** Creates an `mcp` app for an upstream at `url` (more `backend` settings in `backend`); its id. */
export async function upstreamApp(fg, name, backend, description = `${name}: an upstream MCP server`) {
  const r = await fg.console('/apps', { method: 'POST', body: { name, description, mode: 'mcp', backend } });
  assert.equal(r.status, 201, r.text);
  return r.json.id;
}

/** Publishes a server of `appIds` named `name`: {id, url}. */
export async function serverOf(fg, name, appIds) {
  const s = await fg.console('/servers', { method: 'POST', body: { name, description: 'd', app_ids: appIds } });
  assert.equal(s.status, 201, s.text);
  return { id: s.json.id, url: s.json.mcp_url };
}
