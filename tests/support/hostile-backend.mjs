// A backend on 127.0.0.1 whose every route a test scripts: redirects, huge or endless answers,
// headers that never come, a minimal MCP server. Every request is recorded.
//
//   const b = await startHostileBackend();
//   b.route('/tool', async (req, res, body) => { res.writeHead(307, { location: '...' }); res.end(); });
//   b.requests  // [{ method, path, headers, body }]
//   await b.stop();
import { listenLoopback, readBody } from './loopback-server.mjs';

export async function startHostileBackend() {
  const routes = new Map();
  const requests = [];
  const open = new Set();
  const { server, port } = await listenLoopback(async (req, res) => {
    open.add(res);
    res.on('close', () => open.delete(res));
    const url = new URL(req.url, 'http://127.0.0.1');
    const { body } = await readBody(req);
    requests.push({ method: req.method, path: url.pathname, headers: req.headers, body });
    const handler = routes.get(url.pathname);
    if (!handler) {
      res.writeHead(404, { 'content-type': 'application/json' });
      res.end(JSON.stringify({ error: `no route ${url.pathname}` }));
      return;
    }
    await handler(req, res, body);
  }, (err) => ({ error: String(err) }));
  return {
    port,
    baseUrl: `http://127.0.0.1:${port}`,
    requests,
    route(path, handler) {
      routes.set(path, handler);
      return `http://127.0.0.1:${port}${path}`;
    },
    requestsTo(path) {
      return requests.filter((r) => r.path === path);
    },
    async stop() {
      for (const res of open) res.destroy();
      await new Promise((r) => server.close(r));
    },
  };
}

/**
 * Writes `total` bytes of a JSON object `{"text": "xxx…"}` in 64 KiB chunks, honouring
 * backpressure; resolves with the bytes written, stopping early when the client goes away.
 */
export async function writeHugeJson(res, total) {
  res.writeHead(200, { 'content-type': 'application/json' });
  const chunk = 'x'.repeat(64 * 1024);
  let written = 0;
  res.write('{"text": "');
  while (written < total && !res.destroyed) {
    const ok = res.write(chunk);
    written += chunk.length;
    if (!ok) await drained(res);
  }
  if (!res.destroyed) res.end('"}');
  return written;
}

/** Resolves when `res` can take more data, or has closed. */
export function drained(res) {
  return new Promise((resolve) => {
    const done = () => {
      res.off('drain', done);
      res.off('close', done);
      resolve();
    };
    res.on('drain', done);
    res.on('close', done);
  });
}
