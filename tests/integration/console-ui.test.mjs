// The web console at /console in a real headless Chromium (Debian's /usr/bin/chromium, driven by
// playwright-core; no browser is downloaded), against `wrangler dev` and the fake Dify: headers
// and CSP, a keyboard-only sign-in, server errors next to their fields, an app created and
// published through the pages, the URL copied and called with the official SDK client, the
// usage chart and the audit log following, a rotation that kills the old URL, a console token,
// every page at 375 px without horizontal overflow, and no error in the browser's console.
// Screenshots of every page go to tests/screenshots/ (git-ignored) on every run.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';

import { chromium } from 'playwright-core';
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

import { repoRoot, startFlowgate } from '../support/harness.mjs';
import { startDifyFixture } from '../support/dify-fixture.mjs';
import { FORM, publish, registerApp } from '../support/flowgate-setup.mjs';
import { CreateTaskResultSchema } from '@modelcontextprotocol/sdk/types.js';

const CHROMIUM = '/usr/bin/chromium';
const SHOTS = path.join(repoRoot, 'tests', 'screenshots');
// The closed network refuses Chromium's background connections; these keep it from trying.
const ARGS = ['--headless', '--no-sandbox', '--disable-gpu', '--disable-quic', '--no-first-run',
  '--disable-background-networking', '--disable-component-update', '--disable-sync'];

let fg;
let dify;
let context;
let page;
let profile;
/** Errors the page or the browser reported: console.error, uncaught exceptions, CSP violations. */
const errors = [];
/** Every URL the browser requested, to show that no token is ever in one. */
const requested = [];

before(async () => {
  assert.ok(fs.existsSync(CHROMIUM), `${CHROMIUM} is missing: run scripts/setup.sh --test-tools (it installs Debian's chromium)`);
  // USAGE_FLUSH_SECONDS=0: each MCP request writes its isolate's counts from its wait_until.
  [fg, dify] = await Promise.all([startFlowgate({ vars: { USAGE_FLUSH_SECONDS: '0' } }), startDifyFixture()]);
  profile = fs.mkdtempSync(path.join(os.tmpdir(), 'flowgate-chromium-'));
  fs.mkdirSync(SHOTS, { recursive: true });
  context = await chromium.launchPersistentContext(profile, {
    executablePath: CHROMIUM,
    headless: true,
    args: ARGS,
    viewport: { width: 1280, height: 900 },
  });
  await context.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: fg.url });
  page = context.pages()[0] ?? (await context.newPage());
  page.on('pageerror', (e) => errors.push(`pageerror: ${e.message}`));
  page.on('console', (msg) => {
    if (msg.type() !== 'error') return;
    // Chromium logs every 4xx fetch as "Failed to load resource". The console API answering
    // 400/401/409 on purpose (a wrong token, a bad field: what the page then shows) is not a
    // page error; anything else, a 5xx or a failed asset included, is.
    const url = msg.location()?.url ?? '';
    if (/^Failed to load resource: the server responded with a status of 4\d\d/.test(msg.text()) && url.startsWith(`${fg.url}/console/api/`)) return;
    errors.push(`console.error: ${msg.text()} (${url})`);
  });
  page.on('request', (r) => requested.push(r.url()));
});

after(async () => {
  await context?.close().catch(() => {});
  if (profile) fs.rmSync(profile, { recursive: true, force: true });
  await Promise.allSettled([fg?.stop(), dify?.stop()]);
});

const shot = (name) => page.screenshot({ path: path.join(SHOTS, `console-${name}.png`), fullPage: true });
const go = async (hash) => {
  await page.evaluate((h) => (location.hash = h), hash);
  await page.waitForSelector('section.page:not([aria-busy])');
};
/** Presses Tab until `locator` has the focus (at most `max` times); fails otherwise. */
async function tabTo(locator, max = 30) {
  for (let i = 0; i < max; i++) {
    if (await locator.evaluate((el) => el === document.activeElement)) return;
    await page.keyboard.press('Tab');
  }
  assert.fail(`Tab never reached ${locator}`);
}

let appId;
let serverId;
let mcpUrl;
let freshUrl;
let taskServerId;

