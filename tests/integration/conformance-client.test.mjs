// The official conformance suite's client scenarios against Flowgate's own upstream MCP client:
// for each scenario the CLI starts its test server and runs tests/conformance/client-adapter.mjs,
// which registers that server as an `mcp` app of this Flowgate and drives Flowgate with the SDK
// client, so every request the scenario server judges was sent by Flowgate. Known gaps are in
// tests/conformance/expected-failures.yml (`client:`), each with its reason; an entry that starts
// passing fails the run (a stale baseline).
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';

import { startFlowgate } from '../support/harness.mjs';
import { BASELINE, NODE22, runConformance } from '../support/conformance.mjs';

const ADAPTER = `${NODE22} tests/conformance/client-adapter.mjs`;

// [scenario, revision or undefined for an extension scenario], every revision each applies to.
// Left out: elicitation-sep1034-client-defaults (applying a form's defaults is the end client's
// job: Flowgate relays the request to its client, see conformance-relay.test.mjs) and the auth
// scenarios that need an authorization-code grant with a user's consent or dynamic/CIMD
// registration, which a gateway acting for itself does not do (see docs/testing.md, "Client conformance").
const SCENARIOS = [
  ['initialize', '2025-06-18'],
  ['initialize', '2025-11-25'],
  ['tools_call', '2025-06-18'],
  ['tools_call', '2025-11-25'],
  ['tools_call', '2026-07-28'],
  ['sse-retry', '2025-11-25'],
  ['request-metadata', '2026-07-28'],
  ['http-standard-headers', '2026-07-28'],
  ['http-custom-headers', '2026-07-28'],
  ['http-invalid-tool-headers', '2026-07-28'],
  ['json-schema-2020-12-preservation', '2025-11-25'],
  ['json-schema-2020-12-preservation', '2026-07-28'],
  ['json-schema-ref-no-deref', '2026-07-28'],
  ['auth/client-credentials-basic'],
  ['auth/client-credentials-jwt'],
  ['auth/pre-registration', '2025-11-25'],
  ['auth/pre-registration', '2026-07-28'],
];

let fg;

before(async () => {
  fg = await startFlowgate();
  // The adapter reaches this Flowgate through the CLI's child process environment.
  process.env.FLOWGATE_URL = fg.url;
  process.env.FLOWGATE_ADMIN_TOKEN = fg.adminToken;
});

after(async () => {
  await fg?.stop();
});

const summary = (out) =>
  out.split('\n').filter((l) => /FAILURE|WARNING|Passed|stale|Unexpected|Error|~ /i.test(l)).join('\n');

// Four scenarios at a time: most of a scenario is waiting (sse-retry waits out its retry delays,
// 30 s), each has its own scenario server on its own port and its own app in Flowgate (named
// by the adapter's pid), so they do not meet.
describe('client conformance', { concurrency: 4 }, () => {
  for (const [scenario, version] of SCENARIOS) {
    test(`client conformance: ${scenario}${version ? ` @ ${version}` : ''}`, async () => {
      const args = ['client', '--command', ADAPTER, '--scenario', scenario, '--expected-failures', BASELINE];
      if (version) args.push('--spec-version', version);
      const { code, out } = await runConformance(args);
      assert.equal(code, 0, `client conformance ${scenario} failed:\n${summary(out)}\n${out.slice(-3000)}`);
      assert.doesNotMatch(out, /SKIPPED: scenario/, `the scenario did not run:\n${out}`);
      // Something was judged: a passing check, or a baselined failure.
      assert.match(out, /Passed: [1-9]\d*\/\d+|Expected failures \(in baseline\)/, `no check ran:\n${out}`);
    });
  }
});

// The requests the scenario servers judged came from Flowgate: each scenario's app was registered
// and removed again by the adapter, so nothing is left behind in the shared instance.
test('the adapter removed every app it registered', async () => {
  const r = await fg.console('/apps');
  assert.equal(r.status, 200, r.text);
  assert.deepEqual(r.json.data.filter((a) => a.name.startsWith('conf-')), []);
});
