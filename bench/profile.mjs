// `make profile`: where Flowgate's Worker spends its CPU per request. Runs Flowgate (a build
// with the wasm name section kept, so functions have names) under `wrangler dev --local`,
// publishes the bench's workflow app, attaches V8's sampling profiler through the Worker's
// inspector, drives one kind of request with wrk, and prints the self time per function (JS
// glue, wasm functions, the runtime's builtins) as a share of the samples taken while the
// Worker was busy. A tool for finding the next cut, not a benchmark: sampling perturbs timing.
//
//   PROFILE_BUILD=/path/to/dir-with-index.js (default build/; a named build makes wasm frames
//   readable: `scripts/build-wasm.sh /tmp/named --keep-names` keeps the names)
//   PROFILE_KIND=tools/list | tools/call | tools/call-stream | healthz (default tools/list;
//   tools/call-stream: the bench's streamed call, a 100-node workflow relayed with progress)
//   PROFILE_TARGET=floor | peer | hello-rs: profile that reference Worker instead (the same
//   requests, the same fake Dify; hello-rs answers healthz only), to compare a kind's samples
//   per request and where they go with Flowgate's in the same conditions
//   PROFILE_SECONDS (default 8), PROFILE_TOP (default 40), PROFILE_CONCURRENCY (default 16)
//   PROFILE_MODE=cpu: no profiler; the workerd CPU per request (bench/lib/workercpu.mjs) of
//   /healthz, tools/list and a blocking tools/call (PROFILE_REQUESTS per kind, default 2000).
//   To tell whether a change saves CPU, `make compare` (bench/compare.mjs) loads both builds at
//   once: alternating runs of this mode move by ±20 % on a shared VM.
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import { SourceMap } from 'node:module';
import os from 'node:os';
import path from 'node:path';

import { startDifyFixture } from '../tests/support/dify-fixture.mjs';
import { MCP_HEADERS, REFERENCES, startBenchFlowgate, startReferences, toolsCall } from './lib/bench-flowgate.mjs';
import { workerCpu } from './lib/workercpu.mjs';
import { ensureWrk } from './lib/wrk.mjs';

const KIND = process.env.PROFILE_KIND ?? 'tools/list';
const SECONDS = Number(process.env.PROFILE_SECONDS ?? 8);
const TOP = Number(process.env.PROFILE_TOP ?? 40);
const CONCURRENCY = Number(process.env.PROFILE_CONCURRENCY ?? 16);
const TARGET = process.env.PROFILE_TARGET ?? 'flowgate';
if (TARGET !== 'flowgate' && !REFERENCES.includes(TARGET)) throw new Error(`PROFILE_TARGET: flowgate or one of ${REFERENCES.join(', ')}`);
/** The sampling interval asked of V8 (µs). */
const SAMPLE_US = 50;

const log = (m) => process.stderr.write(`profile: ${m}\n`);

/** One Chrome DevTools Protocol session over the inspector's WebSocket. */
async function inspector(port) {
  const targets = await (await fetch(`http://127.0.0.1:${port}/json`)).json();
  if (process.env.PROFILE_DEBUG) log(JSON.stringify(targets));
  const target = targets.find((t) => t.webSocketDebuggerUrl) ?? targets[0];
  // wrangler's inspector proxy accepts only the DevTools origins.
  const ws = new WebSocket(target.webSocketDebuggerUrl, { headers: { Origin: 'https://devtools.devprod.cloudflare.dev' } });
  await new Promise((ok, fail) => {
    ws.onopen = ok;
    ws.onerror = (e) => fail(new Error(`cannot open the inspector WebSocket ${target.webSocketDebuggerUrl}: ${e.message ?? e}`));
  });
  let next = 1;
  const waiting = new Map();
  ws.onmessage = (ev) => {
    const msg = JSON.parse(ev.data);
    const w = msg.id && waiting.get(msg.id);
    if (!w) return;
    waiting.delete(msg.id);
    if (msg.error) w.fail(new Error(`${msg.error.message}`));
    else w.ok(msg.result);
  };
  return {
    send: (method, params = {}) =>
      new Promise((ok, fail) => {
        const id = next++;
        waiting.set(id, { ok, fail });
        ws.send(JSON.stringify({ id, method, params }));
      }),
    close: () => ws.close(),
  };
}

