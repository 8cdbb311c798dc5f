// Fake "upstream" MCP servers for Flowgate's MCP-proxy tests, built on the official TypeScript
// SDK (@modelcontextprotocol/sdk: McpServer + StreamableHTTPServerTransport / SSEServerTransport).
//
//   import { startUpstreams } from '../support/mcp-upstreams.mjs';
//   const up = await startUpstreams();
//   ... point Flowgate at up.stateful.url, up.legacySse.url, ... ...
//   up.stateful.requests       // every HTTP request that upstream received
//   await up.stop();
//
// Every upstream is its own node:http server on 127.0.0.1 (random free port), so the origins
// differ and every request one of them receives is recorded in its own `requests` array:
//   { method, path /* with the query string */, headers /* lower-cased names */,
//     body /* parsed JSON, or an object of the form fields for x-www-form-urlencoded, else
//             undefined */, rawBody /* the body text, '' if none */, at /* Date.now() */ }
// Entries are pushed when the request body has been read, before it is answered.
//
// ---- The shared tool set ("everything" tools) --------------------------------------------
// As the conformance suite's tools-call-* scenarios call them (no arguments):
//   test_simple_text             text "This is a simple text response for testing."
//   test_image_content           image, image/png (a 1x1 red PNG)
//   test_audio_content           audio, audio/wav (a tiny 8 kHz silent WAV)
//   test_embedded_resource       resource {uri: test://embedded-resource, text/plain, text}
//   test_multiple_content_types  text + image + resource (test://mixed-content-resource, JSON)
//   test_tool_with_logging       3 notifications/message (info) 50 ms apart, then text
//   test_tool_with_progress      notifications/progress 0, 50, 100 (total 100) 50 ms apart when
//                                the call has _meta.progressToken, then text
//   test_error_handling          result with isError: true and a text block
// Plus:
//   echo {text}                  text "echo: <text>", structuredContent {text}; title "Echo",
//                                annotations {readOnlyHint: true}, outputSchema
//                                {type:object, properties:{text:{type:string}}, required:[text]}
//   headers {}                   structuredContent {headers: <this call's HTTP request headers,
//                                lower-cased>} and the same object as JSON text
//   slow_progress {steps, delayMs, gate?}  per step: wait delayMs, notifications/progress
//                                {progressToken, progress: i, total: steps, message "step i/steps"}
//                                (only with a progressToken) and notifications/message
//                                {level: info, logger: slow_progress, data: "step i/steps"};
//                                with `gate`, then waits until releaseGate(gate) (or the request
//                                is cancelled, or stop()); then text "done <steps>". Stops early
//                                when the request is cancelled (notifications/cancelled).
//                                gateWaiting(name) says whether a call is waiting at that gate,
//                                so a test can tell "still running" from "answered" by events.
//   link {}                      text + resource_link {uri: test://linked-resource, ...}
//   fail_protocol {}             a JSON-RPC error {code: -32602, message: "bad thing"} (not a
//                                tool result). McpServer turns every error thrown by a tool into
//                                an isError result, so this one is answered before McpServer's
//                                tools/call handler runs.
// Progress and log notifications go on the POST's SSE stream (related to the request); in the
// JSON-response upstreams (stateless, oauth, toolsets) the SDK drops them.
// Every upstream declares the `logging` capability (logging/setLevel works; the tools' log
// messages are not filtered by the level).
//
// ---- The shared resources and prompts ("everything" catalog) -----------------------------
// As the conformance suite's resources-*, prompts-* and completion-complete scenarios expect:
//   resources  test://static-text      text/plain "This is the content of the static text resource."
//              test://static-binary    image/png, blob: the 1x1 red PNG
//              test://watched-resource text/plain "Watched resource content"
//   template   test://template/{id}/data  application/json {"id","templateTest":true,"data":"Data for ID: <id>"};
//              completes `id` from ["1", "2", "3", "123"] by prefix
//   prompts    test_simple_prompt                  user text "This is a simple prompt for testing."
//              test_prompt_with_arguments {arg1, arg2}  "Prompt with arguments: arg1='<arg1>', arg2='<arg2>'";
//                                                  arg1 completes from ["paris", "park", "party"] by prefix
//              test_prompt_with_embedded_resource {resourceUri}  an embedded text resource, then text
//              test_prompt_with_image              an image (the red PNG), then text
//   capabilities: resources (with subscribe: resources/subscribe and unsubscribe kept per
//                 session), prompts, completions (declared by McpServer from the above).
//
// ---- Upstreams ----------------------------------------------------------------------------
// stateful   url http://127.0.0.1:P/mcp. Streamable HTTP with sessions (randomUUID), one
//            transport + McpServer per session. POST answers SSE when the client accepts
//            it (SDK default; the SDK demands Accept: application/json, text/event-stream),
//            GET opens the standalone SSE stream, DELETE ends the session. No session header
//            on a non-initialize request → 400; an unknown or expired session id → 404
//            {"jsonrpc":"2.0","error":{"code":-32001,"message":"Session not found"},"id":null}.
//            tools/list is paginated: pages of 3 with an opaque nextCursor (13 tools → 3,3,3,3,1);
//            a bad cursor → JSON-RPC error -32602.
//            Extras: sessions() → live session ids; expireSessions() → drops (closes) them all,
//            returns their ids; closedSessions → ids ended by DELETE; notifyToolListChanged()
//            → notifications/tools/list_changed on every live session (standalone GET stream);
//            addTool(name, text) → a tool (no arguments, answers text) registered in every live
//            session (the SDK then sends each notifications/tools/list_changed) and every new one;
//            subscriptions() → [session id, URI] pairs (everything catalog);
//            notifyResourceUpdated(uri) → notifications/resources/updated to the sessions
//            subscribed to it;
//            refuseDelete(true) → DELETE answers 405 (Allow: GET, POST) and the session lives on,
//            as for a server that does not let clients end sessions (the spec allows it).
//            At url + '?standalone=no' a session's GET answers 405 (Allow: POST, DELETE): a
//            server that offers no standalone stream (the spec allows it).
// everything url http://127.0.0.1:P/mcp. Like `stateful` (sessions, SSE answers) with the shared
//            tools (not paginated) and the "everything" catalog: the conformance fixture.
//            Also the tools that ask the client mid-call (requests related to the call, on
//            its stream): test_sampling {prompt} → "LLM response: <sampled text>";
//            test_elicitation {message}, test_elicitation_sep1034_defaults,
//            test_elicitation_sep1330_enums (the reference server's schemas) → "User response:
//            action=…, content=…" / "Elicitation completed: action=…, content=…";
//            test_url_elicitation (mode url) → "URL elicitation: action=…";
//            test_list_roots → "Roots: <uri>, …"; test_ask_ping (sends `ping`, which no
//            gateway relays). A capability the client did not declare, or a request the
//            client refused, is an isError result saying so. Its streams are resumable
//            (event store; a priming event with `retry: 200` for 2025-11-25 clients), and
//            test_reconnection closes the call's stream before its result (text "Reconnection
//            test completed successfully. …"), which a client gets with Last-Event-ID.
// catalog    url http://127.0.0.1:P/mcp. Stateless JSON, only the echo tool, another catalog:
//              resources  other://alpha "alpha from catalog", other://beta, other://secret,
//                         test://static-text "static text from the catalog upstream" (the same
//                         URI as the everything catalog's: a collision);
//              template   other://item/{id}, completes `id` from ["one", "two", "three"]
//              prompts    hello {who} → "Hello, <who>!"; `who` completes from ["world", "walrus"];
//                         hidden → "hidden"
//            resources/list pages by 2 (its own nextCursor), so Flowgate follows upstream pages.
// stateless  url http://127.0.0.1:P/mcp. sessionIdGenerator undefined, a new McpServer +
//            transport per POST, enableJsonResponse (application/json answers, no session id).
//            GET and DELETE → 405 (Allow: POST). Same tools, not paginated.
// legacySse  The deprecated HTTP+SSE transport only.
//            url      http://127.0.0.1:P/sse   GET opens the stream; first event
//                     `event: endpoint` / `data: /messages?sessionId=<uuid>` (relative, same origin)
//            baseUrl  http://127.0.0.1:P/mcp   POST → 405 (like an old server); GET → the same
//                     legacy stream as /sse
//            POST /messages?sessionId=<id> delivers a message (202); unknown id → 404.
//            POST /sse → 405.
//            evilEndpointUrl http://127.0.0.1:P/evil/sse: a stream whose endpoint event is the
//                     ABSOLUTE URL <evilOrigin>/messages?sessionId=<uuid>, a different origin
//                     (http://127.0.0.2:Q when 127.0.0.2 can be bound, else another port on
//                     127.0.0.1). Nothing answers MCP there: requests that reach it are recorded
//                     in `evilRequests` and answered 404, so tests can assert none arrived.
// hangingPost url http://127.0.0.1:P/mcp: POST is recorded and never answered (the socket is
//            held until the client goes away or stop()); GET on /mcp or /sse serves the legacy
//            SSE stream as legacySse does (endpoint /messages?sessionId=…, POST /messages
//            works), so auto mode must time out on Streamable HTTP and then fall back to SSE.
//            Extra: sseUrl http://127.0.0.1:P/sse.
// hangingGet url http://127.0.0.1:P/sse, baseUrl http://127.0.0.1:P/mcp: any GET is recorded
//            and never answered (not even headers). headersOnlyUrl http://127.0.0.1:P/headers-only/sse:
//            GET answers 200 text/event-stream headers and then nothing (no endpoint event).
//            POST (any path) → 405.
// unauthorized url http://127.0.0.1:P/mcp: every request (any method, any path) → 401,
//            WWW-Authenticate: Bearer resource_metadata="http://127.0.0.1:P/.well-known/oauth-protected-resource", scope="tools.read"
//            body {"error":"invalid_token","error_description":"authentication required"}.
//            Extras: wwwAuthenticate (the exact header value), resourceMetadataUrl.
// oauth      url http://127.0.0.1:P/mcp: like `stateless` (same tools, JSON answers, GET/DELETE
//            405) but only with Authorization: Bearer <an issued, unexpired, unrevoked access
//            token>; otherwise 401, WWW-Authenticate:
//              Bearer resource_metadata="<origin>/.well-known/oauth-protected-resource"            (no token)
//              Bearer error="invalid_token", resource_metadata="<origin>/.well-known/oauth-protected-resource"  (bad/expired)
//            body {"error":"invalid_token",...}.
//            tokenUrl http://127.0.0.1:P/token, POST application/x-www-form-urlencoded:
//              grant_type=client_credentials  client auth by form fields client_id/client_secret
//                                             or HTTP Basic (RFC 6749 2.3.1, form-urlencoded parts);
//                                             optional scope, audience
//              grant_type=refresh_token       refresh_token (+ client auth, optional)
//            → 200 {access_token, token_type:"Bearer", expires_in, refresh_token[, scope]}.
//            Refresh tokens rotate: using one revokes it (setRotateRefreshTokens(false) keeps
//            them valid). Errors (RFC 6749 5.2, JSON): bad client → 401 invalid_client (with
//            WWW-Authenticate: Basic realm="flowgate-test"), bad/used refresh token → 400
//            invalid_grant, other grant → 400 unsupported_grant_type, no grant → 400
//            invalid_request, wrong content type → 400 invalid_request.
//            GET /.well-known/oauth-protected-resource and /.well-known/oauth-authorization-server
//            serve metadata (resource, authorization_servers, token_endpoint, ...).
//            Extras: clientId, clientSecret, tokenUrl, resourceMetadataUrl,
//              tokenRequests [{grant, form, clientAuth: 'basic'|'form'|'none', clientId, status,
//                at (arrival), answeredAt}],
//              issuedTokens [{access_token, refresh_token, expires_in, grant, scope, audience,
//                issuedAt, expiresAt}],
//              setExpiresIn(seconds) (default 3600; applies to tokens issued afterwards;
//                0 makes tokens that are already expired), setTokenDelayMs(ms) (default 0; delays
//                every token answer), setRotateRefreshTokens(bool), revokeAll() (every issued
//                access and refresh token becomes invalid).
// toolsets   url http://127.0.0.1:P/mcp: stateless JSON (as `stateless`) with only
//            report_submit {topic}      → structuredContent {task_id: "rt-<16 hex>", status: "running"}
//            report_status {task_id}    → structuredContent {task_id, ...next script entry}
//                                         (one entry per status call, the last repeated); an
//                                         entry {isError: true, text} → an isError result with
//                                         that text. Unknown id → {task_id, status: "failed",
//                                         error_code: "task_not_found", error}. After cancel:
//                                         {task_id, status: "cancelled"}.
//            report_cancel {task_id}    → {task_id, status: "cancelled"} (idempotent; unknown ids
//                                         too)
//            echo                       as above.
//            Default script [{status: "running"}, {status: "completed", result: {report:
//            "<topic> done"}}]; setScript(array) applies to tasks submitted afterwards (entries
//            are used as given; the string "<topic>" inside them is replaced by the topic).
//            Extras: toolCalls {report_submit: [...], report_status: [...], report_cancel: [...],
//            echo: [...]}, each entry {arguments, headers, at}; tasks() → [{task_id, topic,
//            script, index, cancelled}].

