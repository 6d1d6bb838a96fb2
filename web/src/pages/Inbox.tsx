import { useRef, useState } from 'preact/hooks';
import { says } from '../lib/api';
import { SPEND_PERMISSION } from '../lib/generated';
import { AnsweredElsewhere, allowedAs, answerApproval, answeredHere, coveredTools, isDestructive, oneTimePermission, permissionPhrase, type Answer } from '../lib/approvals';
import { approvals, inView, useCell, useDotTasks, viewNamespace, waiting } from '../lib/live';
import { chatHref, dotHref, navigate, taskHref, useQuery } from '../lib/router';
import { dismiss, dotKey, taskKey, useAttention } from '../lib/attention';
import { ago } from '../lib/format';
import type { Approval } from '../lib/types';
import { FileDiffs } from '../components/Diff';
import { fileChanges } from '../lib/diff';
import { useCan } from '../lib/session';
import { accountWords, channelName } from '../lib/channels';


const HISTORY_PAGE = 50;

/** The address holds the Inbox's whole state: ?tab=history, ?dot=, ?permission=. */
function setQuery(q: URLSearchParams, key: string, value: string) {
  const next = new URLSearchParams(q);
  if (value) next.set(key, value);
  else next.delete(key);
  const s = next.toString();
  navigate(`/inbox${s ? `?${s}` : ''}`, true);
}

const answeredAt = (a: Approval) => a.status?.decidedAt ?? a.metadata.creationTimestamp ?? '';

