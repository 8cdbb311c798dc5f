// The console API client: same origin, the token from sessionStorage in the Authorization header
// (never in a URL), errors as ApiError with the server's per-field messages.

const KEY = 'flowgate.console.token';
// Signed in by Cloudflare Access (no token: Access's cookie makes the edge add its assertion).
const ACCESS = 'flowgate.console.access';

export const session = {
  get token() {
    return sessionStorage.getItem(KEY);
  },
  /** The Access user's actor (`access:<email>`), when Access signed this tab in. */
  get access() {
    return sessionStorage.getItem(ACCESS);
  },
  get signedIn() {
    return Boolean(this.token || this.access);
  },
  set(token) {
    sessionStorage.setItem(KEY, token);
  },
  setAccess(actor) {
    sessionStorage.setItem(ACCESS, actor);
  },
  clear() {
    sessionStorage.removeItem(KEY);
    sessionStorage.removeItem(ACCESS);
  },
};

export class ApiError extends Error {
  constructor(status, body) {
    super(body?.message || `The console API answered ${status}`);
    this.status = status;
    this.code = body?.error ?? 'http_error';
    /** [{field, message}]: the fields the server named. */
    this.errors = Array.isArray(body?.errors) ? body.errors : [];
  }
}

/** Calls /console/api + path; resolves the JSON body, rejects with ApiError. */
export async function api(path, { method = 'GET', body, token = session.token } = {}) {
  const headers = { accept: 'application/json' };
  if (token) headers.authorization = `Bearer ${token}`;
  if (body !== undefined) headers['content-type'] = 'application/json';
  let res;
  try {
    res = await fetch(`/console/api${path}`, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      // Same-origin cookies go along for Cloudflare Access (its CF_Authorization cookie); the
      // API takes only JSON bodies, which a cross-site form cannot send.
      credentials: 'same-origin',
      cache: 'no-store',
    });
  } catch (e) {
    throw new ApiError(0, { error: 'network', message: `Flowgate could not be reached: ${e.message}` });
  }
  const text = await res.text();
  let json;
  try {
    json = text ? JSON.parse(text) : {};
  } catch {
    json = { message: `The console API answered ${res.status} with a body that is not JSON` };
  }
  if (!res.ok) throw new ApiError(res.status, json);
  return json;
}
