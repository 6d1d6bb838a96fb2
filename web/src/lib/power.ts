// The computer's power, written as the command line writes it
// (internal/cli/computer.go): the one action behind every Start, Reboot and
// Stop of the pages (components/PowerActions.tsx, the Dot header's error banner).
import { ApiError, GROUP, getJSON, mergePatch } from './api';
import type { Computer } from './types';

// The annotations `invisible-dots computer start|reboot` writes
// (api/v1alpha1: StartRequestedAnnotation, RebootRequestedAnnotation).
const START = 'dots.invisible.dev/start-requested';
const REBOOT = 'dots.invisible.dev/reboot-requested';

export type Power = 'start' | 'stop' | 'reboot';

const computerPath = (ns: string, name: string) =>
  `${GROUP}/namespaces/${encodeURIComponent(ns)}/computers/${encodeURIComponent(name)}`;

/**
 * Writes the Computer as the command line does: stop sets runStrategy
 * Halted; start lifts a Halted and annotates a start; reboot annotates a
 * reboot, refused while a person's stop holds. The patch carries the
 * resourceVersion it read, so a change made meanwhile fails instead of
 * being overwritten.
 */
export async function power(ns: string, name: string, what: Power) {
  // The resourceVersion moves with every status write too (the host agent
  // and the controllers write it often), so a conflict is read again and
  // decided again from the newer object, as client-go's RetryOnConflict does.
  for (let attempt = 1; ; attempt++) {
    try {
      return await powerOnce(ns, name, what);
    } catch (e) {
      if (!(e instanceof ApiError && e.status === 409 && e.code === 'Conflict') || attempt === 3) throw e;
    }
  }
}

async function powerOnce(ns: string, name: string, what: Power) {
  const c = await getJSON<Computer>(computerPath(ns, name));
  const now = new Date().toISOString();
  const patch: any = { metadata: { resourceVersion: c.metadata.resourceVersion } };
  if (what === 'stop') patch.spec = { runStrategy: 'Halted' };
  if (what === 'start') {
    if (c.spec.runStrategy === 'Halted') patch.spec = { runStrategy: 'OnDemand' };
    patch.metadata.annotations = { [START]: now };
  }
  if (what === 'reboot') {
    if (c.spec.runStrategy === 'Halted') throw new ApiError('The computer is stopped by a person: start it instead.', 409);
    patch.metadata.annotations = { [REBOOT]: now };
  }
  try {
    await mergePatch(computerPath(ns, name), patch);
  } catch (e) {
    if (e instanceof ApiError && e.status === 409) throw new ApiError('The computer kept changing meanwhile; look at its state.', 409, 'Conflict');
    throw e;
  }
}

/** What each action is called on its button and in what it reports. */
export const POWER_WORDS: Record<Power, string> = { start: 'Start', stop: 'Stop', reboot: 'Reboot' };
