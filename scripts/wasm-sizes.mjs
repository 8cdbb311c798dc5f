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

const buf = fs.readFileSync(process.argv[2]);
let p = 8;
const u32 = () => {
  let r = 0, s = 0, b;
  do { b = buf[p++]; r |= (b & 0x7f) << s; s += 7; } while (b & 0x80);
  return r >>> 0;
};
let importedFuncs = 0, dataSize = 0;
const bodies = [], names = new Map();
while (p < buf.length) {
  const id = buf[p++];
  const size = u32();
  const start = p;
  if (id === 2) {
    // Imports: functions among them take the first indices.
    const n = u32();
    for (let i = 0; i < n; i++) {
      let l = u32(); p += l; l = u32(); p += l;
      const kind = buf[p++];
      if (kind === 0) { u32(); importedFuncs++; }
      else if (kind === 1) { p++; const f = buf[p++]; u32(); if (f & 1) u32(); }
      else if (kind === 2) { const f = buf[p++]; u32(); if (f & 1) u32(); }
      else if (kind === 3) { p += 2; }
    }
  } else if (id === 10) {
    const n = u32();
    for (let i = 0; i < n; i++) { const s = u32(); bodies.push(s); p += s; }
  } else if (id === 11) {
    dataSize += size;
  } else if (id === 0) {
    const l = u32();
    const name = buf.slice(p, p + l).toString();
    p += l;
    if (name === 'name') {
      while (p < start + size) {
        const sid = buf[p++]; const ss = u32(); const se = p + ss;
        if (sid === 1) {
          const n = u32();
          for (let i = 0; i < n; i++) { const idx = u32(); const nl = u32(); names.set(idx, buf.slice(p, p + nl).toString()); p += nl; }
        }
        p = se;
      }
    }
  }
  p = start + size;
}
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
