// An upstream that asks its client things on the session's standalone stream (the one a client
// opens with GET and its Mcp-Session-Id), related to no request of the client's, as FastMCP
// sends `roots/list`: a client that never opens that stream never sees the request, and the
// tool waits until its own timeout. Written with the official TypeScript SDK (McpServer over a
// stateful StreamableHTTPServerTransport, one per session); every HTTP request is recorded.
//
//   import { startStandaloneUpstream } from '../support/standalone-upstream.mjs';
//   const up = await startStandaloneUpstream();
//   up.url          // http://127.0.0.1:<port>/mcp
//   up.requests     // [{method, headers, body, at}] as received
//   up.openStreams()  // standalone streams open now (of one session: up.openStreams(sid))
//   await up.close();
//
// Tools:
//   roots {timeoutMs?}   sends `roots/list` on the standalone stream (the SDK's server.listRoots(),
//                        with no related request id) and answers with the roots as JSON text, or
//                        with isError and the error's message (Flowgate's refusal, or the timeout:
//                        default 20 s, FastMCP's).
//   log {level, data}    sends `notifications/message` on the standalone stream, then answers "logged"
//                        200 ms later (so the message has arrived first).
import http from 'node:http';
import { randomUUID } from 'node:crypto';

import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { z } from 'zod';

const text = (t, isError) => ({ content: [{ type: 'text', text: t }], ...(isError ? { isError: true } : {}) });

function buildServer() {
  const mcp = new McpServer({ name: 'standalone-upstream', version: '1.0.0' }, { capabilities: { logging: {} } });
  mcp.registerTool(
    'roots',
    { description: "Asks the client for its roots on the session's standalone stream", inputSchema: { timeoutMs: z.number().optional() } },
    async ({ timeoutMs }) => {
      try {
        // No relatedRequestId: the SDK sends it on the standalone GET stream.
        const r = await mcp.server.listRoots(undefined, { timeout: timeoutMs ?? 20_000 });
        return text(JSON.stringify(r.roots));
      } catch (e) {
        return text(`roots/list failed: ${e.message}`, true);
      }
    },
  );
  mcp.registerTool(
    'log',
    { description: "Logs on the session's standalone stream", inputSchema: { level: z.string(), data: z.string() } },
    async ({ level, data }) => {
      await mcp.server.notification({ method: 'notifications/message', params: { level, logger: 'standalone', data } });
      await new Promise((r) => setTimeout(r, 200));
      return text('logged');
    },
  );
  return mcp;
}

/** Starts the upstream on a free loopback port. */
export async function startStandaloneUpstream() {
  const sessions = new Map();
  const requests = [];
  let open = 0;
  const openBySession = new Map();
  const server = http.createServer(async (req, res) => {
    const chunks = [];
    for await (const c of req) chunks.push(c);
    const raw = Buffer.concat(chunks).toString('utf8');
    let body;
    try {
      body = raw ? JSON.parse(raw) : undefined;
    } catch {
      res.writeHead(400).end();
      return;
    }
    requests.push({ method: req.method, headers: req.headers, body, at: Date.now() });
    const sid = req.headers['mcp-session-id'];
    if (req.method === 'GET' && sid && sessions.has(sid)) {
      open += 1;
      openBySession.set(sid, (openBySession.get(sid) ?? 0) + 1);
      res.on('close', () => {
        open -= 1;
        openBySession.set(sid, openBySession.get(sid) - 1);
      });
    }
    if (sid) {
      const s = sessions.get(sid);
      if (!s) return res.writeHead(404, { 'content-type': 'application/json' }).end(JSON.stringify({ jsonrpc: '2.0', id: null, error: { code: -32001, message: 'Session not found' } }));
      return s.handleRequest(req, res, body);
    }
    const mcp = buildServer();
    const transport = new StreamableHTTPServerTransport({
      sessionIdGenerator: () => randomUUID(),
      onsessioninitialized: (id) => sessions.set(id, transport),
    });
    await mcp.connect(transport);
    await transport.handleRequest(req, res, body);
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${server.address().port}/mcp`,
    requests,
    openStreams: (sid) => (sid === undefined ? open : (openBySession.get(sid) ?? 0)),
    close: () =>
      new Promise((resolve) => {
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
