// Starts the real Flowgate Worker (wrangler dev --local, i.e. workerd + miniflare)
// for one test file, with its own port and its own state directory.
//
//   import { startFlowgate } from '../support/harness.mjs';
//   const fg = await startFlowgate({ vars: { SOME_VAR: 'x' } });
//   const r = await fg.fetchJson('/healthz');
//   await fg.stop();
//
// Needs `make build` (build/index.js) and `npm ci` (node_modules/wrangler).
// Wrangler 4.164 refuses to run on Node < 22.12, so wrangler is always run with a
// Node >= 22.12: the one running the tests if it is new enough, otherwise the
// project's pinned node (devDependency "node", node_modules/node/bin/node).
//
// Every process started here runs in its own process group, which is killed
// (SIGKILL) when the test process exits, is interrupted or crashes, so no
// wrangler/workerd survives a test file.
// Set FLOWGATE_TEST_LOG=1 to mirror wrangler's output to stderr.
//
// Speed: the migrations are applied once into a template state directory (kept under the
// system's temp dir, named by a hash of what makes it: migrations/, wrangler.toml, wrangler's
// version), which each instance gets a copy of; d1()/kvKeys()/kvGet() read miniflare's SQLite
// files directly with node:sqlite (Node >= 22.13) instead of starting the wrangler CLI, which
// costs a second or more of CPU a call (FLOWGATE_TEST_WRANGLER_READS=1: through the CLI again).

import { spawn } from 'node:child_process';
import crypto from 'node:crypto';
import fs from 'node:fs';
import net from 'node:net';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { devConfig } from '../../scripts/dev-config.mjs';

export const repoRoot = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..', '..');

const LOG_LINES = 200;
const HEALTH_TIMEOUT_MS = 90_000;
const HEALTH_POLL_MS = 200;
const TERM_GRACE_MS = 3_000;
/** How long a stop waits for the output pipes of a killed group to close (see stop()). */
const PIPE_CLOSE_WAIT_MS = 5_000;
// Orphaned group members are reaped by PID 1; on some VMs that takes ~2 s.
const REAP_WAIT_MS = 10_000;
const COMMAND_TIMEOUT_MS = 120_000;

// NODE_COMPILE_CACHE: wrangler's bundle is compiled once, not at each of the suite's ~100 starts.
const baseEnv = () => ({
  NODE_COMPILE_CACHE: path.join(os.tmpdir(), 'flowgate-test-node-compile-cache'),
  ...process.env,
  CI: 'true',
  WRANGLER_SEND_METRICS: 'false',
  NO_COLOR: '1',
  FORCE_COLOR: '0',
});

// Leads a process group and reaps every process of it, orphans included (a child subreaper):
// a stopped group is gone as soon as its processes have exited, not when PID 1 gets round to
// the orphans (on this kind of VM, 1 to 2 s a stop). Signals for the group are for the command;
// this stays to reap, and exits with the command's code once nothing is left (2 s at most
// after the command itself ended).
const REAPER = `
import ctypes, os, signal, sys, time
try:
    ctypes.CDLL(None).prctl(36, 1, 0, 0, 0)  # PR_SET_CHILD_SUBREAPER
except Exception:
    pass
SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
for s in SIGNALS:
    signal.signal(s, lambda *_: None)
pid = os.fork()
if pid == 0:
    for s in SIGNALS:
        signal.signal(s, signal.SIG_DFL)
    os.execvp(sys.argv[1], sys.argv[1:])
code, until = 1, None
while True:
    try:
        p, st = os.waitpid(-1, 0 if until is None else os.WNOHANG)
    except ChildProcessError:
        break
    if p == pid:
        code = os.waitstatus_to_exitcode(st)
        code = 128 - code if code < 0 else code
        until = time.monotonic() + 2
    elif p == 0:
        if time.monotonic() > until:
            break
        time.sleep(0.02)
sys.exit(code)
`;

/** python3 on PATH (for REAPER), or null: groups are then led by the command itself. */
let python3Path;
function python3() {
  if (python3Path === undefined) {
    python3Path = null;
    if (process.platform === 'linux') {
      for (const dir of (process.env.PATH ?? '').split(path.delimiter)) {
        const p = path.join(dir || '.', 'python3');
        try {
          fs.accessSync(p, fs.constants.X_OK);
          python3Path = p;
          break;
        } catch {
          /* not here */
        }
      }
    }
  }
  return python3Path;
}

