// The official MCP JSON schemas per protocol revision (tests/schemas/), and validators for them.
//
//   const check = validatorFor('2025-06-18');
//   check('JSONRPCResponse', message);   // asserts, naming the revision, the definition and the errors
//
// tests/schemas/ has the schemas the conformance package ships: 2025-03-26 and later. It ships
// none for 2024-11-05, so that one is derived from 2025-03-26 by taking out exactly what
// 2025-03-26 added: audio content (from every content union), tool annotations, the progress
// notification's `message`, the `completions` capability and JSON-RPC batches. That is the
// whole difference between the two official schemas, apart from descriptions and from
// 2024-11-05 spelling the content annotations out inline where 2025-03-26 names them
// (`Annotations`, the same object); tests/schemas/README.md says how this was checked.
import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import path from 'node:path';

import Ajv from 'ajv';
import Ajv2020 from 'ajv/dist/2020.js';
import addFormats from 'ajv-formats';

import { repoRoot } from './harness.mjs';

export const REVISIONS = ['2024-11-05', '2025-03-26', '2025-06-18', '2025-11-25', '2026-07-28'];

const readSchema = (revision) => JSON.parse(readFileSync(path.join(repoRoot, `tests/schemas/mcp-${revision}.json`), 'utf8'));

/** The schema of `revision` as a JSON object (2024-11-05 derived, see above). */
export function mcpSchema(revision) {
  if (revision !== '2024-11-05') return readSchema(revision);
  const schema = readSchema('2025-03-26');
  const d = schema.definitions;
  const AUDIO = '#/definitions/AudioContent';
  const withoutAudio = (union) => union.filter((x) => x.$ref !== AUDIO);
  d.CallToolResult.properties.content.items.anyOf = withoutAudio(d.CallToolResult.properties.content.items.anyOf);
  for (const def of ['CreateMessageResult', 'PromptMessage', 'SamplingMessage']) {
    d[def].properties.content.anyOf = withoutAudio(d[def].properties.content.anyOf);
  }
  delete d.AudioContent;
  delete d.Tool.properties.annotations;
  delete d.ToolAnnotations;
  delete d.ProgressNotification.properties.params.properties.message;
  delete d.ServerCapabilities.properties.completions;
  d.JSONRPCMessage.anyOf = d.JSONRPCMessage.anyOf.filter((x) => x.type !== 'array');
  delete d.JSONRPCBatchRequest;
  delete d.JSONRPCBatchResponse;
  assert.ok(!JSON.stringify(schema).includes(AUDIO), 'the derived 2024-11-05 schema still refers to audio content');
  return schema;
}

/** `check(definition, value)`: asserts that value is a valid `definition` of `revision`. */
export function validatorFor(revision) {
  const schema = mcpSchema(revision);
  const ajv = schema.$schema.includes('2020-12') ? new Ajv2020({ strict: false, allErrors: true }) : new Ajv({ strict: false, allErrors: true });
  addFormats(ajv);
  ajv.addSchema(schema, 'mcp');
  const defs = schema.$defs ? '$defs' : 'definitions';
  // 2025-11-25 renamed JSONRPCError to JSONRPCErrorResponse.
  const alias = { JSONRPCError: schema[defs].JSONRPCError ? 'JSONRPCError' : 'JSONRPCErrorResponse' };
  const check = (def, value) => {
    const name = alias[def] ?? def;
    const validate = ajv.getSchema(`mcp#/${defs}/${name}`);
    assert.ok(validate, `${revision} has no ${def}`);
    assert.ok(validate(value), `${revision} ${name}: ${ajv.errorsText(validate.errors)}\n${JSON.stringify(value).slice(0, 600)}`);
  };
  check.has = (def) => Boolean(schema[defs][alias[def] ?? def]);
  return check;
}
