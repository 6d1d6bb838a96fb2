import { computers, dots, useCell, useDotTasks } from '../lib/live';
import { DOT_PAGES, dotHref, type DotPage } from '../lib/router';
import { phaseLabel, phaseTone, reason, toneText } from '../lib/format';
import { useState } from 'preact/hooks';
import { power, type Power } from '../lib/power';
import { useCan } from '../lib/session';

const TAB_LABEL: Record<DotPage, string> = {
  chat: 'Chat',
  tasks: 'Tasks',
  computer: 'Computer',
  skills: 'Skills',
  channels: 'Channels',
  activity: 'Activity',
  settings: 'Settings',
};

/** A Dot's name, state and tabs, above each of its pages. */
export function DotHeader({ ns, name, tab }: { ns: string; name: string; tab: DotPage }) {
  const dot = useCell(dots).items.get(`${ns}/${name}`);
  const computer = useCell(computers).items.get(`${ns}/${name}`);
  // The Dot's tasks, the watch its Tasks page holds too.
  const all = useDotTasks(name);
  const phase = dot?.status?.phase;
  const computerState = computer?.status?.state;
  // The newest progress line of the running task, under the name.
  const running = dot?.status?.currentTask ? all.items.get(`${ns}/${dot.status.currentTask}`) : undefined;
  const why = dot ? reason(dot) : '';
  // The banner's way back asks as the power menu does: a reboot while a task
  // runs names the task first (ref 9.7).
  const [asking, setAsking] = useState(false);
  const [failed, setFailed] = useState('');
  const back: Power = computerState === 'RUNNING' ? 'reboot' : 'start';
  const mayPower = useCan(ns)('patch', 'computers');
  const task = running?.status?.phase === 'RUNNING' ? running.spec.description.split('\n')[0] : '';
  const go = () => {
    setAsking(false);
    setFailed('');
    power(ns, name, back).catch((e) => setFailed(`${(e as Error).message} Try again.`));
  };
  return (
    <header class="border-b border-border bg-surface px-4 pt-3">
      <div class="flex flex-wrap items-baseline gap-x-3">
        <h1 class="min-w-0 truncate text-lg font-semibold">{name}</h1>
        <span class="text-xs text-muted">{ns}</span>
        <span class={`ml-auto text-sm capitalize ${toneText[phaseTone(phase)]}`} data-testid="dot-phase">
          {phaseLabel(phase)}
          {computerState ? ` · computer ${computerState.toLowerCase()}` : ''}
        </span>
      </div>
      {/* One line always held, so the tabs never move when it fills. */}
      <p class="h-5 truncate text-xs text-muted" title={why || running?.status?.progress}>
        {phase === 'ERROR' && why ? (
          <span class="text-danger" data-testid="dot-error">
            {why} · <a class="underline" href={dotHref(ns, name, 'settings')}>Open settings</a>
            {/* One way back: the host reboots only a running computer, and starts one in ERROR. */}
            {(computerState === 'RUNNING' || computerState === 'ERROR') &&
              (asking ? (
                <span role="group" aria-label="Reboot">
                  {' · '}The reboot interrupts the task “<span data-testid="confirm-task">{task}</span>”:{' '}
                  <button type="button" class="underline" autoFocus onClick={go}>
                    Reboot
                  </button>
                  {' · '}
                  <button type="button" class="underline" onClick={() => setAsking(false)}>
                    Keep it running
                  </button>
                </span>
              ) : (
                <>
                  {mayPower && (
                    <>
                      {' · '}
                      <button type="button" class="underline" onClick={() => (back === 'reboot' && task ? setAsking(true) : go())}>
                        {back === 'reboot' ? 'Reboot' : 'Start the computer'}
                      </button>
                    </>
                  )}
                  {failed && ` · ${failed}`}
                </>
              ))}
          </span>
        ) : (
          (running?.status?.progress ?? '')
        )}
      </p>
      <nav aria-label={`${name}'s pages`} class="-mb-px flex gap-1 overflow-x-auto">
        {DOT_PAGES.map((p) => (
          <a
            key={p}
            href={dotHref(ns, name, p)}
            aria-current={p === tab ? 'page' : undefined}
            class={`border-b-2 px-3 py-2 text-sm whitespace-nowrap ${p === tab ? 'border-accent font-semibold' : 'border-transparent text-muted hover:text-fg'}`}
          >
            {TAB_LABEL[p]}
          </a>
        ))}
      </nav>
    </header>
  );
}
