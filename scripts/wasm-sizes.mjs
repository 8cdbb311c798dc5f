// Where a wasm's code goes: reads a build that kept its name section
// (`scripts/build-wasm.sh target/named --keep-names`) and prints its code and data bytes, the
// code bytes per crate (or path prefix), and the largest functions.
//
//   node scripts/wasm-sizes.mjs target/named/index_bg.wasm [GROUPS] [FUNCTIONS]
//
// GROUPS (default 50) rows of code bytes per group, FUNCTIONS (default none) largest functions.
// Sizes are of function bodies before compression; compare gzip sizes of the stripped build
// (`gzip -9c build/index_bg.wasm | wc -c`) before and after a change.
import fs from 'node:fs';

import { readFunctions } from './wasm-module.mjs';

const file = process.argv[2];
const buf = fs.readFileSync(file);
const module = readFunctions(buf, file);
// Functions among the imports take the first indices.
const { imported: importedFuncs, names } = module;
const dataSize = module.sections.filter((s) => s.id === 11).reduce((n, s) => n + (s.end - s.body), 0);
const bodies = module.bodies.map((b) => b.length);
// Crate hashes (`flowgate[b62be8e1a4d65524]`) dropped, so that names read and group.
const plain = (n) => n.replace(/\[[0-9a-f]{16}\]/g, '');
const rows = bodies.map((s, i) => [s, plain(names.get(i + importedFuncs) ?? `f${i}`)]);
const total = rows.reduce((a, r) => a + r[0], 0);
console.log('code', total, 'data', dataSize, 'functions', rows.length);
const group = (n) => {
  if (n.includes('drop_in_place')) return 'drop glue';
  const own = n.match(/flowgate::([a-z_0-9]+(?:::[a-z_0-9]+){0,2})/);
  if (own) return `flowgate::${own[1]}`;
  const m = n.match(/^<?([a-z_0-9]+)/);
  return m ? m[1] : n.slice(0, 30);
};
const by = new Map();
for (const [s, n] of rows) by.set(group(n), (by.get(group(n)) || 0) + s);
const groups = +(process.argv[3] || 50), functions = +(process.argv[4] || 0);
console.log([...by].sort((a, b) => b[1] - a[1]).slice(0, groups).map(([g, s]) => `${String(s).padStart(8)} ${g}`).join('\n'));
if (functions) {
  console.log(rows.sort((a, b) => b[0] - a[0]).slice(0, functions).map(([s, n]) => `${String(s).padStart(8)} ${n.slice(0, 160)}`).join('\n'));
}