import http from 'node:http';
import { randomBytes, randomUUID } from 'node:crypto';
import { deflateSync } from 'node:zlib';

import { z } from 'zod';
import { McpServer, ResourceTemplate } from '@modelcontextprotocol/sdk/server/mcp.js';
import { completable } from '@modelcontextprotocol/sdk/server/completable.js';
import { StreamableHTTPServerTransport } from '@modelcontextprotocol/sdk/server/streamableHttp.js';
import { InMemoryEventStore } from '@modelcontextprotocol/sdk/examples/shared/inMemoryEventStore.js';
import { SSEServerTransport } from '@modelcontextprotocol/sdk/server/sse.js';
import {
  CallToolRequestSchema,
  CreateMessageResultSchema,
  ElicitResultSchema,
  EmptyResultSchema,
  ErrorCode,
  ListRootsResultSchema,
  ListResourcesRequestSchema,
  ListToolsRequestSchema,
  McpError,
  SubscribeRequestSchema,
  UnsubscribeRequestSchema,
  isInitializeRequest,
} from '@modelcontextprotocol/sdk/types.js';

const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

// Gates of slow_progress: name -> { waiting (calls waiting now), release() }.
const gates = new Map();
function gateOf(name) {
  if (!gates.has(name)) {
    let release;
    const opened = new Promise((resolve) => (release = resolve));
    gates.set(name, { waiting: 0, opened, release });
  }
  return gates.get(name);
}
/** Lets every slow_progress call waiting at `name` (and later ones) finish. */
export function releaseGate(name) {
  gateOf(name).release();
}
/** Whether a slow_progress call is waiting at `name` now. */
export function gateWaiting(name) {
  return (gates.get(name)?.waiting ?? 0) > 0;
}

// ---------------------------------------------------------------------------
// Media for the content-type tools
// ---------------------------------------------------------------------------

