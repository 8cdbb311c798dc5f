// Reading and writing the parts of a wasm module's binary format that the build's scripts touch
// (scripts/order-wasm-functions.mjs, shorten-wasm-imports.mjs, strip-wasm-names.mjs,
// wasm-sizes.mjs): the sections, the import entries, the function bodies and the "name"
// section's function names. Nothing here decodes code.

/** The module header: the magic number and version 1. */
export const HEADER = Buffer.from([0, 0x61, 0x73, 0x6d, 1, 0, 0, 0]);

/** A cursor over `buf` (`what` names it in errors). */
export class Reader {
  constructor(buf, what, pos = 0) {
    this.buf = buf;
    this.what = what;
    this.pos = pos;
  }

  byte() {
    const byte = this.buf[this.pos++];
    if (byte === undefined) throw new Error(`${this.what}: truncated`);
    return byte;
  }

  /** An unsigned LEB128 (sizes, counts, indices). */
  u32() {
    let value = 0;
    let scale = 1;
    for (;;) {
      const byte = this.byte();
      value += (byte & 0x7f) * scale;
      scale *= 128;
      if (byte < 0x80) return value;
    }
  }

  bytes(n) {
    if (this.pos + n > this.buf.length) throw new Error(`${this.what}: truncated`);
    const out = this.buf.subarray(this.pos, this.pos + n);
    this.pos += n;
    return out;
  }

  /** A length-prefixed UTF-8 name. */
  name() {
    return this.bytes(this.u32()).toString('utf8');
  }

  limits() {
    const flags = this.byte();
    this.u32();
    if (flags & 1) this.u32();
  }
}

/** An unsigned LEB128. */
export function encodeU32(v) {
  const out = [];
  do {
    let byte = v & 0x7f;
    v = Math.floor(v / 128);
    if (v) byte |= 0x80;
    out.push(byte);
  } while (v);
  return Buffer.from(out);
}

/** A length-prefixed UTF-8 name. */
export function encodeName(s) {
  const t = Buffer.from(s, 'utf8');
  return Buffer.concat([encodeU32(t.length), t]);
}

/** A section of `id` with `payload`, as bytes. */
export function encodeSection(id, payload) {
  return Buffer.concat([Buffer.from([id]), encodeU32(payload.length), payload]);
}

/**
 * The module's sections in order, each {id, start, body, end, bytes, custom}: `start` where the
 * section begins, `body` where its payload does, `end` after it, `bytes` the whole section, and
 * for a custom section (id 0) its name.
 */
export function sections(buf, what) {
  if (buf.length < 8 || buf.readUInt32BE(0) !== 0x0061736d) throw new Error(`${what}: not a wasm module`);
  const r = new Reader(buf, what, 8);
  const out = [];
  while (r.pos < buf.length) {
    const start = r.pos;
    const id = r.byte();
    const size = r.u32();
    const body = r.pos;
    const end = body + size;
    if (end > buf.length) throw new Error(`${what}: section past the end`);
    const custom = id === 0 ? new Reader(buf, what, body).name() : null;
    out.push({ id, start, body, end, bytes: buf.subarray(start, end), custom });
    r.pos = end;
  }
  return out;
}

/**
 * The entries of an import section: {module, field, kind, desc} each, `desc` the bytes of its
 * description (kind included). Function imports (kind 0) take the first function indices.
 */
export function imports(buf, section, what) {
  const r = new Reader(buf, what, section.body);
  const out = [];
  for (let n = r.u32(); n > 0; n--) {
    const module = r.name();
    const field = r.name();
    const descStart = r.pos;
    const kind = r.byte();
    if (kind === 0) r.u32();
    else if (kind === 1) {
      r.byte();
      r.limits();
    } else if (kind === 2) r.limits();
    else if (kind === 3) r.bytes(2);
    else if (kind === 4) {
      r.byte();
      r.u32();
    } else throw new Error(`${what}: unknown import kind ${kind}`);
    out.push({ module, field, kind, desc: buf.subarray(descStart, r.pos) });
  }
  if (r.pos !== section.end) throw new Error(`${what}: import section misread`);
  return out;
}

/** The bodies of a code section (id 10), each as its bytes. */
export function functionBodies(buf, section, what) {
  const r = new Reader(buf, what, section.body);
  const out = [];
  for (let n = r.u32(); n > 0; n--) out.push(r.bytes(r.u32()));
  return out;
}

/** The function names (index → name) of a "name" custom section. */
export function functionNames(buf, section, what) {
  const r = new Reader(buf, what, section.body);
  r.name(); // "name"
  const names = new Map();
  while (r.pos < section.end) {
    const sub = r.byte();
    const subEnd = r.u32() + r.pos;
    if (sub === 1) {
      for (let n = r.u32(); n > 0; n--) {
        const index = r.u32();
        names.set(index, r.name());
      }
    }
    r.pos = subEnd;
  }
  return names;
}

/** A "name" custom section holding function names only (index → name). */
export function encodeFunctionNames(names) {
  const entries = [...names].sort((x, y) => x[0] - y[0]).map(([i, n]) => Buffer.concat([encodeU32(i), encodeName(n)]));
  const sub = Buffer.concat([encodeU32(entries.length), ...entries]);
  return encodeSection(0, Buffer.concat([encodeName('name'), Buffer.from([1]), encodeU32(sub.length), sub]));
}

/**
 * A module's sections and its functions: how many are imported (they take the first indices),
 * the defined ones' bodies, and the "name" section's function names (index → name).
 */
export function readFunctions(buf, what) {
  const all = sections(buf, what);
  const importSection = all.find((s) => s.id === 2);
  const codeSection = all.find((s) => s.id === 10);
  const nameSection = all.find((s) => s.custom === 'name');
  return {
    sections: all,
    imported: importSection ? imports(buf, importSection, what).filter((e) => e.kind === 0).length : 0,
    bodies: codeSection ? functionBodies(buf, codeSection, what) : [],
    names: nameSection ? functionNames(buf, nameSection, what) : new Map(),
  };
}

/** A module of `sections` (as `sections()` gives them) without its "name" section, as bytes. */
export function withoutNames(sectionList) {
  return Buffer.concat([HEADER, ...sectionList.filter((s) => s.custom !== 'name').map((s) => s.bytes)]);
}
