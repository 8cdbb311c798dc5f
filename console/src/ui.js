// Small DOM helpers: elements without innerHTML, form fields with an error slot each, the
// server's field errors placed next to their fields, a confirmation dialog, copy buttons.

/** h('p', {class: 'x', onclick: f}, 'text', child): an element; never sets `style` or HTML. */
export function h(tag, attrs = {}, ...children) {
  const el = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs ?? {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k.startsWith('on')) el.addEventListener(k.slice(2), v);
    else if (k === 'class') el.className = v;
    else if (k === 'value') el.value = v;
    else if (k === 'checked') el.checked = !!v;
    else el.setAttribute(k, v === true ? '' : String(v));
  }
  append(el, children);
  return el;
}

function append(el, children) {
  for (const c of children.flat(Infinity)) {
    if (c === undefined || c === null || c === false) continue;
    el.append(c instanceof Node ? c : document.createTextNode(String(c)));
  }
}

let ids = 0;
const uid = (p) => `${p}-${++ids}`;

/**
 * A labelled control for `name` (the JSON path the console API uses in its errors, e.g.
 * `backend.base_url`), with an optional hint and a slot for the server's message.
 */
export function field(label, control, { name, hint } = {}) {
  const id = control.id || uid('f');
  control.id = id;
  if (name) control.dataset.field = name;
  const err = h('p', { class: 'field-error', id: `${id}-err`, hidden: true });
  const hintEl = hint ? h('p', { class: 'hint', id: `${id}-hint` }, hint) : null;
  control.setAttribute('aria-describedby', [hintEl && hintEl.id, err.id].filter(Boolean).join(' '));
  const wrap = h('div', { class: 'field' }, h('label', { for: id }, label), control, hintEl, err);
  wrap.dataset.field = name ?? '';
  return wrap;
}

export const input = (attrs = {}) => h('input', { type: 'text', autocomplete: 'off', spellcheck: 'false', ...attrs });
export const textarea = (attrs = {}) => h('textarea', { rows: 4, spellcheck: 'false', ...attrs });
export function select(options, attrs = {}) {
  return h('select', attrs, options.map(([value, label]) => h('option', { value }, label ?? value)));
}

/** A form with a slot for errors that name no field of it. */
export function form(onsubmit, ...children) {
  const general = h('div', { class: 'form-error', role: 'alert', hidden: true });
  const f = h('form', { method: 'post', novalidate: true }, general, ...children);
  f.addEventListener('submit', async (e) => {
    e.preventDefault();
    clearErrors(f);
    const buttons = [...f.querySelectorAll('button[type=submit]')];
    buttons.forEach((b) => (b.disabled = true));
    try {
      await onsubmit(f);
    } catch (err) {
      showErrors(f, err);
    } finally {
      buttons.forEach((b) => (b.disabled = false));
    }
  });
  return f;
}

export function clearErrors(root) {
  for (const p of root.querySelectorAll('.field-error, .form-error')) {
    p.hidden = true;
    p.textContent = '';
  }
  for (const c of root.querySelectorAll('[aria-invalid]')) c.removeAttribute('aria-invalid');
}

/**
 * Puts each of an ApiError's field errors next to the control whose name is the field or its
 * longest prefix (`user_input_form[2].variable` → `user_input_form`); the rest, and the
 * message of an error without fields, go to the form's general slot. Focuses the first one.
 */
export function showErrors(root, err) {
  const general = root.querySelector('.form-error');
  // Controls of hidden parts (another mode's settings) are not where an error belongs.
  const controls = new Map(
    [...root.querySelectorAll('[data-field]:not(div)')].filter((c) => !c.closest('[hidden]')).map((c) => [c.dataset.field, c]),
  );
  const leftover = [];
  let first = null;
  for (const { field: name, message } of err.errors ?? []) {
    const control = closestControl(controls, name);
    if (!control) {
      leftover.push(`${name}: ${message}`);
      continue;
    }
    const slot = document.getElementById(`${control.id}-err`);
    const text = control.dataset.field === name ? message : `${name}: ${message}`;
    slot.textContent = slot.textContent ? `${slot.textContent} ${text}` : text;
    slot.hidden = false;
    control.setAttribute('aria-invalid', 'true');
    first ??= control;
  }
  if (!err.errors?.length) leftover.push(err.message ?? String(err));
  if (leftover.length && general) {
    general.textContent = leftover.join(' · ');
    general.hidden = false;
  }
  if (first) first.focus();
  else if (general && !general.hidden) {
    general.tabIndex = -1;
    general.focus();
  }
}

