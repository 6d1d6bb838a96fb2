// The page's live state, shared by every view: the resources from one
// Kubernetes list each, then their watches and the Dots API's stream of every
// Dot's log, all over one connection for the whole page (runLive).
import { useEffect } from 'preact/hooks';
import { GROUP } from './api';
import { Cell, useCell } from './cell';
import { DOT_LABEL, REQUESTED_BY_LABEL } from './generated';
import { scope, sessionEnded } from './session';
import type { Approval, Channel, Computer, Dot, LogEvent, Task } from './types';
import { key } from './types';

export { Cell, useCell } from './cell';

/** A kind's collection as the person may list it: every namespace's, or their namespace's alone. */
export const scopedPath = (kind: string) => (scope() ? `${GROUP}/namespaces/${encodeURIComponent(scope())}/${kind}` : `${GROUP}/${kind}`);
/** The Dots API's path of the same scope (/dots/v1/namespaces/NS/KIND or /dots/v1/KIND). */
export const scopedDotsPath = (kind: string) => (scope() ? `/dots/v1/namespaces/${encodeURIComponent(scope())}/${kind}` : `/dots/v1/${kind}`);

export type LinkState = 'connecting' | 'live' | 'down';

export interface Collection<T> {
  items: Map<string, T>;
  loaded: boolean;
  state: LinkState;
  error?: string;
}

const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

// A browser keeps at most six connections to one host over HTTP/1.1, across
// its tabs, and a tab's live connection (runLive) holds one. A tab hidden for
// a while lets it go and takes it again when it is shown (the watches from
// their resourceVersion, the stream from its last event id), so other tabs of
// the client keep working.
const HIDDEN_GRACE_MS = 30_000;
let parked = false;
const parkListeners = new Set<() => void>();
function setParked(p: boolean) {
  if (parked === p) return;
  parked = p;
  parkListeners.forEach((l) => l());
  if (!parked) unparkListeners.forEach((l) => l());
}
let hideTimer: ReturnType<typeof setTimeout> | undefined;
document.addEventListener('visibilitychange', () => {
  clearTimeout(hideTimer);
  if (document.visibilityState === 'hidden') hideTimer = setTimeout(() => setParked(true), HIDDEN_GRACE_MS);
  else setParked(false);
});

// What a view reads again when a parked tab takes its connection again,
// and when the page's stream begins (once).
const unparkListeners = new Set<() => void>();
const beginListeners = new Set<() => void>();
// Whether the page's stream has begun: said where in the log it starts.
let begun = false;
// How long readInStep waits for the stream to begin before it reads anyway.
const BEGIN_WAIT_MS = 1500;

/**
 * Calls fn each time the stream starts where the view may have missed
 * events, so that it reads what it shows again: when a parked tab takes its
 * connection again, and when the page's first stream begins. That stream
 * starts at the end of the log as it stands then, and the view's first read
 * may have come before: what was logged in between (a message the person
 * just sent, the Dot's answer) comes from neither.
 */
export function onCatchUp(fn: () => void) {
  unparkListeners.add(fn);
  if (!begun) beginListeners.add(fn);
  return () => {
    unparkListeners.delete(fn);
    beginListeners.delete(fn);
  };
}

/**
 * Calls read in step with the stream: at once when the page's stream has
 * begun, else when it begins (or after BEGIN_WAIT_MS, and again when it
 * begins), and when a parked tab takes its connection again. For a view
 * of many reads (Home's cards), which onCatchUp would make read twice at
 * the page's load. Returns the stop.
 */
export function readInStep(read: () => void) {
  let timer: ReturnType<typeof setTimeout> | undefined;
  let begin: (() => void) | undefined;
  if (begun) read();
  else {
    begin = () => {
      clearTimeout(timer);
      read();
    };
    beginListeners.add(begin);
    timer = setTimeout(read, BEGIN_WAIT_MS);
  }
  unparkListeners.add(read);
  return () => {
    clearTimeout(timer);
    if (begin) beginListeners.delete(begin);
    unparkListeners.delete(read);
  };
}

function streamBegan() {
  begun = true;
  const ls = [...beginListeners];
  beginListeners.clear();
  ls.forEach((l) => l());
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

const empty = <T>(): Collection<T> => ({ items: new Map(), loaded: false, state: 'connecting' });

export const dots = new Cell<Collection<Dot>>(empty());
export const computers = new Cell<Collection<Computer>>(empty());
export const approvals = new Cell<Collection<Approval>>(empty());
export const channels = new Cell<Collection<Channel>>(empty());
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
  'browser.identity.created',
  'browser.identity.deleted',
  'browser.identity.launched',
  'browser.identity.closed',
];
const streamListeners = new Set<(e: LogEvent) => void>();

