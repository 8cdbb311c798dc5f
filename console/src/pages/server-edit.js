// Editing a server in place (PATCH): name, description, the description of each input its apps
// take (a table), and for a server of several apps, which apps and in what order.
import { api } from '../api.js';
import { announce, field, form, h, input, textarea } from '../ui.js';

/** The input variables of an app: [{variable, label}] from its Dify-shaped form. */
function inputsOf(app) {
  return (app?.user_input_form ?? []).map((item) => Object.values(item ?? {})[0] ?? {})
    .filter((f) => f.variable).map((f) => ({ variable: f.variable, label: f.label ?? f.variable }));
}

export function editCard(s, apps, refresh) {
  const byId = new Map(apps.map((a) => [a.id, a]));
  const multi = s.kind === 'multi';
  const chosen = multi ? s.app_ids : [s.app_id];
  const name = input({ value: s.name, disabled: !multi });
  const description = textarea({ rows: 3, value: s.description });
  // Apps: the server's in their order first, then the others.
  const order = [...chosen, ...apps.map((a) => a.id).filter((id) => !chosen.includes(id))];
  const picks = h('fieldset', { class: 'picks', id: 'edit-apps', tabindex: '-1' }, h('legend', {}, 'Apps (one tool each, in this order)'),
    order.filter((id) => byId.has(id)).map((id) => h('label', { class: 'check' },
      h('input', { type: 'checkbox', value: id, checked: chosen.includes(id) }), ` ${byId.get(id).name}`)));
  picks.dataset.field = 'app_ids';
  const picksErr = h('p', { class: 'field-error', id: 'edit-apps-err', hidden: true });

  // One row per input variable of the server's apps (a variable shared by two apps once).
  const seen = new Map();
  for (const id of chosen) for (const v of inputsOf(byId.get(id))) if (!seen.has(v.variable)) seen.set(v.variable, { ...v, app: byId.get(id)?.name });
  for (const v of Object.keys(s.parameters ?? {})) if (!seen.has(v)) seen.set(v, { variable: v, label: v, app: '(none)' });
  const rows = [...seen.values()].map((v) => ({ ...v, control: input({ value: s.parameters?.[v.variable] ?? '', 'aria-label': `Description of ${v.variable}`, placeholder: v.label }) }));
  const params = h('fieldset', { id: 'edit-params', tabindex: '-1' }, h('legend', {}, 'Parameter descriptions'),
    rows.length
      ? h('div', { class: 'table-wrap' }, h('table', {}, h('caption', {}, 'What MCP clients read about each input (empty: the form\'s label)'),
        h('thead', {}, h('tr', {}, ['Variable', 'App', 'Description'].map((c) => h('th', { scope: 'col' }, c)))),
        h('tbody', {}, rows.map((r) => h('tr', {}, h('td', {}, h('code', {}, r.variable)), h('td', {}, r.app), h('td', {}, r.control))))))
      : h('p', { class: 'hint' }, 'The apps of this server have no input form of their own.'));
  params.dataset.field = 'parameters';
  const paramsErr = h('p', { class: 'field-error', id: 'edit-params-err', hidden: true });

  const f = form(async () => {
    const body = { description: description.value, parameters: Object.fromEntries(rows.map((r) => [r.variable, r.control.value.trim()]).filter(([, d]) => d)) };
    if (multi) {
      body.name = name.value.trim();
      body.app_ids = [...picks.querySelectorAll('input:checked')].map((i) => i.value);
    }
    const saved = await api(`/servers/${s.id}`, { method: 'PATCH', body });
    announce(`Saved ${saved.name}: clients see the change at once`);
    refresh();
  },
  field('Name', name, { name: 'name', hint: multi ? undefined : 'A one-app server is named after its app: rename the app to rename it.' }),
  field('Description', description, { name: 'description', hint: 'The server\'s instructions to MCP clients.' }),
  multi ? [picks, picksErr] : null,
  params, paramsErr,
  h('button', { type: 'submit', class: 'primary' }, 'Save server'));
  f.setAttribute('aria-label', `Edit ${s.name}`);
  return h('div', { class: 'card' }, h('h2', {}, 'Edit server'), f);
}
