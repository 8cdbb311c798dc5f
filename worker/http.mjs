// The request's head and the answer's Response, each made in one call from the Rust Worker
// (src/runtime/workers.rs imports this module through wasm-bindgen, which bundles it with the
// wasm glue). Read field by field from Rust, headers cost about seven calls into JavaScript per
// field (the iterator's step, its array, each string), and a Response a call per header, for
// the status, and for each of the objects its init needs: a fixed cost every request paid.
// Names and values never hold a line feed (the Fetch standard refuses one in either), so lines
// carry them.

/**
 * A request's method and URL as one text, `<method>\n<url>`, after a first character that says
 * whether the request has a body (`b`) or not (`-`). Its headers are read when the Worker first
 * uses them (headerText): a route that reads none does not pay for them.
 */
export function requestHead(request) {
  return `${request.body === null ? '-' : 'b'}${request.method}\n${request.url}`;
}

/**
 * Headers as one text: `<name>\n<value>\n` per field as the Headers iterator yields them
 * (names in lower case, several fields of one name joined with ", ").
 */
export function headerText(headers) {
  let text = '';
  for (const [name, value] of headers) text += `${name}\n${value}\n`;
  return text;
}

/**
 * The Response of `status`, `body` (bytes, which the constructor copies; a ReadableStream; or
 * null) and `headers` (`<name>\n<value>\n` per field). A field the runtime refuses is left out
 * and logged, in the line the Rust Worker logs it with.
 */
export function respond(status, body, headers) {
  return new Response(body, { status, headers: headersOf(headers) });
}

/** The Headers of `text` (`<name>\n<value>\n` per field), for a response or an outbound request. */
export function headersOf(text) {
  const headers = new Headers();
  const lines = text.split('\n');
  for (let i = 0; i + 1 < lines.length; i += 2) {
    try {
      headers.append(lines[i], lines[i + 1]);
    } catch {
      console.log(JSON.stringify({ level: 'error', msg: `a header fetch refuses was left out: ${lines[i]}` }));
    }
  }
  return headers;
}
