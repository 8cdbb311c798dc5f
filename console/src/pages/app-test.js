// "Test connection" for an app: its backend probed (nothing run), each step's outcome, and what
// to fix when one failed. Also the apps list's "Published on" cell.
import { api } from '../api.js';
import { announce, h } from '../ui.js';

export function testCard(app) {
  const out = h('div', { class: 'test-result', role: 'status', 'aria-live': 'polite' });
  const button = h('button', {
    type: 'button',
    onclick: async () => {
      button.disabled = true;
      out.replaceChildren(h('p', { class: 'hint' }, 'Testing…'));
      try {
        const r = await api(`/apps/${app.id}/test`, { method: 'POST' });
        out.replaceChildren(...report(r));
        announce(r.ok ? `${app.name}: the connection works` : `${app.name}: ${r.problem}`);
      } catch (e) {
        out.replaceChildren(h('p', { class: 'form-error' }, e.message));
      } finally {
        button.disabled = false;
      }
    },
  }, 'Test connection');
  return h('div', { class: 'card' }, h('h2', {}, 'Test connection'),
    h('p', { class: 'hint' }, 'Probes the backend with the saved settings without running the app: Dify\'s /info and /parameters, an HTTP tool\'s endpoint, an upstream MCP server\'s initialize. Save your changes first.'),
    button, out);
}

function report(r) {
  const verdict = r.ok
    ? h('p', { class: 'ok-line' }, 'The connection works.')
    : h('div', { class: 'warn' }, h('p', {}, h('strong', {}, 'Problem: '), r.problem), h('p', {}, h('strong', {}, 'Fix: '), r.fix));
  const steps = h('ul', { class: 'checks' }, r.checks.map((c) => h('li', {},
    h('span', { class: `badge ${c.level}` }, c.level), ' ', h('strong', {}, c.step), `: ${c.detail}`,
    c.fix && c.level !== 'error' ? h('span', { class: 'hint' }, ` (${c.fix})`) : null)));
  return [verdict, steps];
}

/** The servers publishing an app, as links; "not published" otherwise. */
export function publishedOn(app) {
  const servers = app.servers ?? [];
  if (!servers.length) return h('span', { class: 'hint' }, 'not published');
  return servers.flatMap((s, i) => [i ? ', ' : null, h('a', { href: `#/servers/${s.id}` }, s.name)]);
}
