// Files in and out of a Dify app over MCP, with the official SDK clients against the real
// Worker and the fake Dify: the TypeScript SDK and the Python SDK (tests/python/client.py) send a
// file by URL and by base64 and get the app's file back as a resource_link; a URL that points
// into a private network is refused by Flowgate's guard before the fake Dify sees any request.
// This deployment allows exactly one private host, 127.0.0.1 (where the fake Dify listens), as
// hardening-outbound.test.mjs does.
import { after, before, describe, test } from 'node:test';
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';

import { Client } from '@modelcontextprotocol/sdk/client/index.js';
import { StreamableHTTPClientTransport } from '@modelcontextprotocol/sdk/client/streamableHttp.js';

import { repoRoot, startFlowgate, startProcessGroup } from '../support/harness.mjs';
import { startDifyFixture } from '../support/dify-fixture.mjs';
import { publish, registerApp } from '../support/flowgate-setup.mjs';

const PYTHON = path.join(repoRoot, '.venv', 'bin', 'python');
const CLIENT = path.join(repoRoot, 'tests', 'python', 'client.py');

const FORM = [
  { file: { variable: 'doc', label: 'Document', required: true, allowed_file_types: ['document'] } },
  { 'file-list': { variable: 'pics', label: 'Pictures', max_length: 2, allowed_file_types: ['image'] } },
];
const CHART = Buffer.from([0x89, 0x50, 0x4e, 0x47, 0x0d, 0x0a, 0x1a, 0x0a, 0, 1, 2, 3]);

let fg;
let dify;
let apiKey;
let url;
let chart; // the file object the workflow returns

before(async () => {
  [fg, dify] = await Promise.all([startFlowgate({ vars: { ALLOW_PRIVATE_BACKENDS: '127.0.0.1' } }), startDifyFixture()]);
  chart = dify.fileOutput({ name: 'chart.png', mimeType: 'image/png', data: CHART });
  apiKey = dify.addApp({ mode: 'workflow', name: 'Reader', user_input_form: FORM, outputs: { summary: 'read', chart } });
  const r = await fg.console('/apps', {
    method: 'POST',
    body: {
      name: 'Reader', description: 'Reads documents', mode: 'workflow', user_input_form: FORM,
      backend: { base_url: dify.baseUrl, api_key: apiKey },
      outputs: [{ variable: 'summary', type: 'string' }, { variable: 'chart', type: 'file' }],
    },
  });
  assert.equal(r.status, 201, r.text);
  const app = r.json;
  ({ url } = await publish(fg, app.id, { description: 'Reads documents and draws a chart' }));
});

after(async () => {
  await Promise.allSettled([fg?.stop(), dify?.stop()]);
});

/** The run requests the fake Dify got for the app, and its uploads. */
const runs = () => dify.requestsFor(apiKey).filter((r) => r.path === '/v1/workflows/run');
const uploads = () => [...dify.uploads.values()].filter((u) => u.apiKey === apiKey);

async function tsClient() {
  const client = new Client({ name: 'files-test', version: '1.0.0' });
  await client.connect(new StreamableHTTPClientTransport(new URL(url)));
  return client;
}

function expectChartLink(content) {
  const link = content.find((c) => c.type === 'resource_link');
  assert.ok(link, JSON.stringify(content));
  assert.equal(link.uri, chart.url);
  assert.equal(link.name, 'chart.png');
  assert.equal(link.mimeType, 'image/png');
  assert.equal(link.size, CHART.length);
  return link;
}

