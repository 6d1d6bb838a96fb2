import { useEffect, useRef, useState } from 'preact/hooks';
import { GROUP, dotPath, getJSON, mergePatch, postJSON, says } from '../lib/api';
import { approvals, onCatchUp, onStreamEvent, useCell, useDotTasks, useRequestedTasks, waiting } from '../lib/live';
import { dotHref, navigate, taskHref } from '../lib/router';
import { ago } from '../lib/format';
import { Markdown } from '../lib/markdown';
import { btn, Confirm, input } from '../lib/ui';
import { ApprovalCard } from './Inbox';
import { dispatchOrder } from '../lib/order';
import { ENDED_TASK_PHASES, type EndedTaskPhase } from '../lib/generated';
import { taskEnded, taskStarted, type ActivityEvent, type Approval, type Task } from '../lib/types';
import { useCan } from '../lib/session';

const HISTORY_PAGE = 20;
const taskPath = (t: Task) =>
  `${GROUP}/namespaces/${encodeURIComponent(t.metadata.namespace ?? 'default')}/tasks/${encodeURIComponent(t.metadata.name)}`;

const phaseOf = (t: Task) => t.status?.phase ?? 'PENDING';
const isActive = (t: Task) => phaseOf(t) === 'RUNNING' || phaseOf(t) === 'WAITING_APPROVAL';
const isDone = (t: Task) => (ENDED_TASK_PHASES as readonly string[]).includes(phaseOf(t));

// History is in the order the tasks ended (status.completionTime), the last first.
const finishedAt = (t: Task) => taskEnded(t) ?? '';

function money(n?: number) {
  return `$${(n ?? 0).toFixed(2)}`;
}

function duration(fromIso?: string, now = Date.now()) {
  if (!fromIso) return '';
  const s = Math.max(0, Math.round((now - Date.parse(fromIso)) / 1000));
  if (s < 60) return `${s} s`;
  if (s < 3600) return `${Math.floor(s / 60)} min`;
  return `${Math.floor(s / 3600)} h ${Math.floor((s % 3600) / 60)} min`;
}

