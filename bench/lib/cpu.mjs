// How much of the machine's CPU went to processes other than the bench's own while a
// measurement ran: the bench shares the machine, and a busy neighbour skews every number.
//
//   const m = cpuMeter(() => [fg.pgid, peer.pgid]);   // process groups that belong to the bench
//   ... measure ...
//   m.stop() → { busy, ours, foreign }   (shares of all CPUs over the interval, 0..1)
//
// `busy` is from /proc/stat (every process, short-lived ones too); `ours` is this process and
// its reaped children (wrk) plus every process in the given groups (wrangler, workerd);
// `foreign` = busy − ours.
//
//   cpuTicks(pids) → total CPU time (utime + stime, all threads) of those processes so far, in
//   ticks of 1 / TICKS_PER_S s; processes that vanished count 0.
import fs from 'node:fs';

export const TICKS_PER_S = 100; // USER_HZ (CLK_TCK) on Linux

function machineTicks() {
  const f = fs.readFileSync('/proc/stat', 'utf8').split('\n')[0].trim().split(/\s+/).slice(1).map(Number);
  const [user, nice, system, idle, iowait, irq, softirq, steal] = f;
  const busy = user + nice + system + irq + softirq + steal;
  return { busy, total: busy + idle + iowait };
}

function procTicks(pid, withChildren = false) {
  try {
    const stat = fs.readFileSync(`/proc/${pid}/stat`, 'utf8');
    const fields = stat.slice(stat.lastIndexOf(')') + 2).split(' ');
    // fields[0] is field 3 (state): utime 14, stime 15, cutime 16, cstime 17, pgrp 5.
    const t = Number(fields[11]) + Number(fields[12]) + (withChildren ? Number(fields[13]) + Number(fields[14]) : 0);
    return { t, pgrp: Number(fields[2]) };
  } catch {
    return null;
  }
}

export function cpuTicks(pids) {
  let total = 0;
  for (const pid of pids) total += procTicks(pid)?.t ?? 0;
  return total;
}

function groupTicks(pgids) {
  const want = new Set(pgids);
  const per = new Map();
  for (const name of fs.readdirSync('/proc')) {
    if (!/^\d+$/.test(name)) continue;
    const p = procTicks(name);
    if (p && want.has(p.pgrp)) per.set(name, p.t);
  }
  return per;
}

export function cpuMeter(groups) {
  const m0 = machineTicks();
  const self0 = procTicks('self', true).t;
  const g0 = groupTicks(groups());
  return {
    stop() {
      const m1 = machineTicks();
      const self1 = procTicks('self', true).t;
      const g1 = groupTicks(groups());
      let ours = self1 - self0;
      for (const [pid, t] of g1) ours += t - (g0.get(pid) ?? 0);
      const total = m1.total - m0.total || 1;
      const busy = (m1.busy - m0.busy) / total;
      const share = Math.min(ours / total, busy);
      return { busy, ours: share, foreign: Math.max(0, busy - share), seconds: (m1.total - m0.total) / TICKS_PER_S / (fs.readFileSync('/proc/stat', 'utf8').match(/^cpu\d+ /gm)?.length || 1) };
    },
  };
}
