// The benchmarks' floor: the least CPU a Worker can spend on the bench's requests. No MCP
// library, no checks, no validation: it reads the request body, parses it, and for a tools/call
// makes the same backend call as Flowgate and the peer (POST {BACKEND_BASE_URL}/workflows/run,
// blocking) and answers its outputs; a tools/list gets a fixed answer of the bench tool. Its
// CPU per request minus its /healthz is the part of an MCP request's work that is the runtime's
// (reading the body, the outbound fetch, building the Response), which Flowgate and the peer pay
// too: bench/run.mjs reports it beside their MCP work, as the lowest ratio any Worker could read.
const TOOL = {
  name: 'Bench_Flow',
  description: 'Summarises text',
  inputSchema: {
    type: 'object',
    properties: { text: { type: 'string', maxLength: 1000, description: 'The text to summarise' } },
    required: ['text'],
  },
  outputSchema: { type: 'object', properties: { echo: { type: 'object' } } },
};
const LIST = JSON.stringify({ tools: [TOOL] });
const JSON_HEADERS = { 'content-type': 'application/json' };

export default {
  async fetch(request, env) {
    if (request.method === 'GET') return Response.json({ status: 'ok' });
    const message = await request.json();
    const head = `{"jsonrpc":"2.0","id":${JSON.stringify(message.id)},"result":`;
    if (message.method !== 'tools/call') return new Response(`${head}${LIST}}`, { headers: JSON_HEADERS });
    const res = await fetch(`${env.BACKEND_BASE_URL}/workflows/run`, {
      method: 'POST',
      headers: { 'content-type': 'application/json', authorization: `Bearer ${env.BACKEND_API_KEY}` },
      body: JSON.stringify({ inputs: message.params.arguments, response_mode: 'blocking', user: 'bench-floor' }),
    });
    const outputs = (await res.json()).data.outputs;
    const result = { content: [{ type: 'text', text: JSON.stringify(outputs) }], structuredContent: outputs };
    return new Response(`${head}${JSON.stringify(result)}}`, { headers: JSON_HEADERS });
  },
};
