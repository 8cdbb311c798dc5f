// Pins the test harness itself (tests/support/harness.mjs): it starts the real
// Worker, its helpers reach the local D1/KV, and stop() leaves nothing behind.
// Needs `make build` first. Run: node --test tests/integration/harness.test.mjs
import test from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import { startFlowgate, startProcessGroup, freePort, groupAlive } from '../support/harness.mjs';

function assertGroupGone(pid) {
  assert.throws(() => process.kill(-pid, 0), { code: 'ESRCH' }, `process group ${pid} still has members`);
}

test('freePort returns a usable loopback port', async () => {
  const a = await freePort();
  assert.ok(Number.isInteger(a) && a > 0 && a < 65536);
});

test('startProcessGroup: stop() kills the whole group, children included', async () => {
  // The leader ignores SIGTERM, so this also exercises the SIGKILL fallback.
  const p = startProcessGroup('sh', ['-c', "trap '' TERM; sleep 300 & sleep 300 & echo started; wait"], {});
  for (let i = 0; i < 100 && !p.log().includes('started'); i++) await new Promise((r) => setTimeout(r, 20));
  assert.match(p.log(), /started/);
  assert.ok(groupAlive(p.pid));
  const t0 = Date.now();
  await p.stop({ graceMs: 500 });
  assertGroupGone(p.pid);
  assert.ok(Date.now() - t0 < 15_000);
  await p.stop(); // idempotent
});

test('Flowgate under wrangler dev', async (t) => {
  const fg = await startFlowgate();
  t.diagnostic(`wrangler dev answered /healthz after ${fg.startupMs} ms at ${fg.url}`);
  let stopped = false;
  try {
    await t.test('GET /healthz is 200 {status:"ok"}', async () => {
      const r = await fg.fetchJson('/healthz');
      assert.equal(r.status, 200, `body: ${r.text}\n--- log ---\n${fg.log()}`);
      assert.match(r.headers.get('content-type') ?? '', /application\/json/);
      assert.equal(r.json?.status, 'ok');
    });

    await t.test('instance fields', () => {
      assert.match(fg.url, /^http:\/\/127\.0\.0\.1:\d+$/);
      assert.equal(fg.adminToken, 'test-admin-token-for-local-tests-only');
      assert.ok(fs.statSync(fg.persistDir).isDirectory());
      assert.ok(Number.isInteger(fg.pid));
      assert.equal(typeof fg.log(), 'string');
    });

    await t.test('d1() sees the applied migrations', async () => {
      const rows = await fg.d1("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name");
      assert.ok(Array.isArray(rows));
      const names = rows.map((r) => r.name);
      assert.ok(names.includes('d1_migrations'), `tables: ${names.join(', ')}`);
      const applied = await fg.d1('SELECT name FROM d1_migrations');
      const files = fs.readdirSync(new URL('../../migrations/', import.meta.url)).filter((f) => f.endsWith('.sql'));
      assert.equal(applied.length, files.length, `applied ${JSON.stringify(applied)} vs files ${files}`);
    });

    await t.test('kvKeys() / kvGet() on the empty namespace', async () => {
      const keys = await fg.kvKeys();
      assert.ok(Array.isArray(keys));
      assert.equal(await fg.kvGet('flowgate-harness-test-no-such-key'), null);
    });

    await t.test('stateFilesContaining()', () => {
      assert.deepEqual(fg.stateFilesContaining('needle-that-is-nowhere-7f3a9c'), []);
    });

    await t.test('stop() kills the process group and removes the state dir', async () => {
      const { pid, persistDir, url } = fg;
      assert.ok(groupAlive(pid));
      await fg.stop();
      stopped = true;
      assertGroupGone(pid);
      assert.equal(fs.existsSync(persistDir), false, `${persistDir} still exists`);
      await fg.stop(); // idempotent
      await assert.rejects(fetch(`${url}/healthz`, { signal: AbortSignal.timeout(2000) }));
    });
  } finally {
    if (!stopped) await fg.stop();
  }
});
