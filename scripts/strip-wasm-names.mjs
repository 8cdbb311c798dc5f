#!/usr/bin/env node
// Removes the "name" custom section (function, local and data names) from a wasm module, in
// place; every other section is kept byte for byte. worker-build runs wasm-opt with
// --debuginfo, which keeps that section: about a seventh of the gzip bundle, used only to print
// function names in wasm stack traces.
//
//   node scripts/strip-wasm-names.mjs build/index_bg.wasm
import fs from 'node:fs';

import { sections, withoutNames } from './wasm-module.mjs';

const file = process.argv[2];
if (!file) {
  console.error('usage: strip-wasm-names.mjs FILE.wasm');
  process.exit(2);
}
const b = fs.readFileSync(file);
let all;
try {
  all = sections(b, file);
} catch (e) {
  console.error(e.message);
  process.exit(1);
}
const removed = all.filter((s) => s.custom === 'name').reduce((n, s) => n + s.bytes.length, 0);
if (removed > 0) fs.writeFileSync(file, withoutNames(all));
console.log(`${file}: ${removed > 0 ? `removed the name section (${removed} bytes)` : 'no name section'}`);
