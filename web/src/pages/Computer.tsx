import { useEffect, useRef, useState } from 'preact/hooks';
import { ApiError, GROUP, dotPath, getJSON, mergePatch, says } from '../lib/api';
import { computers, useCell, useTasks } from '../lib/live';
import { dotHref, useQuery } from '../lib/router';
import { btn, Confirm } from '../lib/ui';
import type { Computer } from '../lib/types';

// The annotations `invisible-dots computer start|reboot` writes
// (api/v1alpha1: StartRequestedAnnotation, RebootRequestedAnnotation).
const START = 'dots.invisible.dev/start-requested';
const REBOOT = 'dots.invisible.dev/reboot-requested';

// What a file view shows in the page; anything larger is a download only.
const MAX_TEXT = 1 << 20;
const MAX_IMAGE = 8 << 20;
const SCREEN_EVERY_MS = 3000;
const STALE_MS = 15_000;

const computerPath = (ns: string, name: string) =>
  `${GROUP}/namespaces/${encodeURIComponent(ns)}/computers/${encodeURIComponent(name)}`;

type Power = 'start' | 'stop' | 'reboot';

/**
 * Writes the Computer as the command line does (internal/cli/computer.go):
 * stop sets runStrategy Halted; start lifts a Halted and annotates a start;
 * reboot annotates a reboot, refused while a person's stop holds. The patch
 * carries the resourceVersion it read, so a change made meanwhile fails
 * instead of being overwritten.
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

const STOP_WORDS: Record<string, string> = {
  idle: 'asleep: nothing to do for its idle timeout; a message or a task wakes it',
  user: 'stopped by a person; its automations are paused until it is started',
  exited: 'its machine exited',
};

function bytes(n?: number) {
  if (!n) return '–';
  const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < u.length - 1) {
    n /= 1024;
    i++;
  }
  return `${n.toFixed(i ? 1 : 0)} ${u[i]}`;
}

export function ComputerPage({ ns, name }: { ns: string; name: string }) {
  const cs = useCell(computers);
  const c = cs.items.get(`${ns}/${name}`);
  const q = useQuery();
  const view = q.get('view') === 'files' ? 'files' : 'screen';
  const state = c?.status?.state;
  const running = state === 'RUNNING';
  const halted = c?.spec.runStrategy === 'Halted';
  const [message, setMessage] = useState('');
  // The Dot's running task (its Task's phase), which a reboot or a stop would cut short.
  const all = useTasks();
  const runningTask = [...all.items.values()].find(
    (t) => (t.metadata.namespace ?? 'default') === ns && t.spec.dotName === name && t.status?.phase === 'RUNNING',
  );
  const task = runningTask ? runningTask.spec.description.split('\n')[0] : '';
  const act = (what: Power) => async () => {
    await power(ns, name, what);
    setMessage(`${what === 'start' ? 'Start' : what === 'stop' ? 'Stop' : 'Reboot'} asked; the state follows here.`);
  };
  const base = dotHref(ns, name, 'computer');
  return (
    <div class="mx-auto max-w-5xl p-4 md:p-6">
      {cs.loaded && !c && (
        <p role="alert" class="text-danger">
          {name} has no computer yet. The control plane makes it a moment after the Dot; if it never comes, see the Dot's Activity.
        </p>
      )}
      {c && (
        <section aria-label="State" class="rounded-card border border-border bg-surface p-4">
          <div class="flex flex-wrap items-center gap-3">
            <p class="text-lg font-semibold" data-testid="computer-state">
              {(state ?? 'PENDING').toLowerCase()}
            </p>
            <div class="ml-auto flex flex-wrap gap-2">
              {(!running || halted) && (
                <button type="button" class={btn.primary} onClick={() => act('start')().catch((e) => setMessage((e as Error).message))}>
                  Start
                </button>
              )}
              {/* Reboot asks only while a task runs, and names it (ref 9.7); until the
                  tasks are read it asks too. One Confirm for both, so a question
                  already open gains the task's name when the tasks arrive. Stop always asks. */}
              {!halted &&
                (task || !all.loaded ? (
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
                  <button type="button" class={btn.plain} onClick={() => act('reboot')().catch((e) => setMessage(`${(e as Error).message} Try again.`))}>
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
            </div>
          </div>
          <dl class="mt-3 grid grid-cols-[auto_minmax(0,1fr)] gap-x-4 gap-y-1 text-sm break-words">
            <dt class="text-muted">Why</dt>
            <dd data-testid="computer-why">
              {halted
                ? 'Stopped by a person (you or someone else): it runs again once started; its automations are paused.'
                : c.status?.stopReason
                  ? STOP_WORDS[c.status.stopReason] ?? c.status.stopReason
                  : running
                    ? 'Running'
                    : (c.status?.conditions?.find((x) => x.status !== 'True')?.message ?? '–')}
            </dd>
            {c.status?.startFailure?.message && (
              <>
                <dt class="text-muted">Last start</dt>
                <dd class="text-danger">
                  failed {c.status.startFailure.consecutiveFailCount} times: {c.status.startFailure.message}
                </dd>
              </>
            )}
            <dt class="text-muted">Size</dt>
            <dd>
              {c.spec.cpu ?? 2} CPUs · {c.spec.memory ?? '4Gi'} memory · {c.spec.disk ?? '40Gi'} disk
            </dd>
            {c.status?.system && (
              <>
                <dt class="text-muted">In use</dt>
                <dd>
                  memory {bytes((c.status.system.memTotalBytes ?? 0) - (c.status.system.memAvailableBytes ?? 0))} of{' '}
                  {bytes(c.status.system.memTotalBytes)} · disk {bytes((c.status.system.diskTotalBytes ?? 0) - (c.status.system.diskFreeBytes ?? 0))} of{' '}
                  {bytes(c.status.system.diskTotalBytes)}
                </dd>
              </>
            )}
            <dt class="text-muted">Images</dt>
            <dd class="truncate">
              golden {c.status?.goldenImage || 'not chosen yet'} · runtime{' '}
              {c.status?.runtimeImage || 'not chosen yet'}
            </dd>
            <dt class="text-muted">Automations</dt>
            <dd>
              {halted
                ? 'Paused: the computer was stopped by a person'
                : c.status?.nextAutomationTime
                  ? `next due ${new Date(c.status.nextAutomationTime).toLocaleString()} (a sleeping computer starts shortly before)`
                  : 'none due'}
            </dd>
            <dt class="text-muted">Host</dt>
            <dd>{c.spec.nodeName || 'not placed yet'}</dd>
            <dt class="text-muted">Model spend</dt>
            <dd data-testid="computer-spend">
              <Spend ns={ns} name={name} />
            </dd>
          </dl>
          <p role="status" class="mt-2 h-5 text-sm text-muted">
            {message}
          </p>
        </section>
      )}
      <nav aria-label="Computer views" class="mt-4 flex gap-1 border-b border-border">
        {(['screen', 'files'] as const).map((v) => (
          <a
            key={v}
            href={`${base}?view=${v}`}
            aria-current={view === v ? 'page' : undefined}
            class={`-mb-px border-b-2 px-3 py-2 text-sm ${view === v ? 'border-accent font-semibold' : 'border-transparent text-muted'}`}
          >
            {v === 'screen' ? 'Screen' : 'Files'}
          </a>
        ))}
      </nav>
      <div class="mt-3">
        {!running ? (
          <NotRunning state={state} onStart={act('start')} />
        ) : view === 'screen' ? (
          <Screen ns={ns} name={name} />
        ) : (
          <Files ns={ns} name={name} dir={q.get('path') ?? '/home/dot'} file={q.get('file') ?? ''} base={base} />
        )}
      </div>
    </div>
  );
}

