// Who the page acts for (internal/webui/signin.go). Without sign-in the web
// server acts with its own credential for the machine's owner, who may do
// everything. With it, a person signs in with the token `invisible-dots user
// add` made for them; every request then carries their rights, and the
// pages offer only what those rights allow (rules, from the API server's
// SelfSubjectRulesReview of the namespace).
import { Cell, useCell } from './cell';

export const SESSION_PATH = '/web/v1/session';

export interface Person {
  user: string;
  name: string;
  /** The namespace the pages list; absent: every namespace. */
  namespace?: string;
}

export interface Session {
  loaded: boolean;
  signIn: boolean;
  person?: Person;
  expires?: string;
  /** Why the last session ended, shown on the sign-in page. */
  ended?: string;
}

export const session = new Cell<Session>({ loaded: false, signIn: false });
export const useSession = () => useCell(session);

/** The namespace every list of the page is scoped to, '' for all of them. */
export const scope = () => session.get().person?.namespace ?? '';

/** Reads the session; the page starts once it is known. */
export async function readSession(): Promise<Session> {
  try {
    const res = await fetch(SESSION_PATH, { headers: { Accept: 'application/json' } });
    if (!res.ok) throw new Error(String(res.status));
    const s = (await res.json()) as Omit<Session, 'loaded'>;
    session.set({ loaded: true, signIn: s.signIn, person: s.person, expires: s.expires });
  } catch {
    // An older server, or none: the page says what it can when it lists.
    session.set({ loaded: true, signIn: false });
  }
  return session.get();
}

/** Signs in with a token or a kubeconfig's text; the answer's message when refused. */
export async function signIn(cred: { token?: string; kubeconfig?: string }): Promise<void> {
  let res: Response;
  try {
    res = await fetch(SESSION_PATH, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', Accept: 'application/json' },
      body: JSON.stringify(cred),
    });
  } catch {
    throw new Error('The web server cannot be reached: is invisible-dots server running?');
  }
  const body = await res.json().catch(() => ({}));
  if (!res.ok) throw new Error(body?.message ?? `${res.status} ${res.statusText}`);
  // A fresh page: every list and stream starts again with the person's rights.
  location.reload();
}

export async function signOut(): Promise<void> {
  await fetch(SESSION_PATH, { method: 'DELETE' }).catch(() => undefined);
  location.reload();
}

/** The server refused the session (ended, signed out elsewhere, revoked): back to the sign-in page. */
export function sessionEnded(message: string) {
  const s = session.get();
  if (s.signIn && s.person) session.set({ ...s, person: undefined, ended: message });
}

// ---- What the person may do ------------------------------------------------

interface Rule {
  verbs: string[];
  apiGroups?: string[];
  resources?: string[];
  resourceNames?: string[];
  /** A rule of paths (nonResourceRules): '/dots/v1/doctor', or a prefix ending in '*'. */
  nonResourceURLs?: string[];
}

const rules = new Map<string, Cell<Rule[] | null>>();
const EVERYTHING: Rule[] = [{ verbs: ['*'], apiGroups: ['*'], resources: ['*'], nonResourceURLs: ['*'] }];

async function readRules(ns: string, cell: Cell<Rule[] | null>) {
  try {
    const res = await fetch('/apis/authorization.k8s.io/v1/selfsubjectrulesreviews', {
      method: 'POST',
      headers: { 'Content-Type': 'application/json', Accept: 'application/json' },
      body: JSON.stringify({ apiVersion: 'authorization.k8s.io/v1', kind: 'SelfSubjectRulesReview', spec: { namespace: ns } }),
    });
    if (!res.ok) throw new Error(String(res.status));
    const body = await res.json();
    // An incomplete answer (an authorizer that cannot list its rules, such
    // as an administrator's) offers everything; the API server decides.
    const resourceRules: Rule[] = body.status?.resourceRules ?? [];
    cell.set(body.status?.incomplete && !resourceRules.length ? EVERYTHING : [...resourceRules, ...(body.status?.nonResourceRules ?? [])]);
  } catch {
    // Not known: offer the actions, whose refusal says which role is needed.
    cell.set(EVERYTHING);
  }
}

const has = (list: string[] | undefined, v: string) => !!list && (list.includes('*') || list.includes(v));

/** Whether rules let verb on group/resource (resource may be 'dots/messages'), or on a path when resource begins with '/'. */
export function allows(rs: Rule[], verb: string, resource: string, group = 'dots.invisible.dev'): boolean {
  if (resource.startsWith('/'))
    return rs.some((r) => has(r.verbs, verb) && (r.nonResourceURLs ?? []).some((u) => u === '*' || u === resource || (u.endsWith('*') && resource.startsWith(u.slice(0, -1)))));
  return rs.some((r) => has(r.verbs, verb) && has(r.apiGroups, group) && has(r.resources, resource) && !(r.resourceNames ?? []).length);
}

/**
 * can(verb, resource) for namespace ns: true for the machine's owner; for a
 * person, what their rules allow, false until the rules are read.
 */
export function useCan(ns: string): (verb: string, resource: string, group?: string) => boolean {
  const s = useSession();
  let cell = rules.get(ns);
  if (!cell) {
    cell = new Cell<Rule[] | null>(null);
    rules.set(ns, cell);
    if (s.signIn) void readRules(ns, cell);
  }
  const rs = useCell(cell);
  if (!s.signIn) return () => true;
  return (verb, resource, group) => !!rs && allows(rs, verb, resource, group);
}

// What only the machine's owner may do: the host's settings, report and keys.
const OWNERS = /^(\/apis\/dots\.invisible\.dev\/v1alpha1\/hosts|\/dots\/v1\/(doctor|secrets)\b|\/api\/v1\/namespaces\/invisible-dots-system\/)/;

/** What a 403 needs, in words, for the person signed in. */
export function roleNeeded(method: string, path = ''): string {
  const p = session.get().person;
  if (!session.get().signIn || !p) return '';
  if (OWNERS.test(path)) return " This is the machine owner's to do.";
  const ns = p.namespace ?? 'default';
  const role = method === 'GET' ? 'viewer' : 'editor';
  return ` It needs the ${role} role in namespace ${ns}: ask the machine's owner to run 'invisible-dots user add ${p.name} --namespace ${ns} --role ${role}'.`;
}
