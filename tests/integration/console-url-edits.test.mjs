// The console's "URL you cannot lose" and "edit what exists", in a real headless Chromium against
// `wrangler dev` and the fake Dify: an admin shows a server's URL again (audited) and other roles
// are refused; a rotation with a short grace keeps the old URL working on the real MCP endpoint,
// then it stops; a D1 export holds no code; a server edited in place (name, description,
// parameter descriptions, apps) as clients see it at once; the apps list says where each app is
// published; an app's input form and outputs edited as tables; "Test connection" naming what is
// wrong (key, base_url without /v1, mode, refused address) and how to fix it.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { chromium } from 'playwright-core';

import { repoRoot, startFlowgate } from '../support/harness.mjs';
import { startDifyFixture } from '../support/dify-fixture.mjs';
import { FORM, publish, registerApp, rpc } from '../support/flowgate-setup.mjs';

const CHROMIUM = '/usr/bin/chromium';
const SHOTS = path.join(repoRoot, 'tests', 'screenshots');
const ARGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
  '--disable-background-networking', '--disable-component-update', '--disable-sync'];

let fg;
let dify;
let context;
let page;
let profile;
const errors = [];

before(async () => {
  assert.ok(fs.existsSync(CHROMIUM), `${CHROMIUM} is missing: run scripts/setup.sh --test-tools (it installs Debian's chromium)`);
  [fg, dify] = await Promise.all([startFlowgate(), startDifyFixture()]);
  profile = fs.mkdtempSync(path.join(os.tmpdir(), 'flowgate-chromium-'));
  fs.mkdirSync(SHOTS, { recursive: true });
  context = await chromium.launchPersistentContext(profile, { executablePath: CHROMIUM, headless: true, args: ARGS, viewport: { width: 1280, height: 900 } });
  page = context.pages()[0] ?? (await context.newPage());
  page.on('pageerror', (e) => errors.push(`pageerror: ${e.message}`));
  page.on('console', (msg) => {
    if (msg.type() !== 'error') return;
    const url = msg.location()?.url ?? '';
    // The API's deliberate 4xx answers (a refused reveal, a bad field) are what the page shows.
    if (/^Failed to load resource: the server responded with a status of 4\d\d/.test(msg.text()) && url.startsWith(`${fg.url}/console/api/`)) return;
    errors.push(`console.error: ${msg.text()} (${url})`);
  });
});

after(async () => {
  await context?.close().catch(() => {});
  if (profile) fs.rmSync(profile, { recursive: true, force: true });
  await Promise.allSettled([fg?.stop(), dify?.stop()]);
});

const shot = (name) => page.screenshot({ path: path.join(SHOTS, `console-${name}.png`), fullPage: true });
const go = async (hash) => {
  // The same hash again would not render the page anew: pass by another one first.
  if (await page.evaluate((h) => location.hash === h, hash)) await page.evaluate(() => (location.hash = '#/audit'));
  await page.evaluate((h) => (location.hash = h), hash);
  await page.waitForSelector('section.page:not([aria-busy])');
};

async function signIn(token) {
  await page.goto(`${fg.url}/console/`);
  await page.evaluate(() => sessionStorage.clear());
  await page.reload();
  await page.getByLabel('Console token').fill(token);
  await page.keyboard.press('Enter');
  await page.getByRole('heading', { level: 1, name: 'Apps' }).waitFor();
  await page.waitForSelector('section.page:not([aria-busy])');
}

const list = { jsonrpc: '2.0', id: 1, method: 'tools/list' };
const tools = async (url) => {
  const r = await rpc(url, list);
  assert.equal(r.status, 200, r.text);
  return r.json.result.tools;
};

let app;
let server;
let firstUrl;
let currentUrl;

