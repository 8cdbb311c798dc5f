// `make bench`: Flowgate against a peer Worker written with the official MCP TypeScript SDK
// (bench/peer), both under `wrangler dev --local` (local workerd) on this machine, the same fake
// Dify backend (tests/support/dify-fixture.mjs) behind both, the same load generator (wrk) at the
// same concurrency. Prints one Markdown table of Flowgate / peer ratios, all measured in this run,
// and writes it to bench/results/latest.md (raw numbers: bench/results/latest.json).
//
// Reports, never asserts: a missed target is a "no" in the table, not a failure. It exits
// non-zero only when something could not be measured at all.
//
// Also measured: the CPU time the Worker's workerd process spends per request (a fixed number of
// requests, CPU from /proc/<pid>/stat), and the pure core on the host (`cargo bench --bench
// core`, benches/core.rs), whose table is appended to the same results file.
//
// Knobs (environment): BENCH_DURATION (s per wrk run, 10), BENCH_WARMUP (s, 2),
// BENCH_CONCURRENCY (16), BENCH_COLD_RUNS (3), BENCH_STREAM_MB (50), BENCH_NO_RATELIMIT (1: drop
// Flowgate's rate-limit binding instead of raising its limit), BENCH_CPU_REQUESTS (requests per
// Worker CPU measurement, 2000, split over BENCH_CPU_PASSES passes, 3; more rounds until the
// process took ≥ 200 ticks),
// BENCH_CPU_CONCURRENCY (BENCH_CONCURRENCY), BENCH_CPU_WARMUP (requests, 200), BENCH_CORE (0: skip
// the host benchmark of the pure core), BENCH_CORE_SECONDS (s per core measurement, 0.5).
import { execFileSync, spawn } from 'node:child_process';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { gzipSync } from 'node:zlib';

import { repoRoot, runWrangler } from '../tests/support/harness.mjs';
import { startDifyFixture } from '../tests/support/dify-fixture.mjs';
import { parseSse, publish, registerApp } from '../tests/support/flowgate-setup.mjs';
import { cpuMeter } from './lib/cpu.mjs';
import { ensureWrk, wrkVersion } from './lib/wrk.mjs';
import { combineCpu, workerCpuTogether } from './lib/workercpu.mjs';
import { startBenchFlowgate } from './lib/bench-flowgate.mjs';
import { applyMigrations, checkHelloBuilt, floorConfig, getOk, helloConfig, initializeOk, peerConfig, rssBytes, snapshotFlowgate, startWorker } from './lib/workers.mjs';

const num = (name, dflt) => (process.env[name] ? Number(process.env[name]) : dflt);
const DURATION_S = num('BENCH_DURATION', 10);
const WARMUP_S = num('BENCH_WARMUP', 2);
const CONCURRENCY = num('BENCH_CONCURRENCY', 16);
const COLD_RUNS = num('BENCH_COLD_RUNS', 3);
const STREAM_MB = num('BENCH_STREAM_MB', 50);
const CPU_REQUESTS = num('BENCH_CPU_REQUESTS', 2000);
// Concurrent requests to each Worker while Flowgate and the peer are measured together (the
// two together make BENCH_CONCURRENCY, as in the load runs).
const CPU_CONCURRENCY = num('BENCH_CPU_CONCURRENCY', Math.max(1, Math.round(CONCURRENCY / 2)));
const CPU_WARMUP = num('BENCH_CPU_WARMUP', 200);
// Seconds of blocking calls a Flowgate restarted without the binding gets before its rows.
const BARE_WARMUP_S = num('BENCH_BARE_WARMUP', 5);
// CLK_TCK is 100: a measurement needs a few hundred ticks for a ±1 % reading. Rounds of
// CPU_REQUESTS go on until the measured process took CPU_MIN_TICKS, at most CPU_MAX_ROUNDS.
const CPU_MIN_TICKS = 200;
const CPU_MAX_ROUNDS = 5;
// The Worker CPU rows are measured with Flowgate, the peer and the floor loaded at once (so a drift of the
// machine falls on both alike), in CPU_PASSES passes over every kind, each pass with a
// CPU_PASSES-th of the requests and ticks, and summed: a slow drift then also falls on /healthz
// and the MCP requests alike (the MCP work is a difference of two such numbers).
const CPU_PASSES = num('BENCH_CPU_PASSES', 3);
const CORE = process.env.BENCH_CORE !== '0';
const MEMORY_WARMUP_STREAMS = 3; // long streams per target before the baseline (V8's heap settles after a few)
const MEMORY_STREAMS = 3; // measured long streams per target
// A measurement during which other processes took more than this share of the CPU is retried
// once, after waiting (up to QUIET_WAIT_MS) for a second in which they take less than QUIET_SHARE.
const BUSY_SHARE = 0.15;
const QUIET_SHARE = 0.1;
const QUIET_WAIT_MS = 60_000;
// 1: run Flowgate without its rate-limit binding (by default the binding stays, with a limit it never reaches).
const NO_RATELIMIT = process.env.BENCH_NO_RATELIMIT === '1';
const WRK_THREADS = 1; // one wrk thread drives 16 connections easily and leaves the CPU to the servers
const PROGRESS_EVENTS = 100;
const CHUNK_BYTES = 1024;
const PROTOCOL = '2025-06-18';
const TOOL = 'Bench_Flow';
const ADMIN_TOKEN = 'bench-admin-token-for-local-runs-only';
// Flowgate stores literal backend keys sealed under SECRETS_KEY (64 hex characters); a bench-only value.
const SECRETS_KEY = 'be'.repeat(32);
const INPUT_TEXT = 'The quick brown fox jumps over the lazy dog, and then it writes a short benchmark report about it.';

const benchDir = path.join(repoRoot, 'bench');
const resultsDir = path.join(benchDir, 'results');
const luaScript = path.join(benchDir, 'wrk', 'request.lua');
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const log = (...a) => process.stderr.write(`[bench] ${a.join(' ')}\n`);

// ---------------------------------------------------------------------------------------------
// wrk

let specSeq = 0;
const specDir = fs.mkdtempSync(path.join(os.tmpdir(), 'flowgate-bench-wrk-'));

/** Writes a spec file for request.lua. */
function specFile({ method = 'POST', headers, expect = [], body = '' }) {
  const lines = [`method ${method}`, ...Object.entries(headers).map(([k, v]) => `${k}: ${v}`), ...expect.map((e) => `expect ${e}`)];
  const file = path.join(specDir, `spec-${++specSeq}.txt`);
  fs.writeFileSync(file, `${lines.join('\n')}\n\n${typeof body === 'string' ? body : JSON.stringify(body)}`);
  return file;
}

