// Named console tokens with roles (issue 13) against the real Worker: create, list and revoke;
// the token shown once and stored only as its hash; a revoked token refused on the next request;
// every console route called as viewer, publisher and admin (one table, below, checked against
// pure::console_routes::ROUTES); the token's name as the audit log's actor; precise errors.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';

import { repoRoot, startFlowgate } from '../support/harness.mjs';

const sha256 = (s) => createHash('sha256').update(s).digest('hex');
const MISSING = '00000000-0000-4000-8000-000000000000';

let fg;

before(async () => {
  fg = await startFlowgate({ vars: { SECRET_REF_NAMES: 'SOME_KEY' } });
});

after(async () => {
  await fg?.stop();
});

function assertJsonError(r, status, code, message) {
  assert.equal(r.status, status, `${r.status} ${r.text}`);
  assert.match(r.headers.get('content-type') ?? '', /^application\/json/);
  assert.equal(r.json?.error, code, r.text);
  if (message instanceof RegExp) assert.match(r.json.message, message);
  else if (message !== undefined) assert.equal(r.json.message, message);
}

async function createToken(name, role, by = fg.adminToken) {
  const r = await fg.console('/tokens', { method: 'POST', body: { name, role }, token: by });
  assert.equal(r.status, 201, r.text);
  return r.json;
}

const app = (name) => ({
  name,
  mode: 'workflow',
  // Never called: the routes below only store and read it.
  backend: { base_url: 'http://127.0.0.1:9/v1', api_key: '$SOME_KEY' },
  user_input_form: [{ 'text-input': { variable: 'text', label: 'Text', required: true } }],
});

describe('creating, listing and revoking', () => {
  test('a token is shown once, with its prefix, and never again', async () => {
    const t = await createToken('list-me', 'viewer');
    assert.match(t.token, /^fgc_[A-Za-z0-9]{32}$/);
    assert.equal(t.hint, t.token.slice(-4));
    assert.equal(t.name, 'list-me');
    assert.equal(t.role, 'viewer');
    assert.equal(t.created_by, 'admin');
    assert.equal(t.last_used_at, null);
    assert.match(t.id, /^[0-9a-f-]{36}$/);

    const list = await fg.console('/tokens');
    assert.equal(list.status, 200, list.text);
    const listed = list.json.data.find((x) => x.id === t.id);
    assert.deepEqual(Object.keys(listed).sort(), ['created_at', 'created_by', 'hint', 'id', 'last_used_at', 'name', 'role']);
    assert.ok(!list.text.includes(t.token), 'the list never carries a token');
    assert.ok(!list.text.includes(sha256(t.token)), 'nor its hash');

    // D1 holds the hash; no file of the local state holds the token.
    const rows = await fg.d1(`SELECT token_hash, hint FROM console_tokens WHERE id = '${t.id}'`);
    assert.deepEqual(rows, [{ token_hash: sha256(t.token), hint: t.hint }]);
    assert.deepEqual(fg.stateFilesContaining(t.token), []);
  });

  test('a token works as its role; its last use is recorded', async () => {
    const t = await createToken('reader', 'viewer');
    const r = await fg.console('/apps', { token: t.token });
    assert.equal(r.status, 200, r.text);
    // Recorded off the response path: wait for it rather than sleep.
    let used = null;
    for (let i = 0; i < 50 && used === null; i++) {
      const list = await fg.console('/tokens');
      used = list.json.data.find((x) => x.id === t.id).last_used_at;
      if (used === null) await new Promise((res) => setTimeout(res, 100));
    }
    assert.ok(Number.isInteger(used) && used > 1_700_000_000, `last_used_at ${used}`);
  });

  test('a revoked token stops working at once', async () => {
    const t = await createToken('short-lived', 'publisher');
    assert.equal((await fg.console('/apps', { token: t.token })).status, 200, 'memoized by this use');
    const del = await fg.console(`/tokens/${t.id}`, { method: 'DELETE' });
    assert.equal(del.status, 200, del.text);
    assert.deepEqual(del.json, { result: 'success', id: t.id });
    // The very next request, on the isolate that revoked it (wrangler dev runs one).
    const r = await fg.console('/apps', { token: t.token });
    assertJsonError(r, 401, 'unauthorized', 'the console token is not valid (unknown, or revoked); ask an admin for a new one');
    assert.equal(r.headers.get('www-authenticate'), 'Bearer realm="flowgate-console", error="invalid_token"');
    const list = await fg.console('/tokens');
    assert.ok(!list.json.data.some((x) => x.id === t.id));
    assertJsonError(await fg.console(`/tokens/${t.id}`, { method: 'DELETE' }), 404, 'not_found', /no console token with id/);
  });

  test('an unknown token of the right shape is a 401 like any wrong token', async () => {
    const r = await fg.console('/apps', { token: `fgc_${'A'.repeat(32)}` });
    assertJsonError(r, 401, 'unauthorized', /console token is not valid/);
    const wrong = await fg.console('/apps', { token: 'not-a-token' });
    assertJsonError(wrong, 401, 'unauthorized', 'the admin token is not valid');
  });

  test('an admin token may manage tokens; its creations name it', async () => {
    const admin = await createToken('second-admin', 'admin');
    const made = await createToken('made-by-token', 'viewer', admin.token);
    assert.equal(made.created_by, 'token:second-admin');
    const del = await fg.console(`/tokens/${made.id}`, { method: 'DELETE', token: admin.token });
    assert.equal(del.status, 200, del.text);
  });
});

