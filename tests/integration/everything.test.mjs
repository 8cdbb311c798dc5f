// The reference everything server (@modelcontextprotocol/server-everything, pinned) as an
// upstream, on each transport it offers: the same client script (tests/support/
// everything-client.mjs, the official TypeScript SDK client) run directly against it and
// through Flowgate gives transcripts that differ only in the ways docs/upstream-gateway.md
// lists ("What differs through Flowgate"), for clients of 2025-11-25 and 2025-06-18 that declare
// no capabilities, and ones that declare sampling, elicitation and roots.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import { isDeepStrictEqual } from 'node:util';

import { startFlowgate } from '../support/harness.mjs';
import { startEverything } from '../support/everything.mjs';
import { runEverythingScript } from '../support/everything-client.mjs';
import { publish } from '../support/flowgate-setup.mjs';

let fg;
let ev;
const servers = {}; // transport -> {url, prefix}

const APP_NAMES = { streamableHttp: 'Everything', sse: 'EverythingSse' };

before(async () => {
  [fg, ev] = await Promise.all([startFlowgate(), startEverything()]);
  for (const transport of ['streamableHttp', 'sse']) {
    const name = APP_NAMES[transport];
    const r = await fg.console('/apps', { method: 'POST', body: { name, description: 'The reference server', mode: 'mcp', backend: { url: ev[transport].url } } });
    assert.equal(r.status, 201, r.text);
    servers[transport] = { url: (await publish(fg, r.json.id)).url, prefix: `${name}_` };
  }
});

after(async () => {
  await Promise.allSettled([fg?.stop(), ev?.stop()]);
});

/**
 * The documented differences, applied to a direct transcript: what the same script gets
 * through Flowgate. Each is listed in docs/upstream-gateway.md.
 */
function throughFlowgate(direct, revision, transport) {
  const older = revision < '2025-11-25';
  return direct.map(([op, v]) => {
    if (op === 'initialize') {
      // List changes are told as the upstream tells them when its session has a stream they
      // can come on (Streamable HTTP; not the legacy transport); subscriptions are offered.
      const told = (list) => transport === 'streamableHttp' && list?.listChanged === true;
      const c = structuredClone(v.capabilities);
      if (c.resources) c.resources = { subscribe: true, listChanged: told(c.resources) };
      if (c.prompts) c.prompts = { listChanged: told(c.prompts) };
      if (c.tools) c.tools = { listChanged: told(c.tools) };
      // Flowgate keeps no list of its clients' tasks: no tasks/list; and no tasks at all
      // before 2025-11-25, the first revision with them.
      if (c.tasks) delete c.tasks.list;
      if (older) delete c.tasks;
      return [op, { ...v, capabilities: c }];
    }
    // Tools as a client of an older revision may see them: no `execution` before 2025-11-25
    // (the reference server sends it to every revision).
    if (op === 'tools/list' && older) return [op, v.map(({ execution, ...t }) => t)];
    return [op, v];
  });
}

const byOp = (entries) => Object.fromEntries(entries);

for (const transport of ['streamableHttp', 'sse']) {
  describe(`the everything server over ${transport === 'sse' ? 'legacy HTTP+SSE' : 'Streamable HTTP'}`, () => {
    for (const [revision, capable] of [['2025-11-25', false], ['2025-11-25', true], ['2025-06-18', false], ['2025-06-18', true]]) {
      const who = `a ${revision} client that declares ${capable ? 'sampling, elicitation and roots' : 'no capabilities'}`;
      test(`${who}: the same transcript directly and through Flowgate, but for the documented differences`, async () => {
        const direct = await runEverythingScript({ url: ev[transport].url, transport, capable, revision });
        const through = await runEverythingScript({ url: servers[transport].url, transport: 'streamableHttp', capable, revision, prefix: servers[transport].prefix });
        const want = byOp(throughFlowgate(direct.entries, revision, transport));
        const got = byOp(through.entries);
        assert.deepEqual(Object.keys(got), Object.keys(want));
        const differ = Object.keys(want).filter((op) => !isDeepStrictEqual(got[op], want[op]));
        const report = differ.map((op) => `${op}\n  through Flowgate: ${JSON.stringify(got[op])}\n  expected:         ${JSON.stringify(want[op])}`);
        assert.deepEqual(differ, [], report.join('\n'));
        // The script did what it says: the upstream offered this client its own tool list
        // (13 tools without capabilities, 17 with), the calls answered, and the one error is
        // the unknown URI's, the upstream's own -32602 both ways, its words kept by Flowgate.
        const tools = want['tools/list'].map((t) => t.name);
        assert.equal(tools.length, capable ? 17 : 13, tools.join(' '));
        assert.equal(tools.includes('trigger-sampling-request'), capable);
        const calls = Object.keys(want).filter((op) => op.startsWith('tools/call '));
        assert.equal(calls.length, 10, calls.join(' '));
        assert.ok(calls.every((op) => want[op].content?.length > 0 && !want[op].isError), 'every call answered');
        const unknown = 'resources/read demo://resource/static/document/no-such-file.md';
        assert.deepEqual(Object.keys(direct.errors), [unknown]);
        assert.deepEqual(Object.keys(through.errors), [unknown]);
        assert.equal(got[unknown].error.code, -32602);
        assert.match(through.errors[unknown], new RegExp(`upstream ${APP_NAMES[transport]} said: .*Resource demo://resource/static/document/no-such-file.md not found`));
      });
    }
  });
}
