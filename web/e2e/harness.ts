// Starts the real `invisible-dots server` (the built binary, INVISIBLE_DOTS_BIN)
// on a throwaway home: the whole server, controllers and host agent included,
// with a QEMU directory that holds no QEMU, so the host cannot run VMs and an
// applied Dot's computer waits in PROVISIONING. That is enough for what these
// tests read: the resources, and the chat's log (a message is logged and
// queued whether the computer runs or not).
import { spawn } from 'node:child_process';
import { request as httpsRequest } from 'node:https';
import { mkdtempSync, mkdirSync, openSync, rmSync, writeFileSync, readFileSync, existsSync } from 'node:fs';
import { createServer } from 'node:net';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import type { Page } from '@playwright/test';

// Where the run's server is written down for its tests: one file per run
// (playwright.config.ts names it), since other checkouts on the machine run
// their own servers, and a shared file would send one run's tests to
// another's server.
export const STATE = process.env.INVISIBLE_DOTS_E2E_STATE ?? join(tmpdir(), 'invisible-dots-web-e2e.json');

export interface Harness {
  pid: number;
  home: string;
  url: string;
  log: string;
  api: string;
  host: string;
}

function freePort(host: string): Promise<number> {
  return new Promise((resolve, reject) => {
    const s = createServer();
    s.once('error', reject);
    s.listen(0, host, () => {
      const port = (s.address() as { port: number }).port;
      s.close(() => resolve(port));
    });
  });
}

/** Starts the run's server, and writes it down for the run's tests (STATE). */
export async function start(): Promise<Harness> {
  const h = await launch();
  mkdirSync(dirname(STATE), { recursive: true });
  writeFileSync(STATE, JSON.stringify(h));
  return h;
}

/**
 * Starts a server of its own on a throwaway home; signIn: with
 * --web-sign-in, where people sign in and the web server never adds its own
 * credential (ready once its session path answers; the API is up by then);
 * env: more of the server's environment (INVISIBLE_DOTS_TELEGRAM_API, to
 * send the Telegram adapter to a test's fake).
 */
export async function launch(opts: { signIn?: boolean; env?: Record<string, string> } = {}): Promise<Harness> {
  const bin = process.env.INVISIBLE_DOTS_BIN;
  if (!bin || !existsSync(bin)) throw new Error('INVISIBLE_DOTS_BIN must name the built binary: run `make test-web`');
  const home = mkdtempSync(join(tmpdir(), 'dots-web-'));
  const noQemu = join(home, 'no-qemu');
  mkdirSync(noQemu);
  const apiPort = await freePort('127.0.0.1');
  const webPort = await freePort('127.0.0.2');
  const url = `http://127.0.0.2:${webPort}`;
  const log = join(home, 'server.log');
  const out = openSync(log, 'a');
  const child = spawn(bin, ['server', '--host', 'web-e2e', ...(opts.signIn ? ['--web-sign-in'] : [])], {
    env: {
      PATH: process.env.PATH,
      HOME: process.env.HOME,
      INVISIBLE_DOTS_HOME: home,
      INVISIBLE_DOTS_LISTEN: `127.0.0.1:${apiPort}`,
      INVISIBLE_DOTS_WEB_LISTEN: `127.0.0.2:${webPort}`,
      INVISIBLE_DOTS_QEMU_DIR: noQemu,
      ...opts.env,
    },
    stdio: ['ignore', out, out],
    detached: false,
  });
  const h: Harness = { pid: child.pid!, home, url, log, api: `https://127.0.0.1:${apiPort}`, host: 'web-e2e' };
  const ready = opts.signIn ? `${url}/web/v1/session` : `${url}/apis/dots.invisible.dev/v1alpha1/dots`;
  const deadline = Date.now() + 120_000;
  for (;;) {
    if (child.exitCode !== null) throw new Error(`the server exited (${child.exitCode}); its log: ${log}`);
    try {
      // Ready once the Dots' kind is served through the web server.
      const res = await fetch(ready);
      if (res.ok) break;
    } catch {
      /* not listening yet */
    }
    if (Date.now() > deadline) throw new Error(`the server was not ready in 120 s; its log: ${log}`);
    await new Promise((r) => setTimeout(r, 500));
  }
  child.unref();
  return h;
}

