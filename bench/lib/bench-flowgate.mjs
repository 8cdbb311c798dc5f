// One Flowgate with the bench's workflow app published, for `make profile` (bench/profile.mjs)
// and `make compare` (bench/compare.mjs): a snapshot of a checkout's build (workers.mjs), fresh
// local state, and the requests both send (/healthz, tools/list, a blocking tools/call).
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { publish, registerApp } from '../../tests/support/flowgate-setup.mjs';
import { applyMigrations, checkHelloBuilt, floorConfig, getOk, helloConfig, initializeOk, peerConfig, snapshotFlowgate, startWorker } from './workers.mjs';

const ADMIN_TOKEN = 'bench-admin-token-for-local-runs-only';
const SECRETS_KEY = '00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff';

/** The MCP request headers the bench's clients send. */
export const MCP_HEADERS = { 'Content-Type': 'application/json', Accept: 'application/json, text/event-stream', 'MCP-Protocol-Version': '2025-06-18' };

/** A tools/call of the bench's app (`_meta` for a streamed one with progress). */
export const toolsCall = (meta) => ({ jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'Bench_Flow', arguments: { text: 'hello' }, ...(meta ? { _meta: meta } : {}) } });

/**
 * Starts Flowgate from `root`'s checkout (default this one; `build`: another build/ in its
 * place) behind the fake Dify `dify`, with the bench's app of `nodeCount` nodes published;
 * `entry`: `deployed` or `dev` (snapshotFlowgate in workers.mjs).
 * Returns {fg, mcpUrl, apiKey, requests, snapDir, stop()}: `requests` maps healthz, tools/list
 * and tools/call to {url, method, headers, body, expect} (workercpu.mjs's request form);
 * `apiKey` is the fake Dify app's key (for the reference Workers).
 */
export async function startBenchFlowgate({ dify, root, build, rateLimit = true, entry = 'deployed', nodeCount = 1, label = 'flowgate' }) {
  const snap = snapshotFlowgate({ rateLimit, root, entry });
  if (build) {
    fs.rmSync(path.join(snap.dir, 'build'), { recursive: true, force: true });
    fs.cpSync(build, path.join(snap.dir, 'build'), { recursive: true, filter: (s) => !s.includes(`${path.sep}.tmp`) });
  }
  const persistDir = fs.mkdtempSync(path.join(os.tmpdir(), 'flowgate-bench-state-'));
  let fg;
  const stop = async () => {
    await fg?.stop();
    snap.remove();
    fs.rmSync(persistDir, { recursive: true, force: true });
  };
  try {
    await applyMigrations(snap.config, persistDir);
    fg = await startWorker({ config: snap.config, persistDir, vars: { ADMIN_TOKEN, ALLOW_PRIVATE_BACKENDS: 'true', SECRETS_KEY, ...snap.vars }, probe: getOk('/healthz'), label });
    const form = [{ 'text-input': { variable: 'text', label: 'Text', required: true, max_length: 1000 } }];
    const nodes = Array.from({ length: nodeCount }, (_, i) => ({ title: `Step ${i + 1}`, type: i === nodeCount - 1 ? 'llm' : 'code' }));
    const { app, apiKey } = await registerApp(fg, dify, { mode: 'workflow', name: 'Bench Flow', form, nodes, outputs: [{ variable: 'echo', type: 'object' }] });
    const { code } = await publish(fg, app.id, { description: 'Summarises text', parameters: { text: 'The text to summarise' } });
    const mcpUrl = `${fg.url}/mcp/server/${code}/mcp`;
    const requests = {
      healthz: { url: `${fg.url}/healthz`, method: 'GET', headers: {}, expect: ['ok'] },
      'tools/list': { url: mcpUrl, headers: MCP_HEADERS, body: { jsonrpc: '2.0', id: 1, method: 'tools/list' }, expect: ['Bench_Flow'] },
      'tools/call': { url: mcpUrl, headers: { ...MCP_HEADERS, Accept: 'application/json' }, body: toolsCall(), expect: ['"result"'] },
    };
    return { fg, mcpUrl, apiKey, requests, snapDir: snap.dir, stop };
  } catch (e) {
    await stop();
    throw e;
  }
}

/** The reference Workers the benchmarks load at once with Flowgate, in the order they report them. */
export const REFERENCES = ['peer', 'floor', 'hello-rs'];

/**
 * Starts the reference Workers `names` (REFERENCES) behind the fake Dify `dify` and its app
 * `apiKey` (the one a bench Flowgate published): the SDK peer (bench/peer), the floor
 * (bench/floor: the same requests with no MCP) and the hello-world workers-rs Worker
 * (bench/hello-rs: `GET /healthz` only). Returns [{name, target, requests, stop()}] in the
 * order of `names`, `requests` keyed like startBenchFlowgate's. The hello-world Worker answers
 * no MCP: its requests of every kind are its `/healthz`, so that it loads the machine alike in
 * every round (the Workers' CPU per request depends on how busy the machine is); only its
 * `/healthz` rounds are its numbers.
 */
export async function startReferences({ dify, apiKey, names = REFERENCES }) {
  const vars = { BACKEND_BASE_URL: dify.baseUrl, BACKEND_API_KEY: apiKey };
  if (names.includes('hello-rs')) checkHelloBuilt();
  const started = [];
  try {
    for (const name of names) {
      const config = { peer: peerConfig, floor: floorConfig, 'hello-rs': helloConfig }[name];
      if (!config) throw new Error(`unknown reference Worker ${name} (${REFERENCES.join(', ')})`);
      const target = await startWorker({ config, vars: name === 'hello-rs' ? {} : vars, probe: name === 'peer' ? initializeOk('/mcp') : getOk('/healthz'), label: name });
      const healthz = { url: `${target.url}/healthz`, method: 'GET', headers: {}, expect: ['ok'] };
      const mcp = `${target.url}/mcp`;
      // The SDK's transport refuses a POST that does not accept both types; it answers JSON anyway.
      const headers = { ...MCP_HEADERS };
      const requests =
        name === 'hello-rs'
          ? { healthz, 'tools/list': healthz, 'tools/call': healthz }
          : {
              healthz,
              'tools/list': { url: mcp, headers, body: { jsonrpc: '2.0', id: 1, method: 'tools/list' }, expect: ['Bench_Flow'] },
              'tools/call': { url: mcp, headers, body: toolsCall(), expect: ['"result"'] },
            };
      started.push({ name, target, requests, stop: () => target.stop() });
    }
    return started;
  } catch (e) {
    await Promise.allSettled(started.map((s) => s.stop()));
    throw e;
  }
}
