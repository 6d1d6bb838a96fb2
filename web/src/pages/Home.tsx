import { useEffect, useState } from 'preact/hooks';
import { GROUP, dotPath, getJSON, mergePatch } from '../lib/api';
import { SPEND_EVENT_TYPES } from '../lib/generated';
import { SetupChecklist } from '../components/SetupChecklist';
import { approvals, computers, dots, inView, onStreamEvent, readInStep, scopedPath, useCell, viewNamespace, waiting } from '../lib/live';
import { chatHref } from '../lib/router';
import { ago, phaseLabel, phaseTone, reason, toneRing, toneText } from '../lib/format';
import { key, type Computer, type Dot, type LogEvent } from '../lib/types';
import { PowerActions } from '../components/PowerActions';
import { btn } from '../lib/ui';
import { scope, useCan } from '../lib/session';

/** Re-renders every 30 s so "2 min ago" stays true. */
function useNow() {
  const [now, setNow] = useState(Date.now());
  useEffect(() => {
    const t = setInterval(() => setNow(Date.now()), 30_000);
    return () => clearInterval(t);
  }, []);
  return now;
}

export function Home() {
  const ds = useCell(dots);
  const cs = useCell(computers);
  const as = useCell(approvals);
  const now = useNow();
  const chosen = useCell(viewNamespace);
  const can = useCan(scope() || 'default');
  const [query, setQuery] = useState('');
  const pending = waiting(as.items);
  const all = [...ds.items.values()].filter((d) => inView(d.metadata.namespace, chosen)).sort((a, b) => key(a.metadata).localeCompare(key(b.metadata)));
  const list = all.filter((d) => key(d.metadata).includes(query.trim().toLowerCase()));
  return (
    <div class="mx-auto max-w-6xl p-4 md:p-6">
      <div class="mb-4 flex flex-wrap items-center gap-3">
        <h1 class="text-2xl font-semibold">Home</h1>
        {chosen && <span class="text-sm text-muted">in {chosen}</span>}
        {can('create', 'dots') && (
          <a href="/new" class="rounded-card border border-border px-3 py-1.5 text-sm hover:bg-surface-2">
            Create a Dot
          </a>
        )}
        {all.length > 6 && (
          <input
            type="search"
            placeholder="Search Dots"
            aria-label="Search Dots"
            value={query}
            onInput={(e) => setQuery((e.target as HTMLInputElement).value)}
            class="ml-auto w-full rounded-card border border-border bg-surface px-3 py-1.5 sm:w-64"
          />
        )}
      </div>
      <QuotaLines chosen={chosen} />
      {ds.error && (
        <p role="status" class="mb-4 rounded-card border border-danger p-3 text-danger">
          {ds.error}
        </p>
      )}
      {!ds.loaded && !ds.error && <p class="text-muted">Loading your Dots…</p>}
      {ds.loaded && all.length === 0 && <Empty />}
      <ul class="grid grid-cols-1 gap-4 sm:grid-cols-2 xl:grid-cols-3" data-testid="dot-cards">
        {list.map((d) => (
          <DotCard
            key={d.metadata.uid}
            dot={d}
            computer={cs.items.get(key(d.metadata))}
            waitingCount={pending.filter((a) => a.metadata.namespace === d.metadata.namespace && a.spec.dotName === d.metadata.name).length}
            now={now}
          />
        ))}
      </ul>
      {/* Under the cards, so its arrival moves none of them. */}
      {/* The host's readiness is its owner's to fix: shown to who may read the doctor's report. */}
      {ds.loaded && can('get', '/dots/v1/doctor') && <SetupChecklist />}
    </div>
  );
}

/** A namespace's caps (its DotQuota) and what it uses of them. */
interface DotQuota {
  metadata: { namespace?: string; name: string };
  spec: { activeDots?: number; spendPerDayUSD?: string };
  status?: {
    activeDots?: number;
    spentTodayUSD?: string;
    day?: string;
    spendRequest?: { day: string; phase: 'Pending' | 'Approved' | 'Rejected'; message?: string; suggestedExtraUSD?: string };
  };
}