export function Tasks({ ns, name, open }: { ns: string; name: string; open?: string }) {
  // The Dot's tasks alone, picked by the API server with the Dot's label.
  const all = useDotTasks(name);
  const as = useCell(approvals);
  const [historyFilter, setHistoryFilter] = useState<'' | EndedTaskPhase>('');
  const [shown, setShown] = useState(HISTORY_PAGE);
  const [, tick] = useState(0);
  useEffect(() => {
    const t = setInterval(() => tick((n) => n + 1), 5000);
    return () => clearInterval(t);
  }, []);
  // A Dot of the same name in another namespace has the same label.
  const mine = [...all.items.values()].filter((t) => t.metadata.namespace === ns);
  const now = Date.now();
  const running = mine.filter(isActive).sort(dispatchOrder);
  const pending = mine.filter((t) => phaseOf(t) === 'PENDING' && !t.spec.cancelRequested).sort(dispatchOrder);
  const scheduled = pending.filter((t) => t.spec.scheduledAt && Date.parse(t.spec.scheduledAt) > now);
  const queue = pending.filter((t) => !scheduled.includes(t));
  const history = mine
    .filter((t) => isDone(t) || (phaseOf(t) === 'PENDING' && t.spec.cancelRequested))
    .filter((t) => !historyFilter || phaseOf(t) === historyFilter)
    .sort((a, b) => finishedAt(b).localeCompare(finishedAt(a)));
  const asks = waiting(as.items).filter((a) => a.metadata.namespace === ns && a.spec.dotName === name && a.spec.taskName);
  const askOf = (t: Task) => asks.filter((a) => a.spec.taskName === t.metadata.name);
  // A task's address names it alone: another Dot's task is not among this
  // one's, so it is not found.
  const openTask = open ? all.items.get(`${ns}/${open}`) : undefined;

  return (
    <div class="mx-auto max-w-4xl p-4 md:p-6">
      <NewTask ns={ns} name={name} />
      {all.error && <p class="mt-3 text-danger">{all.error}</p>}
      <Section title="Running" testid="tasks-running" empty="Nothing is running.">
        {running.map((t) => (
          <TaskCard key={t.metadata.uid} task={t} ns={ns} name={name} asks={askOf(t)}>
            <p class="mt-1 truncate text-sm" data-testid="task-progress">
              {t.status?.progress || 'Started; no progress reported yet.'}
            </p>
            <p class="mt-1 text-xs text-muted" data-testid="task-running-for">
              Spent {money(t.status?.spentUSD)} · {taskStarted(t) ? `running for ${duration(taskStarted(t), now)}` : 'being given to the Dot'}
            </p>
          </TaskCard>
        ))}
      </Section>
      <Section title="Scheduled" testid="tasks-scheduled" empty="Nothing is scheduled.">
        {scheduled.map((t) => (
          <TaskCard key={t.metadata.uid} task={t} ns={ns} name={name} asks={[]}>
            <p class="mt-1 text-xs text-muted">Due {new Date(t.spec.scheduledAt!).toLocaleString()}</p>
          </TaskCard>
        ))}
      </Section>
      <Section title="Queue" testid="tasks-queue" empty="The queue is empty." note="In the order the Dot takes them: the higher priority first, then the older.">
        {queue.map((t) => (
          <TaskCard key={t.metadata.uid} task={t} ns={ns} name={name} asks={[]} />
        ))}
      </Section>
      <section class="mt-6" aria-labelledby="history-h">
        <div class="flex flex-wrap items-center gap-2">
          <h2 id="history-h" class="text-lg font-semibold">
            History
          </h2>
          <label class="ml-auto text-sm text-muted" for="history-filter">
            Ended
          </label>
          <select
            id="history-filter"
            class={input}
            value={historyFilter}
            onChange={(e) => {
              setHistoryFilter((e.target as HTMLSelectElement).value as typeof historyFilter);
              setShown(HISTORY_PAGE);
            }}
          >
            <option value="">any way</option>
            {ENDED_TASK_PHASES.map((p) => (
              <option key={p} value={p}>
                {p.toLowerCase()}
              </option>
            ))}
          </select>
        </div>
        <ul class="mt-2 flex flex-col gap-2" data-testid="tasks-history">
          {history.slice(0, shown).map((t) => (
            <TaskCard key={t.metadata.uid} task={t} ns={ns} name={name} asks={[]}>
              <p class="mt-1 truncate text-sm text-muted">{t.status?.summary || t.status?.error || ''}</p>
            </TaskCard>
          ))}
        </ul>
        {all.loaded && history.length === 0 && <p class="mt-2 text-sm text-muted">No task has ended yet.</p>}
        {history.length > shown && (
          <button type="button" class={`mt-3 ${btn.plain}`} onClick={() => setShown((n) => n + HISTORY_PAGE)}>
            Show {Math.min(HISTORY_PAGE, history.length - shown)} more
          </button>
        )}
      </section>
      {open && <TaskDrawer ns={ns} name={name} id={open} task={openTask} loaded={all.loaded} asks={openTask ? askOf(openTask) : []} />}
    </div>
  );
}

function Section({ title, testid, empty, note, children }: { title: string; testid: string; empty: string; note?: string; children: any[] }) {
  const id = `${testid}-h`;
  return (
    <section class="mt-6" aria-labelledby={id}>
      <h2 id={id} class="text-lg font-semibold">
        {title}
      </h2>
      {note && <p class="text-xs text-muted">{note}</p>}
      <ul class="mt-2 flex flex-col gap-2" data-testid={testid}>
        {children}
      </ul>
      {children.length === 0 && <p class="mt-1 text-sm text-muted">{empty}</p>}
    </section>
  );
}

