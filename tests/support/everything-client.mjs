// One fixed script of client operations against the reference everything server (directly or
// through Flowgate), with the official TypeScript SDK client, giving a normalized transcript:
// the same script run both ways must give transcripts that differ only in documented ways.
//
//   import { runEverythingScript } from '../support/everything-client.mjs';
//   const t = await runEverythingScript({ url, transport: 'streamableHttp', capable: false, prefix: '' });
//   t.entries   // [[operation, normalized answer], ...]
//   t.errors    // {operation: the error message as the client got it}
//
// `capable`: the client declares sampling, elicitation (form and URL mode) and roots (with
// handlers that answer at once); otherwise it declares no capabilities at all.
// `revision`: the MCP revision the client offers (default: the SDK's latest, 2025-11-25).
// `prefix`: what Flowgate puts before the upstream's tool and prompt names (`Everything_`);
// stripped from the names in the transcript, added to the names the script calls.
//
// The operations: initialize; list tools, resources, resource templates and prompts (every
// page); call each tool that needs no client capability with valid sample arguments (the
// gzip tool with a data: URI, so nothing is fetched from outside); read a static resource, a
// text and a blob resource of the templates, and a URI the server does not have; get each
// prompt with sample arguments; complete a prompt argument and a template variable.
// Normalized: times of day in texts (the dynamic resources say when they were made) become
// `<time>`, and base64 blobs holding text are decoded to it so that the time can be found.

import assert from 'node:assert/strict';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { SSEClientTransport } from '@modelcontextprotocol/sdk/client/sse.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { CreateMessageRequestSchema, ElicitRequestSchema, ListRootsRequestSchema } from '@modelcontextprotocol/sdk/types.js';

/** What a capable client declares. */
export const CAPABLE = { sampling: {}, elicitation: { form: {}, url: {} }, roots: { listChanged: true } };

/** Sample arguments per tool (upstream names); a tool not here and needing none gets `{}`. */
export const TOOL_ARGS = {
  echo: { message: 'hello through the gateway' },
  'get-annotated-message': { messageType: 'success', includeImage: true },
  'get-env': {},
  'get-resource-links': { count: 4 },
  'get-resource-reference': { resourceType: 'Blob', resourceId: 3 },
  'get-structured-content': { location: 'Chicago' },
  'get-sum': { a: 2, b: 40 },
  'get-tiny-image': {},
  'gzip-file-as-resource': { name: 'hello.txt.gz', data: 'data:text/plain;base64,aGVsbG8gd29ybGQ=', outputType: 'resource' },
  'trigger-long-running-operation': { duration: 1, steps: 2 },
};

/** Tools the script does not call: each needs a client capability (or a task), or, for the
 * toggles, starts a timer on the session whose notifications are not part of the comparison. */
export const NOT_CALLED = new Set([
  'get-roots-list', 'trigger-sampling-request', 'trigger-elicitation-request', 'trigger-url-elicitation',
  'trigger-sampling-request-async', 'trigger-elicitation-request-async', 'simulate-research-query',
  'toggle-simulated-logging', 'toggle-subscriber-updates',
]);

/** Sample prompt arguments, by argument name. */
const PROMPT_ARGS = { city: 'Chicago', state: 'IL', department: 'Engineering', name: 'Alice', resourceType: 'Text', resourceId: '2' };

const TIME = /\b\d{1,2}:\d{2}:\d{2}(\s?[AP]M)?\b/g;

/** The transcript form of a value: times replaced, text blobs decoded. */
export function normalize(v) {
  if (typeof v === 'string') return v.replace(TIME, '<time>');
  if (Array.isArray(v)) return v.map(normalize);
  if (v && typeof v === 'object') {
    const out = {};
    for (const [k, x] of Object.entries(v)) {
      if (k === 'blob' && typeof x === 'string') {
        const text = Buffer.from(x, 'base64').toString('utf8');
        out[k] = /^[\x20-\x7e\n]*$/.test(text) ? `text:${normalize(text)}` : x;
      } else out[k] = normalize(x);
    }
    return out;
  }
  return v;
}

/** The transport; with `revision`, its `initialize` offers that revision instead of the SDK's
 * latest (the SDK client has no setting for it; it accepts any revision it supports back). */
function transportFor(url, transport, revision) {
  const t = transport === 'sse' ? new SSEClientTransport(new URL(url)) : new StreamableHTTPClientTransport(new URL(url));
  if (revision) {
    const send = t.send.bind(t);
    t.send = (msg, opts) => send(msg.method === 'initialize' ? { ...msg, params: { ...msg.params, protocolVersion: revision } } : msg, opts);
  }
  return t;
}