function wrk(url, luaBody, seconds) {
  const script = path.join(os.tmpdir(), `profile-${process.pid}.lua`);
  fs.writeFileSync(script, luaBody);
  return new Promise((resolve) => {
    const p = spawn('wrk', ['-t1', `-c${CONCURRENCY}`, `-d${seconds}s`, '-s', script, url], { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    p.stdout.on('data', (d) => (out += d));
    p.on('exit', () => resolve(out));
  });
}

const lua = (body, headers) =>
  `wrk.method = "POST"\nwrk.body = ${JSON.stringify(JSON.stringify(body))}\n` +
  Object.entries(headers).map(([k, v]) => `wrk.headers[${JSON.stringify(k)}] = ${JSON.stringify(v)}`).join('\n') + '\n';

async function main() {
  if (process.env.PROFILE_MODE !== 'cpu') ensureWrk(); // the CPU mode sends its requests itself
  const dify = await startDifyFixture();
  let bench;
  let reference;
  try {
    // The streamed kind runs the bench's 100-node workflow; the others one node.
    bench = await startBenchFlowgate({
      dify,
      build: process.env.PROFILE_BUILD,
      rateLimit: process.env.PROFILE_NO_RATELIMIT !== '1',
      nodeCount: KIND === 'tools/call-stream' ? 100 : 1,
    });
    const { fg, mcpUrl, requests } = bench;
    // PROFILE_TARGET: one of the reference Workers instead, behind the same fake Dify and app.
    let target = fg;
    let targetRequests = requests;
    if (TARGET !== 'flowgate') {
      if (KIND === 'tools/call-stream' || (TARGET === 'hello-rs' && KIND !== 'healthz')) throw new Error(`PROFILE_TARGET=${TARGET} does not answer ${KIND}`);
      [reference] = await startReferences({ dify, apiKey: bench.apiKey, names: [TARGET] });
      target = reference.target;
      targetRequests = reference.requests;
    }
    const script =
      KIND === 'tools/call-stream'
        ? lua(toolsCall({ progressToken: 'p' }), MCP_HEADERS)
        : targetRequests[KIND].method === 'GET'
          ? 'wrk.method = "GET"\n'
          : lua(targetRequests[KIND].body, targetRequests[KIND].headers);
    const url = KIND === 'tools/call-stream' ? mcpUrl : targetRequests[KIND].url;
    if (process.env.PROFILE_MODE === 'cpu') {
      for (const [kind, req] of Object.entries(targetRequests)) {
        const c = await workerCpu(target, req.url, req, { requests: Number(process.env.PROFILE_REQUESTS ?? 2000), connections: CONCURRENCY, warmup: 300, minTicks: 300 });
        console.log(`${kind}: ${c.us.measured.toFixed(0)} µs CPU per request (${c.requests} requests, ${c.bad} bad${c.firstBad ? ': ' + c.firstBad : ''})`);
      }
      return;
    }
    // Warm up (isolate memo, JIT) before sampling.
    await wrk(url, script, 2);

    const inspectorPort = await findInspectorPort(target);
    const cdp = await inspector(inspectorPort);
    await cdp.send('Profiler.enable');
    await cdp.send('Profiler.setSamplingInterval', { interval: SAMPLE_US });
    await cdp.send('Profiler.start');
    const out = await wrk(url, script, SECONDS);
    const { profile } = await cdp.send('Profiler.stop');
    cdp.close();
    const sent = Number((/(\d+) requests in/.exec(out) ?? [])[1] ?? 0);
    log(`wrk: ${(/Requests\/sec:\s+([\d.]+)/.exec(out) ?? [])[1]} req/s, ${sent} requests`);
    report(profile, TARGET === 'flowgate' ? bundleMap(bench.snapDir) : null, sent);
  } finally {
    // PROFILE_LOG=text: print the Worker's last log lines that contain it (for instrumented builds).
    const fg = bench?.fg;
    if (process.env.PROFILE_LOG && fg) console.log(fg.log().split('\n').filter((l) => l.includes(process.env.PROFILE_LOG) || process.env.PROFILE_LOG === '*').slice(-8).join('\n'));
    await reference?.stop();
    await bench?.stop();
    await dify.stop();
  }
}

/** The inspector port wrangler was started with (startWorker passes --inspector-port). */
async function findInspectorPort(fg) {
  const cmdline = (pid) => {
    try {
      return fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0');
    } catch {
      return [];
    }
  };
  for (const name of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    const args = cmdline(name);
    const i = args.indexOf('--inspector-port');
    if (i > 0 && args.includes(String(fg.port))) return Number(args[i + 1]);
  }
  throw new Error('cannot find the inspector port');
}

/**
 * Where the frames of wrangler's bundle (`entry.js`, one minified file) come from: its source
 * map, read before the snapshot is removed. Without it every JS frame of the bundle would count
 * as the runtime's: the wasm-bindgen glue (build/index.js), Flowgate's own JS (worker/) and
 * wrangler dev's middleware, which a deployed Worker does not run, are all in that one file.
 */
function bundleMap(dir) {
  const tmp = path.join(dir, '.wrangler', 'tmp');
  let best = null;
  for (const d of fs.existsSync(tmp) ? fs.readdirSync(tmp) : []) {
    const f = path.join(tmp, d, 'entry.js.map');
    if (fs.existsSync(f) && (!best || fs.statSync(f).mtimeMs > fs.statSync(best).mtimeMs)) best = f;
  }
  if (!best) {
    log('no source map of the bundle found: its frames are counted as the runtime\'s');
    return null;
  }
  const map = new SourceMap(JSON.parse(fs.readFileSync(best, 'utf8')));
  const glue = fs.readFileSync(path.join(dir, 'build', 'index.js'), 'utf8').split('\n');
  return (line, column) => {
    const e = map.findEntry(line, column);
    const src = e?.originalSource ?? '';
    if (src.endsWith('build/index.js')) {
      // The glue is minified too; its import shims are `__wbg_<js name>_<hash>:function(...){...}`,
      // so a shim's frame is named by the last such key before it.
      const text = glue[e.originalLine] ?? '';
      const before = text.slice(Math.max(0, e.originalColumn - 300), e.originalColumn + 12);
      const shim = [...before.matchAll(/__wbg_([A-Za-z0-9_$]+?)_[0-9a-f]{16}:/g)].pop();
      return { kind: 'JS glue (wasm-bindgen, build/index.js)', label: shim ? `glue: ${shim[1]}` : `glue${e.name ? `: ${e.name}` : ''}` };
    }
    if (src.includes('/worker/')) return { kind: "Flowgate's JS (worker/)", label: `${path.basename(src)}:${e.originalLine + 1}` };
    if (src) return { kind: "wrangler dev's middleware (not in a deployed Worker)", label: `${path.basename(src)}:${e.originalLine + 1}` };
    return null;
  };
}

function report(profile, mapFrame, requests) {
  const self = new Map();
  const byId = new Map(profile.nodes.map((n) => [n.id, n]));
  const counts = new Map();
  for (const s of profile.samples) counts.set(s, (counts.get(s) ?? 0) + 1);
  let busy = 0;
  let total = 0;
  const kindOf = new Map(); // key → kind, for the frames the bundle's source map placed
  for (const [id, n] of counts) {
    const node = byId.get(id);
    const f = node.callFrame;
    const name = f.functionName || '(anonymous)';
    const where = f.url ? path.basename(f.url) : '';
    const mapped = where === 'entry.js' && mapFrame ? mapFrame(f.lineNumber, f.columnNumber) : null;
    if (mapped) kindOf.set(`${mapped.label}  [${mapped.kind}]`, mapped.kind);
    const at = where && !where.includes(".wasm") ? `:${f.lineNumber + 1}:${f.columnNumber + 1}` : "";
    const key = mapped ? `${mapped.label}  [${mapped.kind}]` : `${name}${where ? `  [${where}${at}]` : ''}`;
    total += n;
    if (name === '(idle)' || name === '(program)' || name === '(garbage collector)') {
      if (name !== '(idle)') busy += n;
      self.set(key, (self.get(key) ?? 0) + n);
      continue;
    }
    busy += n;
    self.set(key, (self.get(key) ?? 0) + n);
  }
  // Where the busy time goes, by kind of code.
  const kinds = new Map();
  for (const [k, n] of self) {
    if (k.startsWith('(idle)')) continue;
    const kind = kindOf.get(k) ?? (k.includes('.wasm') ? "Flowgate's wasm" : k.includes('[index.js') ? 'JS glue (wasm-bindgen shim)' : k.includes('[cloudflare-internal') ? 'bindings (cloudflare-internal)' : k.startsWith('(program)') ? '(program: runtime outside JS)' : k.startsWith('(garbage') ? '(garbage collector)' : 'runtime built-ins (fetch, Response, Headers, ...)');
    kinds.set(kind, (kinds.get(kind) ?? 0) + n);
  }
  const rows = [...self.entries()].filter(([k]) => !k.startsWith('(idle)')).sort((a, b) => b[1] - a[1]).slice(0, TOP);
  // V8 samples less often than asked under load, so samples per request compare two profiles
  // taken alike (a Worker's against the floor's), not time.
  const perRequest = requests ? `, ${(busy / requests).toFixed(2)} busy samples per request (${requests} requests)` : '';
  console.log(`# ${TARGET} ${KIND}: ${busy} busy samples of ${total} (${((100 * busy) / total).toFixed(1)}% busy)${perRequest}\n`);
  console.log('| kind | % of busy |\n|:---|---:|');
  for (const [k, n] of [...kinds].sort((a, b) => b[1] - a[1])) console.log(`| ${k} | ${((100 * n) / busy).toFixed(1)} |`);
  console.log('');
  console.log('| self % of busy | samples | function |\n|---:|---:|:---|');
  for (const [k, n] of rows) console.log(`| ${((100 * n) / busy).toFixed(1)} | ${n} | ${k.replace(/\|/g, '\\|')} |`);
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});