function TaskCard({ task: t, ns, name, asks, children }: { task: Task; ns: string; name: string; asks: Approval[]; children?: any }) {
  const phase = phaseOf(t);
  const cancellable = !isDone(t) && !t.spec.cancelRequested;
  const can = useCan(ns);
  return (
    <li class="rounded-card border border-border bg-surface p-3" data-testid="task-card" data-task={t.metadata.name}>
      <div class="flex flex-wrap items-baseline gap-x-2">
        <a href={taskHref(ns, name, t.metadata.name)} class="min-w-0 flex-1 truncate font-medium underline">
          {t.spec.description.split('\n')[0]}
        </a>
        <span class="text-xs text-muted">
          {phase.toLowerCase().replace('_', ' ')}
          {t.spec.cancelRequested && !isDone(t) ? ' · cancel asked' : ''}
          {t.spec.priority ? ` · priority ${t.spec.priority}` : ''} · {isDone(t) && t.status?.completionTime ? `ended ${ago(t.status.completionTime)}` : ago(t.metadata.creationTimestamp)}
        </span>
      </div>
      {children}
      {asks.length > 0 && (
        <ul class="mt-2 flex flex-col gap-2" aria-label="Waiting for your answer">
          {asks.map((a) => (
            <ApprovalCard key={a.metadata.uid} approval={a} />
          ))}
        </ul>
      )}
      {cancellable && can('patch', 'tasks') && (
        <div class="mt-2">
          <Confirm
            label="Cancel"
            question="Cancel this task? The Dot stops working on it."
            yes="Cancel the task"
            danger
            onYes={() => mergePatch(taskPath(t), { spec: { cancelRequested: true } }).then(() => undefined)}
          />
        </div>
      )}
    </li>
  );
}

function NewTask({ ns, name }: { ns: string; name: string }) {
  const [openForm, setOpen] = useState(false);
  const [description, setDescription] = useState('');
  const [priority, setPriority] = useState(0);
  const [when, setWhen] = useState('');
  const [error, setError] = useState('');
  const [busy, setBusy] = useState(false);
  const can = useCan(ns);
  if (!can('create', 'tasks')) return null;
  if (!openForm)
    return (
      <div class="flex items-center">
        <h2 class="sr-only">Tasks</h2>
        <button type="button" class={btn.primary} onClick={() => setOpen(true)}>
          New task
        </button>
      </div>
    );
  async function submit(e: Event) {
    e.preventDefault();
    setBusy(true);
    setError('');
    try {
      const t = await postJSON<Task>(`${GROUP}/namespaces/${encodeURIComponent(ns)}/tasks`, {
        apiVersion: 'dots.invisible.dev/v1alpha1',
        kind: 'Task',
        metadata: { generateName: `${name}-` },
        spec: {
          dotName: name,
          description,
          priority: priority || undefined,
          scheduledAt: when ? new Date(when).toISOString().replace(/\.\d+Z$/, 'Z') : undefined,
        },
      });
      setDescription('');
      setPriority(0);
      setWhen('');
      setOpen(false);
      navigate(taskHref(ns, name, t.metadata.name));
    } catch (err) {
      setError(`${(err as Error).message} Change it and try again.`);
    } finally {
      setBusy(false);
    }
  }
  return (
    <form class="rounded-card border border-border bg-surface p-4" onSubmit={submit} aria-label="New task">
      <h2 class="font-semibold">New task for {name}</h2>
      <label class="mt-2 block text-sm" for="task-description">
        What to do
      </label>
      <textarea
        id="task-description"
        class={`mt-1 w-full ${input}`}
        rows={3}
        required
        autoFocus
        value={description}
        onInput={(e) => setDescription((e.target as HTMLTextAreaElement).value)}
      />
      <div class="mt-2 flex flex-wrap gap-4">
        <label class="text-sm">
          Priority (-100 to 100, higher first)
          <input
            type="number"
            min={-100}
            max={100}
            class={`mt-1 block w-28 ${input}`}
            value={priority}
            onInput={(e) => setPriority(Number((e.target as HTMLInputElement).value))}
          />
        </label>
        <label class="text-sm">
          Not before (optional)
          <input type="datetime-local" class={`mt-1 block ${input}`} value={when} onInput={(e) => setWhen((e.target as HTMLInputElement).value)} />
        </label>
      </div>
      {error && (
        <p role="alert" class="mt-2 text-sm text-danger">
          {error}
        </p>
      )}
      <div class="mt-3 flex gap-2">
        <button type="submit" class={btn.primary} disabled={busy || !description.trim()}>
          Give it to {name}
        </button>
        <button type="button" class={btn.quiet} onClick={() => setOpen(false)}>
          Close
        </button>
      </div>
    </form>
  );
}

