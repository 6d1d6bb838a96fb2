// The one set of Start, Reboot and Stop buttons (ref 9.7): Home's card power
// menu and the Computer page both draw these, so the rule for when to ask is
// written once. Stop always asks and says the automations do not run while
// the computer is stopped; Reboot asks only while a task of the Dot runs,
// and names it.
import { useDotTasks } from '../lib/live';
import { power, POWER_WORDS, type Power } from '../lib/power';
import type { Computer } from '../lib/types';
import { btn, Confirm } from '../lib/ui';
import { useCan } from '../lib/session';

/** The first line of the Dot's running task (its Task's phase), which a reboot or a stop would cut short. */
function useRunningTask(ns: string, name: string): { task: string; known: boolean } {
  const all = useDotTasks(name);
  const t = [...all.items.values()].find((t) => (t.metadata.namespace ?? 'default') === ns && t.status?.phase === 'RUNNING');
  return { task: t ? t.spec.description.split('\n')[0] : '', known: all.loaded };
}

export function PowerActions({
  ns,
  name,
  computer,
  report,
}: {
  ns: string;
  name: string;
  computer: Computer;
  /** What became of a press: the action asked, or why it was not. */
  report: (message: string, failed: boolean) => void;
}) {
  const { task, known } = useRunningTask(ns, name);
  const can = useCan(ns);
  if (!can('patch', 'computers')) return <p class="text-xs text-muted">Starting and stopping the computer needs the editor role in namespace {ns}.</p>;
  const halted = computer.spec.runStrategy === 'Halted';
  const running = computer.status?.state === 'RUNNING';
  const act = (what: Power) => async () => {
    await power(ns, name, what);
    report(`${POWER_WORDS[what]} asked; the state follows here.`, false);
  };
  // A press without a question reports its own failure; a Confirm shows it in place.
  const press = (what: Power) => () => act(what)().catch((e) => report(`${(e as Error).message} Try again.`, true));
  return (
    <>
      {(!running || halted) && (
        <button type="button" class={btn.primary} onClick={press('start')}>
          Start
        </button>
      )}
      {/* Until the tasks are read Reboot asks too. One Confirm for both, so a
          question already open gains the task's name when the tasks arrive. */}
      {!halted &&
        (task || !known ? (
          <Confirm
            label="Reboot"
            question={
              task ? (
                <>
                  Reboot the computer? The task “<span data-testid="confirm-task">{task}</span>” is running: the reboot interrupts it.
                </>
              ) : (
                'Reboot the computer? What runs in it stops.'
              )
            }
            yes="Reboot"
            onYes={act('reboot')}
          />
        ) : (
          <button type="button" class={btn.plain} onClick={press('reboot')} data-testid="reboot-now">
            Reboot
          </button>
        ))}
      {!halted && (
        <Confirm
          label="Stop"
          question={
            <>
              Stop the computer?
              {task && (
                <>
                  {' '}
                  The task “<span data-testid="confirm-task">{task}</span>” is running and stops with it.
                </>
              )}{' '}
              Its automations do not run while it is stopped.
            </>
          }
          yes="Stop the computer"
          danger
          onYes={act('stop')}
        />
      )}
    </>
  );
}