export async function stop() {
  if (!existsSync(STATE)) return;
  await halt(JSON.parse(readFileSync(STATE, 'utf8')) as Harness);
  rmSync(STATE, { force: true });
}

/** Stops a server launch started, and removes its home. */
export async function halt(h: Harness) {
  try {
    process.kill(h.pid, 'SIGTERM');
  } catch {
    /* already gone */
  }
  const deadline = Date.now() + 30_000;
  while (Date.now() < deadline) {
    try {
      process.kill(h.pid, 0);
    } catch {
      break;
    }
    await new Promise((r) => setTimeout(r, 200));
  }
  if (!process.env.KEEP_HOME) rmSync(h.home, { recursive: true, force: true });
}

export function harness(): Harness {
  return JSON.parse(readFileSync(STATE, 'utf8')) as Harness;
}

/** Applies a Dot through the web server, as kubectl would through the API. */
export async function applyDot(name: string, ns = 'default') {
  const res = await fetch(`${harness().url}/apis/dots.invisible.dev/v1alpha1/namespaces/${ns}/dots`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({
      apiVersion: 'dots.invisible.dev/v1alpha1',
      kind: 'Dot',
      metadata: { name, namespace: ns },
      spec: { model: { provider: 'openrouter', id: 'z-ai/glm-5.3-flash' } },
    }),
  });
  if (!res.ok && res.status !== 409) throw new Error(`apply Dot ${name}: ${res.status} ${await res.text()}`);
}

const GROUP = '/apis/dots.invisible.dev/v1alpha1';

/** Makes an Approval as the control plane does when a guest asks. */
export async function askApproval(
  name: string,
  dotName: string,
  ns = 'default',
  call: { tool: string; permission: string; arguments: unknown } = { tool: 'exec', permission: 'computer.exec', arguments: { command: 'ls -la' } },
) {
  const res = await fetch(`${harness().url}${GROUP}/namespaces/${ns}/approvals`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({
      apiVersion: 'dots.invisible.dev/v1alpha1',
      kind: 'Approval',
      metadata: { name, namespace: ns },
      spec: { dotName, reason: 'list the files', ...call },
    }),
  });
  if (!res.ok) throw new Error(`make Approval ${name}: ${res.status} ${await res.text()}`);
}

export async function getApproval(name: string, ns = 'default'): Promise<any> {
  const res = await fetch(`${harness().url}${GROUP}/namespaces/${ns}/approvals/${name}`);
  if (!res.ok) throw new Error(`get Approval ${name}: ${res.status}`);
  return res.json();
}

/** A call to the API server itself with the admin token, as a host agent would make. */
function adminCall(method: string, path: string, body: unknown, contentType = 'application/json'): Promise<{ status: number; text: string }> {
  return adminCallOn(harness(), method, path, body, contentType);
}

/** adminCall on the server of h. */
export function adminCallOn(h: Harness, method: string, path: string, body: unknown, contentType = 'application/json'): Promise<{ status: number; text: string }> {
  const token = readFileSync(join(h.home, 'config', 'api.token'), 'utf8').split('\n')[0].trim();
  const ca = readFileSync(join(h.home, 'pki', 'ca.crt'));
  // A body only when there is one, with its length, on a connection of its
  // own: a DELETE's body sent chunked over a kept-alive connection was
  // answered 400 by the API server, now and then, and the next call on it too.
  const payload = body === undefined ? '' : JSON.stringify(body);
  const headers: Record<string, string | number> = { Authorization: `Bearer ${token}`, 'Content-Length': Buffer.byteLength(payload) };
  if (payload !== '') headers['Content-Type'] = contentType;
  return new Promise((resolve, reject) => {
    const req = httpsRequest(
      h.api + path,
      { method, ca, headers, agent: false },
      (res) => {
        let text = '';
        res.on('data', (c) => (text += c));
        res.on('end', () => resolve({ status: res.statusCode ?? 0, text }));
      },
    );
    req.on('error', reject);
    req.end(payload);
  });
}

const seqs = new Map<string, number>();

/**
 * Stands in for a Dot's guest: places its Computer on the harness's host (no
 * VM runs there) and hands the control plane guest events through the host
 * agents' ingestion route, as the host agent's event pump does.
 */
