// Starting the two Workers under `wrangler dev --local` for the benchmarks, built on the test
// harness's process groups (tests/support/harness.mjs): every process started here is killed
// when the bench exits, also on a crash or Ctrl-C.
//
// Flowgate runs from a snapshot of build/ taken when the bench starts, with a copy of
// wrangler.toml minus its [build] table: wrangler dev would otherwise run `make build` at
// start-up (part of every cold start) and rebuild and reload the Worker whenever src/ changes
// during the run. Its [[ratelimits]] limit is raised to BENCH_RATE_LIMIT: the limiter is still
// called on every MCP request, it just never refuses one.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { freePort, readResponse, repoRoot, runWrangler, startProcessGroup, wranglerCommand } from '../../tests/support/harness.mjs';
import { devConfig, editConfig } from '../../scripts/dev-config.mjs';

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** The per-server-code rate limit of the bench deployment (wrangler.toml's [[ratelimits]] `limit`). */
export const BENCH_RATE_LIMIT = 1_000_000_000;

/**
 * How a benchmark runs Flowgate: `deployed` is what `wrangler deploy` uploads (worker/entry.mjs,
 * no static assets in front of it: in production the platform routes a request that no asset
 * file answers to the Worker before any Worker CPU is billed); `dev` is what `make dev` runs
 * (wrangler.toml through scripts/dev-config.mjs: worker/dev.mjs with DEMO=true and the console's
 * files, no local asset router in front).
 */
export const ENTRIES = ['deployed', 'dev'];

/**
 * Copies build/, worker/ and migrations/ and a wrangler.toml without [build] and [assets]
 * (`dev`: made as `make dev` makes it) into a temp dir; returns {dir, config, vars, remove()}.
 * rateLimit: false drops the [[ratelimits]] binding altogether. `root`: the checkout to copy
 * them from (another one's build, for bench/compare.mjs). `entry`: see ENTRIES; `vars` are the
 * variables that entry runs with (DEMO=true for `dev`, as .dev.vars.example sets it).
 */
export function snapshotFlowgate({ rateLimit = true, root = repoRoot, entry = 'deployed' } = {}) {
  if (!ENTRIES.includes(entry)) throw new Error(`unknown Flowgate entry ${entry} (${ENTRIES.join(', ')})`);
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'flowgate-bench-'));
  fs.cpSync(path.join(root, 'build'), path.join(dir, 'build'), { recursive: true, filter: (src) => !src.includes(`${path.sep}.tmp`) });
  fs.cpSync(path.join(root, 'migrations'), path.join(dir, 'migrations'), { recursive: true });
  // wrangler.toml's `main` (worker/entry.mjs, which imports ../build/index.js).
  fs.cpSync(path.join(root, 'worker'), path.join(dir, 'worker'), { recursive: true });
  const toml = fs.readFileSync(path.join(root, 'wrangler.toml'), 'utf8');
  const bench = editConfig(toml, (line, table) => {
    // [assets] (the web console) is left out: in production the platform serves assets and
    // routes every other request to the Worker before any Worker CPU is billed, while locally
    // wrangler's asset router would run in front of the Worker and be counted with it.
    if (table === 'build' || table === 'assets' || (table === 'ratelimits' && !rateLimit)) return null;
    // Keep the rate limiter on the request path, but out of the way of the load runs.
    if (table === 'ratelimits') return line.replace(/\blimit\s*=\s*\d+/, `limit = ${BENCH_RATE_LIMIT}`);
    return line;
  });
  const config = path.join(dir, 'wrangler.toml');
  fs.writeFileSync(config, entry === 'dev' ? devConfig(bench) : bench);
  const vars = entry === 'dev' ? { DEMO: 'true' } : {};
  return { dir, config, vars, remove: () => fs.rmSync(dir, { recursive: true, force: true }) };
}

export const peerConfig = path.join(repoRoot, 'bench', 'peer', 'wrangler.toml');
/** The floor (bench/floor): the bench's requests answered by a plain Worker with no MCP. */
export const floorConfig = path.join(repoRoot, 'bench', 'floor', 'wrangler.toml');
/**
 * The hello-world workers-rs Worker (bench/hello-rs, built by its build.sh: `make bench-hello`):
 * what a Rust Worker costs per `GET /healthz` before it does anything.
 */
export const helloConfig = path.join(repoRoot, 'bench', 'hello-rs', 'wrangler.toml');

/** Throws unless the hello-world Worker is built (its build/ is not in git). */
export function checkHelloBuilt() {
  if (!fs.existsSync(path.join(repoRoot, 'bench', 'hello-rs', 'build', 'index.js'))) {
    throw new Error('bench/hello-rs is not built: run `make bench-hello` (bench/hello-rs/build.sh)');
  }
}

/** `wrangler d1 migrations apply DB --local` for a config into a persist dir. */
export async function applyMigrations(config, persistDir) {
  await runWrangler(['d1', 'migrations', 'apply', 'DB', '--local', '--persist-to', persistDir, '-c', config]);
}

/** PIDs of the workerd processes in process group `pgid` (wrangler's children). */
export function workerdPids(pgid) {
  const pids = [];
  for (const name of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    try {
      const stat = fs.readFileSync(`/proc/${name}/stat`, 'utf8');
      // pid (comm) state ppid pgrp ...
      const close = stat.lastIndexOf(')');
      const comm = stat.slice(stat.indexOf('(') + 1, close);
      const fields = stat.slice(close + 2).split(' ');
      if (Number(fields[2]) === pgid && comm.startsWith('workerd')) pids.push(Number(name));
    } catch {
      /* gone */
    }
  }
  return pids;
}