export function Inbox() {
  const as = useCell(approvals);
  const mine = useCell(answeredHere);
  const chosen = useCell(viewNamespace);
  const q = useQuery();
  const tab = q.get('tab') === 'history' ? 'history' : 'waiting';
  const dotFilter = q.get('dot') ?? '';
  const permFilter = q.get('permission') ?? '';
  const [shown, setShown] = useState(HISTORY_PAGE);
  const filtered = (a: Approval) =>
    inView(a.metadata.namespace, chosen) &&
    (!dotFilter || `${a.metadata.namespace}/${a.spec.dotName}` === dotFilter) &&
    (!permFilter || a.spec.permission === permFilter);
  const attention = useAttention();
  const troubled = attention.dots.filter((d) => !dotFilter || `${d.metadata.namespace}/${d.metadata.name}` === dotFilter);
  const failed = attention.tasks.filter((t) => !dotFilter || `${t.metadata.namespace}/${t.spec.dotName}` === dotFilter);
  const relink = attention.channels.filter((c) => !dotFilter || `${c.metadata.namespace}/${c.spec.dotName}` === dotFilter);
  const open = waiting(as.items);
  const list = open.filter(filtered);
  const history = [...as.items.values()]
    .filter((a) => !open.includes(a) && filtered(a))
    .sort((a, b) => answeredAt(b).localeCompare(answeredAt(a)));
  const everyDot = [...new Set([...as.items.values()].map((a) => `${a.metadata.namespace}/${a.spec.dotName}`))].sort();
  const everyPermission = [...new Set([...as.items.values()].map((a) => a.spec.permission))].sort();
  const cards = useRef<HTMLUListElement>(null);
  // An answered card stays in its place, as a receipt, until the person
  // leaves the page: the list does not jump under the keyboard.
  const seen = useRef(new Map<string, true>());
  for (const a of list) seen.current.set(a.metadata.uid, true);
  const inPlace = [...as.items.values()]
    .filter((a) => seen.current.has(a.metadata.uid) && filtered(a))
    .sort((a, b) => (a.metadata.creationTimestamp ?? '').localeCompare(b.metadata.creationTimestamp ?? '') || a.metadata.name.localeCompare(b.metadata.name));

  // j/k move between the cards, a allows the one in focus once, d opens its
  // note to deny: only while the focus is in the list (WCAG 2.1.4).
  function onKey(e: KeyboardEvent) {
    const t = e.target as HTMLElement;
    if (t.closest('textarea, input') || e.ctrlKey || e.metaKey || e.altKey) return;
    const all = [...(cards.current?.querySelectorAll<HTMLElement>('[data-card]') ?? [])];
    const at = all.findIndex((c) => c.contains(t));
    if (e.key === 'j' || e.key === 'k') {
      e.preventDefault();
      all[Math.max(0, Math.min(all.length - 1, at + (e.key === 'j' ? 1 : -1)))]?.focus();
    } else if ((e.key === 'a' || e.key === 'd') && at >= 0) {
      e.preventDefault();
      const button = all[at].querySelector<HTMLButtonElement>(e.key === 'a' ? '[data-allow]' : '[data-deny]');
      if (e.key === 'a' && all[at].dataset.destructive !== undefined) button?.focus();
      else button?.click();
    }
  }

  return (
    <div class="mx-auto max-w-3xl p-4 md:p-6">
      <h1 class="text-2xl font-semibold">Inbox</h1>
      <p class="mt-1 text-sm text-muted">
        What your Dots wait for you to answer. Keys in the list: <kbd>j</kbd>/<kbd>k</kbd> move, <kbd>a</kbd> allows once,{' '}
        <kbd>d</kbd> denies.
      </p>
      <div class="mt-3 flex flex-wrap items-center gap-3">
        <nav aria-label="Inbox views" class="flex gap-1">
          {(['waiting', 'history'] as const).map((t) => (
            <a
              key={t}
              href={`/inbox?${new URLSearchParams({ ...(t === 'history' ? { tab: 'history' } : {}), ...(dotFilter ? { dot: dotFilter } : {}), ...(permFilter ? { permission: permFilter } : {}) })}`}
              aria-current={tab === t ? 'page' : undefined}
              class={`rounded-card px-3 py-1.5 text-sm ${tab === t ? 'bg-accent text-accent-fg' : 'border border-border'}`}
            >
              {t === 'waiting' ? `Needs you (${list.length + troubled.length + failed.length + relink.length})` : 'History'}
            </a>
          ))}
        </nav>
        <span class="flex items-center gap-1">
        <label class="text-sm" for="inbox-dot">
          Dot
        </label>
        <select id="inbox-dot" class="rounded-card border border-border bg-surface px-2 py-1" value={dotFilter} onChange={(e) => setQuery(q, 'dot', (e.target as HTMLSelectElement).value)}>
            <option value="">every Dot</option>
            {everyDot.map((d) => (
              <option key={d} value={d}>
                {d}
              </option>
            ))}
          </select>
        </span>
        <span class="flex items-center gap-1">
        <label class="text-sm" for="inbox-permission">
          Permission
        </label>
          <select
            id="inbox-permission"
            class="rounded-card border border-border bg-surface px-2 py-1"
            value={permFilter}
            onChange={(e) => setQuery(q, 'permission', (e.target as HTMLSelectElement).value)}
          >
            <option value="">every permission</option>
            {everyPermission.map((p) => (
              <option key={p} value={p}>
                {p}
              </option>
            ))}
          </select>
        </span>
      </div>
      {as.error && <p class="mt-3 text-danger">{as.error}</p>}
      {tab === 'waiting' && (
        <>
          {as.loaded && list.length === 0 && troubled.length === 0 && failed.length === 0 && relink.length === 0 && <p class="mt-6 text-muted">Nothing needs you now.</p>}
          <ul ref={cards} class="mt-4 flex flex-col gap-3" onKeyDown={onKey} data-testid="approvals">
            {inPlace.map((a) =>
              list.includes(a) ? (
                <ApprovalCard key={a.metadata.uid} approval={a} />
              ) : (
                <li key={a.metadata.uid} class="rounded-card border border-dashed border-border px-4 py-2 text-sm text-muted" data-testid="answered-receipt">
                  {a.spec.dotName}'s <code class="font-mono">{a.spec.tool}</code>:{' '}
                  {a.spec.decision === 'approve' ? allowedAs(a.spec) : a.spec.decision === 'reject' ? 'denied' : 'no longer waiting'}
                  {a.spec.decision && !mine.has(a.metadata.uid) && ' (answered somewhere else)'}
                </li>
              ),
            )}
          </ul>
          {attention.error && <p class="mt-3 text-sm text-danger">{attention.error}</p>}
          {troubled.length > 0 && (
            <section aria-labelledby="troubled-h" class="mt-6">
              <h2 id="troubled-h" class="font-semibold">
                Dots in trouble
              </h2>
              <ul class="mt-2 flex flex-col gap-2" data-testid="troubled-dots">
                {troubled.map((d) => (
                  <li key={d.metadata.uid} class="flex flex-wrap items-center gap-2 rounded-card border border-danger bg-surface p-3 text-sm">
                    <a class="font-medium underline" href={dotHref(d.metadata.namespace ?? 'default', d.metadata.name, 'settings')}>
                      {d.metadata.name}
                    </a>
                    <span class="min-w-0 flex-1 text-danger">{d.status?.error || 'is in ERROR'}</span>
                    <button type="button" class="rounded-card px-2 py-1 text-xs text-muted hover:bg-surface-2" onClick={() => dismiss(dotKey(d))}>
                      Dismiss
                    </button>
                  </li>
                ))}
              </ul>
            </section>
          )}
          {relink.length > 0 && (
            <section aria-labelledby="relink-h" class="mt-6">
              <h2 id="relink-h" class="font-semibold">
                Channels to link again
              </h2>
              <ul class="mt-2 flex flex-col gap-2" data-testid="relink-channels">
                {relink.map((c) => (
                  <li key={c.metadata.uid} class="flex flex-wrap items-center gap-2 rounded-card border border-warn bg-surface p-3 text-sm" data-channel={c.metadata.name}>
                    <a class="font-medium underline" href={dotHref(c.metadata.namespace ?? 'default', c.spec.dotName, 'channels')}>
                      {c.spec.dotName}'s {channelName(c.spec.type)}
                    </a>
                    {accountWords(c) && <span class="font-mono text-xs text-muted">{accountWords(c)}</span>}
                    <span class="min-w-0 flex-1">
                      {c.spec.type === 'telegram' ? 'needs a new token: nobody can talk to the Dot from there until it has one.' : 'needs linking again: nobody can talk to the Dot from there until it is.'}
                      {c.status?.detail && <span class="block text-xs text-muted">{c.status.detail}</span>}
                    </span>
                  </li>
                ))}
              </ul>
            </section>
          )}
          {failed.length > 0 && (
            <section aria-labelledby="failed-h" class="mt-6">
              <h2 id="failed-h" class="font-semibold">
                Tasks that failed in the last 24 hours
              </h2>
              <ul class="mt-2 flex flex-col gap-2" data-testid="failed-tasks">
                {failed.map((t) => (
                  <li key={t.metadata.uid} class="flex flex-wrap items-center gap-2 rounded-card border border-border bg-surface p-3 text-sm" data-task={t.metadata.name}>
                    <a class="font-medium underline" href={taskHref(t.metadata.namespace ?? 'default', t.spec.dotName, t.metadata.name)}>
                      {t.spec.description.split('\n')[0]}
                    </a>
                    <span class="text-xs text-muted">{t.spec.dotName}</span>
                    <span class="min-w-0 flex-1 text-danger">{t.status?.error}</span>
                    <button type="button" class="rounded-card px-2 py-1 text-xs text-muted hover:bg-surface-2" onClick={() => dismiss(taskKey(t))}>
                      Dismiss
                    </button>
                  </li>
                ))}
              </ul>
            </section>
          )}
        </>
      )}
      {tab === 'history' && (
        <>
          <ul class="mt-4 flex flex-col divide-y divide-border rounded-card border border-border bg-surface" data-testid="approval-history">
            {history.slice(0, shown).map((a) => (
              <li key={a.metadata.uid} class="px-3 py-2 text-sm" data-testid="history-row" data-approval={a.metadata.name}>
                <div class="flex flex-wrap items-baseline gap-x-2">
                  <a href={chatHref(a.metadata.namespace ?? 'default', a.spec.dotName)} class="font-medium underline">
                    {a.spec.dotName}
                  </a>
                  <code class="font-mono text-xs">{a.spec.tool}</code>
                  <span class={a.spec.decision === 'reject' ? 'text-danger' : 'text-ok'}>
                    {a.spec.decision === 'approve' ? allowedAs(a.spec) : a.spec.decision === 'reject' ? 'denied' : (a.status?.phase ?? '').toLowerCase()}
                  </span>
                  <span class="ml-auto text-xs text-muted">{ago(answeredAt(a))}</span>
                </div>
                <p class="text-xs text-muted">
                  {a.spec.permission}
                  {a.spec.note ? ` · note: ${a.spec.note}` : ''}
                </p>
              </li>
            ))}
          </ul>
          {as.loaded && history.length === 0 && <p class="mt-4 text-muted">Nothing answered yet.</p>}
          {history.length > shown && (
            <button type="button" class="mt-3 rounded-card border border-border px-3 py-1.5 text-sm" onClick={() => setShown((n) => n + HISTORY_PAGE)}>
              Show older answers
            </button>
          )}
        </>
      )}
    </div>
  );
}