const CRC_TABLE = Array.from({ length: 256 }, (_, n) => {
  let c = n;
  for (let k = 0; k < 8; k++) c = c & 1 ? 0xedb88320 ^ (c >>> 1) : c >>> 1;
  return c >>> 0;
});
function crc32(buf) {
  let c = 0xffffffff;
  for (const b of buf) c = CRC_TABLE[(c ^ b) & 0xff] ^ (c >>> 8);
  return (c ^ 0xffffffff) >>> 0;
}
function pngChunk(type, data) {
  const len = Buffer.alloc(4);
  len.writeUInt32BE(data.length);
  const body = Buffer.concat([Buffer.from(type, 'ascii'), data]);
  const crc = Buffer.alloc(4);
  crc.writeUInt32BE(crc32(body));
  return Buffer.concat([len, body, crc]);
}
/** A valid 1x1 red RGB PNG, base64. */
export const RED_PIXEL_PNG = (() => {
  const ihdr = Buffer.from([0, 0, 0, 1, 0, 0, 0, 1, 8, 2, 0, 0, 0]); // 1x1, 8-bit, RGB
  const raw = Buffer.from([0, 0xff, 0, 0]); // filter byte 0, then R G B
  return Buffer.concat([
    Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a]),
    pngChunk('IHDR', ihdr),
    pngChunk('IDAT', deflateSync(raw)),
    pngChunk('IEND', Buffer.alloc(0)),
  ]).toString('base64');
})();
/** A valid WAV (PCM, mono, 8 kHz, 8-bit, 8 samples of silence), base64. */
export const SILENT_WAV = (() => {
  const samples = Buffer.alloc(8, 0x80);
  const h = Buffer.alloc(44);
  h.write('RIFF', 0, 'ascii');
  h.writeUInt32LE(36 + samples.length, 4);
  h.write('WAVE', 8, 'ascii');
  h.write('fmt ', 12, 'ascii');
  h.writeUInt32LE(16, 16); // fmt chunk size
  h.writeUInt16LE(1, 20); // PCM
  h.writeUInt16LE(1, 22); // mono
  h.writeUInt32LE(8000, 24); // sample rate
  h.writeUInt32LE(8000, 28); // byte rate
  h.writeUInt16LE(1, 32); // block align
  h.writeUInt16LE(8, 34); // bits per sample
  h.write('data', 36, 'ascii');
  h.writeUInt32LE(samples.length, 40);
  return Buffer.concat([h, samples]).toString('base64');
})();

// ---------------------------------------------------------------------------
// Tools
// ---------------------------------------------------------------------------

/** Sends a notification related to the current request (so it goes on that request's stream). */
function notify(extra, method, params) {
  return extra.sendNotification({ method, params });
}
function progressToken(extra) {
  return extra._meta?.progressToken;
}
function requestHeaders(extra) {
  const headers = {};
  for (const [k, v] of Object.entries(extra.requestInfo?.headers ?? {})) headers[k.toLowerCase()] = v;
  return headers;
}

/** Tools whose call is answered with a JSON-RPC error before McpServer sees it. */
const PROTOCOL_FAILURES = {
  // Error (not McpError) with a code: McpError would put "MCP error -32602: " in front of the
  // message on the wire. The SDK client turns it back into McpError(-32602, 'bad thing').
  fail_protocol: () => Object.assign(new Error('bad thing'), { code: ErrorCode.InvalidParams }),
};

function registerEverythingTools(mcp) {
  mcp.registerTool(
    'test_simple_text',
    { description: 'Returns simple text content' },
    async () => ({ content: [{ type: 'text', text: 'This is a simple text response for testing.' }] }),
  );
  mcp.registerTool(
    'test_image_content',
    { description: 'Returns image content (a 1x1 red PNG)' },
    async () => ({ content: [{ type: 'image', data: RED_PIXEL_PNG, mimeType: 'image/png' }] }),
  );
  mcp.registerTool(
    'test_audio_content',
    { description: 'Returns audio content (a tiny WAV)' },
    async () => ({ content: [{ type: 'audio', data: SILENT_WAV, mimeType: 'audio/wav' }] }),
  );
  mcp.registerTool(
    'test_embedded_resource',
    { description: 'Returns an embedded resource' },
    async () => ({
      content: [
        {
          type: 'resource',
          resource: { uri: 'test://embedded-resource', mimeType: 'text/plain', text: 'This is an embedded resource content.' },
        },
      ],
    }),
  );
  mcp.registerTool(
    'test_multiple_content_types',
    { description: 'Returns text, image and resource content' },
    async () => ({
      content: [
        { type: 'text', text: 'Multiple content types test:' },
        { type: 'image', data: RED_PIXEL_PNG, mimeType: 'image/png' },
        {
          type: 'resource',
          resource: { uri: 'test://mixed-content-resource', mimeType: 'application/json', text: JSON.stringify({ test: 'data', value: 123 }) },
        },
      ],
    }),
  );
  mcp.registerTool(
    'test_tool_with_logging',
    { description: 'Sends three log messages while it runs' },
    async (extra) => {
      const log = (data) => notify(extra, 'notifications/message', { level: 'info', logger: 'test_tool_with_logging', data });
      await log('Tool execution started');
      await sleep(50);
      await log('Tool processing data');
      await sleep(50);
      await log('Tool execution completed');
      return { content: [{ type: 'text', text: 'Logging test completed' }] };
    },
  );
  mcp.registerTool(
    'test_tool_with_progress',
    { description: 'Reports progress 0, 50, 100 of 100' },
    async (extra) => {
      const token = progressToken(extra);
      for (const [i, progress] of [0, 50, 100].entries()) {
        if (i > 0) await sleep(50);
        if (token !== undefined) await notify(extra, 'notifications/progress', { progressToken: token, progress, total: 100 });
      }
      return { content: [{ type: 'text', text: 'Progress test completed' }] };
    },
  );
  mcp.registerTool(
    'test_error_handling',
    { description: 'Always fails (a tool result with isError)' },
    async () => ({ isError: true, content: [{ type: 'text', text: 'This tool intentionally returns an error for testing' }] }),
  );
  registerEcho(mcp);
  mcp.registerTool(
    'headers',
    { description: 'Returns the HTTP request headers this call arrived with' },
    async (extra) => {
      const headers = requestHeaders(extra);
      return { content: [{ type: 'text', text: JSON.stringify({ headers }) }], structuredContent: { headers } };
    },
  );
  mcp.registerTool(
    'slow_progress',
    {
      description: 'Sends a progress notification and a log message per step, then "done <steps>"',
      inputSchema: { steps: z.number().int().min(0), delayMs: z.number().min(0), gate: z.string().optional() },
    },
    async ({ steps, delayMs, gate }, extra) => {
      const token = progressToken(extra);
      for (let i = 1; i <= steps; i++) {
        await sleep(delayMs);
        if (extra.signal.aborted) throw new Error('cancelled');
        const message = `step ${i}/${steps}`;
        if (token !== undefined) await notify(extra, 'notifications/progress', { progressToken: token, progress: i, total: steps, message });
        await notify(extra, 'notifications/message', { level: 'info', logger: 'slow_progress', data: message });
      }
      if (gate !== undefined) {
        const g = gateOf(gate);
        g.waiting += 1;
        try {
          await Promise.race([g.opened, new Promise((resolve) => extra.signal.addEventListener('abort', resolve, { once: true }))]);
        } finally {
          g.waiting -= 1;
        }
        if (extra.signal.aborted) throw new Error('cancelled');
      }
      return { content: [{ type: 'text', text: `done ${steps}` }] };
    },
  );
  mcp.registerTool(
    'link',
    { description: 'Returns a resource link' },
    async () => ({
      content: [
        { type: 'text', text: 'See the linked resource.' },
        { type: 'resource_link', uri: 'test://linked-resource', name: 'linked-resource', title: 'Linked resource', mimeType: 'text/plain', description: 'A resource returned by link' },
      ],
    }),
  );
  mcp.registerTool(
    'fail_protocol',
    { description: 'Fails with a JSON-RPC error (-32602 "bad thing")' },
    async () => {
      throw PROTOCOL_FAILURES.fail_protocol(); // not reached: answered before McpServer's handler
    },
  );
}

const completeFrom = (values) => (value) => values.filter((v) => v.startsWith(value ?? ''));

