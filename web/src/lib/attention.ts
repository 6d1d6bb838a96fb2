// What needs the person, the one count the rail's Inbox badge and the tab's
// title read: the approvals that wait, the Dots in ERROR, the tasks that
// failed in the last 24 hours, less what the person dismissed in this browser,
// and the Channels to link again (a revoked token: nobody can talk to the Dot
// from that chat until someone gives it a new one, so it is not dismissed).
import { getJSON, says } from './api';
import { Cell, approvals, channels, dots, inView, onCatchUp, onStreamEvent, scopedDotsPath, useCell, viewNamespace, waiting } from './live';
import { taskEnded, type Approval, type Channel, type Dot, type Task } from './types';
import { needsRelink } from './channels';

const DAY_MS = 24 * 3600_000;
const DISMISSED_KEY = 'dots.dismissed';

/** The tasks that failed, read for every Dot at once, and again on task.failed. */
const failedTasks = new Cell<{ items: Task[]; error?: string }>({ items: [] });
const dismissed = new Cell<Set<string>>(new Set(JSON.parse(localStorage.getItem(DISMISSED_KEY) ?? '[]')));

export const taskKey = (t: Task) => `task:${t.metadata.uid}`;
// A Dot's error is dismissed as that error: a new one shows again.
export const dotKey = (d: Dot) => `dot:${d.metadata.uid}:${d.status?.error ?? ''}`;

export function dismiss(key: string) {
  const next = new Set(dismissed.get());
  next.add(key);
  // Only what can still show is kept, so the list does not grow for ever.
  localStorage.setItem(DISMISSED_KEY, JSON.stringify([...next].slice(-500)));
  dismissed.set(next);
}

// When it failed (status.completionTime), not when it was made: a task made
// two days ago that failed today needs the person today.
const finished = (t: Task) => Date.parse(taskEnded(t) ?? '');

async function readFailed() {
  try {
    // The server filters (ref 9.6's finished_after): the day's failures,
    // not every task there is.
    const since = new Date(Date.now() - DAY_MS).toISOString().replace(/\.\d+Z$/, 'Z');
    const list = await getJSON<{ tasks: Task[] }>(`${scopedDotsPath('tasks')}?status=FAILED&finished_after=${encodeURIComponent(since)}`);
    failedTasks.set({ items: list.tasks });
  } catch (e) {
    failedTasks.set({ ...failedTasks.get(), error: `The failed tasks could not be read: ${says(e, 'They are read again when a task fails, or when you reload the page.')}` });
  }
}

let started = false;
function start() {
  if (started) return;
  started = true;
  void readFailed();
  onStreamEvent((e) => e.type === 'task.failed' && void readFailed());
  onCatchUp(() => void readFailed());
}

export interface Attention {
  approvals: Approval[];
  dots: Dot[];
  tasks: Task[];
  channels: Channel[];
  error?: string;
  count: number;
}

export function useAttention(): Attention {
  start();
  const as = useCell(approvals);
  const ds = useCell(dots);
  const fs = useCell(failedTasks);
  const cs = useCell(channels);
  const gone = useCell(dismissed);
  const chosen = useCell(viewNamespace);
  const now = Date.now();
  const a = waiting(as.items).filter((x) => inView(x.metadata.namespace, chosen));
  const d = [...ds.items.values()].filter((x) => x.status?.phase === 'ERROR' && inView(x.metadata.namespace, chosen) && !gone.has(dotKey(x)));
  const t = fs.items.filter((x) => now - finished(x) < DAY_MS && inView(x.metadata.namespace, chosen) && !gone.has(taskKey(x)));
  const c = [...cs.items.values()]
    .filter((x) => needsRelink(x) && inView(x.metadata.namespace, chosen))
    .sort((x, y) => (x.metadata.namespace ?? '').localeCompare(y.metadata.namespace ?? '') || x.metadata.name.localeCompare(y.metadata.name));
  return { approvals: a, dots: d, tasks: t, channels: c, error: fs.error, count: a.length + d.length + t.length + c.length };
}
