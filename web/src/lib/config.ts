// A Dot's config as the form edits it: one draft of the whole spec, its
// changes against the spec the edit began from, and the API server's
// dry run as the judge, its field paths read back onto the form's controls.
import { GROUP } from './api';

export type Spec = Record<string, any>;

export interface Cause {
  field: string;
  message: string;
}

export interface Judgement {
  ok: boolean;
  status: number;
  reason: string;
  message: string;
  causes: Cause[];
  body?: any;
}

export const dotsPath = (ns: string) => `${GROUP}/namespaces/${encodeURIComponent(ns)}/dots`;
export const dotResourcePath = (ns: string, name: string) => `${dotsPath(ns)}/${encodeURIComponent(name)}`;

/**
 * Sends the Dot to the API server: a create (POST) or an update (PUT,
 * conditional on the resourceVersion in the body), as a dry run or for
 * real. The answer's Status is kept whole: its causes name the fields.
 */
export async function sendDot(method: 'POST' | 'PUT', path: string, body: unknown, dryRun: boolean): Promise<Judgement> {
  const q = `?fieldValidation=Strict${dryRun ? '&dryRun=All' : ''}`;
  let res: Response;
  try {
    res = await fetch(path + q, { method, headers: { 'Content-Type': 'application/json', Accept: 'application/json' }, body: JSON.stringify(body) });
  } catch {
    return { ok: false, status: 0, reason: 'offline', message: 'The web server cannot be reached: start invisible-dots server again.', causes: [] };
  }
  const data = await res.json().catch(() => ({}));
  if (res.ok) return { ok: true, status: res.status, reason: '', message: '', causes: [], body: data };
  return {
    ok: false,
    status: res.status,
    reason: data.reason ?? '',
    message: data.message ?? `${res.status} ${res.statusText}`,
    causes: (data.details?.causes ?? []).map((c: any) => ({ field: c.field ?? '', message: c.message ?? c.reason ?? '' })),
  };
}

/** Whether a cause's field is the control's path or inside it. */
export function owns(path: string, field: string): boolean {
  const f = field.replace(/^\./, '');
  return f === path || f.startsWith(path + '.') || f.startsWith(path + '[');
}

export interface Change {
  path: string[];
  from: unknown;
  to: unknown;
}

const isObj = (v: unknown): v is Record<string, unknown> => typeof v === 'object' && v !== null && !Array.isArray(v);

/** The leaves that differ between a and b (lists compared whole). */
export function diff(a: unknown, b: unknown, path: string[] = []): Change[] {
  if (isObj(a) && isObj(b)) {
    const keys = [...new Set([...Object.keys(a), ...Object.keys(b)])].sort();
    return keys.flatMap((k) => diff(a[k], b[k], [...path, k]));
  }
  if (JSON.stringify(a) === JSON.stringify(b)) return [];
  if (isObj(a) && b === undefined) return diff(a, {}, path).map((c) => ({ ...c, to: undefined }));
  if (isObj(b) && a === undefined) return diff({}, b, path);
  return [{ path, from: a, to: b }];
}

/** Puts changes on top of spec: the person's edits kept, the rest as spec says. */
export function rebase(spec: Spec, changes: Change[]): Spec {
  const out = structuredClone(spec);
  for (const c of changes) {
    let at: any = out;
    for (const k of c.path.slice(0, -1)) {
      if (!isObj(at[k])) at[k] = {};
      at = at[k];
    }
    const last = c.path[c.path.length - 1];
    if (c.to === undefined) delete at[last];
    else at[last] = structuredClone(c.to);
  }
  return out;
}

export function getIn(o: any, path: string[]): any {
  return path.reduce((v, k) => (v == null ? undefined : v[k]), o);
}

/** Sets path in a copy of o; undefined or '' removes it. */
export function setIn(o: Spec, path: string[], value: unknown): Spec {
  const out = structuredClone(o);
  let at: any = out;
  for (const k of path.slice(0, -1)) {
    if (!isObj(at[k])) at[k] = {};
    at = at[k];
  }
  const last = path[path.length - 1];
  if (value === undefined || value === '') delete at[last];
  else at[last] = value;
  return out;
}

/** The spec fields the form has a control for; anything else is YAML's alone. */
export const FORM_FIELDS = ['instructions', 'model', 'models', 'computer', 'permissions', 'limits'];
