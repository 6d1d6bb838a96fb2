import { useState } from 'preact/hooks';
import { useCan } from '../lib/session';
import { btn } from '../lib/ui';

/**
 * What a view that reads the guest shows while the computer is not running
 * (or a route answered 409 computer_stopped), with Start. In the chat's panel
 * (`panel`) it is one line in the strip below 1024 px and the usual box
 * beside the thread from there.
 */
export function NotRunning({
  ns,
  state,
  onStart,
  what = 'screen or files',
  panel = false,
}: {
  /** The Dot's namespace: Start is offered to who may start its computer. */
  ns: string;
  state?: string;
  onStart: () => Promise<void>;
  what?: string;
  panel?: boolean;
}) {
  const [error, setError] = useState('');
  const may = useCan(ns)('patch', 'computers');
  return (
    <div
      class={
        panel
          ? 'lg:grid lg:aspect-video lg:w-full lg:place-items-center lg:rounded-card lg:border lg:border-dashed lg:border-border lg:bg-surface-2 lg:p-4 lg:text-center'
          : 'grid aspect-video w-full place-items-center rounded-card border border-dashed border-border bg-surface-2 p-4 text-center'
      }
      data-testid="computer-off"
    >
      <div class={panel ? 'flex flex-wrap items-center gap-x-3 gap-y-1 lg:block' : ''}>
        <p class={panel ? 'min-w-0 flex-1 text-sm font-medium lg:text-base' : 'font-medium'}>
          The computer is {(state ?? 'not made yet').toLowerCase()}, so there is no {what} to show.
        </p>
        {may ? (
          <>
            <p class={`mt-1 text-sm text-muted ${panel ? 'hidden lg:block' : ''}`}>Start it to see them; a message or a task starts it too.</p>
            <button type="button" class={`${panel ? 'lg:mt-3' : 'mt-3'} ${btn.primary}`} onClick={() => onStart().catch((e) => setError((e as Error).message))}>
              Start the computer
            </button>
          </>
        ) : (
          <p class={`mt-1 text-sm text-muted ${panel ? 'hidden lg:block' : ''}`}>Starting it needs the editor role in namespace {ns}.</p>
        )}
        {error && (
          <p role="alert" class="mt-2 w-full text-sm text-danger">
            {error}
          </p>
        )}
      </div>
    </div>
  );
}
