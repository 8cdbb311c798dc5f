#!/usr/bin/env node
// Orders a wasm module's functions so that similar functions sit next to each other, which gzip
// rewards: it finds repeats only within the last 32 KiB, and the linker's order scatters the
// many look-alike functions (drop glue, futures' poll functions, serde code) over the whole
// megabyte of code. About 15 KiB less gzip bundle, no other change: the functions' code is
// untouched; only their order (and so their indices) differs.
//
// wasm-opt does the move (`--reorder-functions-by-name`, which renumbers every call, table
// entry and export); this script chooses the order and gives it to wasm-opt as names:
//
//   node scripts/order-wasm-functions.mjs keys IN.wasm OUT.wasm NAMES.json
//     OUT.wasm is IN.wasm with a name section whose function names sort in the chosen order;
//     NAMES.json maps each such key to the function's own name in IN.wasm, if it had one.
//   node scripts/order-wasm-functions.mjs names FILE.wasm NAMES.json
//     puts the functions' own names back (in place) after wasm-opt has moved them.
//
// The order: a chain that starts at the largest function and goes on each time to the unplaced
// function most like the last one placed. "Like" is the share of equal minimums in the two
// functions' MinHash signatures over the 4-byte strings of their bodies (an estimate of the
// share of 4-byte strings the two bodies have in common). Deterministic: the same module gives
// the same order.
import fs from 'node:fs';

import { encodeFunctionNames, readFunctions, withoutNames } from './wasm-module.mjs';

const SHINGLE = 4;
const HASHES = 256;

const [command, ...args] = process.argv.slice(2);
if (command === 'keys' && args.length === 3) keys(...args);
else if (command === 'names' && args.length === 2) names(...args);
else {
  console.error('usage: order-wasm-functions.mjs keys IN.wasm OUT.wasm NAMES.json | names FILE.wasm NAMES.json');
  process.exit(2);
}

/** Writes `sections` (the old name section left out) and a name section of `fnNames` only. */
function write(file, sections, fnNames) {
  fs.writeFileSync(file, Buffer.concat([withoutNames(sections), encodeFunctionNames(fnNames)]));
}

function keys(inFile, outFile, mapFile) {
  const { sections, imported, bodies, names: fnNames } = readFunctions(fs.readFileSync(inFile), inFile);
  const order = similarityChain(bodies);
  const keyOf = (rank) => `f${String(rank).padStart(7, '0')}`;
  const names = new Map();
  const own = {};
  // Imported functions are not moved; they keep (or get) names that sort before every key.
  for (let i = 0; i < imported; i++) {
    const key = `!${String(i).padStart(7, '0')}`;
    names.set(i, key);
    if (fnNames.has(i)) own[key] = fnNames.get(i);
  }
  order.forEach((f, rank) => {
    names.set(imported + f, keyOf(rank));
    if (fnNames.has(imported + f)) own[keyOf(rank)] = fnNames.get(imported + f);
  });
  write(outFile, sections, names);
  fs.writeFileSync(mapFile, JSON.stringify(own));
}

function names(file, mapFile) {
  const own = JSON.parse(fs.readFileSync(mapFile, 'utf8'));
  const { sections, names: fnNames } = readFunctions(fs.readFileSync(file), file);
  const restored = new Map();
  for (const [index, key] of fnNames) if (Object.hasOwn(own, key)) restored.set(index, own[key]);
  write(file, sections, restored);
}

/** The order of the defined functions (indices into `bodies`): see the header. */
function similarityChain(bodies) {
  const n = bodies.length;
  const seeds = Array.from({ length: HASHES }, (_, i) => Math.imul(i + 1, 0x9e3779b1) >>> 0);
  const signatures = new Uint32Array(n * HASHES);
  const mins = new Uint32Array(HASHES);
  for (let f = 0; f < n; f++) {
    const body = bodies[f];
    mins.fill(0xffffffff);
    for (let i = 0; i + SHINGLE <= body.length; i++) {
      let x = 2166136261;
      for (let j = 0; j < SHINGLE; j++) x = Math.imul(x ^ body[i + j], 16777619);
      for (let s = 0; s < HASHES; s++) {
        const v = (Math.imul(x ^ seeds[s], 0x85ebca6b) ^ (x >>> 13)) >>> 0;
        if (v < mins[s]) mins[s] = v;
      }
    }
    signatures.set(mins, f * HASHES);
  }
  const placed = new Uint8Array(n);
  const order = [];
  let current = 0;
  for (let f = 1; f < n; f++) if (bodies[f].length > bodies[current].length) current = f;
  while (current >= 0) {
    placed[current] = 1;
    order.push(current);
    let best = -1;
    let bestScore = -1;
    const at = current * HASHES;
    for (let f = 0; f < n; f++) {
      if (placed[f]) continue;
      let score = 0;
      for (let s = 0, o = f * HASHES; s < HASHES; s++) if (signatures[o + s] === signatures[at + s]) score++;
      if (score > bestScore || (score === bestScore && bodies[f].length > bodies[best].length)) {
        bestScore = score;
        best = f;
      }
    }
    current = best;
  }
  return order;
}