export function ApprovalCard({ approval: a }: { approval: Approval }) {
  const [mode, setMode] = useState<'' | 'deny' | 'always'>('');
  const [note, setNote] = useState('');
  const [error, setError] = useState('');
  const [busy, setBusy] = useState(false);
  const ns = a.metadata.namespace ?? 'default';
  const can = useCan(ns);
  // A destructive card (a command, an identity's deletion, a file written
  // outside the workspace) is not allowed by a key alone: a moves the focus
  // to Allow once, whose press is the confirmation.
  const destructive = isDestructive(a.spec.permission, a.spec.tool, a.spec.arguments);
  // A task another Dot asked for: both Dots are named. The card names its
  // one task, a task of the approval's Dot: it is read by name from that
  // Dot's tasks (the watch the Dot's pages hold too), not from every task.
  const tasks = useDotTasks(a.spec.taskName ? a.spec.dotName : undefined);
  const askedBy = a.spec.taskName ? tasks.items.get(`${ns}/${a.spec.taskName}`)?.spec.requestedBy : undefined;

  async function answer(ans: Answer) {
    setBusy(true);
    setError('');
    try {
      await answerApproval(a, ans);
    } catch (err) {
      setError(err instanceof AnsweredElsewhere ? err.message : says(err, 'Try again.'));
    } finally {
      setBusy(false);
    }
  }

  return (
    <li
      data-card
      data-destructive={destructive ? '' : undefined}
      tabIndex={0}
      aria-label={a.spec.permission === SPEND_PERMISSION ? `Namespace ${ns} asks for more spend today` : `${a.spec.dotName} asks to use ${a.spec.tool}`}
      class="rounded-card border border-border bg-surface p-4 focus:ring-2 focus:ring-accent focus:outline-none"
    >
      <div class="flex flex-wrap items-baseline gap-x-2">
        {a.spec.permission === SPEND_PERMISSION ? (
          // The namespace asks, in the log of the Dot whose work waits first.
          <span class="font-semibold" data-testid="spend-question">
            Namespace {ns} reached its daily spend cap
          </span>
        ) : (
          <>
            <a href={chatHref(ns, a.spec.dotName)} class="font-semibold underline">
              {a.spec.dotName}
            </a>
            <span class="text-sm text-muted">wants to use</span>
            <code class="font-mono text-sm">{a.spec.tool}</code>
          </>
        )}
        <span class="ml-auto text-xs text-muted">{ago(a.metadata.creationTimestamp)}</span>
      </div>
      {askedBy && (
        <p class="mt-1 text-sm text-muted" data-testid="asked-by">
          asked by{' '}
          <a href={chatHref(ns, askedBy.dot)} class="underline">
            {askedBy.dot}
          </a>
          {askedBy.task ? (
            <>
              {' '}
              (task{' '}
              <a href={taskHref(ns, askedBy.dot, askedBy.task)} class="underline">
                {askedBy.task}
              </a>
              )
            </>
          ) : (
            ' (from its chat)'
          )}
        </p>
      )}
      <p class="mt-1 text-sm">
        Permission <code class="font-mono">{a.spec.permission}</code>, <span data-testid="permission-phrase">{permissionPhrase(a.spec.permission)}</span>
        {destructive && (
          <span data-testid="destructive" class="ml-2 rounded-card border border-danger px-1.5 text-xs text-danger">
            destructive
          </span>
        )}
        {a.spec.reason ? `: ${a.spec.reason}` : ''}
      </p>
      {a.spec.taint && (
        <p data-testid="taint" class="mt-1 rounded-card border border-danger px-2 py-1 text-sm">
          Asked because the Dot read untrusted input in this turn ({a.spec.taint.kind}): <span class="break-all font-mono text-xs">{a.spec.taint.source}</span>
        </p>
      )}
      {fileChanges(a.spec.tool, a.spec.arguments).length ? <FileDiffs tool={a.spec.tool} args={a.spec.arguments} /> : <CallSummary args={a.spec.arguments} />}
      {a.spec.arguments !== undefined && (
        <details class="mt-2 text-sm">
          <summary class="cursor-pointer text-muted">Details</summary>
          <pre tabIndex={0} class="mt-1 overflow-x-auto rounded-card bg-surface-2 p-2 font-mono text-xs">{JSON.stringify(masked(a.spec.arguments), null, 2)}</pre>
        </details>
      )}
      {mode === 'always' && (
        <p class="mt-3 rounded-card bg-surface-2 p-2 text-sm" role="note">
          Always allow sets <code class="font-mono">{a.spec.permission}</code> to allow in {a.spec.dotName}'s spec: it will not ask
          again for anything this permission covers: <span data-testid="always-covers">{coveredTools(a.spec.permission)}</span>.
        </p>
      )}
      {mode === 'deny' && (
        <div class="mt-3">
          <label class="text-sm text-muted" for={`note-${a.metadata.uid}`}>
            A note for the Dot (optional)
          </label>
          <textarea
            id={`note-${a.metadata.uid}`}
            class="mt-1 w-full rounded-card border border-border bg-surface px-2 py-1"
            value={note}
            autoFocus
            onInput={(e) => setNote((e.target as HTMLTextAreaElement).value)}
          />
        </div>
      )}
      {!can('patch', 'approvals') ? (
        <p class="mt-3 text-sm text-muted">Answering needs the editor role in namespace {ns}.</p>
      ) : (
        <div class="mt-3 flex flex-wrap gap-2">
          {mode === '' && (
            <>
              <button data-allow type="button" disabled={busy} class="rounded-card bg-accent px-3 py-1.5 text-sm text-accent-fg" onClick={() => answer({ decision: 'approve' })}>
                Allow once
              </button>
              {a.spec.taint && (
                <button
                  data-testid="allow-task"
                  type="button"
                  disabled={busy}
                  class="rounded-card border border-border px-3 py-1.5 text-sm"
                  onClick={() => answer({ decision: 'approve', scope: 'task' })}
                >
                  Allow for this {a.spec.taskName ? 'task' : 'turn'}
                </button>
              )}
              {!oneTimePermission(a.spec.permission) && (
                <button type="button" disabled={busy} class="rounded-card border border-border px-3 py-1.5 text-sm" onClick={() => setMode('always')}>
                  Always allow…
                </button>
              )}
              <button data-deny type="button" disabled={busy} class="rounded-card border border-danger px-3 py-1.5 text-sm text-danger" onClick={() => setMode('deny')}>
                Deny…
              </button>
            </>
          )}
          {mode === 'always' && (
            <>
              <button type="button" disabled={busy} class="rounded-card border border-border px-3 py-1.5 text-sm" onClick={() => answer({ decision: 'approve', always: true, alwaysFor: '1h' })}>
                For 1 hour
              </button>
              <button type="button" disabled={busy} class="rounded-card border border-border px-3 py-1.5 text-sm" onClick={() => answer({ decision: 'approve', always: true, alwaysFor: 'endOfDay' })}>
                Until the end of the day
              </button>
              <button type="button" disabled={busy} class="rounded-card bg-accent px-3 py-1.5 text-sm text-accent-fg" onClick={() => answer({ decision: 'approve', always: true })}>
                Always allow {a.spec.permission}
              </button>
            </>
          )}
          {mode === 'deny' && (
            <button type="button" disabled={busy} class="rounded-card bg-danger px-3 py-1.5 text-sm text-surface" onClick={() => answer({ decision: 'reject', note })}>
              Deny
            </button>
          )}
          {mode !== '' && (
            <button type="button" class="rounded-card px-3 py-1.5 text-sm text-muted" onClick={() => setMode('')}>
              Back
            </button>
          )}
        </div>
      )}
      {error && (
        <p role="alert" class="mt-2 text-sm text-danger">
          {error}
        </p>
      )}
    </li>
  );
}

