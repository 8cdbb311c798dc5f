// A stateful legacy HTTP+SSE upstream, written with the TypeScript SDK's SSEServerTransport (the
// 2024-11-05 transport: GET /sse opens a session's event stream, its `endpoint` event names
// where messages are POSTed). Each session has its own McpServer and state:
//
// - `toggle`: "Started", then "Stopped", then "Started" … (the reference everything server's
//   toggle-style tool: a new session per request would say "Started" every time);
// - `roots_later`: answers at once, then 300 ms later (no call running) asks the client for
//   `roots/list` and records what came back and how long it took;
// - `roots_outcome`: that record, for this session.
import http from 'node:http';

import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { SSEServerTransport } from '@modelcontextprotocol/sdk/server/sse.js';

function session(outcomes) {
  const mcp = new McpServer({ name: 'legacy-session-upstream', version: '1.0.0' }, { capabilities: { logging: {} } });
  let on = false;
  let sessionId;
  mcp.registerTool('toggle', { description: 'Starts or stops this session\'s machine.' }, async () => {
    on = !on;
    return { content: [{ type: 'text', text: on ? 'Started' : 'Stopped' }] };
  });
  mcp.registerTool('roots_later', { description: 'Asks for the roots a moment after answering.' }, async () => {
    setTimeout(async () => {
      const started = Date.now();
      try {
        const roots = await mcp.server.listRoots(undefined, { timeout: 30_000 });
        outcomes.set(sessionId, { answered: roots, ms: Date.now() - started });
      } catch (err) {
        outcomes.set(sessionId, { error: String(err?.message ?? err), ms: Date.now() - started });
      }
    }, 300);
    return { content: [{ type: 'text', text: 'asked later' }] };
  });
  mcp.registerTool('roots_outcome', { description: 'What the later roots/list got.' }, async () => ({
    content: [{ type: 'text', text: JSON.stringify(outcomes.get(sessionId) ?? null) }],
  }));
  return { mcp, setId: (id) => (sessionId = id) };
}

/** Starts the upstream on 127.0.0.1: {url, requests, opened, open(), close()}. */
export async function startLegacySessionUpstream() {
  const sessions = new Map(); // session id -> { transport, mcp }
  const outcomes = new Map();
  const requests = [];
  let opened = 0;
  const server = http.createServer(async (req, res) => {
    const url = new URL(req.url, 'http://x');
    requests.push({ method: req.method, path: req.url, at: Date.now() });
    try {
      if (url.pathname === '/sse' && req.method === 'GET') {
        const { mcp, setId } = session(outcomes);
        const transport = new SSEServerTransport('/messages', res);
        setId(transport.sessionId);
        sessions.set(transport.sessionId, { transport, mcp });
        opened += 1;
        transport.onclose = () => sessions.delete(transport.sessionId);
        await mcp.connect(transport);
        return;
      }
      if (url.pathname === '/messages' && req.method === 'POST') {
        const s = sessions.get(url.searchParams.get('sessionId') ?? '');
        if (!s) {
          res.writeHead(404, { 'content-type': 'text/plain' }).end('unknown session');
          return;
        }
        await s.transport.handlePostMessage(req, res);
        return;
      }
      res.writeHead(404, { 'content-type': 'text/plain' }).end('not found');
    } catch (err) {
      if (!res.headersSent) res.writeHead(500, { 'content-type': 'text/plain' }).end(String(err));
      else res.destroy();
    }
  });
  server.keepAliveTimeout = 65_000;
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  const { port } = server.address();
  return {
    url: `http://127.0.0.1:${port}/sse`,
    requests,
    /** How many sessions (event streams) were opened so far. */
    opened: () => opened,
    /** The sessions whose streams are open now. */
    open: () => sessions.size,
    async close() {
      await Promise.allSettled([...sessions.values()].map(({ mcp }) => mcp.close()));
      server.closeAllConnections();
      await new Promise((resolve) => server.close(() => resolve()));
    },
  };
}