/**
 * The workerd processes of one `wrangler dev` by role. wrangler dev runs two: its proxy, which
 * listens on the dev port (miniflare entry socket `127.0.0.1:<port>`) and forwards every request,
 * and the one that runs the Worker itself (entry socket on a random port, with the inspector;
 * miniflare's local KV, D1, rate-limit and Durable Object simulators run in it too). `unknown`:
 * workerd processes that neither rule places (a wrangler whose command lines differ).
 */
export function workerdRoles(pgid, port) {
  const roles = { worker: [], proxy: [], unknown: [] };
  const proxyAddr = new RegExp(`--socket-addr=entry=127\\.0\\.0\\.1:${port}(\\s|$)`);
  for (const pid of workerdPids(pgid)) {
    let cmd;
    try {
      cmd = fs.readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0').join(' ').trim();
    } catch {
      continue; // gone
    }
    if (proxyAddr.test(cmd)) roles.proxy.push(pid);
    else if (/--inspector-addr=/.test(cmd)) roles.worker.push(pid);
    else roles.unknown.push(pid);
  }
  return roles;
}

/** Sum of VmRSS (bytes) over pids; processes that vanished count 0. */
export function rssBytes(pids) {
  let total = 0;
  for (const pid of pids) {
    try {
      const m = /^VmRSS:\s+(\d+)\s+kB/m.exec(fs.readFileSync(`/proc/${pid}/status`, 'utf8'));
      if (m) total += Number(m[1]) * 1024;
    } catch {
      /* gone */
    }
  }
  return total;
}

/**
 * Starts `wrangler dev --local -c config` on a free loopback port and polls `probe(url)` (which
 * resolves true once the Worker answered as wanted) every pollMs until it succeeds.
 * Returns { url, port, pgid, startupMs, stop(), log(), fetchJson(), console() }.
 * startupMs is from the spawn to the first successful probe.
 */
export async function startWorker(opts) {
  // freePort() closes its socket before workerd binds the port, and a port another process (or
  // a connection in TIME_WAIT) takes in between makes workerd refuse to start: try new ports.
  for (let attempt = 1; ; attempt++) {
    try {
      return await startWorkerOnce(opts);
    } catch (e) {
      if (attempt >= 3 || !/Address already in use/.test(e.message)) throw e;
    }
  }
}

async function startWorkerOnce({ config, persistDir, vars = {}, probe, pollMs = 25, timeoutMs = 120_000, label = 'wrangler dev' }) {
  const [node, entry] = wranglerCommand();
  const port = await freePort();
  const inspectorPort = await freePort();
  const args = [
    entry, 'dev', '-c', config,
    '--local', '--ip', '127.0.0.1', '--port', String(port), '--inspector-port', String(inspectorPort),
    '--show-interactive-dev-session=false',
    // Only `vars`: never a .dev.vars or .env beside the config.
    '--env-file', '/dev/null',
  ];
  if (persistDir) args.push('--persist-to', persistDir);
  for (const [k, v] of Object.entries(vars)) args.push('--var', `${k}:${String(v)}`);
  const url = `http://127.0.0.1:${port}`;
  const started = performance.now();
  const proc = startProcessGroup(node, args, { label, unref: true });
  let exited = null;
  proc.exited.then((r) => (exited = r));
  for (;;) {
    if (exited) throw new Error(`${label} exited early (code ${exited.code}).\n${proc.log()}`);
    let ok = false;
    try {
      ok = await probe(url);
    } catch {
      ok = false;
    }
    if (ok) break;
    if (performance.now() - started > timeoutMs) {
      await proc.stop();
      throw new Error(`${label} did not answer within ${timeoutMs} ms.\n${proc.log()}`);
    }
    await sleep(pollMs);
  }
  const startupMs = performance.now() - started;

  const instance = {
    url,
    port,
    pgid: proc.pid,
    startupMs,
    log: () => proc.log(),
    stop: () => proc.stop(),
    workerdPids: () => workerdPids(proc.pid),
    workerdRoles: () => workerdRoles(proc.pid, port),
    async fetchJson(p, { method, body, token, headers = {} } = {}) {
      const h = new Headers(headers);
      if (token) h.set('Authorization', `Bearer ${token}`);
      let payload;
      if (body !== undefined) {
        payload = typeof body === 'string' ? body : JSON.stringify(body);
        if (!h.has('Content-Type')) h.set('Content-Type', 'application/json');
      }
      const res = await fetch(url + p, { method: method ?? (payload !== undefined ? 'POST' : 'GET'), headers: h, body: payload, signal: AbortSignal.timeout(30_000) });
      return readResponse(res);
    },
    // What tests/support/flowgate-setup.mjs needs (registerApp, publish).
    console(p, opts = {}) {
      return instance.fetchJson(`/console/api${p}`, { ...opts, token: vars.ADMIN_TOKEN });
    },
  };
  return instance;
}

/** A probe: GET path answers 200. */
export const getOk = (p) => async (url) => {
  const r = await fetch(url + p, { signal: AbortSignal.timeout(2000) });
  await r.arrayBuffer();
  return r.status === 200;
};

/** A probe: POST an MCP initialize to path answers 200 with a result. */
export const initializeOk = (p) => async (url) => {
  const r = await fetch(url + p, {
    method: 'POST',
    headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
    body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'initialize', params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'bench', version: '1' } } }),
    signal: AbortSignal.timeout(2000),
  });
  const text = await r.text();
  return r.status === 200 && text.includes('"result"');
};
