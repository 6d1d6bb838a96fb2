// Answering an approval, once. The answer is a merge patch of the
// Approval's spec through the API server (as kubectl patch writes it), over
// the version of the Approval this page read: an answer given elsewhere
// meanwhile (the command line, kubectl, a chat, another tab) is never
// answered again, the same decision included. The API server answers a
// second answer with a 409 whose message starts with already_resolved.

import { ApiError, GROUP, getJSON, mergePatch } from './api';
import { DESTRUCTIVE_PERMISSIONS, DOT_HOME, ONE_TIME_PERMISSIONS, PERMISSIONS, SPEND_PERMISSION, WORKSPACE_DIR } from './generated';
import { Cell } from './live';
import type { Approval } from './types';

export type Answer = { decision: 'approve' | 'reject'; always?: boolean; alwaysFor?: '1h' | 'endOfDay'; scope?: 'task'; note?: string };

/** How an approve was given, in a receipt's words. */
export function allowedAs(spec: Approval['spec']): string {
  if (spec.scope === 'task') return 'allowed for the rest of the task';
  if (!spec.always) return 'allowed once';
  return spec.alwaysFor === '1h' ? 'allowed for an hour' : spec.alwaysFor === 'endOfDay' ? 'allowed until the end of the day' : 'allowed for good';
}

/** The approval was answered somewhere else, or no longer waits. */
export class AnsweredElsewhere extends Error {}

export const approvalPath = (a: Approval) =>
  `${GROUP}/namespaces/${encodeURIComponent(a.metadata.namespace ?? 'default')}/approvals/${encodeURIComponent(a.metadata.name)}`;

/** The API server's answer to a second answer (ref 9.6's 409 already_resolved). */
export const alreadyResolved = (e: unknown) =>
  e instanceof ApiError && e.status === 409 && (e.code === 'already_resolved' || /^already_resolved:/.test(e.message));

/**
 * The uids of the approvals this page answered (or is answering): the
 * others' receipts say they were answered somewhere else.
 */
export const answeredHere = new Cell<ReadonlySet<string>>(new Set());

function mark(uid: string, mine: boolean) {
  const next = new Set(answeredHere.get());
  if (mine) next.add(uid);
  else next.delete(uid);
  answeredHere.set(next);
}

/** Why an approval nobody answered no longer waits: its task ended, or, for a namespace's spend question, its day (the server's words, approvalonce.EndedWhy). */
export function endedWhy(a: Approval): string {
  return a.spec.permission === SPEND_PERMISSION ? 'its day ended' : 'its task ended';
}

function elsewhere(a: Approval): AnsweredElsewhere {
  if (!a.spec.decision) return new AnsweredElsewhere(`This approval no longer waits: ${endedWhy(a)}.`);
  const was = a.spec.decision === 'approve' ? allowedAs(a.spec) : 'denied';
  return new AnsweredElsewhere(`This approval was answered somewhere else: ${was}.`);
}

/**
 * Answers the approval a as ans. Throws AnsweredElsewhere when it was
 * answered already (read so, or met as the 409 already_resolved); a 409 for
 * a version the control plane's own status write made stale reads the
 * Approval again and tries again.
 */
export async function answerApproval(a: Approval, ans: Answer): Promise<void> {
  const path = approvalPath(a);
  let current = a;
  for (let attempt = 0; ; attempt++) {
    if (current.spec.decision || current.status?.phase === 'Expired') throw elsewhere(current);
    // Marked before the write: the watch can show the answer before the
    // write's own response arrives.
    mark(a.metadata.uid, true);
    try {
      await mergePatch(path, {
        metadata: { resourceVersion: current.metadata.resourceVersion },
        spec: {
          decision: ans.decision,
          always: ans.always || undefined,
          alwaysFor: ans.alwaysFor || undefined,
          scope: ans.scope || undefined,
          note: ans.note || undefined,
        },
      });
      return;
    } catch (err) {
      mark(a.metadata.uid, false);
      if (alreadyResolved(err)) {
        // The card's sentence, with the first answer as read.
        const read = await getJSON<Approval>(path).catch(() => undefined);
        if (read?.spec.decision) throw elsewhere(read);
        throw new AnsweredElsewhere(`This approval was answered somewhere else. ${(err as Error).message.replace(/^already_resolved:\s*/, '')}`);
      }
      if (!(err instanceof ApiError) || err.status !== 409 || attempt >= 4) throw err;
      current = await getJSON<Approval>(path);
    }
  }
}

/**
 * Whether an approval card is destructive (ref 9.7): a command, the deletion
 * of a browser identity, or a file write outside the workspace. The Go
 * rule, protocol.DestructiveCall, is the owner; this is its reading of the
 * same tables (generated.ts), for the card's key rule and its mark.
 */
export function isDestructive(permission: string, tool: string, args: unknown): boolean {
  if (DESTRUCTIVE_PERMISSIONS.includes(permission)) return true;
  return writePaths(tool, args).some((p) => !within(resolvePath(p), WORKSPACE_DIR));
}

function writePaths(tool: string, args: unknown): string[] {
  if (!args || typeof args !== 'object') return [];
  const a = args as Record<string, unknown>;
  if (tool === 'write_file' || tool === 'edit_file') return typeof a.path === 'string' && a.path ? [a.path] : [];
  if (tool === 'apply_patch' && Array.isArray(a.edits))
    return a.edits.map((e: any) => (typeof e?.path === 'string' ? e.path : '')).filter((p: string) => p !== '');
  return [];
}

function resolvePath(p: string): string {
  if (p === '~' || p.startsWith('~/')) return clean(DOT_HOME + p.slice(1));
  if (p.startsWith('/')) return clean(p);
  return clean(`${WORKSPACE_DIR}/${p}`);
}

/** path.Clean of an absolute path: no empty, . or .. segments. */
function clean(p: string): string {
  const out: string[] = [];
  for (const s of p.split('/')) {
    if (s === '' || s === '.') continue;
    if (s === '..') out.pop();
    else out.push(s);
  }
  return '/' + out.join('/');
}

const within = (p: string, dir: string) => p === dir || p.startsWith(dir.replace(/\/$/, '') + '/');

/** The tools an "Always allow" of permission covers, in words for the card. */
export function coveredTools(permission: string): string {
  if (permission.startsWith('mcp.') && !PERMISSIONS.some((p) => p.name === permission))
    return `every tool of the MCP server ${permission.slice(4)}`;
  const tools = PERMISSIONS.find((p) => p.name === permission)?.tools ?? [];
  return tools.length ? tools.join(', ') : permission;
}

/** A permission in words with its risk, as every approval card says it (protocol.Permissions). */
export function permissionPhrase(permission: string): string {
  const p = PERMISSIONS.find((x) => x.name === permission);
  if (p) return `${p.label} (${p.risk} risk)`;
  if (permission.startsWith('mcp.')) return `the MCP server ${permission.slice(4)} (high risk)`;
  // A task at its cost cap, or a namespace at its daily spend cap, asks for more.
  return ONE_TIME_PERMISSIONS[permission] ?? permission;
}

/** An approval of permission answers one question only: its card offers no "always" (protocol.OneTimePermission). */
export function oneTimePermission(permission: string): boolean {
  return permission in ONE_TIME_PERMISSIONS;
}
