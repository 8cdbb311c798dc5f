// Durable tasks of a server: list, detail, cancel.
import { api } from '../api.js';
import { announce, confirmAction, h, table, when } from '../ui.js';
import { serverPicker } from './usage.js';

export async function tasksPage(section, { args, refresh }) {
  const [serverId, taskId] = args;
  const picker = await serverPicker(serverId, (id) => (location.hash = `#/tasks/${id}`));
  section.append(picker.element);
  if (!picker.id) return;
  if (taskId) return section.append(await taskDetail(picker.id, taskId, refresh));
  const { data } = await api(`/servers/${picker.id}/tasks?limit=100`);
  section.append(table([
    ['Task', (t) => h('a', { href: `#/tasks/${picker.id}/${encodeURIComponent(t.id)}` }, t.id)],
    ['Tool', (t) => t.tool],
    ['Status', (t) => h('span', { class: `badge ${t.status}` }, t.status)],
    ['Created', (t) => when(t.created_at)],
    ['Updated', (t) => when(t.updated_at)],
  ], data, 'Durable tasks, newest first'));
}

const FINAL = ['completed', 'failed', 'cancelled'];

async function taskDetail(serverId, taskId, refresh) {
  const t = await api(`/servers/${serverId}/tasks/${encodeURIComponent(taskId)}`);
  const cancel = async () => {
    if (!(await confirmAction(`Cancel task ${t.id}?`, 'Cancel task'))) return;
    try {
      await api(`/servers/${serverId}/tasks/${encodeURIComponent(t.id)}/cancel`, { method: 'POST' });
      announce(`Task ${t.id} cancelled`);
    } catch (e) {
      announce(e.message);
    }
    refresh();
  };
  const { result, error, ...facts } = t;
  return h('div', { class: 'card' },
    h('h2', {}, `Task ${t.id}`),
    h('dl', { class: 'facts' }, Object.entries(facts).flatMap(([k, v]) => [
      h('dt', {}, k),
      h('dd', {}, /_at$/.test(k) && typeof v === 'number' ? when(v) : v === null ? '—' : String(v)),
    ])),
    outcome(t.status, result, error),
    h('div', { class: 'row' },
      FINAL.includes(t.status) ? null : h('button', { type: 'button', class: 'danger', onclick: cancel }, 'Cancel task'),
      h('a', { class: 'button', href: `#/tasks/${serverId}` }, 'All tasks of this server')));
}

/** A finished task's result (content, structuredContent, isError) or error. */
function outcome(status, result, error) {
  if (!FINAL.includes(status)) return h('p', { class: 'hint', id: 'task-result' }, 'The result shows here once the task has finished.');
  if (error) return h('div', { id: 'task-result' }, h('h3', {}, 'Error'), h('p', { class: 'form-error' }, error.code === null || error.code === undefined ? error.message : `${error.code}: ${error.message}`));
  if (!result) return h('p', { class: 'hint', id: 'task-result' }, 'No result.');
  return h('div', { id: 'task-result' },
    h('h3', {}, 'Result ', result.isError ? h('span', { class: 'badge failed' }, 'isError') : h('span', { class: 'badge completed' }, 'ok')),
    (result.content ?? []).map((c) => h('pre', { tabindex: '0' }, h('code', {}, c.type === 'text' ? c.text : JSON.stringify(c, null, 2)))),
    result.structuredContent === undefined ? null
      : [h('h4', {}, 'structuredContent'), h('pre', { tabindex: '0' }, h('code', {}, JSON.stringify(result.structuredContent, null, 2)))]);
}