const startOfToday = () => {
  const d = new Date();
  d.setHours(0, 0, 0, 0);
  return d.toISOString();
};

/** What the Dot spent on its model today and in all, from the log: readable while the computer is off. */
function Spend({ ns, name }: { ns: string; name: string }) {
  const [spent, setSpent] = useState<{ today: number; total: number }>();
  const [error, setError] = useState('');
  useEffect(() => {
    const u = `${dotPath(ns, name)}/usage`;
    Promise.all([getJSON<{ spent_usd: number }>(`${u}?since=${encodeURIComponent(startOfToday())}`), getJSON<{ spent_usd: number }>(u)])
      .then(([t, a]) => setSpent({ today: t.spent_usd, total: a.spent_usd }))
      .catch((e) => setError(`could not be read: ${says(e, 'Reload the page to try again.')}`));
  }, [ns, name]);
  if (error) return <span class="text-danger">{error}</span>;
  if (!spent) return <span class="text-muted">–</span>;
  return (
    <span class="tabular-nums">
      ${spent.today.toFixed(2)} today · ${spent.total.toFixed(2)} in all
    </span>
  );
}

/** What a page that reads the guest shows while the computer is not running, with Start. */
export function NotRunning({ state, onStart, what = 'screen or files' }: { state?: string; onStart: () => Promise<void>; what?: string }) {
  const [error, setError] = useState('');
  return (
    <div class="grid aspect-video w-full place-items-center rounded-card border border-dashed border-border bg-surface-2 p-4 text-center" data-testid="computer-off">
      <div>
        <p class="font-medium">
          The computer is {(state ?? 'not made yet').toLowerCase()}, so there is no {what} to show.
        </p>
        <p class="mt-1 text-sm text-muted">Start it to see them; a message or a task starts it too.</p>
        <button type="button" class={`mt-3 ${btn.primary}`} onClick={() => onStart().catch((e) => setError((e as Error).message))}>
          Start the computer
        </button>
        {error && (
          <p role="alert" class="mt-2 text-sm text-danger">
            {error}
          </p>
        )}
      </div>
    </div>
  );
}

