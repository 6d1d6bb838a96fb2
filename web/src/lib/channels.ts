// A Dot's messaging channels (ref 9.8; docs/api.md "A Dot's channels"): the
// Channel resource is read from the live watch, paused, set and deleted
// through the resource API; the Dots API's channel routes do the rest (a
// token checked before it is stored, pairing codes, unpairing a person). A
// token goes to the server once, in a body, and is never read back.
import { ApiError, GROUP, dotPath, failure, getJSON, mergePatch, postJSON, request } from './api';
import { CHANNEL_NAMES, type ChannelErrorCode, type ChannelState } from './generated';
import type { Tone } from './format';
import type { Channel, ChannelKind, ChannelLinkFrame, ChannelLinked, PairingCode } from './types';

/** The service's name to people ("Telegram"). */
export const channelName = (type: string) => CHANNEL_NAMES[type] ?? type;

/** What a state says, for each service: WhatsApp is linked again by a scan, Telegram with a token. */
export function stateWords(c: Channel): string {
  const s = c.status?.state;
  if (c.metadata.deletionTimestamp) return 'Unlinking';
  if (!s) return c.spec.enabled === false ? 'Paused' : 'Starting';
  const words: Record<ChannelState, string> = {
    connecting: 'Connecting',
    connected: 'Connected',
    needs_relink: c.spec.type === 'whatsapp' ? 'Needs linking again' : 'Needs a new token',
    error: 'Not working',
    paused: 'Paused',
  };
  return words[s] ?? s;
}

export function stateTone(s?: ChannelState): Tone {
  switch (s) {
    case 'connected':
      return 'ok';
    case 'connecting':
      return 'busy';
    case 'needs_relink':
      return 'warn';
    case 'error':
      return 'danger';
    default:
      return 'idle';
  }
}

/** The account as people know it: a bot's @name, a phone number. */
export function accountWords(c: Channel): string {
  const a = c.status?.account;
  if (!a) return '';
  if (!a.name) return `account ${a.id}`;
  return c.spec.type === 'telegram' ? `@${a.name}` : a.name;
}

/** The Channels of one Dot, oldest first. */
export function channelsOf(all: Map<string, Channel>, ns: string, dot: string): Channel[] {
  return [...all.values()]
    .filter((c) => (c.metadata.namespace ?? 'default') === ns && c.spec.dotName === dot)
    .sort((a, b) => (a.metadata.creationTimestamp ?? '').localeCompare(b.metadata.creationTimestamp ?? '') || a.metadata.name.localeCompare(b.metadata.name));
}

/** The Channels that need the person to link them again (a revoked token, a logged-out phone). */
export const needsRelink = (c: Channel) => c.status?.state === 'needs_relink' && !c.metadata.deletionTimestamp;

/**
 * A refusal of the channel routes in words, with what to do next. The
 * server's own message follows when it adds something (which bot, which
 * Channel, how to turn a service on); it never holds the token.
 */
export function channelError(e: unknown, type: string, dot: string): string {
  const name = channelName(type);
  if (!(e instanceof ApiError)) return `${(e as Error)?.message ?? String(e)} Try again.`;
  const words: Record<ChannelErrorCode, string> = {
    invalid_credentials: `${name} does not accept this token. Copy the whole token again from @BotFather (it looks like 123456789:AA…) and paste it here.`,
    channel_unreachable: `${name} could not be reached from this machine, so the token could not be checked and nothing was stored. Check the machine's connection to the internet, then try again.`,
    account_in_use: `This bot already serves another Dot, and a bot serves one Dot only. Make a new bot with @BotFather for ${dot}, or unlink this one from the other Dot first.`,
    already_exists: `${dot} already has a ${name} channel. Give it a new token on its card, or unlink it first.`,
    channel_off: `This server does not run ${name}.`,
  };
  const said = (words as Record<string, string>)[e.code];
  // Another refusal (a token of another bot, say) is the server's own words;
  // only a failure of the server or the way to it is worth trying again.
  if (!said) return `${e.message}${/[.!?]$/.test(e.message) ? '' : '.'}${e.status === 0 || e.status >= 500 ? ' Try again.' : ''}`;
  // The server's words name the other Channel, or how to turn the service on.
  return e.code === 'account_in_use' || e.code === 'channel_off' ? `${said} ${e.message}${/[.!?]$/.test(e.message) ? '' : '.'}` : said;
}