describe('bad bodies get precise errors', () => {
  const post = (body) => fg.console('/tokens', { method: 'POST', body });
  const fieldErrors = (r) => Object.fromEntries(r.json.errors.map((e) => [e.field, e.message]));

  test('missing, wrong and unknown fields', async () => {
    let r = await post({});
    assertJsonError(r, 400, 'validation_failed');
    assert.match(fieldErrors(r).name, /^is required: who holds the token/);
    assert.match(fieldErrors(r).role, /^is required: "admin" \(everything\), "publisher" \(apps and servers\) or "viewer" \(read only\)/);

    r = await post({ name: 'x', role: 'owner' });
    assertJsonError(r, 400, 'validation_failed');
    assert.match(fieldErrors(r).role, /^"owner" is not a role; expected "admin"/);

    r = await post({ name: 'x'.repeat(65), role: 'viewer' });
    assert.equal(fieldErrors(r).name, 'must be at most 64 characters (got 65)');
    r = await post({ name: 'tab\there', role: 'viewer' });
    assert.match(fieldErrors(r).name, /^must be printable ASCII/);
    r = await post({ name: '', role: 'viewer' });
    assert.match(fieldErrors(r).name, /^must not be empty/);
    r = await post({ name: 7, role: ['viewer'] });
    assert.equal(fieldErrors(r).name, 'must be a string (got a number)');
    assert.equal(fieldErrors(r).role, 'must be a string (got an array)');
    r = await post({ name: 'x', role: 'viewer', token: 'fgc_mine' });
    assert.equal(fieldErrors(r).token, 'is not a token field (known: name, role)');

    assertJsonError(await post(['x']), 400, 'bad_request', /must be a JSON object/);
    const raw = await fg.console('/tokens', { method: 'POST', body: 'name=x', headers: { 'content-type': 'text/plain' } });
    assertJsonError(raw, 415, 'unsupported_media_type');
  });

  test('a name is unique: 409 naming it', async () => {
    await createToken('twice', 'viewer');
    const r = await post({ name: 'twice', role: 'admin' });
    assertJsonError(r, 409, 'conflict', 'a console token named "twice" already exists; choose another name, or revoke that token first');
  });

  test('unknown ids and methods', async () => {
    assertJsonError(await fg.console(`/tokens/${MISSING}`, { method: 'DELETE' }), 404, 'not_found', /no console token with id/);
    const r = await fg.console('/tokens', { method: 'PUT', body: {} });
    assertJsonError(r, 405, 'method_not_allowed');
    assert.equal(r.headers.get('allow'), 'GET, POST');
    const g = await fg.console(`/tokens/${MISSING}`);
    assertJsonError(g, 405, 'method_not_allowed');
    assert.equal(g.headers.get('allow'), 'DELETE');
  });
});

