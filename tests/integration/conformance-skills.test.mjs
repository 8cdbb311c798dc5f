// Skills of upstream servers (the Skills extension, SEP-2640, `io.modelcontextprotocol/skills`)
// through Flowgate: the suite's `sep-2640-skills-*` scenarios through Flowgate in front of a
// 2026-07-28 upstream fixture that serves skills (tests/support/skills-upstream.mjs, hooked into
// input-required-upstream.mjs), and straight against the fixture, so that a failure through
// Flowgate is Flowgate's. Then what the scenarios cannot see: a skill URI no upstream serves is
// -32602 from Flowgate and reaches no upstream; two upstream apps' skills are both listed and each
// request goes to the app that serves the skill; a 2025-11-25 client is not offered the extension.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';

import { startFlowgate } from '../support/harness.mjs';
import { recorder, scenarioPair } from '../support/conformance.mjs';
import { startInputRequiredUpstream } from '../support/input-required-upstream.mjs';
import { EXTENSION } from '../support/skills-upstream.mjs';
import { rpc, rpc2026, serverOf } from '../support/flowgate-setup.mjs';

const SCENARIOS = ['sep-2640-skills-enumeration', 'sep-2640-skills-manifest', 'sep-2640-skills-directory'];

const rec = recorder('conformance-skills');
let fg;
let up;
let upBeta;
let url;
let twoUrl;

before(async () => {
  [fg, up, upBeta] = await Promise.all([startFlowgate(), startInputRequiredUpstream(), startInputRequiredUpstream({ skillPrefix: 'beta' })]);
  const app = async (name, backend) => {
    const r = await fg.console('/apps', { method: 'POST', body: { name, description: 'A 2026-07-28 upstream with skills', mode: 'mcp', backend } });
    assert.equal(r.status, 201, r.text);
    return r.json.id;
  };
  const skilled = await app('Skilled', { url: up.url, tool_name_prefix: false });
  // Its tools would clash with Skilled's without the prefix; its skills are under skill://beta/.
  const beta = await app('Beta', { url: upBeta.url });
  ({ url } = await serverOf(fg, 'Skills', [skilled]));
  ({ url: twoUrl } = await serverOf(fg, 'Two', [skilled, beta]));
});

after(async () => {
  await rec.save();
  await Promise.allSettled([fg?.stop(), up?.close(), upBeta?.close()]);
});

// Extension scenarios run at the suite's own revision for them (2026-07-28 wire, cache
// attributes checked); they are not on the 2025 timeline (the suite skips them there).
for (const scenario of SCENARIOS) {
  scenarioPair(test, rec, scenario, { revision: 'extension', flowgate: () => url, fixture: () => up.url, fixtureName: 'fixture: input-required-upstream' });
}

/** One 2026-07-28 request: its JSON-RPC response. */
const call = (method, params = {}, to = url) => rpc2026(to, method, params);
async function listAll(to) {
  const skills = [];
  let cursor;
  do {
    const r = await call('skills/list', cursor ? { cursor } : {}, to);
    assert.ok(r.result, JSON.stringify(r));
    skills.push(...r.result.skills);
    cursor = r.result.nextCursor;
  } while (cursor);
  return skills;
}
const upstreamAsked = (u, method) => u.requests.filter((r) => r.body.method === method).map((r) => r.body.params);
const sha = (text) => `sha256:${createHash('sha256').update(text, 'utf8').digest('hex')}`;

test('a skill URI no upstream serves is -32602 from Flowgate, and reaches no upstream', async () => {
  await listAll(url); // the catalog is read (and cached) before counting
  const before = up.requests.length;
  const cases = [
    ['skills/get', { uri: 'skill://nowhere/SKILL.md' }, /^Unknown skill/],
    ['skills/get', { uri: 'skill://pdf-processing/references/FORMS.md' }, /^Unknown skill/], // a file, not a SKILL.md
    ['resources/directory/read', { uri: 'skill://nowhere' }, /^Not a directory resource/],
    ['resources/read', { uri: 'skill://nowhere/notes.md' }, /^Resource not found/],
    ['resources/read', { uri: 'skill://pdf-processing-2/SKILL.md' }, /^Resource not found/], // a look-alike of a skill directory
  ];
  for (const [method, params, why] of cases) {
    const r = await call(method, params);
    assert.equal(r.error?.code, -32602, `${method} ${params.uri}: ${JSON.stringify(r)}`);
    assert.match(r.error.message, why);
    assert.deepEqual(r.error.data, { uri: params.uri });
  }
  assert.equal(up.requests.length, before, 'no refused request reached the upstream');
  // A served skill's unlisted file goes to the upstream, and is the file the manifest describes.
  const [pdf] = (await listAll(url)).filter((s) => s.uri === 'skill://pdf-processing/SKILL.md');
  for (const { uri, digest, size } of pdf.resources) {
    const r = await call('resources/read', { uri });
    const text = r.result?.contents?.[0]?.text;
    assert.equal(sha(text), digest, uri);
    assert.equal(Buffer.byteLength(text, 'utf8'), size, uri);
  }
});