/** The desktop, as screenshots read every few seconds while the page is seen. */
function Screen({ ns, name }: { ns: string; name: string }) {
  const [frame, setFrame] = useState<{ url: string; at: number }>();
  const [error, setError] = useState('');
  const [now, setNow] = useState(Date.now());
  useEffect(() => {
    let live = true;
    let url = '';
    let timer: ReturnType<typeof setTimeout>;
    const read = async () => {
      if (document.visibilityState === 'visible') {
        try {
          const res = await fetch(`${dotPath(ns, name)}/screenshot`);
          if (!res.ok) {
            const body = await res.json().catch(() => ({}));
            throw new Error(body.message ?? `${res.status}`);
          }
          const blob = await res.blob();
          if (!live) return;
          const next = URL.createObjectURL(blob);
          if (url) URL.revokeObjectURL(url);
          url = next;
          setFrame({ url, at: Date.now() });
          setError('');
        } catch (e) {
          if (live) setError(`The screen could not be read: ${(e as Error).message}. Trying again.`);
        }
      }
      setNow(Date.now());
      if (live) timer = setTimeout(read, SCREEN_EVERY_MS);
    };
    void read();
    return () => {
      live = false;
      clearTimeout(timer);
      if (url) URL.revokeObjectURL(url);
    };
  }, [ns, name]);
  const stale = frame && now - frame.at > STALE_MS;
  return (
    <figure>
      <div class="relative aspect-video w-full overflow-hidden rounded-card border border-border bg-surface-2">
        {frame && <img src={frame.url} alt={`${name}'s desktop`} class="size-full object-contain" data-testid="screen" />}
        <span class="absolute top-2 left-2 rounded-card bg-danger px-2 py-0.5 text-xs font-semibold text-surface">LIVE</span>
      </div>
      <figcaption class="mt-1 h-5 text-sm text-muted">
        {error || (stale ? 'The picture is more than 15 s old.' : 'The Dot has control: nothing you do here reaches the computer.')}
      </figcaption>
    </figure>
  );
}

