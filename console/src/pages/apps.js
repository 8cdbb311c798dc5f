// Apps: list, create by form for every mode, import from Dify, edit (credentials masked), delete.
import { api } from '../api.js';
import { announce, confirmAction, field, form, h, input, select, table, textarea, when } from '../ui.js';
import { formEditor, outputsEditor } from './app-variables.js';
import { publishedOn, testCard } from './app-test.js';

const DIFY_MODES = ['workflow', 'chat', 'advanced-chat', 'agent-chat', 'completion'];
const MODES = [...DIFY_MODES, 'http-tool', 'mcp'];
const MODE_LABELS = {
  workflow: 'workflow (Dify)', chat: 'chat (Dify)', 'advanced-chat': 'advanced-chat (Dify)',
  'agent-chat': 'agent-chat (Dify)', completion: 'completion (Dify)', 'http-tool': 'HTTP tool', mcp: 'upstream MCP server',
};
// The backend settings each mode has a control for; the rest are edited as JSON ("more settings").
const OWN = {
  dify: ['base_url', 'api_key', 'conversations'],
  'http-tool': ['api_endpoint', 'api_key', 'stream', 'manifest', 'form_values'],
  mcp: ['url', 'transport', 'protocol_version', 'headers'],
};
const MASK_HINT = '*** is the stored credential, never shown: keep it to leave it unchanged, or type a new one. $NAME refers to a Worker secret the deployment allows (SECRET_REF_PREFIX or SECRET_REF_NAMES).';
/** The MCP revisions an upstream app may be pinned to (`backend.protocol_version`). */
const REVISIONS = ['2026-07-28', '2025-11-25', '2025-06-18', '2025-03-26', '2024-11-05'];
const kind = (mode) => (DIFY_MODES.includes(mode) ? 'dify' : mode);
/** The Dify modes that have conversations (`backend.conversations`). */
const CHAT_MODES = ['chat', 'advanced-chat', 'agent-chat'];

export async function appsPage(section, { args, refresh }) {
  if (args[0] === 'new') return section.append(appForm(null));
  if (args[0] === 'import') return section.append(importForm());
  if (args[0]) {
    const app = await api(`/apps/${encodeURIComponent(args[0])}`);
    return section.append(appForm(app), testCard(app));
  }
  const { data } = await api('/apps');
  section.append(
    h('div', { class: 'row' },
      h('a', { class: 'button primary', href: '#/apps/new' }, 'New app'),
      h('a', { class: 'button', href: '#/apps/import' }, 'Import from Dify')),
    table([
      ['Name', (a) => h('a', { href: `#/apps/${a.id}` }, a.name)],
      ['Mode', (a) => a.mode],
      ['Published on', publishedOn, 'wide-only'],
      ['Description', (a) => a.description, 'wide-only'],
      ['Updated', (a) => when(a.updated_at), 'wide-only'],
      ['', (a) => h('div', { class: 'row actions' },
        h('a', { class: 'button small', href: `#/servers/publish?app=${a.id}` }, 'Publish'),
        h('button', { type: 'button', class: 'small danger', onclick: () => remove(a, refresh) }, 'Delete'))],
    ], data, 'Registered apps'));
}

async function remove(app, refresh) {
  if (!(await confirmAction(`Delete the app "${app.name}"? Its one-app MCP server goes with it.`, 'Delete app'))) return;
  try {
    await api(`/apps/${app.id}`, { method: 'DELETE' });
    announce(`Deleted ${app.name}`);
  } catch (e) {
    announce(e.message);
  }
  refresh();
}

const json = (v) => (v === undefined || v === null ? '' : JSON.stringify(v, null, 2));

/** Reads a JSON textarea; a parse error is shown as the field's own error. */
function readJson(control, fallback) {
  const text = control.value.trim();
  if (!text) return fallback;
  try {
    return JSON.parse(text);
  } catch (e) {
    const err = new Error(`not valid JSON: ${e.message}`);
    err.errors = [{ field: control.dataset.field, message: `is not valid JSON: ${e.message}` }];
    throw err;
  }
}

