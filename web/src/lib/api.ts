// The API as the page sees it: the web server's own origin, which proxies to
// the API server and adds the credential. Errors carry what to do next.

import { roleNeeded, sessionEnded } from './session';

export const GROUP = '/apis/dots.invisible.dev/v1alpha1';

export class ApiError extends Error {
  constructor(
    message: string,
    public status: number,
    public code = '',
  ) {
    super(message);
  }
}

/** The ApiError of an answer that is not ok, in words. */
export async function failure(res: Response, method = 'GET'): Promise<ApiError> {
  let message = `${res.status} ${res.statusText}`;
  let code = '';
  try {
    const body = await res.json();
    // The Dots API answers {error, message}; the Kubernetes API a Status.
    if (body?.message) message = body.message;
    code = body?.error ?? body?.reason ?? '';
  } catch {
    /* not JSON */
  }
  if (res.status === 502 && !code) message = 'The server did not answer: is invisible-dots server running?';
  if (res.status === 401 && code === 'unauthenticated') sessionEnded(message);
  if (res.status === 403 && code !== 'host_unreachable') message += roleNeeded(method, new URL(res.url, location.href).pathname);
  return new ApiError(message, res.status, code);
}

export async function request<T>(path: string, init: RequestInit = {}): Promise<T> {
  let res: Response;
  try {
    res = await fetch(path, { ...init, headers: { Accept: 'application/json', ...init.headers } });
  } catch {
    throw new ApiError('The web server cannot be reached: start invisible-dots server again and reload.', 0, 'offline');
  }
  if (!res.ok) throw await failure(res, (init.method ?? 'GET').toUpperCase());
  if (res.status === 204) return undefined as T;
  return (await res.json()) as T;
}

export const getJSON = <T>(path: string, signal?: AbortSignal) => request<T>(path, { signal });

export const postJSON = <T>(path: string, body: unknown) =>
  request<T>(path, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify(body) });

export const mergePatch = <T>(path: string, body: unknown) =>
  request<T>(path, {
    method: 'PATCH',
    headers: { 'Content-Type': 'application/merge-patch+json' },
    body: JSON.stringify(body),
  });

export const dotPath = (ns: string, name: string) =>
  `/dots/v1/namespaces/${encodeURIComponent(ns)}/dots/${encodeURIComponent(name)}`;

/** An error's words as a sentence, then what to do next. */
export function says(e: unknown, next: string): string {
  const m = (e instanceof Error ? e.message : String(e)).trim();
  return `${m}${/[.!?]$/.test(m) ? '' : '.'} ${next}`;
}