describe('the TypeScript SDK', () => {
  let client;
  before(async () => {
    client = await tsClient();
  });
  after(async () => {
    await client?.close();
  });

  test('sees file inputs in the schema, in words a model can follow', async () => {
    const { tools } = await client.listTools();
    const schema = tools[0].inputSchema;
    assert.deepEqual(schema.required, ['doc']);
    assert.match(schema.properties.doc.description, /A file: an https URL string, \{"url": "https:\/\/\.\.\."\}, \{"data": "<base64>"/);
    assert.equal(schema.properties.pics.type, 'array');
    assert.equal(tools[0].outputSchema.properties.chart.type, 'object');
  });

  test('sends a file by URL: Dify gets remote_url, the client gets the chart as a resource_link', async () => {
    const before = runs().length;
    const r = await client.callTool({ name: 'Reader', arguments: { doc: 'https://files.example.com/q3/report.pdf' } });
    assert.equal(r.isError, false, JSON.stringify(r));
    const link = expectChartLink(r.content);
    assert.equal(r.structuredContent.chart.filename, 'chart.png');
    assert.equal(r.structuredContent.summary, 'read');
    const sent = runs().slice(before);
    assert.equal(sent.length, 1);
    assert.deepEqual(sent[0].body.inputs.doc, { type: 'document', transfer_method: 'remote_url', url: 'https://files.example.com/q3/report.pdf' });
    // The link is where the file is.
    const got = await fetch(link.uri);
    assert.deepEqual(Buffer.from(await got.arrayBuffer()), CHART);
  });

  test('sends a file as base64: uploaded as the call\'s end user, then sent as local_file', async () => {
    const before = uploads().length;
    const text = 'Quarterly report: revenue up.';
    const r = await client.callTool({
      name: 'Reader',
      arguments: {
        doc: { data: Buffer.from(text).toString('base64'), name: 'report.txt', mime_type: 'text/plain' },
        pics: [{ type: 'resource', resource: { uri: 'file:///scan.png', mimeType: 'image/png', blob: CHART.toString('base64') } }],
      },
    });
    assert.equal(r.isError, false, JSON.stringify(r));
    expectChartLink(r.content);
    const ups = uploads().slice(before);
    assert.equal(ups.length, 2);
    assert.equal(ups[0].data.toString(), text);
    assert.deepEqual(ups[1].data, CHART, 'binary bytes arrive as sent');
    const run = runs().at(-1).body;
    assert.equal(ups[0].user, run.user, 'the upload is the call\'s end user');
    assert.deepEqual(run.inputs.doc, { type: 'document', transfer_method: 'local_file', upload_file_id: ups[0].id });
    assert.deepEqual(run.inputs.pics, [{ type: 'image', transfer_method: 'local_file', upload_file_id: ups[1].id }]);
  });

  test('a URL into a private network is refused before the fake Dify sees any request', async () => {
    const seen = dify.requestsFor(apiKey).length;
    for (const bad of ['http://10.0.0.1/x.pdf', 'http://169.254.169.254/latest/meta-data/a.txt', 'http://localhost:5001/a.pdf', 'http://[::1]/a.pdf']) {
      const r = await client.callTool({ name: 'Reader', arguments: { doc: bad, pics: [{ data: 'aGk=', name: 'a.png' }] } });
      assert.equal(r.isError, true, bad);
      assert.match(r.content[0].text, /^argument 'doc' was refused: its host .*, and files are only fetched from public addresses$/, bad);
    }
    assert.equal(dify.requestsFor(apiKey).length, seen, 'no upload, no run');
  });

  test('the form\'s rules say what is allowed, before anything is sent', async () => {
    const seen = dify.requestsFor(apiKey).length;
    const r = await client.callTool({ name: 'Reader', arguments: { doc: 'https://files.example.com/cat.png' } });
    assert.equal(r.isError, true);
    assert.match(r.content[0].text, /argument 'doc': a \.png file \(image\) is not accepted here \(accepted: document\)/);
    assert.equal(dify.requestsFor(apiKey).length, seen);
  });
});

describe('the Python SDK', () => {
  async function python(args) {
    assert.ok(fs.existsSync(PYTHON), `${PYTHON} is missing: run scripts/setup.sh --test-tools`);
    const p = startProcessGroup(PYTHON, [CLIENT, url, '--timeout', '60', '--call', 'Reader', '--arguments', JSON.stringify(args)], { capture: true, label: 'python-sdk' });
    const timer = setTimeout(() => p.stop({ graceMs: 1000 }), 90_000);
    await p.exited;
    clearTimeout(timer);
    await p.stop({ graceMs: 500 });
    const { stdout, stderr } = p.output();
    const out = JSON.parse(stdout.trim().split('\n').at(-1));
    assert.equal(out.ok, true, `${stdout}\n${stderr}`);
    return out.call;
  }

  test('sends a file by URL and gets the chart as a resource_link', async () => {
    const before = runs().length;
    const call = await python({ doc: { url: 'https://files.example.com/minutes.docx' } });
    assert.equal(call.isError, false, JSON.stringify(call));
    expectChartLink(call.content);
    assert.deepEqual(runs().slice(before)[0].body.inputs.doc, {
      type: 'document', transfer_method: 'remote_url', url: 'https://files.example.com/minutes.docx',
    });
  });

  test('sends a file as base64 and gets the chart as a resource_link', async () => {
    const before = uploads().length;
    const call = await python({ doc: { data: Buffer.from('# Notes\n').toString('base64'), name: 'notes.md', mime_type: 'text/markdown' } });
    assert.equal(call.isError, false, JSON.stringify(call));
    expectChartLink(call.content);
    const [up] = uploads().slice(before);
    assert.equal(up.name, 'notes.md');
    assert.equal(up.data.toString(), '# Notes\n');
    assert.equal(runs().at(-1).body.inputs.doc.upload_file_id, up.id);
  });

  test('a private URL is refused before the fake Dify sees it', async () => {
    const seen = dify.requestsFor(apiKey).length;
    const call = await python({ doc: 'http://10.0.0.1/x.pdf' });
    assert.equal(call.isError, true);
    assert.match(call.content[0].text, /argument 'doc' was refused: its host is a private address/);
    assert.equal(dify.requestsFor(apiKey).length, seen);
  });
});

describe('a chat app with its upload feature on', () => {
  test('takes files, and its answer\'s files come back as resource_links', async () => {
    const picture = dify.fileOutput({ name: 'drawing.webp', mimeType: 'image/webp', data: 'WEBP' });
    const fileUpload = { image: { enabled: true, number_limits: 2, transfer_methods: ['remote_url', 'local_file'] } };
    const reg = await registerApp(fg, dify, {
      mode: 'chat', name: 'Painter', form: [], fileUpload, messageFiles: [picture], answer: 'Here it is',
      backend: { file_upload: fileUpload },
    });
    const { url: chatUrl } = await publish(fg, reg.app.id, { description: 'Draws' });
    const client = new Client({ name: 'files-test', version: '1.0.0' });
    await client.connect(new StreamableHTTPClientTransport(new URL(chatUrl)));
    try {
      const { tools } = await client.listTools();
      assert.equal(tools[0].inputSchema.properties.files.maxItems, 2);
      const r = await client.callTool({ name: 'Painter', arguments: { query: 'Paint this', files: [{ data: 'aGk=', name: 'sketch.png' }] } });
      assert.equal(r.isError, false, JSON.stringify(r));
      const link = r.content.find((c) => c.type === 'resource_link');
      assert.equal(link?.uri, picture.url, JSON.stringify(r.content));
      assert.equal(r.structuredContent.files[0].url, picture.url);
      const sent = dify.requestsFor(reg.apiKey).find((q) => q.path === '/v1/chat-messages').body;
      assert.equal(sent.files[0].transfer_method, 'local_file');
    } finally {
      await client.close();
    }
  });
});
