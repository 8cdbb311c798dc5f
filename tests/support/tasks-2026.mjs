// The tasks extension of MCP 2026-07-28 (SEP-2663) for the hand-written 2026 upstream fixture
// (input-required-upstream.mjs): the reference server's task fixture tools that the suite's
// `tasks-*` scenarios call (greet, slow_compute, failing_job, protocol_error_job,
// confirm_delete, multi_input, test_tool_with_task) and tasks/get|update|cancel, with the tasks
// kept in this process. Every task a client reaches must have been created here: ids are random.
import { randomUUID } from 'node:crypto';

export const EXTENSION = 'io.modelcontextprotocol/tasks';
const CAPS = 'io.modelcontextprotocol/clientCapabilities';
const TTL_MS = 60_000;
const POLL_MS = 100;

const text = (t) => ({ content: [{ type: 'text', text: t }] });
const elicit = (message, props, required) => ({
  method: 'elicitation/create',
  params: { message, requestedSchema: { type: 'object', properties: props, required } },
});
const OBJ = { type: 'object', properties: {} };

export const TASK_TOOL_LIST = [
  { name: 'greet', description: 'Says hello (sync only)', inputSchema: { type: 'object', properties: { name: { type: 'string' } }, required: ['name'] } },
  {
    name: 'slow_compute',
    description: 'Sleeps `seconds`, then answers; a task when the client speaks the tasks extension',
    inputSchema: { type: 'object', properties: { seconds: { type: 'number' }, label: { type: 'string' } } },
    execution: { taskSupport: 'optional' },
  },
  { name: 'failing_job', description: 'Fails as a tool after about a second', inputSchema: OBJ, execution: { taskSupport: 'required' } },
  { name: 'protocol_error_job', description: 'Fails with a protocol error', inputSchema: OBJ, execution: { taskSupport: 'optional' } },
  {
    name: 'confirm_delete',
    description: 'Asks for a confirmation, then deletes',
    inputSchema: { type: 'object', properties: { filename: { type: 'string' } } },
    execution: { taskSupport: 'optional' },
  },
  { name: 'multi_input', description: 'Asks two questions at once', inputSchema: OBJ, execution: { taskSupport: 'optional' } },
  { name: 'test_tool_with_task', description: 'Asks for a name (input_required), then runs a task', inputSchema: OBJ, execution: { taskSupport: 'required' } },
];
export const isTaskTool = (name) => TASK_TOOL_LIST.some((t) => t.name === name);

/** @type {Map<string, any>} */
const tasks = new Map();
const now = () => new Date().toISOString();
/** Every task this process created, as the tests inspect them (id, tool, status, ...). */
export const createdTasks = () => [...tasks.values()].map(({ timer, ...t }) => t);

function newTask(tool) {
  const t = { taskId: randomUUID(), tool, status: 'working', createdAt: now(), lastUpdatedAt: now(), ttlMs: TTL_MS, pollIntervalMs: POLL_MS };
  tasks.set(t.taskId, t);
  return t;
}
function settle(t, fields) {
  if (['completed', 'failed', 'cancelled'].includes(t.status)) return;
  clearTimeout(t.timer);
  Object.assign(t, fields, { lastUpdatedAt: now() });
  if (t.status !== 'input_required') delete t.inputRequests;
}
const envelope = (t) => ({ taskId: t.taskId, status: t.status, createdAt: t.createdAt, lastUpdatedAt: t.lastUpdatedAt, ttlMs: t.ttlMs, pollIntervalMs: t.pollIntervalMs });
const created = (t) => ({ resultType: 'task', ...envelope(t) });
const hasExtension = (p) => p?._meta?.[CAPS]?.extensions?.[EXTENSION] !== undefined;

/**
 * A tools/call of a task tool; `RpcError(code, message, status, data)` builds protocol errors,
 * `ask(inputRequests, state)` an input_required result, `sign`/`state` the fixture's requestState.
 */
