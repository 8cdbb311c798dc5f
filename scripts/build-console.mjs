// Builds the web console (console/) into dist/, which wrangler serves as Workers Static Assets
// (wrangler.toml [assets]): dist/console/index.html, one minified ES module bundle and one
// stylesheet (esbuild, from node_modules), and dist/_headers with the console's security headers.
// Nothing of it goes into the wasm. `make build` runs it when console/ changed.
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

console.error(`build-console: ${path.relative(root, out)} written`);
