// A Dot's Channels page (/dots/{ns}/{name}/channels; ref 9.7, 9.8): one card
// per Channel of the Dot, from the live watch, and a card to link each
// service the server runs (GET .../channels, `available`) that the Dot has
// no Channel of yet. Telegram is linked with a bot's token, sent once and
// never read back; a card then pairs a chat (a one-time code: the words to
// send, the link, its QR code, the time left), lists the people paired,
// switches the settings, pauses, takes a new token and unlinks. Below them,
// the Dot's Webhooks (components/Webhooks).
import { useEffect, useRef, useState } from 'preact/hooks';
import { says } from '../lib/api';
import {
  accountWords,
  addChannel,
  channelError,
  channelName,
  channelsOf,
  countdown,
  newPairingCode,
  putToken,
  qrPath,
  setEnabled,
  setSetting,
  settingOn,
  stateTone,
  stateWords,
  unlink,
  unpair,
  readKinds,
  removed,
  followLink,
  linkStep,
  needsScan,
  startedHere,
  type LinkView,
  type SettingName,
} from '../lib/channels';
import { Webhooks } from '../components/Webhooks';
import { ago, toneText } from '../lib/format';
import { channels, useCell } from '../lib/live';
import { CHANNEL_WARNINGS } from '../lib/generated';
import { useCan } from '../lib/session';
import type { Channel, ChannelKind, ChannelPerson, PairingCode } from '../lib/types';
import { btn, Confirm, input } from '../lib/ui';

/** What a person is told where they link Telegram or WhatsApp (Go's wire.ChannelWarnings). */
const TELEGRAM_NOT_PRIVATE = CHANNEL_WARNINGS.telegram;
const WHATSAPP_RISK = CHANNEL_WARNINGS.whatsapp;

const card = 'rounded-card border border-border bg-surface p-4';

export function Channels({ ns, name }: { ns: string; name: string }) {
  const all = useCell(channels);
  const mine = channelsOf(all.items, ns, name);
  const [kinds, setKinds] = useState<ChannelKind[]>();
  const [kindsError, setKindsError] = useState('');
  useEffect(() => {
    const ctl = new AbortController();
    readKinds(ns, name, ctl.signal)
      .then((k) => setKinds(k.available))
      .catch((e) => !ctl.signal.aborted && setKindsError(`Which channels this server runs could not be read: ${says(e, 'Reload the page to try again.')}`));
    return () => ctl.abort();
  }, [ns, name]);
  // A link by a code that failed is made again as a new Channel: the old
  // one deleted, then added (docs/api.md); its card is gone meanwhile, so
  // the page holds where that stands.
  const [relink, setRelink] = useState<{ type: string; error?: string }>();
  async function linkAgain(c: Channel) {
    setRelink({ type: c.spec.type });
    try {
      await unlink(c);
      await removed(c);
      const out = await addChannel(ns, name, c.spec.type);
      startedHere.add(`${out.namespace}/${out.name}`);
      setRelink(undefined);
    } catch (e) {
      setRelink({ type: c.spec.type, error: channelError(e, c.spec.type, name) });
    }
  }
  const have = new Set(mine.map((c) => c.spec.type));
  const toAdd = (kinds ?? []).filter((k) => !have.has(k.type) && !(relink && !relink.error && relink.type === k.type));
  return (
    <div class="mx-auto flex max-w-3xl flex-col gap-4 p-4 md:p-6">
      <div>
        <h2 class="text-lg font-semibold">Channels</h2>
        <p class="mt-1 text-sm text-muted">
          Talk to {name} from a chat app on your phone. The people you pair can write to it, hear when its tasks end and answer what it asks
          permission for, from the chat.
        </p>
      </div>
      {all.error && <p class="text-sm text-danger">{all.error}</p>}
      {kindsError && (
        <p role="alert" class="text-sm text-danger" data-testid="kinds-error">
          {kindsError}
        </p>
      )}
      {mine.map((c) => (
        <ChannelCard key={c.metadata.uid} c={c} ns={ns} dot={name} onRelink={() => linkAgain(c)} />
      ))}
      {relink && (
        <p role={relink.error ? 'alert' : 'status'} class={`text-sm ${relink.error ? 'text-danger' : 'text-muted'}`} data-testid="relink">
          {relink.error ?? `Making the ${channelName(relink.type)} link again…`}
        </p>
      )}
      {toAdd.map((k) =>
        k.linked_by === 'token' ? (
          <AddByToken key={k.type} ns={ns} dot={name} kind={k} />
        ) : (
          <AddByCode key={k.type} ns={ns} dot={name} kind={k} />
        ),
      )}
      {(!all.loaded || (!kinds && !kindsError)) && mine.length === 0 && <p class="text-sm text-muted">Reading the channels…</p>}
      {kinds && kinds.length === 0 && mine.length === 0 && <p class="text-sm text-muted">This server runs no channel.</p>}
      <Webhooks ns={ns} name={name} />
    </div>
  );
}

