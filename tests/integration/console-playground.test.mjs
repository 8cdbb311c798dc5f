// The console's tool playground and call log in a real headless Chromium (Debian's
// /usr/bin/chromium, driven by playwright-core), against `wrangler dev` and the fake Dify: a
// tool run from the form made of its inputSchema shows each workflow node's progress while the
// run is still going, then content and structuredContent; the call log lists calls of clients and
// of the playground and filters them; the "copy the URL now" banner stays on its page; the audit
// log in words; the apps table and the new pages at 375 px; no error in the browser's console.
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
const NODES = [
  { title: 'Start', type: 'start' },
  { title: 'Look up', type: 'tool' },
  { title: 'Draft', type: 'llm' },
  { title: 'End', type: 'end' },
];

let fg;
let dify;
let context;
let page;
let profile;
const errors = [];
let app;
let server;
let url;

before(async () => {
  assert.ok(fs.existsSync(CHROMIUM), `${CHROMIUM} is missing: run scripts/setup.sh --test-tools (it installs Debian's chromium)`);
  [fg, dify] = await Promise.all([startFlowgate(), startDifyFixture()]);
  // Events 400 ms apart: a run takes a couple of seconds, long enough to watch it go.
  ({ app } = await registerApp(fg, dify, { mode: 'workflow', name: 'Briefing', form: FORM, nodes: NODES, eventDelayMs: 400 }));
  ({ server, url } = await publish(fg, app.id));
  profile = fs.mkdtempSync(path.join(os.tmpdir(), 'flowgate-chromium-'));
  fs.mkdirSync(SHOTS, { recursive: true });
  context = await chromium.launchPersistentContext(profile, { executablePath: CHROMIUM, headless: true, args: ARGS, viewport: { width: 1280, height: 900 } });
  page = context.pages()[0] ?? (await context.newPage());
  page.on('pageerror', (e) => errors.push(`pageerror: ${e.message}`));
  page.on('console', (msg) => {
    if (msg.type() !== 'error') return;
    const where = msg.location()?.url ?? '';
    if (/^Failed to load resource: the server responded with a status of 4\d\d/.test(msg.text()) && where.startsWith(`${fg.url}/console/api/`)) return;
    errors.push(`console.error: ${msg.text()} (${where})`);
  });
  await page.goto(`${fg.url}/console/`);
  await page.getByLabel('Console token').fill(fg.adminToken);
  await page.keyboard.press('Enter');
  await page.getByRole('heading', { level: 1, name: 'Apps' }).waitFor();
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
const call = (args, headers = {}) =>
  rpc(url, { jsonrpc: '2.0', id: 1, method: 'tools/call', params: { name: 'Briefing', arguments: args } }, { 'mcp-protocol-version': '2025-11-25', ...headers });

describe('tool playground', () => {
  test('lists the tools as a client sees them, with their schemas', async () => {
    await go(`#/playground/${server.id}`);
    const card = page.locator('.card.tool[data-tool="Briefing"]');
    await card.waitFor();
    assert.match(await card.textContent(), /A test server/);
    await card.getByText('Input schema').click();
    assert.match(await card.locator('pre').first().textContent(), /"text"/);
    assert.equal(await card.getByText('Output schema').count(), 1, 'a 2025-11-25 client sees the output schema');
  });

  test('runs a tool from its form: each node\'s progress shows while the run goes on, then the result', async () => {
    await page.locator('.card.tool[data-tool="Briefing"]').getByRole('link', { name: 'Try it' }).click();
    await page.locator('#pg-runner').waitFor();
    // The form is the inputSchema: a text input, a select of the options, a number, a checkbox.
    await page.locator('input[data-field="arguments.text"]').fill('sea otters');
    assert.deepEqual(await page.locator('select[data-field="arguments.lang"] option').allTextContents(), ['(none)', 'en', 'fr']);
    await page.locator('select[data-field="arguments.lang"]').selectOption({ label: 'fr' });
    await page.locator('input[data-field="arguments.count"]').fill('3');
    assert.equal(await page.locator('input[data-field="arguments.loud"]').getAttribute('type'), 'checkbox');
    await page.locator('#pg-run').click();
    // Live: the second node's progress is on the page before the result is.
    await page.locator('#pg-progress-message').getByText('Look up succeeded (2 nodes finished)').waitFor();
    assert.equal(await page.locator('#pg-structured').count(), 0, 'the result came before the progress');
    await page.locator('#pg-structured').waitFor({ timeout: 20_000 });
    const progress = await page.locator('#pg-events .progress-event').allTextContents();
    assert.deepEqual(progress.map((t) => t.replace(/^progress\s*/, '')), NODES.map((n, i) => `${n.title} succeeded (${i + 1} node${i ? 's' : ''} finished) (step ${i + 1})`));
    assert.ok(await page.locator('#pg-events .log-event').count() >= NODES.length, 'node_started log notifications');
    assert.match(await page.locator('#pg-status').textContent(), /isError: false/);
    const structured = JSON.parse(await page.locator('#pg-structured').textContent());
    assert.deepEqual(structured.echo, { text: 'sea otters', lang: 'fr', count: 3, loud: false });
    await shot('playground');
  });

  test('a call the tool refuses shows its isError result', async () => {
    await page.locator('input[data-field="arguments.text"]').fill('');
    await page.locator('#pg-run').click();
    await page.locator('#pg-status').getByText('isError: true').waitFor();
    assert.match(await page.locator('#pg-result').textContent(), /text/);
  });

  test('the run is audited in words', async () => {
    await go('#/audit');
    await page.getByText('Ran a tool in the playground of server “Briefing”').first().waitFor();
    assert.equal(await page.getByText(`/servers/{id}/tools/call`).count(), 0, 'routes are not what the log shows');
    await shot('audit-words');
  });
});

describe('call log', () => {
  test('lists calls of clients and of the playground, and filters by status, caller and tool', async () => {
    const one = await call({ text: 'one' }, { 'user-agent': 'agent-alpha/1.0' });
    assert.equal(one.json?.result?.isError, false, one.text);
    const two = await call({}, { 'user-agent': 'agent-beta/2.0' });
    assert.equal(two.json?.result?.isError, true, two.text);
    await go(`#/calls/${server.id}`);
    const rows = page.locator('#calls-table tbody tr');
    // The two playground runs and the two client calls.
    await rows.first().waitFor();
    assert.equal(await rows.count(), 4);
    const callers = await page.locator('#calls-table tbody tr td:nth-child(3)').allTextContents();
    assert.ok(callers.some((c) => c.includes('admin (console)')), callers.join(' | '));
    assert.ok(callers.some((c) => c.includes('agent-beta/2.0 (client)')), callers.join(' | '));
    await shot('call-log');
    // Each filter renders the page again: wait for the table that answers it.
    const rowsWhere = async (pred) => {
      let rows;
      for (let i = 0; i < 100; i++) {
        rows = await page.evaluate(() => [...document.querySelectorAll('#calls-table tbody tr')].map((tr) => [...tr.children].map((td) => td.textContent)));
        if (pred(rows)) return rows;
        await new Promise((r) => setTimeout(r, 100));
      }
      assert.fail(`the table never showed what was asked: ${JSON.stringify(rows)}`);
    };
    // By status, from the form.
    await page.getByLabel('Status').selectOption('tool_error');
    await page.locator('#calls-filter').click();
    await page.waitForFunction(() => location.hash.includes('status=tool_error'));
    await rowsWhere((rows) => rows.length === 2 && rows.every((r) => r[3] === 'tool_error'));
    // By caller, from a link in the table (the status filter stays).
    await page.locator('#calls-table').getByRole('link', { name: 'agent-beta/2.0' }).first().click();
    await page.waitForFunction(() => location.hash.includes('caller=agent-beta') && location.hash.includes('status=tool_error'));
    await rowsWhere((rows) => rows.length === 1 && rows[0][2].startsWith('agent-beta/2.0'));
    assert.match(await rows.first().textContent(), /missing required argument 'text'/);
    // By tool, typed; then cleared.
    await page.getByRole('link', { name: 'Clear' }).click();
    await rowsWhere((rows) => rows.length === 4);
    await page.getByLabel('Tool').fill('Nope');
    await page.locator('#calls-filter').click();
    await page.locator('#calls-table td.empty').waitFor();
  });

  test('keeping arguments and results is a setting of the server; credentials are redacted', async () => {
    await go(`#/calls/${server.id}`);
    await page.locator('#calls-keep').check();
    await page.getByRole('status').getByText(/keeps arguments and results/).waitFor();
    await call({ text: 'Bearer abcdefghijklmnopqrstu' });
    await go('#/apps');
    await go(`#/calls/${server.id}`);
    const first = page.locator('#calls-table tbody tr').first();
    await first.getByText('show').click();
    const payload = await first.locator('pre').first().textContent();
    assert.equal(payload, '{"text":"Bearer [redacted]"}');
  });
});

describe('smaller things', () => {
  test('the "copy the URL now" banner stays on the page that shows the URL', async () => {
    const { app: fresh } = await registerApp(fg, dify, { mode: 'workflow', name: 'Unpublished', form: FORM });
    await go(`#/servers/publish?app=${fresh.id}`);
    await page.locator('form').first().getByRole('button', { name: 'Publish' }).click();
    const status = page.locator('#status');
    await status.getByText(/copy the URL now/).waitFor();
    await page.getByRole('link', { name: 'Server settings' }).click();
    await page.waitForSelector('section.page:not([aria-busy])');
    assert.equal(await status.textContent(), '', 'the banner followed to the next page');
  });

  test('at 375 px the apps table fits, and the new pages do not overflow', async () => {
    await registerApp(fg, dify, { mode: 'advanced-chat', name: 'A rather long application name for narrow screens', form: FORM });
    await page.setViewportSize({ width: 375, height: 800 });
    try {
      await go('#/apps');
      const wrap = await page.locator('.table-wrap').first().evaluate((el) => ({ scroll: el.scrollWidth, width: el.clientWidth }));
      assert.ok(wrap.scroll <= wrap.width, `the apps table is ${wrap.scroll} px wide in ${wrap.width} px`);
      await page.screenshot({ path: path.join(SHOTS, 'console-375-apps-table.png'), fullPage: true });
      for (const [name, hash] of [['playground', `#/playground/${server.id}?tool=Briefing`], ['calls', `#/calls/${server.id}`], ['audit', '#/audit']]) {
        await go(hash);
        const { scroll, width } = await page.evaluate(() => ({ scroll: document.documentElement.scrollWidth, width: window.innerWidth }));
        assert.ok(scroll <= width, `${hash}: the page is ${scroll} px wide in a ${width} px window`);
        await page.screenshot({ path: path.join(SHOTS, `console-375-${name}.png`), fullPage: true });
      }
    } finally {
      await page.setViewportSize({ width: 1280, height: 900 });
    }
  });

  test('no error in the browser console', () => {
    assert.deepEqual(errors, []);
  });
});
