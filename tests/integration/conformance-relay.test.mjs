// The conformance scenarios in which a server asks its client for something while a tool runs
// (sampling, elicitation), through Flowgate in front of the upstream fixture that implements the
// reference server's tools, at every revision each scenario applies to; and the same scenarios
// straight against the fixture, so that a failure through Flowgate is Flowgate's.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';

import { startFlowgate } from '../support/harness.mjs';
import { BASELINE, recorder, runConformance } from '../support/conformance.mjs';
import { startUpstreams } from '../support/mcp-upstreams.mjs';
import { publish } from '../support/flowgate-setup.mjs';

// [scenario, revision]: every revision `conformance list` gives each of them.
const SCENARIOS = [
  ['tools-call-sampling', '2025-06-18'],
  ['tools-call-sampling', '2025-11-25'],
  ['tools-call-elicitation', '2025-06-18'],
  ['tools-call-elicitation', '2025-11-25'],
  ['elicitation-sep1034-defaults', '2025-11-25'],
  ['elicitation-sep1330-enums', '2025-11-25'],
  // Concurrent POST streams in one session: it runs its checks now that initialize gives a
  // session id (the sealed capabilities), where it only warned before.
  ['server-sse-multiple-streams', '2025-11-25'],
];

const rec = recorder('conformance-relay');
let fg;
let ups;
let gatewayUrl;

before(async () => {
  [fg, ups] = await Promise.all([startFlowgate(), startUpstreams()]);
  const r = await fg.console('/apps', {
    method: 'POST',
    body: { name: 'Everything', description: 'The reference tools, through Flowgate', mode: 'mcp', backend: { url: ups.everything.url, tool_name_prefix: false } },
  });
  assert.equal(r.status, 201, r.text);
  ({ url: gatewayUrl } = await publish(fg, r.json.id));
});

after(async () => {
  await rec.save();
  await Promise.allSettled([fg?.stop(), ups?.stop()]);
});

const summary = (out) => out.split('\n').filter((l) => /FAILURE|WARNING|Passed|stale|Unexpected|Error/i.test(l)).join('\n');

for (const [scenario, version] of SCENARIOS) {
  test(`conformance through an upstream: ${scenario} @ ${version}`, async () => {
    const args = ['server', '--url', gatewayUrl, '--scenario', scenario, '--spec-version', version, '--expected-failures', BASELINE];
    const { code, out } = await runConformance(args);
    rec.add(scenario, version, 'Flowgate', code, out);
    assert.equal(code, 0, `conformance ${scenario} failed:\n${summary(out)}`);
    assert.match(out, /Passed: [1-9]\d*\/\d+/, `no check ran:\n${out}`);
    assert.match(out, / 0 failed/, `a check failed (even if expected):\n${summary(out)}`);
  });

  test(`conformance of the upstream fixture itself: ${scenario} @ ${version}`, async () => {
    const args = ['server', '--url', ups.everything.url, '--scenario', scenario, '--spec-version', version];
    const { code, out } = await runConformance(args);
    rec.add(scenario, version, 'fixture: SDK everything', code, out);
    assert.equal(code, 0, `the fixture fails ${scenario}:\n${summary(out)}`);
    assert.match(out, /Passed: [1-9]\d*\/\d+/, `no check ran:\n${out}`);
  });
}
