// Servers, one-app and multi-app together: publish (the URL shown once, with copy buttons and
// ready-to-paste client configs), rotate, activate/deactivate, delete, auth mode, client keys.
import { api } from '../api.js';
import { announce, confirmAction, copyBlock, copyButton, field, form, h, input, select, table, textarea, when } from '../ui.js';
import { urlCard } from './server-url.js';
import { editCard } from './server-edit.js';

export async function serversPage(section, { args, query, refresh }) {
  if (args[0] === 'publish') return publishPage(section, query);
  if (args[0]) return detailPage(section, args[0], refresh);
  const [{ data: servers }, { data: apps }] = await Promise.all([api('/servers'), api('/apps')]);
  const names = new Map(apps.map((a) => [a.id, a.name]));
  section.append(
    h('div', { class: 'row' }, h('a', { class: 'button primary', href: '#/servers/publish' }, 'Publish a server')),
    table([
      ['Name', (s) => h('a', { href: `#/servers/${s.id}` }, s.name)],
      ['Apps', (s) => (s.kind === 'app' ? [s.app_id] : s.app_ids).map((id) => names.get(id) ?? id).join(', ')],
      ['Status', (s) => h('span', { class: `badge ${s.status}` }, s.status)],
      ['Client auth', (s) => s.auth.mode],
      ['Code', (s) => `…${s.server_code_hint}`],
    ], servers, 'MCP servers'));
}

async function publishPage(section, query) {
  const { data: apps } = await api('/apps');
  if (!apps.length) {
    section.append(h('p', {}, 'No app yet. ', h('a', { href: '#/apps/new' }, 'Register an app'), ' first.'));
    return;
  }
  const app = select(apps.map((a) => [a.id, `${a.name} (${a.mode})`]));
  if (query.get('app')) app.value = query.get('app');
  const description = textarea({ rows: 2, placeholder: 'Defaults to the app\'s description' });
  const parameters = textarea({ rows: 2, placeholder: '{"text": "The text to summarise"}' });
  const one = form(async () => {
    const body = {};
    if (description.value.trim()) body.description = description.value.trim();
    const p = readJsonField(parameters);
    if (p !== undefined) body.parameters = p;
    const s = await api(`/apps/${app.value}/server`, { method: 'POST', body });
    showSecret(section, s, 'Published');
  },
  field('App', app, { name: 'app_id' }),
  field('Description', description, { name: 'description', hint: 'The server\'s instructions to MCP clients.' }),
  field('Parameter descriptions (JSON, optional)', parameters, { name: 'parameters' }),
  h('button', { type: 'submit', class: 'primary' }, 'Publish'));

  const name = input();
  const multiDescription = textarea({ rows: 2 });
  const picks = h('fieldset', { class: 'picks' }, h('legend', {}, 'Apps (one tool each)'),
    apps.map((a) => h('label', { class: 'check' }, h('input', { type: 'checkbox', value: a.id }), ` ${a.name}`)));
  picks.dataset.field = 'app_ids';
  picks.id = 'app-picks';
  const picksErr = h('p', { class: 'field-error', id: 'app-picks-err', hidden: true });
  const multi = form(async () => {
    const app_ids = [...picks.querySelectorAll('input:checked')].map((i) => i.value);
    const s = await api('/servers', { method: 'POST', body: { name: name.value.trim(), description: multiDescription.value.trim(), app_ids } });
    showSecret(section, s, 'Published');
  },
  field('Name', name, { name: 'name' }),
  field('Description', multiDescription, { name: 'description' }),
  picks, picksErr,
  h('button', { type: 'submit', class: 'primary' }, 'Publish'));

  section.append(
    h('div', { class: 'grid' },
      h('div', { class: 'card' }, h('h2', {}, 'One app'), h('p', {}, 'A Dify-style server: one app, one tool.'), one),
      h('div', { class: 'card' }, h('h2', {}, 'Several apps'), h('p', {}, 'A workspace server: one tool per app.'), multi)));
}

function readJsonField(control) {
  const text = control.value.trim();
  if (!text) return undefined;
  try {
    return JSON.parse(text);
  } catch (e) {
    const err = new Error('not JSON');
    err.errors = [{ field: control.dataset.field, message: `is not valid JSON: ${e.message}` }];
    throw err;
  }
}

/** The MCP URL, shown this once (publish or rotate), with copy buttons and client configs. */
export function showSecret(section, server, verb) {
  announce(`${verb} ${server.name}: copy the URL now, it is shown only once`, { keep: false });
  const panel = secretPanel(server);
  section.replaceChildren(section.querySelector('h1'), panel,
    h('p', {}, h('a', { class: 'button', href: `#/servers/${server.id}` }, 'Server settings'), ' ',
      h('a', { class: 'button', href: '#/servers' }, 'All servers')));
  panel.querySelector('button.copy')?.focus();
}

