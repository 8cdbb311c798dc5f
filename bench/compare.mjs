// `make compare COMPARE_WITH=<checkout>`: this checkout's Worker against another build of it,
// Worker CPU per request, both loaded at once. For deciding whether a change saves CPU: on a
// shared VM one Worker's CPU per request moves by ±20 % between two measurements a minute apart,
// so alternating runs (`make profile PROFILE_MODE=cpu`) cannot see a 5 % change; two Workers
// loaded at once over the same window (bench/lib/workercpu.mjs, workerCpuTogether) see the
// machine alike, and two identical builds read within ±5 % of each other.
//
//   COMPARE_WITH  another checkout (a `git worktree`, say) with its build/ made (`make build`)
//   COMPARE_ROUNDS (default 8), COMPARE_REQUESTS per Worker and round (default 1500),
//   COMPARE_KINDS (default healthz,tools/list,tools/call), COMPARE_NO_RATELIMIT=1: both
//   without the rate-limit binding.
//
// Prints, per request kind, each one's mean CPU per request and the ratio this / other per
// round, its median and the ratio of the sums. A kind whose code neither build changed
// (/healthz, usually) shows how far apart two equal Workers read on this machine.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { startDifyFixture } from '../tests/support/dify-fixture.mjs';
import { publish, registerApp } from '../tests/support/flowgate-setup.mjs';
import { workerCpuTogether } from './lib/workercpu.mjs';
import { applyMigrations, getOk, snapshotFlowgate, startWorker } from './lib/workers.mjs';

const other = process.env.COMPARE_WITH;
if (!other || !fs.existsSync(path.join(other, 'build', 'index.js'))) {
  process.stderr.write('compare: set COMPARE_WITH to another checkout whose build/ is made (make build there)\n');
  process.exit(2);
}
const ROUNDS = Number(process.env.COMPARE_ROUNDS ?? 8);
const REQUESTS = Number(process.env.COMPARE_REQUESTS ?? 1500);
const KINDS = (process.env.COMPARE_KINDS ?? 'healthz,tools/list,tools/call').split(',');
const ADMIN_TOKEN = 'bench-admin-token-for-local-runs-only';
const SECRETS_KEY = '00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff';
const log = (m) => process.stderr.write(`compare: ${m}\n`);

/** One Flowgate from `root`'s build, with the bench's one-node workflow published. */
async function start(root, label, dify) {
  const snap = snapshotFlowgate({ rateLimit: process.env.COMPARE_NO_RATELIMIT !== '1', root });
  const persistDir = fs.mkdtempSync(path.join(os.tmpdir(), 'flowgate-compare-'));
  await applyMigrations(snap.config, persistDir);
  const fg = await startWorker({ config: snap.config, persistDir, vars: { ADMIN_TOKEN, ALLOW_PRIVATE_BACKENDS: 'true', SECRETS_KEY }, probe: getOk('/healthz'), label });
  const form = [{ 'text-input': { variable: 'text', label: 'Text', required: true, max_length: 1000 } }];
  const { app } = await registerApp(fg, dify, { mode: 'workflow', name: 'Bench Flow', form, nodes: [{ title: 'Step 1', type: 'llm' }], outputs: [{ variable: 'echo', type: 'object' }] });
  const { code } = await publish(fg, app.id, { description: 'Summarises text', parameters: { text: 'The text to summarise' } });
  const mcp = `${fg.url}/mcp/server/${code}/mcp`;
  const headers = { 'Content-Type': 'application/json', Accept: 'application/json, text/event-stream', 'MCP-Protocol-Version': '2025-06-18' };
  const requests = {
    healthz: { url: `${fg.url}/healthz`, req: { method: 'GET', headers: {}, expect: ['ok'] } },
    'tools/list': { url: mcp, req: { headers, body: { jsonrpc: '2.0', id: 1, method: 'tools/list' }, expect: ['Bench_Flow'] } },
    'tools/call': { url: mcp, req: { headers: { ...headers, Accept: 'application/json' }, body: { jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'Bench_Flow', arguments: { text: 'hello' } } }, expect: ['"result"'] } },
  };
  return { fg, job: (kind) => ({ target: fg, ...requests[kind] }), remove: snap.remove };
}

async function main() {
  const dify = await startDifyFixture();
  const sides = [];
  try {
    sides.push(await start(undefined, 'this checkout', dify), await start(path.resolve(other), 'COMPARE_WITH', dify));
    const us = { this: {}, other: {} };
    for (let round = 1; round <= ROUNDS; round++) {
      for (const kind of KINDS) {
        const [a, b] = await workerCpuTogether([sides[0].job(kind), sides[1].job(kind)], { requests: REQUESTS, connections: 8, warmup: round === 1 ? 300 : 0, minTicks: 0, maxRounds: 1 });
        for (const c of [a, b]) if (c.bad) log(`${kind}: ${c.bad} bad answers (${c.firstBad})`);
        (us.this[kind] ??= []).push(a.us.measured);
        (us.other[kind] ??= []).push(b.us.measured);
      }
      log(`round ${round}/${ROUNDS}: ${KINDS.map((k) => `${k} ${us.this[k].at(-1).toFixed(0)} / ${us.other[k].at(-1).toFixed(0)} µs`).join(', ')}`);
    }
    const sum = (v) => v.reduce((x, y) => x + y, 0);
    const median = (v) => [...v].sort((x, y) => x - y)[Math.floor(v.length / 2)];
    for (const kind of KINDS) {
      const [a, b] = [us.this[kind], us.other[kind]];
      const ratios = a.map((x, i) => x / b[i]);
      console.log(
        `${kind}: this ${(sum(a) / a.length).toFixed(0)} µs, other ${(sum(b) / b.length).toFixed(0)} µs per request; ` +
          `this / other ${(sum(a) / sum(b)).toFixed(3)} (median of rounds ${median(ratios).toFixed(3)}; rounds ${ratios.map((r) => r.toFixed(2)).join(' ')})`,
      );
    }
  } finally {
    await Promise.allSettled([...sides.map((s) => s.fg.stop()), dify.stop()]);
    for (const s of sides) s.remove();
  }
}

main().then(
  () => process.exit(0),
  (err) => {
    process.stderr.write(`compare: failed: ${err?.stack ?? err}\n`);
    process.exit(1);
  },
);