function registerEverythingCatalog(mcp) {
  mcp.registerResource('static-text', 'test://static-text', { description: 'A static text resource', mimeType: 'text/plain' }, async (uri) => ({
    contents: [{ uri: uri.href, mimeType: 'text/plain', text: 'This is the content of the static text resource.' }],
  }));
  mcp.registerResource('static-binary', 'test://static-binary', { description: 'A static binary resource (PNG)', mimeType: 'image/png' }, async (uri) => ({
    contents: [{ uri: uri.href, mimeType: 'image/png', blob: RED_PIXEL_PNG }],
  }));
  mcp.registerResource('watched-resource', 'test://watched-resource', { description: 'A resource to subscribe to', mimeType: 'text/plain' }, async (uri) => ({
    contents: [{ uri: uri.href, mimeType: 'text/plain', text: 'Watched resource content' }],
  }));
  mcp.registerResource(
    'template',
    new ResourceTemplate('test://template/{id}/data', { list: undefined, complete: { id: completeFrom(['1', '2', '3', '123']) } }),
    { description: 'Data by id', mimeType: 'application/json' },
    async (uri, { id }) => ({
      contents: [{ uri: uri.href, mimeType: 'application/json', text: JSON.stringify({ id, templateTest: true, data: `Data for ID: ${id}` }) }],
    }),
  );
  // Subscriptions (as the reference server's): the session's URIs, kept on the McpServer;
  // updates go out with notifyResourceUpdated() of the upstream's api.
  mcp.server.registerCapabilities({ resources: { subscribe: true, listChanged: true } });
  mcp.subscribed = new Set();
  mcp.server.setRequestHandler(SubscribeRequestSchema, async (req) => {
    mcp.subscribed.add(req.params.uri);
    return {};
  });
  mcp.server.setRequestHandler(UnsubscribeRequestSchema, async (req) => {
    mcp.subscribed.delete(req.params.uri);
    return {};
  });
  mcp.registerPrompt('test_simple_prompt', { description: 'A prompt without arguments' }, async () => ({
    messages: [{ role: 'user', content: { type: 'text', text: 'This is a simple prompt for testing.' } }],
  }));
  mcp.registerPrompt(
    'test_prompt_with_arguments',
    {
      description: 'A prompt with two arguments',
      argsSchema: { arg1: completable(z.string().describe('First test argument'), completeFrom(['paris', 'park', 'party'])), arg2: z.string().describe('Second test argument') },
    },
    async ({ arg1, arg2 }) => ({ messages: [{ role: 'user', content: { type: 'text', text: `Prompt with arguments: arg1='${arg1}', arg2='${arg2}'` } }] }),
  );
  mcp.registerPrompt(
    'test_prompt_with_embedded_resource',
    { description: 'A prompt with an embedded resource', argsSchema: { resourceUri: z.string().describe('URI of the resource to embed') } },
    async ({ resourceUri }) => ({
      messages: [
        { role: 'user', content: { type: 'resource', resource: { uri: resourceUri, mimeType: 'text/plain', text: 'Embedded resource content for testing.' } } },
        { role: 'user', content: { type: 'text', text: 'Please process the embedded resource above.' } },
      ],
    }),
  );
  mcp.registerPrompt('test_prompt_with_image', { description: 'A prompt with an image' }, async () => ({
    messages: [
      { role: 'user', content: { type: 'image', data: RED_PIXEL_PNG, mimeType: 'image/png' } },
      { role: 'user', content: { type: 'text', text: 'Please analyze the image above.' } },
    ],
  }));
}

/**
 * The reference server's tools that ask the client for something while they run (the
 * tools-call-sampling, tools-call-elicitation, elicitation-sep1034-defaults and
 * elicitation-sep1330-enums scenarios), plus roots and URL elicitation for Flowgate's own tests.
 * Each request is sent related to the tool call (extra.sendRequest), so it travels on the
 * call's own stream, as the spec wants for a request made on behalf of a call.
 */
function registerAskingTools(mcp) {
  const declared = (cap) => mcp.server.getClientCapabilities()?.[cap] !== undefined;
  const ask = (extra, method, params, schema) => extra.sendRequest({ method, params }, schema);
  const refused = (text) => ({ isError: true, content: [{ type: 'text', text }] });
  const failed = (err) => refused(`The client refused: ${err?.message ?? err}`);
  mcp.registerTool(
    'test_sampling',
    { description: 'Asks the client to sample an LLM', inputSchema: { prompt: z.string() } },
    async ({ prompt }, extra) => {
      if (!declared('sampling')) return refused('The client does not support sampling');
      try {
        const r = await ask(extra, 'sampling/createMessage', { messages: [{ role: 'user', content: { type: 'text', text: prompt } }], maxTokens: 100 }, CreateMessageResultSchema);
        const text = r.content?.type === 'text' ? r.content.text : JSON.stringify(r.content);
        return { content: [{ type: 'text', text: `LLM response: ${text}` }] };
      } catch (err) {
        return failed(err);
      }
    },
  );
  const elicit = (name, description, inputSchema, params, prefix) =>
    mcp.registerTool(name, { description, inputSchema }, async (args, extra) => {
      if (!declared('elicitation')) return refused('The client does not support elicitation');
      try {
        const r = await ask(extra, 'elicitation/create', params(args), ElicitResultSchema);
        return { content: [{ type: 'text', text: `${prefix}: action=${r.action}, content=${JSON.stringify(r.content ?? {})}` }] };
      } catch (err) {
        return failed(err);
      }
    });
  elicit('test_elicitation', 'Asks the user for a username and an email', { message: z.string() }, ({ message }) => ({
    message,
    requestedSchema: {
      type: 'object',
      properties: { username: { type: 'string', description: "User's response" }, email: { type: 'string', description: "User's email address" } },
      required: ['username', 'email'],
    },
  }), 'User response');
  elicit('test_elicitation_sep1034_defaults', 'Asks with a default for every primitive type (SEP-1034)', {}, () => ({
    message: 'Please review and update the form fields with defaults',
    requestedSchema: {
      type: 'object',
      properties: {
        name: { type: 'string', description: 'User name', default: 'John Doe' },
        age: { type: 'integer', description: 'User age', default: 30 },
        score: { type: 'number', description: 'User score', default: 95.5 },
        status: { type: 'string', description: 'User status', enum: ['active', 'inactive', 'pending'], default: 'active' },
        verified: { type: 'boolean', description: 'Verification status', default: true },
      },
      required: [],
    },
  }), 'Elicitation completed');
  elicit('test_elicitation_sep1330_enums', 'Asks with every enum form (SEP-1330)', {}, () => ({
    message: 'Please select options from the enum fields',
    requestedSchema: {
      type: 'object',
      properties: {
        untitledSingle: { type: 'string', description: 'Select one option', enum: ['option1', 'option2', 'option3'] },
        titledSingle: {
          type: 'string',
          description: 'Select one option with titles',
          oneOf: [{ const: 'value1', title: 'First Option' }, { const: 'value2', title: 'Second Option' }, { const: 'value3', title: 'Third Option' }],
        },
        legacyEnum: { type: 'string', description: 'Select one option (legacy)', enum: ['opt1', 'opt2', 'opt3'], enumNames: ['Option One', 'Option Two', 'Option Three'] },
        untitledMulti: { type: 'array', description: 'Select multiple options', minItems: 1, maxItems: 3, items: { type: 'string', enum: ['option1', 'option2', 'option3'] } },
        titledMulti: {
          type: 'array',
          description: 'Select multiple options with titles',
          minItems: 1,
          maxItems: 3,
          items: { anyOf: [{ const: 'value1', title: 'First Choice' }, { const: 'value2', title: 'Second Choice' }, { const: 'value3', title: 'Third Choice' }] },
        },
      },
      required: [],
    },
  }), 'Elicitation completed');
  elicit('test_url_elicitation', 'Asks the user to visit a URL (URL-mode elicitation)', {}, () => ({
    mode: 'url',
    message: 'Please sign in',
    url: 'https://auth.example/sign-in',
    elicitationId: 'el-1',
  }), 'URL elicitation');
  mcp.registerTool('test_list_roots', { description: "Lists the client's roots" }, async (extra) => {
    try {
      const r = await ask(extra, 'roots/list', {}, ListRootsResultSchema);
      return { content: [{ type: 'text', text: `Roots: ${r.roots.map((root) => root.uri).join(', ')}` }] };
    } catch (err) {
      return failed(err);
    }
  });
  // A request no client capability covers: the gateway must refuse to relay it.
  mcp.registerTool('test_ask_ping', { description: 'Sends the client a ping request' }, async (extra) => {
    try {
      await extra.sendRequest({ method: 'ping' }, EmptyResultSchema);
      return { content: [{ type: 'text', text: 'The client answered ping' }] };
    } catch (err) {
      return failed(err);
    }
  });
}

