// api.js — JSON calls to the Airlock API (and the console's session
// endpoints) with the session cookie. Every non-GET carries the CSRF header;
// a non-2xx answer rejects with an Error carrying the API's code and status.

export class APIError extends Error {
  constructor(status, code, message) {
    super(message);
    this.name = 'APIError';
    this.status = status;
    this.code = code;
  }
}

// request sends one call. opts: csrf (string), onUnauthorized (called on a
// 401 before rejecting), body (JSON-encoded when not undefined).
export async function request(method, path, { body, csrf, onUnauthorized } = {}) {
  const headers = { Accept: 'application/json' };
  if (body !== undefined) headers['Content-Type'] = 'application/json';
  if (method !== 'GET' && method !== 'HEAD' && csrf) headers['X-Airlock-CSRF'] = csrf;
  let resp;
  try {
    resp = await fetch(path, {
      method,
      headers,
      body: body === undefined ? undefined : JSON.stringify(body),
      credentials: 'same-origin',
      cache: 'no-store',
    });
  } catch (e) {
    throw new APIError(0, 'network', `${method} ${path}: ${e.message || 'network error'}`);
  }
  const text = await resp.text();
  let data = null;
  if (text !== '') {
    try {
      data = JSON.parse(text);
    } catch {
      if (resp.ok) throw new APIError(resp.status, 'bad_response', `${method} ${path}: the answer is not JSON`);
    }
  }
  if (!resp.ok) {
    const code = (data && typeof data.code === 'string') ? data.code : `http_${resp.status}`;
    const msg = (data && typeof data.message === 'string') ? data.message : `${method} ${path}: ${resp.status} ${resp.statusText}`;
    const err = new APIError(resp.status, code, msg);
    if (resp.status === 401 && onUnauthorized) onUnauthorized(err);
    throw err;
  }
  return resp.status === 204 ? null : data;
}

// client returns ctx.api: get/post/put/del bound to the session's CSRF token
// (getCsrf is read on every call, so signing in again takes effect at once).
export function client(getCsrf, onUnauthorized) {
  const call = (method) => (path, body) => request(method, path, { body, csrf: getCsrf(), onUnauthorized });
  const get = call('GET');
  const post = call('POST');
  const put = call('PUT');
  const del = call('DELETE');
  return { get: (path) => get(path), post, put, del: (path) => del(path) };
}

// query builds "?a=b&c=d" from the non-empty entries of an object.
export function query(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params || {})) {
    if (v !== undefined && v !== null && v !== '') q.set(k, String(v));
  }
  const s = q.toString();
  return s ? `?${s}` : '';
}