interface Entry {
  name: string;
  type: string;
  size: number;
  mtime?: string;
}

const join = (dir: string, n: string) => (dir.endsWith('/') ? dir + n : `${dir}/${n}`);
const parent = (p: string) => (p === '/home/dot' ? p : p.slice(0, p.lastIndexOf('/')) || '/home/dot');

/** A read-only walk through the Dot's home; the folder and the open file are in the address. */
function Files({ ns, name, dir, file, base }: { ns: string; name: string; dir: string; file: string; base: string }) {
  const [entries, setEntries] = useState<Entry[]>();
  const [error, setError] = useState('');
  useEffect(() => {
    const ctl = new AbortController();
    setEntries(undefined);
    setError('');
    getJSON<{ path: string; entries: Entry[] }>(`${dotPath(ns, name)}/files/list?path=${encodeURIComponent(dir)}`, ctl.signal)
      .then((l) => setEntries([...l.entries].sort((a, b) => (a.type === 'dir' ? 0 : 1) - (b.type === 'dir' ? 0 : 1) || a.name.localeCompare(b.name))))
      .catch((e) => !ctl.signal.aborted && setError(`The folder could not be read: ${says(e, 'Reload the page to try again.')}`));
    return () => ctl.abort();
  }, [ns, name, dir]);
  const href = (p: string, f = '') => `${base}?view=files&path=${encodeURIComponent(p)}${f ? `&file=${encodeURIComponent(f)}` : ''}`;
  const open = entries?.find((e) => join(dir, e.name) === file);
  return (
    <div class="grid gap-4 md:grid-cols-[18rem_1fr]">
      <div>
        <p class="truncate font-mono text-sm" data-testid="files-path">
          {dir}
        </p>
        {error && (
          <p role="alert" class="text-sm text-danger">
            {error}
          </p>
        )}
        <ul class="mt-2 flex flex-col text-sm" data-testid="files-list">
          {dir !== '/home/dot' && (
            <li>
              <a class="underline" href={href(parent(dir))}>
                .. (up)
              </a>
            </li>
          )}
          {entries?.map((e) => (
            <li key={e.name} class="flex gap-2">
              <a class="min-w-0 flex-1 truncate underline" href={e.type === 'dir' ? href(join(dir, e.name)) : href(dir, join(dir, e.name))}>
                {e.name}
                {e.type === 'dir' ? '/' : ''}
              </a>
              {e.type !== 'dir' && <span class="text-xs text-muted">{bytes(e.size)}</span>}
            </li>
          ))}
        </ul>
        {entries && entries.length === 0 && <p class="text-sm text-muted">This folder is empty.</p>}
      </div>
      <div>{file && <FileView ns={ns} name={name} path={file} size={open?.size} />}</div>
    </div>
  );
}

/**
 * Shows a text file as text and an image as a picture, as the files route
 * serves them (wire.FileTypeOf, read from the answer's type, not guessed
 * again here); anything else, a text over 1 MiB, an image over 8 MiB or a
 * text that holds a NUL byte, is a download only.
 */