export async function guestSays(dotName: string, events: { type: string; data: unknown }[], ns = 'default') {
  // The Dot controller makes the Computer a moment after the Dot.
  let place = { status: 0, text: '' };
  for (const deadline = Date.now() + 20_000; Date.now() < deadline; await new Promise((r) => setTimeout(r, 200))) {
    place = await adminCall('PATCH', `${GROUP}/namespaces/${ns}/computers/${dotName}`, { spec: { nodeName: harness().host } }, 'application/merge-patch+json');
    if (place.status !== 404) break;
  }
  if (place.status !== 200) throw new Error(`place the Computer ${dotName}: ${place.status} ${place.text}`);
  const dot = await (await fetch(`${harness().url}${GROUP}/namespaces/${ns}/dots/${dotName}`)).json();
  let seq = seqs.get(dot.metadata.uid) ?? 0;
  const batch = {
    dot_uid: dot.metadata.uid,
    events: events.map((e) => {
      seq++;
      return { seq, id: `${dotName}-${seq}`, type: e.type, ts: new Date().toISOString(), data: e.data };
    }),
  };
  seqs.set(dot.metadata.uid, seq);
  const res = await adminCall('POST', `/dots/v1/hostagent/hosts/${harness().host}/dots/${ns}/${dotName}/events`, batch);
  if (res.status !== 200) throw new Error(`guest events of ${dotName}: ${res.status} ${res.text}`);
}

/** Makes a Task as `invisible-dots task add` does, through the web server. */
export async function addTask(dotName: string, name: string, spec: { description: string; priority?: number; scheduledAt?: string }, ns = 'default'): Promise<any> {
  const res = await fetch(`${harness().url}${GROUP}/namespaces/${ns}/tasks`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ apiVersion: 'dots.invisible.dev/v1alpha1', kind: 'Task', metadata: { name, namespace: ns }, spec: { dotName, ...spec } }),
  });
  if (!res.ok) throw new Error(`make Task ${name}: ${res.status} ${await res.text()}`);
  return res.json();
}

/**
 * Waits until the Dot's log holds an event of the type, read through the web
 * server's Dots API: what a guest says about a task comes after the host
 * gave it the task, so a test that stands in for the guest waits for that.
 */
export async function waitForEvent(dotName: string, type: string, ns = 'default') {
  const url = `${harness().url}/dots/v1/namespaces/${ns}/dots/${dotName}/events?types=${encodeURIComponent(type)}&limit=1`;
  for (const deadline = Date.now() + 20_000; Date.now() < deadline; await new Promise((r) => setTimeout(r, 200))) {
    const res = await fetch(url);
    if (res.ok && ((await res.json()).events ?? []).length > 0) return;
  }
  throw new Error(`no ${type} event of ${dotName} within 20 s`);
}

/** Reads a resource of the group through the web server. */
export async function getResource(kind: string, name: string, ns = 'default'): Promise<any> {
  const res = await fetch(`${harness().url}${GROUP}/namespaces/${ns}/${kind}/${name}`);
  if (!res.ok) throw new Error(`get ${kind} ${name}: ${res.status}`);
  return res.json();
}

/** Removes the host-wide key a test stored, so the tests after it see none (as the harness began). */
export async function deleteDefaultKey() {
  const res = await adminCall('DELETE', '/api/v1/namespaces/invisible-dots-system/secrets/openrouter', undefined);
  if (res.status !== 200 && res.status !== 404) throw new Error(`delete the default key: ${res.status} ${res.text}`);
}

/** Writes a Dot as someone else would (another tab, kubectl): a merge patch of its spec. */
export async function patchDotSpec(name: string, spec: unknown, ns = 'default') {
  const res = await fetch(`${harness().url}${GROUP}/namespaces/${ns}/dots/${name}`, {
    method: 'PATCH',
    headers: { 'Content-Type': 'application/merge-patch+json' },
    body: JSON.stringify({ spec }),
  });
  if (!res.ok) throw new Error(`patch Dot ${name}: ${res.status} ${await res.text()}`);
}

/** Makes a namespace through the web server. */
export async function makeNamespace(name: string) {
  const res = await fetch(`${harness().url}/api/v1/namespaces`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ apiVersion: 'v1', kind: 'Namespace', metadata: { name } }),
  });
  if (!res.ok && res.status !== 409) throw new Error(`make namespace ${name}: ${res.status} ${await res.text()}`);
}

