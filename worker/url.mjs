// The runtime's WHATWG URL parser for src/pure/web_url.rs: the serialization (href) of `input`,
// resolved against `base` when one is given, or undefined when it is not a URL. One call and
// one string back, rather than a crossing per part.
export function parseUrl(input, base) {
  try {
    return (base === undefined ? new URL(input) : new URL(input, base)).href;
  } catch {
    return undefined;
  }
}