/** Calls fn with every event of the shared stream until the returned stop. */
export function onStreamEvent(fn: (e: LogEvent) => void) {
  streamListeners.add(fn);
  return () => void streamListeners.delete(fn);
}

// The id of the last event the stream gave, to resume from.
let lastEventId = '';

// A watch the connection carries: every object of a kind in the scope, or
// those a label selector picks (selector), from the resourceVersion it
// stands at ('' to list first), for as long as something holds it.
type Watched = { kind: string; selector: string; cell: Cell<Collection<any>>; rv: string; holders: number };
const watched: Watched[] = [];
// Aborts the open connection so that the next one takes a kind just added.
let reopen: AbortController | undefined;

function setState(state: LinkState, error?: string) {
  for (const w of watched) if (w.cell.get().state !== state || w.cell.get().error !== error) w.cell.set({ ...w.cell.get(), state, error });
  streamState.set(state);
}

/** Lists a kind: its items, and the resourceVersion its watch starts from. */
async function list(w: Watched, signal: AbortSignal) {
  const path = w.selector ? `${scopedPath(w.kind)}?labelSelector=${encodeURIComponent(w.selector)}` : scopedPath(w.kind);
  const res = await fetch(path, { headers: { Accept: 'application/json' }, signal });
  if (res.status === 401) sessionEnded((await res.json().catch(() => ({})))?.message ?? 'Your session ended.');
  if (!res.ok) throw new Error(`${res.status}`);
  const body = await res.json();
  const items = new Map<string, any>();
  for (const it of body.items) items.set(key(it.metadata), it);
  w.rv = body.metadata.resourceVersion;
  w.cell.set({ items, loaded: true, state: 'live' });
}

/** Applies one watch event to its kind's cell; false when the kind must be listed again. */
function applyWatch(kind: string, selector: string, ev: { type: string; object: any }): boolean {
  // One no longer held is still on the open connection until it opens again.
  const w = watched.find((x) => x.kind === kind && x.selector === selector);
  if (!w) return true;
  if (ev.type === 'ERROR') {
    // 410 Gone: the version is compacted away; list again.
    w.rv = '';
    return false;
  }
  w.rv = ev.object?.metadata?.resourceVersion ?? w.rv;
  if (ev.type === 'BOOKMARK') return true;
  const items = new Map(w.cell.get().items);
  const k = key(ev.object.metadata);
  if (ev.type === 'DELETED') items.delete(k);
  else items.set(k, ev.object);
  w.cell.set({ ...w.cell.get(), items });
  return true;
}

/**
 * Keeps every watched kind and the stream live over ONE connection, the web
 * server's live path (internal/webui/live.go says why: a browser allows six
 * HTTP/1.1 connections per origin across its tabs, and this server cannot
 * speak HTTP/2 to it). The kinds are listed here, then the connection
 * carries their watches from those versions and the stream from its last
 * event id. Whatever ends it (a watch that timed out, a compacted version,
 * the server gone, a kind added, the tab parked) opens it again from where
 * each part stood.
 */
async function runLive() {
  let failures = 0;
  for (;;) {
    await unparked();
    const park = parkSignal();
    const ctl = new AbortController();
    reopen = ctl;
    const stop = () => ctl.abort();
    park.signal.addEventListener('abort', stop);
    try {
      await Promise.all(watched.filter((w) => !w.rv).map((w) => list(w, ctl.signal)));
      const q = new URLSearchParams();
      for (const w of watched) q.append('watch', `${w.kind}${w.selector ? `@${w.selector}` : ''}:${w.rv}`);
      if (scope()) q.set('namespace', scope());
      q.set('types', STREAM_TYPES.join(','));
      if (lastEventId) q.set('after', lastEventId);
      const res = await fetch(`/web/v1/live?${q}`, { headers: { Accept: 'text/event-stream' }, signal: ctl.signal });
      if (!res.ok || !res.body) {
        // A version the API server no longer has, or a refusal: list again.
        for (const w of watched) w.rv = '';
        throw new Error(`${res.status}`);
      }
      failures = 0;
      setState('live');
      const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
      let buf = '';
      let relist = false;
      while (!relist) {
        const { value, done } = await reader.read();
        if (done) break;
        buf += value;
        let end: number;
        while ((end = buf.indexOf('\n\n')) >= 0) {
          const frame = buf.slice(0, end);
          buf = buf.slice(end + 2);
          let event = 'message';
          let data = '';
          let id = '';
          for (const line of frame.split('\n')) {
            if (line.startsWith(':')) continue;
            const colon = line.indexOf(':');
            const field = colon < 0 ? line : line.slice(0, colon);
            const v = colon < 0 ? '' : line.slice(colon + 1).replace(/^ /, '');
            if (field === 'event') event = v;
            else if (field === 'data') data = data ? `${data}\n${v}` : v;
            else if (field === 'id') id = v;
          }
          if (event === 'watch') {
            const m = JSON.parse(data) as { kind: string; selector?: string; event: { type: string; object: any } };
            if (!applyWatch(m.kind, m.selector ?? '', m.event)) relist = true;
            continue;
          }
          // The stream's first message is an id alone, the resume point.
          if (id) lastEventId = id;
          // Without an id to resume from, the stream starts at the log's
          // end: once it has said where that is, the views read what came
          // before it.
          if (id && !begun) streamBegan();
          if (data && event !== 'message') {
            const ev = JSON.parse(data) as LogEvent;
            streamListeners.forEach((l) => l(ev));
          }
        }
      }
      ctl.abort();
      // An answer that ended by itself: a moment before the next, so a
      // server that ends it at once is not asked in a tight loop.
      await sleep(250);
    } catch {
      // Aborted here (a kind added, the tab parked) is no failure.
      if (!ctl.signal.aborted) {
        failures++;
        setState('down', 'The API server cannot be reached; retrying. Is invisible-dots server running?');
      }
    }
    park.signal.removeEventListener('abort', stop);
    park.done();
    if (failures) await sleep(Math.min(500 * 2 ** failures, 10_000));
  }
}

