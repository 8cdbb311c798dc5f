// The audit log: the newest console writes, refused ones included.
import { api } from '../api.js';
import { h, table, when } from '../ui.js';

export async function auditPage(section) {
  const { data } = await api('/audit?limit=200');
  section.append(
    h('p', {}, 'Every console write and code rotation, newest first, with who made it and the answer\'s status.'),
    table([
      ['When', (e) => when(e.at)],
      ['Who', (e) => e.actor],
      ['What', (e) => h('span', { title: `${e.action}${e.target ? ` (${e.target})` : ''}` }, e.summary ?? e.action)],
      ['Status', (e) => h('span', { class: `badge s${String(e.status)[0]}xx` }, e.status)],
    ], data, 'Audit log'));
}
