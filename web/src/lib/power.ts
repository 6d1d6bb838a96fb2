// The computer's power, asked of the Dots API (POST .../computer/{start,stop,
// reboot}): the one action behind every Start, Reboot and Stop of the pages
// (components/PowerActions.tsx, the Dot header's error banner). The server
// holds the rule (api/v1alpha1/computer_power.go), the one the command line
// and the control plane follow too, and writes the Computer; the page only
// names the action.
import { ApiError, dotPath, postJSON } from './api';

export type Power = 'start' | 'stop' | 'reboot';

/**
 * Asks for what on the computer of the Dot ns/name. The server reads the
 * Computer, applies the rule and writes it over the version it read, reading
 * again when something else wrote it meanwhile; the state follows on the
 * page as the Computer's reconciler acts.
 */
export async function power(ns: string, name: string, what: Power): Promise<void> {
  try {
    await postJSON(`${dotPath(ns, name)}/computer/${what}`, {});
  } catch (e) {
    // The refusals a person can act on, in the page's words.
    if (e instanceof ApiError && e.code === 'computer_halted')
      throw new ApiError('The computer is stopped by a person: start it instead.', 409, e.code);
    if (e instanceof ApiError && e.code === 'computer_changed')
      throw new ApiError('The computer kept changing meanwhile; look at its state.', 409, e.code);
    throw e;
  }
}

/** What each action is called on its button and in what it reports. */
export const POWER_WORDS: Record<Power, string> = { start: 'Start', stop: 'Stop', reboot: 'Reboot' };
