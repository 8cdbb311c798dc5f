// A server's URL after it was first shown: an admin reveals it again (each reveal audited), or
// anyone who may publish rotates the code, optionally keeping the old URL working for a grace
// period so a planned rotation breaks no client.
import { api } from '../api.js';
import { announce, confirmAction, field, form, h, input, when } from '../ui.js';
import { secretPanel, showSecret } from './servers.js';

const PRESETS = [['0', 'none: the old URL stops at once'], ['600', '10 minutes'], ['3600', '1 hour'], ['86400', '1 day'], ['604800', '7 days (the most)']];

export function urlCard(s, section, caller) {
  const shown = h('div', { class: 'revealed' });
  const previous = s.previous_code
    ? h('p', { class: 'warn' }, `The previous code …${s.previous_code.hint} still works until ${when(s.previous_code.until_ms)} (grace period); move clients to the current URL.`)
    : null;
  const admin = caller?.role === 'admin';
  let reveal;
  if (!s.url_revealable) {
    reveal = h('p', { class: 'hint' }, 'This URL cannot be shown again: its code was drawn before Flowgate kept codes sealed (or without SECRETS_KEY). Rotate the code, with a grace period so clients keep working, to get a URL that can.');
  } else if (!admin) {
    reveal = h('p', { class: 'hint' }, 'An admin can show this URL again.');
  } else {
    reveal = h('button', {
      type: 'button',
      onclick: async () => {
        try {
          const r = await api(`/servers/${s.id}/reveal`, { method: 'POST' });
          shown.replaceChildren(secretPanel({ ...s, ...r }, 'Keep it secret: whoever has this URL can call the server. This reveal is in the audit log.'));
          announce(`The MCP URL of ${s.name} is shown (the reveal is in the audit log)`);
          shown.querySelector('button.copy')?.focus();
        } catch (e) {
          shown.replaceChildren(h('p', { class: 'form-error', role: 'alert' }, e.message));
        }
      },
    }, 'Show URL');
  }

  const grace = input({ type: 'number', min: '0', max: '604800', step: '1', value: '0', inputmode: 'numeric' });
  const presets = h('div', { class: 'row' }, PRESETS.map(([v, label]) => h('button', {
    type: 'button', class: 'small', onclick: () => (grace.value = v),
  }, label)));
  const rotate = form(async () => {
    const seconds = Number(grace.value || '0');
    const text = seconds > 0
      ? `Rotate the code of "${s.name}"? The current URL keeps working for ${seconds} s, then stops.`
      : `Rotate the code of "${s.name}"? The current URL stops working at once.`;
    if (!(await confirmAction(text, 'Rotate code'))) return;
    const body = seconds > 0 ? { grace_seconds: seconds } : undefined;
    const fresh = await api(`/servers/${s.id}/refresh`, { method: 'POST', body });
    showSecret(section, fresh, 'Rotated');
  },
  field('Grace period (seconds)', grace, { name: 'grace_seconds', hint: 'How long the current URL keeps working after the rotation (0 to 604800); each use of it is written to the log.' }),
  presets,
  h('button', { type: 'submit' }, 'Rotate code'));

  return h('div', { class: 'card' }, h('h2', {}, 'MCP URL'),
    h('p', {}, `Code …${s.server_code_hint}.`), previous, reveal, shown,
    h('h3', {}, 'Rotate the code'), rotate);
}
