// Runs test files with node:test in the order given, which `node --test` does not keep (it
// sorts its files by name): the Makefile starts the slowest integration files first, so that
// none of them, started last, ends the run alone while the other slots stand idle.
//
//   node tests/support/run-tests.mjs [--concurrency=N] [--timeout=MS] file...
//
// As `node --test --test-concurrency=N --test-timeout=MS --test-force-exit file...` with two
// reporters on stdout: spec, and tests/support/file-times.mjs (each file's wall time at the end,
// slowest first). Each file runs in its own process; the exit code is 1 when a test failed.

import { run } from 'node:test';
import { spec } from 'node:test/reporters';

import fileTimes from './file-times.mjs';

const options = { concurrency: 1, timeout: Infinity };
const files = [];
for (const arg of process.argv.slice(2)) {
  const m = /^--(concurrency|timeout)=(\d+)$/.exec(arg);
  if (m) options[m[1]] = Number(m[2]);
  else if (arg.startsWith('--')) {
    console.error(`run-tests: unknown option ${arg} (known: --concurrency=N, --timeout=MS)`);
    process.exit(2);
  } else files.push(arg);
}
if (files.length === 0) {
  console.error('run-tests: no test files given');
  process.exit(2);
}

// forceExit: a file whose tests are done exits even if something it started is still open.
const stream = run({ files, ...options, forceExit: true });
stream.on('test:summary', (summary) => {
  if (summary.file === undefined && !summary.success) process.exitCode = 1;
});
stream.compose(new spec()).pipe(process.stdout);
stream.compose(fileTimes).pipe(process.stdout);