/** A task's own address: its state, its result or failure, and its story from the log. */
function TaskDrawer({ ns, name, id, task, loaded, asks }: { ns: string; name: string; id: string; task?: Task; loaded: boolean; asks: Approval[] }) {
  const panel = useRef<HTMLDivElement>(null);
  const [story, setStory] = useState<ActivityEvent[]>([]);
  const [error, setError] = useState('');
  const uid = task?.metadata.uid;
  const close = () => navigate(dotHref(ns, name, 'tasks'));

  useEffect(() => {
    const from = document.activeElement as HTMLElement | null;
    panel.current?.focus();
    const onKey = (e: KeyboardEvent) => e.key === 'Escape' && close();
    addEventListener('keydown', onKey);
    return () => {
      removeEventListener('keydown', onKey);
      // Back where the person was: the task's link, when it is still there.
      requestAnimationFrame(() => {
        const link = document.querySelector<HTMLElement>(`[data-task="${CSS.escape(id)}"] a`);
        (link ?? (from?.isConnected ? from : null))?.focus();
      });
    };
  }, [id]);

  // The story: every event that names the task, oldest first, then what the
  // live stream says of it.
  useEffect(() => {
    if (!uid) return;
    let last = 0;
    let live = true;
    const read = async () => {
      try {
        for (;;) {
          const page = await getJSON<{ events: ActivityEvent[] }>(
            `${dotPath(ns, name)}/activity?task=${encodeURIComponent(uid)}&after=${last}&limit=1000`,
          );
          if (!live) return;
          if (page.events.length) {
            last = page.events[page.events.length - 1].id;
            setStory((s) => [...s, ...page.events.filter((e) => !s.some((x) => x.id === e.id))]);
          }
          if (page.events.length < 1000) break;
        }
        setError('');
      } catch (e) {
        if (live) setError(`The story could not be read: ${says(e, 'Reload the page to try again.')}`);
      }
    };
    setStory([]);
    void read();
    const stop = onStreamEvent((e) => {
      if (e.namespace === ns && e.dot === name && e.data?.task_id === uid) void read();
    });
    const stopCatchUp = onCatchUp(() => void read());
    return () => {
      live = false;
      stop();
      stopCatchUp();
    };
  }, [uid, ns, name]);

  const phase = task ? phaseOf(task) : '';
  // The tasks this one asked other Dots for (delegate_task): of the Dot's
  // requests, picked by their label, those made in this task.
  const requests = useRequestedTasks(name);
  const asked = task
    ? [...requests.items.values()].filter((t) => t.metadata.namespace === ns && t.spec.requestedBy?.dot === name && t.spec.requestedBy.task === task.metadata.name)
    : [];
  const delegated = task?.status?.delegatedSpentUSD ?? 0;
  return (
    <div class="fixed inset-0 z-20 flex justify-end bg-fg/30" onClick={(e) => e.target === e.currentTarget && close()}>
      <div
        ref={panel}
        tabIndex={-1}
        role="dialog"
        aria-modal="true"
        aria-labelledby="task-drawer-title"
        class="flex h-full w-full max-w-xl flex-col overflow-y-auto border-l border-border bg-surface p-4 shadow-xl focus:outline-none"
        data-testid="task-drawer"
      >
        <div class="flex items-start gap-2">
          <h2 id="task-drawer-title" class="min-w-0 flex-1 text-lg font-semibold break-words">
            {task ? task.spec.description.split('\n')[0] : `Task ${id}`}
          </h2>
          <a href={dotHref(ns, name, 'tasks')} class={btn.quiet}>
            Close
          </a>
        </div>
        {!task && loaded && (
          <p role="alert" class="mt-3 text-danger">
            {name} has no task {id}. It may have been deleted, or it is another Dot's.
          </p>
        )}
        {task && (
          <>
            <p class="mt-1 text-sm text-muted" data-testid="task-state">
              {phase.toLowerCase().replace('_', ' ')} · spent {money(task.status?.spentUSD)}
              {delegated > 0 ? ` + ${money(delegated)} by the Dots it asked (${money((task.status?.spentUSD ?? 0) + delegated)} together)` : ''} · made{' '}
              {ago(task.metadata.creationTimestamp)}
              {taskStarted(task) ? ` · started ${ago(taskStarted(task))}` : ''}
              {task.status?.completionTime ? ` · ended ${ago(task.status.completionTime)}` : ''}
              {task.spec.priority ? ` · priority ${task.spec.priority}` : ''}
            </p>
            {task.spec.requestedBy && (
              <p class="mt-1 text-sm text-muted" data-testid="task-asked-by">
                asked by{' '}
                {task.spec.requestedBy.task ? (
                  <a class="underline" href={taskHref(ns, task.spec.requestedBy.dot, task.spec.requestedBy.task)}>
                    {task.spec.requestedBy.dot} (task {task.spec.requestedBy.task})
                  </a>
                ) : (
                  `${task.spec.requestedBy.dot} (from its chat)`
                )}
              </p>
            )}
            {asked.length > 0 && (
              <div class="mt-3" data-testid="task-asked">
                <h3 class="font-semibold">Asked of other Dots</h3>
                <ul class="mt-1 flex flex-col gap-1 text-sm">
                  {asked.map((t) => (
                    <li key={t.metadata.uid} class="flex flex-wrap gap-x-2" data-task={t.metadata.name}>
                      <a class="underline" href={taskHref(ns, t.spec.dotName, t.metadata.name)}>
                        {t.spec.dotName}: {t.spec.description.split('\n')[0]}
                      </a>
                      <span class="text-muted">
                        {phaseOf(t).toLowerCase().replace('_', ' ')} · spent {money(t.status?.spentUSD)}
                      </span>
                    </li>
                  ))}
                </ul>
              </div>
            )}
            {task.spec.description.includes('\n') && <p class="mt-2 text-sm whitespace-pre-wrap">{task.spec.description}</p>}
            {task.status?.summary && (
              <div class="mt-3 rounded-card border border-border p-3" data-testid="task-result">
                <Markdown text={task.status.summary} />
              </div>
            )}
            {task.status?.error && (
              <p class="mt-3 rounded-card border border-danger p-3 text-danger" data-testid="task-error">
                {task.status.error}
              </p>
            )}
            {asks.length > 0 && (
              <ul class="mt-3 flex flex-col gap-2" aria-label="Waiting for your answer">
                {asks.map((a) => (
                  <ApprovalCard key={a.metadata.uid} approval={a} />
                ))}
              </ul>
            )}
            <h3 class="mt-4 font-semibold">Story</h3>
            {error && (
              <p role="alert" class="text-sm text-danger">
                {error}
              </p>
            )}
            <ol class="mt-1 flex flex-col gap-1 text-sm" data-testid="task-story">
              {story.map((e) => (
                <li key={e.id} class="flex gap-2">
                  <time class="shrink-0 text-xs text-muted tabular-nums" dateTime={e.created_at}>
                    {new Date(e.created_at).toLocaleTimeString()}
                  </time>
                  <span class="min-w-0 break-words">{e.text}</span>
                </li>
              ))}
            </ol>
            {story.length === 0 && !error && <p class="text-sm text-muted">Nothing logged for this task yet.</p>}
          </>
        )}
      </div>
    </div>
  );
}
