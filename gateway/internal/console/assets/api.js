// The public API, same origin, same cookie session as any client. Every
// state-changing request is same-origin, so the gateway's Origin and
// Sec-Fetch-Site checks pass; the SameSite=Lax cookie is never sent by
// other sites' forms or scripts.

export class APIError extends Error {
  constructor(status, body) {
    super((body && (body.error || body.err || body.message)) || ('HTTP ' + status));
    this.status = status;
    this.body = body || {};
    this.code = this.body.code || '';
  }
}

export async function api(method, path, body) {
  return (await apiResponse(method, path, body)).data;
}

// apiResponse is api with the status and response headers: {data, status, headers}.
export async function apiResponse(method, path, body) {
  const opts = { method, credentials: 'same-origin', headers: { Accept: 'application/json' } };
  if (body !== undefined) {
    opts.headers['Content-Type'] = 'application/json';
    opts.body = JSON.stringify(body);
  }
  let res;
  try {
    res = await fetch(path, opts);
  } catch (e) {
    throw new APIError(0, { error: 'The platform cannot be reached. Check your connection.' });
  }
  let data = null;
  const ct = res.headers.get('Content-Type') || '';
  if (ct.includes('json')) data = await res.json().catch(() => null);
  if (!res.ok) {
    if (res.status === 401 && onUnauthorized && !path.startsWith('/signin')) onUnauthorized();
    const err = new APIError(res.status, data);
    err.retryAfter = Number((data && data.retryAfter) || res.headers.get('Retry-After') || 0);
    throw err;
  }
  return { data, status: res.status, headers: res.headers };
}

let onUnauthorized = null;
export function setUnauthorizedHandler(fn) { onUnauthorized = fn; }

// upload sends one file as multipart/form-data with progress; it returns
// {promise, abort}. fetch has no upload progress, XMLHttpRequest has.
export function upload(path, file, meta, onProgress) {
  const xhr = new XMLHttpRequest();
  const promise = new Promise((resolve, reject) => {
    xhr.open('POST', path);
    xhr.responseType = 'json';
    xhr.upload.onprogress = (e) => { if (e.lengthComputable) onProgress(e.loaded, e.total); };
    xhr.onload = () => {
      if (xhr.status >= 200 && xhr.status < 300) resolve(xhr.response);
      else reject(new APIError(xhr.status, xhr.response));
    };
    xhr.onerror = () => reject(new APIError(0, { error: 'Upload failed: the connection broke.' }));
    xhr.onabort = () => reject(new APIError(0, { error: 'Cancelled', code: 'cancelled' }));
    const form = new FormData();
    if (meta) form.append('meta', meta);
    form.append('file', file, file.name);
    xhr.send(form);
  });
  return { promise, abort: () => xhr.abort() };
}
