// The tool playground: a server's tools as an MCP client sees them (GET /servers/{id}/tools), and
// a call of one from a form made from its inputSchema (POST /servers/{id}/tools/call, the
// endpoint's own call path), with progress and log notifications shown as they arrive.
import { ApiError, api, session } from '../api.js';
import { field, form, h, input, select, textarea } from '../ui.js';
import { serverPicker } from './usage.js';

export async function playgroundPage(section, { args, query }) {
  const picker = await serverPicker(args[0], (id) => (location.hash = `#/playground/${id}`));
  section.append(picker.element);
  if (!picker.id) return;
  const list = await api(`/servers/${picker.id}/tools`);
  section.append(h('p', { class: 'hint' },
    `The tools as an MCP client of revision ${list.protocol_version} lists them. A run goes through the same call path as a client's call, as you; it is audited, counted in usage and in the call log.`));
  if (list.status !== 'active') section.append(h('p', { class: 'warn' }, 'This server is inactive: its clients are refused, and so are runs from here.'));
  if (!list.tools.length) return section.append(h('p', {}, 'This server exposes no tools.'));
  const chosen = list.tools.find((t) => t.name === query.get('tool'));
  section.append(h('div', { class: 'tool-list' }, list.tools.map((t) => toolCard(picker.id, t, t === chosen))));
  if (chosen) {
    const runner = runnerCard(picker.id, chosen);
    section.append(runner);
    runner.querySelector('input, select, textarea, button')?.focus();
  }
}

function schemaBlock(title, schema) {
  return h('details', {}, h('summary', {}, title), h('pre', { tabindex: '0' }, h('code', {}, JSON.stringify(schema, null, 2))));
}

function toolCard(serverId, tool, current) {
  return h('div', { class: `card tool${current ? ' current' : ''}`, 'data-tool': tool.name },
    h('div', { class: 'row between' },
      h('h2', {}, tool.title && tool.title !== tool.name ? `${tool.title} (${tool.name})` : tool.name),
      h('a', { class: `button small${current ? ' primary' : ''}`, href: `#/playground/${serverId}?tool=${encodeURIComponent(tool.name)}`, 'aria-current': current ? 'true' : null }, current ? 'Chosen' : 'Try it')),
    tool.description ? h('p', {}, tool.description) : null,
    schemaBlock('Input schema', tool.inputSchema),
    tool.outputSchema ? schemaBlock('Output schema', tool.outputSchema) : null);
}

/** One control per property of the input schema; `read()` gives the arguments. */
function argumentControls(schema) {
  const props = schema?.properties ?? {};
  const required = new Set(schema?.required ?? []);
  const controls = Object.entries(props).map(([name, p]) => {
    const type = Array.isArray(p.type) ? p.type.find((t) => t !== 'null') : p.type;
    let control;
    let read;
    if (Array.isArray(p.enum)) {
      control = select([...(required.has(name) ? [] : [['', '(none)']]), ...p.enum.map((v) => [JSON.stringify(v), String(v)])]);
      if (p.default !== undefined) control.value = JSON.stringify(p.default);
      read = () => (control.value === '' ? undefined : JSON.parse(control.value));
    } else if (type === 'boolean') {
      control = h('input', { type: 'checkbox', checked: p.default === true });
      read = () => control.checked;
    } else if (type === 'number' || type === 'integer') {
      control = input({ type: 'number', step: type === 'integer' ? '1' : 'any', value: p.default });
      read = () => (control.value === '' ? undefined : Number(control.value));
    } else if (type === 'string') {
      control = (p.maxLength ?? 0) > 200 || p.format === 'textarea' ? textarea({ rows: 3 }) : input();
      if (p.default !== undefined) control.value = p.default;
      read = () => (control.value === '' && !required.has(name) ? undefined : control.value);
    } else {
      control = textarea({ rows: 3, placeholder: type === 'array' ? '[]' : '{}' });
      if (p.default !== undefined) control.value = JSON.stringify(p.default, null, 2);
      read = () => {
        if (!control.value.trim()) return undefined;
        try {
          return JSON.parse(control.value);
        } catch (e) {
          const err = new Error('not JSON');
          err.errors = [{ field: `arguments.${name}`, message: `is not valid JSON: ${e.message}` }];
          throw err;
        }
      };
    }
    control.name = name;
    const label = `${p.title ?? name}${required.has(name) ? ' (required)' : ''}`;
    return { name, read, element: field(label, control, { name: `arguments.${name}`, hint: p.description }) };
  });
  return {
    elements: controls.map((c) => c.element),
    read: () => Object.fromEntries(controls.map((c) => [c.name, c.read()]).filter(([, v]) => v !== undefined)),
  };
}

