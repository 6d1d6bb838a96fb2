// What this computer lacks before a Dot can run, from GET /dots/v1/doctor and
// GET /dots/v1/health: each row that is not ok with the command that fixes
// it. Setup needs an elevated terminal and an image build takes long, so they
// stay commands the person runs. Read again when the person comes back to
// the window while something is missing.
import { useEffect, useState } from 'preact/hooks';
import { getJSON, says } from '../lib/api';

interface Check {
  name: string;
  status: string;
  detail: string;
  fix?: string;
}

interface State {
  checks: Check[];
  error?: string;
  loaded: boolean;
}

const KEY_FIX = 'printf \'%s\' "$OPENROUTER_API_KEY" | invisible-dots secret openrouter';

async function readChecks(): Promise<State> {
  const [doctor, health] = await Promise.allSettled([
    getJSON<{ ok: boolean; checks: Check[] }>('/dots/v1/doctor'),
    getJSON<{ openrouter_configured: boolean; database: string }>('/dots/v1/health'),
  ]);
  const checks: Check[] = [];
  let error: string | undefined;
  if (doctor.status === 'fulfilled') {
    // The key is said once, from the health answer below.
    checks.push(...doctor.value.checks.filter((c) => c.status !== 'ok' && c.status !== 'warning' && !/openrouter|key/i.test(c.name)));
  } else error = `The host's checks could not be read: ${says(doctor.reason, 'Run invisible-dots doctor in a terminal to see them.')}`;
  if (health.status === 'fulfilled') {
    if (!health.value.openrouter_configured)
      checks.push({ name: 'OpenRouter key', status: 'missing', detail: 'No key is stored: a Dot cannot call its models.', fix: KEY_FIX });
  } else error = `The server's health could not be read: ${says(health.reason, 'Is invisible-dots server running?')}`;
  return { checks, error, loaded: true };
}

export function SetupChecklist() {
  const [state, setState] = useState<State>({ checks: [], loaded: false });
  useEffect(() => {
    let live = true;
    const read = () => void readChecks().then((s) => live && setState(s));
    read();
    const onFocus = () => read();
    addEventListener('focus', onFocus);
    return () => {
      live = false;
      removeEventListener('focus', onFocus);
    };
  }, []);
  if (!state.loaded || (state.checks.length === 0 && !state.error)) return null;
  return (
    <section aria-labelledby="setup-title" class="mt-6 rounded-card border border-warn bg-surface p-4" data-testid="setup-checklist">
      <h2 id="setup-title" class="font-semibold">
        This computer is not ready for a Dot yet
      </h2>
      <p class="mt-1 text-sm text-muted">Run each command in a terminal on this machine; this list reads the checks again when you come back.</p>
      {state.error && <p class="mt-2 text-sm text-danger">{state.error}</p>}
      <ul class="mt-3 flex flex-col gap-3">
        {state.checks.map((c) => (
          <li key={c.name} class="text-sm" data-testid="setup-row">
            <p>
              <span class="font-medium">{c.name}</span> <span class="text-danger">{c.status}</span>
              <span class="text-muted">: {c.detail}</span>
            </p>
            {c.fix && <Command text={c.fix} />}
          </li>
        ))}
      </ul>
    </section>
  );
}

export function Command({ text }: { text: string }) {
  const [copied, setCopied] = useState(false);
  return (
    <div class="mt-1 flex items-start gap-2">
      <code class="min-w-0 flex-1 rounded-card bg-surface-2 px-2 py-1 font-mono text-xs break-all whitespace-pre-wrap">{text}</code>
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
  );
}
