import { useEffect, useMemo, useRef, useState } from 'preact/hooks';
import { dotPath, getJSON, says } from '../lib/api';
import { onCatchUp, onStreamEvent } from '../lib/live';
import { btn, input } from '../lib/ui';
import type { ActivityEvent, ActivityFamily } from '../lib/types';

const PAGE = 200;

type Answer = { events: ActivityEvent[]; families: ActivityFamily[] };

const TONE: Record<string, string> = {
  chat: 'text-accent',
  tasks: 'text-ok',
  approvals: 'text-warn',
  tools: 'text-muted',
};

/**
 * The whole log of a Dot as readable lines: the words are the activity
 * route's (internal/eventtext, the command line's), the families its chips.
 */
export function Activity({ ns, name }: { ns: string; name: string }) {
  const [families, setFamilies] = useState<ActivityFamily[]>([]);
  // The families left out; none at first, so every type is read.
  const [off, setOff] = useState<Set<string>>(new Set());
  const [events, setEvents] = useState<ActivityEvent[]>([]); // newest first
  const [atStart, setAtStart] = useState(false);
  const [loading, setLoading] = useState(false);
  const [error, setError] = useState('');
  const [search, setSearch] = useState('');
  const [oldestFirst, setOldestFirst] = useState(false);
  const held = useRef<ActivityEvent[]>([]);
  held.current = events;

  const types = useMemo(() => {
    if (!off.size) return '';
    return families
      .filter((f) => !off.has(f.name))
      .flatMap((f) => f.types)
      .join(',');
  }, [families, off]);
  const nothingChosen = families.length > 0 && off.size === families.length;
  const q = (extra: string) => `${dotPath(ns, name)}/activity?${extra}${types ? `&types=${types}` : ''}`;

  async function older(reset = false) {
    if (nothingChosen) {
      setEvents([]);
      setAtStart(true);
      return;
    }
    setLoading(true);
    setError('');
    try {
      const oldest = reset ? undefined : held.current.at(-1)?.id;
      const a = await getJSON<Answer>(q(`order=desc&limit=${PAGE}${oldest ? `&before=${oldest}` : ''}`));
      if (!families.length) setFamilies(a.families);
      setEvents((prev) => (reset ? a.events : [...prev, ...a.events]));
      setAtStart(a.events.length < PAGE);
    } catch (e) {
      setError(`The log could not be read: ${says(e, 'Reload the page, or Load older events, to try again.')}`);
    } finally {
      setLoading(false);
    }
  }

  // The chosen families are the request's types: read again when they change.
  useEffect(() => {
    void older(true);
  }, [ns, name, types, nothingChosen]);

  // Live: what the stream says of this Dot, read through the route so it
  // has its words and only the chosen types.
  useEffect(() => {
    let reading = false;
    const newer = async () => {
      if (reading || nothingChosen) return;
      reading = true;
      try {
        for (;;) {
          const newest = held.current[0]?.id ?? 0;
          const a = await getJSON<Answer>(q(`order=asc&limit=1000&after=${newest}`));
          if (a.events.length) setEvents((prev) => [...a.events.reverse().filter((e) => e.id > (prev[0]?.id ?? 0)), ...prev]);
          if (a.events.length < 1000) break;
        }
      } catch {
        /* the next event tries again */
      } finally {
        reading = false;
      }
    };
    const stop = onStreamEvent((e) => e.namespace === ns && e.dot === name && void newer());
    const stopCatchUp = onCatchUp(() => void newer());
    return () => {
      stop();
      stopCatchUp();
    };
  }, [ns, name, types, nothingChosen]);

  const needle = search.trim().toLowerCase();
  const shown = useMemo(() => {
    const hit = needle ? events.filter((e) => `${e.text} ${e.type}`.toLowerCase().includes(needle)) : events;
    return oldestFirst ? [...hit].reverse() : hit;
  }, [events, needle, oldestFirst]);

  function exportLines() {
    const rows = [...shown].sort((a, b) => a.id - b.id);
    if (!rows.length) return;
    // The events as stored, without the page's words.
    const text = rows.map(({ text: _t, family: _f, ...stored }) => JSON.stringify(stored)).join('\n') + '\n';
    const a = document.createElement('a');
    a.href = URL.createObjectURL(new Blob([text], { type: 'application/x-ndjson' }));
    a.download = `${ns}-${name}-events-${rows[0].id}-${rows[rows.length - 1].id}.jsonl`;
    a.click();
    setTimeout(() => URL.revokeObjectURL(a.href), 1000);
  }

  return (
    <div class="mx-auto max-w-5xl p-4 md:p-6">
      <h2 class="sr-only">Activity</h2>
      <div role="group" aria-label="Families of events" class="flex flex-wrap gap-2" data-testid="family-chips">
        {families.map((f) => {
          const on = !off.has(f.name);
          return (
            <button
              key={f.name}
              type="button"
              aria-pressed={on}
              title={f.types.join(', ')}
              class={`rounded-full border px-3 py-1 text-sm capitalize ${on ? 'border-accent bg-accent text-accent-fg' : 'border-border text-muted'}`}
              onClick={() =>
                setOff((prev) => {
                  const next = new Set(prev);
                  if (on) next.add(f.name);
                  else next.delete(f.name);
                  return next;
                })
              }
            >
              {f.name}
            </button>
          );
        })}
      </div>
      <div class="mt-3 flex flex-wrap items-center gap-2">
        <input
          type="search"
          class={`w-full min-w-0 sm:w-auto sm:flex-1 ${input}`}
          placeholder="Search the events read so far"
          aria-label="Search the events read so far"
          aria-describedby="search-note"
          value={search}
          onInput={(e) => setSearch((e.target as HTMLInputElement).value)}
        />
        <button type="button" class={btn.plain} onClick={() => setOldestFirst((o) => !o)}>
          {oldestFirst ? 'Newest first' : 'Oldest first'}
        </button>
        <button type="button" class={btn.plain} onClick={exportLines} disabled={!shown.length}>
          Export JSON Lines
        </button>
      </div>
      <p id="search-note" class="mt-1 h-5 text-xs text-muted" data-testid="activity-count">
        {needle
          ? `${shown.length} of the ${events.length} events read so far match; older events are searched once loaded.`
          : `${events.length} events read${atStart ? ', the whole log' : ''}.`}
      </p>
      {error && (
        <p role="alert" class="mt-2 text-sm text-danger">
          {error}
        </p>
      )}
      <ol class="mt-2 flex flex-col divide-y divide-border rounded-card border border-border bg-surface" data-testid="activity-lines">
        {shown.map((e) => (
          <li key={e.id} class="flex gap-3 px-3 py-1.5 text-sm" data-testid="activity-line" data-id={e.id}>
            <time class="w-20 shrink-0 text-xs text-muted tabular-nums" dateTime={e.created_at} title={new Date(e.created_at).toLocaleString()}>
              {new Date(e.created_at).toLocaleTimeString()}
            </time>
            <span class={`w-20 shrink-0 text-xs capitalize ${TONE[e.family] ?? 'text-muted'}`}>{e.family}</span>
            <details class="min-w-0 flex-1">
              <summary class="cursor-pointer break-words">{e.text}</summary>
              <pre class="mt-1 overflow-x-auto rounded-card bg-surface-2 p-2 font-mono text-xs">
                {e.type} #{e.id} ({e.source}){'\n'}
                {JSON.stringify(e.data, null, 2)}
              </pre>
            </details>
          </li>
        ))}
      </ol>
      {!loading && events.length === 0 && !error && <p class="mt-2 text-muted">Nothing logged{off.size ? ' of the chosen families' : ''} yet.</p>}
      <div class="mt-3 h-9">
        {atStart ? (
          events.length > 0 && <p class="text-sm text-muted">This is where the log starts.</p>
        ) : (
          <button type="button" class={btn.plain} disabled={loading} onClick={() => void older()}>
            {loading ? 'Loading…' : 'Load older events'}
          </button>
        )}
      </div>
    </div>
  );
}
