// Running the official MCP conformance suite (it needs Node 22, which setup installs from npm).
import { execFile } from 'node:child_process';
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