function appForm(app) {
  const b = app?.backend ?? {};
  const c = {
    name: input({ value: app?.name, required: true }),
    description: textarea({ rows: 2, value: app?.description }),
    mode: select(MODES.map((m) => [m, MODE_LABELS[m]]), { value: app?.mode ?? 'workflow' }),
    base_url: input({ type: 'url', value: b.base_url, placeholder: 'https://api.dify.ai/v1' }),
    api_key: input({ value: b.api_key, placeholder: 'app-… or $SECRET_NAME' }),
    user_input_form: formEditor(app?.user_input_form ?? []),
    outputs: outputsEditor(app?.outputs ?? []),
    api_endpoint: input({ type: 'url', value: b.api_endpoint, placeholder: 'https://tools.example.com/get_weather' }),
    tool_key: input({ value: b.api_key, placeholder: 'optional: a key or $SECRET_NAME' }),
    stream: h('input', { type: 'checkbox', checked: b.stream }),
    conversations: h('input', { type: 'checkbox', checked: b.conversations === true, 'data-field': 'backend.conversations' }),
    manifest: textarea({ rows: 6, value: json(b.manifest) }),
    form_values: textarea({ rows: 2, value: json(b.form_values) }),
    url: input({ type: 'url', value: b.url, placeholder: 'https://mcp.example.com/mcp' }),
    transport: select([['auto'], ['streamable-http'], ['sse']], { value: b.transport ?? 'auto' }),
    protocol_version: select([['', 'negotiate (default)'], ...REVISIONS.map((r) => [r])], { value: b.protocol_version ?? '' }),
    headers: textarea({ rows: 2, value: json(b.headers), placeholder: '{"Authorization": "Bearer $UPSTREAM_TOKEN"}' }),
    extra: textarea({ rows: 3, value: json(extras(app)) }),
  };
  c.mode.value = app?.mode ?? 'workflow';
  c.transport.value = b.transport ?? 'auto';
  c.protocol_version.value = b.protocol_version ?? '';
  const masked = (v) => (v === '***' ? MASK_HINT : undefined);
  const groups = {
    dify: h('fieldset', {},
      h('legend', {}, 'Dify Service API'),
      field('Base URL', c.base_url, { name: 'backend.base_url' }),
      field('API key', c.api_key, { name: 'backend.api_key', hint: masked(b.api_key) }),
      (c.conversationsField = h('div', { class: 'field check' }, c.conversations,
        h('label', { for: (c.conversations.id = 'conversations-check') },
          'Conversations: results carry a conversation_id that a caller passes back to continue (chat apps only)'))),
      c.user_input_form.element,
      c.outputs.element,
      h('p', { class: 'hint' }, 'Outputs: what a workflow returns, for the tool\'s output schema and structured results (a file output: type file or array[file]).')),
    'http-tool': h('fieldset', {},
      h('legend', {}, 'HTTP tool'),
      field('Endpoint', c.api_endpoint, { name: 'backend.api_endpoint' }),
      field('API key', c.tool_key, { name: 'backend.api_key', hint: masked(b.api_key) }),
      h('div', { class: 'field check' }, c.stream, h('label', { for: (c.stream.id = 'stream-check') }, 'Streams SSE')),
      field('Manifest (JSON)', c.manifest, { name: 'backend.manifest', hint: '{"name", "description", "parameters": [...], "outputs": [...]}' }),
      field('Form values (JSON, optional)', c.form_values, { name: 'backend.form_values' })),
    mcp: h('fieldset', {},
      h('legend', {}, 'Upstream MCP server'),
      field('URL', c.url, { name: 'backend.url' }),
      field('Transport', c.transport, { name: 'backend.transport' }),
      field('MCP revision', c.protocol_version, { name: 'backend.protocol_version', hint: 'Pin one revision (2026-07-28: no initialize probe); default: negotiated.' }),
      field('Headers (JSON, optional)', c.headers, { name: 'backend.headers', hint: 'Values that are credentials show as ***; keep *** to leave one unchanged.' })),
  };
  const showGroup = () => {
    for (const [k, g] of Object.entries(groups)) g.hidden = k !== kind(c.mode.value);
    c.conversationsField.hidden = !CHAT_MODES.includes(c.mode.value);
  };
  c.mode.addEventListener('change', showGroup);
  showGroup();

  const f = form(async () => {
    const mode = c.mode.value;
    const k = kind(mode);
    const backend = { ...readJson(c.extra, {}) };
    const body = { name: c.name.value.trim(), description: c.description.value, mode, backend, user_input_form: [] };
    if (k === 'dify') {
      Object.assign(backend, { base_url: c.base_url.value.trim(), api_key: c.api_key.value.trim() });
      if (CHAT_MODES.includes(mode) && c.conversations.checked) backend.conversations = true;
      body.user_input_form = c.user_input_form.read();
      body.outputs = c.outputs.read();
    } else if (k === 'http-tool') {
      Object.assign(backend, { api_endpoint: c.api_endpoint.value.trim(), stream: c.stream.checked, manifest: readJson(c.manifest, undefined) });
      if (c.tool_key.value.trim()) backend.api_key = c.tool_key.value.trim();
      const fv = readJson(c.form_values, undefined);
      if (fv !== undefined) backend.form_values = fv;
    } else {
      Object.assign(backend, { url: c.url.value.trim(), transport: c.transport.value });
      if (c.protocol_version.value) backend.protocol_version = c.protocol_version.value;
      const hd = readJson(c.headers, undefined);
      if (hd !== undefined) backend.headers = hd;
    }
    const saved = await api(app ? `/apps/${app.id}` : '/apps', { method: app ? 'PUT' : 'POST', body });
    announce(`${app ? 'Saved' : 'Created'} ${saved.name}${saved.warnings?.length ? `: ${saved.warnings.join('; ')}` : ''}`);
    location.hash = app ? '#/apps' : `#/servers/publish?app=${saved.id}`;
  },
  field('Name', c.name, { name: 'name' }),
  field('Description', c.description, { name: 'description', hint: 'What the tool does: MCP clients show it to the model.' }),
  field('Mode', c.mode, { name: 'mode' }),
  Object.values(groups),
  field('More backend settings (JSON, optional)', c.extra, { name: 'backend', hint: 'Robustness, task and file settings, e.g. {"timeout_seconds": 60} or a chat app\'s {"file_upload": {"image": {"enabled": true, "number_limits": 3, "transfer_methods": ["remote_url", "local_file"]}}} (an import fills file_upload and system_parameters in); see docs/files-and-conversations.md.' }),
  h('div', { class: 'row' },
    h('button', { type: 'submit', class: 'primary' }, app ? 'Save app' : 'Create app'),
    h('a', { class: 'button', href: '#/apps' }, 'Cancel')));
  f.setAttribute('aria-label', app ? `Edit ${app.name}` : 'New app');
  return h('div', { class: 'card' }, h('h2', {}, app ? `Edit ${app.name}` : 'New app'), f);
}