function runnerCard(serverId, tool) {
  const controls = argumentControls(tool.inputSchema);
  const out = h('div', { class: 'run-output', id: 'pg-output', 'aria-live': 'polite' });
  const f = form(async () => {
    const args = controls.read();
    await run(serverId, tool.name, args, out);
  },
  controls.elements.length ? controls.elements : h('p', { class: 'hint' }, 'This tool takes no arguments.'),
  h('button', { type: 'submit', class: 'primary', id: 'pg-run' }, `Run ${tool.name}`));
  return h('div', { class: 'card', id: 'pg-runner' }, h('h2', {}, `Run ${tool.name}`), f, out);
}

/** Shows a run: progress and log notifications as they arrive, then the result. */
async function run(serverId, name, args, out) {
  const status = h('p', { id: 'pg-status' }, 'Running…');
  const bar = h('progress', { id: 'pg-progress', 'aria-label': 'Progress' });
  const barText = h('span', { id: 'pg-progress-message', class: 'hint' });
  const events = h('ol', { id: 'pg-events', class: 'events' });
  const result = h('div', { id: 'pg-result' });
  out.replaceChildren(status, h('div', { class: 'row' }, bar, barText), h('h3', {}, 'Notifications'), events, result);
  const started = performance.now();
  let final = null;
  await callTool(serverId, name, args, (msg) => {
    if (msg.method === 'notifications/progress') {
      const p = msg.params ?? {};
      if (p.total) {
        bar.max = p.total;
        bar.value = p.progress;
      }
      const text = `${p.message ?? ''}${p.total ? ` (${p.progress} of ${p.total})` : ` (step ${p.progress})`}`.trim();
      barText.textContent = text;
      events.append(h('li', { class: 'progress-event' }, h('span', { class: 'badge' }, 'progress'), ' ', text));
    } else if (msg.method === 'notifications/message') {
      const p = msg.params ?? {};
      const data = typeof p.data === 'string' ? p.data : JSON.stringify(p.data);
      events.append(h('li', { class: 'log-event' }, h('span', { class: `badge ${p.level}` }, p.level ?? 'log'), ' ', data));
    } else if ('result' in msg || 'error' in msg) {
      final = msg;
    }
  });
  const ms = Math.round(performance.now() - started);
  bar.max = 1;
  bar.value = 1;
  if (!events.children.length) events.append(h('li', { class: 'hint' }, 'None'));
  if (!final) {
    status.textContent = `The stream ended after ${ms} ms without a result.`;
    return;
  }
  if (final.error) {
    status.textContent = `JSON-RPC error ${final.error.code} after ${ms} ms`;
    result.append(h('p', { class: 'form-error', role: 'alert' }, final.error.message));
    return;
  }
  const r = final.result ?? {};
  status.replaceChildren(r.isError ? h('span', { class: 'badge failed' }, 'isError: true') : h('span', { class: 'badge completed' }, 'isError: false'), ` after ${ms} ms`);
  result.append(h('h3', {}, 'content'),
    ...(r.content ?? []).map((c) => h('pre', { class: 'content-item', tabindex: '0' }, h('code', {}, c.type === 'text' ? c.text : JSON.stringify(c, null, 2)))));
  if (r.structuredContent !== undefined) {
    result.append(h('h3', {}, 'structuredContent'), h('pre', { id: 'pg-structured', tabindex: '0' }, h('code', {}, JSON.stringify(r.structuredContent, null, 2))));
  }
}

/** POSTs the call and hands each JSON-RPC message to `onMessage` as it arrives (SSE), or the
 * one JSON response. Console errors reject with ApiError. */
async function callTool(serverId, name, args, onMessage) {
  const headers = { accept: 'text/event-stream, application/json', 'content-type': 'application/json' };
  if (session.token) headers.authorization = `Bearer ${session.token}`;
  let res;
  try {
    res = await fetch(`/console/api/servers/${encodeURIComponent(serverId)}/tools/call`, {
      method: 'POST',
      headers,
      body: JSON.stringify({ name, arguments: args }),
      credentials: 'same-origin',
      cache: 'no-store',
    });
  } catch (e) {
    throw new ApiError(0, { error: 'network', message: `Flowgate could not be reached: ${e.message}` });
  }
  if (!(res.headers.get('content-type') ?? '').startsWith('text/event-stream')) {
    const text = await res.text();
    let json;
    try {
      json = JSON.parse(text);
    } catch {
      json = { message: `The console API answered ${res.status} with a body that is not JSON` };
    }
    if (!res.ok) throw new ApiError(res.status, json);
    return onMessage(json);
  }
  const reader = res.body.getReader();
  const decoder = new TextDecoder();
  let buffer = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) break;
    buffer = (buffer + decoder.decode(value, { stream: true })).replace(/\r\n?/g, '\n');
    let end;
    while ((end = buffer.indexOf('\n\n')) >= 0) {
      const event = buffer.slice(0, end);
      buffer = buffer.slice(end + 2);
      const data = event.split('\n').filter((l) => l.startsWith('data:')).map((l) => l.slice(5).replace(/^ /, '')).join('\n');
      if (data) onMessage(JSON.parse(data));
    }
  }
}
