// Flowgate's built-in demo backend, served under /demo/ by worker/entry.mjs only when the
// Worker runs with DEMO=true (.dev.vars.example sets it; a deployment never should). It lets a
// newcomer try Flowgate with nothing else running:
//
//   /demo/v1/...  a Dify Service API subset with two apps, chosen by the API key as Dify does:
//                 "Demo workflow" (workflow) and "Demo chat" (advanced-chat), both streaming
//                 node events a few hundred ms apart, so progress shows in a client
//   /demo/tool    an HTTP tool (docs/http-tool-protocol.md) that counts words, streaming
//                 thoughts and percentages when asked to
//
// The keys below are fixed, public demo values: they guard nothing. Plain JavaScript in front of
// the Rust Worker, so that the demo costs the wasm bundle nothing. Every stream is bounded (a
// handful of events, ~3 s), and no state is kept between requests.

export const DEMO_KEYS = Object.freeze({
  workflow: 'app-flowgate-demo-workflow',
  chat: 'app-flowgate-demo-chat',
  tool: 'flowgate-demo-tool-key',
});

/** Pause between streamed events: long enough to watch, short enough to wait for. */
const STEP_MS = 300;

const APPS = {
  [DEMO_KEYS.workflow]: {
    mode: 'workflow',
    name: 'Demo workflow',
    description: "Writes a short briefing on a topic (Flowgate's built-in demo: no LLM involved)",
    form: [{ 'text-input': { variable: 'topic', label: 'Topic', required: true, max_length: 200 } }],
    nodes: [
      ['start', 'Start'],
      ['tool', 'Look up sources'],
      ['llm', 'Draft the briefing'],
      ['code', 'Review'],
      ['end', 'End'],
    ],
  },
  [DEMO_KEYS.chat]: {
    mode: 'advanced-chat',
    name: 'Demo chat',
    description: "Answers a question, streamed word by word (Flowgate's built-in demo: no LLM involved)",
    form: [],
    nodes: [
      ['start', 'Start'],
      ['llm', 'Think it over'],
      ['answer', 'Answer'],
    ],
  },
};

const json = (status, body, headers = {}) =>
  new Response(JSON.stringify(body), { status, headers: { 'content-type': 'application/json', ...headers } });
const difyError = (status, code, message) => json(status, { code, message, status });
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const id = () => crypto.randomUUID();
const now = () => Math.floor(Date.now() / 1000);

/** A text-event-stream of the objects an async generator yields; a client leaving ends it. */
function sse(events) {
  const enc = new TextEncoder();
  const body = new ReadableStream({
    async pull(controller) {
      const { value, done } = await events.next();
      if (done) controller.close();
      else controller.enqueue(enc.encode(`data: ${JSON.stringify(value)}\n\n`));
    },
    cancel() {
      events.return();
    },
  });
  return new Response(body, { headers: { 'content-type': 'text/event-stream; charset=utf-8', 'cache-control': 'no-cache' } });
}

async function readJson(request) {
  try {
    const v = await request.json();
    return v !== null && typeof v === 'object' && !Array.isArray(v) ? v : null;
  } catch {
    return null;
  }
}

/** The demo's answer to `request`, or null when the path is not under /demo/. */
export function demo(request) {
  const url = new URL(request.url);
  if (!url.pathname.startsWith('/demo/')) return null;
  return route(request, url.pathname.replace(/\/+$/, '')).catch((e) =>
    json(500, { error: `the demo backend failed: ${e?.message ?? e}` }),
  );
}

async function route(request, path) {
  if (path === '/demo/tool') return tool(request);
  if (!path.startsWith('/demo/v1/')) return json(404, { error: 'not_found', message: `no demo route ${path}` });
  const app = APPS[/^Bearer\s+(\S+)\s*$/i.exec(request.headers.get('authorization') ?? '')?.[1]];
  const get = request.method === 'GET';
  const rest = path.slice('/demo/v1'.length);
  if (!app) return difyError(401, 'unauthorized', 'Access token is invalid');
  if (get && rest === '/info') {
    return json(200, { name: app.name, description: app.description, tags: [], mode: app.mode, author_name: 'Flowgate demo' });
  }
  if (get && rest === '/parameters') {
    return json(200, { opening_statement: '', suggested_questions: [], user_input_form: app.form, file_upload: {} });
  }
  if (request.method === 'POST' && /^\/(workflows\/tasks|chat-messages)\/[^/]+\/stop$/.test(rest)) {
    // Runs last a few seconds and keep no state: there is nothing to stop but the stream,
    // which ends when Flowgate lets go of it.
    return json(200, { result: 'success' });
  }
  const runs = { workflow: '/workflows/run', 'advanced-chat': '/chat-messages' };
  if (request.method !== 'POST' || rest !== runs[app.mode]) {
    return difyError(404, 'not_found', `the demo ${app.mode} app has no ${request.method} ${rest}`);
  }
  const body = await readJson(request);
  if (!body) return difyError(400, 'bad_request', 'Invalid JSON payload received or JSON payload is empty.');
  if (body.response_mode !== 'blocking' && body.response_mode !== 'streaming') {
    return difyError(400, 'invalid_param', "response_mode must be 'blocking' or 'streaming'");
  }
  const inputs = body.inputs && typeof body.inputs === 'object' ? body.inputs : {};
  if (app.mode === 'workflow') {
    const topic = typeof inputs.topic === 'string' ? inputs.topic.trim().slice(0, 200) : '';
    if (!topic) return difyError(400, 'invalid_param', 'topic is required in input form');
    return run(app, body.response_mode, briefing(topic), null);
  }
  const query = typeof body.query === 'string' ? body.query.trim().slice(0, 200) : '';
  if (!query) return difyError(400, 'invalid_param', 'query is required');
  return run(app, body.response_mode, null, `You asked: "${query}". This answer comes from Flowgate's built-in demo chat app, streamed word by word through Flowgate to your MCP client.`);
}