/** Runs wrk (async: the fixture lives in this process and must keep serving) and parses BENCH_JSON. */
function wrk({ url, spec, seconds, connections }) {
  return new Promise((resolve, reject) => {
    const args = ['-t', String(Math.min(WRK_THREADS, connections)), '-c', String(connections), '-d', `${seconds}s`, '--timeout', '30s', '--latency', '-s', luaScript, url];
    const p = spawn('wrk', args, { env: { ...process.env, BENCH_SPEC: spec }, stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    p.stdout.on('data', (b) => (out += b));
    p.stderr.on('data', (b) => (err += b));
    p.on('error', reject);
    p.on('close', (code) => {
      const line = out.split('\n').find((l) => l.startsWith('BENCH_JSON '));
      if (code !== 0 || !line) return reject(new Error(`wrk ${args.join(' ')} failed (code ${code}):\n${out}\n${err}`));
      const r = JSON.parse(line.slice('BENCH_JSON '.length));
      r.rps = r.requests / (r.duration_us / 1e6);
      r.p50_ms = r.latency_us.p50 / 1000;
      r.p99_ms = r.latency_us.p99 / 1000;
      r.errors_total = Object.values(r.errors).reduce((a, b) => a + b, 0);
      resolve(r);
    });
  });
}

// ---------------------------------------------------------------------------------------------
// helpers

const median = (xs) => {
  const s = [...xs].sort((a, b) => a - b);
  const m = s.length >> 1;
  return s.length % 2 ? s[m] : (s[m - 1] + s[m]) / 2;
};

function gitState() {
  const git = (...a) => {
    try {
      return execFileSync('git', a, { cwd: repoRoot, encoding: 'utf8' }).trim();
    } catch {
      return '';
    }
  };
  const dirty = git('status', '--porcelain', '--', 'src', 'Cargo.toml', 'Cargo.lock', 'wrangler.toml')
    .split('\n')
    .filter(Boolean).length;
  return { commit: git('rev-parse', '--short', 'HEAD'), dirtyFiles: dirty };
}

function machine() {
  const cpu = (/^model name\s*:\s*(.*)$/m.exec(fs.readFileSync('/proc/cpuinfo', 'utf8')) ?? [])[1] ?? os.cpus()[0]?.model ?? 'unknown';
  let free = '';
  try {
    free = execFileSync('free', ['-h'], { encoding: 'utf8' }).trim();
  } catch {
    free = `${(os.totalmem() / 2 ** 30).toFixed(1)} GiB total`;
  }
  const memTotal = (/^Mem:\s+(\S+)/m.exec(free) ?? [])[1] ?? `${(os.totalmem() / 2 ** 30).toFixed(1)}Gi`;
  return { date: new Date().toISOString().replace(/\.\d+Z$/, 'Z'), nproc: os.availableParallelism?.() ?? os.cpus().length, cpu, memTotal, free };
}

/** `wrangler deploy --dry-run --outdir`: wrangler's own "Total Upload: … / gzip: …" and the files it wrote. */
async function bundleSize(config, label) {
  const outdir = fs.mkdtempSync(path.join(os.tmpdir(), `flowgate-bench-bundle-${label}-`));
  try {
    const { stdout, stderr } = await runWrangler(['deploy', '--dry-run', '--outdir', outdir, '-c', config], { timeoutMs: 180_000 });
    const m = /Total Upload:\s*([\d.]+)\s*KiB\s*\/\s*gzip:\s*([\d.]+)\s*KiB/.exec(stdout + stderr);
    let files = 0;
    let bytes = 0;
    let gz = 0;
    const walk = (d) => {
      for (const e of fs.readdirSync(d, { withFileTypes: true })) {
        const p = path.join(d, e.name);
        if (e.isDirectory()) walk(p);
        else if (!e.name.endsWith('.map') && e.name !== 'README.md') {
          const buf = fs.readFileSync(p);
          files += 1;
          bytes += buf.length;
          gz += gzipSync(buf, { level: 9 }).length;
        }
      }
    };
    walk(outdir);
    return {
      totalKiB: m ? Number(m[1]) : bytes / 1024,
      gzipKiB: m ? Number(m[2]) : gz / 1024,
      fromWrangler: Boolean(m),
      files,
      filesKiB: bytes / 1024,
      filesGzipKiB: gz / 1024,
    };
  } finally {
    fs.rmSync(outdir, { recursive: true, force: true });
  }
}

/** POST one JSON-RPC body; reads the whole answer; returns {status, type, text, messages}. */
async function post(url, body, headers) {
  const res = await fetch(url, { method: 'POST', headers, body: JSON.stringify(body), signal: AbortSignal.timeout(60_000) });
  const text = await res.text();
  const type = res.headers.get('content-type') ?? '';
  let messages = [];
  try {
    messages = type.includes('text/event-stream') ? parseSse(text).map((e) => JSON.parse(e.data)) : [JSON.parse(text)];
  } catch {
    messages = [];
  }
  return { status: res.status, type, text, messages };
}

// ---------------------------------------------------------------------------------------------
// the pure core on the host (benches/core.rs)

const cargoBin = () => {
  if (process.env.CARGO) return process.env.CARGO;
  const home = path.join(os.homedir(), '.cargo', 'bin', 'cargo');
  return fs.existsSync(home) ? home : 'cargo';
};

/** `cargo bench --bench core` with `args`; returns its stdout, or throws with its stderr's tail. */
function cargoBench(args) {
  try {
    return execFileSync(cargoBin(), ['bench', '--bench', 'core', ...args], { cwd: repoRoot, encoding: 'utf8', stdio: ['ignore', 'pipe', 'pipe'], maxBuffer: 64 << 20 });
  } catch (e) {
    throw new Error(`cargo bench --bench core ${args.join(' ')} failed: ${String(e.stderr ?? e.message).trim().split('\n').slice(-15).join('\n')}`);
  }
}

/** Runs the core benchmark (built beforehand): {table: [lines], notes: [lines], raw} or {error}. */
function runCore() {
  try {
    const out = cargoBench([]);
    const lines = out.split('\n');
    const json = lines.find((l) => l.startsWith('BENCH_JSON '));
    return {
      table: lines.filter((l) => l.startsWith('|')),
      notes: lines.filter((l) => l.trim() && !l.startsWith('|') && !l.startsWith('BENCH_JSON ')),
      raw: json ? JSON.parse(json.slice('BENCH_JSON '.length)) : null,
    };
  } catch (e) {
    return { error: e.message };
  }
}

// ---------------------------------------------------------------------------------------------
// the requests

const ACCEPT_BOTH = 'application/json, text/event-stream';
const initBody = { jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: PROTOCOL, capabilities: {}, clientInfo: { name: 'flowgate-bench', version: '1.0.0' } } };
const listBody = { jsonrpc: '2.0', id: 1, method: 'tools/list' };
const callBody = { jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: TOOL, arguments: { text: INPUT_TEXT } } };
const streamBody = { jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: TOOL, arguments: { text: INPUT_TEXT }, _meta: { progressToken: 'bench' } } };
const resultMark = `"structuredContent":{"echo":{"text":"${INPUT_TEXT.slice(0, 20)}`;

/**
 * The four MCP requests for a target. Flowgate answers JSON when the client accepts only JSON
 * (then it calls the backend blocking); the SDK's transport refuses a POST that does not accept
 * both types, so the peer gets both and answers JSON by itself (enableJsonResponse) unless the
 * call asks for progress.
 */
function mcpRequests(kind) {
  const v = { 'MCP-Protocol-Version': PROTOCOL };
  return {
    initialize: { headers: { 'Content-Type': 'application/json', Accept: ACCEPT_BOTH }, body: initBody, expect: [`"protocolVersion":"${PROTOCOL}"`] },
    'tools/list': { headers: { 'Content-Type': 'application/json', Accept: ACCEPT_BOTH, ...v }, body: listBody, expect: [`"name":"${TOOL}"`] },
    'tools/call': {
      headers: { 'Content-Type': 'application/json', Accept: kind === 'flowgate' ? 'application/json' : ACCEPT_BOTH, ...v },
      body: callBody,
      expect: [resultMark],
    },
    'tools/call streaming': {
      headers: { 'Content-Type': 'application/json', Accept: ACCEPT_BOTH, ...v },
      body: streamBody,
      expect: [`"progress":${PROGRESS_EVENTS},`, resultMark],
    },
  };
}