// The `retry` hint of the resumable (everything) fixture's streams, in ms.
const RETRY_MS = 200;

function registerEverything(mcp) {
  registerEverythingTools(mcp);
  registerAskingTools(mcp);
  registerEverythingCatalog(mcp);
  // As the reference server's: the call's stream is closed before the result, which the client
  // gets by reconnecting with Last-Event-ID (SEP-1699; scenarios server-sse-polling, sse-retry).
  mcp.registerTool('test_reconnection', { description: 'Closes the SSE stream mid-call; the result comes after the client reconnects' }, async (extra) => {
    extra.closeSSEStream?.();
    await sleep(100);
    return { content: [{ type: 'text', text: 'Reconnection test completed successfully. If you received this, the client properly reconnected after stream closure.' }] };
  });
}

function registerOtherCatalog(mcp) {
  registerEcho(mcp);
  const text = (uri, t) => ({ contents: [{ uri: uri.href, mimeType: 'text/plain', text: t }] });
  mcp.registerResource('alpha', 'other://alpha', { description: 'Alpha', mimeType: 'text/plain' }, async (uri) => text(uri, 'alpha from catalog'));
  mcp.registerResource('beta', 'other://beta', { description: 'Beta', mimeType: 'text/plain' }, async (uri) => text(uri, 'beta from catalog'));
  mcp.registerResource('secret', 'other://secret', { description: 'Denied by the tests', mimeType: 'text/plain' }, async (uri) => text(uri, 'secret'));
  mcp.registerResource('static-text', 'test://static-text', { description: 'Collides with the everything catalog', mimeType: 'text/plain' }, async (uri) =>
    text(uri, 'static text from the catalog upstream'),
  );
  mcp.registerResource(
    'item',
    new ResourceTemplate('other://item/{id}', { list: undefined, complete: { id: completeFrom(['one', 'two', 'three']) } }),
    { description: 'Items by id', mimeType: 'text/plain' },
    async (uri, { id }) => text(uri, `item ${id} from catalog`),
  );
  mcp.registerPrompt(
    'hello',
    { description: 'Says hello', argsSchema: { who: completable(z.string().describe('Who to greet'), completeFrom(['world', 'walrus'])) } },
    async ({ who }) => ({ messages: [{ role: 'user', content: { type: 'text', text: `Hello, ${who}!` } }] }),
  );
  mcp.registerPrompt('hidden', { description: 'Denied by the tests' }, async () => ({
    messages: [{ role: 'user', content: { type: 'text', text: 'hidden' } }],
  }));
  // Pages of 2, so that Flowgate has to follow the upstream's own cursor.
  const listResources = sdkHandler(mcp, 'resources/list');
  mcp.server.setRequestHandler(ListResourcesRequestSchema, async (request, extra) => {
    const all = await listResources(request, extra);
    const offset = request.params?.cursor ? Number(Buffer.from(String(request.params.cursor), 'base64url').toString('utf8')) : 0;
    if (!Number.isSafeInteger(offset) || offset < 0 || offset >= all.resources.length) throw new McpError(ErrorCode.InvalidParams, 'Invalid cursor');
    const page = { ...all, resources: all.resources.slice(offset, offset + 2) };
    if (offset + 2 < all.resources.length) page.nextCursor = Buffer.from(String(offset + 2)).toString('base64url');
    return page;
  });
}

function registerEcho(mcp, onCall) {
  mcp.registerTool(
    'echo',
    {
      title: 'Echo',
      description: 'Echoes the text back',
      inputSchema: { text: z.string() },
      outputSchema: { text: z.string() },
      annotations: { readOnlyHint: true },
    },
    async ({ text }, extra) => {
      onCall?.('echo', { text }, extra);
      return { content: [{ type: 'text', text: `echo: ${text}` }], structuredContent: { text } };
    },
  );
}

/** McpServer's request handler for `method` (it keeps them in Protocol's private map). */
function sdkHandler(mcp, method) {
  const handler = mcp.server._requestHandlers?.get(method);
  if (typeof handler !== 'function') throw new Error(`SDK changed: no ${method} handler on McpServer.server`);
  return handler;
}

/**
 * A McpServer with the tools `register` adds, `logging` declared, the protocol-failure tools
 * answered with JSON-RPC errors and, with pageSize, a paginated tools/list.
 */
function buildServer(name, register, { pageSize } = {}) {
  const mcp = new McpServer({ name, version: '1.0.0' }, { capabilities: { logging: {} } });
  register(mcp);

  const callTool = sdkHandler(mcp, 'tools/call');
  mcp.server.setRequestHandler(CallToolRequestSchema, async (request, extra) => {
    const fail = PROTOCOL_FAILURES[request.params.name];
    if (fail && mcp._registeredTools?.[request.params.name]) throw fail();
    return callTool(request, extra);
  });

  if (pageSize) {
    const listTools = sdkHandler(mcp, 'tools/list');
    mcp.server.setRequestHandler(ListToolsRequestSchema, async (request, extra) => {
      const all = await listTools(request, extra);
      let offset = 0;
      const cursor = request.params?.cursor;
      if (cursor !== undefined) {
        const m = /^offset:(\d+)$/.exec(Buffer.from(String(cursor), 'base64url').toString('utf8'));
        offset = m ? Number(m[1]) : NaN;
        if (!Number.isSafeInteger(offset) || offset <= 0 || offset >= all.tools.length) {
          throw new McpError(ErrorCode.InvalidParams, `Invalid cursor: ${cursor}`);
        }
      }
      const page = { ...all, tools: all.tools.slice(offset, offset + pageSize) };
      const next = offset + pageSize;
      if (next < all.tools.length) page.nextCursor = Buffer.from(`offset:${next}`).toString('base64url');
      return page;
    });
  }
  return mcp;
}

// ---------------------------------------------------------------------------
// HTTP plumbing
// ---------------------------------------------------------------------------

function sendJson(res, status, body, headers = {}) {
  if (res.headersSent || res.destroyed) return;
  res.writeHead(status, { 'Content-Type': 'application/json', ...headers });
  res.end(JSON.stringify(body));
}
const jsonRpcError = (code, message) => ({ jsonrpc: '2.0', error: { code, message }, id: null });

function parseBody(req, text) {
  if (!text) return undefined;
  const type = String(req.headers['content-type'] ?? '').split(';')[0].trim().toLowerCase();
  if (type === 'application/x-www-form-urlencoded') return Object.fromEntries(new URLSearchParams(text));
  try {
    return JSON.parse(text);
  } catch {
    return undefined;
  }
}

/**
 * A recording node:http server on `host`:0. handle(req, res, entry) gets the recorded entry
 * ({method, path, headers, body, rawBody, at}); its failures become a 500 (or a dropped
 * connection once the answer has started).
 */
