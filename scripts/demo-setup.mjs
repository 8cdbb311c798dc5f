// Sets up Flowgate's built-in demo on a running local Flowgate (`make dev` starts it in the
// background when .dev.vars has DEMO=true): three apps served by the Worker's own demo backend
// (worker/demo.mjs) and one MCP server "Flowgate demo" with a tool for each, then prints the MCP
// URL and the console URL.
//
//   node scripts/demo-setup.mjs [--url http://127.0.0.1:8787] [--vars .dev.vars]
//                               [--state .wrangler/demo-mcp-url] [--wait-seconds 180]
//
// Idempotent: apps and the server are found by name and reused (an app pointing at another port
// is moved to this one). A server code is shown only once, so the MCP URL is kept in the state
// file (beside the local D1 state, git-ignored); on a later start the same URL is printed when it
// still works, else the code is rotated and the new URL printed (saying so). Exits quietly when
// the vars file does not set DEMO=true.
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

import { DEMO_KEYS } from '../worker/demo.mjs';

const root = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const SERVER_NAME = 'Flowgate demo';

function args(argv) {
  const out = {
    url: 'http://127.0.0.1:8787',
    vars: path.join(root, '.dev.vars'),
    state: path.join(root, '.wrangler', 'demo-mcp-url'),
    waitSeconds: 180,
  };
  for (let i = 0; i < argv.length; i += 2) {
    const [k, v] = [argv[i], argv[i + 1]];
    if (v === undefined) fail(`${k} needs a value`);
    if (k === '--url') out.url = v.replace(/\/+$/, '');
    else if (k === '--vars') out.vars = v;
    else if (k === '--state') out.state = v;
    else if (k === '--wait-seconds') out.waitSeconds = Number(v);
    else fail(`unknown option ${k} (known: --url, --vars, --state, --wait-seconds)`);
  }
  return out;
}

function fail(message) {
  console.error(`demo-setup: ${message}`);
  process.exit(1);
}

