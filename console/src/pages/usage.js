// Usage metrics of a server (GET /servers/{id}/usage): totals, a chart of calls and errors per
// step as inline SVG, per-tool figures and the last failures.
import { api } from '../api.js';
import { h, table, when } from '../ui.js';

const RANGES = {
  hour: ['The last hour, per minute', 'minute', 3600],
  day: ['The last day, per hour', 'hour', 86400],
  week: ['The last week, per hour', 'hour', 7 * 86400],
};

/** A select of every server; `id` is the chosen one (the first when none is named). */
export async function serverPicker(current, onChange) {
  const { data } = await api('/servers');
  if (!data.length) {
    return { id: null, element: h('p', {}, 'No server yet. ', h('a', { href: '#/servers/publish' }, 'Publish one'), ' first.') };
  }
  const id = data.some((s) => s.id === current) ? current : data[0].id;
  const sel = h('select', { id: 'server-pick', onchange: (e) => onChange(e.target.value) },
    data.map((s) => h('option', { value: s.id }, s.name)));
  sel.value = id;
  return { id, element: h('div', { class: 'field inline' }, h('label', { for: 'server-pick' }, 'Server'), sel) };
}

export async function usagePage(section, { args, query, refresh }) {
  const picker = await serverPicker(args[0], (id) => (location.hash = `#/usage/${id}?range=${range}`));
  section.append(picker.element);
  if (!picker.id) return;
  const range = RANGES[query.get('range')] ? query.get('range') : 'hour';
  const [label, step, seconds] = RANGES[range];
  const rangeSel = h('select', { id: 'range-pick', onchange: (e) => (location.hash = `#/usage/${picker.id}?range=${e.target.value}`) },
    Object.entries(RANGES).map(([k, [l]]) => h('option', { value: k }, l)));
  rangeSel.value = range;
  const to = Math.floor(Date.now() / 1000);
  const u = await api(`/servers/${picker.id}/usage?step=${step}&from=${to - seconds}&to=${to}`);
  const t = u.total;
  const ms = (v) => (v === null || v === undefined ? '—' : `${Math.round(v)} ms`);
  section.append(
    h('div', { class: 'row' },
      h('div', { class: 'field inline' }, h('label', { for: 'range-pick' }, 'Range'), rangeSel),
      h('button', { type: 'button', id: 'usage-refresh', onclick: refresh }, 'Refresh')),
    h('dl', { class: 'totals', id: 'usage-totals', 'data-calls': t.calls, 'data-errors': t.errors },
      [['Calls', t.calls], ['Errors', t.errors], ['Streamed', t.streamed], ['p50', ms(t.p50_ms)], ['p95', ms(t.p95_ms)],
        ['Callers', `${t.callers}${t.callers_capped ? '+' : ''}`]]
        .map(([k, v]) => h('div', {}, h('dt', {}, k), h('dd', {}, v)))),
    h('figure', { class: 'chart' }, chart(t.series, step), h('figcaption', {}, `${label}: calls (bars) and errors (red). Each Worker isolate writes its counts ${u.flush_seconds > 0 ? `at most every ${u.flush_seconds} s` : 'after every request'}; this page writes its own first.`)),
    table([
      ['Tool', (r) => r.tool],
      ['Calls', (r) => r.calls],
      ['Errors', (r) => r.errors],
      ['p50', (r) => ms(r.p50_ms)],
      ['p95', (r) => ms(r.p95_ms)],
    ], u.tools, 'Per tool'),
    table([
      ['When', (f) => when(f.at)],
      ['Tool', (f) => f.tool],
      ['Message', (f) => f.message],
    ], u.failures, 'Last failures'));
}

const SVG = 'http://www.w3.org/2000/svg';
function s(tag, attrs = {}, ...children) {
  const el = document.createElementNS(SVG, tag);
  for (const [k, v] of Object.entries(attrs)) el.setAttribute(k, String(v));
  for (const c of children) el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  return el;
}

/** Bars of calls with errors over them; scales to its box (viewBox), no script, no inline style. */
function chart(series, step) {
  const W = 600, H = 200, L = 36, B = 22, T = 8;
  const max = Math.max(1, ...series.map((p) => p.calls));
  const bw = (W - L) / Math.max(1, series.length);
  const y = (v) => T + (H - T - B) * (1 - v / max);
  const total = series.reduce((a, p) => a + p.calls, 0);
  const errors = series.reduce((a, p) => a + p.errors, 0);
  const svg = s('svg', { viewBox: `0 0 ${W} ${H}`, role: 'img', 'aria-labelledby': 'chart-title', id: 'usage-chart', 'data-calls': total },
    s('title', { id: 'chart-title' }, `${total} calls, ${errors} errors, per ${step}`),
    s('line', { x1: L, y1: H - B, x2: W, y2: H - B, class: 'axis' }),
    s('text', { x: L - 4, y: T + 8, class: 'tick end' }, max),
    s('text', { x: L - 4, y: H - B, class: 'tick end' }, 0));
  series.forEach((p, i) => {
    const x = L + i * bw + bw * 0.1;
    const w = Math.max(1, bw * 0.8);
    if (p.calls) svg.append(s('rect', { x, y: y(p.calls), width: w, height: H - B - y(p.calls), class: 'bar' }, s('title', {}, `${when(p.t)}: ${p.calls} calls, ${p.errors} errors`)));
    if (p.errors) svg.append(s('rect', { x, y: y(p.errors), width: w, height: H - B - y(p.errors), class: 'bar err' }));
  });
  if (series.length) {
    const fmt = (t) => when(t).slice(step === 'minute' ? 11 : 5, 16);
    svg.append(s('text', { x: L, y: H - 6, class: 'tick' }, fmt(series[0].t)), s('text', { x: W, y: H - 6, class: 'tick end' }, fmt(series.at(-1).t)));
  }
  return svg;
}