/** Every page of a list. */
async function all(method, key) {
  const items = [];
  let cursor;
  do {
    const r = await method(cursor ? { cursor } : {});
    items.push(...r[key]);
    cursor = r.nextCursor;
  } while (cursor);
  return items;
}

/** Runs the script; see the top of this file. */
export async function runEverythingScript({ url, transport, capable = false, prefix = '', revision, clientName = 'everything-script' }) {
  const client = new Client({ name: clientName, version: '1.0.0' }, { capabilities: capable ? CAPABLE : {} });
  if (capable) {
    client.setRequestHandler(CreateMessageRequestSchema, async () => ({ role: 'assistant', content: { type: 'text', text: 'sampled' }, model: 'script' }));
    client.setRequestHandler(ElicitRequestSchema, async () => ({ action: 'decline' }));
    client.setRequestHandler(ListRootsRequestSchema, async () => ({ roots: [{ uri: 'file:///tmp/script', name: 'script' }] }));
  }
  const entries = [];
  const errors = {};
  const unprefix = (name) => (prefix && name.startsWith(prefix) ? name.slice(prefix.length) : `(unprefixed) ${name}`);
  const record = async (op, fn) => {
    try {
      entries.push([op, normalize(await fn())]);
    } catch (e) {
      errors[op] = String(e?.message ?? e);
      entries.push([op, { error: { code: e?.code ?? null } }]);
    }
  };
  const t = transportFor(url, transport, revision);
  await client.connect(t);
  try {
    entries.push(['initialize', { capabilities: normalize(client.getServerCapabilities() ?? {}) }]);
    if (revision && transport !== 'sse') assert.equal(t.protocolVersion, revision, 'the revision offered was the one spoken');
    const tools = await all((p) => client.listTools(p), 'tools');
    entries.push(['tools/list', tools.map((t) => ({ ...t, name: prefix ? unprefix(t.name) : t.name }))]);
    entries.push(['resources/list', await all((p) => client.listResources(p), 'resources')]);
    entries.push(['resources/templates/list', await all((p) => client.listResourceTemplates(p), 'resourceTemplates')]);
    const prompts = await all((p) => client.listPrompts(p), 'prompts');
    entries.push(['prompts/list', prompts.map((p) => ({ ...p, name: prefix ? unprefix(p.name) : p.name }))]);

    for (const t of tools) {
      const upstream = prefix ? unprefix(t.name) : t.name;
      if (NOT_CALLED.has(upstream)) continue;
      const args = TOOL_ARGS[upstream] ?? {};
      await record(`tools/call ${upstream}`, async () => {
        let progress = 0;
        const r = await client.callTool({ name: t.name, arguments: args }, undefined, { onprogress: () => progress++, timeout: 30_000 });
        // Whether progress came, not how much: directly over legacy SSE the SDK client sees one
        // of the two notifications, over Streamable HTTP (and through Flowgate) both.
        return upstream === 'trigger-long-running-operation' ? { ...r, progressed: progress > 0 } : r;
      });
    }

    const staticDoc = (await all((p) => client.listResources(p), 'resources')).find((r) => r.uri.startsWith('demo://resource/static/'));
    const reads = [staticDoc?.uri, 'demo://resource/dynamic/text/2', 'demo://resource/dynamic/blob/3', 'demo://resource/static/document/no-such-file.md'];
    for (const uri of reads) await record(`resources/read ${uri}`, () => client.readResource({ uri }));

    for (const p of prompts) {
      const args = Object.fromEntries((p.arguments ?? []).map((a) => [a.name, PROMPT_ARGS[a.name] ?? 'x']));
      await record(`prompts/get ${prefix ? unprefix(p.name) : p.name}`, () => client.getPrompt({ name: p.name, arguments: args }));
    }

    const completable = prompts.find((p) => (p.arguments ?? []).some((a) => a.name === 'department'));
    if (completable) {
      await record('completion/complete ref/prompt department', () =>
        client.complete({ ref: { type: 'ref/prompt', name: completable.name }, argument: { name: 'department', value: 'E' } }));
    }
    await record('completion/complete ref/resource resourceId', () =>
      client.complete({ ref: { type: 'ref/resource', uri: 'demo://resource/dynamic/text/{resourceId}' }, argument: { name: 'resourceId', value: '7' } }));
  } finally {
    await client.close().catch(() => {});
  }
  return { entries, errors };
}
