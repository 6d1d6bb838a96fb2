import { useEffect, useLayoutEffect, useMemo, useRef, useState } from 'preact/hooks';
import { ApiError, dotPath, getJSON, postJSON, says } from '../lib/api';
import { approvals, computers, isWaiting, onCatchUp, onStreamEvent, useCell, waiting } from '../lib/live';
import { ApprovalCard } from './Inbox';
import { endedWhy } from '../lib/approvals';
import type { Approval, LogEvent, Message } from '../lib/types';
import { Markdown } from '../lib/markdown';
import { useCan } from '../lib/session';
import { CHANNEL_NAMES } from '../lib/generated';

/** A row of the thread: a message, or a quiet line of a tool the Dot used. */
type Row =
  | { kind: 'message'; id: number; role: 'user' | 'assistant'; text: string; at: string; via?: string }
  | { kind: 'tool'; id: number; tool: string; target?: string; ok: boolean; decision?: string; ms: number }
  | { kind: 'pending'; id: number; text: string; failed?: string; after: number }
  | { kind: 'approval'; id: number; requestId: string; tool: string; permission: string };

/** How a person answered an approval, from the log's approval.resolved. */
type Answer = { decision: string; always: boolean };

const draftKey = (ns: string, name: string) => `dots.draft.${ns}/${name}`;

function toolRow(e: LogEvent): Row | null {
  const d = e.data ?? {};
  if (d.task_id) return null; // a task's steps belong to the task's story
  if (e.type === 'approval.requested') return { kind: 'approval', id: e.id, requestId: d.approval_id, tool: d.tool, permission: d.permission };
  if (e.type !== 'tool.called') return null;
  return { kind: 'tool', id: e.id, tool: d.tool, target: d.target, ok: !!d.ok, decision: d.decision, ms: d.duration_ms ?? 0 };
}

function messageRow(m: Message): Row {
  return { kind: 'message', id: m.event_id, role: m.role, text: m.text, at: m.created_at, via: m.via };
}