async function startRecordingServer(handle, { host = '127.0.0.1' } = {}) {
  const requests = [];
  const server = http.createServer(async (req, res) => {
    try {
      const chunks = [];
      for await (const chunk of req) chunks.push(chunk);
      const rawBody = Buffer.concat(chunks).toString('utf8');
      const entry = {
        method: req.method,
        path: req.url,
        headers: Object.fromEntries(Object.entries(req.headers).map(([k, v]) => [k.toLowerCase(), v])),
        body: parseBody(req, rawBody),
        rawBody,
        at: Date.now(),
      };
      requests.push(entry);
      await handle(req, res, entry);
    } catch (err) {
      if (!res.headersSent && !res.destroyed) sendJson(res, 500, { error: String(err?.stack ?? err) });
      else res.destroy();
    }
  });
  // A keep-alive as long as real servers keep (nginx: 75 s). A short one races the Worker's
  // pooled connections: a request sent as the server closes the idle connection fails with
  // "Network connection lost", a failure that only the tests made common. The task poller's
  // answer to it is tested on purpose (the HTTP tool fixture's {drop: true} status entry).
  server.keepAliveTimeout = 65_000;
  await new Promise((resolve, reject) => {
    server.once('error', reject);
    server.listen(0, host, () => {
      server.off('error', reject);
      resolve();
    });
  });
  const { port } = server.address();
  const origin = `http://${host}:${port}`;
  return {
    server,
    requests,
    origin,
    async close() {
      server.closeAllConnections();
      await new Promise((resolve) => server.close(() => resolve()));
    },
  };
}

const pathOf = (req) => new URL(req.url, 'http://x').pathname;

// ---------------------------------------------------------------------------
// Streamable HTTP upstreams
// ---------------------------------------------------------------------------

async function startStateful(register, { pageSize, resumable } = {}) {
  const sessions = new Map(); // session id -> { transport, mcp }
  const closedSessions = [];
  let deleteRefused = false;
  const addedTools = []; // [name, text] of addTool, registered in every session
  const registerAdded = (mcp, [name, text]) => mcp.registerTool(name, { description: `Added later: answers "${text}"` }, async () => ({ content: [{ type: 'text', text }] }));

  const srv = await startRecordingServer(async (req, res, entry) => {
    if (pathOf(req) !== '/mcp') return sendJson(res, 404, { error: 'not found' });
    const sid = req.headers['mcp-session-id'];
    if (sid !== undefined) {
      const session = sessions.get(sid);
      if (!session) return sendJson(res, 404, jsonRpcError(-32001, 'Session not found'));
      if (req.method === 'DELETE' && deleteRefused) return sendJson(res, 405, jsonRpcError(-32000, 'Method not allowed.'), { Allow: 'GET, POST' });
      if (req.method === 'GET' && new URL(req.url, 'http://x').searchParams.get('standalone') === 'no') {
        return sendJson(res, 405, jsonRpcError(-32000, 'Method not allowed.'), { Allow: 'POST, DELETE' });
      }
      return session.transport.handleRequest(req, res, entry.body);
    }
    if (req.method !== 'POST') return sendJson(res, 400, jsonRpcError(-32000, 'Bad Request: Mcp-Session-Id header is required'));
    if (entry.body === undefined && entry.rawBody) return sendJson(res, 400, jsonRpcError(-32700, 'Parse error: Invalid JSON'));
    const messages = Array.isArray(entry.body) ? entry.body : [entry.body];
    if (!messages.some((m) => isInitializeRequest(m))) {
      return sendJson(res, 400, jsonRpcError(-32000, 'Bad Request: No valid session ID provided'));
    }
    const mcp = buildServer('flowgate-test-stateful', register, { pageSize });
    for (const added of addedTools) registerAdded(mcp, added);
    const transport = new StreamableHTTPServerTransport({
      sessionIdGenerator: () => randomUUID(),
      // Resumable streams (SEP-1699): a priming event with an id and `retry`, and events kept
      // for a GET with Last-Event-ID.
      ...(resumable && { eventStore: new InMemoryEventStore(), retryInterval: RETRY_MS }),
      onsessioninitialized: (id) => {
        sessions.set(id, { transport, mcp });
      },
      onsessionclosed: (id) => {
        closedSessions.push(id);
      },
    });
    transport.onclose = () => {
      if (transport.sessionId && sessions.get(transport.sessionId)?.transport === transport) sessions.delete(transport.sessionId);
    };
    await mcp.connect(transport);
    await transport.handleRequest(req, res, entry.body);
  });

  return {
    srv,
    api: {
      url: `${srv.origin}/mcp`,
      requests: srv.requests,
      closedSessions,
      sessions: () => [...sessions.keys()],
      refuseDelete(on) {
        deleteRefused = Boolean(on);
      },
      async expireSessions() {
        const ids = [...sessions.keys()];
        const all = [...sessions.values()];
        sessions.clear();
        await Promise.allSettled(all.map(({ mcp }) => mcp.close()));
        return ids;
      },
      async notifyToolListChanged() {
        await Promise.allSettled([...sessions.values()].map(({ mcp }) => mcp.server.sendToolListChanged()));
      },
      /** Registers tool `name` (answering `text`) in every session, live and to come: the SDK
       * sends each live session notifications/tools/list_changed on its standalone stream. */
      addTool(name, text) {
        addedTools.push([name, text]);
        for (const { mcp } of sessions.values()) registerAdded(mcp, [name, text]);
      },
      /** [session id, URI] of every subscription now. */
      subscriptions: () => [...sessions.entries()].flatMap(([id, { mcp }]) => [...(mcp.subscribed ?? [])].map((uri) => [id, uri])),
      /** notifications/resources/updated for `uri` to every session subscribed to it. */
      async notifyResourceUpdated(uri) {
        const subscribed = [...sessions.values()].filter(({ mcp }) => mcp.subscribed?.has(uri));
        await Promise.allSettled(subscribed.map(({ mcp }) => mcp.server.sendResourceUpdated({ uri })));
        return subscribed.length;
      },
    },
    async close() {
      const all = [...sessions.values()];
      sessions.clear();
      await Promise.allSettled(all.map(({ mcp }) => mcp.close()));
      await srv.close();
    },
  };
}

/**
 * Stateless Streamable HTTP (JSON answers) on /mcp. authorize(req, res) → false when it has
 * answered the request itself. Paths other than /mcp go to other(req, res, entry) or 404.
 */
async function startStateless(name, register, { authorize, other } = {}) {
  const srv = await startRecordingServer(async (req, res, entry) => {
    if (pathOf(req) !== '/mcp') {
      if (other && (await other(req, res, entry)) !== false) return;
      return sendJson(res, 404, { error: 'not found' });
    }
    if (authorize && !authorize(req, res)) return;
    if (req.method !== 'POST') return sendJson(res, 405, jsonRpcError(-32000, 'Method not allowed.'), { Allow: 'POST' });
    if (entry.body === undefined) return sendJson(res, 400, jsonRpcError(-32700, 'Parse error: Invalid JSON'));
    const mcp = buildServer(name, register);
    const transport = new StreamableHTTPServerTransport({ sessionIdGenerator: undefined, enableJsonResponse: true });
    res.on('close', () => {
      mcp.close().catch(() => {});
    });
    await mcp.connect(transport);
    await transport.handleRequest(req, res, entry.body);
  });
  return { srv, api: { url: `${srv.origin}/mcp`, requests: srv.requests }, close: () => srv.close() };
}

// ---------------------------------------------------------------------------
// Legacy HTTP+SSE upstreams
// ---------------------------------------------------------------------------

/** Serves the legacy transport: openStream(req, res) on GET, postMessage(req, res, entry) for /messages. */
function legacySse(register) {
  const sessions = new Map(); // session id -> { transport, mcp }
  return {
    sessions,
    async openStream(req, res) {
      const mcp = buildServer('flowgate-test-legacy-sse', register);
      const transport = new SSEServerTransport('/messages', res);
      sessions.set(transport.sessionId, { transport, mcp });
      transport.onclose = () => {
        sessions.delete(transport.sessionId);
      };
      await mcp.connect(transport); // writes the headers and the endpoint event
    },
    async postMessage(req, res, entry) {
      const id = new URL(req.url, 'http://x').searchParams.get('sessionId');
      const session = id && sessions.get(id);
      if (!session) return sendJson(res, 404, { error: 'unknown session' });
      if (entry.body === undefined) {
        res.writeHead(400).end('Invalid message');
        return;
      }
      await session.transport.handlePostMessage(req, res, entry.body);
    },
    async closeAll() {
      const all = [...sessions.values()];
      sessions.clear();
      await Promise.allSettled(all.map(({ mcp }) => mcp.close()));
    },
  };
}

