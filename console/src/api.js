// The console API client: same origin, the token from sessionStorage in the Authorization header
// (never in a URL), errors as ApiError with the server's per-field messages.

const KEY = 'flowgate.console.token';

export const session = {
  get token() {
    return sessionStorage.getItem(KEY);
  },
  set(token) {
    sessionStorage.setItem(KEY, token);
  },
  clear() {
    sessionStorage.removeItem(KEY);
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
      credentials: 'omit',
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