/** The DotQuotas in view, read again every 30 s and after an answer; none for who may not read them. */
function useQuotas(chosen: string): [DotQuota[], () => void] {
  const [quotas, setQuotas] = useState<DotQuota[]>([]);
  const [tick, setTick] = useState(0);
  useEffect(() => {
    let live = true;
    const read = () =>
      void getJSON<{ items: DotQuota[] }>(scopedPath('dotquotas'))
        .then((l) => live && setQuotas(l.items.filter((q) => inView(q.metadata.namespace, chosen))))
        .catch(() => live && setQuotas([]));
    read();
    const t = setInterval(read, 30_000);
    return () => {
      live = false;
      clearInterval(t);
    };
  }, [chosen, tick]);
  return [quotas, () => setTick((n) => n + 1)];
}

/** "Today: $X of $Y (namespace N)" and "A of B active Dots", where a namespace has a DotQuota. */
function QuotaLines({ chosen }: { chosen: string }) {
  const [quotas, reread] = useQuotas(chosen);
  if (quotas.length === 0) return null;
  return (
    <ul class="mb-4 flex flex-col gap-1 text-sm" data-testid="quotas">
      {quotas.map((q) => (
        <QuotaLine key={q.metadata.namespace ?? 'default'} q={q} reread={reread} />
      ))}
    </ul>
  );
}

function QuotaLine({ q, reread }: { q: DotQuota; reread: () => void }) {
  const ns = q.metadata.namespace ?? 'default';
  const can = useCan(ns);
  const [failed, setFailed] = useState('');
  // The question answered here (its day and words): not shown again while
  // the control plane takes the answer in; a new question of the day is.
  const [answered, setAnswered] = useState('');
  const spent = q.status?.spentTodayUSD ?? '0.00';
  const perDay = q.spec.spendPerDayUSD;
  const req = q.status?.spendRequest;
  const ask = req?.phase === 'Pending' && `${req.day} ${req.message}` !== answered ? req : undefined;
  const over = perDay !== undefined && Number(spent) >= Number(perDay);
  const full = q.spec.activeDots !== undefined && (q.status?.activeDots ?? 0) >= q.spec.activeDots;
  // The answer is the quota's spec.spendDecision for the day asked about.
  const answer = (decision: 'approve' | 'reject') =>
    void mergePatch(`${GROUP}/namespaces/${encodeURIComponent(ns)}/dotquotas/${encodeURIComponent(q.metadata.name)}`, {
      spec: { spendDecision: { day: ask!.day, decision, extraUSD: decision === 'approve' ? ask!.suggestedExtraUSD : null } },
    })
      .then(() => {
        setFailed('');
        setAnswered(`${ask!.day} ${ask!.message}`);
        setTimeout(reread, 1000);
      })
      .catch((e: Error) => setFailed(e.message));
  return (
    <li data-testid="quota" data-namespace={ns} class="flex flex-wrap items-center gap-x-4 gap-y-1">
      <span class={over ? 'font-medium text-warn' : 'text-muted'} data-testid="quota-spend">
        Today: ${spent}
        {perDay !== undefined ? ` of $${perDay}` : ''} (namespace {ns})
      </span>
      {q.spec.activeDots !== undefined && (
        <span class={full ? 'font-medium text-warn' : 'text-muted'} data-testid="quota-active">
          {q.status?.activeDots ?? 0} of {q.spec.activeDots} active Dots
        </span>
      )}
      {ask && (
        <span role="group" aria-label={`More spend for ${ns}`} class="flex flex-wrap items-center gap-2" data-testid="quota-ask">
          <span class="font-medium text-warn">{ask.message}</span>
          {can('patch', 'dotquotas') ? (
            <>
              <button type="button" class={btn.plain} onClick={() => answer('approve')}>
                Allow ${ask.suggestedExtraUSD} more
              </button>
              <button type="button" class={btn.plain} onClick={() => answer('reject')}>
                Refuse
              </button>
            </>
          ) : (
            <span class="text-muted">New work waits until the namespace's administrator allows more, or tomorrow.</span>
          )}
        </span>
      )}
      {failed && (
        <span role="status" class="text-danger">
          {failed}
        </span>
      )}
    </li>
  );
}

const startOfToday = () => {
  const d = new Date();
  d.setHours(0, 0, 0, 0);
  return d.toISOString();
};

