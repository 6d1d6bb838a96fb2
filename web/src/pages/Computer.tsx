import { useEffect, useRef, useState } from 'preact/hooks';
import { ApiError, dotPath, getJSON, says } from '../lib/api';
import { computers, useCell } from '../lib/live';
import { power } from '../lib/power';
import { dotHref, useQuery } from '../lib/router';
import { btn } from '../lib/ui';
import { FrameView } from '../components/FrameView';
import { NotRunning } from '../components/NotRunning';
import { PowerActions } from '../components/PowerActions';
import type { Computer } from '../lib/types';

// What a file view shows in the page; anything larger is a download only.
const MAX_TEXT = 1 << 20;
const MAX_IMAGE = 8 << 20;

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

type View = 'screen' | 'files' | 'usage';
const VIEWS: View[] = ['screen', 'files', 'usage'];
const VIEW_WORDS: Record<View, string> = { screen: 'Screen', files: 'Files', usage: 'Usage' };

/**
 * Usage reads while the computer is off (ref 9.7): what it was given, what
 * it uses while it runs, its images, its automations, its host and what its
 * model spent.
 */
function Usage({ ns, name, computer: c, halted }: { ns: string; name: string; computer: Computer; halted: boolean }) {
  return (
    <section aria-label="Usage" class="rounded-card border border-border bg-surface p-4">
      <dl class="grid grid-cols-[auto_minmax(0,1fr)] gap-x-4 gap-y-1 text-sm break-words">
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
    </section>
  );
}

export function ComputerPage({ ns, name }: { ns: string; name: string }) {
  const cs = useCell(computers);
  const c = cs.items.get(`${ns}/${name}`);
  const q = useQuery();
  // ?view=screen|files|usage (ref 9.7); anything else, the old Browser
  // view's address included, is Screen.
  const asked = q.get('view');
  const view: View = asked === 'files' || asked === 'usage' ? asked : 'screen';
  const state = c?.status?.state;
  const running = state === 'RUNNING';
  const halted = c?.spec.runStrategy === 'Halted';
  const [message, setMessage] = useState('');
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
              <PowerActions ns={ns} name={name} computer={c} report={setMessage} />
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
          </dl>
          <p role="status" class="mt-2 h-5 text-sm text-muted">
            {message}
          </p>
        </section>
      )}
      <nav aria-label="Computer views" class="mt-4 flex gap-1 border-b border-border">
        {VIEWS.map((v) => (
          <a
            key={v}
            href={`${base}?view=${v}`}
            aria-current={view === v ? 'page' : undefined}
            class={`-mb-px border-b-2 px-3 py-2 text-sm ${view === v ? 'border-accent font-semibold' : 'border-transparent text-muted'}`}
          >
            {VIEW_WORDS[v]}
          </a>
        ))}
      </nav>
      <div class="mt-3">
        {view === 'usage' ? (
          c && <Usage ns={ns} name={name} computer={c} halted={halted} />
        ) : !running ? (
          <NotRunning ns={ns} state={state} onStart={() => power(ns, name, 'start')} />
        ) : view === 'screen' ? (
          <FrameView ns={ns} name={name} />
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
  // The route's own 409: the computer stopped before the watch said so.
  const [stopped, setStopped] = useState(false);
  useEffect(() => {
    const ctl = new AbortController();
    setEntries(undefined);
    setError('');
    setStopped(false);
    getJSON<{ path: string; entries: Entry[] }>(`${dotPath(ns, name)}/files/list?path=${encodeURIComponent(dir)}`, ctl.signal)
      .then((l) => setEntries([...l.entries].sort((a, b) => (a.type === 'dir' ? 0 : 1) - (b.type === 'dir' ? 0 : 1) || a.name.localeCompare(b.name))))
      .catch((e) => {
        if (ctl.signal.aborted) return;
        if (e instanceof ApiError && e.code === 'computer_stopped') setStopped(true);
        else setError(`The folder could not be read: ${says(e, 'Reload the page to try again.')}`);
      });
    return () => ctl.abort();
  }, [ns, name, dir]);
  if (stopped) return <NotRunning ns={ns} state="stopped" onStart={() => power(ns, name, 'start')} />;
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