function closestControl(controls, name) {
  let n = name;
  while (n) {
    if (controls.has(n)) return controls.get(n);
    const cut = Math.max(n.lastIndexOf('.'), n.lastIndexOf('['));
    n = cut > 0 ? n.slice(0, cut) : '';
  }
  return null;
}

/** Asks for a confirmation in a modal dialog; resolves true when confirmed. */
export function confirmAction(message, action) {
  return new Promise((resolve) => {
    const dialog = h(
      'dialog',
      { class: 'confirm', 'aria-labelledby': 'confirm-text' },
      h('p', { id: 'confirm-text' }, message),
      h(
        'form',
        { method: 'dialog', class: 'row' },
        h('button', { value: 'cancel', type: 'submit' }, 'Cancel'),
        h('button', { value: 'ok', type: 'submit', class: 'danger' }, action),
      ),
    );
    dialog.addEventListener('close', () => {
      dialog.remove();
      resolve(dialog.returnValue === 'ok');
    });
    document.body.append(dialog);
    dialog.showModal();
  });
}

/** A button copying `text`; the page says "Copied" beside it (or how to copy by hand). */
export function copyButton(text, label = 'Copy', ariaLabel) {
  const note = h('span', { class: 'copied', role: 'status' });
  const button = h('button', {
    type: 'button',
    class: 'copy',
    'aria-label': ariaLabel,
    onclick: async () => {
      try {
        await navigator.clipboard.writeText(text);
        note.textContent = 'Copied';
      } catch {
        note.textContent = 'Copy failed: select the text and copy it by hand';
      }
    },
  }, label);
  return h('span', { class: 'copy-wrap' }, button, note);
}

/** A read-only block of text with a copy button. */
export function copyBlock(title, text) {
  return h('div', { class: 'copy-block' },
    h('div', { class: 'row between' }, h('h4', {}, title), copyButton(text, 'Copy', `Copy the ${title} configuration`)),
    h('pre', { tabindex: '0' }, h('code', {}, text)));
}

/** Announces a short message in the page's live region. By default it survives the navigation
 * that usually follows (a save, then the list), not the one after; `keep: false` for one about
 * what this page shows (the URL shown once), which goes with the page. */
export function announce(message, { keep = true } = {}) {
  const s = document.getElementById('status');
  s.textContent = message;
  if (keep) s.dataset.keep = '1';
  else delete s.dataset.keep;
}

/** On navigation: an announcement made before the previous one is cleared. */
export function ageAnnouncement() {
  const s = document.getElementById('status');
  if (s.dataset.keep) delete s.dataset.keep;
  else s.textContent = '';
}

export function when(seconds) {
  if (seconds === null || seconds === undefined) return '—';
  const ms = seconds > 1e12 ? seconds : seconds * 1000;
  return new Date(ms).toISOString().replace('T', ' ').replace(/\.\d+Z$/, 'Z');
}

/** A table of rows: columns [[header, row => cell, class?]] (class `wide-only`: hidden on narrow screens). */
export function table(columns, rows, caption) {
  return h('div', { class: 'table-wrap', tabindex: '0', role: 'region', 'aria-label': caption },
    h('table', {},
      h('caption', {}, caption),
      h('thead', {}, h('tr', {}, columns.map(([c, , cls]) => h('th', { scope: 'col', class: cls }, c)))),
      h('tbody', {}, rows.length
        ? rows.map((r) => h('tr', {}, columns.map(([, f, cls]) => h('td', { class: cls }, f(r)))))
        : h('tr', {}, h('td', { colspan: columns.length, class: 'empty' }, 'Nothing yet')))));
}

/** An error box for a page that could not load. */
export function loadError(err) {
  return h('div', { class: 'form-error', role: 'alert' }, err.message ?? String(err));
}
