// The call log of a server (GET /servers/{id}/calls): its recent tool calls, successes included,
// filtered by tool, caller and status; whether it keeps arguments and results.
import { api } from '../api.js';
import { announce, field, form, h, input, select, table, when } from '../ui.js';
import { serverPicker } from './usage.js';

const STATUSES = [['', 'any'], ['ok', 'ok'], ['tool_error', 'tool error'], ['error', 'JSON-RPC error'], ['gone', 'client went away']];
const FILTERS = ['tool', 'caller', 'status'];

export async function callLogPage(section, { args, query, refresh }) {
  const picker = await serverPicker(args[0], (id) => (location.hash = `#/calls/${id}`));
  section.append(picker.element);
  if (!picker.id) return;
  const params = new URLSearchParams();
  for (const k of [...FILTERS, 'before']) if (query.get(k)) params.set(k, query.get(k));
  const log = await api(`/servers/${picker.id}/calls?${params}`);

  const tool = input({ value: query.get('tool') ?? '', placeholder: 'any tool' });
  const caller = input({ value: query.get('caller') ?? '', placeholder: 'any caller' });
  const status = select(STATUSES);
  status.value = query.get('status') ?? '';
  const filters = form(async () => {
    const q = new URLSearchParams();
    if (tool.value.trim()) q.set('tool', tool.value.trim());
    if (caller.value.trim()) q.set('caller', caller.value.trim());
    if (status.value) q.set('status', status.value);
    location.hash = `#/calls/${picker.id}${q.size ? `?${q}` : ''}`;
  },
  h('div', { class: 'filters' },
    field('Tool', tool, { name: 'tool' }),
    field('Caller', caller, { name: 'caller' }),
    field('Status', status, { name: 'status' })),
  h('div', { class: 'row' },
    h('button', { type: 'submit', class: 'primary', id: 'calls-filter' }, 'Filter'),
    h('a', { class: 'button', href: `#/calls/${picker.id}` }, 'Clear'),
    h('button', { type: 'button', onclick: refresh }, 'Refresh')));
  filters.id = 'calls-filters';

  const keep = h('input', { type: 'checkbox', id: 'calls-keep', checked: log.record_payloads });
  keep.addEventListener('change', async () => {
    try {
      const s = await api(`/servers/${picker.id}/calls/settings`, { method: 'PUT', body: { record_payloads: keep.checked } });
      announce(s.record_payloads ? 'The call log keeps arguments and results from the next call on (credentials redacted)' : 'The call log no longer keeps arguments and results');
    } catch (e) {
      keep.checked = !keep.checked;
      announce(e.message);
    }
  });

  const caption = `Calls, newest first${FILTERS.some((k) => query.get(k)) ? ' (filtered)' : ''}`;
  section.append(
    filters,
    h('div', { class: 'row' }, h('label', { class: 'check', for: 'calls-keep' }, keep, ' Keep arguments and results (credentials redacted)')),
    h('p', { class: 'hint' }, `The last 1,000 calls. Each Worker isolate writes its calls with its usage counts ${log.flush_seconds > 0 ? `at most every ${log.flush_seconds} s` : 'after every request'}; this page writes its own first.`),
    table([
      ['When', (c) => when(c.at)],
      ['Tool', (c) => filterLink(picker.id, query, 'tool', c.tool)],
      ['Caller', (c) => h('span', {}, filterLink(picker.id, query, 'caller', c.caller), h('span', { class: 'hint' }, ` (${c.caller_kind})`))],
      ['Status', (c) => h('span', { class: `badge ${c.status === 'ok' ? 'completed' : 'failed'}` }, c.status)],
      ['Duration', (c) => `${c.duration_ms} ms`, 'wide-only'],
      ['Streamed', (c) => (c.streamed ? 'yes' : 'no'), 'wide-only'],
      ['Error', (c) => c.error ?? ''],
      ['Payload', (c) => (c.arguments || c.result
        ? h('details', {}, h('summary', {}, 'show'),
          c.arguments ? h('pre', {}, h('code', {}, c.arguments)) : null,
          c.result ? h('pre', {}, h('code', {}, c.result)) : null)
        : '—'), 'wide-only'],
    ], log.data, caption),
    log.next ? h('a', { class: 'button', id: 'calls-older', href: `#/calls/${picker.id}?${withParam(query, 'before', log.next)}` }, 'Older calls') : null);
  section.querySelector('table')?.setAttribute('id', 'calls-table');
}

function withParam(query, key, value) {
  const q = new URLSearchParams();
  for (const k of [...FILTERS, 'before']) if (query.get(k)) q.set(k, query.get(k));
  q.set(key, value);
  if (key !== 'before') q.delete('before');
  return q;
}

/** The value as a link that filters by it. */
function filterLink(serverId, query, key, value) {
  return h('a', { href: `#/calls/${serverId}?${withParam(query, key, value)}`, title: `Only calls with this ${key}` }, value);
}