const channelPath = (ns: string, name: string) => `${GROUP}/namespaces/${encodeURIComponent(ns)}/channels/${encodeURIComponent(name)}`;
const routePath = (ns: string, dot: string, channel: string) => `${dotPath(ns, dot)}/channels/${encodeURIComponent(channel)}`;

/** The channel types this server runs. */
export const readKinds = (ns: string, dot: string, signal?: AbortSignal) =>
  getJSON<{ dot: string; available: ChannelKind[] }>(`${dotPath(ns, dot)}/channels`, signal);

/** Links a service with its token, checked by the server before anything is stored; a service linked by a code takes none. */
export const addChannel = (ns: string, dot: string, type: string, token?: string) =>
  postJSON<ChannelLinked>(`${dotPath(ns, dot)}/channels`, token === undefined ? { type } : { type, token });

/** A new token for a Channel: the link starts again with its people kept. */
export const putToken = (ns: string, dot: string, channel: string, token: string) =>
  request<ChannelLinked>(`${routePath(ns, dot, channel)}/credentials`, {
    method: 'PUT',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ token }),
  });

/**
 * A one-time pairing code (the route takes no body), with when it runs out
 * by this browser's clock: the server's expires_at less the server's time
 * of the answer (its Date header), from now, so a browser whose clock is
 * off still counts the code's ten minutes.
 */
export async function newPairingCode(ns: string, dot: string, channel: string): Promise<PairingCode & { deadline: number }> {
  let res: Response;
  try {
    res = await fetch(`${routePath(ns, dot, channel)}/pairing-codes`, { method: 'POST', headers: { Accept: 'application/json' } });
  } catch {
    throw new ApiError('The web server cannot be reached: start invisible-dots server again and reload.', 0, 'offline');
  }
  if (!res.ok) throw await failure(res, 'POST');
  const pc = (await res.json()) as PairingCode;
  const expires = Date.parse(pc.expires_at);
  const server = Date.parse(res.headers.get('Date') ?? '');
  return { ...pc, deadline: Number.isNaN(server) ? expires : Date.now() + (expires - server) };
}

export const unpair = (ns: string, dot: string, channel: string, person: string) =>
  request<void>(`${routePath(ns, dot, channel)}/people/${encodeURIComponent(person)}`, { method: 'DELETE' });

export type SettingName = 'approvals' | 'notifyTasks' | 'showArguments';

export const setSetting = (c: Channel, setting: SettingName, on: boolean) =>
  mergePatch<Channel>(channelPath(c.metadata.namespace ?? 'default', c.metadata.name), { spec: { settings: { [setting]: on } } });

/** Pauses (false) or resumes (true) a Channel. */
export const setEnabled = (c: Channel, on: boolean) => mergePatch<Channel>(channelPath(c.metadata.namespace ?? 'default', c.metadata.name), { spec: { enabled: on } });

/** Deletes the Channel: the control plane stops the link and forgets its people and pairing codes. */
export const unlink = (c: Channel) => request<unknown>(channelPath(c.metadata.namespace ?? 'default', c.metadata.name), { method: 'DELETE' });

/** Resolves once the Channel is gone (its controller let it go after stopping the link), within a minute. */
export async function removed(c: Channel): Promise<void> {
  const path = channelPath(c.metadata.namespace ?? 'default', c.metadata.name);
  for (const end = Date.now() + 60_000; Date.now() < end; await new Promise((r) => setTimeout(r, 500))) {
    try {
      const now = await getJSON<Channel>(path);
      if (now.metadata.uid !== c.metadata.uid) return;
    } catch (e) {
      if (e instanceof ApiError && e.status === 404) return;
      throw e;
    }
  }
  throw new Error(`The old ${channelName(c.spec.type)} link is still being removed; try again in a moment.`);
}