function briefing(topic) {
  const summary = `${topic}: three sources were consulted, a draft was written and reviewed. (A canned briefing from Flowgate's built-in demo workflow.)`;
  return { summary, word_count: summary.split(/\s+/).length };
}

/** One run of a demo app: a blocking answer, or the stream of Dify events (node by node). */
function run(app, responseMode, outputs, answer) {
  const ids = { task_id: id(), run: id(), workflow: id(), message: id(), conversation: id() };
  const created = now();
  const chat = answer !== null;
  if (responseMode === 'blocking') {
    if (chat) {
      return json(200, {
        event: 'message', task_id: ids.task_id, id: ids.message, message_id: ids.message,
        conversation_id: ids.conversation, mode: app.mode, answer, metadata: {}, created_at: created,
      });
    }
    return json(200, { workflow_run_id: ids.run, task_id: ids.task_id, data: finished(app, ids, created, outputs) });
  }
  const base = chat
    ? { task_id: ids.task_id, workflow_run_id: ids.run, conversation_id: ids.conversation, message_id: ids.message, created_at: created }
    : { task_id: ids.task_id, workflow_run_id: ids.run };
  return sse(
    (async function* () {
      yield { event: 'workflow_started', ...base, data: { id: ids.run, workflow_id: ids.workflow, created_at: created } };
      let index = 0;
      for (const [type, title] of app.nodes) {
        const node = { id: id(), node_id: `${type}-${++index}`, node_type: type, title, index, created_at: now() };
        yield { event: 'node_started', ...base, data: node };
        await sleep(STEP_MS);
        if (chat && type === 'llm') {
          for (const word of answer.split(/(?<= )/)) {
            yield { event: 'message', ...base, id: ids.message, answer: word };
            await sleep(STEP_MS / 6);
          }
        }
        yield { event: 'node_finished', ...base, data: { ...node, status: 'succeeded', error: null, elapsed_time: STEP_MS / 1000, finished_at: now() } };
      }
      yield { event: 'workflow_finished', ...base, data: finished(app, ids, created, chat ? { answer } : outputs) };
      if (chat) yield { event: 'message_end', ...base, id: ids.message, metadata: {} };
    })(),
  );
}

function finished(app, ids, created, outputs) {
  return {
    id: ids.run, workflow_id: ids.workflow, status: 'succeeded', outputs, error: null,
    elapsed_time: (app.nodes.length * STEP_MS) / 1000, total_tokens: 0, total_steps: app.nodes.length,
    created_at: created, finished_at: now(),
  };
}

/** The HTTP tool: word statistics of `text`, streamed as thoughts and percentages when asked. */
async function tool(request) {
  if (request.method !== 'POST') return json(405, { error: 'POST a JSON object' }, { allow: 'POST' });
  if (request.headers.get('authorization') !== `Bearer ${DEMO_KEYS.tool}`) {
    return json(401, { error: 'the demo tool needs Authorization: Bearer <its demo key>' });
  }
  const body = await readJson(request);
  if (!body || typeof body.text !== 'string') return json(400, { error: '`text` is required: a string' });
  const words = body.text.split(/\s+/).filter(Boolean);
  const result = {
    words: words.length,
    characters: [...body.text].length,
    longest_word: words.reduce((a, w) => (w.length > a.length ? w : a), ''),
  };
  if (body.stream !== true) return json(200, result);
  return sse(
    (async function* () {
      yield { type: 'thought', message: `Counting the words of a ${result.characters}-character text` };
      for (const [percent, message] of [[25, 'split into words'], [50, 'counted the words'], [75, 'found the longest word']]) {
        await sleep(STEP_MS);
        yield { type: 'progress', percent, message };
      }
      await sleep(STEP_MS);
      yield { type: 'result', result };
    })(),
  );
}
