// The entry module for local development (`make dev` runs `wrangler dev -c wrangler.dev.toml`,
// whose main this is): the Worker of worker/entry.mjs with the web console's files, and, only when
// DEMO=true, the built-in demo backend under /demo/ (worker/demo.mjs), in front of it. Everything
// else, and /demo/ itself without DEMO, goes to the Worker unchanged. `wrangler deploy` uses
// worker/entry.mjs, so neither the demo nor this copy of the console is ever deployed.
//
// The console's files: `make dev` runs without wrangler.toml's [assets] table, whose local asset
// router costs every request about 0.4x a plain Worker's CPU (scripts/dev-config.mjs), so they are
// served here as the platform serves dist/ under the defaults wrangler.toml keeps
// (html_handling "auto-trailing-slash", the console's _headers, `run_worker_first` paths to the
// Worker); tests/integration/demo.test.mjs compares the two answers path by path.
import worker, { CallBridge, ClientSession, LegacySession, TaskRunner, TokenBroker } from './entry.mjs';
import { demo } from './demo.mjs';
import { FILES, HEADERS } from './console-files.mjs';

export { CallBridge, ClientSession, LegacySession, TaskRunner, TokenBroker };

const INDEX = '/console/';
// What the platform redirects to the console's page (auto-trailing-slash for console/index.html).
const TO_INDEX = new Set(['/console', '/console/index', '/console/index.html']);

/** The console's file for `request`, as the platform answers it, or null for the Worker. */
function consoleFile(request) {
  const url = new URL(request.url);
  const path = url.pathname;
  if (!path.startsWith('/console') || (path.startsWith('/console/api') && !FILES[path])) return null;
  const redirect = TO_INDEX.has(path);
  const file = path === INDEX ? FILES['/console/index.html'] : FILES[path];
  if (!redirect && !file) return null;
  const headers = new Headers(HEADERS);
  if (request.method !== 'GET' && request.method !== 'HEAD') return new Response(null, { status: 405, headers });
  if (redirect) {
    headers.set('Location', INDEX + url.search);
    return new Response(null, { status: 307, headers });
  }
  headers.set('Content-Type', file.type);
  headers.set('Cache-Control', 'public, max-age=0, must-revalidate');
  headers.set('ETag', file.etag);
  if (request.headers.get('If-None-Match') === file.etag) return new Response(null, { status: 304, headers });
  return new Response(request.method === 'HEAD' ? null : file.body, { headers });
}

export default {
  fetch(request, env, ctx) {
    // Where the path starts, found without parsing the URL: most requests are the Worker's.
    const href = request.url;
    const path = href.indexOf('/', href.indexOf('//') + 2);
    if (href.startsWith('/console', path)) {
      const file = consoleFile(request);
      if (file) return file;
    } else if (env.DEMO === 'true' && href.startsWith('/demo/', path)) {
      const answer = demo(request);
      if (answer) return answer;
    }
    return worker.fetch(request, env, ctx);
  },
};