/**
 * A token field: a password field, emptied the moment it is sent; the token
 * goes in the request's body, never in an address, and is never shown back.
 */
function TokenField({ id, label, action, onSend }: { id: string; label: string; action: string; onSend: (token: string) => Promise<void> }) {
  const [token, setToken] = useState('');
  const [busy, setBusy] = useState(false);
  async function send() {
    const value = token.trim();
    if (!value || busy) return;
    setToken('');
    setBusy(true);
    try {
      await onSend(value);
    } finally {
      setBusy(false);
    }
  }
  return (
    <form
      class="mt-2"
      onSubmit={(e) => {
        e.preventDefault();
        void send();
      }}
    >
      <label for={id} class="block text-sm">
        {label}
      </label>
      <div class="mt-1 flex flex-wrap gap-2">
        <input
          id={id}
          type="password"
          autoComplete="off"
          spellcheck={false}
          class={`min-w-0 flex-1 font-mono ${input}`}
          value={token}
          onInput={(e) => setToken((e.target as HTMLInputElement).value)}
        />
        <button type="submit" class={btn.primary} disabled={busy || !token.trim()}>
          {busy ? 'Checking…' : action}
        </button>
      </div>
    </form>
  );
}

function AddByToken({ ns, dot, kind }: { ns: string; dot: string; kind: ChannelKind }) {
  const can = useCan(ns);
  const [error, setError] = useState('');
  const [linked, setLinked] = useState('');
  return (
    <section class={card} aria-labelledby={`add-${kind.type}`} data-testid={`add-${kind.type}`}>
      <h3 id={`add-${kind.type}`} class="font-semibold">
        {kind.name}
      </h3>
      {kind.type === 'telegram' && (
        <>
          <p class="mt-1 text-sm">
            In Telegram, open <span class="font-mono">@BotFather</span>, send <span class="font-mono">/newbot</span> and give the bot a name; it
            answers with the bot's token. Paste it here: it is checked with Telegram, stored as a secret of {dot}'s, and never shown again.
          </p>
          <p class="mt-2 rounded-card bg-surface-2 p-2 text-sm" role="note" data-testid="not-private">
            {TELEGRAM_NOT_PRIVATE}
          </p>
        </>
      )}
      {can('create', 'dots/channels') ? (
        <TokenField
          id={`token-${kind.type}`}
          label={`The bot's token`}
          action={`Link ${kind.name}`}
          onSend={async (token) => {
            setError('');
            setLinked('');
            try {
              const out = await addChannel(ns, dot, kind.type, token);
              setLinked(`Linked to ${out.account.name ? `@${out.account.name}` : kind.name}.`);
            } catch (e) {
              setError(channelError(e, kind.type, dot));
            }
          }}
        />
      ) : (
        <p class="mt-2 text-sm text-muted">Linking {kind.name} needs the editor role in namespace {ns}.</p>
      )}
      <p role="status" class="mt-1 min-h-5 text-sm text-ok">
        {linked}
      </p>
      {error && (
        <p role="alert" class="text-sm text-danger" data-testid="add-error">
          {error}
        </p>
      )}
    </section>
  );
}