/** Checks that both targets answer every request the same way (before any timing). */
async function checkEquivalence(targets) {
  const summary = {};
  for (const [name, t] of Object.entries(targets)) {
    const reqs = mcpRequests(name);
    const s = {};
    for (const [method, r] of Object.entries(reqs)) {
      const a = await post(t.mcpUrl, r.body, r.headers);
      if (a.status !== 200) throw new Error(`${name} ${method}: HTTP ${a.status}: ${a.text.slice(0, 500)}`);
      for (const e of r.expect) if (!a.text.includes(e)) throw new Error(`${name} ${method}: answer lacks ${e}: ${a.text.slice(0, 500)}`);
      const final = a.messages.at(-1);
      const progress = a.messages.filter((m) => m.method === 'notifications/progress');
      const logs = a.messages.filter((m) => m.method === 'notifications/message');
      s[method] = { type: a.type.split(';')[0], bytes: Buffer.byteLength(a.text), progress: progress.length, logs: logs.length, result: final?.result };
      if (method === 'tools/call streaming' && (progress.length !== PROGRESS_EVENTS || progress.at(-1).params.progress !== PROGRESS_EVENTS)) {
        throw new Error(`${name}: ${progress.length} progress notifications, wanted ${PROGRESS_EVENTS}`);
      }
    }
    summary[name] = s;
  }
  const f = summary.flowgate;
  const p = summary.peer;
  for (const m of ['tools/call', 'tools/call streaming']) {
    if (JSON.stringify(f[m].result.structuredContent) !== JSON.stringify(p[m].result.structuredContent) || f[m].result.content[0].text !== p[m].result.content[0].text) {
      throw new Error(`${m}: Flowgate and the peer answer different results:\n${JSON.stringify(f[m].result)}\n${JSON.stringify(p[m].result)}`);
    }
  }
  return summary;
}

// ---------------------------------------------------------------------------------------------
// memory under a long stream

/** One streamed tools/call read to its end by the client: {status, clientBytes, seconds, ok, tail}. */
async function readStream(target) {
  const started = performance.now();
  const res = await fetch(target.mcpUrl, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: ACCEPT_BOTH, 'mcp-protocol-version': PROTOCOL },
    body: JSON.stringify(streamBody),
    signal: AbortSignal.timeout(600_000),
  });
  let clientBytes = 0;
  let tail = '';
  for await (const chunk of res.body) {
    clientBytes += chunk.length;
    tail = (tail + Buffer.from(chunk).toString('utf8')).slice(-4000);
  }
  const ok = res.status === 200 && tail.includes(resultMark);
  return { clientBytes, seconds: (performance.now() - started) / 1000, ok, tail: ok ? undefined : tail.slice(-500) };
}

/**
 * The workerd RSS of a target around long streamed calls: MEMORY_WARMUP_STREAMS warm-up streams
 * (the Worker's one-time growth: code, V8's heap and wasm memory sized for the path; the RSS of
 * both Workers levels off after a few), then the baseline (median of 1 s of idle samples), then
 * MEMORY_STREAMS streams back to back, sampled every 20 ms; the peak is the highest sample over
 * all of them. A Worker that buffered a stream would grow by about its size while reading it;
 * garbage the GC has not collected yet shows up too.
 */
async function streamMemory(target, dify, apiKey) {
  const pids = target.workerdPids();
  if (!pids.length) throw new Error(`${target.name}: no workerd process found in its process group`);
  const fresh = rssBytes(pids);
  for (let i = 0; i < MEMORY_WARMUP_STREAMS; i++) {
    const warm = await readStream(target);
    if (!warm.ok) throw new Error(`${target.name}: the warm-up stream got no result: ${warm.tail}`);
  }
  await sleep(500);
  const base = [];
  for (let i = 0; i < 20; i++) {
    base.push(rssBytes(pids));
    await sleep(50);
  }
  const baseline = median(base);
  let peak = baseline;
  let sampling = true;
  const sampler = (async () => {
    while (sampling) {
      peak = Math.max(peak, rssBytes(pids));
      await sleep(20);
    }
  })();
  const before = dify.requestsFor(apiKey).length;
  const streams = [];
  try {
    for (let i = 0; i < MEMORY_STREAMS; i++) streams.push(await readStream(target));
  } finally {
    sampling = false;
    await sampler;
  }
  peak = Math.max(peak, rssBytes(pids));
  const recs = dify.requestsFor(apiKey).slice(before).filter((r) => r.streaming);
  return {
    fresh,
    baseline,
    peak,
    ratio: peak / baseline,
    streams: streams.length,
    backendBytes: recs.length ? recs.reduce((a, r) => a + r.sentBytes, 0) / recs.length : 0,
    clientBytes: streams[0].clientBytes,
    seconds: streams.reduce((a, r) => a + r.seconds, 0) / streams.length,
    ok: streams.every((r) => r.ok),
    tail: streams.find((r) => !r.ok)?.tail,
  };
}

// ---------------------------------------------------------------------------------------------
// main

