// The page's live state, shared by every view: the resources from one
// Kubernetes list+watch each, and the Dots API's stream of every Dot's log,
// one EventSource for the whole page.
import { useEffect, useState } from 'preact/hooks';
import { GROUP } from './api';
import type { Approval, Computer, Dot, LogEvent, Task } from './types';
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

// A browser keeps at most six connections to one host over HTTP/1.1, across
// its tabs, and each watch and the stream hold one. A tab hidden for a while
// lets its connections go and takes them again when it is shown (the watches
// from their resourceVersion, the stream from its last event id), so other
// tabs of the client keep working.
const HIDDEN_GRACE_MS = 30_000;
let parked = false;
const parkListeners = new Set<() => void>();
function setParked(p: boolean) {
  if (parked === p) return;
  parked = p;
  parkListeners.forEach((l) => l());
}
let hideTimer: ReturnType<typeof setTimeout> | undefined;
document.addEventListener('visibilitychange', () => {
  clearTimeout(hideTimer);
  if (document.visibilityState === 'hidden') hideTimer = setTimeout(() => setParked(true), HIDDEN_GRACE_MS);
  else setParked(false);
});

/** Calls fn each time a parked tab takes its connections again (what came meanwhile may need a read). */
export function onUnpark(fn: () => void) {
  const l = () => !parked && fn();
  parkListeners.add(l);
  return () => void parkListeners.delete(l);
}

/** Resolves once the tab is not parked. */
function unparked(): Promise<void> {
  if (!parked) return Promise.resolve();
  return new Promise((resolve) => {
    const l = () => {
      if (!parked) {
        parkListeners.delete(l);
        resolve();
      }
    };
    parkListeners.add(l);
  });
}

/** An AbortSignal that fires when the tab is parked. */
function parkSignal(): { signal: AbortSignal; done: () => void } {
  const ctl = new AbortController();
  const l = () => parked && ctl.abort();
  parkListeners.add(l);
  return { signal: ctl.signal, done: () => void parkListeners.delete(l) };
}

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
    await unparked();
    const park = parkSignal();
    try {
      if (!rv) {
        const res = await fetch(path, { headers: { Accept: 'application/json' }, signal: park.signal });
        if (!res.ok) throw new Error(`${res.status}`);
        const list = await res.json();
        const items = new Map<string, T>();
        for (const it of list.items as T[]) items.set(key(it.metadata), it);
        rv = list.metadata.resourceVersion;
        cell.set({ items, loaded: true, state: 'live' });
      }
      const res = await fetch(`${path}?watch=1&allowWatchBookmarks=true&resourceVersion=${rv}`, {
        headers: { Accept: 'application/json' },
        signal: park.signal,
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
      if (park.signal.aborted) {
        park.done();
        continue;
      }
      failures++;
      cell.set({
        ...cell.get(),
        state: 'down',
        error: 'The API server cannot be reached; retrying. Is invisible-dots server running?',
      });
      if (failures > 3) rv = '';
    }
    park.done();
    await sleep(Math.min(500 * 2 ** failures, 10_000));
  }
}

const empty = <T>(): Collection<T> => ({ items: new Map(), loaded: false, state: 'connecting' });

export const dots = new Cell<Collection<Dot>>(empty());
export const computers = new Cell<Collection<Computer>>(empty());
export const approvals = new Cell<Collection<Approval>>(empty());
export const tasks = new Cell<Collection<Task>>(empty());
export const streamState = new Cell<LinkState>('connecting');

// The namespace the person chose to see ('' for all), kept in this browser.
const NS_KEY = 'dots.namespace';
export const viewNamespace = new Cell<string>(localStorage.getItem(NS_KEY) ?? '');
export function setViewNamespace(ns: string) {
  localStorage.setItem(NS_KEY, ns);
  viewNamespace.set(ns);
}
/** Whether a thing of namespace ns is in the chosen view. */
export const inView = (ns: string | undefined, chosen: string) => !chosen || (ns ?? 'default') === chosen;

// The types the pages follow live; the stream names each message's type.
const STREAM_TYPES = [
  'message.user',
  'message.assistant',
  'tool.called',
  'agent.state',
  'approval.requested',
  'approval.resolved',
  'task.created',
  'task.started',
  'task.progress',
  'task.completed',
  'task.failed',
  'task.cancelled',
  'computer.state',
];
const streamListeners = new Set<(e: LogEvent) => void>();

/** Calls fn with every event of the shared stream until the returned stop. */
export function onStreamEvent(fn: (e: LogEvent) => void) {
  streamListeners.add(fn);
  return () => void streamListeners.delete(fn);
}

// The id of the last event the stream gave, to resume a new EventSource
// from (one EventSource resumes by itself with Last-Event-ID).
let lastEventId = '';

async function openStream() {
  await unparked();
  const after = lastEventId ? `&after=${encodeURIComponent(lastEventId)}` : '';
  const es = new EventSource(`/dots/v1/stream?types=${STREAM_TYPES.join(',')}${after}`);
  const park = parkSignal();
  let closed = false;
  const reopen = (delay: number) => {
    if (closed) return;
    closed = true;
    es.close();
    park.done();
    setTimeout(() => void openStream(), delay);
  };
  park.signal.addEventListener('abort', () => reopen(0));
  es.onopen = () => streamState.set('live');
  es.onerror = () => {
    streamState.set(es.readyState === EventSource.CLOSED ? 'down' : 'connecting');
    if (es.readyState === EventSource.CLOSED) reopen(3000);
  };
  for (const t of STREAM_TYPES) {
    es.addEventListener(t, (m) => {
      const msg = m as MessageEvent;
      if (msg.lastEventId) lastEventId = msg.lastEventId;
      const ev = JSON.parse(msg.data) as LogEvent;
      streamListeners.forEach((l) => l(ev));
    });
  }
  // The first message of a fresh stream is an id alone, the resume point.
  es.addEventListener('message', (m) => {
    if ((m as MessageEvent).lastEventId) lastEventId = (m as MessageEvent).lastEventId;
  });
}

// The Tasks' watch starts with the first page that shows a Dot's tasks, so
// Home and the Inbox hold one connection fewer (a browser allows six per host).
let tasksStarted = false;
export function useTasks(): Collection<Task> {
  if (!tasksStarted) {
    tasksStarted = true;
    void listWatch(`${GROUP}/tasks`, tasks);
  }
  return useCell(tasks);
}

let started = false;
export function startLive() {
  if (started) return;
  started = true;
  void listWatch(`${GROUP}/dots`, dots);
  void listWatch(`${GROUP}/computers`, computers);
  void listWatch(`${GROUP}/approvals`, approvals);
  void openStream();
}

/** The approvals that wait for the person, the one that waited longest first. */
export function waiting(all: Map<string, Approval>): Approval[] {
  return [...all.values()]
    .filter((a) => !a.spec.decision && (a.status?.phase ?? 'Pending') === 'Pending')
    .sort((a, b) => (a.metadata.creationTimestamp ?? '').localeCompare(b.metadata.creationTimestamp ?? ''));
}