// ---------------------------------------------------------------------------
// Process-group registry and teardown
// ---------------------------------------------------------------------------

/** pgid -> description, for every process group started and not yet confirmed gone. */
const liveGroups = new Map();
let hooksInstalled = false;

function killGroupSync(pgid, signal = 'SIGKILL') {
  try {
    process.kill(-pgid, signal);
    return true;
  } catch {
    return false; // ESRCH: already gone
  }
}

/** State dirs of instances not yet stopped (removed by the exit hook). */
const liveStateDirs = new Set();

/** Synchronously SIGKILLs every process group still registered. */
export function killAllSync() {
  for (const pgid of liveGroups.keys()) killGroupSync(pgid, 'SIGKILL');
}

function onExit() {
  killAllSync();
  for (const dir of liveStateDirs) {
    try {
      fs.rmSync(dir, { recursive: true, force: true });
    } catch {
      /* best effort */
    }
  }
}

function installHooks() {
  if (hooksInstalled) return;
  hooksInstalled = true;
  process.on('exit', onExit);
  for (const sig of ['SIGINT', 'SIGTERM', 'SIGHUP']) {
    const handler = () => {
      killAllSync();
      // If someone else (e.g. node:test's runner) also handles the signal, let it
      // decide how to exit; otherwise exit the way the default handler would.
      if (process.listenerCount(sig) <= 1) process.exit(128 + os.constants.signals[sig]);
    };
    process.on(sig, handler);
  }
  process.on('uncaughtException', (err, origin) => {
    // node:test installs its own handler, reports the error against the running
    // test and carries on (its after() hooks call stop(); the 'exit' hook covers the
    // rest). Otherwise behave like Node's default: kill, print and exit 1.
    if (process.listenerCount('uncaughtException') <= 1) {
      killAllSync();
      process.stderr.write(`${origin === 'unhandledRejection' ? 'Unhandled rejection' : 'Uncaught exception'}: ${err?.stack ?? err}\n`);
      process.exit(1);
    }
  });
}