// A password, a token or a secret in a call's arguments (a proxy's, say) is
// never shown.
const SECRET = /pass(word)?|secret|token|api[_-]?key|authorization/i;
function masked(v: unknown): unknown {
  if (Array.isArray(v)) return v.map(masked);
  if (v && typeof v === 'object') return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, SECRET.test(k) ? '••••••' : masked(x)]));
  return v;
}

/** The call in the form that reads best: a command, an address, a file, a schedule. */
function CallSummary({ args }: { args: unknown }) {
  if (!args || typeof args !== 'object') return null;
  const a = args as Record<string, unknown>;
  const str = (k: string) => (typeof a[k] === 'string' ? (a[k] as string) : '');
  const [label, text] = str('command')
    ? ['Command', str('command')]
    : str('url')
      ? ['Address', str('url')]
      : str('path')
        ? ['File', str('path')]
        : str('schedule')
          ? ['Schedule', str('schedule')]
          : ['', ''];
  if (!label) return null;
  return (
    <div class="mt-2 text-sm" data-testid="call-summary">
      <span class="text-muted">{label}</span>
      <pre tabIndex={0} class="mt-1 overflow-x-auto rounded-card bg-surface-2 p-2 font-mono text-xs whitespace-pre-wrap break-all">
        {label === 'Command' ? `$ ${text}` : text}
      </pre>
    </div>
  );
}