async function main() {
  // BENCH_REPORT_FROM=<a latest.json>: only the table, from a run's raw numbers (to read a
  // change to the table without a run).
  if (process.env.BENCH_REPORT_FROM) {
    process.stdout.write(`${report(JSON.parse(fs.readFileSync(process.env.BENCH_REPORT_FROM, 'utf8')))}\n`);
    return;
  }
  ensureWrk();
  checkHelloBuilt();
  const mach = machine();
  const git = gitState();
  log(`${mach.nproc} CPUs (${mach.cpu}), ${mach.memTotal} RAM; Flowgate ${git.commit}${git.dirtyFiles ? ` + ${git.dirtyFiles} uncommitted source files` : ''}`);

  {
    const m = cpuMeter(() => []);
    await sleep(2000);
    const idle = m.stop();
    mach.foreignAtStart = idle.foreign;
    if (idle.foreign > 0.2) log(`warning: other processes are using ${(idle.foreign * 100).toFixed(0)}% of the CPU; the numbers will be noisy`);
  }
  const snap = snapshotFlowgate({ rateLimit: !NO_RATELIMIT });
  const persistDir = fs.mkdtempSync(path.join(os.tmpdir(), 'flowgate-bench-state-'));
  const results = { machine: mach, git, settings: { DURATION_S, WARMUP_S, CONCURRENCY, WRK_THREADS, COLD_RUNS, STREAM_MB, PROGRESS_EVENTS, NO_RATELIMIT, wrk: wrkVersion() } };
  let dify;
  const running = [];
  // 0. The host benchmark of the pure core is built now (compiling would disturb the Worker
  // measurements) and run at the end, when no Worker runs.
  let coreBuilt = null;
  if (CORE) {
    log('building the pure-core benchmark (cargo bench --bench core --no-run)');
    try {
      cargoBench(['--no-run']);
      coreBuilt = true;
    } catch (e) {
      coreBuilt = e.message;
      log(e.message);
    }
  }
  try {
    // 1. Bundles.
    log('bundle sizes (wrangler deploy --dry-run)');
    results.bundle = { flowgate: await bundleSize(snap.config, 'flowgate'), peer: await bundleSize(peerConfig, 'peer') };

    // 2. The backend, Flowgate with the app published, the peer pointed at the same app.
    dify = await startDifyFixture();
    await applyMigrations(snap.config, persistDir);
    const fgVars = { ADMIN_TOKEN, ALLOW_PRIVATE_BACKENDS: 'true', SECRETS_KEY };
    log('starting Flowgate and the peer');
    const fg = await startWorker({ config: snap.config, persistDir, vars: fgVars, probe: getOk('/healthz'), label: 'flowgate' });
    running.push(fg);
    const nodes = Array.from({ length: PROGRESS_EVENTS }, (_, i) => ({ title: `Step ${i + 1}`, type: i === PROGRESS_EVENTS - 1 ? 'llm' : 'code' }));
    const form = [{ 'text-input': { variable: 'text', label: 'Text', required: true, max_length: 1000 } }];
    const { app, apiKey } = await registerApp(fg, dify, { mode: 'workflow', name: 'Bench Flow', form, nodes, outputs: [{ variable: 'echo', type: 'object' }] });
    const { code } = await publish(fg, app.id, { description: 'Summarises text', parameters: { text: 'The text to summarise' } });
    const fgPath = `/mcp/server/${code}/mcp`;
    const peerVars = { BACKEND_BASE_URL: dify.baseUrl, BACKEND_API_KEY: apiKey };
    const peer = await startWorker({ config: peerConfig, vars: peerVars, probe: initializeOk('/mcp'), label: 'peer' });
    running.push(peer);
    const targets = {
      flowgate: Object.assign(fg, { name: 'flowgate', mcpUrl: fg.url + fgPath }),
      peer: Object.assign(peer, { name: 'peer', mcpUrl: `${peer.url}/mcp` }),
    };

    // 3. Same answers from both.
    results.equivalence = await checkEquivalence(targets);
    log('both answer every request alike (results equal, 100 progress notifications each)');

    // 4. Memory while a long stream passes through (before the load runs, on a lightly used Worker:
    // the baseline is then smallest and any growth shows most).
    const repeat = Math.round((STREAM_MB * 1024 * 1024) / CHUNK_BYTES);
    dify.updateApp(apiKey, { repeat, chunkBytes: CHUNK_BYTES });
    results.memory = {};
    for (const name of ['flowgate', 'peer']) {
      const m = await streamMemory(targets[name], dify, apiKey);
      results.memory[name] = m;
      log(`${name} ${m.streams} × ${STREAM_MB} MB streams: RSS ${(m.baseline / 2 ** 20).toFixed(1)} → ${(m.peak / 2 ** 20).toFixed(1)} MiB (${m.ratio.toFixed(2)}x), backend sent ${(m.backendBytes / 2 ** 20).toFixed(1)} MiB per call in ${m.seconds.toFixed(1)} s, client read ${(m.clientBytes / 1024).toFixed(0)} KiB${m.ok ? '' : ' — NO RESULT: ' + m.tail}`);
    }
    dify.updateApp(apiKey, { repeat: 0 });

    // 5. Load: the same wrk at the same concurrency, Flowgate and the peer alternating per request kind.
    const trim = setInterval(() => {
      // The fixture records every request; keep its memory flat over the runs.
      dify.requests.length = 0;
      dify.runs.clear();
    }, 1000);
    const load = {};
    const groups = () => [fg.pgid, peer.pgid];
    // `ours`: the process groups whose CPU is the bench's own (the Workers running now).
    const measure = async (url, spec, connections, ours) => {
      const meter = cpuMeter(ours);
      const r = await wrk({ url, spec, seconds: DURATION_S, connections });
      r.cpu = meter.stop();
      return r;
    };
    const run = async (label, url, req, connections, ours = groups) => {
      const spec = specFile(req);
      await waitQuiet(ours);
      if (WARMUP_S > 0) await wrk({ url, spec, seconds: WARMUP_S, connections });
      let r = await measure(url, spec, connections, ours);
      if (r.cpu.foreign > BUSY_SHARE) {
        log(`${label}: other processes took ${(r.cpu.foreign * 100).toFixed(0)}% of the CPU; measuring again once it is quiet`);
        const quiet = await waitQuiet(ours);
        const again = await measure(url, spec, connections, ours);
        again.retried = { firstForeign: r.cpu.foreign, quiet };
        if (again.cpu.foreign < r.cpu.foreign) r = again;
        else r.retried = again.retried;
      }
      log(
        `${label.padEnd(44)} ${r.rps.toFixed(0).padStart(6)} req/s  p50 ${r.p50_ms.toFixed(2).padStart(6)} ms  p99 ${r.p99_ms.toFixed(2).padStart(6)} ms` +
          `  CPU ${(r.cpu.busy * 100).toFixed(0)}% (other processes ${(r.cpu.foreign * 100).toFixed(0)}%)` +
          `${r.bad || r.errors_total ? `  BAD ${r.bad} ERR ${r.errors_total} ${r.first_bad}` : ''}`,
      );
      return r;
    };
    try {
      const health = { method: 'GET', headers: {}, expect: ['ok'] };
      for (const name of ['flowgate', 'peer']) {
        load[`${name} healthz c${CONCURRENCY}`] = await run(`${name} GET /healthz (c=${CONCURRENCY})`, `${targets[name].url}/healthz`, health, CONCURRENCY);
      }
      for (const method of Object.keys(mcpRequests('flowgate'))) {
        for (const name of ['flowgate', 'peer']) {
          load[`${name} ${method} c${CONCURRENCY}`] = await run(`${name} ${method} (c=${CONCURRENCY})`, targets[name].mcpUrl, mcpRequests(name)[method], CONCURRENCY);
        }
      }
      const direct = {
        headers: { 'Content-Type': 'application/json', Authorization: `Bearer ${apiKey}` },
        body: { inputs: { text: INPUT_TEXT }, response_mode: 'blocking', user: 'bench-direct' },
        expect: ['"status":"succeeded"'],
      };
      const directUrl = `${dify.baseUrl}/workflows/run`;
      load[`direct c${CONCURRENCY}`] = await run(`direct POST /v1/workflows/run (c=${CONCURRENCY})`, directUrl, direct, CONCURRENCY);
      load['direct c1'] = await run('direct POST /v1/workflows/run (c=1)', directUrl, direct, 1);
      for (const name of ['flowgate', 'peer']) {
        load[`${name} healthz c1`] = await run(`${name} GET /healthz (c=1)`, `${targets[name].url}/healthz`, health, 1);
        load[`${name} tools/list c1`] = await run(`${name} tools/list (c=1)`, targets[name].mcpUrl, mcpRequests(name)['tools/list'], 1);
        load[`${name} tools/call c1`] = await run(`${name} tools/call (c=1)`, targets[name].mcpUrl, mcpRequests(name)['tools/call'], 1);
      }
    } finally {
      clearInterval(trim);
    }
    results.load = load;

    // 5b. Worker CPU per request: a fixed number of requests per kind to Flowgate, the peer and
    // the floor (bench/floor: the same requests answered with no MCP at all), all loaded at once
    // (workerCpuTogether); CPU of the workerd process that runs each Worker.
    const trimCpu = setInterval(() => {
      dify.requests.length = 0;
      dify.runs.clear();
    }, 1000);
    const floor = await startWorker({ config: floorConfig, vars: peerVars, probe: getOk('/healthz'), label: 'floor' });
    running.push(floor);
    targets.floor = Object.assign(floor, { name: 'floor', mcpUrl: `${floor.url}/mcp` });
    // For /healthz only: the hello-world workers-rs Worker (what a Rust Worker costs before it
    // does anything) and Flowgate as `make dev` runs it (wrangler.dev.toml: worker/dev.mjs, DEMO=true,
    // the console's files, no local asset router). They get /healthz in every pass, so that the machine is as busy in the
    // passes of each kind.
    const hello = await startWorker({ config: helloConfig, probe: getOk('/healthz'), label: 'hello-rs' });
    running.push(hello);
    targets['hello-rs'] = Object.assign(hello, { name: 'hello-rs' });
    const devBench = await startBenchFlowgate({ dify, rateLimit: !NO_RATELIMIT, entry: 'dev', label: 'flowgate-dev' });
    running.push({ stop: devBench.stop });
    targets['flowgate-dev'] = Object.assign(devBench.fg, { name: 'flowgate-dev' });
    const healthOnly = ['hello-rs', 'flowgate-dev'];
    const cpuNames = ['flowgate', 'peer', 'floor', ...healthOnly];
    const cpuGroups = () => cpuNames.map((n) => targets[n].pgid);
    results.workerCpu = Object.fromEntries(cpuNames.map((n) => [n, {}]));
    try {
      const kinds = { healthz: null, 'tools/list': 'tools/list', 'tools/call': 'tools/call' };
      const parts = Object.fromEntries(cpuNames.map((n) => [n, {}]));
      const job = (name, method) => {
        const t = targets[name];
        const [url, req] = method && !healthOnly.includes(name) ? [t.mcpUrl, mcpRequests(name)[method]] : [`${t.url}/healthz`, { method: 'GET', headers: {}, expect: ['ok'] }];
        return { target: t, url, req };
      };
      for (let pass = 1; pass <= CPU_PASSES; pass++) {
        for (const [kind, method] of Object.entries(kinds)) {
          const measured = await workerCpuTogether(cpuNames.map((name) => job(name, method)), cpuPass(cpuGroups));
          for (const [i, name] of cpuNames.entries()) {
            const c = measured[i];
            (parts[name][kind] ??= []).push(c);
            log(
              `${`${name} Worker CPU ${kind} (c=${c.connections} each, pass ${pass}/${CPU_PASSES})`.padEnd(52)} ${c.us.measured.toFixed(0).padStart(6)} µs/request over ${c.requests} requests (${c.ticks.measured} ticks, ` +
                `${c.identified ? `the Worker's workerd; proxy ${c.us.proxy.toFixed(0)} µs` : 'all workerd processes summed'})` +
                `${c.bad ? `  BAD ${c.bad} ${c.firstBad}` : ''}`,
            );
          }
        }
      }
      for (const name of cpuNames) {
        for (const kind of healthOnly.includes(name) ? ['healthz'] : Object.keys(kinds)) results.workerCpu[name][kind] = combineCpu(parts[name][kind]);
      }
    } finally {
      clearInterval(trimCpu);
    }

    // 5c. What the rate-limit binding costs: the same Flowgate, same state, restarted without
    // the binding, and a blocking tools/call measured again: throughput, added latency at one
    // connection and Worker CPU (healthz as the floor). The peer keeps running and is measured
    // again with it (in turns for throughput and latency, loaded at once for CPU), so that both
    // sides of these rows come from the same minutes; the restarted Flowgate first gets
    // BARE_WARMUP_S of calls (V8 tiers a fresh module's hot wasm functions up as they run:
    // measured at once, it read below the Flowgate with the binding).
    // The peer has no binding, so this is Flowgate's MCP work like for like.
    for (const t of running.splice(0)) {
      if ((t === peer || t === floor) && !NO_RATELIMIT) running.push(t);
      else await t.stop();
    }
    if (!NO_RATELIMIT) {
      const bare = snapshotFlowgate({ rateLimit: false });
      try {
        const fgBare = await startWorker({ config: bare.config, persistDir, vars: fgVars, probe: getOk('/healthz'), label: 'flowgate' });
        running.push(fgBare);
        const pair = {
          'flowgate-bare': Object.assign(fgBare, { name: 'flowgate', mcpUrl: fgBare.url + fgPath }),
          'peer-again': targets.peer,
        };
        const bareGroups = () => [fgBare.pgid, peer.pgid, floor.pgid];
        const health = { method: 'GET', headers: {}, expect: ['ok'] };
        // The floor joins the CPU passes only (its work is the lowest any Worker can read).
        const cpuTargets = { ...pair, 'floor-again': targets.floor };
        const kindReq = (who, kind) => {
          const t = cpuTargets[who];
          return kind === 'healthz' ? [`${t.url}/healthz`, health] : [t.mcpUrl, mcpRequests(t.name)['tools/call']];
        };
        {
          const [url, req] = kindReq('flowgate-bare', 'tools/call');
          await wrk({ url, spec: specFile(req), seconds: BARE_WARMUP_S, connections: CONCURRENCY });
        }
        // Throughput, and the added latency at one connection over each one's own /healthz.
        for (const [kind, connections] of [['tools/call', CONCURRENCY], ['healthz', 1], ['tools/call', 1]]) {
          for (const who of Object.keys(pair)) {
            const [url, req] = kindReq(who, kind);
            const what = who === 'peer-again' ? 'the peer, again' : 'flowgate without the binding';
            results.load[`${who} ${kind} c${connections}`] = await run(`${what}: ${kind} (c=${connections})`, url, req, connections, bareGroups);
          }
        }
        // In passes too, loaded at once with the floor: its CPU work is again a difference (tools/call minus /healthz).
        const bareParts = { 'flowgate-bare': {}, 'peer-again': {}, 'floor-again': {} };
        for (let pass = 1; pass <= CPU_PASSES; pass++) {
          for (const kind of ['healthz', 'tools/call']) {
            const jobs = Object.keys(cpuTargets).map((who) => {
              const [url, req] = kindReq(who, kind);
              return { target: cpuTargets[who], url, req };
            });
            const measured = await workerCpuTogether(jobs, cpuPass(bareGroups));
            for (const [i, who] of Object.keys(cpuTargets).entries()) {
              const c = measured[i];
              (bareParts[who][kind] ??= []).push(c);
              log(`${`${who}: Worker CPU ${kind} (pass ${pass}/${CPU_PASSES})`.padEnd(52)} ${c.us.measured.toFixed(0).padStart(6)} µs/request${c.bad ? `  BAD ${c.bad} ${c.firstBad}` : ''}`);
            }
          }
        }
        const combined = (who) => Object.fromEntries(Object.entries(bareParts[who]).map(([kind, parts]) => [kind, combineCpu(parts)]));
        results.workerCpu.bare = combined('flowgate-bare');
        results.workerCpu.peerAgain = combined('peer-again');
        results.workerCpu.floorAgain = combined('floor-again');
      } finally {
        for (const t of running.splice(0)) await t.stop();
        bare.remove();
      }
    }

    // 6. Cold starts: spawn wrangler dev → first successful MCP initialize, alternating.
    results.cold = { flowgate: [], peer: [] };
    for (let i = 0; i < COLD_RUNS; i++) {
      for (const name of ['flowgate', 'peer']) {
        const opts =
          name === 'flowgate'
            ? { config: snap.config, persistDir, vars: fgVars, probe: initializeOk(fgPath), label: 'flowgate' }
            : { config: peerConfig, vars: peerVars, probe: initializeOk('/mcp'), label: 'peer' };
        await waitQuiet(() => []);
        const w = await startWorker(opts);
        results.cold[name].push(w.startupMs);
        await w.stop();
        log(`cold start ${name} #${i + 1}: ${w.startupMs.toFixed(0)} ms`);
      }
    }
  } finally {
    for (const t of running) await t.stop().catch(() => {});
    await dify?.stop();
    snap.remove();
    fs.rmSync(persistDir, { recursive: true, force: true });
    fs.rmSync(specDir, { recursive: true, force: true });
  }

  if (CORE) {
    if (coreBuilt === true) {
      log('running the pure-core benchmark (cargo bench --bench core)');
      results.core = runCore();
    } else {
      results.core = { error: coreBuilt };
    }
    if (results.core.error) log(results.core.error);
  }

  const md = report(results);
  process.stdout.write(`${md}\n`);
  fs.mkdirSync(resultsDir, { recursive: true });
  fs.writeFileSync(path.join(resultsDir, 'latest.md'), `${md}\n`);
  fs.writeFileSync(path.join(resultsDir, 'latest.json'), `${JSON.stringify(results, null, 2)}\n`);
  log(`written to ${path.relative(repoRoot, path.join(resultsDir, 'latest.md'))} (raw numbers: latest.json)`);
}