/** A service linked by scanning a code on the phone (WhatsApp): its risk first, then Link. */
function AddByCode({ ns, dot, kind }: { ns: string; dot: string; kind: ChannelKind }) {
  const can = useCan(ns);
  const [error, setError] = useState('');
  const [busy, setBusy] = useState(false);
  return (
    <section class={card} aria-labelledby={`add-${kind.type}`} data-testid={`add-${kind.type}`}>
      <h3 id={`add-${kind.type}`} class="font-semibold">
        {kind.name}
      </h3>
      <p class="mt-1 text-sm">
        {dot} becomes a linked device of a {kind.name} number: you scan a code with the phone that holds it, under Settings, Linked devices, Link a
        device.
      </p>
      {kind.type === 'whatsapp' && (
        <p class="mt-2 rounded-card border border-warn p-2 text-sm" role="note" data-testid="whatsapp-risk">
          {WHATSAPP_RISK}
        </p>
      )}
      {can('create', 'dots/channels') ? (
        <button
          type="button"
          class={`mt-3 ${btn.primary}`}
          disabled={busy}
          onClick={async () => {
            setBusy(true);
            setError('');
            try {
              const out = await addChannel(ns, dot, kind.type);
              startedHere.add(`${out.namespace}/${out.name}`);
            } catch (e) {
              setError(channelError(e, kind.type, dot));
            } finally {
              setBusy(false);
            }
          }}
        >
          Link {kind.name}
        </button>
      ) : (
        <p class="mt-2 text-sm text-muted">Linking {kind.name} needs the editor role in namespace {ns}.</p>
      )}
      {error && (
        <p role="alert" class="mt-2 text-sm text-danger" data-testid="add-error">
          {error}
        </p>
      )}
    </section>
  );
}

/**
 * The scan of a Channel linked by a code: follows the link stream, draws
 * each code as a QR as it comes, and ends linked (the number) or failed
 * (the host's reason, and Link again). A link with no account yet is
 * followed at once; one that must be redone waits for Link again, which
 * makes a new Channel (the page's linkAgain), asking first when this one
 * holds a number or people. Cancel
 * removes a Channel this page's own Link made and holds nothing yet, and
 * only pauses any other, so nothing is deleted without Unlink's question.
 */
function ScanLink({ c, ns, dot, onRelink }: { c: Channel; ns: string; dot: string; onRelink: () => Promise<void> }) {
  const kind = channelName(c.spec.type);
  const fresh = !c.status?.account && c.status?.state !== 'needs_relink';
  const people = c.status?.people ?? [];
  // Linking again makes a new Channel: one that holds a number or people asks first.
  const holds = !!c.status?.account || people.length > 0;
  const linkAgainButton = holds ? (
    <Confirm
      label="Link again"
      question={
        <>
          Link {kind} again? This link is removed with {people.length === 0 ? 'its number' : people.length === 1 ? 'the person paired' : `the ${people.length} people paired`}, and a
          new one is made: scan its code{people.length ? ', then pair the people again' : ''}.
        </>
      }
      yes="Link again"
      onYes={onRelink}
    />
  ) : (
    <button type="button" class={btn.primary} onClick={() => void onRelink()}>
      Link again
    </button>
  );
  const [following, setFollowing] = useState(fresh);
  const [attempt, setAttempt] = useState(0);
  const [view, setView] = useState<LinkView>({});
  const [qr, setQr] = useState<{ size: number; d: string }>();
  const [error, setError] = useState('');
  useEffect(() => {
    if (!following) return;
    const ctl = new AbortController();
    setView({});
    setError('');
    let v: LinkView = {};
    followLink(
      ns,
      dot,
      c.metadata.name,
      (f) => {
        v = linkStep(v, f);
        setView(v);
      },
      ctl.signal,
    )
      // A stream that ended with neither: its last code is no longer shown.
      .then(() => !ctl.signal.aborted && !v.linked && !v.failed && setView({ cut: true }))
      .catch((e) => !ctl.signal.aborted && setError(channelError(e, c.spec.type, dot)));
    return () => ctl.abort();
  }, [following, attempt, ns, dot, c.metadata.name]);
  useEffect(() => {
    let live = true;
    if (view.code) void qrPath(view.code).then((q) => live && setQr(q));
    else setQr(undefined);
    return () => {
      live = false;
    };
  }, [view.code]);
  const again = () => {
    setFollowing(true);
    setAttempt((n) => n + 1);
  };
  async function cancel() {
    setFollowing(false);
    const key = `${c.metadata.namespace ?? 'default'}/${c.metadata.name}`;
    try {
      if (startedHere.has(key) && !c.status?.account && !(c.status?.people ?? []).length) await unlink(c);
      else await setEnabled(c, false);
    } catch (e) {
      setError(says(e, 'Try again.'));
    }
  }
  return (
    <div class="mt-3 rounded-card border border-border p-3" data-testid="scan-link">
      <h4 class="text-sm font-semibold">{fresh ? `Link ${kind}` : `Link ${kind} again`}</h4>
      {!following && !view.linked && (
        <>
          <p class="mt-1 text-sm">
            {kind} ended this link (the device was logged out on the phone, or no code was scanned in time). Linking again makes a new link, with
            a code to scan.
          </p>
          <div class="mt-2">{linkAgainButton}</div>
        </>
      )}
      {following && !view.code && !view.linked && !view.failed && !view.cut && !error && <p class="mt-1 text-sm text-muted">Waiting for {kind}’s code…</p>}
      {following && view.code && (
        <div class="mt-2 flex flex-wrap items-start gap-4">
          {qr && <QRCode qr={qr} label={`The code to scan with ${kind}`} testid="link-qr" min={200} />}
          <p class="min-w-0 flex-1 text-sm">
            On the phone that holds the number, open {kind}, then Settings, Linked devices, Link a device, and scan this code. A new code comes every
            few seconds until one is scanned.
          </p>
        </div>
      )}
      {view.linked && (
        <p role="status" class="mt-1 text-sm text-ok" data-testid="link-linked">
          Linked to {view.linked}. Now pair a chat.
        </p>
      )}
      {(view.failed || view.cut || error) && (
        <div role="alert" class="mt-1 text-sm" data-testid="link-failed">
          <p class="text-danger">
            {view.failed
              ? `The link did not finish: ${view.failed}`
              : view.cut
                ? 'The server stopped sending codes before the phone linked.'
                : error}
          </p>
          <div class="mt-2">
            {view.failed ? (
              linkAgainButton
            ) : (
              <button type="button" class={btn.primary} onClick={again}>
                Show the code again
              </button>
            )}
          </div>
        </div>
      )}
      {following && !view.linked && (
        <button type="button" class={`mt-2 ${btn.quiet}`} onClick={() => void cancel()}>
          Cancel
        </button>
      )}
    </div>
  );
}