/** A setting's value as the schema defaults it: on when unset. */
export const settingOn = (c: Channel, s: SettingName) => c.spec.settings?.[s] !== false;

/**
 * The QR code of text as an SVG path over a grid of its modules (a quiet
 * zone of four around it), drawn here from the modules qrcode computes:
 * nothing is fetched, and the code stays dark on light in either theme,
 * which is what a phone's camera reads.
 */
export async function qrPath(text: string): Promise<{ size: number; d: string }> {
  const { create } = await import('qrcode');
  const qr = create(text, { errorCorrectionLevel: 'M' });
  const n = qr.modules.size;
  const quiet = 4;
  let d = '';
  for (let y = 0; y < n; y++)
    for (let x = 0; x < n; x++) if (qr.modules.get(y, x)) d += `M${x + quiet} ${y + quiet}h1v1h-1z`;
  return { size: n + 2 * quiet, d };
}

/** Minutes and seconds until deadline (ms), "9:05"; '' once it passed. */
export function countdown(deadline: number, now = Date.now()): string {
  const s = Math.floor((deadline - now) / 1000);
  if (!(s > 0)) return '';
  return `${Math.floor(s / 60)}:${String(s % 60).padStart(2, '0')}`;
}

// ---- Linking by a code (WhatsApp) -------------------------------------------

/** Where a link by a code stands, as the page shows it: one view from the stream's frames. */
export interface LinkView {
  /** The code on show now, to draw as a QR. */
  code?: string;
  /** The number the phone linked: the end. */
  linked?: string;
  /** Why linking ended without a link: the end. */
  failed?: string;
  /** The stream ended with neither (the server stopped, a connection lost). */
  cut?: boolean;
}

/** The view after one frame: a new code replaces the last; linked and failed end it. */
export function linkStep(v: LinkView, f: ChannelLinkFrame): LinkView {
  if (v.linked || v.failed) return v;
  if (f.linked) return { linked: f.linked };
  if (f.failed) return { failed: f.failed };
  if (f.code) return { code: f.code };
  return v;
}

/**
 * Follows GET .../channels/{channel}/link (server-sent events, never
 * stored): each frame to onFrame until linked or failed, or the stream ends.
 */
export async function followLink(ns: string, dot: string, channel: string, onFrame: (f: ChannelLinkFrame) => void, signal: AbortSignal) {
  let res: Response;
  try {
    res = await fetch(`${routePath(ns, dot, channel)}/link`, { headers: { Accept: 'text/event-stream' }, signal });
  } catch (e) {
    if (signal.aborted) throw e;
    throw new ApiError('The web server cannot be reached: start invisible-dots server again and reload.', 0, 'offline');
  }
  if (!res.ok || !res.body) throw await failure(res);
  const reader = res.body.pipeThrough(new TextDecoderStream()).getReader();
  let buf = '';
  for (;;) {
    const { value, done } = await reader.read();
    if (done) return;
    buf += value;
    let end: number;
    while ((end = buf.indexOf('\n\n')) >= 0) {
      const data = buf
        .slice(0, end)
        .split('\n')
        .filter((l) => l.startsWith('data:'))
        .map((l) => l.slice(5).replace(/^ /, ''))
        .join('\n');
      buf = buf.slice(end + 2);
      if (data) onFrame(JSON.parse(data) as ChannelLinkFrame);
    }
  }
}

/** A Channel linked by a code that has no linked account, or must be linked again: it goes through the scan. */
export const needsScan = (c: Channel) =>
  c.spec.type === 'whatsapp' && !c.metadata.deletionTimestamp && c.spec.enabled !== false && (c.status?.state === 'needs_relink' || !c.status?.account);

// The Channels this page's own Link made (namespace/name): Cancel deletes only those.
export const startedHere = new Set<string>();
