// Every fenced block of README.md and docs/*.md, held to what it claims, so that none can rot.
//
// A block's info string says what it is (docs/testing.md, "The docs' snippets"):
//   ```sh test / ```python test venv=.venv-sdk2 / ```js test   run against a Flowgate under
//       `wrangler dev` with the demo set up as `make dev` sets it up; `expect="..."` is text the
//       block's output must hold. A page's runnable blocks run in order in one bash, so a
//       variable a block sets is there for the next (python and js blocks get the environment).
//   ```sh check / ```json check / ```js check   cannot run in a test (wrangler deploy, a client's
//       config, an OAuth client without an issuer): checked for shape (bash syntax, make targets,
//       wrangler commands and their flags, repo paths; JSON that parses, MCP URLs whose path is
//       /mcp/server/<code>/mcp; JavaScript that parses, and names its modules export).
//   ```text   not a command (a diagram, a map, a sample); `output=demo-setup` is compared with
//       what scripts/demo-setup.mjs prints.
// A block marked otherwise, or not at all, fails the test that lists the blocks.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { execFile, spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { promisify } from 'node:util';

import { repoRoot, startFlowgate, wranglerCommand } from '../support/harness.mjs';

const run = promisify(execFile);

// What the docs' runnable snippets assume of a local Flowgate (.dev.vars.example, `make dev`).
const ADMIN_TOKEN = 'dev-admin-token-for-local-use-only';
const DOC_PORT = 8787;

// Pages that other work adds to docs/ and the index links before they land; a link to one of
// these is not yet a broken link. Remove a name once its page is in docs/.
const COMING = new Set([]);

/** The documentation files: README.md and every page of docs/. */
export function docFiles() {
  const pages = fs.readdirSync(path.join(repoRoot, 'docs')).filter((f) => f.endsWith('.md')).sort();
  return ['README.md', ...pages.map((f) => `docs/${f}`)];
}