export function secretPanel(server, note = 'Shown only this once: Flowgate keeps only a hash of the code. Copy it now; rotate the code if it leaks.') {
  const url = server.mcp_url;
  const keyed = server.auth?.mode === 'key';
  const slug = server.name.toLowerCase().replace(/[^a-z0-9]+/g, '-').replace(/^-|-$/g, '') || 'flowgate';
  // mcp-remote expands ${FLOWGATE_KEY} from its env; the others get the key pasted in.
  const auth = keyed ? { Authorization: 'Bearer fgk_…' } : undefined;
  const pretty = (v) => JSON.stringify(v, null, 2);
  const configs = [
    ['VS Code (.vscode/mcp.json)', pretty({ servers: { [slug]: { type: 'http', url, ...(auth && { headers: auth }) } } })],
    ['Cursor (~/.cursor/mcp.json)', pretty({ mcpServers: { [slug]: { url, ...(auth && { headers: auth }) } } })],
    ['Claude Desktop (mcp-remote)', pretty({ mcpServers: { [slug]: {
      command: 'npx',
      args: ['mcp-remote', url, ...(keyed ? ['--header', 'Authorization: Bearer ${FLOWGATE_KEY}'] : [])],
      ...(keyed && { env: { FLOWGATE_KEY: 'fgk_…' } }),
    } } })],
    ['Claude Code', `claude mcp add --transport http ${slug} '${url}'${keyed ? " --header 'Authorization: Bearer fgk_…'" : ''}`],
    ['MCP Inspector', `npx @modelcontextprotocol/inspector --cli '${url}' --transport http --method tools/list${keyed ? " --header 'Authorization: Bearer fgk_…'" : ''}`],
  ];
  return h('div', { class: 'card secret', role: 'region', 'aria-label': 'MCP URL' },
    h('h2', {}, `${server.name}: MCP URL`),
    h('p', { class: 'warn' }, note),
    h('div', { class: 'url-row' }, h('code', { class: 'mcp-url', tabindex: '0' }, url), copyButton(url, 'Copy URL')),
    keyed ? h('p', {}, 'This server needs a client key: create one under Client keys and put it where fgk_… stands.') : null,
    h('details', { open: true }, h('summary', {}, 'Client configurations'), configs.map(([t, text]) => copyBlock(t, text))));
}

async function detailPage(section, id, refresh) {
  const [s, { data: apps }, index] = await Promise.all([api(`/servers/${encodeURIComponent(id)}`), api('/apps'), api('/')]);
  const names = new Map(apps.map((a) => [a.id, a.name]));
  const appIds = s.kind === 'app' ? [s.app_id] : s.app_ids;
  section.querySelector('h1').textContent = `Server ${s.name}`;
  const active = s.status === 'active';

  const setStatus = async () => {
    const next = active ? 'inactive' : 'active';
    const ok = await confirmAction(
      active ? `Deactivate "${s.name}"? Its clients are refused until it is activated again.` : `Activate "${s.name}"?`,
      active ? 'Deactivate' : 'Activate');
    if (!ok) return;
    await act(() => (s.kind === 'app'
      ? api(`/apps/${s.app_id}/server`, { method: 'PUT', body: { id: s.id, status: next } })
      : api(`/servers/${s.id}`, { method: 'PUT', body: { status: next } })), `${s.name} is ${next}`, refresh);
  };
  const del = async () => {
    if (!(await confirmAction(`Delete the server "${s.name}"? Its URL stops working; its apps stay.`, 'Delete server'))) return;
    await act(() => api(`/servers/${s.id}`, { method: 'DELETE' }), `Deleted ${s.name}`, () => (location.hash = '#/servers'));
  };

  section.append(
    h('dl', { class: 'facts' },
      h('dt', {}, 'Kind'), h('dd', {}, s.kind === 'app' ? 'one app' : 'several apps'),
      h('dt', {}, 'Apps'), h('dd', {}, appIds.map((a) => names.get(a) ?? a).join(', ')),
      h('dt', {}, 'Status'), h('dd', {}, h('span', { class: `badge ${s.status}` }, s.status)),
      h('dt', {}, 'Code'), h('dd', {}, `…${s.server_code_hint}`),
      h('dt', {}, 'Created'), h('dd', {}, when(s.created_at))),
    h('div', { class: 'row' },
      h('button', { type: 'button', onclick: setStatus }, active ? 'Deactivate' : 'Activate'),
      h('button', { type: 'button', class: 'danger', onclick: del }, 'Delete server'),
      h('a', { class: 'button', href: `#/playground/${s.id}` }, 'Playground'),
      h('a', { class: 'button', href: `#/calls/${s.id}` }, 'Call log'),
      h('a', { class: 'button', href: `#/usage/${s.id}` }, 'Usage'),
      h('a', { class: 'button', href: `#/tasks/${s.id}` }, 'Tasks')),
    urlCard(s, section, index.caller),
    editCard(s, apps, refresh),
    authCard(s, refresh),
    await keysCard(s, refresh));
}