// ---------------------------------------------------------------------------------------------
// the table

/** Waits (up to QUIET_WAIT_MS) for a second in which other processes take < QUIET_SHARE of the CPU; true if one came. */
async function waitQuiet(groups) {
  const deadline = Date.now() + QUIET_WAIT_MS;
  for (;;) {
    const m = cpuMeter(groups);
    await sleep(1000);
    if (m.stop().foreign < QUIET_SHARE) return true;
    if (Date.now() >= deadline) return false;
  }
}

/** A note on the CPU other processes took during the load runs (the machine may be shared). */
function cpuNote(load) {
  const runs = Object.entries(load).filter(([, w]) => w.cpu);
  const worst = runs.reduce((a, b) => (b[1].cpu.foreign > a[1].cpu.foreign ? b : a));
  const mean = runs.reduce((a, [, w]) => a + w.cpu.foreign, 0) / runs.length;
  const pct = (v) => `${(v * 100).toFixed(0)}%`;
  const busy = runs.filter(([, w]) => w.cpu.foreign > 0.1).map(([k]) => k);
  const retried = runs.filter(([, w]) => w.retried).length;
  return (
    `Other processes on the machine took ${pct(mean)} of its CPU on average during the load runs (at most ${pct(worst[1].cpu.foreign)}, ${worst[0]})` +
    (busy.length ? `; above 10% in ${busy.length} of ${runs.length} runs (${busy.join(', ')}): those numbers are less reliable` : '') +
    (retried ? `; ${retried} run(s) were measured again after waiting for a quiet machine (the quieter measurement is kept).` : '.')
  );
}

