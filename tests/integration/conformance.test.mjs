// The official MCP conformance suite against a Flowgate server backed by the fake Dify.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';

import { startFlowgate } from '../support/harness.mjs';
import { BASELINE, CATALOG_SCENARIOS, recorder, runConformance, TOOL_SCENARIOS } from '../support/conformance.mjs';
import { startDifyFixture } from '../support/dify-fixture.mjs';
import { startUpstreams } from '../support/mcp-upstreams.mjs';
import { publish, registerApp } from '../support/flowgate-setup.mjs';

// [scenario, spec version or undefined for the scenario's default]. server-sse-multiple-streams
// runs in conformance-relay.test.mjs (it needs the session id an initialize now gets);
// server-stateless in conformance-gateway.test.mjs (it calls diagnostic tools a 2026-07-28
// upstream fixture has); caching below, through the upstream (it lists prompts and resources).
const SCENARIOS = [
  ['server-initialize'],
  ['ping'],
  ['logging-set-level'],
  ['tools-list'],
  ['tools-list', '2026-07-28'],
  ['dns-rebinding-protection'],
  ['dns-rebinding-protection', '2026-07-28'],
  ['http-header-validation'],
];

const rec = recorder('conformance');
let fg;
let dify;
let ups;
let url;
let gatewayUrl;

before(async () => {
  [fg, dify, ups] = await Promise.all([startFlowgate(), startDifyFixture(), startUpstreams()]);
  const { app } = await registerApp(fg, dify, { mode: 'workflow', name: 'Echo' });
  ({ url } = await publish(fg, app.id));
  const r = await fg.console('/apps', {
    method: 'POST',
    body: { name: 'Everything', description: 'The reference tools, resources and prompts, through Flowgate', mode: 'mcp', backend: { url: ups.everything.url, tool_name_prefix: false } },
  });
  assert.equal(r.status, 201, r.text);
  ({ url: gatewayUrl } = await publish(fg, r.json.id));
});

after(async () => {
  await rec.save();
  await Promise.allSettled([fg?.stop(), dify?.stop(), ups?.stop()]);
});


for (const [scenario, version] of SCENARIOS) {
  test(`conformance: ${scenario}${version ? ` @ ${version}` : ''}`, async () => {
    const args = ['server', '--url', url, '--scenario', scenario, '--expected-failures', BASELINE];
    if (version) args.push('--spec-version', version);
    const { code, out } = await runConformance(args);
    rec.add(scenario, version, 'Flowgate (Dify workflow app)', code, out);
    assert.equal(code, 0, `conformance ${scenario} failed:\n${out.split('\n').filter((l) => /FAILURE|WARNING|Passed|stale|Unexpected|Error/i.test(l)).join('\n')}`);
    assert.match(out, /Passed: [1-9]\d*\/\d+/, `no check ran:\n${out}`);
  });
}

// The tools-call scenarios call the reference server's fixture tools by name; Flowgate serves
// them from an upstream MCP fixture that has them (an `mcp` app without name prefixes).
for (const scenario of TOOL_SCENARIOS) {
  test(`conformance through an upstream: ${scenario}`, async () => {
    const { code, out } = await runConformance(['server', '--url', gatewayUrl, '--scenario', scenario, '--expected-failures', BASELINE]);
    rec.add(scenario, undefined, 'Flowgate', code, out);
    assert.equal(code, 0, `conformance ${scenario} failed:\n${out.split('\n').filter((l) => /FAILURE|WARNING|Passed|stale|Unexpected|Error/i.test(l)).join('\n')}`);
    assert.match(out, /Passed: [1-9]\d*\/\d+/, `no check ran:\n${out}`);
  });
}

const summary = (out) => out.split('\n').filter((l) => /FAILURE|WARNING|Passed|stale|Unexpected|Error/i.test(l)).join('\n');

// The resources, prompts and completion scenarios through Flowgate (routed to the upstream
// fixture's catalog), at the scenario's default revision and at 2026-07-28, which the fixture
// itself (the official SDK) does not speak: Flowgate answers that revision for it.
const THROUGH = [
  ...CATALOG_SCENARIOS.map((s) => [s]),
  ...CATALOG_SCENARIOS.map((s) => [s, '2026-07-28']),
  ['sep-2164-resource-not-found', '2026-07-28'],
  ['caching', '2026-07-28'],
];
for (const [scenario, version] of THROUGH) {
  test(`conformance through an upstream: ${scenario}${version ? ` @ ${version}` : ''}`, async () => {
    const args = ['server', '--url', gatewayUrl, '--scenario', scenario, '--expected-failures', BASELINE];
    if (version) args.push('--spec-version', version);
    const { code, out } = await runConformance(args);
    rec.add(scenario, version, 'Flowgate', code, out);
    assert.equal(code, 0, `conformance ${scenario} failed:\n${summary(out)}`);
    assert.match(out, /Passed: [1-9]\d*\/\d+/, `no check ran:\n${out}`);
  });
}

// The same scenarios straight against the upstream fixture: it passes them itself, so a failure
// above is Flowgate's.
for (const scenario of CATALOG_SCENARIOS) {
  test(`conformance of the upstream fixture itself: ${scenario}`, async () => {
    const { code, out } = await runConformance(['server', '--url', ups.everything.url, '--scenario', scenario]);
    rec.add(scenario, undefined, 'fixture: SDK everything', code, out);
    assert.equal(code, 0, `the fixture fails ${scenario}:\n${summary(out)}`);
    assert.match(out, /Passed: [1-9]\d*\/\d+/, `no check ran:\n${out}`);
  });
}