async function act(call, done, then) {
  try {
    await call();
    announce(done);
  } catch (e) {
    announce(e.message);
  }
  then();
}

function authCard(s, refresh) {
  const mode = select([['none', 'none: the URL is enough'], ['key', 'key: a client key too'], ['oauth', 'oauth: an access token from your authorization server']]);
  mode.value = s.auth.mode;
  const o = s.auth.oauth ?? {};
  const issuer = input({ type: 'url', value: o.issuer, placeholder: 'https://auth.example.com' });
  const audience = input({ value: o.audience, placeholder: 'default: the server\'s MCP URL' });
  const scopes = input({ value: (o.scopes ?? []).join(' '), placeholder: 'mcp:tools' });
  const oauth = h('div', {},
    field('Issuer', issuer, { name: 'oauth.issuer' }),
    field('Audience (optional)', audience, { name: 'oauth.audience' }),
    field('Scopes (space-separated, optional)', scopes, { name: 'oauth.scopes' }));
  const sync = () => (oauth.hidden = mode.value !== 'oauth');
  mode.addEventListener('change', sync);
  sync();
  const f = form(async () => {
    const body = { mode: mode.value };
    if (mode.value === 'oauth') {
      body.oauth = { issuer: issuer.value.trim() };
      if (audience.value.trim()) body.oauth.audience = audience.value.trim();
      const sc = scopes.value.split(/\s+/).filter(Boolean);
      if (sc.length) body.oauth.scopes = sc;
    }
    const out = await api(`/servers/${s.id}/auth`, { method: 'PUT', body });
    announce(`Client authentication is ${out.auth.mode}${out.warnings?.length ? `: ${out.warnings.join('; ')}` : ''}`);
    refresh();
  }, field('Mode', mode, { name: 'mode' }), oauth, h('button', { type: 'submit' }, 'Save authentication'));
  return h('div', { class: 'card' }, h('h2', {}, 'Client authentication'), f);
}

async function keysCard(s, refresh) {
  const { data: keys } = await api(`/servers/${s.id}/keys`);
  const shown = h('div', { class: 'once' });
  const name = input({ placeholder: 'alice-laptop' });
  const f = form(async () => {
    const k = await api(`/servers/${s.id}/keys`, { method: 'POST', body: { name: name.value.trim() } });
    shown.replaceChildren(
      h('p', { class: 'warn' }, `Key "${k.name}", shown only this once:`),
      h('div', { class: 'url-row' }, h('code', { tabindex: '0' }, k.key), copyButton(k.key, 'Copy key')));
    name.value = '';
    announce(`Created the client key ${k.name}: copy it now, it is shown only once`);
    list.replaceWith((list = keyTable(s, await api(`/servers/${s.id}/keys`).then((r) => r.data), refresh)));
  }, field('New key\'s name (who holds it)', name, { name: 'name' }), h('button', { type: 'submit' }, 'Create key'));
  let list = keyTable(s, keys, refresh);
  return h('div', { class: 'card' }, h('h2', {}, 'Client keys'),
    s.auth.mode === 'key' ? null : h('p', { class: 'hint' }, 'Keys are checked only when the mode is key.'),
    shown, f, list);
}

function keyTable(s, keys, refresh) {
  return table([
    ['Name', (k) => k.name],
    ['Key', (k) => `fgk_…${k.hint}`],
    ['Created', (k) => when(k.created_at)],
    ['Last used', (k) => when(k.last_used_at)],
    ['', (k) => h('button', {
      type: 'button',
      class: 'small danger',
      onclick: async () => {
        if (!(await confirmAction(`Revoke the key "${k.name}"? It stops working at once.`, 'Revoke key'))) return;
        await act(() => api(`/servers/${s.id}/keys/${k.id}`, { method: 'DELETE' }), `Revoked ${k.name}`, refresh);
      },
    }, 'Revoke')],
  ], keys, 'Client keys');
}
