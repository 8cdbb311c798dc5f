// A 2025-11-25 upstream with tasks, written with the official TypeScript SDK (its experimental
// task API, InMemoryTaskStore and InMemoryTaskMessageQueue): `slow_job` runs only as a task
// (taskSupport required) and answers after `ms`; `flaky_job` may run as one (optional) and ends in
// a tool error; `confirm_job` runs only as a task that asks the client "Confirm <label>?"
// (`elicitation/create` related to the task: the task is `input_required` and the SDK delivers
// the request on the stream of the client's `tasks/result`), then answers "confirmed <label>:
// <action>", or "refused: <error>" (isError) when the request failed (a refusal, or the SDK's
// 60 s request timeout). Stateful Streamable HTTP, one McpServer per session sharing one task
// store and one message queue; every request recorded.
import http from 'node:http';
import { randomUUID } from 'node:crypto';

import { McpServer } from '@modelcontextprotocol/sdk/server/mcp.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { InMemoryTaskMessageQueue, InMemoryTaskStore } from '@modelcontextprotocol/sdk/experimental/tasks';
import { ElicitResultSchema } from '@modelcontextprotocol/sdk/types.js';
import { z } from 'zod';

const text = (t) => ({ content: [{ type: 'text', text: t }] });

function buildServer(taskStore, taskMessageQueue) {
  const mcp = new McpServer(
    { name: 'tasks-2025', version: '1.0.0' },
    { capabilities: { tasks: { list: {}, cancel: {}, requests: { tools: { call: {} } } } }, taskStore, taskMessageQueue },
  );
  mcp.registerTool('hello', { description: 'A plain tool', inputSchema: {} }, async () => text('hello'));
  const job = (answer, isError) => ({
    createTask: async (args, extra) => {
      const task = await extra.taskStore.createTask({ ttl: 60_000, pollInterval: 100 });
      setTimeout(() => {
        extra.taskStore.storeTaskResult(task.taskId, 'completed', { ...text(answer(args)), ...(isError ? { isError: true } : {}) }).catch(() => {});
      }, args.ms ?? 200);
      return { task };
    },
    getTask: async (args, extra) => extra.taskStore.getTask(extra.taskId),
    getTaskResult: async (args, extra) => extra.taskStore.getTaskResult(extra.taskId),
  });
  mcp.experimental.tasks.registerToolTask(
    'slow_job',
    { description: 'Runs as a task, then answers', inputSchema: { label: z.string(), ms: z.number().optional() }, execution: { taskSupport: 'required' } },
    job((a) => `slow ${a.label} done`, false),
  );
  mcp.experimental.tasks.registerToolTask(
    'flaky_job',
    { description: 'May run as a task; fails as a tool', inputSchema: { ms: z.number().optional() }, execution: { taskSupport: 'optional' } },
    job(() => 'the flaky job failed', true),
  );
  mcp.experimental.tasks.registerToolTask(
    'confirm_job',
    { description: 'Runs as a task that asks the client to confirm, then answers', inputSchema: { label: z.string() }, execution: { taskSupport: 'required' } },
    {
      createTask: async ({ label }, extra) => {
        const task = await extra.taskStore.createTask({ ttl: 120_000, pollInterval: 100 });
        (async () => {
          let answer;
          try {
            const r = await extra.sendRequest(
              { method: 'elicitation/create', params: { message: `Confirm ${label}?`, requestedSchema: { type: 'object', properties: { ok: { type: 'boolean' } }, required: ['ok'] } } },
              ElicitResultSchema,
              { relatedTask: { taskId: task.taskId } },
            );
            answer = text(`confirmed ${label}: ${r.action}`);
          } catch (e) {
            answer = { ...text(`refused: ${e.message}`), isError: true };
          }
          await extra.taskStore.storeTaskResult(task.taskId, 'completed', answer).catch(() => {});
        })();
        return { task };
      },
      getTask: async (args, extra) => extra.taskStore.getTask(extra.taskId),
      getTaskResult: async (args, extra) => extra.taskStore.getTaskResult(extra.taskId),
    },
  );
  return mcp;
}

/** Starts the upstream on a free loopback port: {url, requests, close()}. */
export async function startTasks2025Upstream() {
  const taskStore = new InMemoryTaskStore();
  const taskMessageQueue = new InMemoryTaskMessageQueue();
  const sessions = new Map();
  const requests = [];
  const server = http.createServer(async (req, res) => {
    const chunks = [];
    for await (const c of req) chunks.push(c);
    const raw = Buffer.concat(chunks).toString('utf8');
    let body;
    try {
      body = raw ? JSON.parse(raw) : undefined;
    } catch {
      res.writeHead(400).end();
      return;
    }
    if (body) requests.push({ headers: req.headers, body });
    const sid = req.headers['mcp-session-id'];
    if (sid) {
      const s = sessions.get(sid);
      if (!s) return res.writeHead(404, { 'content-type': 'application/json' }).end(JSON.stringify({ jsonrpc: '2.0', id: null, error: { code: -32001, message: 'Session not found' } }));
      return s.handleRequest(req, res, body);
    }
    const mcp = buildServer(taskStore, taskMessageQueue);
    const transport = new StreamableHTTPServerTransport({
      sessionIdGenerator: () => randomUUID(),
      onsessioninitialized: (id) => sessions.set(id, transport),
    });
    await mcp.connect(transport);
    await transport.handleRequest(req, res, body);
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    url: `http://127.0.0.1:${server.address().port}/mcp`,
    requests,
    close: () =>
      new Promise((resolve) => {
        taskStore.cleanup?.();
        server.closeAllConnections();
        server.close(() => resolve());
      }),
  };
}