/** What the Dot spent today; read again on its own spending events only. */
function useSpentToday(ns: string, name: string): number | undefined {
  const [spent, setSpent] = useState<number>();
  useEffect(() => {
    let live = true;
    const read = () =>
      void getJSON<{ spent_usd: number }>(`${dotPath(ns, name)}/usage?since=${encodeURIComponent(startOfToday())}`)
        .then((u) => live && setSpent(u.spent_usd))
        .catch(() => live && setSpent(undefined));
    const stopRead = readInStep(read);
    const stop = onStreamEvent((e) => {
      if (e.namespace === ns && e.dot === name && SPEND_EVENT_TYPES.includes(e.type)) read();
    });
    return () => {
      live = false;
      stop();
      stopRead();
    };
  }, [ns, name]);
  return spent;
}

// What counts as a Dot's activity on its card (ref 9.7): the newest chat,
// task, tool, approval or browser event, and the words for each.
const ACTIVITY: Record<string, string> = {
  'message.user': 'your message',
  'message.assistant': 'its answer',
  'tool.called': 'a tool call',
  'approval.requested': 'an approval asked',
  'approval.resolved': 'an approval answered',
  'task.created': 'a task made',
  'task.started': 'a task started',
  'task.progress': 'a task',
  'task.completed': 'a task done',
  'task.failed': 'a task failed',
  'task.cancelled': 'a task cancelled',
  'browser.identity.created': 'the browser',
  'browser.identity.deleted': 'the browser',
  'browser.identity.launched': 'the browser',
  'browser.identity.closed': 'the browser',
};
const ACTIVITY_TYPES = Object.keys(ACTIVITY).join(',');

type Last = { id: number; type: string; created_at: string } | null | 'unread';

/**
 * The Dot's newest activity: one read of its log (in step with the
 * stream), newest first and one event long, then the shared stream keeps
 * it (whichever is newer wins, so a live event that beats the read is
 * kept). undefined until read, null for a Dot that has done nothing yet.
 */
function useLastActivity(ns: string, name: string): Last | undefined {
  const [last, setLast] = useState<Last>();
  useEffect(() => {
    let live = true;
    const newer = (e?: { id: number; type: string; created_at: string }) =>
      setLast((prev) => {
        const held = prev && prev !== 'unread' ? prev : undefined;
        if (e && (!held || e.id > held.id)) return e;
        return held ?? null;
      });
    const read = () =>
      void getJSON<{ events: LogEvent[] }>(`${dotPath(ns, name)}/events?order=desc&limit=1&types=${ACTIVITY_TYPES}`)
        .then((a) => live && newer(a.events[0]))
        .catch(() => live && setLast((prev) => (prev && prev !== 'unread' ? prev : 'unread')));
    const stopRead = readInStep(read);
    const stop = onStreamEvent((e) => {
      if (e.namespace === ns && e.dot === name && e.type in ACTIVITY) newer(e);
    });
    return () => {
      live = false;
      stop();
      stopRead();
    };
  }, [ns, name]);
  return last;
}

function Empty() {
  return (
    <div class="rounded-card border border-dashed border-border bg-surface p-6">
      <h2 class="text-lg font-semibold">No Dots yet</h2>
      <p class="mt-2 text-muted">
        <a href="/new" class="text-accent underline">
          Create your first Dot
        </a>
        , or declare it and apply it; it shows here at once.
      </p>
      <pre tabIndex={0} class="mt-3 overflow-x-auto rounded-card bg-surface-2 p-3 font-mono text-sm">
        export KUBECONFIG=~/.invisible-dots/kubeconfig{'\n'}kubectl apply -f config/samples/dots_v1alpha1_dot.yaml
      </pre>
    </div>
  );
}

