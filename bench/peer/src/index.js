// The benchmarks' peer Worker: one MCP tool equivalent to what Flowgate publishes for the bench's
// Dify workflow app, built with the official SDK (McpServer + WebStandardStreamableHTTPServerTransport,
// stateless: a new server and transport per request, as the SDK's stateless examples do).
//
//   POST /mcp   tools/call → POST {BACKEND_BASE_URL}/workflows/run, blocking, JSON answer;
//               with params._meta.progressToken the backend is called streaming and the answer is
//               SSE: each node_started becomes notifications/message (info), each node_finished
//               notifications/progress, like Flowgate's wire output.
//   GET /healthz
//
// The result is the outputs as JSON text plus structuredContent, as Flowgate answers.
import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { WebStandardStreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/webStandardStreamableHttp.js';
import { AjvJsonSchemaValidator } from '@modelcontextprotocol/sdk/validation/ajv';
import { z } from 'zod';

const TOOL = 'Bench_Flow';
const USER = 'mcp-bench-peer';

// Built once per isolate and shared by every per-request server: schemas, and the SDK's JSON
// Schema validator (an Ajv instance, costly to create, used only for elicitation).
const inputSchema = { text: z.string().max(1000).describe('The text to summarise') };
const outputSchema = { echo: z.object({}).loose().optional() };
const validator = new AjvJsonSchemaValidator();

const textResult = (outputs) => ({ content: [{ type: 'text', text: JSON.stringify(outputs) }], structuredContent: outputs });
const errorResult = (message) => ({ content: [{ type: 'text', text: message }], isError: true });

async function runBlocking(env, args) {
  const res = await fetch(`${env.BACKEND_BASE_URL}/workflows/run`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', authorization: `Bearer ${env.BACKEND_API_KEY}` },
    body: JSON.stringify({ inputs: args, response_mode: 'blocking', user: USER }),
  });
  if (!res.ok) return errorResult(`backend answered HTTP ${res.status}: ${await res.text()}`);
  const body = await res.json();
  if (body?.data?.status !== 'succeeded') return errorResult(`workflow ${body?.data?.status}: ${body?.data?.error ?? ''}`);
  return textResult(body.data.outputs ?? {});
}

async function runStreaming(env, args, extra) {
  const res = await fetch(`${env.BACKEND_BASE_URL}/workflows/run`, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'text/event-stream', authorization: `Bearer ${env.BACKEND_API_KEY}` },
    body: JSON.stringify({ inputs: args, response_mode: 'streaming', user: USER }),
    signal: extra.signal,
  });
  if (!res.ok || !res.body) return errorResult(`backend answered HTTP ${res.status}: ${await res.text()}`);
  const token = extra._meta?.progressToken;
  let step = 0;
  let finished = null;
  let buf = '';
  const onEvent = async (block) => {
    const data = block
      .split('\n')
      .filter((l) => l.startsWith('data:'))
      .map((l) => l.slice(5).replace(/^ /, ''))
      .join('\n');
    if (!data) return;
    let ev;
    try {
      ev = JSON.parse(data);
    } catch {
      return;
    }
    if (ev.event === 'node_started') {
      await extra.sendNotification({
        method: 'notifications/message',
        params: { level: 'info', logger: 'peer', data: { event: 'node_started', node: ev.data.title, type: ev.data.node_type } },
      });
    } else if (ev.event === 'node_finished' && token !== undefined) {
      step += 1;
      await extra.sendNotification({
        method: 'notifications/progress',
        params: { progressToken: token, progress: step, message: `${ev.data.title} ${ev.data.status}` },
      });
    } else if (ev.event === 'workflow_finished') {
      finished = ev.data;
    } else if (ev.event === 'error') {
      finished = { status: 'failed', error: `${ev.code}: ${ev.message}` };
    }
  };
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buf += value.replace(/\r\n?/g, '\n');
    let i;
    while ((i = buf.indexOf('\n\n')) >= 0) {
      const block = buf.slice(0, i);
      buf = buf.slice(i + 2);
      await onEvent(block);
    }
  }
  if (buf.trim()) await onEvent(buf);
  if (!finished) return errorResult('the backend stream ended before a result');
  if (finished.status !== 'succeeded') return errorResult(`workflow ${finished.status}: ${finished.error ?? ''}`);
  return textResult(finished.outputs ?? {});
}

function newServer(env) {
  const server = new McpServer(
    { name: 'Peer', version: '0.1.0', title: 'Bench Flow' },
    { capabilities: { logging: {} }, instructions: 'Summarises text', jsonSchemaValidator: validator },
  );
  server.registerTool(
    TOOL,
    { title: 'Bench Flow', description: 'Summarises text', inputSchema, outputSchema, annotations: { openWorldHint: true } },
    (args, extra) => (extra._meta?.progressToken !== undefined ? runStreaming(env, args, extra) : runBlocking(env, args)),
  );
  return server;
}

const json = (status, body) => new Response(JSON.stringify(body), { status, headers: { 'content-type': 'application/json' } });

export default {
  async fetch(request, env) {
    const { pathname } = new URL(request.url);
    if (pathname === '/healthz') return new Response('ok');
    if (pathname !== '/mcp') return json(404, { error: 'not_found' });
    if (request.method !== 'POST') return json(405, { jsonrpc: '2.0', id: null, error: { code: -32000, message: 'Method not allowed.' } });
    let body;
    try {
      body = await request.json();
    } catch {
      return json(400, { jsonrpc: '2.0', id: null, error: { code: -32700, message: 'Parse error' } });
    }
    // JSON answers, except a tools/call that asks for progress: that one streams (SSE).
    const streaming = body?.method === 'tools/call' && body?.params?._meta?.progressToken !== undefined;
    const server = newServer(env);
    const transport = new WebStandardStreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: !streaming });
    await server.connect(transport);
    return transport.handleRequest(request, { parsedBody: body });
  },
};