test('two upstream apps with skills: both are listed, and each request goes to the app that serves the skill', async () => {
  const skills = await listAll(twoUrl);
  assert.deepEqual(
    skills.map((s) => s.uri),
    ['skill://pdf-processing/SKILL.md', 'skill://acme/billing/refunds/SKILL.md', 'skill://beta/pdf-processing/SKILL.md', 'skill://beta/acme/billing/refunds/SKILL.md'],
  );
  const beta = skills.find((s) => s.uri === 'skill://beta/acme/billing/refunds/SKILL.md');
  const asked = () => [upstreamAsked(up, 'skills/get').length, upstreamAsked(upBeta, 'skills/get').length];
  const [a0, b0] = asked();
  const got = await call('skills/get', { uri: beta.uri }, twoUrl);
  assert.deepEqual(got.result?.skill, beta, JSON.stringify(got));
  assert.equal(got.result.ttlMs, 0);
  assert.equal(got.result.cacheScope, 'private');
  assert.deepEqual(asked(), [a0, b0 + 1], 'Beta\'s skill was asked of Beta only');
  const own = await call('skills/get', { uri: 'skill://pdf-processing/SKILL.md' }, twoUrl);
  assert.equal(own.result?.skill?.uri, 'skill://pdf-processing/SKILL.md');
  assert.deepEqual(asked(), [a0 + 1, b0 + 1]);

  const file = 'skill://beta/acme/billing/refunds/examples/email.md';
  const read = await call('resources/read', { uri: file }, twoUrl);
  assert.equal(read.result?.contents?.[0]?.text, upBeta.skills.files.get(file), JSON.stringify(read));
  assert.equal(upstreamAsked(upBeta, 'resources/read').at(-1).uri, file);

  const dir = await call('resources/directory/read', { uri: 'skill://beta/pdf-processing/templates' }, twoUrl);
  assert.deepEqual(dir.result?.resources, [
    { uri: 'skill://beta/pdf-processing/templates/invoice.md', name: 'invoice.md', mimeType: 'text/markdown' },
    { uri: 'skill://beta/pdf-processing/templates/regional', name: 'regional', mimeType: 'inode/directory' },
  ]);
  assert.equal(upstreamAsked(upBeta, 'resources/directory/read').at(-1).uri, 'skill://beta/pdf-processing/templates');
  // The upstream's own pages (two children a page) come back with its cursor, to the same app.
  const root = await call('resources/directory/read', { uri: 'skill://beta/pdf-processing' }, twoUrl);
  assert.equal(root.result?.resources?.length, 2, JSON.stringify(root));
  const rest = await call('resources/directory/read', { uri: 'skill://beta/pdf-processing', cursor: root.result.nextCursor }, twoUrl);
  assert.deepEqual(rest.result?.resources?.map((r) => r.uri), ['skill://beta/pdf-processing/templates']);
});

test('a 2025-11-25 client is not offered the skills extension (it is specified for 2026-07-28)', async () => {
  const init = await rpc(url, {
    jsonrpc: '2.0',
    id: 1,
    method: 'initialize',
    params: { protocolVersion: '2025-11-25', capabilities: {}, clientInfo: { name: 't', version: '1' } },
  });
  const caps = init.json?.result?.capabilities;
  assert.ok(caps?.resources, `skill files are still resources to it: ${JSON.stringify(init.json)}`);
  assert.equal(caps.extensions, undefined, JSON.stringify(caps));
  const list = await rpc(url, { jsonrpc: '2.0', id: 2, method: 'skills/list', params: {} }, { 'mcp-protocol-version': '2025-11-25' });
  assert.equal(list.json?.error?.code, -32601, JSON.stringify(list.json));
  assert.match(list.json.error.message, /2026-07-28/);
  // A 2026-07-28 client is.
  const discover = await call('server/discover');
  assert.deepEqual(discover.result?.capabilities?.extensions?.[EXTENSION], { directoryRead: true });
});
