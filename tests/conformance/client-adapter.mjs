// The conformance suite's client command for Flowgate: `conformance client --command "node
// tests/conformance/client-adapter.mjs" --scenario X` appends the scenario's server URL. This
// registers that server as an upstream `mcp` app of a running Flowgate (FLOWGATE_URL,
// FLOWGATE_ADMIN_TOKEN), publishes it, and drives Flowgate with the official SDK client, so
// that the requests the scenario server sees come from Flowgate's own upstream client.
// Pre-registered client credentials of auth scenarios (MCP_CONFORMANCE_CONTEXT: a client secret,
// or a private key for private_key_jwt) become the app's `backend.oauth` with the authorization server's `issuer`, as an admin who registered the
// client there would enter it: from the context when the scenario gives it, else read once from
// the server's published protected-resource metadata (what the admin would look up). Finding the
// token endpoint, the client authentication and the scope is Flowgate's job, not this script's.
// A run at 2026-07-28 pins the app to that revision (backend.protocol_version), so Flowgate
// never opens with the 2025 initialize probe.
// Exit 0 when every step worked; else 1 with the reason on stderr.
import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

const serverUrl = process.argv.at(-1);
const scenario = process.env.MCP_CONFORMANCE_SCENARIO ?? '';
const revision = process.env.MCP_CONFORMANCE_PROTOCOL_VERSION;
const context = JSON.parse(process.env.MCP_CONFORMANCE_CONTEXT ?? '{}');
const base = process.env.FLOWGATE_URL;
const admin = process.env.FLOWGATE_ADMIN_TOKEN;

/** What to call once connected, per scenario: [tool name, arguments]. */
const CALLS = {
  initialize: [],
  tools_call: [['add_numbers', { a: 5, b: 3 }]],
  'sse-retry': [['test_reconnection', {}]],
  'request-metadata': [],
  'json-schema-ref-no-deref': [],
};
const AUTH_CALLS = [['test-tool', {}]];

async function consoleApi(path, method, body) {
  const r = await fetch(`${base}/console/api${path}`, {
    method,
    headers: { authorization: `Bearer ${admin}`, 'content-type': 'application/json' },
    body: body === undefined ? undefined : JSON.stringify(body),
  });
  const text = await r.text();
  if (r.status >= 300) throw new Error(`${method} ${path}: HTTP ${r.status} ${text}`);
  return text ? JSON.parse(text) : null;
}

/** The authorization server the MCP server publishes (RFC 9728 metadata at its path-based
 * well-known location): what an admin reads to know where the client is registered. */
async function publishedIssuer(mcpUrl) {
  const u = new URL(mcpUrl);
  const r = await fetch(`${u.origin}/.well-known/oauth-protected-resource${u.pathname}`);
  if (!r.ok) throw new Error(`no protected-resource metadata for ${mcpUrl}: HTTP ${r.status}`);
  const issuer = (await r.json()).authorization_servers?.[0];
  if (!issuer) throw new Error('the protected-resource metadata names no authorization server');
  return issuer;
}

async function main() {
  if (!base || !admin) throw new Error('FLOWGATE_URL and FLOWGATE_ADMIN_TOKEN must be set');
  const backend = { url: serverUrl, tool_name_prefix: false, session_init_timeout: 10, tool_call_timeout: 20 };
  if (revision === '2026-07-28') backend.protocol_version = revision;
  if (context.client_id) {
    backend.oauth = {
      issuer: context.issuer ?? (await publishedIssuer(serverUrl)),
      client_id: context.client_id,
      ...(context.client_secret && { client_secret: context.client_secret }),
      // private_key_jwt: the scenario's key (PKCS#8 PEM) and algorithm, as the admin enters them.
      ...(context.private_key_pem && {
        private_key: context.private_key_pem,
        token_endpoint_auth_method: 'private_key_jwt',
        ...(context.signing_algorithm && { signing_alg: context.signing_algorithm }),
      }),
    };
  }
  const name = `conf-${scenario.replace(/[^a-z0-9]+/gi, '-')}-${process.pid}`;
  const app = await consoleApi('/apps', 'POST', { name, description: `conformance scenario ${scenario}`, mode: 'mcp', backend });
  try {
    const server = await consoleApi(`/apps/${app.id}/server`, 'POST', { description: `conformance scenario ${scenario}` });
    const client = new Client({ name: 'flowgate-conformance-adapter', version: '1.0.0' });
    await client.connect(new StreamableHTTPClientTransport(new URL(server.mcp_url)));
    try {
      // tools/list makes Flowgate connect to the upstream (initialize or server/discover) and list.
      const { tools } = await client.listTools();
      console.log(`tools through Flowgate: ${tools.map((t) => t.name).join(', ') || '(none)'}`);
      if (scenario === 'json-schema-2020-12-preservation') {
        // Hand the focal tool's inputSchema, as Flowgate lists it, back to the echo tool.
        const focal = tools.find((t) => t.name !== 'json_schema_echo');
        CALLS[scenario] = [['json_schema_echo', { schema: focal?.inputSchema }]];
      }
      if (scenario === 'http-custom-headers') {
        // The scenario's calls (context.toolCalls), whose x-mcp-header arguments Flowgate must
        // mirror into Mcp-Param-* headers upstream.
        CALLS[scenario] = (context.toolCalls ?? []).map((c) => [c.name, c.arguments]);
      }
      if (scenario === 'http-invalid-tool-headers') {
        // Every tool Flowgate lists is called: one with an invalid x-mcp-header must not be
        // among them (Flowgate leaves such tools out).
        const value = (schema) => ({ integer: 1, number: 1, boolean: true, object: {}, array: [] })[schema?.type] ?? 'us-west1';
        CALLS[scenario] = tools.map((t) => [t.name, Object.fromEntries((t.inputSchema?.required ?? []).map((k) => [k, value(t.inputSchema.properties?.[k])]))]);
      }
      if (scenario === 'http-standard-headers') {
        // Every kind of request that carries Mcp-Method / Mcp-Name, through Flowgate.
        for (const t of tools) await client.callTool({ name: t.name, arguments: {} });
        for (const r of (await client.listResources()).resources) await client.readResource({ uri: r.uri });
        for (const p of (await client.listPrompts()).prompts) await client.getPrompt({ name: p.name, arguments: {} });
        return;
      }
      for (const [tool, args] of CALLS[scenario] ?? AUTH_CALLS) {
        const r = await client.callTool({ name: tool, arguments: args });
        console.log(`${tool}: ${JSON.stringify(r)}`);
        if (r.isError) throw new Error(`${tool} failed through Flowgate: ${JSON.stringify(r.content)}`);
      }
    } finally {
      await client.close();
    }
  } finally {
    // The app goes (its server with it), so one Flowgate serves every scenario.
    await consoleApi(`/apps/${app.id}`, 'DELETE').catch((e) => console.error(`cleanup: ${e.message}`));
  }
}

main().then(
  () => process.exit(0),
  (e) => {
    console.error(e?.stack ?? String(e));
    process.exit(1);
  },
);