describe('a URL you cannot lose', () => {
  test('an admin shows the URL again; the reveal is audited', async () => {
    ({ app } = await registerApp(fg, dify, { mode: 'workflow', name: 'Summariser' }));
    const published = await publish(fg, app.id);
    server = published.server;
    firstUrl = published.url;
    currentUrl = firstUrl;
    await signIn(fg.adminToken);
    await go(`#/servers/${server.id}`);
    const card = page.locator('.card', { has: page.getByRole('heading', { name: 'MCP URL', exact: true }) });
    await card.getByRole('button', { name: 'Show URL' }).click();
    const shown = card.locator('.mcp-url');
    await shown.waitFor();
    assert.equal(await shown.textContent(), firstUrl);
    assert.match(await card.textContent(), /This reveal is in the audit log/);
    await shot('server-url-revealed');
    const audit = await fg.console('/audit?limit=20');
    const reveal = audit.json.data.find((e) => e.action === 'POST /servers/{id}/reveal');
    assert.deepEqual([reveal?.actor, reveal?.target, reveal?.status], ['admin', server.id, 200], audit.text);
  });

  test('a publisher and a viewer are refused, in the page and by the API', async () => {
    for (const role of ['publisher', 'viewer']) {
      const t = await fg.console('/tokens', { method: 'POST', body: { name: `url-${role}`, role } });
      assert.equal(t.status, 201, t.text);
      const r = await fg.console(`/servers/${server.id}/reveal`, { method: 'POST', token: t.json.token });
      assert.equal(r.status, 403, r.text);
      assert.match(r.json.message, new RegExp(`needs the admin role.*${role}`));
      assert.ok(!r.text.includes(firstUrl.split('/mcp/server/')[1].split('/')[0]), 'no code in the refusal');
      await signIn(t.json.token);
      await go(`#/servers/${server.id}`);
      const card = page.locator('.card', { has: page.getByRole('heading', { name: 'MCP URL', exact: true }) });
      await card.getByText('An admin can show this URL again.').waitFor();
      assert.equal(await card.getByRole('button', { name: 'Show URL' }).count(), 0);
      assert.equal(await page.locator('.mcp-url').count(), 0);
    }
    const audit = await fg.console('/audit?limit=50');
    const refused = audit.json.data.filter((e) => e.action === 'POST /servers/{id}/reveal' && e.status === 403).map((e) => e.actor);
    assert.deepEqual(refused.sort(), ['token:url-publisher', 'token:url-viewer']);
    await signIn(fg.adminToken);
  });

  test('a server without a sealed code says to rotate, in words', async () => {
    const other = await registerApp(fg, dify, { mode: 'workflow', name: 'Legacy' });
    const { server: legacy } = await publish(fg, other.app.id);
    // As a server created before codes were kept sealed.
    await fg.d1(`UPDATE mcp_servers SET code_sealed = NULL WHERE id = '${legacy.id}'`);
    const r = await fg.console(`/servers/${legacy.id}/reveal`, { method: 'POST' });
    assert.equal(r.status, 409, r.text);
    assert.equal(r.json.error, 'not_revealable');
    assert.match(r.json.message, /cannot be shown again.*rotate the code.*grace_seconds/s);
    await go(`#/servers/${legacy.id}`);
    await page.getByText(/This URL cannot be shown again/).waitFor();
    assert.equal(await page.getByRole('button', { name: 'Show URL' }).count(), 0);
  });

  test('rotation with a short grace: the old URL works on the real endpoint, says so in the log, then stops', async () => {
    assert.equal((await tools(firstUrl)).length, 1);
    await go(`#/servers/${server.id}`);
    await page.getByLabel('Grace period (seconds)').fill('4');
    await page.getByRole('button', { name: 'Rotate code' }).click();
    const dialog = page.getByRole('dialog');
    assert.match(await dialog.textContent(), /keeps working for 4 s/);
    await dialog.getByRole('button', { name: 'Rotate code' }).click();
    const shown = page.locator('.mcp-url');
    await shown.waitFor();
    const rotatedAt = Date.now();
    currentUrl = await shown.textContent();
    assert.notEqual(currentUrl, firstUrl);
    // During the grace both work.
    assert.equal((await tools(firstUrl)).length, 1, 'the old URL in its grace');
    assert.equal((await tools(currentUrl)).length, 1);
    const s = await fg.console(`/servers/${server.id}`);
    assert.equal(s.json.previous_code.hint, firstUrl.split('/mcp/server/')[1].slice(12, 16), s.text);
    await go(`#/servers/${server.id}`);
    await page.getByText(/The previous code …\w{4} still works until/).waitFor();
    await shot('server-grace');
    const oldCode = firstUrl.split('/mcp/server/')[1].split('/')[0];
    // Flowgate's own lines (wrangler dev's access log of the local server prints request paths).
    const ours = fg.log().split('\n').filter((l) => !l.startsWith('[wrangler:'));
    const said = ours.filter((l) => l.includes('called with its previous code'));
    assert.ok(said.length >= 1, ours.join('\n'));
    assert.match(said[0], new RegExp(`"server_id":"${server.id}"`));
    assert.deepEqual(ours.filter((l) => l.includes(oldCode)), [], 'the previous code is never in a log line');
    // After the grace: the usual 404, the new URL still works.
    await new Promise((r) => setTimeout(r, Math.max(0, rotatedAt + 4_500 - Date.now())));
    const old = await rpc(firstUrl, list);
    assert.equal(old.status, 404, old.text);
    assert.match(old.json.error.message, /Server not found/);
    assert.equal((await tools(currentUrl)).length, 1);
    // The admin's reveal now shows the new URL.
    const again = await fg.console(`/servers/${server.id}/reveal`, { method: 'POST' });
    assert.equal(again.json.mcp_url, currentUrl);
  });

  test('a D1 export holds no code in clear', async () => {
    const codes = [firstUrl, currentUrl].map((u) => u.split('/mcp/server/')[1].split('/')[0]);
    const tables = await fg.d1("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE '\\_cf\\_%' ESCAPE '\\'");
    let rows = 0;
    for (const { name } of tables) {
      for (const row of await fg.d1(`SELECT * FROM "${name}"`)) {
        rows++;
        const text = JSON.stringify(row);
        for (const code of codes) assert.ok(!text.includes(code), `table ${name} holds a code in clear`);
      }
    }
    assert.ok(rows > 3, 'the export read rows');
    const [sealed] = await fg.d1(`SELECT code_sealed FROM mcp_servers WHERE id = '${server.id}'`);
    assert.match(sealed.code_sealed, /^enc:v1:/);
  });
});

