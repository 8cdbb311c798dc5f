// The JSON text of a value read from the platform's storage (src/shell/js_json.rs imports this
// module through wasm-bindgen). A `Map` is written as an object: the Durable Object records of
// deploys before 3fdefc3 were stored by serde_wasm_bindgen, which stores a JSON object as a `Map`,
// and plain `JSON.stringify` writes a `Map` as `{}`. `undefined` for `undefined`.
export function storedJson(value) {
  return JSON.stringify(value, (_, x) => (x instanceof Map ? Object.fromEntries(x) : x));
}