async function startLegacySse(register) {
  // The "evil" origin: where the evil stream's endpoint event points. Nothing MCP runs there.
  let evil;
  try {
    evil = await startRecordingServer(async (req, res) => sendJson(res, 404, { error: 'not found' }), { host: '127.0.0.2' });
  } catch {
    evil = await startRecordingServer(async (req, res) => sendJson(res, 404, { error: 'not found' }));
  }
  const legacy = legacySse(register);
  const srv = await startRecordingServer(async (req, res, entry) => {
    const p = pathOf(req);
    if (p === '/evil/sse' && req.method === 'GET') {
      res.writeHead(200, { 'Content-Type': 'text/event-stream', 'Cache-Control': 'no-cache, no-transform', Connection: 'keep-alive' });
      res.write(`event: endpoint\ndata: ${evil.origin}/messages?sessionId=${randomUUID()}\n\n`);
      return;
    }
    if (p === '/sse' || p === '/mcp') {
      if (req.method === 'GET') return legacy.openStream(req, res);
      return sendJson(res, 405, { error: 'method not allowed' }, { Allow: 'GET' });
    }
    if (p === '/messages' && req.method === 'POST') return legacy.postMessage(req, res, entry);
    return sendJson(res, 404, { error: 'not found' });
  });
  return {
    api: {
      url: `${srv.origin}/sse`,
      baseUrl: `${srv.origin}/mcp`,
      evilEndpointUrl: `${srv.origin}/evil/sse`,
      evilOrigin: evil.origin,
      evilRequests: evil.requests,
      requests: srv.requests,
      sessions: () => [...legacy.sessions.keys()],
    },
    async close() {
      await legacy.closeAll();
      await Promise.allSettled([srv.close(), evil.close()]);
    },
  };
}

async function startHangingPost(register) {
  const legacy = legacySse(register);
  const held = new Set();
  const srv = await startRecordingServer(async (req, res, entry) => {
    const p = pathOf(req);
    if (p === '/mcp' && req.method === 'POST') {
      held.add(res);
      res.on('close', () => held.delete(res));
      return; // never answered
    }
    if ((p === '/mcp' || p === '/sse') && req.method === 'GET') return legacy.openStream(req, res);
    if (p === '/messages' && req.method === 'POST') return legacy.postMessage(req, res, entry);
    return sendJson(res, 404, { error: 'not found' });
  });
  return {
    api: { url: `${srv.origin}/mcp`, sseUrl: `${srv.origin}/sse`, requests: srv.requests, heldRequests: () => held.size },
    async close() {
      await legacy.closeAll();
      for (const res of held) res.destroy();
      await srv.close();
    },
  };
}

async function startHangingGet() {
  const srv = await startRecordingServer(async (req, res) => {
    if (req.method === 'GET') {
      if (pathOf(req) === '/headers-only/sse') {
        res.writeHead(200, { 'Content-Type': 'text/event-stream', 'Cache-Control': 'no-cache' });
        res.flushHeaders();
      }
      return; // nothing (more) is ever sent
    }
    return sendJson(res, 405, { error: 'method not allowed' }, { Allow: 'GET' });
  });
  return {
    api: {
      url: `${srv.origin}/sse`,
      baseUrl: `${srv.origin}/mcp`,
      headersOnlyUrl: `${srv.origin}/headers-only/sse`,
      requests: srv.requests,
    },
    close: () => srv.close(),
  };
}

// ---------------------------------------------------------------------------
// Auth upstreams
// ---------------------------------------------------------------------------

async function startUnauthorized() {
  let wwwAuthenticate;
  const srv = await startRecordingServer(async (req, res) => {
    sendJson(res, 401, { error: 'invalid_token', error_description: 'authentication required' }, { 'WWW-Authenticate': wwwAuthenticate });
  });
  const resourceMetadataUrl = `${srv.origin}/.well-known/oauth-protected-resource`;
  wwwAuthenticate = `Bearer resource_metadata="${resourceMetadataUrl}", scope="tools.read"`;
  return {
    api: { url: `${srv.origin}/mcp`, requests: srv.requests, wwwAuthenticate, resourceMetadataUrl },
    close: () => srv.close(),
  };
}

async function startOauth(register) {
  const clientId = 'flowgate-test-client';
  const clientSecret = randomBytes(16).toString('hex');
  const tokenRequests = [];
  const issuedTokens = [];
  const accessTokens = new Map(); // token -> issued entry
  const refreshTokens = new Map(); // token -> issued entry
  let expiresIn = 3600;
  let tokenDelayMs = 0;
  let rotate = true;
  let origin;
  const prm = () => `${origin}/.well-known/oauth-protected-resource`;

  const tokenError = (res, status, error, description, headers) =>
    sendJson(res, status, { error, error_description: description }, { 'Cache-Control': 'no-store', ...headers });

  async function token(req, res, entry) {
    const record = { grant: undefined, form: {}, clientAuth: 'none', clientId: undefined, status: undefined, at: entry.at };
    tokenRequests.push(record);
    const answer = async (status, body, headers) => {
      if (tokenDelayMs > 0) await sleep(tokenDelayMs);
      record.status = status;
      record.answeredAt = Date.now();
      sendJson(res, status, body, { 'Cache-Control': 'no-store', Pragma: 'no-cache', ...headers });
    };
    if (req.method !== 'POST') return answer(405, { error: 'invalid_request', error_description: 'POST only' }, { Allow: 'POST' });
    const type = String(req.headers['content-type'] ?? '').split(';')[0].trim().toLowerCase();
    if (type !== 'application/x-www-form-urlencoded') {
      return answer(400, { error: 'invalid_request', error_description: 'Content-Type must be application/x-www-form-urlencoded' });
    }
    const form = Object.fromEntries(new URLSearchParams(entry.rawBody));
    record.form = form;
    record.grant = form.grant_type;

    let id = form.client_id;
    let secret = form.client_secret;
    const basic = /^Basic\s+(.+)$/i.exec(String(req.headers.authorization ?? ''));
    if (basic) {
      const decoded = Buffer.from(basic[1], 'base64').toString('utf8');
      const colon = decoded.indexOf(':');
      const dec = (s) => decodeURIComponent(s.replace(/\+/g, ' '));
      try {
        id = dec(colon < 0 ? decoded : decoded.slice(0, colon));
        secret = colon < 0 ? '' : dec(decoded.slice(colon + 1));
      } catch {
        id = secret = undefined;
      }
      record.clientAuth = 'basic';
    } else if (form.client_secret !== undefined) {
      record.clientAuth = 'form';
    }
    record.clientId = id;
    const clientOk = id === clientId && secret === clientSecret;
    const invalidClient = () =>
      answer(401, { error: 'invalid_client', error_description: 'client authentication failed' }, { 'WWW-Authenticate': 'Basic realm="flowgate-test"' });

    let scope = form.scope;
    let audience = form.audience;
    if (!form.grant_type) return answer(400, { error: 'invalid_request', error_description: 'grant_type is required' });
    if (form.grant_type === 'client_credentials') {
      if (!clientOk) return invalidClient();
    } else if (form.grant_type === 'refresh_token') {
      if (record.clientAuth !== 'none' && !clientOk) return invalidClient();
      if (record.clientAuth === 'none' && id !== undefined && id !== clientId) return invalidClient();
      const prev = refreshTokens.get(form.refresh_token);
      if (!form.refresh_token || !prev) return answer(400, { error: 'invalid_grant', error_description: 'refresh token is invalid, used or revoked' });
      if (rotate) refreshTokens.delete(form.refresh_token);
      scope = scope ?? prev.scope;
      audience = audience ?? prev.audience;
    } else {
      return answer(400, { error: 'unsupported_grant_type', error_description: `unsupported grant_type ${form.grant_type}` });
    }
    const now = Date.now();
    const issued = {
      access_token: `at-${randomBytes(16).toString('hex')}`,
      refresh_token: `rt-${randomBytes(16).toString('hex')}`,
      expires_in: expiresIn,
      grant: form.grant_type,
      scope,
      audience,
      issuedAt: now,
      expiresAt: now + expiresIn * 1000,
    };
    issuedTokens.push(issued);
    accessTokens.set(issued.access_token, issued);
    refreshTokens.set(issued.refresh_token, issued);
    const body = { access_token: issued.access_token, token_type: 'Bearer', expires_in: expiresIn, refresh_token: issued.refresh_token };
    if (scope !== undefined) body.scope = scope;
    return answer(200, body);
  }

  function authorize(req, res) {
    const m = /^Bearer\s+(\S+)\s*$/i.exec(String(req.headers.authorization ?? ''));
    const issued = m && accessTokens.get(m[1]);
    if (issued && Date.now() < issued.expiresAt) return true;
    const challenge = m ? `Bearer error="invalid_token", resource_metadata="${prm()}"` : `Bearer resource_metadata="${prm()}"`;
    sendJson(
      res,
      401,
      { error: 'invalid_token', error_description: m ? (issued ? 'access token expired' : 'unknown access token') : 'authentication required' },
      { 'WWW-Authenticate': challenge },
    );
    return false;
  }

  async function other(req, res, entry) {
    const p = pathOf(req);
    if (p === '/token') return token(req, res, entry);
    if (p === '/.well-known/oauth-protected-resource' && req.method === 'GET') {
      return sendJson(res, 200, { resource: `${origin}/mcp`, authorization_servers: [origin], bearer_methods_supported: ['header'], scopes_supported: ['tools.read'] });
    }
    if (p === '/.well-known/oauth-authorization-server' && req.method === 'GET') {
      return sendJson(res, 200, {
        issuer: origin,
        token_endpoint: `${origin}/token`,
        grant_types_supported: ['client_credentials', 'refresh_token'],
        token_endpoint_auth_methods_supported: ['client_secret_basic', 'client_secret_post'],
        response_types_supported: [],
      });
    }
    return false;
  }

  const up = await startStateless('flowgate-test-oauth', register, { authorize, other });
  origin = up.srv.origin;
  return {
    api: {
      ...up.api,
      tokenUrl: `${origin}/token`,
      resourceMetadataUrl: prm(),
      clientId,
      clientSecret,
      tokenRequests,
      issuedTokens,
      setExpiresIn(seconds) {
        expiresIn = seconds;
      },
      setTokenDelayMs(ms) {
        tokenDelayMs = ms;
      },
      setRotateRefreshTokens(on) {
        rotate = !!on;
      },
      revokeAll() {
        accessTokens.clear();
        refreshTokens.clear();
      },
    },
    close: up.close,
  };
}