describe('edit what exists', () => {
  let multi;
  let beta;

  test('the apps list says where each app is published', async () => {
    ({ app: beta } = await registerApp(fg, dify, { mode: 'workflow', name: 'Beta', form: [{ 'text-input': { variable: 'topic', label: 'Topic', required: true } }] }));
    const r = await fg.console('/servers', { method: 'POST', body: { name: 'Workspace', description: 'd', app_ids: [app.id] } });
    assert.equal(r.status, 201, r.text);
    multi = r.json;
    await go('#/apps');
    const row = page.locator('tr', { has: page.getByRole('link', { name: 'Summariser', exact: true }) });
    assert.match(await row.textContent(), /Summariser, Workspace|Workspace, Summariser/);
    await row.getByRole('link', { name: 'Workspace' }).waitFor();
    const betaRow = page.locator('tr', { has: page.getByRole('link', { name: 'Beta', exact: true }) });
    assert.match(await betaRow.textContent(), /not published/);
  });

  test('a server edited in place: name, description, parameter descriptions and apps, seen by clients at once', async () => {
    await go(`#/servers/${multi.id}`);
    const card = page.locator('.card', { has: page.getByRole('heading', { name: 'Edit server' }) });
    await card.getByLabel('Name', { exact: true }).fill('Team tools');
    await card.getByLabel('Description', { exact: true }).fill('Tools of the team');
    await card.getByLabel('Description of text').fill('The text to summarise, in full');
    await card.getByLabel('Beta').check();
    await card.getByRole('button', { name: 'Save server' }).click();
    await page.getByRole('heading', { level: 1, name: 'Server Team tools' }).waitFor();
    const listed = await tools(multi.mcp_url);
    assert.deepEqual(listed.map((t) => t.name).sort(), ['Beta', 'Summariser']);
    const summariser = listed.find((t) => t.name === 'Summariser');
    assert.equal(summariser.inputSchema.properties.text.description, 'The text to summarise, in full');
    // The new app's input has its own row now.
    await page.getByLabel('Description of topic').waitFor();
    // A one-app server's name follows its app: the field says so and is not editable.
    await go(`#/servers/${server.id}`);
    const one = page.locator('.card', { has: page.getByRole('heading', { name: 'Edit server' }) });
    assert.equal(await one.getByLabel('Name', { exact: true }).isDisabled(), true);
    assert.match(await one.textContent(), /rename the app to rename it/);
    // A description for no input is refused by the API, naming the inputs.
    const bad = await fg.console(`/servers/${multi.id}`, { method: 'PATCH', body: { parameters: { txt: 'x' } } });
    assert.equal(bad.status, 400, bad.text);
    assert.match(bad.json.errors[0].message, /their inputs: count, lang, loud, text, topic/);
  });

  test("an app's input form and outputs edited as tables of variables", async () => {
    await go(`#/apps/${app.id}`);
    // The app's rows, rendered from its stored form: edits made before they arrive would be
    // replaced by them (a loaded machine can render the previous page's section first).
    await page.getByLabel(`Variable of input ${FORM.length}`).waitFor();
    await page.getByRole('button', { name: 'Add input' }).click();
    const n = FORM.length + 1;
    await page.getByLabel(`Variable of input ${n}`).fill('style');
    await page.getByLabel(`Label of input ${n}`).fill('Style');
    await page.getByLabel(`Type of input ${n}`).selectOption('paragraph');
    await page.getByLabel(`Input ${n} is required`).check();
    await page.getByLabel('Label of input 1').fill('The text');
    await page.getByRole('button', { name: 'Add output' }).click();
    const m = 2;
    await page.getByLabel(`Variable of output ${m}`).fill('summary');
    await page.getByLabel(`Type of output ${m}`).selectOption('string');
    await page.getByLabel(`Description of output ${m}`).fill('The summary');
    await shot('app-variables');
    await page.getByRole('button', { name: 'Save app' }).click();
    await page.getByRole('heading', { level: 1, name: 'Apps' }).waitFor();
    const stored = (await fg.console(`/apps/${app.id}`)).json;
    assert.deepEqual(stored.user_input_form.at(-1), { paragraph: { variable: 'style', label: 'Style', required: true } });
    // What a row's columns do not show is kept (max_length of `text`), and edits land.
    assert.deepEqual(stored.user_input_form[0], { 'text-input': { variable: 'text', label: 'The text', required: true, max_length: 50 } });
    assert.deepEqual(stored.user_input_form[1]['select'].options, ['en', 'fr']);
    assert.deepEqual(stored.outputs, [{ variable: 'echo', type: 'object' }, { variable: 'summary', type: 'string', description: 'The summary' }]);
    // A bad row's error is shown at the table.
    await go(`#/apps/${app.id}`);
    await page.getByLabel('Variable of input 2').fill('bad name!');
    await page.getByRole('button', { name: 'Save app' }).click();
    const err = page.locator('fieldset[data-field="user_input_form"] .field-error:not([hidden])');
    await err.waitFor();
    assert.match(await err.textContent(), /^user_input_form\[1\]\.select\.variable: "bad name!" is not a valid variable name/);
  });
});

