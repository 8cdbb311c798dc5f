// An HTTP server on 127.0.0.1 for fixtures: an async handler whose failures become a 500 with
// `errorBody(err)` (or a dropped connection once the answer has started).
import http from 'node:http';

export async function listenLoopback(handle, errorBody, port = 0) {
  const server = http.createServer((req, res) => {
    handle(req, res).catch((err) => {
      if (!res.headersSent && !res.destroyed) {
        res.writeHead(500, { 'Content-Type': 'application/json' });
        res.end(JSON.stringify(errorBody(err)));
      } else {
        res.destroy();
      }
    });
  });
  // A keep-alive as long as real servers keep (nginx: 75 s). A short one races the Worker's
  // pooled connections: a request sent as the server closes the idle connection fails with
  // "Network connection lost", a failure that only the tests made common. The task poller's
  // answer to it is tested on purpose (the HTTP tool fixture's {drop: true} status entry).
  server.keepAliveTimeout = 65_000;
  await new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, '127.0.0.1', () => {
      server.off('error', reject);
      resolve();
    });
  });
  return { server, port: server.address().port };
}

/** A request body: parsed JSON, or the raw text with `badJson` when it is not JSON. */
export async function readBody(req) {
  const chunks = [];
  for await (const c of req) chunks.push(c);
  const raw = Buffer.concat(chunks).toString('utf8');
  if (!raw.length) return { raw, body: undefined, badJson: false };
  try {
    return { raw, body: JSON.parse(raw), badJson: false };
  } catch {
    return { raw, body: raw, badJson: true };
  }
}