describe('roles on every console route', () => {
  // THE list of console routes: one row per route and method, with the least role it needs
  // and the request made (ids: {app}, {server} and {key} exist; MISSING does not). A call that
  // would destroy what later rows need aims at MISSING: a 404 shows it passed the role check.
  // The test below checks this list against pure::console_routes::ROUTES (the one table the
  // shell dispatches by and pure::console_roles takes each route's role from).
  const ROUTES = [
    ['GET', '/apps', 'viewer'],
    ['POST', '/apps', 'publisher', {}],
    ['POST', '/apps/import', 'publisher', {}],
    ['GET', '/apps/{app}', 'viewer'],
    ['PUT', '/apps/{app}', 'publisher', {}],
    ['DELETE', `/apps/${MISSING}`, 'publisher'],
    ['POST', '/apps/{app}/tools/refresh', 'publisher'],
    ['POST', '/apps/{app}/test', 'publisher'],
    ['GET', '/apps/{app}/server', 'viewer'],
    ['POST', `/apps/${MISSING}/server`, 'publisher', {}],
    ['PUT', '/apps/{app}/server', 'publisher', {}],
    ['DELETE', `/apps/${MISSING}/server`, 'publisher'],
    ['GET', `/apps/${MISSING}/server/refresh`, 'publisher'],
    ['POST', `/apps/${MISSING}/server/refresh`, 'publisher'],
    ['GET', '/servers', 'viewer'],
    ['POST', '/servers', 'publisher', {}],
    ['GET', '/servers/{server}', 'viewer'],
    ['PUT', '/servers/{server}', 'publisher', { description: 'Changed by a role test' }],
    ['PATCH', '/servers/{server}', 'publisher', { description: 'Edited by a role test' }],
    ['POST', '/servers/{server}/reveal', 'admin'],
    ['DELETE', `/servers/${MISSING}`, 'publisher'],
    ['GET', `/servers/${MISSING}/refresh`, 'publisher'],
    ['POST', `/servers/${MISSING}/refresh`, 'publisher'],
    ['GET', '/servers/{server}/auth', 'viewer'],
    ['PUT', '/servers/{server}/auth', 'publisher', {}],
    ['GET', '/servers/{server}/keys', 'viewer'],
    ['POST', '/servers/{server}/keys', 'publisher', {}],
    ['DELETE', `/servers/{server}/keys/${MISSING}`, 'publisher'],
    ['GET', '/servers/{server}/tasks', 'viewer'],
    ['GET', `/servers/{server}/tasks/${MISSING}`, 'viewer'],
    ['POST', `/servers/{server}/tasks/${MISSING}/cancel`, 'publisher'],
    ['GET', '/servers/{server}/usage', 'viewer'],
    ['GET', '/servers/{server}/tools', 'viewer'],
    ['POST', '/servers/{server}/tools/call', 'publisher', { name: 'No_such_tool' }],
    ['GET', '/servers/{server}/calls', 'viewer'],
    ['GET', '/servers/{server}/calls/settings', 'viewer'],
    ['PUT', '/servers/{server}/calls/settings', 'publisher', { record_payloads: false }],
    ['GET', '/audit', 'viewer'],
    ['POST', '/secrets/reseal', 'admin'],
    ['GET', '/tokens', 'admin'],
    ['POST', '/tokens', 'admin', {}],
    ['DELETE', `/tokens/${MISSING}`, 'admin'],
  ];
  const RANK = { viewer: 0, publisher: 1, admin: 2 };

  test('the list is every route and method of pure::console_routes::ROUTES', () => {
    const src = fs.readFileSync(path.join(repoRoot, 'src/pure/console_routes.rs'), 'utf8');
    const table = src.split('pub const ROUTES: &[Route] = &[')[1].split('\n];')[0];
    const declared = [];
    for (const [, method, p, role] of table.matchAll(/at\((\w+), "([^"]+)", \w+, (\w+), \d+\)/g)) {
      const pattern = p.split('/').map((s) => (s.startsWith('{') ? '{}' : s)).join('/');
      declared.push(`${method.toUpperCase()} /${pattern} ${role.toLowerCase()}`);
    }
    // Ids of any kind read as `{}`, as in the table.
    const id = /^(\{\w+\}|[0-9a-f-]{36})$/;
    const ours = ROUTES.map(([method, p, role]) => `${method} ${p.split('/').map((s) => (id.test(s) ? '{}' : s)).join('/')} ${role}`);
    assert.ok(declared.length >= 30, `parsed ${declared.length} routes from ROUTES`);
    assert.deepEqual([...ours].sort(), [...declared].sort());
  });

  test('viewer, publisher and admin: allowed, or 403 naming both roles', async () => {
    const a = await fg.console('/apps', { method: 'POST', body: app('Role table app') });
    assert.equal(a.status, 201, a.text);
    const s = await fg.console(`/apps/${a.json.id}/server`, { method: 'POST', body: {} });
    assert.equal(s.status, 201, s.text);
    const k = await fg.console(`/servers/${s.json.id}/keys`, { method: 'POST', body: { name: 'role-table' } });
    assert.equal(k.status, 201, k.text);
    const ids = { app: a.json.id, server: s.json.id, key: k.json.id };
    const tokens = {
      viewer: await createToken('table-viewer', 'viewer'),
      publisher: await createToken('table-publisher', 'publisher'),
      admin: await createToken('table-admin', 'admin'),
    };

    const failures = [];
    for (const [method, template, least, body] of ROUTES) {
      const p = template.replace(/\{(\w+)\}/g, (_, name) => ids[name]);
      for (const [role, t] of Object.entries(tokens)) {
        const r = await fg.console(p, { method, body, token: t.token });
        const where = `${method} ${template} as ${role}: ${r.status} ${r.text.slice(0, 200)}`;
        if (RANK[role] >= RANK[least]) {
          // Past the role check: the handler answered (200, 201, or its own 4xx).
          if ([401, 403, 405].includes(r.status) || r.status >= 500) failures.push(`allowed, yet ${where}`);
        } else {
          const roleNote = least === 'admin' ? '' : ' \\(or higher\\)';
          // The path is quoted as every console message quotes input: cut after 64 characters.
          const want = new RegExp(
            `^${method} "/console/api/[^"]+" (\\(\\d+ characters\\) )?needs the ${least} role${roleNote}; ` +
              `console token "table-${role}" has the ${role} role`,
          );
          if (r.status !== 403 || r.json?.error !== 'forbidden' || !want.test(r.json?.message ?? '')) {
            failures.push(`refused expected, got ${where}`);
          }
        }
      }
    }
    assert.deepEqual(failures, []);
  });

  test('the route table answers 404 and 405 for every role, before any role check', async () => {
    const t = await createToken('lost-viewer', 'viewer');
    assertJsonError(await fg.console('/nope', { token: t.token }), 404, 'not_found', /no console route GET/);
    const r = await fg.console('/apps', { method: 'PATCH', body: {}, token: t.token });
    assertJsonError(r, 405, 'method_not_allowed');
    assert.equal(r.headers.get('allow'), 'GET, POST');
  });
});

