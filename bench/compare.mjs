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
// (/healthz, usually) shows how far apart two equal Workers read on this machine. With
// /healthz among the kinds, also each MCP kind's work: its CPU minus /healthz's in the same
// round (issue 12's measure), where a change of a few tens of µs is a tenth or more.
import fs from 'node:fs';
import path from 'node:path';

import { startDifyFixture } from '../tests/support/dify-fixture.mjs';
import { startBenchFlowgate } from './lib/bench-flowgate.mjs';
import { workerCpuTogether } from './lib/workercpu.mjs';

const other = process.env.COMPARE_WITH;
if (!other || !fs.existsSync(path.join(other, 'build', 'index.js'))) {
  process.stderr.write('compare: set COMPARE_WITH to another checkout whose build/ is made (make build there)\n');
  process.exit(2);
}
const ROUNDS = Number(process.env.COMPARE_ROUNDS ?? 8);
const REQUESTS = Number(process.env.COMPARE_REQUESTS ?? 1500);
const KINDS = (process.env.COMPARE_KINDS ?? 'healthz,tools/list,tools/call').split(',');
const log = (m) => process.stderr.write(`compare: ${m}\n`);

async function main() {
  const dify = await startDifyFixture();
  const sides = [];
  try {
    const rateLimit = process.env.COMPARE_NO_RATELIMIT !== '1';
    sides.push(
      await startBenchFlowgate({ dify, rateLimit, label: 'this checkout' }),
      await startBenchFlowgate({ dify, rateLimit, root: path.resolve(other), label: 'COMPARE_WITH' }),
    );
    const job = (side, kind) => ({ target: side.fg, url: side.requests[kind].url, req: side.requests[kind] });
    const us = { this: {}, other: {} };
    for (let round = 1; round <= ROUNDS; round++) {
      for (const kind of KINDS) {
        const [a, b] = await workerCpuTogether([job(sides[0], kind), job(sides[1], kind)], { requests: REQUESTS, connections: 8, warmup: round === 1 ? 300 : 0, minTicks: 0, maxRounds: 1 });
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
    if (!KINDS.includes('healthz')) return;
    for (const kind of KINDS.filter((k) => k !== 'healthz')) {
      const work = (side) => us[side][kind].map((x, i) => x - us[side].healthz[i]);
      const [a, b] = [work('this'), work('other')];
      console.log(
        `${kind} minus /healthz (MCP work): this ${(sum(a) / a.length).toFixed(0)} µs, other ${(sum(b) / b.length).toFixed(0)} µs per request; ` +
          `this / other ${(sum(a) / sum(b)).toFixed(3)} (rounds ${a.map((x, i) => `${x.toFixed(0)}/${b[i].toFixed(0)}`).join(' ')})`,
      );
    }
  } finally {
    await Promise.allSettled([...sides.map((s) => s.stop()), dify.stop()]);
  }
}

main().then(
  () => process.exit(0),
  (err) => {
    process.stderr.write(`compare: failed: ${err?.stack ?? err}\n`);
    process.exit(1);
  },
);
