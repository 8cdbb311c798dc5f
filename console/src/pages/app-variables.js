// An app's input form and outputs edited as tables of variables (a row each), with a JSON view
// for pasting a whole form. Each editor is one control for the console's field errors
// (`user_input_form[2].variable` lands on it), and keeps what a row's columns do not show
// (max_length, default, hints, ...) as it was.
import { h, input, select, textarea } from '../ui.js';

const FORM_TYPES = ['text-input', 'paragraph', 'select', 'number', 'checkbox', 'json_object', 'file', 'file-list'];
const OUTPUT_TYPES = ['string', 'number', 'integer', 'boolean', 'object', 'array', 'file', 'array[file]'];

let editors = 0;

/** The input form (Dify's user_input_form items, `{type: {variable, label, ...}}`). */
export function formEditor(items) {
  return editor({
    name: 'user_input_form',
    legend: 'Input form',
    noun: 'input',
    items: Array.isArray(items) ? items : [],
    columns: ['Variable', 'Label', 'Type', 'Required', 'Options (select)'],
    toRow: (item) => {
      const [type, f] = Object.entries(item ?? {})[0] ?? ['text-input', {}];
      return { type, ...(f ?? {}) };
    },
    cells: (r, n) => {
      const c = {
        variable: input({ value: r.variable ?? '', 'aria-label': `Variable of input ${n}`, placeholder: 'text' }),
        label: input({ value: r.label ?? '', 'aria-label': `Label of input ${n}` }),
        type: select(FORM_TYPES.map((t) => [t]), { 'aria-label': `Type of input ${n}` }),
        required: h('input', { type: 'checkbox', checked: r.required, 'aria-label': `Input ${n} is required` }),
        options: input({ value: (r.options ?? []).join(', '), 'aria-label': `Options of input ${n}`, placeholder: 'en, fr' }),
      };
      c.type.value = FORM_TYPES.includes(r.type) ? r.type : 'text-input';
      return c;
    },
    fromRow: (r, c) => {
      const { type: _type, variable: _v, label: _l, required: _r, options: _o, ...kept } = r;
      const f = { ...kept, variable: c.variable.value.trim(), label: c.label.value.trim() || c.variable.value.trim(), required: c.required.checked };
      const options = c.options.value.split(',').map((s) => s.trim()).filter(Boolean);
      if (c.type.value === 'select' || options.length) f.options = options;
      return { [c.type.value]: f };
    },
  });
}

/** The declared outputs (`[{variable, type, description?}]`). */
export function outputsEditor(items) {
  return editor({
    name: 'outputs',
    legend: 'Outputs',
    noun: 'output',
    items: Array.isArray(items) ? items : [],
    columns: ['Variable', 'Type', 'Description'],
    toRow: (item) => ({ ...(item ?? {}) }),
    cells: (r, n) => {
      const c = {
        variable: input({ value: r.variable ?? '', 'aria-label': `Variable of output ${n}`, placeholder: 'summary' }),
        type: select(OUTPUT_TYPES.map((t) => [t]), { 'aria-label': `Type of output ${n}` }),
        description: input({ value: r.description ?? '', 'aria-label': `Description of output ${n}` }),
      };
      c.type.value = OUTPUT_TYPES.includes(r.type) ? r.type : 'string';
      return c;
    },
    fromRow: (r, c) => {
      const out = { ...r, variable: c.variable.value.trim(), type: c.type.value };
      const d = c.description.value.trim();
      if (d) out.description = d;
      else delete out.description;
      return out;
    },
  });
}

function editor({ name, legend, noun, items, columns, toRow, cells, fromRow }) {
  const id = `vars-${++editors}`;
  let rows = items.map(toRow);
  let controls = [];
  const body = h('tbody');
  const tableEl = h('div', { class: 'table-wrap' }, h('table', { class: 'vars' },
    h('caption', {}, `${legend}: one row per variable`),
    h('thead', {}, h('tr', {}, columns.map((c) => h('th', { scope: 'col' }, c)), h('th', { scope: 'col' }, h('span', { class: 'skip' }, 'Remove')))),
    body));
  const jsonArea = textarea({ rows: 6, 'aria-label': `${legend} (JSON)` });
  const jsonView = h('div', { hidden: true }, h('label', { for: (jsonArea.id = `${id}-json`) }, `${legend} (JSON)`), jsonArea);
  const toggle = h('button', { type: 'button', class: 'small link' }, `Edit the ${legend.toLowerCase()} as JSON`);
  const add = h('button', { type: 'button', class: 'small' }, `Add ${noun}`);
  const err = h('p', { class: 'field-error', id: `${id}-err`, hidden: true });

  /** The rows as the controls show them now. */
  const current = () => controls.map((c, i) => fromRow(rows[i], c));
  const draw = () => {
    controls = rows.map((r, i) => cells(r, i + 1));
    body.replaceChildren(...(controls.length
      ? controls.map((c, i) => h('tr', {}, Object.values(c).map((el) => h('td', {}, el)),
        h('td', {}, h('button', {
          type: 'button',
          class: 'small danger',
          'aria-label': `Remove ${noun} ${i + 1}`,
          onclick: () => {
            const kept = current();
            rows = kept.filter((_, j) => j !== i).map(toRow);
            draw();
          },
        }, 'Remove'))))
      : [h('tr', {}, h('td', { colspan: columns.length + 1, class: 'empty' }, `No ${noun} yet`))]));
  };
  add.addEventListener('click', () => {
    rows = [...current().map(toRow), toRow(undefined)];
    draw();
    controls.at(-1)?.variable.focus();
  });
  const asJson = () => !jsonView.hidden;
  toggle.addEventListener('click', () => {
    if (asJson()) {
      const parsed = parse(jsonArea.value);
      rows = parsed.map(toRow);
      draw();
    } else {
      jsonArea.value = JSON.stringify(current(), null, 2);
    }
    jsonView.hidden = asJson();
    tableEl.hidden = asJson();
    add.hidden = asJson();
    toggle.textContent = asJson() ? `Edit the ${legend.toLowerCase()} as a table` : `Edit the ${legend.toLowerCase()} as JSON`;
  });
  function parse(text) {
    const t = text.trim();
    if (!t) return [];
    let v;
    try {
      v = JSON.parse(t);
    } catch (e) {
      const error = new Error(`not valid JSON: ${e.message}`);
      error.errors = [{ field: name, message: `is not valid JSON: ${e.message}` }];
      throw error;
    }
    if (!Array.isArray(v)) {
      const error = new Error('not a list');
      error.errors = [{ field: name, message: 'must be a JSON array: one item per variable' }];
      throw error;
    }
    return v;
  }
  draw();
  // The group is the one control the field errors of `name[...]` are shown at.
  const group = h('fieldset', { id, tabindex: '-1', 'aria-describedby': err.id },
    h('legend', {}, legend), tableEl, jsonView, h('div', { class: 'row' }, add, toggle), err);
  group.dataset.field = name;
  return { element: group, read: () => (asJson() ? parse(jsonArea.value) : current()) };
}
