// `make dev`'s wrangler config: wrangler.toml with worker/dev.mjs as its entry and without the
// [assets] table. Run as a script it prints it (`make dev` writes wrangler.dev.toml, next to
// wrangler.toml so that its relative paths, .dev.vars and .wrangler/state are the same ones).
//
// Why no [assets] locally: with assets configured, `wrangler dev` puts three local Workers in
// front of the user Worker for every request (an RPC proxy and the asset router's outer and inner
// entrypoints), even for the paths `run_worker_first` sends straight to it. That made a
// `/healthz` cost 1.4-1.5x what a plain Worker's does, where the deployed Worker costs 1.03-1.07x
// (docs/benchmarks.md). On Cloudflare the platform routes assets before any Worker CPU is billed,
// so this cost exists only locally. worker/dev.mjs serves the console's files itself instead,
// from worker/console-files.mjs (scripts/build-console.mjs), as the platform serves dist/;
// tests/integration/demo.test.mjs checks the two answer alike.
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

/**
 * A wrangler config's text with each line passed through `edit(line, table)` (`table`: the name
 * of the [table] or [[array]] the line is in, '' before the first): its result replaces the line,
 * null drops it. For the line-level edits of wrangler.toml here and in bench/lib/workers.mjs.
 */
export function editConfig(toml, edit) {
  const out = [];
  let table = '';
  for (const line of toml.split('\n')) {
    const header = /^\s*\[\[?([^\]]+)\]\]?\s*$/.exec(line);
    if (header) table = header[1].trim();
    const edited = edit(line, table);
    if (edited !== null) out.push(edited);
  }
  return out.join('\n');
}

/** wrangler.toml's text → `make dev`'s: main = worker/dev.mjs, no [assets] table. */
export function devConfig(toml) {
  let mainSet = false;
  const text = editConfig(toml, (line, table) => {
    if (table === 'assets') return null;
    if (table !== '' || !/^\s*main\s*=/.test(line)) return line;
    mainSet = true;
    return 'main = "worker/dev.mjs"';
  });
  if (!mainSet) throw new Error('wrangler.toml has no top-level `main` to replace with worker/dev.mjs');
  return `# Written by scripts/dev-config.mjs from wrangler.toml for \`make dev\`: edit wrangler.toml, not this.\n${text}`;
}

if (process.argv[1] && path.resolve(process.argv[1]) === fileURLToPath(import.meta.url)) {
  const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
  process.stdout.write(devConfig(fs.readFileSync(path.join(root, 'wrangler.toml'), 'utf8')));
}
