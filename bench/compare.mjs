// `make compare`: Worker CPU per request of this checkout's Flowgate, loaded at once with the
// reference Workers (the SDK peer, the floor and the hello-world workers-rs Worker) and, with
// COMPARE_WITH, another checkout's build. For deciding whether a change saves CPU and how far a
// build is from the floor: on a shared VM one Worker's CPU per request moves by ±20 % between
// two measurements a minute apart, so alternating runs (`make profile PROFILE_MODE=cpu`) cannot
// see a 5 % change; Workers loaded at once over the same window (bench/lib/workercpu.mjs,
// workerCpuTogether) see the machine alike, and two identical builds read within ±5 % of each
// other.
//
//   COMPARE_WITH      another checkout (a `git worktree`, say) with its build/ made (`make build`)
//   COMPARE_ENTRIES   how each Flowgate runs: `deployed` (worker/entry.mjs, no assets: what
//                     `wrangler deploy` uploads), `dev` (wrangler.dev.toml: worker/dev.mjs, DEMO=true,
//                     the console's files, no asset router: what `make dev` runs), or both, comma-separated
//                     (default deployed): one Flowgate per checkout and entry
//   COMPARE_REFERENCES which reference Workers to load too (default peer,floor,hello-rs; `none`)
//   COMPARE_ROUNDS (default 8), COMPARE_REQUESTS per Worker and round (default 1500),
//   COMPARE_KINDS (default healthz,tools/list,tools/call), COMPARE_NO_RATELIMIT=1: every
//   Flowgate without the rate-limit binding.
//
// Prints, per request kind, each Worker's mean CPU per request and its ratio to the floor's
// (over all rounds, and the range of the rounds' ratios); with /healthz among the kinds, each
// MCP kind's work (its CPU minus /healthz's in the same round, issue 12's measure) and the work
// above the floor's (issue 44's: Flowgate's against the peer's); with COMPARE_WITH, this / other
// per kind and entry. A kind whose code neither build changed (/healthz, usually) shows how far
// apart two equal Workers read on this machine.
import fs from 'node:fs';
import path from 'node:path';

import { startDifyFixture } from '../tests/support/dify-fixture.mjs';
import { REFERENCES, startBenchFlowgate, startReferences } from './lib/bench-flowgate.mjs';
import { workerCpuTogether } from './lib/workercpu.mjs';
import { ENTRIES } from './lib/workers.mjs';

const other = process.env.COMPARE_WITH;
if (other && !fs.existsSync(path.join(other, 'build', 'index.js'))) {
  process.stderr.write('compare: COMPARE_WITH must be another checkout whose build/ is made (make build there)\n');
  process.exit(2);
}
const list = (name, dflt) => (process.env[name] ?? dflt).split(',').map((s) => s.trim()).filter((s) => s && s !== 'none');
const ROUNDS = Number(process.env.COMPARE_ROUNDS ?? 8);
const REQUESTS = Number(process.env.COMPARE_REQUESTS ?? 1500);
const KINDS = list('COMPARE_KINDS', 'healthz,tools/list,tools/call');
const ENTRY_LIST = list('COMPARE_ENTRIES', 'deployed');
const REFERENCE_LIST = list('COMPARE_REFERENCES', REFERENCES.join(','));
for (const e of ENTRY_LIST) if (!ENTRIES.includes(e)) throw new Error(`COMPARE_ENTRIES: unknown entry ${e} (${ENTRIES.join(', ')})`);
const log = (m) => process.stderr.write(`compare: ${m}\n`);

const sum = (v) => v.reduce((x, y) => x + y, 0);
const mean = (v) => sum(v) / v.length;
const median = (v) => [...v].sort((x, y) => x - y)[Math.floor(v.length / 2)];
const range = (v) => `${Math.min(...v).toFixed(2)}–${Math.max(...v).toFixed(2)}`;
const us = (v) => `${v.toFixed(0)} µs`;

async function main() {
  const dify = await startDifyFixture();
  const workers = [];
  try {
    const rateLimit = process.env.COMPARE_NO_RATELIMIT !== '1';
    let apiKey;
    for (const [side, root] of [['this', undefined], ...(other ? [['other', path.resolve(other)]] : [])]) {
      for (const entry of ENTRY_LIST) {
        const name = `${side}${ENTRY_LIST.length > 1 || entry !== 'deployed' ? ` (${entry})` : ''}`;
        const b = await startBenchFlowgate({ dify, rateLimit, root, entry, label: name });
        workers.push({ name, side, entry, flowgate: true, target: b.fg, requests: b.requests, stop: b.stop });
        apiKey ??= b.apiKey;
      }
    }
    if (REFERENCE_LIST.length) workers.push(...(await startReferences({ dify, apiKey, names: REFERENCE_LIST })));
    log(`loaded at once: ${workers.map((w) => w.name).join(', ')}`);

    // cpu[worker name][kind] = µs per request, one per round.
    const cpu = Object.fromEntries(workers.map((w) => [w.name, {}]));
    for (let round = 1; round <= ROUNDS; round++) {
      for (const kind of KINDS) {
        const jobs = workers.map((w) => ({ target: w.target, url: w.requests[kind].url, req: w.requests[kind] }));
        const measured = await workerCpuTogether(jobs, { requests: REQUESTS, connections: 8, warmup: round === 1 ? 300 : 0, minTicks: 0, maxRounds: 1 });
        measured.forEach((c, i) => {
          if (c.bad) log(`${workers[i].name} ${kind}: ${c.bad} bad answers (${c.firstBad})`);
          (cpu[workers[i].name][kind] ??= []).push(c.us.measured);
        });
      }
      log(`round ${round}/${ROUNDS}: ${KINDS.map((k) => `${k} ${workers.map((w) => cpu[w.name][k].at(-1).toFixed(0)).join(' / ')} µs`).join(', ')} (${workers.map((w) => w.name).join(' / ')})`);
    }
    report(workers, cpu);
  } finally {
    await Promise.allSettled([...workers.map((w) => w.stop()), dify.stop()]);
  }
}

