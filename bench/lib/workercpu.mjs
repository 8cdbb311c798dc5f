// Worker CPU per request: the CPU time (utime + stime, /proc/<pid>/stat) that the workerd process
// running a Worker spends on a fixed number of requests.
//
//   const c = await workerCpu(target, url, req, { requests: 2000, connections: 16, ... });
//   c.us.measured → CPU µs per request of the Worker's workerd (or of all of them, !c.identified)
//
//   const [f, p] = await workerCpuTogether([{ target, url, req }, { target: peer, ... }], opts);
//   the same for two Workers loaded at once, over the same window: a ratio of the two is then
//   not moved by the machine's speed drifting between two measurements (on a shared VM the same
//   Worker's CPU per request moved by ±20 % between runs a minute apart; measured together, the
//   ratio of two identical Workers stayed within ±5 %).
//
// `target` is what startWorker (workers.mjs) returns; `req` is {method, headers, body, expect}
// as for the wrk spec files of run.mjs.
import { cpuMeter, cpuTicks, TICKS_PER_S } from './cpu.mjs';

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/**
 * Sends `count` copies of a request from `connections` concurrent loops (Node's fetch,
 * keep-alive) and checks every answer as bench/wrk/request.lua does (status 200, every expected
 * text in the body): {requests, bad, firstBad}.
 */
export async function sendFixed(url, req, count, connections) {
  const method = req.method ?? 'POST';
  const body = method === 'GET' ? undefined : typeof req.body === 'string' ? req.body : JSON.stringify(req.body);
  const expect = req.expect ?? [];
  let sent = 0;
  let bad = 0;
  let firstBad = '';
  const loop = async () => {
    while (sent < count) {
      sent += 1;
      try {
        const res = await fetch(url, { method, headers: req.headers, body, signal: AbortSignal.timeout(60_000) });
        const text = await res.text();
        if (res.status !== 200 || !expect.every((e) => text.includes(e))) {
          bad += 1;
          firstBad ||= `${res.status} ${text.slice(0, 300)}`;
        }
      } catch (e) {
        bad += 1;
        firstBad ||= String(e?.message ?? e);
      }
    }
  };
  await Promise.all(Array.from({ length: Math.max(1, Math.min(connections, count)) }, loop));
  return { requests: count, bad, firstBad };
}

/**
 * The CPU a target's workerd processes spend per request. The process that runs the Worker is
 * measured on its own when its command line tells it from wrangler's proxy (workerdRoles);
 * otherwise every workerd of that `wrangler dev` is summed (`identified: false`). After `warmup`
 * requests and `beforeMeasuring()` (e.g. waiting for a quiet machine), rounds of `requests` at
 * `connections` concurrent go on until the measured processes took `minTicks` ticks (at most
 * `maxRounds` rounds). `groups()` names the bench's own process groups, for the share of the
 * machine other processes took meanwhile (`foreign`).
 *
 * Returns {requests, connections, warmup, bad, firstBad, seconds, identified, roles,
 * ticks: {worker, proxy, all, measured}, us: {same, per request}, foreign}.
 */
export async function workerCpu(target, url, req, opts) {
  return (await workerCpuTogether([{ target, url, req }], opts))[0];
}

/**
 * workerCpu for several `jobs` ({target, url, req}) at once: every round sends `requests` to each
 * Worker concurrently (`connections` each), and rounds go on until every one's measured
 * processes took `minTicks`; each Worker's ticks are read over the same window. One result per
 * job, in order.
 */
export async function workerCpuTogether(jobs, opts) {
  const { requests: round = 2000, connections = 16, warmup = 200, minTicks = 200, maxRounds = 5, groups = () => [], beforeMeasuring = async () => {} } = opts;
  const each = jobs.map(({ target }) => {
    const roles = target.workerdRoles();
    const all = [...roles.worker, ...roles.proxy, ...roles.unknown];
    if (!all.length) throw new Error(`${target.name ?? target.url}: no workerd process found in its process group`);
    const identified = roles.worker.length === 1 && roles.proxy.length === 1 && roles.unknown.length === 0;
    const sets = { worker: roles.worker, proxy: roles.proxy, all, measured: identified ? roles.worker : all };
    return { roles, identified, sets, requests: 0, bad: 0, firstBad: '' };
  });
  if (warmup > 0) await Promise.all(jobs.map(({ url, req }) => sendFixed(url, req, warmup, connections)));
  await beforeMeasuring();
  for (const e of each) e.before = Object.fromEntries(Object.entries(e.sets).map(([k, pids]) => [k, cpuTicks(pids)]));
  const meter = cpuMeter(groups);
  const started = performance.now();
  let rounds = 0;
  do {
    const sent = await Promise.all(jobs.map(({ url, req }) => sendFixed(url, req, round, connections)));
    sent.forEach((r, i) => {
      each[i].requests += r.requests;
      each[i].bad += r.bad;
      each[i].firstBad ||= r.firstBad;
    });
    rounds += 1;
    // Work a Worker does after answering (waitUntil) belongs to the request too.
    await sleep(300);
  } while (each.some((e) => cpuTicks(e.sets.measured) - e.before.measured < minTicks) && rounds < maxRounds);
  const seconds = (performance.now() - started) / 1000;
  const { foreign } = meter.stop();
  return each.map((e) => {
    const ticks = Object.fromEntries(Object.entries(e.sets).map(([k, pids]) => [k, cpuTicks(pids) - e.before[k]]));
    const us = Object.fromEntries(Object.entries(ticks).map(([k, t]) => [k, (t * 1e6) / TICKS_PER_S / e.requests]));
    const { requests, bad, firstBad, identified, roles } = e;
    return { requests, connections, warmup, together: jobs.length, bad, firstBad, seconds, identified, roles, ticks, us, foreign };
  });
}

/**
 * Several measurements of one target and request (workerCpu, taken at different times) as one:
 * requests, ticks and seconds summed, the CPU per request over them all; `foreign` the worst.
 */
export function combineCpu(parts) {
  const sum = (f) => parts.reduce((a, p) => a + f(p), 0);
  const requests = sum((p) => p.requests);
  const ticks = Object.fromEntries(Object.keys(parts[0].ticks).map((k) => [k, sum((p) => p.ticks[k])]));
  const us = Object.fromEntries(Object.entries(ticks).map(([k, t]) => [k, (t * 1e6) / TICKS_PER_S / requests]));
  return {
    ...parts[0],
    passes: parts.length,
    // Each pass's own CPU per request (the spread within one run, beside the sum).
    passUs: parts.map((p) => p.us.measured),
    requests,
    bad: sum((p) => p.bad),
    firstBad: parts.map((p) => p.firstBad).find(Boolean) ?? '',
    seconds: sum((p) => p.seconds),
    identified: parts.every((p) => p.identified),
    ticks,
    us,
    foreign: Math.max(...parts.map((p) => p.foreign)),
  };
}