/** True while any process of the group exists (zombies included). */
export function groupAlive(pgid) {
  try {
    process.kill(-pgid, 0);
    return true;
  } catch (e) {
    return e.code === 'EPERM';
  }
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function waitGroupGone(pgid, ms) {
  const deadline = Date.now() + ms;
  while (groupAlive(pgid)) {
    if (Date.now() >= deadline) return false;
    await sleep(50);
  }
  return true;
}

/** Listen on 127.0.0.1:0, read the port, close. */
/** A fetch Response as `{status, headers, text, json}` (`json` undefined when the body is not JSON). */
export async function readResponse(res) {
  const text = await res.text();
  let json;
  try {
    json = text ? JSON.parse(text) : undefined;
  } catch {
    json = undefined;
  }
  return { status: res.status, headers: res.headers, text, json };
}

/**
 * Waits until at least `needMs` are left in the current window of the local rate-limit
 * simulator, which counts in windows aligned to the wall clock (`floor(now / period)`). A test
 * that spends a budget and then expects a refusal must do both in one window: one that crossed
 * a boundary would see the budget whole again.
 */
export async function startOfRateWindow(needMs = 15_000, periodMs = 60_000) {
  if (needMs >= periodMs) throw new Error(`startOfRateWindow: ${needMs} ms cannot fit in a ${periodMs} ms window`);
  while (periodMs - (Date.now() % periodMs) < needMs) await new Promise((r) => setTimeout(r, 250));
}

/** The sealing key of test deployments (a fixed value: tests only). */
export const TEST_SECRETS_KEY = '0f'.repeat(32);

/** A var value that stands for the instance's own URL (`vars: { PUBLIC_URL: OWN_URL }`): the port is drawn at start. */
export const OWN_URL = '{flowgate-own-url}';

export function freePort() {
  return new Promise((resolve, reject) => {
    const srv = net.createServer();
    srv.once('error', reject);
    srv.listen(0, '127.0.0.1', () => {
      const { port } = srv.address();
      srv.close(() => resolve(port));
    });
  });
}

/**
 * Spawns `cmd args` as leader of a new process group, captures stdout+stderr into a
 * ring buffer of the last ~200 lines, and registers the group for teardown.
 *
 * Returns { child, pid, log(), output(), exited, stop({ graceMs }) }:
 *  - log(): last lines of stdout+stderr interleaved, as one string
 *  - output(): { stdout, stderr } complete, when opts.capture is true (for short commands)
 *  - exited: Promise<{ code, signal }> of the group leader
 *  - stop(): SIGTERM the group, SIGKILL after graceMs (default 3 s), wait until the
 *    group is gone; idempotent.
 * opts: spawn options (cwd defaults to the repo root, env to the wrangler env) plus
 *   capture (keep full stdout/stderr), echo (mirror to stderr), label, unref, reap (the group
 *   led by REAPER, when python3 is there: a stop does not wait for PID 1 to reap orphans).
 */
export function startProcessGroup(cmd, args, opts = {}) {
  installHooks();
  const {
    capture = false,
    echo = process.env.FLOWGATE_TEST_LOG === '1',
    label = path.basename(cmd),
    unref = false,
    reap = false,
    ...spawnOpts
  } = opts;
  const reaper = reap ? python3() : null;
  if (reaper) [cmd, args] = [reaper, ['-c', REAPER, cmd, ...args]];
  const child = spawn(cmd, args, {
    cwd: repoRoot,
    env: baseEnv(),
    ...spawnOpts,
    detached: true,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const lines = [];
  const partial = { stdout: '', stderr: '' };
  const full = { stdout: [], stderr: [] };
  const pushLine = (l) => {
    lines.push(l);
    if (lines.length > LOG_LINES) lines.splice(0, lines.length - LOG_LINES);
  };
  for (const stream of ['stdout', 'stderr']) {
    child[stream].on('data', (buf) => {
      if (capture) full[stream].push(buf);
      if (echo) process.stderr.write(buf);
      const text = partial[stream] + buf.toString('utf8');
      const parts = text.split(/\r?\n/);
      partial[stream] = parts.pop();
      for (const p of parts) pushLine(p);
      if (partial[stream].length > 64 * 1024) {
        pushLine(partial[stream]);
        partial[stream] = '';
      }
    });
  }

  const pid = child.pid;
  let spawnError = null;
  const leaderGone = new Promise((resolve) => {
    if (pid === undefined) resolve();
    child.once('exit', resolve);
    child.once('error', resolve);
  });
  const exited = new Promise((resolve) => {
    child.once('error', (err) => {
      spawnError = err;
      pushLine(`[harness] spawn error: ${err.message}`);
      if (pid === undefined) resolve({ code: null, signal: null, error: err });
    });
    child.once('close', (code, signal) => {
      for (const s of ['stdout', 'stderr']) if (partial[s]) pushLine(partial[s]);
      partial.stdout = partial.stderr = '';
      resolve({ code, signal, error: spawnError });
    });
  });
  if (pid !== undefined) liveGroups.set(pid, `${label} ${args.join(' ')}`);
  if (unref) {
    // A long-lived server must not keep the test process alive: if a test file
    // forgets stop(), the process still exits and the 'exit' hook kills the group.
    child.unref();
    child.stdout.unref?.();
    child.stderr.unref?.();
  }

  let stopping = null;
  const stop = ({ graceMs = TERM_GRACE_MS } = {}) => {
    if (stopping) return stopping;
    stopping = (async () => {
      if (pid === undefined) return exited;
      killGroupSync(pid, 'SIGTERM');
      // Give the group graceMs to go away on its own (the leader exiting is not
      // enough: wrangler's workerd children must not outlive it), then SIGKILL it.
      const deadline = Date.now() + graceMs;
      await Promise.race([exited, sleep(graceMs)]);
      while (groupAlive(pid) && Date.now() < deadline) await sleep(50);
      killGroupSync(pid, 'SIGKILL');
      // 'close' waits for the group's output pipes too: a process that left the group and still
      // holds one would keep it (and the test's after() hook) waiting for ever. Once the leader
      // is gone, a few seconds for the pipes, then they are let go.
      await leaderGone;
      const closed = await Promise.race([exited.then(() => true), sleep(PIPE_CLOSE_WAIT_MS).then(() => false)]);
      if (!closed) {
        pushLine(`[harness] the output pipes stayed open after the group was killed: let go`);
        child.stdout?.destroy();
        child.stderr?.destroy();
      }
      const result = await exited;
      // Members orphaned by the kill are reaped by PID 1, not by us; wait for that
      // so that callers can rely on process.kill(-pid, 0) throwing ESRCH.
      await waitGroupGone(pid, REAP_WAIT_MS);
      if (!groupAlive(pid)) liveGroups.delete(pid);
      return result;
    })();
    return stopping;
  };

  // A leader that exits on its own may leave group members behind: clean them up.
  exited.then(() => {
    if (stopping || pid === undefined) return;
    if (!groupAlive(pid)) {
      liveGroups.delete(pid);
      return;
    }
    killGroupSync(pid, 'SIGKILL');
    waitGroupGone(pid, REAP_WAIT_MS).then((gone) => gone && liveGroups.delete(pid));
  });

  return {
    child,
    pid,
    exited,
    stop,
    log: () => lines.join('\n'),
    output: () => ({
      stdout: Buffer.concat(full.stdout).toString('utf8'),
      stderr: Buffer.concat(full.stderr).toString('utf8'),
    }),
  };
}

// ---------------------------------------------------------------------------
// wrangler
// ---------------------------------------------------------------------------

function nodeAtLeast(version, major, minor) {
  const [a, b] = version.replace(/^v/, '').split('.').map(Number);
  return a > major || (a === major && b >= minor);
}

/** [nodeBinary, wranglerEntry]: wrangler 4.164 needs Node >= 22.12. */
export function wranglerCommand() {
  const entry = path.join(repoRoot, 'node_modules', 'wrangler', 'bin', 'wrangler.js');
  if (!fs.existsSync(entry)) throw new Error(`wrangler is not installed (${entry} missing): run \`npm ci\` first`);
  if (nodeAtLeast(process.versions.node, 22, 12)) return [process.execPath, entry];
  const pinned = path.join(repoRoot, 'node_modules', 'node', 'bin', 'node');
  if (fs.existsSync(pinned)) return [pinned, entry];
  throw new Error(`wrangler needs Node >= 22.12 (this is ${process.version}) and ${pinned} is missing: run \`npm ci\``);
}

/**
 * Runs a short wrangler command (own process group, killed on timeout or test exit).
 * Resolves { code, stdout, stderr }; rejects if it exits non-zero unless allowFailure.
 */
export async function runWrangler(args, { timeoutMs = COMMAND_TIMEOUT_MS, allowFailure = false } = {}) {
  const [node, entry] = wranglerCommand();
  const p = startProcessGroup(node, [entry, ...args], { capture: true, label: 'wrangler', reap: true });
  const timer = setTimeout(() => p.stop({ graceMs: 1000 }), timeoutMs);
  const { code, signal, error } = await p.exited;
  clearTimeout(timer);
  await p.stop({ graceMs: 500 }); // reap anything the command left behind
  const { stdout, stderr } = p.output();
  if (!allowFailure && (code !== 0 || error)) {
    throw new Error(
      `wrangler ${args.join(' ')} failed (code ${code}, signal ${signal}${error ? `, ${error.message}` : ''}):\n${p.log()}`,
    );
  }
  return { code, stdout, stderr };
}

/** SQL text split into statements at `;` outside quotes (enough for the tests' SQL). */
function splitStatements(sql) {
  const out = [];
  let cur = '';
  let quote = null;
  for (const c of sql) {
    if (quote) {
      if (c === quote) quote = null;
    } else if (c === "'" || c === '"') quote = c;
    else if (c === ';') {
      if (cur.trim()) out.push(cur.trim());
      cur = '';
      continue;
    }
    cur += c;
  }
  if (cur.trim()) out.push(cur.trim());
  return out;
}

function parseJsonOutput(stdout, what) {
  try {
    return JSON.parse(stdout);
  } catch {
    // Tolerate banner lines before the JSON document.
    const i = stdout.search(/^[[{]/m);
    if (i >= 0) {
      try {
        return JSON.parse(stdout.slice(i));
      } catch {
        /* fall through */
      }
    }
    throw new Error(`${what}: could not parse JSON from wrangler output:\n${stdout}`);
  }
}

// ---------------------------------------------------------------------------
// Template state: the migrations applied once
// ---------------------------------------------------------------------------

const TEMPLATE_ROOT = path.join(os.tmpdir(), 'flowgate-test-templates');
/** Template dir promises of this process, by key (instances started together share one). */
const templates = new Map();

/**
 * A state directory with the D1 migrations applied, for wrangler.toml's text `configText`
 * (`configArgs` passes an edited copy): made once, then reused by every instance and every test
 * file. Its name is a hash of everything that shapes it, so a changed migration, config or
 * wrangler makes a new one; it is built aside and renamed into place, so a half-made template
 * is never used (two test files building it at once: one rename wins, the other is dropped).
 */
function templateState(configText, configArgs) {
  const h = crypto.createHash('sha256');
  h.update(JSON.parse(fs.readFileSync(path.join(repoRoot, 'node_modules', 'wrangler', 'package.json'), 'utf8')).version);
  h.update('\0').update(configText);
  const dir = path.join(repoRoot, 'migrations');
  for (const f of fs.readdirSync(dir).sort()) h.update('\0').update(f).update('\0').update(fs.readFileSync(path.join(dir, f)));
  const key = h.digest('hex').slice(0, 32);
  if (!templates.has(key)) {
    const made = (async () => {
      const final = path.join(TEMPLATE_ROOT, key);
      if (fs.existsSync(path.join(final, '.complete'))) return final;
      fs.mkdirSync(TEMPLATE_ROOT, { recursive: true });
      const building = fs.mkdtempSync(path.join(TEMPLATE_ROOT, `${key}.building-`));
      liveStateDirs.add(building);
      try {
        await runWrangler(['d1', 'migrations', 'apply', 'DB', '--local', '--persist-to', building, ...configArgs]);
        fs.writeFileSync(path.join(building, '.complete'), '');
        try {
          fs.renameSync(building, final);
        } catch (e) {
          if (!fs.existsSync(path.join(final, '.complete'))) throw e; // lost the race to an equal template
        }
        return final;
      } finally {
        fs.rmSync(building, { recursive: true, force: true });
        liveStateDirs.delete(building);
      }
    })();
    made.catch(() => templates.delete(key)); // a failed build is tried again by the next start
    templates.set(key, made);
  }
  return templates.get(key);
}

// ---------------------------------------------------------------------------
// Local D1 and KV, read from miniflare's files
// ---------------------------------------------------------------------------

/** node:sqlite's DatabaseSync, or null on a Node without it (then the wrangler CLI is used). */
let sqliteModule;
async function databaseSync() {
  if (sqliteModule === undefined) {
    if (!nodeAtLeast(process.versions.node, 22, 13) || process.env.FLOWGATE_TEST_WRANGLER_READS === '1') sqliteModule = null;
    else {
      // node:sqlite is stable enough for tests but still warns once per process: not in the logs.
      const emit = process.emitWarning;
      process.emitWarning = (w, ...rest) => (/SQLite/.test(String(w?.message ?? w)) ? undefined : emit.call(process, w, ...rest));
      try {
        sqliteModule = await import('node:sqlite');
      } catch {
        sqliteModule = null;
      } finally {
        process.emitWarning = emit;
      }
    }
  }
  return sqliteModule?.DatabaseSync ?? null;
}

/** The one SQLite file of a miniflare Durable Object class dir (its metadata.sqlite aside), or null. */
function objectSqliteFile(persistDir, kind, className) {
  const dir = path.join(persistDir, 'v3', kind, className);
  let names;
  try {
    names = fs.readdirSync(dir).filter((n) => n.endsWith('.sqlite') && n !== 'metadata.sqlite');
  } catch {
    return null;
  }
  if (names.length > 1) throw new Error(`more than one ${kind} database in ${dir}: ${names.join(', ')}`);
  return names.length ? path.join(dir, names[0]) : null;
}

/** Runs fn(db) on a SQLite file the running Worker may be using (WAL: reads never wait; a write waits out its lock). */
function withSqlite(DatabaseSync, file, fn, { readOnly = false } = {}) {
  const db = new DatabaseSync(file, { readOnly });
  try {
    db.exec('PRAGMA busy_timeout = 10000');
    return fn(db);
  } finally {
    db.close();
  }
}

/** A row of node:sqlite (null prototype) as D1 returns it: a plain object. */
const plainRow = (row) => ({ ...row });

/** The local KV namespace's entries as miniflare keeps them: live ones only (expiration in ms). */
function kvEntries(DatabaseSync, persistDir, where = '', params = []) {
  const file = objectSqliteFile(persistDir, 'kv', 'miniflare-KVNamespaceObject');
  if (!file) return []; // nothing was ever written
  return withSqlite(
    DatabaseSync,
    file,
    (db) =>
      db
        .prepare(`SELECT key, blob_id, expiration, metadata FROM _mf_entries WHERE (expiration IS NULL OR expiration > ?) ${where} ORDER BY key`)
        .all(Date.now(), ...params),
    { readOnly: true },
  );
}

/** The bytes of a KV value (miniflare keeps each under v3/kv/<namespace>/blobs/<blob id>). */
function kvBlob(persistDir, blobId) {
  const kvDir = path.join(persistDir, 'v3', 'kv');
  for (const ns of fs.readdirSync(kvDir)) {
    const file = path.join(kvDir, ns, 'blobs', blobId);
    if (fs.existsSync(file)) return fs.readFileSync(file, 'utf8');
  }
  throw new Error(`KV blob ${blobId} not found under ${kvDir}`);
}

// ---------------------------------------------------------------------------
// startFlowgate
// ---------------------------------------------------------------------------

/**
 * Starts Flowgate under `wrangler dev --local` on a free loopback port with a fresh
 * state directory (a copy of the template state: D1 migrations applied).
 *
 * @param {{ vars?: Record<string,string>, adminToken?: string, healthTimeoutMs?: number }} [options]
 *   vars: extra `--var K:V` (ADMIN_TOKEN=adminToken and ALLOW_PRIVATE_BACKENDS=true are
 *   always passed; vars may override them). adminToken defaults to 'test-admin-token-for-local-tests-only'.
 * @returns instance { url, port, persistDir, adminToken, pid, startupMs, stop(), log(),
 *   fetchJson(path, opts), console(path, opts), d1(sql), kvKeys(), kvGet(key), kvPut(key, value),
 *   stateFilesContaining(needle) }
 */
/** Tries of `wrangler dev` whose port was taken before it could bind it. */
const PORT_ATTEMPTS = 3;

// `devEntry` runs Flowgate as `make dev` does: wrangler.toml through scripts/dev-config.mjs
// (worker/dev.mjs, the console's files and the demo backend when DEMO=true in front, no
// [assets]) instead of wrangler.toml itself, the deployed entry and the platform's assets.
export async function startFlowgate({ vars = {}, adminToken, healthTimeoutMs = HEALTH_TIMEOUT_MS, persistDir: reuseDir, configure: edit, devEntry = false } = {}) {
  const configure = devEntry ? (text) => devConfig(edit ? edit(text) : text) : edit;
  // vars.ADMIN_TOKEN wins over adminToken, and whichever is used is reported back.
  adminToken = vars.ADMIN_TOKEN ?? adminToken ?? 'test-admin-token-for-local-tests-only';
  const buildEntry = path.join(repoRoot, 'build', 'index.js');
  if (!fs.existsSync(buildEntry)) {
    throw new Error(`${buildEntry} does not exist: run \`make build\` first`);
  }
  const [node, entry] = wranglerCommand();
  // `persistDir` restarts Flowgate on the state an earlier instance left (see stop({ keepState })).
  const persistDir = reuseDir ?? fs.mkdtempSync(path.join(os.tmpdir(), 'flowgate-test-'));
  liveStateDirs.add(persistDir);
  installHooks();
  const removeState = () => {
    fs.rmSync(persistDir, { recursive: true, force: true, maxRetries: 5, retryDelay: 100 });
    liveStateDirs.delete(persistDir);
  };

  // `configure(text) => text` runs this instance on an edited copy of wrangler.toml (kept in the
  // repo root, since its paths are relative to it; removed at stop).
  let configArgs = [];
  let configFile = null;
  if (configure) {
    configFile = path.join(repoRoot, `wrangler.test-${process.pid}-${Date.now()}.toml`);
    fs.writeFileSync(configFile, configure(fs.readFileSync(path.join(repoRoot, 'wrangler.toml'), 'utf8')));
    configArgs = ['-c', configFile];
  }
  const removeConfig = () => configFile && fs.rmSync(configFile, { force: true });

  let proc = null;
  try {
    // A restart on an earlier instance's state has its migrations already.
    if (!reuseDir) {
      const configText = configFile ? fs.readFileSync(configFile, 'utf8') : fs.readFileSync(path.join(repoRoot, 'wrangler.toml'), 'utf8');
      fs.cpSync(await templateState(configText, configArgs), persistDir, { recursive: true, filter: (src) => path.basename(src) !== '.complete' });
    }

    let port;
    let url;
    let started;
    for (let attempt = 1; ; attempt++) {
      let portTaken = false;
      port = await freePort();
      const inspectorPort = await freePort();
      const allVars = { ADMIN_TOKEN: adminToken, ALLOW_PRIVATE_BACKENDS: 'true', SECRETS_KEY: TEST_SECRETS_KEY, ...vars };
      const args = [
        entry, 'dev',
        '--local',
        '--ip', '127.0.0.1',
        '--port', String(port),
        '--inspector-port', String(inspectorPort),
        '--persist-to', persistDir,
        '--show-interactive-dev-session=false',
        // Only the vars below: not the checkout's .dev.vars (or .env), which `make dev` writes
        // with its own settings (SECRET_REF_PREFIX, DEMO, ...) and wrangler would read otherwise.
        '--env-file', '/dev/null',
        ...configArgs,
      ];
      // wrangler splits KEY:VALUE at the first ':' (values may contain ':' and spaces).
      url = `http://127.0.0.1:${port}`;
      for (const [k, v] of Object.entries(allVars)) args.push('--var', `${k}:${String(v).replaceAll(OWN_URL, url)}`);

      started = Date.now();
      proc = startProcessGroup(node, args, { label: 'wrangler dev', unref: true, reap: true });

      let exitedEarly = null;
      proc.exited.then((r) => (exitedEarly = r));
      const deadline = started + healthTimeoutMs;
      let lastErr = 'no attempt yet';
      for (;;) {
        if (exitedEarly) {
          // Another process may take a port between freePort() and wrangler binding it (the
          // fixtures started beside Flowgate listen on port 0): take new ports and start again.
          if (attempt < PORT_ATTEMPTS && /Address already in use/.test(proc.log())) {
            portTaken = true;
            break;
          }
          throw new Error(
            `wrangler dev exited before /healthz answered (code ${exitedEarly.code}, signal ${exitedEarly.signal}).\n--- wrangler log ---\n${proc.log()}`,
          );
        }
        try {
          const r = await fetch(`${url}/healthz`, { signal: AbortSignal.timeout(2000) });
          await r.arrayBuffer();
          if (r.status === 200) break;
          lastErr = `HTTP ${r.status}`;
        } catch (e) {
          lastErr = e.cause?.code ?? e.message;
        }
        if (Date.now() >= deadline) {
          throw new Error(
            `Flowgate did not answer GET /healthz with 200 within ${healthTimeoutMs} ms (last: ${lastErr}).\n--- wrangler log ---\n${proc.log()}`,
          );
        }
        await sleep(HEALTH_POLL_MS);
      }
      if (!portTaken) break;
      await proc.stop();
    }
    const startupMs = Date.now() - started;

    let stopping = null;
    const instance = {
      url,
      port,
      persistDir,
      adminToken,
      pid: proc.pid,
      startupMs,
      log: () => proc.log(),

      /** Stops the Worker; `keepState: true` leaves the state dir for a restart on it. */
      stop({ keepState = false } = {}) {
        if (stopping) return stopping;
        stopping = (async () => {
          await proc.stop();
          removeConfig();
          if (keepState) liveStateDirs.delete(persistDir);
          else removeState();
        })();
        return stopping;
      },

      /** fetch url+path; object bodies are JSON-encoded, strings are sent as-is. */
      async fetchJson(p, { method, body, token, headers = {}, timeoutMs = 30_000 } = {}) {
        const h = new Headers(headers);
        if (token) h.set('Authorization', `Bearer ${token}`);
        let payload;
        if (body !== undefined && body !== null) {
          if (typeof body === 'string' || body instanceof Uint8Array || body instanceof ArrayBuffer) {
            payload = body;
          } else {
            payload = JSON.stringify(body);
            if (!h.has('Content-Type')) h.set('Content-Type', 'application/json');
          }
        }
        const res = await fetch(url + p, {
          method: method ?? (payload !== undefined ? 'POST' : 'GET'),
          headers: h,
          body: payload,
          signal: AbortSignal.timeout(timeoutMs),
        });
        return readResponse(res);
      },

      /** fetchJson on /console/api+path with the admin token (opts.token overrides; null = none). */
      console(p, opts = {}) {
        const { token, ...rest } = opts;
        const t = token === undefined ? adminToken : token;
        return instance.fetchJson(`/console/api${p}`, { ...rest, token: t ?? undefined });
      },

      /** Runs SQL against the local D1 (binding DB); returns the rows of the first result. */
      async d1(sql) {
        const DatabaseSync = await databaseSync();
        const file = DatabaseSync && objectSqliteFile(persistDir, 'd1', 'miniflare-D1DatabaseObject');
        if (file) {
          // The first statement's rows, like `wrangler d1 execute --json` (the rest run too).
          return withSqlite(DatabaseSync, file, (db) => {
            const [first, ...rest] = splitStatements(sql);
            const rows = first ? db.prepare(first).all().map(plainRow) : [];
            for (const stmt of rest) db.prepare(stmt).all();
            return rows;
          });
        }
        // A second process on the same SQLite file: the running Worker may hold the write lock
        // for a moment (a usage flush, a console write); SQLITE_BUSY is waited out, not failed.
        let stdout;
        for (let attempt = 1; ; attempt++) {
          try {
            ({ stdout } = await runWrangler(['d1', 'execute', 'DB', '--local', '--persist-to', persistDir, '--json', '--command', sql]));
            break;
          } catch (e) {
            if (attempt >= 5 || !/SQLITE_BUSY|database is locked/.test(String(e?.message))) throw e;
            await new Promise((resolve) => setTimeout(resolve, 250 * attempt));
          }
        }
        const out = parseJsonOutput(stdout, 'd1');
        const first = Array.isArray(out) ? out[0] : out;
        return first?.results ?? [];
      },

      /** Keys of the local KV namespace (binding CACHE): [{ name, expiration?, metadata? }]. */
      async kvKeys() {
        const DatabaseSync = await databaseSync();
        if (DatabaseSync) {
          // As `wrangler kv key list` prints them: expiration in seconds, metadata parsed.
          return kvEntries(DatabaseSync, persistDir).map((e) => ({
            name: e.key,
            ...(e.expiration !== null ? { expiration: Math.floor(e.expiration / 1000) } : {}),
            ...(e.metadata !== null ? { metadata: JSON.parse(e.metadata) } : {}),
          }));
        }
        const { stdout } = await runWrangler(['kv', 'key', 'list', '--binding', 'CACHE', '--local', '--persist-to', persistDir]);
        return parseJsonOutput(stdout, 'kv key list');
      },

      /** Writes a KV key (binding CACHE) as text, e.g. to seed what Flowgate would have cached. */
      async kvPut(key, value) {
        await runWrangler(['kv', 'key', 'put', key, String(value), '--binding', 'CACHE', '--local', '--persist-to', persistDir]);
      },

      /** Value of a KV key as text, or null when absent. */
      async kvGet(key) {
        const DatabaseSync = await databaseSync();
        if (DatabaseSync) {
          const [entry] = kvEntries(DatabaseSync, persistDir, 'AND key = ?', [key]);
          return entry ? kvBlob(persistDir, entry.blob_id) : null;
        }
        // wrangler 4.164: `--text` prints the value plus one "\n"; a missing key prints
        // "Value not found\n" on stdout and still exits 0.
        const { stdout } = await runWrangler([
          'kv', 'key', 'get', key, '--binding', 'CACHE', '--local', '--persist-to', persistDir, '--text',
        ]);
        const value = stdout.endsWith('\n') ? stdout.slice(0, -1) : stdout;
        if (value === 'Value not found') {
          // Disambiguate from a key whose value really is that text.
          const { stdout: listed } = await runWrangler([
            'kv', 'key', 'list', '--binding', 'CACHE', '--local', '--persist-to', persistDir, '--prefix', key,
          ]);
          const exists = parseJsonOutput(listed, 'kv key list').some((k) => k.name === key);
          return exists ? value : null;
        }
        return value;
      },

      /** Relative paths of files under the state dir whose bytes contain needle (UTF-8). */
      stateFilesContaining(needle) {
        const n = Buffer.from(String(needle), 'utf8');
        const hits = [];
        const walk = (dir) => {
          let entries;
          try {
            entries = fs.readdirSync(dir, { withFileTypes: true });
          } catch {
            return;
          }
          for (const e of entries) {
            const full = path.join(dir, e.name);
            if (e.isDirectory()) walk(full);
            else if (e.isFile()) {
              let buf;
              try {
                buf = fs.readFileSync(full);
              } catch {
                continue; // vanished (e.g. a -journal file)
              }
              if (buf.includes(n)) hits.push(path.relative(persistDir, full));
            }
          }
        };
        walk(persistDir);
        return hits.sort();
      },
    };
    return instance;
  } catch (err) {
    if (proc) await proc.stop().catch(() => {});
    removeState();
    removeConfig();
    throw err;
  }
}
