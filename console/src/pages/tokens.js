// Console tokens (admin only): list, create (shown once), revoke.
import { api } from '../api.js';
import { announce, confirmAction, copyButton, field, form, h, input, select, table, when } from '../ui.js';

export async function tokensPage(section, { refresh }) {
  const { data } = await api('/tokens');
  const name = input({ placeholder: 'deploy-bot' });
  const role = select([['viewer', 'viewer: read only'], ['publisher', 'publisher: apps and servers'], ['admin', 'admin: everything']]);
  const shown = h('div', { class: 'once' });
  const f = form(async () => {
    const t = await api('/tokens', { method: 'POST', body: { name: name.value.trim(), role: role.value } });
    shown.replaceChildren(
      h('p', { class: 'warn' }, `Token "${t.name}" (${t.role}), shown only this once:`),
      h('div', { class: 'url-row' }, h('code', { tabindex: '0' }, t.token), copyButton(t.token, 'Copy token')));
    name.value = '';
    announce(`Created the console token ${t.name}: copy it now, it is shown only once`);
    list.replaceWith((list = tokenTable(await api('/tokens').then((r) => r.data), refresh)));
  }, field('Name', name, { name: 'name' }), field('Role', role, { name: 'role' }), h('button', { type: 'submit', class: 'primary' }, 'Create token'));
  let list = tokenTable(data, refresh);
  section.append(h('div', { class: 'card' }, h('h2', {}, 'New console token'), shown, f), list);
}

function tokenTable(tokens, refresh) {
  return table([
    ['Name', (t) => t.name],
    ['Role', (t) => t.role],
    ['Token', (t) => `fgc_…${t.hint}`],
    ['Created by', (t) => t.created_by],
    ['Created', (t) => when(t.created_at)],
    ['Last used', (t) => when(t.last_used_at)],
    ['', (t) => h('button', {
      type: 'button',
      class: 'small danger',
      onclick: async () => {
        if (!(await confirmAction(`Revoke the console token "${t.name}"? It stops working at once.`, 'Revoke token'))) return;
        try {
          await api(`/tokens/${t.id}`, { method: 'DELETE' });
          announce(`Revoked ${t.name}`);
        } catch (e) {
          announce(e.message);
        }
        refresh();
      },
    }, 'Revoke')],
  ], tokens, 'Console tokens');
}
