// A 2025-11-25 upstream's task that asks its client for input (tests/support/tasks-2025.mjs,
// the TypeScript SDK's task API: `confirm_job` sends `elicitation/create` related to the task,
// which the SDK delivers on the stream of the client's `tasks/result`), run by the TypeScript
// SDK's task client directly and through Flowgate, so that a difference is Flowgate's. Through
// Flowgate the request reaches a client that declared elicitation (under a sealed id, naming
// Flowgate's id of the task) and its answer reaches the task; a client that did not declare it
// has it refused at once, where the upstream would otherwise wait for its own 60 s timeout.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';
import { CallToolResultSchema, ElicitRequestSchema } from '@modelcontextprotocol/sdk/types.js';

import { startFlowgate } from '../support/harness.mjs';
import { startTasks2025Upstream } from '../support/tasks-2025.mjs';
import { serverOf, upstreamApp } from '../support/flowgate-setup.mjs';

const RELATED_TASK = 'io.modelcontextprotocol/related-task';

let fg;
let up;
let url;

before(async () => {
  [fg, up] = await Promise.all([startFlowgate(), startTasks2025Upstream()]);
  const app = await upstreamApp(fg, 'Confirmer', { url: up.url, tool_name_prefix: false }, 'A 2025-11-25 upstream whose task asks');
  ({ url } = await serverOf(fg, 'Task input', [app]));
});

after(async () => {
  await Promise.allSettled([fg?.stop(), up?.close()]);
});

/** Runs `confirm_job` as a task with the SDK's task client that declared `capabilities`
 * (answering elicitations with `onElicit`): what the stream gave, and how long it took. */
async function runJob(to, capabilities, label, onElicit) {
  const client = new Client({ name: 'task-input-client', version: '1.0.0' }, { capabilities });
  if (onElicit) client.setRequestHandler(ElicitRequestSchema, onElicit);
  await client.connect(new StreamableHTTPClientTransport(new URL(to)));
  try {
    const seen = [];
    const t0 = Date.now();
    const stream = client.experimental.tasks.callToolStream({ name: 'confirm_job', arguments: { label } }, CallToolResultSchema, { task: { ttl: 120_000 } });
    for await (const m of stream) seen.push(m);
    return { seen, ms: Date.now() - t0 };
  } finally {
    await client.close();
  }
}

/** The upstream's answers from its client: POSTs that carry a response (no method). */
const answersUpstream = () => up.requests.filter((r) => r.body && !r.body.method && r.body.id !== undefined);

for (const [target, to, flowgate] of [['directly', () => up.url, false], ['through Flowgate', () => url, true]]) {
  test(`${target}: the task's elicitation reaches a client that declared it, and the answer the task`, async () => {
    const asked = [];
    const before = answersUpstream().length;
    const { seen } = await runJob(to(), { elicitation: {} }, `deploy-${flowgate}`, async (req, extra) => {
      asked.push({ params: req.params, id: extra.requestId });
      return { action: 'accept', content: { ok: true } };
    });
    const created = seen.find((m) => m.type === 'taskCreated');
    const result = seen.find((m) => m.type === 'result')?.result;
    assert.equal(result?.content?.[0]?.text, `confirmed deploy-${flowgate}: accept`, JSON.stringify(seen));
    assert.ok(seen.some((m) => m.type === 'taskStatus' && m.task.status === 'input_required'), JSON.stringify(seen));
    assert.equal(asked.length, 1, JSON.stringify(asked));
    assert.equal(asked[0].params.message, `Confirm deploy-${flowgate}?`);
    assert.equal(asked[0].params._meta?.[RELATED_TASK]?.taskId, created.task.taskId, 'the request names the task the client knows');
    const [answer] = answersUpstream().slice(before);
    assert.deepEqual(answer?.body?.result, { action: 'accept', content: { ok: true } });
    if (flowgate) {
      assert.match(created.task.taskId, /^fg-task\./);
      assert.match(String(asked[0].id), /^fg-relay\./, 'a sealed id');
      assert.notEqual(answer.body.id, asked[0].id, 'the upstream got the answer under its own id');
      assert.equal(result._meta?.[RELATED_TASK]?.taskId, created.task.taskId);
    }
  });

  test(`${target}: a client that did not declare elicitation has the task's request refused at once`, async () => {
    const { seen, ms } = await runJob(to(), {}, `undeclared-${flowgate}`);
    const result = seen.find((m) => m.type === 'result')?.result;
    assert.equal(result?.isError, true, JSON.stringify(seen));
    assert.match(result.content[0].text, /^refused: /);
    if (flowgate) assert.match(result.content[0].text, /did not declare the elicitation \(form mode\) capability/);
    // The upstream's own bound is 60 s: it did not come to that.
    assert.ok(ms < 15_000, `took ${ms} ms`);
  });
}