export function callTaskTool(p, { RpcError, ask, sign, state }) {
  const args = p.arguments ?? {};
  const ext = hasExtension(p);
  const tool = TASK_TOOL_LIST.find((t) => t.name === p.name);
  if (tool.execution?.taskSupport === 'required' && !ext && p.name !== 'test_tool_with_task') {
    throw new RpcError(-32021, `Missing required client capability: ${p.name} runs only as a task`, 400, { requiredCapabilities: { extensions: { [EXTENSION]: {} } } });
  }
  switch (p.name) {
    case 'greet':
      return text(`Hello, ${args.name}!`);
    case 'slow_compute': {
      const seconds = Math.max(0, Number(args.seconds ?? 0));
      const answer = text(`computed ${args.label ?? 'value'} after ${seconds}s`);
      if (!ext) return new Promise((resolve) => setTimeout(() => resolve(answer), Math.min(seconds, 5) * 1000));
      const t = newTask(p.name);
      t.timer = setTimeout(() => settle(t, { status: 'completed', result: answer }), seconds * 1000);
      return created(t);
    }
    case 'failing_job': {
      const t = newTask(p.name);
      t.timer = setTimeout(() => settle(t, { status: 'completed', result: { ...text('the job failed: no such input'), isError: true } }), 1000);
      return created(t);
    }
    case 'protocol_error_job': {
      if (!ext) throw new RpcError(-32603, 'Internal error: the job crashed');
      const t = newTask(p.name);
      t.timer = setTimeout(() => settle(t, { status: 'failed', error: { code: -32603, message: 'Internal error: the job crashed' } }), 300);
      return created(t);
    }
    case 'confirm_delete':
    case 'multi_input': {
      if (!ext) throw new RpcError(-32021, `Missing required client capability: ${p.name} asks for input as a task`, 400, { requiredCapabilities: { extensions: { [EXTENSION]: {} } } });
      const t = newTask(p.name);
      t.args = args;
      t.answers = {};
      t.status = 'input_required';
      t.inputRequests =
        p.name === 'confirm_delete'
          ? { confirm: elicit(`Delete ${args.filename}?`, { confirm: { type: 'boolean' } }, ['confirm']) }
          : { first: elicit('What is your name?', { name: { type: 'string' } }, ['name']), second: elicit('Proceed?', { confirm: { type: 'boolean' } }, ['confirm']) };
      return created(t);
    }
    case 'test_tool_with_task': {
      const r = p.inputResponses ?? {};
      if (!r.user_name) return ask({ user_name: elicit('What is your name?', { name: { type: 'string' } }, ['name']) }, sign({ tool: p.name }));
      if (state?.tool !== p.name) throw new RpcError(-32602, 'Invalid params: requestState failed its integrity check');
      if (!ext) throw new RpcError(-32021, 'Missing required client capability: test_tool_with_task runs only as a task', 400, { requiredCapabilities: { extensions: { [EXTENSION]: {} } } });
      const t = newTask(p.name);
      const name = r.user_name.content?.name;
      t.timer = setTimeout(() => settle(t, { status: 'completed', result: text(`Hello, ${name}! Your task is done.`) }), 200);
      return created(t);
    }
  }
}

/** tasks/get, tasks/update, tasks/cancel (tasks/result and tasks/list are gone in 2026-07-28). */
export function taskMethod(method, p, { RpcError }) {
  if (method === 'tasks/result' || method === 'tasks/list') throw new RpcError(-32601, `Method not found: ${method}`, 404);
  if (!hasExtension(p)) {
    throw new RpcError(-32021, `Missing required client capability: ${method} needs the ${EXTENSION} extension`, 400, { requiredCapabilities: { extensions: { [EXTENSION]: {} } } });
  }
  const t = tasks.get(p.taskId);
  if (!t) throw new RpcError(-32602, `Invalid params: unknown task ${p.taskId}`);
  const done = { resultType: 'complete' };
  switch (method) {
    case 'tasks/get': {
      const r = { ...done, ...envelope(t) };
      if (t.status === 'input_required') r.inputRequests = t.inputRequests;
      if (t.result) r.result = t.result;
      if (t.error) r.error = t.error;
      return r;
    }
    case 'tasks/cancel':
      settle(t, { status: 'cancelled' });
      return done;
    case 'tasks/update': {
      const responses = p.inputResponses;
      if (typeof responses !== 'object' || responses === null || Array.isArray(responses)) throw new RpcError(-32602, 'Invalid params: inputResponses must be an object');
      if (t.status !== 'input_required') return done;
      for (const [k, v] of Object.entries(responses)) {
        if (!t.inputRequests[k]) continue;
        t.answers[k] = v;
        delete t.inputRequests[k];
      }
      t.lastUpdatedAt = now();
      if (Object.keys(t.inputRequests).length) return done;
      t.status = 'working';
      const answer =
        t.tool === 'confirm_delete'
          ? text(t.answers.confirm?.content?.confirm ? `deleted ${t.args.filename}` : `kept ${t.args.filename}`)
          : text(`answered by ${t.answers.first?.content?.name}`);
      t.timer = setTimeout(() => settle(t, { status: 'completed', result: answer }), 100);
      return done;
    }
    default:
      throw new RpcError(-32601, `Method not found: ${method}`, 404);
  }
}
