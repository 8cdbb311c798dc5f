#!/usr/bin/env node
// Fails when modules of the crate import each other in a cycle. A module is a file under src/
// (`a/b.rs` and `a/b/mod.rs` are `a::b`); an edge is any `crate::…`, `super::…` or `self::…`
// path in it that names another module (in `use` lines and in code), tests excluded.
//
//   node scripts/check-cycles.mjs [--list]     (--list prints every edge)
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', 'src');

function modulesOf(dir, prefix = []) {
  const out = new Map();
  for (const entry of fs.readdirSync(dir, { withFileTypes: true })) {
    const full = path.join(dir, entry.name);
    if (entry.isDirectory()) {
      for (const [k, v] of modulesOf(full, [...prefix, entry.name])) out.set(k, v);
    } else if (entry.name.endsWith('.rs')) {
      const stem = entry.name.slice(0, -3);
      if (stem === 'tests' || full.includes(`${path.sep}tests${path.sep}`)) continue;
      const name = stem === 'mod' || stem === 'lib' ? prefix : [...prefix, stem];
      out.set(name.join('::'), { file: full, path: name, isMod: stem === 'mod' || stem === 'lib' });
    }
  }
  return out;
}

/** The source without `#[cfg(test)] mod … { … }` blocks and comments. */
function productionSource(text) {
  text = text.replace(/\/\/[^\n]*/g, '');
  const marker = /#\[cfg\(test\)\]\s*mod\s+\w+\s*(;|\{)/g;
  let out = '';
  let last = 0;
  for (let m; (m = marker.exec(text)); ) {
    out += text.slice(last, m.index);
    if (m[1] === ';') {
      last = marker.lastIndex;
      continue;
    }
    let depth = 1;
    let i = marker.lastIndex;
    while (i < text.length && depth > 0) {
      if (text[i] === '{') depth++;
      else if (text[i] === '}') depth--;
      i++;
    }
    last = i;
    marker.lastIndex = i;
  }
  return out + text.slice(last);
}

const modules = modulesOf(root);
const names = new Set(modules.keys());

/** The longest known module that a path (as segments from the crate root) starts with. */
function moduleOf(segments) {
  for (let n = segments.length; n > 0; n--) {
    const k = segments.slice(0, n).join('::');
    if (names.has(k)) return k;
  }
  return null;
}

const edges = new Map();
for (const [name, mod] of modules) {
  const src = productionSource(fs.readFileSync(mod.file, 'utf8'));
  const base = mod.isMod ? mod.path : mod.path; // `self` of a file module is the module itself
  const parent = mod.path.slice(0, -1);
  const targets = new Set();
  // Expand `use a::{b, c::{d}}` groups into plain paths first.
  const paths = [];
  for (const m of src.matchAll(/\b(crate|super|self)((?:::[A-Za-z_][A-Za-z0-9_]*)*)(::\{[^;]*?\})?/g)) {
    const head = m[1] === 'crate' ? [] : m[1] === 'super' ? parent : base;
    let rest = m[2].split('::').filter(Boolean);
    // `super::super::x`
    let h = head;
    while (rest[0] === 'super') {
      h = h.slice(0, -1);
      rest = rest.slice(1);
    }
    if (m[3]) {
      for (const item of m[3].slice(3, -1).split(',')) {
        const seg = item.trim().split(/::|\s/)[0];
        if (seg && seg !== 'self' && seg !== '{') paths.push([...h, ...rest, seg]);
      }
    }
    paths.push([...h, ...rest]);
  }
  for (const p of paths) {
    const target = moduleOf(p);
    if (target !== null && target !== name && !name.startsWith(`${target}::`) && target !== '') targets.add(target);
  }
  edges.set(name, targets);
}

if (process.argv.includes('--list')) {
  for (const [from, to] of edges) for (const t of to) console.log(`${from} -> ${t}`);
}

// Tarjan's strongly connected components: any component of more than one module is a cycle.
let index = 0;
const stack = [];
const info = new Map();
const cycles = [];
function strong(v) {
  info.set(v, { index, low: index, on: true });
  index++;
  stack.push(v);
  for (const w of edges.get(v) ?? []) {
    if (!info.has(w)) {
      strong(w);
      info.get(v).low = Math.min(info.get(v).low, info.get(w).low);
    } else if (info.get(w).on) {
      info.get(v).low = Math.min(info.get(v).low, info.get(w).index);
    }
  }
  if (info.get(v).low === info.get(v).index) {
    const comp = [];
    for (let w; w !== v; ) {
      w = stack.pop();
      info.get(w).on = false;
      comp.push(w);
    }
    if (comp.length > 1) cycles.push(comp.sort());
  }
}
for (const v of edges.keys()) if (!info.has(v)) strong(v);

if (cycles.length) {
  console.error(`import cycles between modules (${cycles.length}):`);
  for (const c of cycles) {
    console.error(`  ${c.join(', ')}`);
    for (const from of c) {
      const inCycle = [...edges.get(from)].filter((t) => c.includes(t));
      console.error(`    ${from} -> ${inCycle.join(', ')}`);
    }
  }
  process.exit(1);
}
console.log(`no import cycles among ${modules.size} modules`);
