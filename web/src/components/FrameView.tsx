// A Dot's desktop as the host reads it from the guest (ref 9.7): one
// component for the Computer page's Screen view and the chat's panel, so the
// refresh and the stale rule are written once. An open browser is a window of
// this desktop; nothing the person does here reaches the computer.
import { useEffect, useState } from 'preact/hooks';
import { ApiError, dotPath } from '../lib/api';
import { computers, useCell } from '../lib/live';
import { power } from '../lib/power';
import { NotRunning } from './NotRunning';

/** How often a visible page asks for a new picture. */
export const SCREEN_EVERY_MS = 3000;
/** A picture older than this is said to be old. */
export const STALE_MS = 15_000;
/** A read the guest does not answer in this long is given up, so the next one is asked. */
const READ_TIMEOUT_MS = 10_000;

/**
 * The desktop while the computer runs; why there is none, with Start,
 * while it does not. `panel`: the chat's panel, a strip below 1024 px and a
 * column beside the thread from there.
 */
export function FrameView({ ns, name, panel = false }: { ns: string; name: string; panel?: boolean }) {
  const c = useCell(computers).items.get(`${ns}/${name}`);
  const state = c?.status?.state;
  const start = () => power(ns, name, 'start');
  if (state !== 'RUNNING') return <NotRunning ns={ns} state={state} what="screen" panel={panel} onStart={start} />;
  return <Frames key={`${ns}/${name}`} ns={ns} name={name} panel={panel} onStart={start} />;
}

type Frame = { url: string; at: number };

/** Reads a picture every few seconds while the page is seen; each newer one replaces the last. */
function useFrames(ns: string, name: string) {
  const [frame, setFrame] = useState<Frame>();
  const [error, setError] = useState('');
  // The route's own 409: the computer stopped before the watch said so.
  const [stopped, setStopped] = useState(false);
  const [since] = useState(Date.now);
  const [now, setNow] = useState(Date.now);
  useEffect(() => {
    let live = true;
    let url = '';
    let timer: ReturnType<typeof setTimeout> | undefined;
    let inflight: AbortController | undefined;
    const read = async () => {
      clearTimeout(timer);
      if (document.visibilityState === 'visible' && !inflight) {
        const ctl = (inflight = new AbortController());
        const giveUp = setTimeout(() => ctl.abort(), READ_TIMEOUT_MS);
        try {
          const res = await fetch(`${dotPath(ns, name)}/screenshot`, { signal: ctl.signal });
          if (!res.ok) {
            const body = await res.json().catch(() => ({}));
            throw new ApiError(body.message ?? `${res.status}`, res.status, body.error ?? '');
          }
          const blob = await res.blob();
          if (!live) return;
          const next = URL.createObjectURL(blob);
          if (url) URL.revokeObjectURL(url);
          url = next;
          setFrame({ url, at: Date.now() });
          setError('');
          setStopped(false);
        } catch (e) {
          if (!live) return;
          if (e instanceof ApiError && e.code === 'computer_stopped') setStopped(true);
          else setError(`The screen could not be read: ${ctl.signal.aborted ? 'the computer did not answer' : (e as Error).message}. Trying again.`);
        } finally {
          clearTimeout(giveUp);
          inflight = undefined;
        }
      }
      if (live) {
        clearTimeout(timer);
        timer = setTimeout(read, SCREEN_EVERY_MS);
      }
    };
    // A page shown again asks at once rather than warn about the picture it kept while hidden.
    const shown = () => document.visibilityState === 'visible' && void read();
    // The clock of the warning runs apart from the reads, so a read that hangs is still noticed.
    const tick = setInterval(() => setNow(Date.now()), 1000);
    document.addEventListener('visibilitychange', shown);
    void read();
    return () => {
      live = false;
      clearTimeout(timer);
      clearInterval(tick);
      inflight?.abort();
      document.removeEventListener('visibilitychange', shown);
      if (url) URL.revokeObjectURL(url);
    };
  }, [ns, name]);
  const age = now - (frame?.at ?? since);
  const stale = document.visibilityState === 'visible' && age > STALE_MS;
  return { frame, error, stopped, stale, age };
}

function Frames({ ns, name, panel, onStart }: { ns: string; name: string; panel: boolean; onStart: () => Promise<void> }) {
  const { frame, error, stopped, stale, age } = useFrames(ns, name);
  if (stopped) return <NotRunning ns={ns} state="stopped" what="screen" panel={panel} onStart={onStart} />;
  const warning = stale
    ? `${frame ? `The picture is more than 15 s old (${Math.floor(age / 1000)} s): no newer one has come.` : 'No picture has come for more than 15 s.'}${error ? ` ${error}` : ''}`
    : error;
  return (
    <figure class={panel ? 'flex items-center gap-3 lg:block' : ''} data-testid="frame-view">
      <div
        class={`relative aspect-video overflow-hidden rounded-card border border-border bg-surface-2 ${panel ? 'w-28 shrink-0 sm:w-40 lg:w-full' : 'w-full'}`}
      >
        {frame ? (
          <img src={frame.url} alt={`${name}'s desktop`} class="size-full object-contain" data-testid="screen" />
        ) : (
          <p class="grid size-full place-items-center p-1 text-center text-xs text-muted">Reading the screen…</p>
        )}
        {frame && !stale && (
          <span class="absolute top-1 left-1 rounded-card bg-danger px-1.5 py-0.5 text-xs font-semibold text-surface lg:top-2 lg:left-2" data-testid="frame-live">
            LIVE
          </span>
        )}
      </div>
      <figcaption class={panel ? 'min-w-0 flex-1 text-xs lg:mt-1 lg:text-sm' : 'mt-1 text-sm'}>
        <p class={`text-muted ${panel ? 'line-clamp-2 lg:line-clamp-none' : ''}`}>The Dot has control: nothing you do here reaches the computer.</p>
        {/* Always there, so a warning moves nothing below it. */}
        <p role="status" class={`text-danger ${panel ? 'h-8 line-clamp-2 lg:h-auto lg:min-h-5 lg:line-clamp-none' : 'min-h-5'}`} data-testid="frame-warning">
          {warning}
        </p>
      </figcaption>
    </figure>
  );
}