function report(r) {
  const C = r.settings.CONCURRENCY;
  const L = r.load;
  const x = (v) => `${v.toFixed(2)}×`;
  const ms = (v) => `${v.toFixed(2)} ms`;
  const signed = (v) => (v < 0 ? `−${ms(-v)}` : `+${ms(v)}`);
  const rps = (v) => `${v.toFixed(0)} req/s`;
  const flag = (ok) => (ok ? 'yes' : '**no**');
  const bad = (w) => (w.bad || w.errors_total ? ` ⚠ ${w.bad + w.errors_total} bad/errors` : '');
  const rows = [];
  const row = (measure, ratio, fg, peer, target = '', met = '') => rows.push([measure, ratio, fg, peer, target, met]);

  const labels = { healthz: 'GET /healthz (no MCP: the runtime floor)', initialize: 'initialize', 'tools/list': 'tools/list', 'tools/call': 'tools/call (blocking, JSON)', 'tools/call streaming': `tools/call streaming ${r.settings.PROGRESS_EVENTS} progress (SSE)` };
  for (const [m, label] of Object.entries(labels)) {
    const f = L[`flowgate ${m} c${C}`];
    const p = L[`peer ${m} c${C}`];
    const ratio = f.rps / p.rps;
    const targeted = m === 'tools/list' || m === 'tools/call' || m === 'tools/call streaming';
    row(`${label}: throughput (c=${C})`, x(ratio), rps(f.rps) + bad(f), rps(p.rps) + bad(p), targeted ? '≥ 1.0×' : '', targeted ? flag(ratio >= 1) : '');
    if (m === 'healthz') continue;
    row(`${label}: p50 latency (c=${C})`, x(f.p50_ms / p.p50_ms), ms(f.p50_ms), ms(p.p50_ms));
    row(`${label}: p99 latency (c=${C})`, x(f.p99_ms / p.p99_ms), ms(f.p99_ms), ms(p.p99_ms));
  }
  const bareCall = L[`flowgate-bare tools/call c${C}`];
  if (bareCall) {
    const p = L[`peer-again tools/call c${C}`];
    row(`tools/call (blocking, JSON) without the rate-limit binding: throughput (c=${C}; Flowgate restarted without it after the load runs, the peer measured again in turns with it)`, x(bareCall.rps / p.rps), rps(bareCall.rps) + bad(bareCall), rps(p.rps) + bad(p));
  }
  // Each Worker against its own floor: the same runtime path with no MCP work.
  for (const m of ['tools/list', 'tools/call']) {
    const name = m === 'tools/call' ? 'tools/call (blocking, JSON)' : m;
    const frac = (t) => L[`${t} ${m} c${C}`].rps / L[`${t} healthz c${C}`].rps;
    const [ff, fp] = [frac('flowgate'), frac('peer')];
    const cell = (t, v) => `${x(v)} (${L[`${t} ${m} c${C}`].rps.toFixed(0)} / ${rps(L[`${t} healthz c${C}`].rps)})`;
    row(`${name}: throughput as a fraction of the same Worker's GET /healthz (c=${C})`, x(ff / fp), cell('flowgate', ff), cell('peer', fp), '≥ 0.9× of its /healthz', flag(ff >= 0.9));
  }
  {
    const f = L['flowgate healthz c1'];
    const p = L['peer healthz c1'];
    row('GET /healthz: p50 latency (c=1; the local runtime\'s floor per request)', x(f.p50_ms / p.p50_ms), ms(f.p50_ms), ms(p.p50_ms));
  }
  for (const m of ['tools/list', 'tools/call']) {
    const name = m === 'tools/call' ? 'tools/call (blocking, JSON)' : m;
    const added = (t) => L[`${t} ${m} c1`].p50_ms - L[`${t} healthz c1`].p50_ms;
    const [af, ap] = [added('flowgate'), added('peer')];
    const c1 = (t) => `${signed(added(t))} (${ms(L[`${t} ${m} c1`].p50_ms)})${bad(L[`${t} ${m} c1`])}`;
    row(`${name}: p50 added over the same Worker's GET /healthz (c=1)`, ap > 0 ? x(af / ap) : 'n/a', c1('flowgate'), c1('peer'), '≤ 1.0×', flag(af <= ap));
    const [bh, bc] = [L['flowgate-bare healthz c1'], L[`flowgate-bare ${m} c1`]];
    if (bh && bc) {
      const ab = bc.p50_ms - bh.p50_ms;
      const ap2 = added('peer-again');
      row(`${name} without the rate-limit binding: p50 added over the same Worker's GET /healthz (c=1; the peer measured again in turns)`, ap2 > 0 ? x(ab / ap2) : 'n/a', `${signed(ab)} (${ms(bc.p50_ms)})${bad(bc)}`, c1('peer-again'));
    }
  }
  for (const c of [1, C]) {
    const d = L[`direct c${c}`];
    const f = L[`flowgate tools/call c${c}`];
    const p = L[`peer tools/call c${c}`];
    const addF = f.p50_ms - d.p50_ms;
    const addP = p.p50_ms - d.p50_ms;
    row(
      `tools/call: p50 added over the direct backend call (c=${c}; direct p50 ${ms(d.p50_ms)}, ${rps(d.rps)})`,
      x(addF / addP),
      `+${ms(addF)}`,
      `+${ms(addP)}`,
      c === 1 ? '≤ 1.0×' : '≤ 1 ms',
      c === 1 ? flag(addF <= addP) : flag(addF <= 1),
    );
  }
  const WC = r.workerCpu;
  if (WC) {
    const us = (v) => `${v.toFixed(0)} µs`;
    const cpuBad = (w) => (w.bad ? ` ⚠ ${w.bad} bad` : '');
    const cell = (w) => `${us(w.us.measured)} (${w.requests} req, ${w.ticks.measured} ticks)${cpuBad(w)}`;
    const kinds = { healthz: 'GET /healthz', 'tools/list': 'tools/list', 'tools/call': 'tools/call (blocking, JSON)' };
    const cc = WC.flowgate.healthz.connections;
    for (const [k, label] of Object.entries(kinds)) {
      const [f, p] = [WC.flowgate[k], WC.peer[k]];
      const ratio = f.us.measured / p.us.measured;
      row(`Worker CPU per request: ${label} (c=${cc} each; Flowgate, the peer and the floor loaded at once)`, x(ratio), cell(f), cell(p));
    }
    // Issue 44's first target: each Worker's /healthz against the floor's, over all passes and
    // pass by pass (the floor's ratio column is the Worker's CPU / the floor's, not / the peer's).
    const floorOf = (w) => w.us.measured / WC.floor.healthz.us.measured;
    const passRange = (w) => {
      const v = w.passUs?.map((u, i) => u / WC.floor.healthz.passUs[i]);
      return v?.length ? `passes ${v.map((r) => r.toFixed(2)).join(', ')}` : '';
    };
    if (WC.floor?.healthz) {
      const healthRows = [
        ['flowgate', 'Flowgate as deployed (worker/entry.mjs, no assets)', true],
        ['flowgate-dev', 'Flowgate as `make dev` runs it (wrangler.dev.toml: worker/dev.mjs, DEMO=true, the console files, no local asset router)', true],
        ['hello-rs', 'the hello-world workers-rs Worker (bench/hello-rs)', false],
        ['peer', 'the peer', false],
      ];
      for (const [name, what, targeted] of healthRows) {
        const w = WC[name]?.healthz;
        if (!w) continue;
        const ratio = floorOf(w);
        row(`GET /healthz Worker CPU / the floor's: ${what} (loaded at once; ${passRange(w)})`, x(ratio), cell(w), `floor ${cell(WC.floor.healthz)}`, targeted ? '≤ 1.1× the floor' : '', targeted ? flag(ratio <= 1.1) : '');
      }
    }
    // The issue's measure: the CPU per request minus the same Worker's per /healthz.
    const work = (cpu, k) => cpu[k].us.measured - cpu.healthz.us.measured;
    const share = (a, b) => (a > 0 && b > 0 ? x(a / b) : 'n/a');
    // The MCP work's ratio in each pass alone (each pass measures all three Workers at once).
    const passShares = (a, b, k) => {
      const [af, ah, bf, bh] = [a[k].passUs, a.healthz.passUs, b[k].passUs, b.healthz.passUs];
      if (!af || af.length < 2 || [ah, bf, bh].some((v) => v?.length !== af.length)) return '';
      return af.map((v, i) => share(v - ah[i], bf[i] - bh[i])).join(', ');
    };
    // The floor's share of the peer's work is the lowest ratio any Worker could read; above it,
    // what Flowgate and the peer spend on MCP itself.
    // Issue 44's measure: the MCP work above the floor's, in each pass alone too.
    const abovePasses = (f, p, l, k) => {
      const [ff, fh, pf, ph, lf, lh] = [f[k].passUs, f.healthz.passUs, p[k].passUs, p.healthz.passUs, l[k].passUs, l.healthz.passUs];
      if (!ff || ff.length < 2 || [fh, pf, ph, lf, lh].some((v) => v?.length !== ff.length)) return '';
      return ff.map((v, i) => share(v - fh[i] - (lf[i] - lh[i]), pf[i] - ph[i] - (lf[i] - lh[i]))).join(', ');
    };
    const floorRows = (floorCpu, k, wf, wp, bare, [f, p], targeted) => {
      if (!floorCpu?.[k]) return;
      const wl = work(floorCpu, k);
      row(`the floor's work per ${kinds[k]} (bench/floor: the same requests, no MCP; CPU minus its GET /healthz, ${bare ? 'measured with these two' : 'loaded at once with both'}): the lowest ratio any Worker can read`, share(wl, wp), `floor ${us(wl)}`, us(wp));
      const [af, ap] = [wf - wl, wp - wl];
      row(`MCP work per ${kinds[k]}${bare ? ' without the rate-limit binding' : ''} above the floor's`, share(af, ap), us(af), us(ap), targeted ? '≤ 0.5×' : '', targeted ? flag(af > 0 && ap > 0 && af / ap <= 0.5) : '');
      const spread = abovePasses(f, p, floorCpu, k);
      if (spread) row(`… the same ratio pass by pass`, spread, '', '');
    };
    for (const k of ['tools/list', 'tools/call']) {
      const [wf, wp] = [work(WC.flowgate, k), work(WC.peer, k)];
      row(`MCP work per request: Worker CPU per ${kinds[k]} minus per GET /healthz`, share(wf, wp), us(wf), us(wp));
      const spread = passShares(WC.flowgate, WC.peer, k);
      if (spread) row(`… the same ratio pass by pass (how far it moves within this run)`, spread, '', '');
      // With the binding on the path, tools/call's target is read on the rows without it (below).
      floorRows(WC.floor, k, wf, wp, false, [WC.flowgate, WC.peer], k === 'tools/list');
    }
    if (WC.bare) {
      // Measured after a restart without the binding: its own healthz floor, same requests.
      // Against the peer measured again in the same passes (its first numbers are from earlier).
      const P = WC.peerAgain;
      const bareWork = work(WC.bare, 'tools/call');
      const wp = work(P, 'tools/call');
      const binding = work(WC.flowgate, 'tools/call') - bareWork;
      row(`Worker CPU per request: tools/call (blocking, JSON) without the rate-limit binding (c=${cc} each; the peer measured again, loaded at once with it)`, x(WC.bare['tools/call'].us.measured / P['tools/call'].us.measured), cell(WC.bare['tools/call']), cell(P['tools/call']));
      row(`MCP work per request: tools/call (blocking, JSON) without the rate-limit binding, minus GET /healthz`, share(bareWork, wp), us(bareWork), us(wp));
      floorRows(WC.floorAgain, 'tools/call', bareWork, wp, true, [WC.bare, P], true);
      row(`the rate-limit binding's cost per tools/call (local simulator: with minus without)`, 'n/a', us(binding), 'no binding');
    }
  }
  const b = r.bundle;
  row('bundle: total upload (wrangler deploy --dry-run)', x(b.flowgate.totalKiB / b.peer.totalKiB), `${b.flowgate.totalKiB.toFixed(1)} KiB`, `${b.peer.totalKiB.toFixed(1)} KiB`);
  row('bundle: gzip', x(b.flowgate.gzipKiB / b.peer.gzipKiB), `${b.flowgate.gzipKiB.toFixed(1)} KiB`, `${b.peer.gzipKiB.toFixed(1)} KiB`, '≤ 400 KiB', flag(b.flowgate.gzipKiB <= 400));
  const cf = median(r.cold.flowgate);
  const cp = median(r.cold.peer);
  row(`cold start: wrangler dev spawn → first MCP initialize 200 (median of ${r.cold.flowgate.length})`, x(cf / cp), `${cf.toFixed(0)} ms`, `${cp.toFixed(0)} ms`);
  const mf = r.memory.flowgate;
  const mp = r.memory.peer;
  const mib = (v) => `${(v / 2 ** 20).toFixed(1)}`;
  row(
    `workerd RSS peak / baseline while ${mf.streams} streamed tools/calls of ${(mf.backendBytes / 2 ** 20).toFixed(0)} MiB each pass through (after ${MEMORY_WARMUP_STREAMS} warm-up ones)`,
    x(mf.ratio / mp.ratio),
    `${x(mf.ratio)} (${mib(mf.baseline)} → ${mib(mf.peak)} MiB, +${mib(mf.peak - mf.baseline)})${mf.ok ? '' : ' ⚠ no result'}`,
    `${x(mp.ratio)} (${mib(mp.baseline)} → ${mib(mp.peak)} MiB, +${mib(mp.peak - mp.baseline)})${mp.ok ? '' : ' ⚠ no result'}`,
    '≈ 1.0× (flat: ≤ 1.10×)',
    flag(mf.ratio <= 1.1),
  );

  const head = ['Measure', 'Flowgate / peer', 'Flowgate', 'Peer (MCP SDK)', 'Target', 'Met'];
  const lines = [`| ${head.join(' | ')} |`, `|${head.map((h, i) => (i === 0 ? ':---' : i === 1 ? '---:' : '---')).join('|')}|`, ...rows.map((cells) => `| ${cells.join(' | ')} |`)];
  const m = r.machine;
  const notes = [
    '',
    `${m.date} · ${m.nproc} CPUs (${m.cpu}) · ${m.memTotal} RAM · Flowgate ${r.git.commit}${r.git.dirtyFiles ? ` + ${r.git.dirtyFiles} uncommitted source files` : ''} · ${r.settings.wrk}, 1 thread, ${DURATION_S} s per run after ${WARMUP_S} s warm-up · both Workers under \`wrangler dev --local\`, one fake Dify backend (Node) behind both, all on this machine.`,
    'Ratios are Flowgate / peer: above 1× is better for throughput, below 1× is better for latency, size, start-up and memory.',
    `Streamed calls: the backend's workflow has ${r.settings.PROGRESS_EVENTS} nodes; each answer carries ${r.equivalence.flowgate['tools/call streaming'].progress} progress and ${r.equivalence.flowgate['tools/call streaming'].logs} log notifications (peer: ${r.equivalence.peer['tools/call streaming'].progress} and ${r.equivalence.peer['tools/call streaming'].logs}), read to the end. Memory: the backend streams ${(mf.backendBytes / 2 ** 20).toFixed(0)} MiB of text_chunk events per call (fixture \`repeat\`/\`chunkBytes\`), which neither Worker forwards: the client read ${(mf.clientBytes / 1024).toFixed(0)} KiB per call from Flowgate (${mf.seconds.toFixed(1)} s) and ${(mp.clientBytes / 1024).toFixed(0)} KiB from the peer (${mp.seconds.toFixed(1)} s); RSS is the sum of VmRSS of the workerd processes of that \`wrangler dev\` (the proxy and the Worker's), sampled every 20 ms; baseline is the idle median after ${MEMORY_WARMUP_STREAMS} warm-up streams, which took Flowgate from ${mib(mf.fresh)} MiB (idle, before any stream) to ${mib(mf.baseline)} and the peer from ${mib(mp.fresh)} to ${mib(mp.baseline)}.`,
    cpuNote(L),
    ...(WC ? [workerCpuNote(WC)] : []),
    r.settings.NO_RATELIMIT
      ? "Flowgate ran without its rate-limit binding (BENCH_NO_RATELIMIT=1)."
      : "Flowgate ran with wrangler.toml's rate-limit binding (miniflare's local simulation), its limit raised so that it never refuses: every MCP request still pays for the check.",
    `Cold starts (ms): Flowgate ${r.cold.flowgate.map((v) => v.toFixed(0)).join(', ')}; peer ${r.cold.peer.map((v) => v.toFixed(0)).join(', ')}.`,
  ];
  const core = [];
  if (r.core?.table?.length) core.push('', ...r.core.table, '', ...r.core.notes);
  else if (r.core?.error) core.push('', `Pure core on the host (cargo bench --bench core): not measured: ${r.core.error.split('\n')[0]}`);
  return [...lines, ...notes, ...core].join('\n');
}

