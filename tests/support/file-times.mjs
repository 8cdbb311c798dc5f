// A node:test reporter that prints, once the run is over, each test file's wall time, slowest
// first, with when it started and ended (seconds from the start of the run). Run beside the
// spec reporter (see the Makefile's NODE_TEST), it shows the run's critical path: the file that
// ends last, and the long files that, started late, would end the run alone.
//
//   node --test --test-reporter=spec --test-reporter-destination=stdout \
//        --test-reporter=./tests/support/file-times.mjs --test-reporter-destination=stdout ...
//
// With process isolation the runner reports each file as a test of nesting 0 named by the path
// it was given, whose `test:complete` comes when the file's process is done, with its wall time
// (process start-up included).

import path from 'node:path';

const isFileEvent = (data) => data?.nesting === 0 && typeof data.name === 'string' && !!data.file && path.resolve(data.name) === data.file;

const secs = (ms) => (ms / 1000).toFixed(1);

/** Rows for `files` (path -> {startMs, endMs, durationMs, passed}), slowest first, as text. */
export function fileTimesTable(files, cwd = process.cwd()) {
  const rows = [...files]
    .sort((a, b) => b[1].durationMs - a[1].durationMs)
    .map(([file, f]) => ({ ...f, name: path.relative(cwd, file) || file }));
  if (rows.length === 0) return '';
  const width = Math.max(...rows.map((r) => secs(r.durationMs).length));
  const lines = rows.map(
    (r) =>
      `  ${secs(r.durationMs).padStart(width)} s  (${secs(r.startMs).padStart(5)} → ${secs(r.endMs).padStart(5)})  ${r.name}${r.passed ? '' : '  FAILED'}`,
  );
  const last = rows.reduce((a, b) => (b.endMs > a.endMs ? b : a));
  const total = rows.reduce((s, r) => s + r.durationMs, 0);
  return [
    `Wall time per test file, slowest first (from → to: seconds since the run started):`,
    ...lines,
    `  ${rows.length} files, ${secs(total)} s of file time; the last to end: ${last.name} at ${secs(last.endMs)} s (started at ${secs(last.startMs)} s)`,
    '',
  ].join('\n');
}

/**
 * For a file the runner stopped at its time limit (`timedOut`), a line naming the tests it had
 * started and not finished or, when every test had ended, saying that something after them
 * kept the file from ending; '' otherwise.
 */
export function unfinishedLine(file, running, nowMs, timedOut, cwd = process.cwd()) {
  const name = path.relative(cwd, file) || file;
  if (running && running.size > 0) {
    const names = [...running.values()].map((t) => `"${t.name}" (running for ${secs(nowMs - t.sinceMs)} s)`);
    return `${name} was stopped with ${names.length === 1 ? 'this test' : 'these tests'} unfinished: ${names.join(', ')}\n`;
  }
  if (timedOut) {
    return `${name} was stopped at its time limit with every test it started ended: an after() hook, or a process holding the file's output open, kept it from ending\n`;
  }
  return '';
}

export default async function* fileTimes(source) {
  const t0 = Date.now();
  const files = new Map();
  // Per file, the tests dequeued and not yet complete: when the runner stops a file at its
  // timeout, the file's own report names only the file, and these are the tests that hung.
  const running = new Map();
  let printed = false;
  for await (const { type, data } of source) {
    const fileEvent = isFileEvent(data);
    if (!fileEvent && data?.file && (type === 'test:dequeue' || type === 'test:complete')) {
      if (!running.has(data.file)) running.set(data.file, new Map());
      const key = `${data.nesting}\u0000${data.name}`;
      if (type === 'test:dequeue') running.get(data.file).set(key, { name: data.name, sinceMs: Date.now() - t0 });
      else running.get(data.file).delete(key);
    }
    if (type === 'test:complete' && fileEvent) {
      const endMs = Date.now() - t0;
      const durationMs = data.details?.duration_ms ?? 0;
      const passed = data.details?.passed !== false;
      files.set(data.file, { startMs: Math.max(0, endMs - durationMs), endMs, durationMs, passed });
      const timedOut = /timed out/.test(String(data.details?.error?.message ?? data.details?.error?.cause ?? ''));
      const line = passed ? '' : unfinishedLine(data.file, running.get(data.file), endMs, timedOut);
      running.delete(data.file);
      if (line) yield line;
    } else if (type === 'test:diagnostic' && !data.file && /^duration_ms /.test(data.message) && !printed) {
      // The run's last total (a file's own diagnostics carry its path): printed with it, as the
      // spec reporter prints its totals; --test-force-exit does not wait for the events after.
      printed = true;
      const table = fileTimesTable(files);
      if (table) yield `\n${table}`;
    }
  }
}
