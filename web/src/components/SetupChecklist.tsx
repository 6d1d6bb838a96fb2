// What this computer lacks before a Dot can run, from GET /dots/v1/doctor and
// GET /dots/v1/health (ref 9.7): each row that is not ready with the command
// that fixes it, in a block a button copies, and what the command does beside
// it. Setup needs an elevated terminal and an image build takes long, so they
// stay commands the person runs; the OpenRouter key is taken in place, in a
// write-only field. The checks are read again when the person comes back to
// the window while something is missing; a row that passes stays, turned
// green, and so does the whole list once the last thing is done. A host that
// is ready when the list is first read shows none of it.
import { useEffect, useRef, useState } from 'preact/hooks';
import { getJSON, says } from '../lib/api';
import { KeyField, storedMessage } from './KeyField';

/** A row of the doctor's report (hostagent/doctor.Check). */
export interface Check {
  name: string;
  status: string;
  detail: string;
  /** The command that fixes the row: one line, pasted as it is. */
  fix?: string;
  /** What the command does, and what else to do. */
  fixWhy?: string;
}

const KEY_ROW = 'OpenRouter key';
const KEY_FIX = 'invisible-dots secret openrouter';
const KEY_WHY = 'or in a terminal: asks for the key (or reads it piped in) and never echoes it';

// Rows that warn (tcg, the web client not built) do not keep a host from
// running a Dot: the list names what is missing or failed.
const notReady = (c: Check) => c.status !== 'ok' && c.status !== 'warning';

interface Read {
  checks: Check[];
  error?: string;
}

async function readChecks(): Promise<Read> {
  const [doctor, health] = await Promise.allSettled([
    getJSON<{ ok: boolean; checks: Check[] }>('/dots/v1/doctor'),
    getJSON<{ openrouter_configured: boolean; database: string }>('/dots/v1/health'),
  ]);
  const checks: Check[] = [];
  let error: string | undefined;
  if (doctor.status === 'fulfilled') {
    // The key is said once, from the health answer below.
    checks.push(...doctor.value.checks.filter((c) => !/openrouter|key/i.test(c.name)));
  } else error = `The host's checks could not be read: ${says(doctor.reason, 'Run invisible-dots doctor in a terminal to see them.')}`;
  if (health.status === 'fulfilled') {
    checks.push(
      health.value.openrouter_configured
        ? { name: KEY_ROW, status: 'ok', detail: 'A key is stored: the Dots can call their models.' }
        : { name: KEY_ROW, status: 'missing', detail: 'No key is stored: a Dot cannot call its models.', fix: KEY_FIX, fixWhy: KEY_WHY },
    );
  } else error = `The server's health could not be read: ${says(health.reason, 'Is invisible-dots server running?')}`;
  return { checks, error };
}

export function SetupChecklist() {
  // The rows the list holds: every check that was not ready at some read,
  // in the report's order, each with what the last read said of it.
  const [rows, setRows] = useState<Check[]>([]);
  const [error, setError] = useState<string>();
  const [keyNote, setKeyNote] = useState('');
  const shown = useRef(new Set<string>());
  const missing = rows.some(notReady);
  const missingRef = useRef(true);
  missingRef.current = missing || shown.current.size === 0;

  const read = () =>
    readChecks().then((r) => {
      for (const c of r.checks) if (notReady(c)) shown.current.add(c.name);
      const byName = new Map(r.checks.map((c) => [c.name, c]));
      setRows((prev) => {
        const before = new Map(prev.map((c) => [c.name, c]));
        // A row the last read did not carry keeps what was said of it.
        return [...new Set([...r.checks.map((c) => c.name), ...before.keys()])]
          .filter((n) => shown.current.has(n))
          .map((n) => byName.get(n) ?? before.get(n)!);
      });
      setError(r.error);
    });

  useEffect(() => {
    let live = true;
    const again = () => live && missingRef.current && void read();
    void read();
    addEventListener('focus', again);
    return () => {
      live = false;
      removeEventListener('focus', again);
    };
  }, []);

  if (rows.length === 0 && !error) return null;
  const done = rows.length > 0 && !missing && !error;
  return (
    <section
      aria-labelledby="setup-title"
      class={`mt-6 rounded-card border bg-surface p-4 ${done ? 'border-ok' : 'border-warn'}`}
      data-testid="setup-checklist"
      data-ready={done ? 'true' : 'false'}
    >
      <h2 id="setup-title" class="font-semibold">
        {done ? 'This computer is ready for a Dot' : 'This computer is not ready for a Dot yet'}
      </h2>
      <p class="mt-1 text-sm text-muted">
        {done
          ? 'Everything below is done.'
          : 'Run each command in a terminal on this machine; this list reads the checks again when you come back, and each row turns green as it passes.'}
      </p>
      {error && <p class="mt-2 text-sm text-danger">{error}</p>}
      <ul class="mt-3 flex flex-col gap-3">
        {rows.map((c) => {
          const ok = !notReady(c);
          return (
            <li key={c.name} class="text-sm" data-testid="setup-row" data-check={c.name} data-status={c.status}>
              <p>
                <span aria-hidden="true" class={ok ? 'text-ok' : 'text-danger'}>
                  {ok ? '✓ ' : '• '}
                </span>
                <span class="font-medium">{c.name}</span> <span class={ok ? 'text-ok' : 'text-danger'}>{ok ? 'done' : c.status}</span>
                <span class="text-muted">: {c.name === KEY_ROW && ok && keyNote ? keyNote : c.detail}</span>
              </p>
              {!ok && c.name === KEY_ROW && (
                <div class="mt-1">
                  <KeyField
                    id="setup-key"
                    label="Paste your OpenRouter key (never shown again once stored)"
                    onStored={(running) => {
                      setKeyNote(storedMessage(running));
                      void read();
                    }}
                  />
                </div>
              )}
              {!ok && c.fix && <Command text={c.fix} why={c.fixWhy} />}
            </li>
          );
        })}
      </ul>
    </section>
  );
}

/** A command to paste as it is, in a block a button copies, and what it does beside it. */
export function Command({ text, why }: { text: string; why?: string }) {
  const [copied, setCopied] = useState(false);
  return (
    <div class="mt-1 grid grid-cols-1 gap-1 sm:grid-cols-[minmax(0,3fr)_minmax(0,2fr)] sm:gap-3">
      <div class="flex min-w-0 items-start gap-2">
        <code class="min-w-0 flex-1 rounded-card bg-surface-2 px-2 py-1 font-mono text-xs wrap-anywhere whitespace-pre-wrap" data-testid="fix-command">
          {text}
        </code>
        <button
          type="button"
          class="shrink-0 rounded-card border border-border px-2 py-0.5 text-xs"
          onClick={() =>
            void navigator.clipboard?.writeText(text).then(() => {
              setCopied(true);
              setTimeout(() => setCopied(false), 1500);
            })
          }
        >
          {copied ? 'Copied' : 'Copy'}
        </button>
      </div>
      {why && (
        <p class="text-xs text-muted" data-testid="fix-why">
          {why}
        </p>
      )}
    </div>
  );
}