function follow(kind: string, cell: Cell<Collection<any>>) {
  watched.push({ kind, selector: '', cell, rv: '', holders: 1 });
  // The open connection does not carry the new kind: open the next one.
  reopen?.abort();
}

// The watches the views hold while they are shown (the tasks), by kind and
// selector, so two views of one Dot's tasks share one watch.
const held = new Map<string, Watched>();

// What a view that needs no watch this time is given.
const none = new Cell<Collection<any>>({ items: new Map(), loaded: true, state: 'live' });

/**
 * The objects of a kind a label selector picks, listed and watched while the
 * calling view is shown (nothing is held for no selector). The API server
 * evaluates the selector, so the page is sent those objects alone. The watch
 * rides on the one connection (runLive) rather than on a list and watch of
 * its own: a connection per view would take the browser's six again, and
 * one Dot's tasks are a watch like the others, told apart by its selector.
 */
function useWatch<T>(kind: string, selector: string | undefined): Collection<T> {
  const k = `${kind}@${selector}`;
  let w = selector === undefined ? undefined : held.get(k);
  if (!w && selector !== undefined) {
    w = { kind, selector, cell: new Cell<Collection<any>>(empty()), rv: '', holders: 0 };
    held.set(k, w);
  }
  const it = w;
  useEffect(() => {
    if (!it) return;
    if (it.holders++ === 0) {
      if (held.get(k) !== it) held.set(k, it);
      watched.push(it);
      // The open connection does not carry it: open the next one.
      reopen?.abort();
    }
    return () => {
      if (--it.holders > 0) return;
      watched.splice(watched.indexOf(it), 1);
      if (held.get(k) === it) held.delete(k);
      // Its watch stays on the open connection until that opens again for
      // another reason (a watch added, one timed out): closing it now would
      // cost every other part a reconnect to save a few events.
    };
  }, [it]);
  return useCell(it?.cell ?? none);
}

/**
 * One Dot's tasks, by the label every Task carries (DOT_LABEL, set at
 * admission from spec.dotName); none for no name. With the scope of every
 * namespace the selector picks the Dots of that name in each, so the caller
 * keeps those of its namespace. No view reads every task of the scope: each
 * reads a Dot's, and views of one Dot share its watch.
 */
export const useDotTasks = (name: string | undefined): Collection<Task> => useWatch<Task>('tasks', name ? `${DOT_LABEL}=${name}` : undefined);

/** The tasks a Dot asked other Dots for (delegate_task), by the label the control plane sets on them. */
export const useRequestedTasks = (name: string): Collection<Task> => useWatch<Task>('tasks', `${REQUESTED_BY_LABEL}=${name}`);

let started = false;
export function startLive() {
  if (started) return;
  started = true;
  follow('dots', dots);
  follow('computers', computers);
  follow('approvals', approvals);
  // Every page: a Channel that needs a new token counts in the Inbox.
  follow('channels', channels);
  void runLive();
}

/** The Approval waits for a person: the control plane says Pending and nobody answered it. */
export const isWaiting = (a: Approval) => !a.spec.decision && a.status?.phase === 'Pending';

/**
 * The approvals that wait for the person, the one that waited longest first:
 * those the control plane says are Pending, so one made for a task that had
 * already ended (made Expired at once) never shows as a card.
 */
export function waiting(all: Map<string, Approval>): Approval[] {
  return [...all.values()]
    .filter(isWaiting)
    .sort((a, b) => (a.metadata.creationTimestamp ?? '').localeCompare(b.metadata.creationTimestamp ?? ''));
}