// ---------------------------------------------------------------------------
// Async task toolset (seed 002 "ordinary" tools)
// ---------------------------------------------------------------------------

async function startToolsets() {
  const defaultScript = () => [{ status: 'running' }, { status: 'completed', result: { report: '<topic> done' } }];
  let script = null; // null → default
  const tasks = new Map(); // task_id -> { task_id, topic, script, index, cancelled }
  const toolCalls = { report_submit: [], report_status: [], report_cancel: [], echo: [] };
  const recordCall = (name, args, extra) => toolCalls[name].push({ arguments: args, headers: requestHeaders(extra), at: Date.now() });
  const fill = (value, topic) => JSON.parse(JSON.stringify(value).replaceAll('<topic>', JSON.stringify(String(topic)).slice(1, -1)));
  const structured = (obj) => ({ content: [{ type: 'text', text: JSON.stringify(obj) }], structuredContent: obj });

  const register = (mcp) => {
    mcp.registerTool(
      'report_submit',
      { description: 'Starts writing a report; returns a task id', inputSchema: { topic: z.string() } },
      async ({ topic }, extra) => {
        recordCall('report_submit', { topic }, extra);
        const task_id = `rt-${randomBytes(8).toString('hex')}`;
        tasks.set(task_id, { task_id, topic, script: fill(script ?? defaultScript(), topic), index: 0, cancelled: false });
        return structured({ task_id, status: 'running' });
      },
    );
    mcp.registerTool(
      'report_status',
      { description: 'Reports the status of a report task', inputSchema: { task_id: z.string() } },
      async ({ task_id }, extra) => {
        recordCall('report_status', { task_id }, extra);
        const task = tasks.get(task_id);
        if (!task) return structured({ task_id, status: 'failed', error_code: 'task_not_found', error: `no task ${task_id}` });
        if (task.cancelled) return structured({ task_id, status: 'cancelled' });
        const entry = task.script[Math.min(task.index, task.script.length - 1)];
        task.index++;
        if (entry?.isError) return { isError: true, content: [{ type: 'text', text: String(entry.text ?? 'status failed') }] };
        return structured({ task_id, ...entry });
      },
    );
    mcp.registerTool(
      'report_cancel',
      { description: 'Cancels a report task', inputSchema: { task_id: z.string() } },
      async ({ task_id }, extra) => {
        recordCall('report_cancel', { task_id }, extra);
        const task = tasks.get(task_id);
        if (task) task.cancelled = true;
        return structured({ task_id, status: 'cancelled' });
      },
    );
    registerEcho(mcp, recordCall);
  };

  const up = await startStateless('flowgate-test-toolsets', register);
  return {
    api: {
      ...up.api,
      toolCalls,
      setScript(entries) {
        script = entries == null ? null : JSON.parse(JSON.stringify(entries));
      },
      tasks: () => [...tasks.values()].map((t) => ({ ...t })),
    },
    close: up.close,
  };
}

// ---------------------------------------------------------------------------

export async function startUpstreams() {
  const started = [];
  const start = async (p) => {
    const u = await p;
    started.push(u);
    return u.api;
  };
  try {
    const [stateful, stateless, legacySseUp, hangingPost, hangingGet, unauthorized, oauth, toolsets, everything, catalog] = await Promise.all([
      start(startStateful(registerEverythingTools, { pageSize: 3 })),
      start(startStateless('flowgate-test-stateless', registerEverythingTools)),
      start(startLegacySse(registerEverythingTools)),
      start(startHangingPost(registerEverythingTools)),
      start(startHangingGet()),
      start(startUnauthorized()),
      start(startOauth(registerEverythingTools)),
      start(startToolsets()),
      start(startStateful(registerEverything, { resumable: true })),
      start(startStateless('flowgate-test-catalog', registerOtherCatalog)),
    ]);
    return {
      stateful,
      stateless,
      legacySse: legacySseUp,
      hangingPost,
      hangingGet,
      unauthorized,
      oauth,
      toolsets,
      everything,
      catalog,
      releaseGate,
      gateWaiting,
      async stop() {
        for (const g of gates.values()) g.release();
        await Promise.allSettled(started.map((u) => u.close()));
      },
    };
  } catch (err) {
    await Promise.allSettled(started.map((u) => u.close()));
    throw err;
  }
}

/** The names of the shared tool set, in tools/list order. */
export const EVERYTHING_TOOLS = [
  'test_simple_text',
  'test_image_content',
  'test_audio_content',
  'test_embedded_resource',
  'test_multiple_content_types',
  'test_tool_with_logging',
  'test_tool_with_progress',
  'test_error_handling',
  'echo',
  'headers',
  'slow_progress',
  'link',
  'fail_protocol',
];

/** The everything server (asking tools included) over the legacy HTTP+SSE transport only: {api, close}. */
export function startEverythingLegacySse() {
  return startLegacySse(registerEverything);
}