/** KEY=value lines of a .dev.vars file (quotes around a value removed). */
function readVars(file) {
  const vars = {};
  for (const line of fs.readFileSync(file, 'utf8').split(/\r?\n/)) {
    const m = /^\s*([A-Za-z_][A-Za-z0-9_]*)\s*=\s*(.*?)\s*$/.exec(line);
    if (m) vars[m[1]] = m[2].replace(/^(["'])(.*)\1$/, '$2');
  }
  return vars;
}

const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function waitForHealth(base, seconds) {
  const deadline = Date.now() + seconds * 1000;
  for (;;) {
    try {
      const r = await fetch(`${base}/healthz`, { signal: AbortSignal.timeout(2000) });
      await r.arrayBuffer();
      if (r.status === 200) return;
    } catch {
      /* not up yet */
    }
    if (Date.now() > deadline) fail(`Flowgate did not answer ${base}/healthz within ${seconds} s`);
    await sleep(500);
  }
}

function consoleClient(base, token) {
  return async (method, p, body) => {
    const r = await fetch(`${base}/console/api${p}`, {
      method,
      headers: { authorization: `Bearer ${token}`, ...(body ? { 'content-type': 'application/json' } : {}) },
      body: body ? JSON.stringify(body) : undefined,
    });
    const text = await r.text();
    let json;
    try {
      json = JSON.parse(text);
    } catch {
      json = undefined;
    }
    if (r.status >= 300) fail(`${method} /console/api${p} answered ${r.status}: ${json?.message ?? text}`);
    return json;
  };
}

/** The three demo apps, as created on a Flowgate at `base`. */
function demoApps(base) {
  const dify = `${base}/demo/v1`;
  return [
    {
      name: 'Demo workflow',
      import: {
        base_url: dify,
        api_key: DEMO_KEYS.workflow,
        outputs: [
          { variable: 'summary', type: 'string', description: 'The briefing' },
          { variable: 'word_count', type: 'integer' },
        ],
      },
      where: (backend) => backend.base_url,
      moved: (backend) => ({ ...backend, base_url: dify, api_key: DEMO_KEYS.workflow }),
    },
    {
      name: 'Demo chat',
      import: { base_url: dify, api_key: DEMO_KEYS.chat },
      where: (backend) => backend.base_url,
      moved: (backend) => ({ ...backend, base_url: dify, api_key: DEMO_KEYS.chat }),
    },
    {
      name: 'Demo HTTP tool',
      create: {
        name: 'Demo HTTP tool',
        description: "Counts the words of a text, streaming its progress (Flowgate's built-in demo HTTP tool)",
        mode: 'http-tool',
        backend: {
          api_endpoint: `${base}/demo/tool`,
          api_key: DEMO_KEYS.tool,
          stream: true,
          manifest: {
            parameters: [{ name: 'text', type: 'string', required: true, description: 'The text to count', form: 'llm' }],
            outputs: [
              { name: 'words', type: 'integer' },
              { name: 'characters', type: 'integer' },
              { name: 'longest_word', type: 'string' },
            ],
          },
        },
      },
      where: (backend) => backend.api_endpoint,
      moved: (backend) => ({ ...backend, api_endpoint: `${base}/demo/tool`, api_key: DEMO_KEYS.tool }),
    },
  ];
}

/** Whether an MCP URL answers `initialize` (a rotated or unknown code answers 404). */
async function works(url) {
  try {
    const r = await fetch(url, {
      method: 'POST',
      headers: { 'content-type': 'application/json', accept: 'application/json, text/event-stream' },
      body: JSON.stringify({
        jsonrpc: '2.0',
        id: 1,
        method: 'initialize',
        params: { protocolVersion: '2025-06-18', capabilities: {}, clientInfo: { name: 'flowgate-demo-setup', version: '1' } },
      }),
    });
    await r.arrayBuffer();
    return r.status === 200;
  } catch {
    return false;
  }
}

async function main() {
  const opts = args(process.argv.slice(2));
  if (!fs.existsSync(opts.vars)) fail(`${opts.vars} does not exist (make dev creates it from .dev.vars.example)`);
  const vars = readVars(opts.vars);
  if (vars.DEMO !== 'true') return; // the demo is off: nothing to do
  if (!vars.ADMIN_TOKEN) fail(`${opts.vars} has no ADMIN_TOKEN`);
  const base = opts.url;
  await waitForHealth(base, opts.waitSeconds);
  const api = consoleClient(base, vars.ADMIN_TOKEN);

  const existing = (await api('GET', '/apps')).data;
  const appIds = [];
  for (const demo of demoApps(base)) {
    let app = existing.find((a) => a.name === demo.name);
    if (!app) {
      app = demo.import ? await api('POST', '/apps/import', demo.import) : await api('POST', '/apps', demo.create);
    } else if (demo.where(app.backend) !== demo.where(demo.moved(app.backend))) {
      // Made on another port: point it here (with its key again: Flowgate keeps a stored key
      // only for the same origin).
      const { name, description, mode, user_input_form, outputs } = app;
      const body = { name, description, mode, backend: demo.moved(app.backend) };
      if (mode !== 'http-tool') Object.assign(body, { user_input_form, outputs });
      app = await api('PUT', `/apps/${app.id}`, body);
    }
    appIds.push(app.id);
  }

  const servers = (await api('GET', '/servers')).data;
  let server = servers.find((s) => s.name === SERVER_NAME && s.kind === 'multi');
  let url;
  let how;
  if (!server) {
    server = await api('POST', '/servers', {
      name: SERVER_NAME,
      description: "Flowgate's built-in demo: a streamed workflow, a chat app and an HTTP tool",
      app_ids: appIds,
      parameters: { topic: 'What the briefing is about', text: 'The text whose words are counted' },
    });
    url = server.mcp_url;
    how = 'created';
  } else {
    if (JSON.stringify(server.app_ids) !== JSON.stringify(appIds)) {
      await api('PUT', `/servers/${server.id}`, { app_ids: appIds });
    }
    // The saved URL's code, on this origin (PORT may have changed since).
    const saved = fs.existsSync(opts.state) ? fs.readFileSync(opts.state, 'utf8').trim() : '';
    const code = /\/mcp\/server\/([A-Za-z0-9]+)\/mcp$/.exec(saved)?.[1];
    const candidate = code?.endsWith(server.server_code_hint) ? `${base}/mcp/server/${code}/mcp` : null;
    if (candidate && (await works(candidate))) {
      url = candidate;
      how = 'reused';
    } else {
      // Codes are shown once and this one is not known here any more: draw a new one.
      url = (await api('POST', `/servers/${server.id}/refresh`)).mcp_url;
      how = 'rotated';
    }
  }
  fs.mkdirSync(path.dirname(opts.state), { recursive: true });
  fs.writeFileSync(opts.state, `${url}\n`, { mode: 0o600 });

  const note = {
    created: 'created the demo apps and server',
    reused: 'found the demo server of an earlier start; its code is unchanged',
    rotated: `rotated the demo server code, as ${opts.state} held no working URL (a code is shown only once); any older URL no longer works`,
  }[how];
  console.log(
    [
      '',
      `Flowgate demo ready (${note}).`,
      `  MCP URL:  ${url}`,
      `  Console:  ${base}/console`,
      '  Tools:    Demo_workflow (streams progress per node), Demo_chat, Demo_HTTP_tool',
      '  Paste the MCP URL into an MCP client (Streamable HTTP), e.g. npx @modelcontextprotocol/inspector',
      '',
    ].join('\n'),
  );
}

main().catch((e) => fail(e?.stack ?? String(e)));