/** An info string's words: the language, flags, and key=value (value quoted or not). */
export function parseInfo(info) {
  const words = [...info.matchAll(/(\w[\w.-]*)(?:=(?:"([^"]*)"|'([^']*)'|(\S+)))?/g)];
  const [lang, ...rest] = words.map((m) => ({ key: m[1], value: m[2] ?? m[3] ?? m[4] }));
  const attrs = {};
  for (const { key, value } of rest) attrs[key] = value ?? true;
  return { lang: lang?.key ?? '', attrs };
}

/** The fenced blocks of a Markdown text: {line, info, lang, attrs, code}. */
export function fences(text) {
  const out = [];
  const lines = text.split('\n');
  for (let i = 0; i < lines.length; i++) {
    const open = /^(\s*)(```+)(.*)$/.exec(lines[i]);
    if (!open) continue;
    const [, indent, ticks, info] = open;
    const body = [];
    let j = i + 1;
    for (; j < lines.length && !(lines[j].startsWith(`${indent}${ticks}`) && lines[j].trim() === ticks); j++) {
      body.push(lines[j].slice(indent.length));
    }
    out.push({ line: i + 1, info: info.trim(), ...parseInfo(info.trim()), code: body.join('\n') });
    i = j;
  }
  return out;
}

/** What a block is: 'run', 'check', 'text', or null for a block not marked as one of them. */
export function kindOf(block) {
  const { lang, attrs } = block;
  if (attrs.test === true && ['sh', 'python', 'js'].includes(lang)) return 'run';
  if (attrs.check === true && ['sh', 'json', 'js'].includes(lang)) return 'check';
  if (lang === 'text' && !attrs.test && !attrs.check) return 'text';
  return null;
}

const blocksOf = (file) => fences(fs.readFileSync(path.join(repoRoot, file), 'utf8')).map((b) => ({ ...b, file }));
const allBlocks = () => docFiles().flatMap(blocksOf);
const where = (b) => `${b.file}:${b.line}`;

// ---------------------------------------------------------------------------
// Without a Flowgate: marks, shapes, links, paths, the module map
// ---------------------------------------------------------------------------

describe('the docs, read', () => {
  test('every fenced block is marked: run (test), checked for shape (check) or text', () => {
    const unmarked = allBlocks().filter((b) => kindOf(b) === null).map((b) => `${where(b)} \`\`\`${b.info}`);
    assert.deepEqual(unmarked, [], 'blocks that are neither `test`, `check` nor `text`');
  });

  test('the docs have runnable blocks, and every kind of them', () => {
    const runnable = allBlocks().filter((b) => kindOf(b) === 'run');
    assert.deepEqual([...new Set(runnable.map((b) => b.lang))].sort(), ['js', 'python', 'sh']);
    const venvs = new Set(runnable.filter((b) => b.lang === 'python').map((b) => b.attrs.venv));
    assert.deepEqual([...venvs].sort(), ['.venv', '.venv-langchain', '.venv-sdk2']);
    for (const b of runnable.filter((x) => x.lang === 'python')) {
      assert.ok(fs.existsSync(path.join(repoRoot, b.attrs.venv, 'bin', 'python')), `${where(b)}: ${b.attrs.venv} is missing: run scripts/setup.sh --test-tools --test-tools`);
    }
  });

  test('JSON blocks parse, and every MCP URL in them has the path /mcp/server/<code>/mcp', () => {
    for (const b of allBlocks().filter((x) => x.lang === 'json')) {
      let value;
      assert.doesNotThrow(() => (value = JSON.parse(b.code)), `${where(b)} is not JSON`);
      for (const url of JSON.stringify(value).match(/https?:\/\/[^"\s]+/g) ?? []) {
        if (!url.includes('/mcp/server/')) continue;
        assert.match(new URL(url).pathname, /^\/mcp\/server\/[^/]+\/mcp$/, `${where(b)}: ${url}`);
      }
    }
  });

  test('client configs have the shape their client reads', () => {
    const configs = allBlocks().filter((b) => b.lang === 'json').map((b) => ({ b, v: JSON.parse(b.code) }));
    let seen = 0;
    for (const { b, v } of configs) {
      for (const [name, entry] of Object.entries(v.servers ?? {})) {
        seen++;
        assert.equal(entry.type, 'http', `${where(b)} VS Code server ${name}: type "http"`);
        assert.match(entry.url, /\/mcp\/server\/[^/]+\/mcp$/, where(b));
      }
      for (const [name, entry] of Object.entries(v.mcpServers ?? {})) {
        seen++;
        if (entry.command) {
          assert.equal(entry.command, 'npx', where(b));
          assert.equal(entry.args[0], 'mcp-remote', `${where(b)} ${name}: local clients reach a remote server through mcp-remote`);
          assert.match(entry.args[1], /\/mcp\/server\/[^/]+\/mcp$/, where(b));
        } else {
          assert.match(entry.url, /\/mcp\/server\/[^/]+\/mcp$/, `${where(b)} ${name}: a url`);
        }
      }
    }
    assert.ok(seen >= 4, `only ${seen} client configs found`);
  });

  test('shell blocks are valid bash, and name make targets and repo paths that exist', async () => {
    const makefile = fs.readFileSync(path.join(repoRoot, 'Makefile'), 'utf8');
    const targets = new Set([...makefile.matchAll(/^([a-z][\w-]*)\s*:/gm)].map((m) => m[1]));
    for (const b of allBlocks().filter((x) => x.lang === 'sh')) {
      await run('bash', ['-n', '-c', b.code]).catch((e) => assert.fail(`${where(b)}: ${e.stderr}`));
      for (const m of b.code.matchAll(/(?:^|[;&|(]\s*)make\s+([a-z][\w-]*)/gm)) {
        assert.ok(targets.has(m[1]), `${where(b)}: make ${m[1]} is not a target of the Makefile`);
      }
      for (const m of b.code.matchAll(/(?:^|\s)((?:src|tests|scripts|bench|migrations|worker|console)\/[\w./-]+)/g)) {
        assert.ok(fs.existsSync(path.join(repoRoot, m[1])), `${where(b)}: ${m[1]} does not exist`);
      }
    }
  });

  test('wrangler commands in the docs exist, with the flags they are given', { timeout: 180_000 }, async () => {
    const [node, entry] = wranglerCommand();
    const helps = new Map();
    let checked = 0;
    for (const b of allBlocks().filter((x) => x.lang === 'sh')) {
      for (const line of b.code.split('\n').map((l) => l.replace(/\s#.*$/, ''))) {
        const m = /\bwrangler((?:\s+[a-z][a-z0-9-]*)+)([^#|;&]*)/.exec(line);
        if (!m) continue;
        const words = m[1].trim().split(/\s+/);
        const key = words.join(' ');
        if (!helps.has(key)) {
          const { stdout } = await run(node, [entry, ...words, '--help'], { cwd: repoRoot, env: { ...process.env, WRANGLER_SEND_METRICS: 'false', CI: 'true' } }).catch((e) => ({ stdout: `${e.stdout}\n${e.stderr}` }));
          helps.set(key, stdout);
        }
        const help = helps.get(key);
        // The usage line names the command; a word of the docs stands where it has a word or a <positional>.
        const usage = (help.split('\n').find((l) => l.startsWith('wrangler ')) ?? '').split(/\s+/).slice(1);
        words.forEach((w, i) => {
          const u = usage[i] ?? '';
          assert.ok(u === w || /^[<[]/.test(u), `${where(b)}: \`wrangler ${key}\` is not a wrangler command (usage: wrangler ${usage.join(' ')})`);
        });
        for (const flag of (m[2].match(/(?:^|\s)(--[a-z][a-z-]*)/g) ?? []).map((f) => f.trim())) {
          assert.ok(help.includes(flag), `${where(b)}: wrangler ${key} has no ${flag}`);
        }
        checked++;
      }
    }
    assert.ok(checked >= 6, `only ${checked} wrangler commands checked`);
  });

  test('JavaScript blocks that cannot run parse, and import names their modules export', async () => {
    const blocks = allBlocks().filter((b) => b.lang === 'js' && kindOf(b) === 'check');
    assert.ok(blocks.length > 0);
    const [node] = wranglerCommand();
    const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'flowgate-docs-js-'));
    try {
      for (const b of blocks) {
        const file = path.join(dir, `block-${b.line}.mjs`);
        fs.writeFileSync(file, b.code);
        await run(node, ['--check', file]).catch((e) => assert.fail(`${where(b)}: ${e.stderr}`));
        for (const m of b.code.matchAll(/^import\s*\{([^}]*)\}\s*from\s*'([^']+)'/gm)) {
          const names = m[1].split(',').map((n) => n.trim().split(/\s+as\s+/)[0]).filter(Boolean);
          const probe = `const m = await import(${JSON.stringify(m[2])}); const missing = ${JSON.stringify(names)}.filter((n) => !(n in m)); if (missing.length) { console.error(missing.join(', ')); process.exit(1); }`;
          await run(node, ['--input-type=module', '-e', probe], { cwd: repoRoot }).catch((e) => assert.fail(`${where(b)}: ${m[2]} does not export ${e.stderr}`));
        }
      }
    } finally {
      fs.rmSync(dir, { recursive: true, force: true });
    }
  });

  test('relative links point at files that exist, and anchors at headings they have', () => {
    const broken = [];
    for (const file of docFiles()) {
      const text = fs.readFileSync(path.join(repoRoot, file), 'utf8');
      const withoutCode = text.replace(/```[\s\S]*?```/g, '').replace(/`[^`\n]*`/g, '');
      for (const m of withoutCode.matchAll(/\]\(([^)\s]+)\)/g)) {
        const target = m[1];
        if (/^[a-z]+:/i.test(target)) continue;
        const [p, anchor] = target.split('#');
        const resolved = p ? path.posix.normalize(path.posix.join(path.posix.dirname(file), p)) : file;
        if (!fs.existsSync(path.join(repoRoot, resolved))) {
          if (!COMING.has(resolved)) broken.push(`${file}: ${target}`);
          continue;
        }
        if (anchor && resolved.endsWith('.md') && !anchorsOf(resolved).has(anchor)) broken.push(`${file}: ${target} (no such heading)`);
      }
    }
    assert.deepEqual(broken, []);
  });

  test('file paths the docs name exist', () => {
    // Outputs that runs make (git-ignored), and name patterns, are not in a checkout.
    const generated = /^(bench\/results\/latest\.json|tests\/screenshots\/|migrations\/NNNN_|build\/|dist\/|target\/)/;
    const missing = [];
    for (const file of docFiles()) {
      const text = fs.readFileSync(path.join(repoRoot, file), 'utf8');
      for (const m of text.matchAll(/`((?:src|tests|scripts|bench|benches|worker|console|migrations|shell|pure|runtime|sim)\/[\w./*-]+)`/g)) {
        const p = m[1].replace(/\.$/, '');
        if (generated.test(p) || p.includes('*')) continue;
        if (!fs.existsSync(path.join(repoRoot, p)) && !fs.existsSync(path.join(repoRoot, 'src', p))) missing.push(`${file}: ${p}`);
      }
    }
    assert.deepEqual(missing, []);
  });

  test("the architecture page's module map names every module of src/, and only those", () => {
    const map = blocksOf('docs/architecture.md').find((b) => b.lang === 'text' && b.code.startsWith('src/lib.rs'));
    assert.ok(map, 'docs/architecture.md has the module map (a text block starting with src/lib.rs)');
    const sections = {};
    let current = null;
    for (const line of map.code.split('\n')) {
      const top = /^(src\/\w+\/|src\/lib\.rs|\S+)/.exec(line);
      if (top) current = top[1];
      (sections[current] ??= []).push(line);
    }
    const problems = [];
    for (const dir of ['src/pure/', 'src/runtime/', 'src/shell/', 'src/sim/']) {
      const text = (sections[dir] ?? []).join('\n');
      const files = walk(path.join(repoRoot, dir)).map((f) => path.relative(path.join(repoRoot, dir), f));
      for (const f of files) {
        if (/(^|\/)tests?(\.rs|\/)|_tests\.rs$/.test(f) && !f.startsWith('tests.rs')) continue; // test modules
        const base = path.basename(f);
        const parent = path.dirname(f);
        if (base === 'mod.rs' && parent !== '.') {
          if (!text.includes(`${path.basename(parent)}/`)) problems.push(`${dir}${parent}/ is not in the map`);
          continue;
        }
        if (!new RegExp(`(^|[\\s,/(])${base.replace('.', '\\.')}\\b`, 'm').test(text)) problems.push(`${dir}${f} is not in the map`);
        if (parent !== '.' && !text.includes(`${path.basename(parent)}/`)) problems.push(`${dir}${parent}/ is not in the map`);
      }
      const names = new Set(files.map((f) => path.basename(f)));
      for (const m of text.matchAll(/(?:^|[\s,/(])(\w+\.rs)\b/g)) {
        if (!names.has(m[1])) problems.push(`the map names ${dir}…/${m[1]}, which does not exist`);
      }
    }
    assert.deepEqual([...new Set(problems)], []);
  });
});

function walk(dir) {
  return fs.readdirSync(dir, { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? walk(path.join(dir, e.name)) : e.name.endsWith('.rs') ? [path.join(dir, e.name)] : []));
}

/** GitHub's anchors of a Markdown file's headings. */
function anchorsOf(file) {
  const text = fs.readFileSync(path.join(repoRoot, file), 'utf8').replace(/```[\s\S]*?```/g, '');
  const seen = new Map();
  const out = new Set();
  for (const m of text.matchAll(/^#{1,6}\s+(.*)$/gm)) {
    const slug = m[1].trim().toLowerCase().replace(/[^\p{L}\p{N}\s_-]/gu, '').replace(/\s/g, '-');
    const n = seen.get(slug) ?? 0;
    seen.set(slug, n + 1);
    out.add(n ? `${slug}-${n}` : slug);
  }
  return out;
}

// ---------------------------------------------------------------------------
// Against a Flowgate: the runnable blocks, page by page
// ---------------------------------------------------------------------------

describe('the docs, run against a local Flowgate with the demo', () => {
  let fg;
  let sandbox;
  let demoOutput;

  before(async () => {
    fg = await startFlowgate({ vars: { ADMIN_TOKEN, DEMO: 'true', SECRET_REF_PREFIX: 'BACKEND_' }, devEntry: true });
    // The snippets run where a checkout would be, without touching this one: the repo's entries
    // linked in, and a .wrangler/ and .dev.vars of the sandbox's own.
    sandbox = fs.mkdtempSync(path.join(os.tmpdir(), 'flowgate-docs-'));
    for (const name of fs.readdirSync(repoRoot)) {
      if (['.wrangler', '.dev.vars', '.git'].includes(name)) continue;
      fs.symlinkSync(path.join(repoRoot, name), path.join(sandbox, name));
    }
    fs.writeFileSync(path.join(sandbox, '.dev.vars'), fs.readFileSync(path.join(repoRoot, '.dev.vars.example')));
    const { stdout } = await run(
      process.execPath,
      ['scripts/demo-setup.mjs', '--url', fg.url, '--vars', path.join(sandbox, '.dev.vars'), '--state', path.join(sandbox, '.wrangler', 'demo-mcp-url'), '--wait-seconds', '60'],
      { cwd: repoRoot, timeout: 120_000 },
    );
    demoOutput = stdout;
  });

  after(async () => {
    await fg?.stop();
    if (sandbox) fs.rmSync(sandbox, { recursive: true, force: true });
  });

  test("the README's demo output is what make dev's demo setup prints", () => {
    const block = blocksOf('README.md').find((b) => b.attrs.output === 'demo-setup');
    assert.ok(block, 'README.md has a ```text output=demo-setup block');
    const printed = demoOutput
      .replaceAll(fg.url, `http://127.0.0.1:${DOC_PORT}`)
      .replace(/\/mcp\/server\/[A-Za-z0-9]+\/mcp/, '/mcp/server/<code>/mcp');
    const lines = (s) => s.split('\n').map((l) => l.trimEnd()).filter(Boolean);
    assert.deepEqual(lines(block.code), lines(printed));
  });

  const runnableFiles = docFiles().filter((f) => blocksOf(f).some((b) => kindOf(b) === 'run'));
  for (const file of runnableFiles) {
    test(`the snippets of ${file} run`, { timeout: 300_000 }, async () => {
      const blocks = blocksOf(file).filter((b) => kindOf(b) === 'run');
      const { code, output } = await runPage(blocks, { cwd: sandbox, port: fg.port, url: fg.url });
      const segments = output.split(/^@@fg-block (\d+)@@$/m);
      const outOf = new Map();
      for (let i = 1; i < segments.length; i += 2) outOf.set(Number(segments[i]), segments[i + 1]);
      const last = Math.max(-1, ...outOf.keys());
      if (code !== 0) {
        const b = blocks[last];
        assert.fail(`${b ? where(b) : file}: a command of this block exited ${code}; its output:\n${(outOf.get(last) ?? output).slice(-3000)}`);
      }
      assert.equal(last, blocks.length - 1, `not every block ran:\n${output.slice(-2000)}`);
      blocks.forEach((b, i) => {
        if (typeof b.attrs.expect === 'string') {
          assert.ok(outOf.get(i).includes(b.attrs.expect), `${where(b)}: its output lacks ${JSON.stringify(b.attrs.expect)}:\n${outOf.get(i).slice(-3000)}`);
        }
      });
    });
  }
});

/** One bash for a page's runnable blocks, in order; resolves {code, output}. */
function runPage(blocks, { cwd, port, url }) {
  const node = wranglerCommand()[0];
  const parts = ['exec 2>&1', 'set -eo pipefail'];
  blocks.forEach((b, i) => {
    parts.push(`echo; echo '@@fg-block ${i}@@'`);
    if (b.lang === 'sh') parts.push(b.code);
    else if (b.lang === 'python') parts.push(`"$FG_REPO/${b.attrs.venv ?? '.venv'}/bin/python" - <<'__FG_SNIPPET__'\n${b.code}\n__FG_SNIPPET__`);
    else parts.push(`"$FG_NODE" --input-type=module - <<'__FG_SNIPPET__'\n${b.code}\n__FG_SNIPPET__`);
  });
  const env = {
    ...process.env,
    PORT: String(port),
    FLOWGATE_URL: url,
    FG_REPO: repoRoot,
    FG_NODE: node,
    PATH: `${path.dirname(node)}:${process.env.PATH}`,
    WRANGLER_SEND_METRICS: 'false',
  };
  return new Promise((resolve) => {
    const child = spawn('bash', ['-c', parts.join('\n')], { cwd, env, stdio: ['ignore', 'pipe', 'pipe'] });
    let output = '';
    child.stdout.on('data', (d) => (output += d));
    child.stderr.on('data', (d) => (output += d));
    const timer = setTimeout(() => child.kill('SIGKILL'), 240_000);
    child.on('close', (code) => {
      clearTimeout(timer);
      resolve({ code, output });
    });
  });
}