/** How the Worker CPU rows were measured, and what the proxy took. */
/** workerCpu's options for one of the CPU_PASSES passes, after a quiet moment of `groups`. */
function cpuPass(groups) {
  return {
    requests: Math.ceil(CPU_REQUESTS / CPU_PASSES),
    connections: CPU_CONCURRENCY,
    warmup: CPU_WARMUP,
    minTicks: Math.ceil(CPU_MIN_TICKS / CPU_PASSES),
    maxRounds: CPU_MAX_ROUNDS,
    groups,
    beforeMeasuring: () => waitQuiet(groups),
  };
}

function workerCpuNote(WC) {
  const all = ['flowgate', 'peer'].flatMap((t) => Object.values(WC[t]));
  const identified = all.every((w) => w.identified);
  const w = WC.flowgate.healthz;
  const proxy = (t) => ['healthz', 'tools/list', 'tools/call'].map((k) => WC[t][k].us.proxy.toFixed(0)).join(' / ');
  const foreign = Math.max(...all.map((c) => c.foreign));
  return (
    `Worker CPU: utime + stime from /proc/<pid>/stat (CLK_TCK 100) over a fixed number of requests at ${w.connections} concurrent to each Worker, sent from Node's fetch with every answer checked, Flowgate, the peer, the floor (bench/floor: the same requests, no MCP), the hello-world workers-rs Worker (bench/hello-rs) and Flowgate as \`make dev\` runs it (wrangler.dev.toml: worker/dev.mjs with DEMO=true and the console's files, no local asset router; the last two get GET /healthz in every pass, and only its passes are their numbers) loaded at once so that each set of numbers comes from the same seconds of the machine, in ${w.passes} passes over every kind (each pass: ${w.warmup} warm-up requests, then rounds of ${Math.ceil(CPU_REQUESTS / CPU_PASSES)} until ≥ ${Math.ceil(CPU_MIN_TICKS / CPU_PASSES)} ticks), summed, so that the machine's drifts fall on every row alike; ` +
    (identified
      ? "of the workerd process that runs the Worker (told from wrangler's proxy by its command line: the proxy is the one listening on the dev port). "
      : 'the sum of all workerd processes of each `wrangler dev` (the Worker\'s and wrangler\'s proxy could not be told apart). ') +
    `That process also runs miniflare's local simulators of KV, D1 and the rate limiter, so Flowgate's binding calls are counted in its numbers: a rate-limit check per tools/call (tools/list and ping skip it); no KV read while the isolate's memo of the definition is fresh (one per server code every few seconds otherwise, off the response path) and no D1 write per call (end users are recorded once per server, user and hour per isolate). The peer uses no bindings; the rows \"without the rate-limit binding\" come from the same Flowgate restarted without it, given ${BARE_WARMUP_S} s of calls first, and measured with the peer again (in turns for throughput and latency, loaded at once for CPU). ` +
    (identified ? `Wrangler's proxy (not counted) took ${proxy('flowgate')} µs per request (/healthz / tools/list / tools/call) in front of Flowgate and ${proxy('peer')} µs in front of the peer. ` : '') +
    `Other processes took at most ${(foreign * 100).toFixed(0)}% of the machine's CPU during these runs.`
  );
}

main().catch((err) => {
  process.stderr.write(`[bench] failed: ${err?.stack ?? err}\n`);
  process.exit(1);
});
