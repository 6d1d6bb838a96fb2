// The page's live state, shared by every view: the resources from one
// Kubernetes list+watch each, and the Dots API's stream of every Dot's log,
// one EventSource for the whole page.
import { useEffect, useState } from 'preact/hooks';
import { GROUP } from './api';
import type { Approval, Computer, Dot, LogEvent } from './types';
import { key } from './types';

type Listener = () => void;

/** A value views subscribe to. */
export class Cell<T> {
  private listeners = new Set<Listener>();
  constructor(private value: T) {}
  get = () => this.value;
  set(v: T) {
    this.value = v;
    this.listeners.forEach((l) => l());
  }
  subscribe(l: Listener) {
    this.listeners.add(l);
    return () => void this.listeners.delete(l);
  }
}

export function useCell<T>(cell: Cell<T>): T {
  const [, setTick] = useState(0);
  useEffect(() => cell.subscribe(() => setTick((n) => n + 1)), [cell]);
  return cell.get();
}

export type LinkState = 'connecting' | 'live' | 'down';

export interface Collection<T> {
  items: Map<string, T>;
  loaded: boolean;
  state: LinkState;
  error?: string;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/**
 * Keeps cell equal to the collection at path: a list, then a watch from its
 * resourceVersion, read as it comes; a watch that ends is resumed, and one
 * whose version is gone (410) lists again.
 */
async function listWatch<T extends { metadata: { namespace?: string; name: string; resourceVersion: string } }>(
  path: string,
  cell: Cell<Collection<T>>,
) {
  let rv = '';
  let failures = 0;
  for (;;) {
    try {
      if (!rv) {
        const res = await fetch(path, { headers: { Accept: 'application/json' } });
        if (!res.ok) throw new Error(`${res.status}`);
        const list = await res.json();
        const items = new Map<string, T>();
        for (const it of list.items as T[]) items.set(key(it.metadata), it);
        rv = list.metadata.resourceVersion;
        cell.set({ items, loaded: true, state: 'live' });
      }
      const res = await fetch(`${path}?watch=1&allowWatchBookmarks=true&resourceVersion=${rv}`, {
        headers: { Accept: 'application/json' },
      });
      if (!res.ok || !res.body) throw new Error(`${res.status}`);
      failures = 0;
      if (cell.get().state !== 'live') cell.set({ ...cell.get(), state: 'live', error: undefined });
      const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
      let buf = '';
      for (;;) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += value;
        let nl: number;
        while ((nl = buf.indexOf('\n')) >= 0) {
          const line = buf.slice(0, nl).trim();
          buf = buf.slice(nl + 1);
          if (!line) continue;
          const ev = JSON.parse(line) as { type: string; object: any };
          if (ev.type === 'ERROR') {
            // 410 Gone: the version is compacted away; list again.
            rv = '';
            break;
          }
          rv = ev.object?.metadata?.resourceVersion ?? rv;
          if (ev.type === 'BOOKMARK') continue;
          const items = new Map(cell.get().items);
          const k = key(ev.object.metadata);
          if (ev.type === 'DELETED') items.delete(k);
          else items.set(k, ev.object as T);
          cell.set({ ...cell.get(), items });
        }
        if (!rv) break;
      }
    } catch {
      failures++;
      cell.set({
        ...cell.get(),
        state: 'down',
        error: 'The API server cannot be reached; retrying. Is invisible-dots server running?',
      });
      if (failures > 3) rv = '';
    }
    await sleep(Math.min(500 * 2 ** failures, 10_000));
  }
}

const empty = <T>(): Collection<T> => ({ items: new Map(), loaded: false, state: 'connecting' });

export const dots = new Cell<Collection<Dot>>(empty());
export const computers = new Cell<Collection<Computer>>(empty());
export const approvals = new Cell<Collection<Approval>>(empty());
export const streamState = new Cell<LinkState>('connecting');

// The types the pages follow live; the stream names each message's type.
const STREAM_TYPES = ['message.user', 'message.assistant', 'tool.called', 'agent.state', 'approval.requested'];
const streamListeners = new Set<(e: LogEvent) => void>();

/** Calls fn with every event of the shared stream until the returned stop. */
export function onStreamEvent(fn: (e: LogEvent) => void) {
  streamListeners.add(fn);
  return () => void streamListeners.delete(fn);
}

function openStream() {
  // An EventSource resumes by itself with Last-Event-ID.
  const es = new EventSource(`/dots/v1/stream?types=${STREAM_TYPES.join(',')}`);
  es.onopen = () => streamState.set('live');
  es.onerror = () => streamState.set(es.readyState === EventSource.CLOSED ? 'down' : 'connecting');
  for (const t of STREAM_TYPES) {
    es.addEventListener(t, (m) => {
      const ev = JSON.parse((m as MessageEvent).data) as LogEvent;
      streamListeners.forEach((l) => l(ev));
    });
  }
  es.addEventListener('error', () => {
    if (es.readyState === EventSource.CLOSED) setTimeout(openStream, 3000);
  });
}

let started = false;
export function startLive() {
  if (started) return;
  started = true;
  void listWatch(`${GROUP}/dots`, dots);
  void listWatch(`${GROUP}/computers`, computers);
  void listWatch(`${GROUP}/approvals`, approvals);
  openStream();
}

/** The approvals that wait for the person, the one that waited longest first. */
export function waiting(all: Map<string, Approval>): Approval[] {
  return [...all.values()]
    .filter((a) => !a.spec.decision && (a.status?.phase ?? 'Pending') === 'Pending')
    .sort((a, b) => (a.metadata.creationTimestamp ?? '').localeCompare(b.metadata.creationTimestamp ?? ''));
}
