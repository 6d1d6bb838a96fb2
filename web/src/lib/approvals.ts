// Answering an approval, once. The answer is a merge patch of the
// Approval's spec through the API server (as kubectl patch writes it), over
// the version of the Approval this page read: an answer given elsewhere
// meanwhile (the command line, kubectl, a chat, another tab) is never
// answered again, the same decision included. The API server answers a
// second answer with a 409 whose message starts with already_resolved.

import { ApiError, GROUP, getJSON, mergePatch } from './api';
import { Cell } from './live';
import type { Approval } from './types';

export type Answer = { decision: 'approve' | 'reject'; always?: boolean; note?: string };

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

function elsewhere(a: Approval): AnsweredElsewhere {
  if (!a.spec.decision) return new AnsweredElsewhere('This approval no longer waits: its task ended.');
  const was = a.spec.decision === 'approve' ? (a.spec.always ? 'allowed for good' : 'allowed once') : 'denied';
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
        spec: { decision: ans.decision, always: ans.always || undefined, note: ans.note || undefined },
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