const SETTINGS: { name: SettingName; label: string; help: string }[] = [
  {
    name: 'approvals',
    label: 'Ask for approvals here',
    help: 'What the Dot asks permission for comes to every paired chat, to answer there. An answer in a chat is as strong as that person’s account.',
  },
  { name: 'notifyTasks', label: 'Tell me when a task ends', help: 'A task’s end, and what an automation says, come to every paired chat.' },
  {
    name: 'showArguments',
    label: 'Show what the Dot wants to run',
    help: 'An approval request shows the call’s arguments (cut to 300 characters). They can hold private data, and the service reads the chat.',
  },
];

function ChannelCard({ c, ns, dot, onRelink }: { c: Channel; ns: string; dot: string; onRelink: () => Promise<void> }) {
  const can = useCan(ns);
  const kind = channelName(c.spec.type);
  const state = c.status?.state;
  const paused = c.spec.enabled === false;
  const people = c.status?.people ?? [];
  const gone = !!c.metadata.deletionTimestamp;
  const [message, setMessage] = useState<{ ok: boolean; text: string }>();
  const [busy, setBusy] = useState(false);
  const mayWrite = can('patch', 'channels');
  const mayPair = can('update', 'dots/channels');
  const tokenKind = c.spec.type === 'telegram';

  async function pause(on: boolean) {
    setBusy(true);
    setMessage(undefined);
    try {
      await setEnabled(c, on);
    } catch (e) {
      setMessage({ ok: false, text: says(e, 'Try again.') });
    } finally {
      setBusy(false);
    }
  }

  return (
    <section class={card} aria-labelledby={`ch-${c.metadata.uid}`} data-testid="channel" data-channel={c.metadata.name}>
      <div class="flex flex-wrap items-baseline gap-x-3 gap-y-1">
        <h3 id={`ch-${c.metadata.uid}`} class="font-semibold">
          {kind}
        </h3>
        {accountWords(c) && (
          <span class="font-mono text-sm" data-testid="channel-account">
            {accountWords(c)}
          </span>
        )}
        <span class={`ml-auto text-sm font-medium ${toneText[stateTone(state)]}`} data-testid="channel-state">
          {stateWords(c)}
        </span>
      </div>
      {c.status?.detail && state !== 'connected' && (
        <p class="mt-1 text-sm text-muted" data-testid="channel-detail">
          {c.status.detail}
          {state === 'error' && !paused && ' It is tried again by itself, within a minute at most.'}
        </p>
      )}
      {paused && !gone && (
        <p class="mt-1 text-sm text-muted">
          Paused: nothing is read from {kind} or sent there. What {dot} says meanwhile is sent when you resume.
        </p>
      )}
      {state === 'needs_relink' && tokenKind && !gone && (
        <div class="mt-3 rounded-card border border-warn p-3" data-testid="needs-token">
          <p class="font-medium">{kind} needs a new token</p>
          <p class="mt-1 text-sm">
            {kind} refused the bot's token (it was revoked or replaced in @BotFather). Ask @BotFather for the bot's token again and paste it here:
            the people paired stay paired.
          </p>
          {mayPair ? (
            <NewToken c={c} ns={ns} dot={dot} label="The bot's new token" />
          ) : (
            <p class="mt-2 text-sm text-muted">A new token needs the editor role in namespace {ns}.</p>
          )}
        </div>
      )}
      {needsScan(c) && (mayPair ? <ScanLink c={c} ns={ns} dot={dot} onRelink={onRelink} /> : <p class="mt-2 text-sm text-muted">Linking {kind} needs the editor role in namespace {ns}.</p>)}
      {tokenKind && (
        <p class="mt-2 text-xs text-muted" role="note">
          {TELEGRAM_NOT_PRIVATE}
        </p>
      )}
      {c.spec.type === 'whatsapp' && (
        <p class="mt-2 text-xs text-muted" role="note">
          {WHATSAPP_RISK}
        </p>
      )}
      {!gone && (
        <>
          <People c={c} ns={ns} dot={dot} people={people} mayUnpair={can('delete', 'dots/channels')} />
          {mayPair && !paused && !needsScan(c) && <Pairing c={c} ns={ns} dot={dot} />}
          {mayPair && paused && <p class="mt-3 text-sm text-muted">Resume the channel to pair a chat.</p>}
          <fieldset class="mt-4">
            <legend class="text-sm font-semibold">Settings</legend>
            <ul class="mt-1 flex flex-col gap-2">
              {SETTINGS.map((s) => (
                <li key={s.name}>
                  <Toggle c={c} setting={s.name} label={s.label} help={s.help} disabled={!mayWrite} />
                </li>
              ))}
            </ul>
            {!mayWrite && <p class="mt-1 text-xs text-muted">Changing these needs the editor role in namespace {ns}.</p>}
          </fieldset>
          {(mayWrite || can('delete', 'channels')) && (
            <div class="mt-4 flex flex-wrap items-center gap-2 border-t border-border pt-3">
              {mayWrite && (
                <button type="button" class={btn.plain} disabled={busy} onClick={() => void pause(paused)}>
                  {paused ? 'Resume' : 'Pause'}
                </button>
              )}
              {mayPair && tokenKind && state !== 'needs_relink' && <ReplaceToken c={c} ns={ns} dot={dot} />}
              {can('delete', 'channels') && (
                <Confirm
                  label={`Unlink ${kind}`}
                  danger
                  question={
                    <>
                      Unlink {kind} from {dot}? {goesWith(tokenKind ? "The bot's token" : 'The link', people.length)}: nobody can talk to {dot} from {kind}{' '}
                      until it is linked and paired again.
                    </>
                  }
                  yes="Unlink"
                  onYes={() => unlink(c).then(() => undefined)}
                />
              )}
            </div>
          )}
        </>
      )}
      {message && (
        <p role={message.ok ? 'status' : 'alert'} class={`mt-2 text-sm ${message.ok ? 'text-ok' : 'text-danger'}`}>
          {message.text}
        </p>
      )}
    </section>
  );
}

