// worker/stored-json.mjs, the JSON text the Worker reads Durable Object records and D1 rows
// through (src/shell/js_json.rs). Records written before 3fdefc3 were stored by
// serde_wasm_bindgen: structs as plain objects, JSON objects (serde_json maps) as `Map`s,
// `None` as an absent or undefined field. Such a record must read as the same JSON a plain
// object would give, or a durable task in flight during an upgrade is lost. (Checked end to
// end by hand once, with a task created by 38c3d8a and completed by 3fdefc3; this keeps the
// conversion that made it work.)
import { test } from 'node:test';
import assert from 'node:assert/strict';

import { storedJson } from '../../worker/stored-json.mjs';

const map = (o) => new Map(Object.entries(o));

test('a record stored the old way (JSON objects as Maps) reads as the same JSON as a plain one', () => {
  const plain = {
    spec: {
      task_id: 't1',
      app: { id: 'a', mode: 'workflow', backend: { base_url: 'https://dify.example', api_key: '$KEY' }, user_input_form: [{ 'text-input': { variable: 'text' } }], outputs: [] },
      body: { inputs: { text: 'persist me', nested: [{ deep: { x: 1 } }] }, response_mode: 'blocking', user: 'alice' },
      version: '2025-11-25',
    },
    state: { status: 'working', attempts: 2 },
    error: [-32603, 'boom'],
  };
  const old = {
    spec: {
      task_id: 't1',
      app: { id: 'a', mode: 'workflow', backend: map({ base_url: 'https://dify.example', api_key: '$KEY' }), user_input_form: [map({ 'text-input': map({ variable: 'text' }) })], outputs: [] },
      body: map({ inputs: map({ text: 'persist me', nested: [map({ deep: map({ x: 1 }) })] }), response_mode: 'blocking', user: 'alice' }),
      version: '2025-11-25',
    },
    state: { status: 'working', attempts: 2 },
    result: undefined,
    dify_task_id: undefined,
    error: [-32603, 'boom'],
  };
  assert.equal(storedJson(old), JSON.stringify(plain));
  assert.deepEqual(JSON.parse(storedJson(old)), plain);
});

test('a record stored as a plain object (this deploy) is plain JSON; nothing is undefined', () => {
  const rec = { a: 1, b: [true, null, 'x'], c: { d: 'é\n' } };
  assert.equal(storedJson(rec), JSON.stringify(rec));
  assert.equal(storedJson(undefined), undefined);
  assert.equal(storedJson(null), 'null');
  assert.equal(storedJson(new Map()), '{}');
});