/**
 * Writes a Computer's state as its host agent would. The harness's host runs
 * no VM, so a page that needs a running computer is shown one this way; the
 * Computer is left unplaced, so no host agent writes it back.
 */
export async function setComputerState(name: string, state: string, ns = 'default') {
  let res = { status: 0, text: '' };
  for (const deadline = Date.now() + 20_000; Date.now() < deadline; await new Promise((r) => setTimeout(r, 200))) {
    res = await adminCall('PATCH', `${GROUP}/namespaces/${ns}/computers/${name}/status`, { status: { state } }, 'application/merge-patch+json');
    if (res.status !== 404) break;
  }
  if (res.status !== 200) throw new Error(`set the state of Computer ${name}: ${res.status} ${res.text}`);
}

/**
 * Denies every approval of a Dot still waiting, as a person would, so a test
 * leaves no count behind for the Inbox badge the later tests read.
 */
export async function denyWaiting(dotName: string, ns = 'default') {
  const list = await (await fetch(`${harness().url}${GROUP}/namespaces/${ns}/approvals`)).json();
  for (const a of list.items as any[]) {
    if (a.spec.dotName !== dotName || a.spec.decision) continue;
    const res = await fetch(`${harness().url}${GROUP}/namespaces/${ns}/approvals/${a.metadata.name}`, {
      method: 'PATCH',
      headers: { 'Content-Type': 'application/merge-patch+json' },
      body: JSON.stringify({ spec: { decision: 'reject' } }),
    });
    if (!res.ok) throw new Error(`deny Approval ${a.metadata.name}: ${res.status} ${await res.text()}`);
  }
}

/** A one-pixel PNG: the picture the fake guest's screen and files answer with. */
export const PIXEL = Buffer.from('iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAQAAAC1HAwCAAAAC0lEQVR42mNkYAAAAAYAAjCB0C8AAAAASUVORK5CYII=', 'base64');

/**
 * A fake of the Dot's guest at the edge of the test: the browser's requests
 * to the files and screenshot routes are answered here as those routes answer
 * (internal/dotsapi: the file's type from wire.FileTypeOf), because the
 * harness's host runs no VM. Its screen answers until `screenStops`, and
 * from then on leaves each request unanswered, as a guest that hangs does.
 */
export async function fakeGuest(page: Page, dot: string): Promise<{ screenStops: () => void }> {
  const base = `**/dots/v1/namespaces/default/dots/${dot}`;
  const big = 'x'.repeat((1 << 20) + 10);
  const files: Record<string, { type: string; body: string | Buffer; attachment?: boolean }> = {
    '/home/dot/notes.md': { type: 'text/plain; charset=utf-8', body: '# Notes\nbuy milk' },
    '/home/dot/pixel.png': { type: 'image/png', body: PIXEL },
    '/home/dot/app.bin': { type: 'application/octet-stream', body: Buffer.from([0, 1, 2]), attachment: true },
    '/home/dot/big.log': { type: 'text/plain; charset=utf-8', body: big },
    '/home/dot/odd.txt': { type: 'text/plain; charset=utf-8', body: 'a\u0000b' },
  };
  await page.route(`${base}/files/list?*`, (route) => {
    const path = new URL(route.request().url()).searchParams.get('path');
    const entries =
      path === '/home/dot'
        ? [
            { name: 'workspace', type: 'dir', size: 0 },
            ...Object.entries(files).map(([p, f]) => ({ name: p.slice('/home/dot/'.length), type: 'file', size: Buffer.byteLength(f.body) })),
          ]
        : [{ name: 'plan.txt', type: 'file', size: 4 }];
    return route.fulfill({ json: { path, entries } });
  });
  await page.route(`${base}/files?*`, (route) => {
    const f = files[new URL(route.request().url()).searchParams.get('path')!];
    if (!f) return route.fulfill({ status: 404, json: { error: 'not_found', message: 'no such file' } });
    return route.fulfill({
      status: 200,
      headers: { 'Content-Type': f.type, ...(f.attachment ? { 'Content-Disposition': 'attachment' } : {}) },
      body: f.body,
    });
  });
  let answers = true;
  await page.route(`${base}/screenshot`, (route) =>
    answers ? route.fulfill({ status: 200, headers: { 'Content-Type': 'image/png' }, body: PIXEL }) : undefined,
  );
  return { screenStops: () => (answers = false) };
}
