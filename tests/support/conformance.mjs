// Running the official MCP conformance suite (it needs Node 22, which setup installs from npm).
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import os from 'node:os';
import path from 'node:path';

import { repoRoot } from './harness.mjs';

export const NODE22 = path.join(repoRoot, 'node_modules/node/bin/node');
export const CLI = path.join(repoRoot, 'node_modules/@modelcontextprotocol/conformance/dist/index.js');
export const BASELINE = path.join(repoRoot, 'tests/conformance/expected-failures.yml');

/** The scenarios that call the reference "everything" server's tools by name. */
export const TOOL_SCENARIOS = [
  'tools-call-simple-text',
  'tools-call-image',
  'tools-call-audio',
  'tools-call-embedded-resource',
  'tools-call-mixed-content',
  'tools-call-error',
  'tools-call-with-progress',
  'tools-call-with-logging',
];

/** The scenarios that read the reference server's fixture resources and prompts and complete
 * its prompt arguments (the upstream fixture's "everything" catalog has them). */
export const CATALOG_SCENARIOS = [
  'resources-list',
  'resources-read-text',
  'resources-read-binary',
  'resources-templates-read',
  'prompts-list',
  'prompts-get-simple',
  'prompts-get-with-args',
  'prompts-get-embedded-resource',
  'prompts-get-with-image',
  'completion-complete',
];

/** Runs the CLI with `args`; resolves `{code, out}` with colour codes stripped. */
export function runConformance(args, timeout = 120_000) {
  return new Promise((resolve) => {
    execFile(NODE22, [CLI, ...args], { cwd: repoRoot, timeout, env: { ...process.env, NO_COLOR: '1' } }, (err, stdout, stderr) => {
      resolve({ code: err ? (err.code ?? 1) : 0, out: `${stdout}\n${stderr}`.replace(/\x1b\[[0-9;]*m/g, '') });
    });
  });
}

export const summary = (out) => out.split('\n').filter((l) => /FAILURE|WARNING|Passed|stale|Unexpected|Error/i.test(l)).join('\n');

/** The outcome of one run, as the conformance table shows it. */
export function outcomeOf(code, out) {
  const m = /Passed: (\d+)\/(\d+), (\d+) failed, (\d+) warnings/.exec(out);
  if (!m) return code === 0 ? 'no checks ran' : 'error';
  const [, passed, total, failed, warnings] = m.map(Number);
  if (total === 0 && /SKIPPED/.test(out)) return 'skipped by the suite';
  let s = failed ? `${failed} failed of ${total}` : `passed ${passed}/${total}`;
  if (warnings) s += `, ${warnings} warning${warnings > 1 ? 's' : ''}`;
  if (failed && code === 0) s += ' (expected, baselined)';
  return s;
}

/**
 * Whether this process runs only some of its file's tests (a name pattern, a skip pattern,
 * `--test-only`, a shard): node's test runner passes those flags to each file's process.
 */
export function filteredRun(execArgv = process.execArgv) {
  return execArgv.some((a) => /^--test-(name-pattern|skip-pattern|only|shard)(=|$)/.test(a));
}

/**
 * Where a run's outcomes go: the tracked tests/conformance/results/ (and docs/conformance.md
 * regenerated from it) only when CONFORMANCE_WRITE=1 (`make test` sets it) and the run is not
 * filtered, since a filtered run's outcomes are not its file's; otherwise a directory under the
 * system's temp dir, so that running one file or one test never rewrites tracked files.
 */
export function resultsTarget(env = process.env, execArgv = process.execArgv) {
  if (env.CONFORMANCE_WRITE === '1' && !filteredRun(execArgv)) {
    return { dir: path.join(repoRoot, 'tests/conformance/results'), table: true };
  }
  return { dir: path.join(os.tmpdir(), 'flowgate-conformance-results'), table: false };
}

/**
 * Records conformance outcomes of one test file in <results>/<name>.json (sorted, so an
 * unchanged run writes the same file; commit it with the generated table);
 * scripts/conformance-table.mjs makes docs/conformance.md of all of them. `save()` runs in the
 * file's `after`; where it writes is `resultsTarget()`'s choice.
 */
export function recorder(name) {
  const rows = new Map();
  return {
    /** scenario, revision ('default' for the scenario's own), target ('Flowgate' or 'fixture: …'). */
    add(scenario, revision = 'default', target, code, out) {
      rows.set(`${scenario}\0${revision}\0${target}`, { scenario, revision, target, result: outcomeOf(code, out) });
    },
    async save() {
      if (!rows.size) return;
      const { mkdir, writeFile } = await import('node:fs/promises');
      const { dir, table } = resultsTarget();
      await mkdir(dir, { recursive: true });
      const file = path.join(dir, `${name}.json`);
      // The whole file's outcomes replace the last ones.
      const key = (r) => `${r.scenario}\0${r.revision}\0${r.target}`;
      const sorted = [...rows.values()].sort((a, b) => key(a).localeCompare(key(b)));
      await writeFile(file, `${JSON.stringify(sorted, null, 1)}\n`);
      if (!table) return;
      const { execFile: run } = await import('node:child_process');
      await new Promise((resolve) => run(NODE22, [path.join(repoRoot, 'scripts/conformance-table.mjs')], { cwd: repoRoot }, resolve));
    },
  };
}

/**
 * The two tests of one server scenario: through Flowgate (with the baseline) and straight
 * against the fixture behind it, each recorded in `rec` and each required to pass every check.
 * `flowgate()` and `fixture()` give the URLs (known once the file's `before` has run);
 * `revision` is passed as `--spec-version` unless it is 'extension'.
 */
export function scenarioPair(test, rec, scenario, { revision, flowgate, fixture, fixtureName }) {
  const version = revision && revision !== 'extension' ? ['--spec-version', revision] : [];
  const run = async (target, url, baseline) => {
    const { code, out } = await runConformance(['server', '--url', url, '--scenario', scenario, ...(baseline ? ['--expected-failures', BASELINE] : []), ...version]);
    rec.add(scenario, revision, target, code, out);
    assert.equal(code, 0, `${target}: conformance ${scenario} failed:\n${summary(out)}`);
    assert.match(out, /Passed: [1-9]\d*\/\d+, 0 failed, 0 warnings/, `${target}: a check did not pass:\n${summary(out)}`);
  };
  test(`conformance through Flowgate: ${scenario}`, () => run('Flowgate', flowgate(), true));
  test(`conformance of the fixture itself: ${scenario}`, () => run(fixtureName, fixture(), false));
}