export function Chat({ ns, name }: { ns: string; name: string }) {
  const cs = useCell(computers);
  const as = useCell(approvals);
  const can = useCan(ns);
  // What the Dot waits for: the newest thing in its thread, answerable here.
  const mine = [...as.items.values()].filter((a) => a.metadata.namespace === ns && a.spec.dotName === name && !a.spec.taskName);
  const computer = cs.items.get(`${ns}/${name}`);
  const [rows, setRows] = useState<Map<number, Row>>(new Map());
  const [answers, setAnswers] = useState<Map<string, Answer>>(new Map());
  const answered = (events: LogEvent[]) =>
    setAnswers((prev) => {
      const next = new Map(prev);
      for (const e of events) if (e.type === 'approval.resolved') next.set(e.data?.approval_id, { decision: e.data?.decision, always: !!e.data?.always });
      return next;
    });
  const [pending, setPending] = useState<Row[]>([]);
  const [loadError, setLoadError] = useState('');
  const [loaded, setLoaded] = useState(false);
  const [agentState, setAgentState] = useState('');
  const [waking, setWaking] = useState(false);
  const [draft, setDraft] = useState(() => localStorage.getItem(draftKey(ns, name)) ?? '');
  const [sending, setSending] = useState(false);
  const bottom = useRef<HTMLDivElement>(null);
  const box = useRef<HTMLTextAreaElement>(null);

  const add = (add: Row[]) =>
    setRows((prev) => {
      const next = new Map(prev);
      for (const r of add) next.set(r.id, r);
      return next;
    });

  // The conversation and the tool lines, both from the log; then live.
  useEffect(() => {
    const base = dotPath(ns, name);
    const ctl = new AbortController();
    const load = () => Promise.all([
      getJSON<{ messages: Message[] }>(`${base}/messages?order=desc&limit=100`, ctl.signal),
      getJSON<{ events: LogEvent[] }>(`${base}/events?types=tool.called,approval.requested,approval.resolved&order=desc&limit=200`, ctl.signal),
    ])
      .then(([m, e]) => {
        const oldest = m.messages.length ? m.messages[m.messages.length - 1].event_id : 0;
        add([
          ...m.messages.map(messageRow),
          ...e.events.filter((ev) => ev.id > oldest).map(toolRow).filter((r): r is Row => r !== null),
        ]);
        answered(e.events);
        setLoaded(true);
      })
      .catch((err: unknown) => {
        if (ctl.signal.aborted) return;
        setLoadError(
          err instanceof ApiError && err.status === 404
            ? `There is no Dot ${name} in ${ns}: choose one in the list of Dots.`
            : `The conversation could not be read: ${says(err, 'Reload the page to try again.')}`,
        );
        setLoaded(true);
      });
    void load();
    // What the stream may not have brought (a tab back from parking, the
    // page's first stream starting after this read) is read again.
    const stopCatchUp = onCatchUp(() => void load());
    const stop = onStreamEvent((ev) => {
      if (ev.namespace !== ns || ev.dot !== name) return;
      switch (ev.type) {
        case 'message.user':
        case 'message.assistant':
          add([{ kind: 'message', id: ev.id, role: ev.type === 'message.user' ? 'user' : 'assistant', text: ev.data?.text ?? '', at: ev.created_at, via: ev.data?.origin?.channel }]);
          if (ev.type === 'message.assistant') setWaking(false);
          break;
        case 'tool.called':
        case 'approval.requested': {
          const r = toolRow(ev);
          if (r) add([r]);
          break;
        }
        case 'approval.resolved':
          answered([ev]);
          break;
        case 'agent.state':
          setAgentState(ev.data?.state ?? '');
          setWaking(false);
          break;
      }
    });
    return () => {
      ctl.abort();
      stop();
      stopCatchUp();
    };
  }, [ns, name]);

  // A sent message stays as it was typed until the logged one replaces it.
  // The stream often brings the logged one before the POST answers with its
  // id: a person's message logged after the send, with the same text, takes
  // the place of the typed one then, so the message never shows twice.
  const thread = useMemo(() => {
    const logged = [...rows.values()].sort((a, b) => a.id - b.id);
    const taken = new Set<number>();
    const typed = pending.filter((p) => {
      if (p.kind !== 'pending' || p.failed) return true;
      const twin = logged.find((r) => r.kind === 'message' && r.role === 'user' && r.id > p.after && r.text === p.text && !taken.has(r.id));
      if (twin) taken.add(twin.id);
      return !twin;
    });
    return [...logged, ...typed];
  }, [rows, pending]);
  // An approval the log placed between messages is answered there; the
  // rest (one made by hand, or asked before the loaded page) below the thread.
  const placed = new Set(thread.flatMap((r) => (r.kind === 'approval' ? [r.requestId] : [])));
  const asks = waiting(as.items).filter((a) => mine.includes(a) && !(a.spec.requestID && placed.has(a.spec.requestID)));
  const approvalOf = (requestId: string) => mine.find((a) => a.spec.requestID === requestId);

  useLayoutEffect(() => {
    bottom.current?.scrollIntoView({ block: 'end' });
  }, [thread.length, asks.length]);

  useEffect(() => {
    localStorage.setItem(draftKey(ns, name), draft);
  }, [draft, ns, name]);

  const computerState = computer?.status?.state;
  const running = computerState === 'RUNNING';
  useEffect(() => {
    if (running && agentState) setWaking(false);
  }, [running, agentState]);

  async function send() {
    const text = draft.trim();
    if (!text || sending) return;
    setSending(true);
    const temp: Row = { kind: 'pending', id: Number.MAX_SAFE_INTEGER - pending.length, text, after: Math.max(0, ...rows.keys()) };
    setPending((p) => [...p, temp]);
    setDraft('');
    try {
      const res = await postJSON<{ event_id: number; queued: boolean }>(`${dotPath(ns, name)}/messages`, { text });
      // The logged message takes the place of the one shown.
      setPending((p) => p.filter((x) => x !== temp));
      add([{ kind: 'message', id: res.event_id, role: 'user', text, at: new Date().toISOString() }]);
      if (res.queued && !running) setWaking(true);
    } catch (err) {
      setPending((p) => p.map((x) => (x === temp ? { ...temp, failed: (err as Error).message } : x)));
      setDraft(text);
    } finally {
      setSending(false);
      box.current?.focus();
    }
  }

  const busy = agentState === 'THINKING' || agentState === 'EXECUTING' || agentState === 'PLANNING';
  const status = waking
    ? 'Waking up the computer… the Dot answers once it has started.'
    : busy
      ? agentState === 'EXECUTING'
        ? 'Working…'
        : 'Thinking…'
      : '';

  return (
    <div class="flex h-full flex-col">
      <section aria-label="Conversation" class="min-h-0 flex-1 overflow-y-auto px-4 py-4" data-testid="thread">
        <div class="mx-auto flex max-w-3xl flex-col gap-3">
          {loadError && (
            <p role="alert" class="rounded-card border border-danger p-3 text-danger">
              {loadError}
            </p>
          )}
          {loaded && !loadError && thread.length === 0 && (
            <p class="text-center text-muted">No messages yet.{can('create', 'dots/messages') ? ` Say hello to ${name}.` : ''}</p>
          )}
          {group(thread).map((g) =>
            Array.isArray(g) ? (
              <details key={g[0].id} class="px-2 text-xs text-muted" data-testid="tool-group">
                <summary class="cursor-pointer font-mono">
                  {g.length} tool calls: {[...new Set(g.map((r) => (r.kind === 'tool' ? r.tool : '')))].join(', ')}
                </summary>
                <div class="mt-1 flex flex-col gap-1">
                  {g.map((r) => (
                    <ThreadRow key={r.id} row={r} approvalOf={approvalOf} answers={answers} />
                  ))}
                </div>
              </details>
            ) : (
              <ThreadRow key={g.id} row={g} approvalOf={approvalOf} answers={answers} />
            ),
          )}
          {asks.length > 0 && (
            <ul class="flex flex-col gap-3" aria-label="Waiting for your answer" data-testid="chat-approvals">
              {asks.map((a) => (
                <ApprovalCard key={a.metadata.uid} approval={a} />
              ))}
            </ul>
          )}
          <div ref={bottom} />
        </div>
      </section>
      {/* A line always reserved for what the Dot is doing: no jump when it changes. */}
      <p role="status" aria-live="polite" class="mx-auto h-6 w-full max-w-3xl px-4 text-sm text-muted" data-testid="chat-status">
        {status}
      </p>
      {!can('create', 'dots/messages') ? (
        <p class="mx-auto w-full max-w-3xl px-4 pb-4 text-sm text-muted" data-testid="chat-read-only">
          You may read this chat; writing to {name} needs the editor role in namespace {ns}.
        </p>
      ) : (
        <form
          class="mx-auto flex w-full max-w-3xl items-end gap-2 px-4 pb-4"
          onSubmit={(e) => {
            e.preventDefault();
            void send();
          }}
        >
          <label for="chat-box" class="sr-only">
            Message to {name}
          </label>
          <textarea
            id="chat-box"
            ref={box}
            rows={1}
            value={draft}
            placeholder={`Message ${name}`}
            class="max-h-48 min-h-10 flex-1 resize-none rounded-card border border-border bg-surface px-3 py-2 [field-sizing:content]"
            onInput={(e) => setDraft((e.target as HTMLTextAreaElement).value)}
            onKeyDown={(e) => {
              if (e.key === 'Enter' && !e.shiftKey && !e.isComposing) {
                e.preventDefault();
                void send();
              }
            }}
          />
          <button
            type="submit"
            disabled={!draft.trim() || sending}
            class="h-10 rounded-card bg-accent px-4 font-medium text-accent-fg disabled:opacity-50"
          >
            Send
          </button>
        </form>
      )}
    </div>
  );
}