/** What an unlink takes with it, in words: the credentials, the people paired, the pairing codes. */
function goesWith(credentials: string, people: number): string {
  if (people === 0) return `${credentials} and any pairing code go with it (nobody is paired)`;
  return `${credentials}, ${people === 1 ? 'the person' : `the ${people} people`} paired and any pairing code go with it`;
}

function NewToken({ c, ns, dot, label }: { c: Channel; ns: string; dot: string; label: string }) {
  const [error, setError] = useState('');
  const [done, setDone] = useState('');
  return (
    <>
      <TokenField
        id={`new-token-${c.metadata.uid}`}
        label={label}
        action="Use this token"
        onSend={async (token) => {
          setError('');
          setDone('');
          try {
            const out = await putToken(ns, dot, c.metadata.name, token);
            setDone(`Stored. ${out.account.name ? `@${out.account.name}` : channelName(c.spec.type)} connects again with its people kept.`);
          } catch (e) {
            setError(channelError(e, c.spec.type, dot));
          }
        }}
      />
      <p role="status" class="mt-1 min-h-5 text-sm text-ok">
        {done}
      </p>
      {error && (
        <p role="alert" class="text-sm text-danger" data-testid="token-error">
          {error}
        </p>
      )}
    </>
  );
}

/** A new token while the old one still works (a token replaced in @BotFather), behind a disclosure. */
function ReplaceToken({ c, ns, dot }: { c: Channel; ns: string; dot: string }) {
  const [open, setOpen] = useState(false);
  if (!open)
    return (
      <button type="button" class={btn.plain} onClick={() => setOpen(true)}>
        New token…
      </button>
    );
  return (
    <div class="w-full">
      <NewToken c={c} ns={ns} dot={dot} label="The bot's new token (the people paired stay paired)" />
      <button type="button" class={btn.quiet} onClick={() => setOpen(false)}>
        Cancel
      </button>
    </div>
  );
}

