#!/usr/bin/env node
// Removes the "name" custom section (function, local and data names) from a wasm module, in
// place; every other section is kept byte for byte. worker-build runs wasm-opt with
// --debuginfo, which keeps that section: about a seventh of the gzip bundle, used only to print
// function names in wasm stack traces.
//
//   node scripts/strip-wasm-names.mjs build/index_bg.wasm
import fs from 'node:fs';

const file = process.argv[2];
if (!file) {
  console.error('usage: strip-wasm-names.mjs FILE.wasm');
  process.exit(2);
}
const b = fs.readFileSync(file);
if (b.readUInt32BE(0) !== 0x0061736d) {
  console.error(`${file}: not a wasm module`);
  process.exit(1);
}

/** An unsigned LEB128 at `i`: [value, index after it]. */
function leb(i) {
  let value = 0;
  let scale = 1;
  for (;;) {
    const byte = b[i++];
    if (byte === undefined) throw new Error(`${file}: truncated`);
    value += (byte & 0x7f) * scale;
    scale *= 128;
    if (byte < 0x80) return [value, i];
  }
}

const kept = [b.subarray(0, 8)];
let removed = 0;
for (let i = 8; i < b.length; ) {
  const start = i;
  const id = b[i];
  const [size, body] = leb(i + 1);
  const end = body + size;
  if (end > b.length) throw new Error(`${file}: section past the end`);
  let name = null;
  if (id === 0) {
    const [len, at] = leb(body);
    name = b.toString('utf8', at, at + len);
  }
  if (name === 'name') removed += end - start;
  else kept.push(b.subarray(start, end));
  i = end;
}
if (removed > 0) fs.writeFileSync(file, Buffer.concat(kept));
console.log(`${file}: ${removed > 0 ? `removed the name section (${removed} bytes)` : 'no name section'}`);