/** More than three tool lines in a row fold into one line that opens. */
function group(rows: Row[]): (Row | Row[])[] {
  const out: (Row | Row[])[] = [];
  let run: Row[] = [];
  const flush = () => {
    if (run.length > 3) out.push(run);
    else out.push(...run);
    run = [];
  };
  for (const r of rows) {
    if (r.kind === 'tool') run.push(r);
    else {
      flush();
      out.push(r);
    }
  }
  flush();
  return out;
}

function ThreadRow({ row, approvalOf, answers }: { row: Row; approvalOf: (requestId: string) => Approval | undefined; answers: Map<string, Answer> }) {
  if (row.kind === 'approval') return <ApprovalRow row={row} approval={approvalOf(row.requestId)} answer={answers.get(row.requestId)} />;
  if (row.kind === 'tool') {
    const how = row.decision === 'deny' ? 'denied' : row.ok ? '' : 'failed';
    return (
      <p class="truncate px-2 font-mono text-xs text-muted" data-testid="tool-line">
        <span aria-hidden="true">› </span>
        {row.tool}
        {row.target ? ` ${row.target}` : ''}
        {how && <span class="text-danger"> · {how}</span>}
        <span> · {row.ms < 1000 ? `${row.ms} ms` : `${(row.ms / 1000).toFixed(1)} s`}</span>
      </p>
    );
  }
  const mine = row.kind === 'pending' || row.role === 'user';
  if (!mine && row.kind === 'message') {
    return (
      <div class="max-w-[85%] self-start rounded-card border border-border bg-surface px-3 py-2" data-testid="message-assistant" data-event-id={row.id}>
        <Markdown text={row.text} />
      </div>
    );
  }
  return (
    <div
      class={`max-w-[85%] rounded-card px-3 py-2 whitespace-pre-wrap break-words ${
        mine ? 'self-end bg-bubble-user text-bubble-user-fg' : 'self-start border border-border bg-surface'
      } ${row.kind === 'pending' ? 'opacity-70' : ''}`}
      data-testid={row.kind === 'pending' ? 'message-pending' : `message-${row.role}`}
      data-event-id={row.kind === 'message' ? row.id : undefined}
    >
      {row.text}
      {row.kind === 'message' && row.via && (
        <span class="mt-1 block text-xs opacity-80" data-testid="message-via">
          via {CHANNEL_NAMES[row.via] ?? row.via}
        </span>
      )}
      {row.kind === 'pending' && row.failed && (
        <span role="alert" class="mt-1 block text-xs">
          Not sent: {row.failed} Your text is back in the box; send it again.
        </span>
      )}
    </div>
  );
}