function Toggle({ c, setting, label, help, disabled }: { c: Channel; setting: SettingName; label: string; help: string; disabled: boolean }) {
  const on = settingOn(c, setting);
  // The value being saved, shown until the watch brings it or the save fails.
  const [pending, setPending] = useState<boolean>();
  const [error, setError] = useState('');
  useEffect(() => {
    if (pending === on) setPending(undefined);
  }, [on, pending]);
  const id = `${c.metadata.uid}-${setting}`;
  const checked = pending ?? on;
  return (
    <div class="flex items-start gap-2">
      <input
        id={id}
        type="checkbox"
        role="switch"
        class="mt-1 size-4 shrink-0 accent-accent"
        checked={checked}
        aria-checked={checked}
        aria-describedby={`${id}-help`}
        disabled={disabled || pending !== undefined}
        onChange={async (e) => {
          const want = (e.target as HTMLInputElement).checked;
          setPending(want);
          setError('');
          try {
            await setSetting(c, setting, want);
          } catch (err) {
            setPending(undefined);
            setError(says(err, 'It was not saved; try again.'));
          }
        }}
      />
      <div class="min-w-0">
        <label for={id} class="text-sm font-medium">
          {label}
        </label>
        <p id={`${id}-help`} class="text-xs text-muted">
          {help}
        </p>
        {error && (
          <p role="alert" class="text-xs text-danger">
            {error}
          </p>
        )}
      </div>
    </div>
  );
}

function People({ c, ns, dot, people, mayUnpair }: { c: Channel; ns: string; dot: string; people: ChannelPerson[]; mayUnpair: boolean }) {
  const kind = channelName(c.spec.type);
  return (
    <div class="mt-4">
      <h4 class="text-sm font-semibold">People paired</h4>
      {people.length === 0 ? (
        <p class="mt-1 text-sm text-muted">Nobody yet: pair a chat, and whoever sends the code from it can talk to {dot}.</p>
      ) : (
        <ul class="mt-1 flex flex-col divide-y divide-border" data-testid="people">
          {people.map((p) => (
            <li key={p.id} class="flex flex-wrap items-center gap-2 py-2 text-sm" data-person={p.id}>
              <span class="font-medium">{p.label || `${kind} user ${p.id}`}</span>
              <span class="text-xs text-muted">
                {p.role === 'owner' ? 'owner' : p.role} · paired {ago(p.pairedAt)}
              </span>
              {mayUnpair && (
                <span class="ml-auto">
                  <Confirm
                    label="Unpair"
                    danger
                    question={
                      <>
                        Unpair {p.label || p.id}? They can no longer talk to {dot} or answer its approvals from {kind}; a new code pairs them again.
                      </>
                    }
                    yes="Unpair"
                    onYes={() => unpair(ns, dot, c.metadata.name, p.id)}
                  />
                </span>
              )}
            </li>
          ))}
        </ul>
      )}
    </div>
  );
}

