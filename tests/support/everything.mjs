// The reference MCP server, @modelcontextprotocol/server-everything (pinned in package.json), as
// an upstream: one process per transport it offers, each on a free port of 127.0.0.1.
//
//   import { startEverything } from '../support/everything.mjs';
//   const ev = await startEverything();            // both transports
//   ev.streamableHttp.url  // http://127.0.0.1:<port>/mcp  (Streamable HTTP, sessions)
//   ev.sse.url             // http://127.0.0.1:<port>/sse  (legacy HTTP+SSE)
//   await ev.stop();
//
// The server is the package's own CLI (`dist/index.js streamableHttp|sse`, listening on the PORT
// it is given), run in its own process group (harness.startProcessGroup), so nothing outlives a
// test file. Its environment is cut to what it needs, so that its `get-env` tool answers the
// same small object wherever it is called from.

import { createRequire } from 'node:module';
import net from 'node:net';
import path from 'node:path';

import { freePort, repoRoot, startProcessGroup } from './harness.mjs';

const READY_TIMEOUT_MS = 20_000;

/** The CLI of the installed package. */
export function everythingCli() {
  const require = createRequire(path.join(repoRoot, 'package.json'));
  return path.join(path.dirname(require.resolve('@modelcontextprotocol/server-everything/package.json')), 'dist', 'index.js');
}

/** The pinned version, as package.json's devDependencies name it. */
export function everythingVersion() {
  const require = createRequire(path.join(repoRoot, 'package.json'));
  return require('@modelcontextprotocol/server-everything/package.json').version;
}

function accepting(port) {
  return new Promise((resolve) => {
    const s = net.connect({ host: '127.0.0.1', port }, () => {
      s.destroy();
      resolve(true);
    });
    s.once('error', () => resolve(false));
  });
}

/** Starts one transport (`streamableHttp` or `sse`): {url, port, log(), stop()}. */
export async function startEverythingTransport(transport) {
  const port = await freePort();
  const proc = startProcessGroup(process.execPath, [everythingCli(), transport], {
    env: { PATH: process.env.PATH, PORT: String(port), NODE_ENV: 'test' },
    label: `everything-${transport}`,
    unref: true,
    reap: true,
  });
  const deadline = Date.now() + READY_TIMEOUT_MS;
  let exited = false;
  proc.exited.then(() => (exited = true));
  while (!(await accepting(port))) {
    if (exited || Date.now() > deadline) {
      await proc.stop();
      throw new Error(`the everything server (${transport}) did not listen on ${port}:\n${proc.log()}`);
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  const pathname = transport === 'sse' ? '/sse' : '/mcp';
  return { url: `http://127.0.0.1:${port}${pathname}`, port, log: proc.log, stop: () => proc.stop({ graceMs: 1_000 }), exited: proc.exited };
}

/** Starts the server on each transport it offers. */
export async function startEverything() {
  const [streamableHttp, sse] = await Promise.all([startEverythingTransport('streamableHttp'), startEverythingTransport('sse')]);
  return {
    streamableHttp,
    sse,
    stop: () => Promise.allSettled([streamableHttp.stop(), sse.stop()]),
  };
}