function FileView({ ns, name, path, size }: { ns: string; name: string; path: string; size?: number }) {
  const url = `${dotPath(ns, name)}/files?path=${encodeURIComponent(path)}`;
  const [shown, setShown] = useState<{ kind: 'text'; text: string } | { kind: 'image'; url: string } | { kind: 'download'; why: string }>();
  const [error, setError] = useState('');
  const objectUrl = useRef('');
  useEffect(() => {
    const ctl = new AbortController();
    setShown(undefined);
    setError('');
    (async () => {
      if (size !== undefined && size > MAX_IMAGE) return setShown({ kind: 'download', why: 'It is too large to show here.' });
      const res = await fetch(url, { signal: ctl.signal });
      if (!res.ok) {
        const body = await res.json().catch(() => ({}));
        throw new Error(body.message ?? `${res.status}`);
      }
      const type = res.headers.get('Content-Type') ?? '';
      const len = Number(res.headers.get('Content-Length') ?? size ?? 0);
      if (type.startsWith('image/')) {
        const blob = await res.blob();
        objectUrl.current = URL.createObjectURL(blob);
        return setShown({ kind: 'image', url: objectUrl.current });
      }
      if (type.startsWith('text/plain') && len <= MAX_TEXT) {
        const text = await res.text();
        if (text.includes('\u0000')) return setShown({ kind: 'download', why: 'It holds binary data.' });
        return setShown({ kind: 'text', text });
      }
      ctl.abort();
      setShown({ kind: 'download', why: type.startsWith('text/plain') ? 'It is too large to show here.' : 'It is not text or a picture.' });
    })().catch((e) => !ctl.signal.aborted && setError((e as Error).message));
    return () => {
      ctl.abort();
      if (objectUrl.current) URL.revokeObjectURL(objectUrl.current);
      objectUrl.current = '';
    };
  }, [url, size]);
  const fileName = path.slice(path.lastIndexOf('/') + 1);
  return (
    <div class="rounded-card border border-border bg-surface p-3" data-testid="file-view">
      <div class="flex items-center gap-2">
        <p class="min-w-0 flex-1 truncate font-mono text-sm">{path}</p>
        <a href={url} download={fileName} class={btn.plain}>
          Download
        </a>
      </div>
      {error && (
        <p role="alert" class="mt-2 text-sm text-danger">
          {error}
        </p>
      )}
      {shown?.kind === 'text' && (
        <pre tabIndex={0} class="mt-2 max-h-[60vh] overflow-auto rounded-card bg-surface-2 p-2 font-mono text-xs whitespace-pre-wrap" data-testid="file-text">
          {shown.text}
        </pre>
      )}
      {shown?.kind === 'image' && <img src={shown.url} alt={fileName} class="mt-2 max-h-[60vh] max-w-full" />}
      {shown?.kind === 'download' && <p class="mt-2 text-sm text-muted">{shown.why} Download it to open it.</p>}
    </div>
  );
}


/**
 * The computer beside the chat (from 1024 px; a strip above it below that):
 * the desktop while it runs, else its state and Start.
 */
export function ComputerPanel({ ns, name }: { ns: string; name: string }) {
  const c = useCell(computers).items.get(`${ns}/${name}`);
  const state = c?.status?.state;
  const running = state === 'RUNNING';
  const [error, setError] = useState('');
  const start = () => power(ns, name, 'start').catch((e) => setError((e as Error).message));
  return (
    <aside aria-label={`${name}'s computer`} class="border-b border-border bg-surface px-4 py-2 lg:w-96 lg:shrink-0 lg:overflow-y-auto lg:border-b-0 lg:border-l lg:py-4" data-testid="computer-panel">
      <div class="flex items-center gap-2 text-sm">
        <span class="font-medium">Computer</span>
        <span class="text-muted">{(state ?? 'not made yet').toLowerCase()}</span>
        {!running && (
          <button type="button" class={`ml-auto ${btn.plain}`} onClick={() => void start()}>
            Start
          </button>
        )}
        <a class={`${running ? 'ml-auto' : ''} text-accent underline`} href={dotHref(ns, name, 'computer')}>
          Open
        </a>
      </div>
      {error && (
        <p role="alert" class="text-sm text-danger">
          {error}
        </p>
      )}
      {running && (
        <div class="mt-2 hidden lg:block">
          <Screen ns={ns} name={name} />
        </div>
      )}
    </aside>
  );
}
