// Builds the web console (console/) into dist/, which wrangler serves as Workers Static Assets
// (wrangler.toml [assets]): dist/console/index.html, one minified ES module bundle and one
// stylesheet (esbuild, from node_modules), and dist/_headers with the console's security headers.
// Nothing of it goes into the wasm. `make build` runs it when console/ changed.
import crypto from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import * as esbuild from 'esbuild';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const src = path.join(root, 'console');
const dist = path.join(root, 'dist');
const out = path.join(dist, 'console');

// The strictest policy the console works with: its own script and stylesheet, JSON from its own
// origin, nothing inline, no frames, no plugins, forms only to itself.
const CSP = [
  "default-src 'self'",
  "script-src 'self'",
  "style-src 'self'",
  "img-src 'self' data:",
  "connect-src 'self'",
  "font-src 'self'",
  "object-src 'none'",
  "base-uri 'none'",
  "form-action 'self'",
  "frame-ancestors 'none'",
].join('; ');

const SECURITY_HEADERS = [
  `Content-Security-Policy: ${CSP}`,
  'X-Content-Type-Options: nosniff',
  'Referrer-Policy: no-referrer',
  'X-Frame-Options: DENY',
  'Cross-Origin-Opener-Policy: same-origin',
  'Permissions-Policy: camera=(), microphone=(), geolocation=()',
];

// `/console` redirects to `/console/`; both rules so the redirect carries the headers too.
const HEADERS = ['/console', '/console/*']
  .map((p) => [p, ...SECURITY_HEADERS.map((h) => `  ${h}`)].join('\n'))
  .join('\n') + '\n';

fs.rmSync(dist, { recursive: true, force: true });
fs.mkdirSync(out, { recursive: true });

await esbuild.build({
  entryPoints: { main: path.join(src, 'src', 'main.js'), style: path.join(src, 'style.css') },
  outdir: out,
  bundle: true,
  minify: true,
  format: 'esm',
  target: 'es2022',
  legalComments: 'none',
  logLevel: 'warning',
});
fs.copyFileSync(path.join(src, 'index.html'), path.join(out, 'index.html'));
fs.writeFileSync(path.join(dist, '_headers'), HEADERS);

// ---- Hook: the console API's OpenAPI document (written by another change) --------------------
// console/openapi.json, when it exists, is served at /console/api/openapi.json. It is the only
// file allowed under dist/console/api: every other /console/api/* path is the Worker's.
const openapi = path.join(src, 'openapi.json');
if (fs.existsSync(openapi)) {
  fs.mkdirSync(path.join(out, 'api'), { recursive: true });
  fs.copyFileSync(openapi, path.join(out, 'api', 'openapi.json'));
}
// ----------------------------------------------------------------------------------------------

// ---- worker/console-files.mjs: the same files for `make dev`, which runs without [assets] ------
// (scripts/dev-config.mjs says why). worker/dev.mjs serves them as the platform serves dist/.
const TYPES = { '.html': 'text/html; charset=utf-8', '.js': 'text/javascript; charset=utf-8', '.css': 'text/css; charset=utf-8', '.json': 'application/json' };
const files = {};
for (const file of fs.readdirSync(out, { recursive: true })) {
  const full = path.join(out, file);
  if (!fs.statSync(full).isFile()) continue;
  const type = TYPES[path.extname(file)];
  if (!type) throw new Error(`build-console: no content type for ${file}`);
  const body = fs.readFileSync(full, 'utf8');
  const etag = `"${crypto.createHash('sha256').update(body).digest('hex').slice(0, 32)}"`;
  files[`/console/${file.split(path.sep).join('/')}`] = { type, etag, body };
}
const headers = SECURITY_HEADERS.map((h) => [h.slice(0, h.indexOf(':')), h.slice(h.indexOf(':') + 1).trim()]);
fs.writeFileSync(
  path.join(root, 'worker', 'console-files.mjs'),
  '// Written by scripts/build-console.mjs (`make build`): dist/console for `make dev`. Not in git.\n' +
    `export const FILES = ${JSON.stringify(files)};\n` +
    `export const HEADERS = ${JSON.stringify(headers)};\n`,
);
// ----------------------------------------------------------------------------------------------

console.error(`build-console: ${path.relative(root, out)} and worker/console-files.mjs written`);