/** Asks for a one-time code and shows how to send it; closes when someone pairs. */
function Pairing({ c, ns, dot }: { c: Channel; ns: string; dot: string }) {
  const kind = channelName(c.spec.type);
  const [code, setCode] = useState<PairingCode & { deadline: number }>();
  const [qr, setQr] = useState<{ size: number; d: string }>();
  const [error, setError] = useState('');
  const [busy, setBusy] = useState(false);
  const [paired, setPaired] = useState('');
  const [now, setNow] = useState(Date.now());
  // Who was paired when the code was made: someone new is the code's use.
  const before = useRef<Set<string>>(new Set());
  const people = c.status?.people ?? [];
  useEffect(() => {
    if (!code) return;
    const fresh = people.find((p) => !before.current.has(p.id));
    if (fresh) {
      setCode(undefined);
      setQr(undefined);
      setPaired(`${fresh.label || fresh.id} paired: they can talk to ${dot} from ${kind} now.`);
    }
  }, [people.map((p) => p.id).join(','), code]);
  useEffect(() => {
    if (!code) return;
    const t = setInterval(() => setNow(Date.now()), 1000);
    return () => clearInterval(t);
  }, [code]);
  async function ask() {
    setBusy(true);
    setError('');
    setPaired('');
    try {
      before.current = new Set(people.map((p) => p.id));
      const pc = await newPairingCode(ns, dot, c.metadata.name);
      setNow(Date.now());
      setCode(pc);
      setQr(pc.link ? await qrPath(pc.link) : undefined);
    } catch (e) {
      setError(says(e, 'Try again.'));
    } finally {
      setBusy(false);
    }
  }
  const left = code ? countdown(code.deadline, now) : '';
  return (
    <div class="mt-4">
      {!code && (
        <button type="button" class={btn.primary} disabled={busy} onClick={() => void ask()}>
          Pair a chat
        </button>
      )}
      <p role="status" class="mt-1 min-h-5 text-sm text-ok" data-testid="paired">
        {paired}
      </p>
      {error && (
        <p role="alert" class="text-sm text-danger">
          {error}
        </p>
      )}
      {code && (
        <div class="rounded-card border border-border p-3" data-testid="pairing">
          <h4 class="text-sm font-semibold">Pair a chat</h4>
          {left ? (
            <>
              <p class="mt-1 text-sm">
                {code.link ? (
                  <>
                    On the phone, scan the code or open the link; {kind} opens the chat with {accountWords(c) || 'the account'} with the words ready:
                    send them. Or send these words to {accountWords(c) || 'the account'} in a private chat:
                  </>
                ) : (
                  <>Send these words to {accountWords(c) || 'the account'} in a private chat:</>
                )}
              </p>
              <p class="mt-2">
                <code class="rounded-card bg-surface-2 px-2 py-1 font-mono text-base select-all" data-testid="pairing-words">
                  {code.words}
                </code>
              </p>
              {code.link && (
                <div class="mt-3 flex flex-wrap items-start gap-4">
                  {qr && <QRCode qr={qr} label={`QR code of the link ${code.link}`} testid="pairing-qr" min={160} />}
                  <p class="min-w-0 flex-1 text-sm break-all">
                    <a class="text-accent underline" href={code.link} target="_blank" rel="noopener noreferrer" data-testid="pairing-link">
                      {code.link}
                    </a>
                  </p>
                </div>
              )}
              <p class="mt-2 text-sm text-muted" data-testid="pairing-expires">
                The code works once, for {left} more (until {new Date(code.deadline).toLocaleTimeString([], { hour: '2-digit', minute: '2-digit' })}).
              </p>
            </>
          ) : (
            <p class="mt-1 text-sm" data-testid="pairing-expired">
              The code expired before anyone sent it.
            </p>
          )}
          <div class="mt-2 flex gap-2">
            {!left && (
              <button type="button" class={btn.primary} disabled={busy} onClick={() => void ask()}>
                New code
              </button>
            )}
            <button
              type="button"
              class={btn.quiet}
              onClick={() => {
                setCode(undefined);
                setQr(undefined);
              }}
            >
              Close
            </button>
          </div>
        </div>
      )}
    </div>
  );
}

/** A QR code as qrPath drew it: black modules on white, at least min pixels wide. */
function QRCode(props: { qr: { size: number; d: string }; label: string; testid: string; min: number }) {
  const { qr, min } = props;
  return (
    <svg
      role="img"
      aria-label={props.label}
      data-testid={props.testid}
      viewBox={`0 0 ${qr.size} ${qr.size}`}
      width={Math.max(min, qr.size * 4)}
      height={Math.max(min, qr.size * 4)}
      shape-rendering="crispEdges"
      class="rounded-card"
    >
      <rect width={qr.size} height={qr.size} fill="#fff" />
      <path d={qr.d} fill="#000" />
    </svg>
  );
}