/** The backend settings the mode's own controls do not show. */
function extras(app) {
  if (!app) return undefined;
  const own = OWN[kind(app.mode)] ?? [];
  const rest = Object.fromEntries(Object.entries(app.backend ?? {}).filter(([k]) => !own.includes(k)));
  return Object.keys(rest).length ? rest : undefined;
}

function importForm() {
  const base = input({ type: 'url', placeholder: 'https://api.dify.ai/v1' });
  const key = input({ placeholder: 'app-… or $SECRET_NAME' });
  const outputs = textarea({ rows: 3, placeholder: '[{"variable": "summary", "type": "string"}]' });
  const f = form(async () => {
    const body = { base_url: base.value.trim(), api_key: key.value.trim() };
    const out = readJson(outputs, undefined);
    if (out !== undefined) body.outputs = out;
    const app = await api('/apps/import', { method: 'POST', body });
    announce(`Imported ${app.name}${app.note ? `. ${app.note}` : ''}`);
    location.hash = `#/servers/publish?app=${app.id}`;
  },
  field('Dify base URL', base, { name: 'base_url' }),
  field('API key', key, { name: 'api_key' }),
  field('Outputs (workflow apps, JSON, optional)', outputs, { name: 'outputs', hint: 'Dify does not say what a workflow returns; declare it for structured results.' }),
  h('div', { class: 'row' }, h('button', { type: 'submit', class: 'primary' }, 'Import'), h('a', { class: 'button', href: '#/apps' }, 'Cancel')));
  return h('div', { class: 'card' }, h('h2', {}, 'Import a Dify app'), h('p', {}, 'Reads the app\'s /v1/info and /v1/parameters and registers it.'), f);
}