/** An approval where it was asked: its card while it waits, then a receipt of the answer. */
function ApprovalRow({ row, approval, answer }: { row: Extract<Row, { kind: 'approval' }>; approval?: Approval; answer?: Answer }) {
  if (approval && isWaiting(approval) && !answer) {
    return (
      <ul class="flex flex-col" aria-label="Waiting for your answer" data-testid="placed-approval" data-event-id={row.id}>
        <ApprovalCard approval={approval} />
      </ul>
    );
  }
  const decision = answer?.decision ?? approval?.spec.decision;
  const always = answer?.always ?? approval?.spec.always;
  const words =
    decision === 'approve'
      ? always
        ? 'Allowed for good'
        : 'Allowed once'
      : decision === 'reject'
        ? 'Denied'
        : approval?.status?.phase === 'Expired'
          ? `No longer needed: ${endedWhy(approval)}`
          : 'Asked; no answer yet';
  const note = approval?.spec.note;
  return (
    <p class="px-2 text-xs text-muted" data-testid="approval-receipt" data-event-id={row.id}>
      <span aria-hidden="true">› </span>
      {row.tool} ({row.permission}): <span class={decision === 'reject' ? 'text-danger' : decision ? 'text-ok' : ''}>{words}</span>
      {note ? ` with the note "${note}"` : ''}
    </p>
  );
}