describe('web console', () => {
  test('/console and /console/ serve the page with a strict CSP; the API stays the Worker\'s', async () => {
    const bare = await fetch(`${fg.url}/console`, { redirect: 'manual' });
    assert.equal(bare.status, 307);
    assert.equal(bare.headers.get('location'), '/console/');
    const res = await fetch(`${fg.url}/console/`);
    assert.equal(res.status, 200);
    const html = await res.text();
    assert.match(html, /<title>Flowgate console<\/title>/);
    const csp = res.headers.get('content-security-policy');
    assert.ok(csp, 'a Content-Security-Policy header');
    const directives = Object.fromEntries(csp.split(';').map((d) => d.trim().split(/\s+/)).map(([k, ...v]) => [k, v.join(' ')]));
    assert.equal(directives['default-src'], "'self'");
    assert.equal(directives['script-src'], "'self'");
    assert.equal(directives['style-src'], "'self'");
    assert.equal(directives['frame-ancestors'], "'none'");
    assert.equal(directives['object-src'], "'none'");
    assert.doesNotMatch(csp, /unsafe-|\*|data:.*script/, 'nothing inline, no eval, no wildcard');
    assert.equal(res.headers.get('x-content-type-options'), 'nosniff');
    assert.equal(res.headers.get('referrer-policy'), 'no-referrer');
    assert.equal(res.headers.get('x-frame-options'), 'DENY');
    // Nothing inline to allow: every script has a src, no <style>, no style attribute.
    assert.doesNotMatch(html, /<script(?![^>]*\ssrc=)[^>]*>/);
    assert.doesNotMatch(html, /<style|\sstyle=/);
    const js = await fetch(`${fg.url}/console/main.js`);
    assert.equal(js.status, 200);
    assert.match(js.headers.get('content-type'), /javascript/);
    assert.ok(js.headers.get('content-security-policy'));
    // The console API under the same prefix is still the Worker (a JSON 401, not an asset).
    const apiRes = await fetch(`${fg.url}/console/api/apps`);
    assert.equal(apiRes.status, 401);
    assert.equal((await apiRes.json()).error, 'unauthorized');
  });

  test('keyboard only: sign in (a wrong token first, its message at the field), then one action', async () => {
    await page.goto(`${fg.url}/console`);
    assert.equal(new URL(page.url()).pathname, '/console/', 'the browser follows /console to /console/');
    const token = page.getByLabel('Console token');
    await token.waitFor();
    await page.evaluate(() => document.activeElement?.blur());
    await tabTo(token);
    await page.keyboard.type('fgc_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa');
    await page.keyboard.press('Enter');
    const fieldError = page.locator('.field-error:not([hidden])');
    await fieldError.waitFor();
    assert.match(await fieldError.textContent(), /token/i, 'the 401\'s message is shown at the token field');
    assert.equal(await token.getAttribute('aria-invalid'), 'true');
    await shot('signin');

    await token.fill('');
    await tabTo(token);
    await page.keyboard.type(fg.adminToken);
    await page.keyboard.press('Enter');
    await page.getByRole('heading', { level: 1, name: 'Apps' }).waitFor();
    await page.waitForSelector('section.page:not([aria-busy])');
    assert.equal(await page.evaluate(() => sessionStorage.getItem('flowgate.console.token')), fg.adminToken);
    assert.equal(await page.evaluate(() => localStorage.length), 0, 'nothing in localStorage');

    // One action by keyboard: Tab to "New app", Enter opens the form.
    await tabTo(page.getByRole('link', { name: 'New app' }));
    await page.keyboard.press('Enter');
    await page.getByRole('heading', { level: 2, name: 'New app' }).waitFor();
  });

  test('server-side errors are shown next to the fields they concern', async () => {
    await go('#/apps/new');
    await page.getByLabel('Name', { exact: true }).fill('');
    await page.getByLabel('Base URL').fill('ftp://dify.example/v1');
    await page.getByRole('textbox', { name: 'API key' }).fill('app-x');
    await page.getByRole('button', { name: 'Create app' }).click();
    const nameErr = page.locator('.field[data-field="name"] .field-error');
    const urlErr = page.locator('.field[data-field="backend.base_url"] .field-error');
    await nameErr.waitFor();
    await urlErr.waitFor();
    // The same body straight to the API: the page shows the server's own messages.
    const r = await fg.console('/apps', { method: 'POST', body: { name: '', description: '', mode: 'workflow', backend: { base_url: 'ftp://dify.example/v1', api_key: 'app-x' }, user_input_form: [], outputs: [] } });
    assert.equal(r.status, 400);
    const byField = Object.fromEntries(r.json.errors.map((e) => [e.field, e.message]));
    assert.ok(byField.name && byField['backend.base_url'], r.text);
    assert.equal(await nameErr.textContent(), byField.name);
    assert.equal(await urlErr.textContent(), byField['backend.base_url']);
    assert.equal(await page.evaluate(() => document.activeElement?.dataset.field), 'name', 'the first bad field has the focus');
    await shot('app-errors');
  });

  test('create an app against the fake Dify and publish it; copy its URL', async () => {
    const apiKey = dify.addApp({ mode: 'workflow', name: 'Summariser', user_input_form: FORM });
    await go('#/apps/new');
    await page.getByLabel('Name', { exact: true }).fill('Summariser');
    await page.getByLabel('Description', { exact: true }).fill('Summarises text');
    await page.getByLabel('Mode').selectOption('workflow');
    await page.getByLabel('Base URL').fill(dify.baseUrl);
    await page.getByRole('textbox', { name: 'API key' }).fill(apiKey);
    // The form and outputs are tables of variables; a whole form is pasted in their JSON view.
    await page.getByRole('button', { name: 'Edit the input form as JSON' }).click();
    await page.getByLabel('Input form (JSON)').fill(JSON.stringify(FORM));
    await page.getByRole('button', { name: 'Edit the outputs as JSON' }).click();
    await page.getByLabel('Outputs (JSON)').fill('[{"variable": "echo", "type": "object"}]');
    await page.getByRole('button', { name: 'Create app' }).click();
    await page.getByRole('heading', { level: 1, name: 'Servers' }).waitFor();
    await page.waitForSelector('section.page:not([aria-busy])');
    appId = new URLSearchParams(page.url().split('?')[1]).get('app');
    assert.ok(appId, page.url());
    const stored = await fg.console(`/apps/${appId}`);
    assert.equal(stored.json.name, 'Summariser');
    assert.equal(stored.json.backend.api_key, '***', 'the literal key is stored masked');

    const oneApp = page.locator('.card', { has: page.getByRole('heading', { name: 'One app' }) });
    assert.equal(await oneApp.getByLabel('App').inputValue(), appId, 'the new app is preselected');
    await oneApp.getByLabel('Description', { exact: true }).fill('Summarises text for you');
    await oneApp.getByRole('button', { name: 'Publish' }).click();
    const shown = page.locator('.mcp-url');
    await shown.waitFor();
    mcpUrl = await shown.textContent();
    assert.match(mcpUrl, new RegExp(`^${fg.url}/mcp/server/[A-Za-z0-9]{16}/mcp$`));
    await page.getByRole('button', { name: 'Copy URL' }).click();
    await page.getByText('Copied', { exact: true }).waitFor();
    assert.equal(await page.evaluate(() => navigator.clipboard.readText()), mcpUrl, 'the clipboard holds the URL');
    // Ready-to-paste configs carry the URL.
    const blocks = await page.locator('.copy-block pre').allTextContents();
    const vscode = JSON.parse(blocks[0]);
    assert.equal(Object.values(vscode.servers)[0].url, mcpUrl);
    assert.equal(Object.values(JSON.parse(blocks[1]).mcpServers)[0].url, mcpUrl);
    assert.deepEqual(Object.values(JSON.parse(blocks[2]).mcpServers)[0].args, ['mcp-remote', mcpUrl]);
    assert.equal(blocks[3], `claude mcp add --transport http summariser '${mcpUrl}'`);
    assert.match(blocks[4], /@modelcontextprotocol\/inspector --cli '.*' --transport http/);
    await shot('publish');
    const { data } = (await fg.console('/servers')).json;
    serverId = data.find((s) => s.app_id === appId).id;
  });

  test('the copied URL works with the SDK client, and the usage chart follows', async () => {
    await go(`#/usage/${serverId}`);
    const totals = page.locator('#usage-totals');
    assert.equal(await totals.getAttribute('data-calls'), '0');
    assert.equal(await page.locator('#usage-chart rect.bar').count(), 0, 'no bars before a call');

    const client = new Client({ name: 'console-ui-test', version: '1.0.0' });
    await client.connect(new StreamableHTTPClientTransport(new URL(mcpUrl)));
    try {
      const { tools } = await client.listTools();
      assert.equal(tools.length, 1);
      const result = await client.callTool({ name: tools[0].name, arguments: { text: 'hello' } });
      assert.notEqual(result.isError, true, JSON.stringify(result));
    } finally {
      await client.close();
    }

    // The MCP request flushed its counts from wait_until (USAGE_FLUSH_SECONDS=0) and the usage
    // route flushes its own isolate: refresh until the page shows the call (events, not time).
    for (let i = 0; i < 50 && (await totals.getAttribute('data-calls')) !== '1'; i++) {
      await page.getByRole('button', { name: 'Refresh' }).click();
      await page.waitForSelector('section.page:not([aria-busy]) #usage-totals');
    }
    assert.equal(await totals.getAttribute('data-calls'), '1');
    assert.equal(await page.locator('#usage-chart').getAttribute('data-calls'), '1');
    assert.ok((await page.locator('#usage-chart rect.bar').count()) >= 1, 'a bar for the call');
    assert.match(await page.locator('#usage-chart title').first().textContent(), /^1 calls, 0 errors/);
    await shot('usage');
  });

  test('rotate (keyboard through the confirmation): the old URL fails, the new one works; the audit log follows', async () => {
    await go('#/audit');
    const before = await page.locator('tbody tr').count();
    assert.ok(await page.getByText('Published app “Summariser”').count(), 'the publish is in the audit log, in words');

    await go(`#/servers/${serverId}`);
    await shot('server');
    await tabTo(page.getByRole('button', { name: 'Rotate code' }));
    await page.keyboard.press('Enter');
    const dialog = page.getByRole('dialog');
    await dialog.waitFor();
    await tabTo(dialog.getByRole('button', { name: 'Rotate code' }), 3);
    await page.keyboard.press('Enter');
    const shown = page.locator('.mcp-url');
    await shown.waitFor();
    const fresh = await shown.textContent();
    freshUrl = fresh;
    assert.notEqual(fresh, mcpUrl);

    const old = await fetch(mcpUrl, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
      body: JSON.stringify({ jsonrpc: '2.0', id: 1, method: 'tools/list' }),
    });
    assert.equal(old.status, 404, 'the old URL stops working at once');
    await old.arrayBuffer();
    const client = new Client({ name: 'console-ui-test', version: '1.0.0' });
    await client.connect(new StreamableHTTPClientTransport(new URL(fresh)));
    assert.equal((await client.listTools()).tools.length, 1);
    await client.close();

    await go('#/audit');
    assert.equal(await page.locator('tbody tr').count(), before + 1);
    const top = await page.locator('tbody tr').first().locator('td').allTextContents();
    assert.deepEqual(top.slice(1), ['admin', 'Rotated the code of server “Summariser”', '200']);
    await shot('audit');
  });

  test('a console token is shown once; a duplicate name\'s 409 is shown at the form', async () => {
    await go('#/tokens');
    await page.getByLabel('Name').fill('deploy-bot');
    await page.getByLabel('Role').selectOption('publisher');
    await page.getByRole('button', { name: 'Create token' }).click();
    const once = page.locator('.once code');
    await once.waitFor();
    assert.match(await once.textContent(), /^fgc_[A-Za-z0-9]{32}$/);
    await page.getByRole('cell', { name: 'deploy-bot' }).waitFor();
    await shot('tokens');
    await page.getByLabel('Name').fill('deploy-bot');
    await page.getByRole('button', { name: 'Create token' }).click();
    const err = page.locator('.form-error:not([hidden])');
    await err.waitFor();
    assert.match(await err.textContent(), /already exists/);
  });

  test('edit an app: the masked key is kept when *** is sent back', async () => {
    await go(`#/apps/${appId}`);
    assert.equal(await page.getByRole('textbox', { name: 'API key' }).inputValue(), '***', 'the key is shown masked');
    await page.getByLabel('Description', { exact: true }).fill('Summarises any text');
    await page.getByRole('button', { name: 'Save app' }).click();
    await page.getByRole('status').getByText('Saved Summariser').waitFor();
    const stored = await fg.console(`/apps/${appId}`);
    assert.equal(stored.json.description, 'Summarises any text');
    const client = new Client({ name: 'console-ui-test', version: '1.0.0' });
    await client.connect(new StreamableHTTPClientTransport(new URL(freshUrl)));
    try {
      const { tools } = await client.listTools();
      const result = await client.callTool({ name: tools[0].name, arguments: { text: 'again' } });
      assert.notEqual(result.isError, true, `the stored key still reaches Dify: ${JSON.stringify(result)}`);
    } finally {
      await client.close();
    }
  });

  test('import a Dify app; publish it with another on one multi-app server, with client keys', async () => {
    const chatKey = dify.addApp({ mode: 'chat', name: 'Helpdesk', user_input_form: [] });
    await go('#/apps/import');
    await page.getByLabel('Dify base URL').fill(dify.baseUrl);
    await page.getByRole('textbox', { name: 'API key' }).fill(chatKey);
    await page.getByRole('button', { name: 'Import' }).click();
    await page.getByRole('heading', { level: 1, name: 'Servers' }).waitFor();
    await page.waitForSelector('section.page:not([aria-busy])');
    const importedId = new URLSearchParams(page.url().split('?')[1]).get('app');
    const imported = await fg.console(`/apps/${importedId}`);
    assert.equal(imported.json.name, 'Helpdesk');
    assert.equal(imported.json.mode, 'chat');

    const multi = page.locator('.card', { has: page.getByRole('heading', { name: 'Several apps' }) });
    await multi.getByRole('button', { name: 'Publish' }).click();
    // Nothing filled in: the API's messages land at the name and at the app picks.
    await multi.locator('.field[data-field="name"] .field-error').waitFor();
    await multi.locator('#app-picks-err:not([hidden])').waitFor();
    await multi.getByLabel('Name', { exact: true }).fill('Workspace');
    await multi.getByLabel('Summariser').check();
    await multi.getByLabel('Helpdesk').check();
    await multi.getByRole('button', { name: 'Publish' }).click();
    await page.locator('.mcp-url').waitFor();
    const { data } = (await fg.console('/servers')).json;
    const ws = data.find((x) => x.name === 'Workspace');
    assert.equal(ws.kind, 'multi');
    assert.deepEqual([...ws.app_ids].sort(), [appId, importedId].sort());

    await go(`#/servers/${ws.id}`);
    await page.getByLabel('Mode').selectOption('key');
    await page.getByRole('button', { name: 'Save authentication' }).click();
    await page.getByRole('status').getByText(/no client key yet/).waitFor();
    assert.equal((await fg.console(`/servers/${ws.id}/auth`)).json.mode, 'key');
    await go(`#/servers/${ws.id}`);
    await page.getByLabel(/New key's name/).fill('alice-laptop');
    await page.getByRole('button', { name: 'Create key' }).click();
    const key = await page.locator('.once code').textContent();
    assert.match(key, /^fgk_[A-Za-z0-9]{32}$/);
    await page.getByRole('cell', { name: 'alice-laptop' }).waitFor();
    // The same name again: the 409 is shown at the form.
    await page.getByLabel(/New key's name/).fill('alice-laptop');
    await page.getByRole('button', { name: 'Create key' }).click();
    await page.locator('.form-error:not([hidden])', { hasText: 'already has a client key' }).waitFor();
    await shot('server-keys');

    // Rotated, the key server's configs carry the Authorization header; the key opens it.
    await page.getByRole('button', { name: 'Rotate code' }).click();
    await page.getByRole('dialog').getByRole('button', { name: 'Rotate code' }).click();
    const url = await page.locator('.mcp-url').textContent();
    const blocks = await page.locator('.copy-block pre').allTextContents();
    assert.deepEqual(Object.values(JSON.parse(blocks[0]).servers)[0].headers, { Authorization: 'Bearer fgk_…' });
    assert.ok(Object.values(JSON.parse(blocks[2]).mcpServers)[0].args.includes('Authorization: Bearer ${FLOWGATE_KEY}'));
    const client = new Client({ name: 'console-ui-test', version: '1.0.0' });
    await client.connect(new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers: { authorization: `Bearer ${key}` } } }));
    try {
      assert.deepEqual((await client.listTools()).tools.map((t) => t.name).sort(), ['Helpdesk', 'Summariser']);
    } finally {
      await client.close();
    }
  });

  test('tasks: list, detail and cancel a running durable task', async () => {
    const { app } = await registerApp(fg, dify, { mode: 'workflow', name: 'Long Haul', form: [{ 'text-input': { variable: 'text', label: 'Text', required: true } }], runDurationMs: 60_000, backend: { task_support: 'optional', poll_interval_seconds: 1 } });
    const { server, url } = await publish(fg, app.id);
    taskServerId = server.id;
    const client = new Client({ name: 'console-ui-test', version: '1.0.0' });
    await client.connect(new StreamableHTTPClientTransport(new URL(url)));
    let taskId;
    try {
      ({ task: { taskId } } = await client.request({ method: 'tools/call', params: { name: 'Long_Haul', arguments: { text: 'x' }, task: { ttl: 600_000 } } }, CreateTaskResultSchema));
    } finally {
      await client.close();
    }
    await go(`#/tasks/${server.id}`);
    await page.getByRole('link', { name: taskId }).click();
    await page.getByRole('heading', { level: 2, name: `Task ${taskId}` }).waitFor();
    await page.waitForSelector('section.page:not([aria-busy])');
    await shot('task');
    await page.getByRole('button', { name: 'Cancel task' }).click();
    await page.getByRole('dialog').getByRole('button', { name: 'Cancel task' }).click();
    await page.getByRole('status').getByText(`Task ${taskId} cancelled`).waitFor();
    const shown = await fg.console(`/servers/${server.id}/tasks/${taskId}`);
    assert.equal(shown.json.cancel_requested, true, shown.text);
  });

  test('every page is readable at 375 px: nothing overflows horizontally', async () => {
    await page.setViewportSize({ width: 375, height: 800 });
    for (const [name, hash] of [['apps', '#/apps'], ['app-edit', `#/apps/${appId}`], ['servers', '#/servers'],
      ['server-detail', `#/servers/${serverId}`], ['publish-form', '#/servers/publish'], ['usage', `#/usage/${serverId}`],
      ['tasks', `#/tasks/${taskServerId}`], ['audit', '#/audit'], ['tokens', '#/tokens']]) {
      await go(hash);
      const { scroll, width } = await page.evaluate(() => ({ scroll: document.documentElement.scrollWidth, width: window.innerWidth }));
      assert.ok(scroll <= width, `${hash}: the page is ${scroll} px wide in a ${width} px window`);
      await page.screenshot({ path: path.join(SHOTS, `console-375-${name}.png`), fullPage: true });
    }
    await page.setViewportSize({ width: 1280, height: 900 });
    await go('#/apps');
    await shot('apps');
  });

  test('sign out forgets the token; a reload of a deep link asks for it again', async () => {
    await go(`#/usage/${serverId}`);
    await page.getByRole('button', { name: 'Sign out' }).click();
    await page.getByRole('heading', { level: 1, name: 'Sign in' }).waitFor();
    assert.equal(await page.evaluate(() => sessionStorage.length), 0);
    await page.goto(`${fg.url}/console/#/usage/${serverId}`);
    await page.getByLabel('Console token').fill(fg.adminToken);
    await page.keyboard.press('Enter');
    await page.getByRole('heading', { level: 1, name: 'Usage' }).waitFor();
  });

  test('no token in any URL; no error in the browser console', async () => {
    assert.ok(requested.length > 10, 'the browser made requests');
    for (const url of requested) {
      assert.ok(!url.includes(fg.adminToken), `a token in a requested URL: ${url}`);
    }
    assert.deepEqual(errors, []);
  });
});