function DotCard({ dot, computer, waitingCount, now }: { dot: Dot; computer?: Computer; waitingCount: number; now: number }) {
  const computerState = computer?.status?.state;
  const { namespace = 'default', name } = dot.metadata;
  const phase = dot.status?.phase;
  const tone = phaseTone(phase);
  const why = reason(dot);
  const spent = useSpentToday(namespace, name);
  const last = useLastActivity(namespace, name);
  return (
    <li
      class="flex h-60 flex-col rounded-card border border-border bg-surface p-4"
      data-testid="dot-card"
      data-dot={`${namespace}/${name}`}
    >
      <div class="flex items-center gap-3">
        <span
          aria-hidden="true"
          class={`grid size-10 shrink-0 place-items-center rounded-full bg-surface-2 font-semibold uppercase ring-2 ${toneRing[tone]}`}
        >
          {name.slice(0, 1)}
        </span>
        <div class="min-w-0">
          <h2 class="truncate font-semibold">{name}</h2>
          <p class="truncate text-xs text-muted">{namespace}</p>
        </div>
        <span class={`ml-auto shrink-0 text-sm font-medium capitalize ${toneText[tone]}`} data-testid="dot-phase">
          {phaseLabel(phase)}
        </span>
      </div>
      {/* One line each, always there, so live updates never move the card. */}
      <p class="mt-2 h-5 truncate text-sm text-muted" title={why}>
        {why || (computerState ? `Computer ${computerState.toLowerCase()}` : ' ')}
      </p>
      <dl class="mt-2 grid grid-cols-[auto_1fr] gap-x-3 gap-y-1 text-sm">
        <dt class="text-muted">Model</dt>
        <dd class="truncate font-mono text-xs leading-5">{dot.spec.model?.id ?? 'not set'}</dd>
        <dt class="text-muted">Spent today</dt>
        <dd class="tabular-nums" data-testid="spent-today">{spent === undefined ? '–' : `$${spent.toFixed(2)}`}</dd>
        <dt class="text-muted">Last activity</dt>
        <dd class="truncate" data-testid="last-activity" title={last === 'unread' ? 'The event log could not be read; it is read again when you reload.' : undefined}>
          {last === undefined || last === 'unread' ? '–' : last === null ? 'none yet' : `${ago(last.created_at, now)} · ${ACTIVITY[last.type]}`}
        </dd>
        <dt class="text-muted">Approvals</dt>
        <dd>
          {waitingCount > 0 ? (
            <a href="/inbox" class="font-medium text-warn underline">
              {waitingCount} waiting
            </a>
          ) : (
            <span class="text-muted">none waiting</span>
          )}
        </dd>
      </dl>
      <div class="mt-auto flex items-center gap-2">
        <a href={chatHref(namespace, name)} class="rounded-card bg-accent px-3 py-1.5 text-sm font-medium text-accent-fg hover:opacity-90">
          Open chat
        </a>
        {computer && <PowerMenu ns={namespace} name={name} computer={computer} />}
      </div>
    </li>
  );
}

/**
 * The computer's power, from its card: the Computer page's own buttons
 * (PowerActions). It opens over the card, so the card does not grow; the
 * buttons are drawn once it is open, so Home reads the tasks (whether a
 * reboot has to ask) only for a menu someone opened.
 */
function PowerMenu({ ns, name, computer }: { ns: string; name: string; computer: Computer }) {
  const [open, setOpen] = useState(false);
  const [said, setSaid] = useState({ message: '', failed: false });
  const halted = computer.spec.runStrategy === 'Halted';
  const can = useCan(ns);
  if (!can('patch', 'computers')) return null;
  return (
    <details class="relative ml-auto" data-testid="power-menu" onToggle={(e) => setOpen((e.currentTarget as HTMLDetailsElement).open)}>
      <summary class={`${btn.plain} cursor-pointer list-none`} aria-label={`Power of ${name}'s computer`}>
        Computer ▾
      </summary>
      <div class="absolute right-0 bottom-full z-10 mb-1 flex w-64 flex-col gap-2 rounded-card border border-border bg-surface p-3 shadow-lg">
        <p class="text-xs text-muted">
          The computer is {(computer.status?.state ?? 'pending').toLowerCase()}
          {halted ? ', stopped by a person' : ''}.
        </p>
        {open && <PowerActions ns={ns} name={name} computer={computer} report={(message, failed) => setSaid({ message, failed })} />}
        <p role="status" class={`min-h-4 text-xs ${said.failed ? 'text-danger' : 'text-muted'}`}>
          {said.message}
        </p>
      </div>
    </details>
  );
}