describe('the audit log', () => {
  test("names the token that wrote, refused writes included; ADMIN_TOKEN's actor is admin", async () => {
    const pub = await createToken('deploy-bot', 'publisher');
    const view = await createToken('auditor', 'viewer');
    const created = await fg.console('/apps', { method: 'POST', body: app('Audited app'), token: pub.token });
    assert.equal(created.status, 201, created.text);
    const refused = await fg.console(`/apps/${created.json.id}`, { method: 'DELETE', token: view.token });
    assert.equal(refused.status, 403, refused.text);

    const log = await fg.console('/audit?limit=10', { token: view.token });
    assert.equal(log.status, 200, log.text);
    const rows = log.json.data;
    const byRequest = (r) => rows.find((x) => x.request_id === r.headers.get('x-request-id'));
    // Each entry also reads in words (`summary`, `target_name`: pure::audit_words), checked in
    // console-playground.test.mjs; here the raw fields.
    const raw = ({ summary, target_name, ...rest }) => {
      assert.ok(typeof summary === 'string' && summary.length > 0 && !summary.includes('/apps'), `summary in words: ${summary}`);
      return { ...rest, at: 0, request_id: '' };
    };
    assert.deepEqual(
      raw(byRequest(created)),
      { at: 0, request_id: '', actor: 'token:deploy-bot', action: 'POST /apps', target: null, status: 201 },
    );
    assert.deepEqual(
      raw(byRequest(refused)),
      { at: 0, request_id: '', actor: 'token:auditor', action: 'DELETE /apps/{id}', target: created.json.id, status: 403 },
    );
    const tokenWrite = rows.find((x) => x.action === 'POST /tokens' && x.actor === 'admin');
    assert.ok(tokenWrite, JSON.stringify(rows));
    assert.ok(!log.text.includes(pub.token) && !log.text.includes(view.token), 'no token in the audit log');
    // Nor in the Worker's log lines.
    assert.ok(!fg.log().includes(pub.token), 'no token in the logs');
  });
});

describe('limits', () => {
  // Last: it fills the table.
  test('at most 100 tokens, however many are asked for at once: the rest are 409s saying so', async () => {
    const have = (await fg.console('/tokens')).json.data.length;
    // Ten more than there is room for, all at once: a count read before each insert would let
    // every one of them see room.
    const asked = await Promise.all(
      Array.from({ length: 100 - have + 10 }, (_, i) =>
        fg.console('/tokens', { method: 'POST', body: { name: `filler-${i}`, role: 'viewer' } }),
      ),
    );
    const created = asked.filter((r) => r.status === 201);
    const refused = asked.filter((r) => r.status !== 201);
    assert.equal(created.length, 100 - have, asked.filter((r) => r.status !== 201 && r.status !== 409).map((r) => r.text).join('\n'));
    for (const r of refused) {
      assertJsonError(r, 409, 'conflict', 'there are 100 console tokens, the most there may be; revoke one first');
    }
    assert.equal((await fg.console('/tokens')).json.data.length, 100);
    const r = await fg.console('/tokens', { method: 'POST', body: { name: 'one-too-many', role: 'viewer' } });
    assertJsonError(r, 409, 'conflict', 'there are 100 console tokens, the most there may be; revoke one first');
  });
});