describe('test connection', () => {
  const report = async (appId) => {
    await go(`#/apps/${appId}`);
    await page.getByRole('button', { name: 'Test connection' }).click();
    const out = page.locator('.test-result');
    await out.locator('ul.checks').waitFor();
    return out.textContent();
  };
  const register = async (name, mode, backend) => {
    const r = await fg.console('/apps', { method: 'POST', body: { name, mode, backend, user_input_form: FORM } });
    assert.equal(r.status, 201, r.text);
    return r.json.id;
  };

  test('a working app passes', async () => {
    const text = await report(app.id);
    assert.match(text, /The connection works\./);
    assert.match(text, /GET \/info: Dify app "Summariser" answers; its mode is workflow/);
    await shot('app-test-ok');
  });

  test('each mistake is named with its fix', async () => {
    const key = dify.addApp({ mode: 'chat', name: 'Chatty', user_input_form: FORM });
    const cases = [
      [{ base_url: dify.baseUrl, api_key: 'app-not-a-key-of-dify' }, 'workflow', /refused the API key \(HTTP 401/, /API Access page/],
      [{ base_url: dify.baseUrl.replace(/\/v1$/, ''), api_key: key }, 'chat', /does not end in \/v1/, /add \/v1 to base_url/],
      [{ base_url: dify.baseUrl, api_key: key }, 'workflow', /is a "chat" app, but Flowgate calls it as workflow/, /set the app's mode to "chat"/],
      [{ base_url: 'http://127.0.0.1:9/v1', api_key: key }, 'workflow', /could not connect to the Dify API at 127\.0\.0\.1:9/, /check the host and port/],
    ];
    let i = 0;
    for (const [backend, mode, problem, fix] of cases) {
      const id = await register(`Broken ${++i}`, mode, backend);
      const text = await report(id);
      assert.match(text, /Problem: /, text);
      assert.match(text, problem, text);
      assert.match(text, fix, text);
      if (i === 1) await shot('app-test-error');
    }
    assert.deepEqual(errors, []);
  });
});