function report(workers, cpu) {
  const hasFloor = Boolean(cpu.floor);
  const realKinds = (w) => (w.name === 'hello-rs' ? ['healthz'] : KINDS);
  console.log(`# Worker CPU per request, ${ROUNDS} rounds of ${REQUESTS} requests per Worker and kind, all loaded at once`);
  for (const kind of KINDS) {
    console.log(`\n${kind}:`);
    for (const w of workers.filter((x) => realKinds(x).includes(kind))) {
      const v = cpu[w.name][kind];
      let line = `  ${w.name.padEnd(16)} ${us(mean(v)).padStart(8)}`;
      if (hasFloor && w.name !== 'floor') {
        const f = cpu.floor[kind];
        line += `   / floor ${(sum(v) / sum(f)).toFixed(2)}× (rounds ${range(v.map((x, i) => x / f[i]))})`;
      }
      console.log(line);
    }
  }
  if (KINDS.includes('healthz')) {
    // The MCP work: a kind's CPU minus /healthz's in the same round; above the floor: minus the
    // floor's work too (the runtime's part of an MCP request, which every Worker pays).
    const work = (name, kind) => cpu[name][kind].map((x, i) => x - cpu[name].healthz[i]);
    for (const kind of KINDS.filter((k) => k !== 'healthz')) {
      console.log(`\n${kind} minus /healthz (MCP work)${hasFloor ? ', and above the floor\'s work' : ''}:`);
      const floorWork = hasFloor ? work('floor', kind) : null;
      const peerAbove = cpu.peer && floorWork ? work('peer', kind).map((x, i) => x - floorWork[i]) : null;
      for (const w of workers.filter((x) => realKinds(x).includes(kind))) {
        const a = work(w.name, kind);
        let line = `  ${w.name.padEnd(16)} ${us(mean(a)).padStart(8)}`;
        if (floorWork && w.name !== 'floor') {
          const above = a.map((x, i) => x - floorWork[i]);
          line += `   above the floor ${us(mean(above)).padStart(8)}`;
          if (peerAbove && w.name !== 'peer') line += `   / the peer's ${(sum(above) / sum(peerAbove)).toFixed(2)}× (rounds ${range(above.map((x, i) => x / peerAbove[i]))})`;
        }
        console.log(line);
      }
    }
  }
  if (!other) return;
  console.log('\nthis / other:');
  for (const entry of ENTRY_LIST) {
    const [a, b] = ['this', 'other'].map((side) => workers.find((w) => w.side === side && w.entry === entry).name);
    for (const kind of KINDS) {
      const ratios = cpu[a][kind].map((x, i) => x / cpu[b][kind][i]);
      console.log(
        `  ${entry} ${kind}: this ${us(mean(cpu[a][kind]))}, other ${us(mean(cpu[b][kind]))} per request; ` +
          `this / other ${(sum(cpu[a][kind]) / sum(cpu[b][kind])).toFixed(3)} (median of rounds ${median(ratios).toFixed(3)}; rounds ${ratios.map((r) => r.toFixed(2)).join(' ')})`,
      );
    }
    if (!KINDS.includes('healthz')) continue;
    for (const kind of KINDS.filter((k) => k !== 'healthz')) {
      const work = (name) => cpu[name][kind].map((x, i) => x - cpu[name].healthz[i]);
      const [wa, wb] = [work(a), work(b)];
      console.log(
        `  ${entry} ${kind} minus /healthz (MCP work): this ${us(mean(wa))}, other ${us(mean(wb))} per request; ` +
          `this / other ${(sum(wa) / sum(wb)).toFixed(3)} (rounds ${wa.map((x, i) => `${x.toFixed(0)}/${wb[i].toFixed(0)}`).join(' ')})`,
      );
    }
  }
}

main().then(
  () => process.exit(0),
  (err) => {
    process.stderr.write(`compare: failed: ${err?.stack ?? err}\n`);
    process.exit(1);
  },
);
