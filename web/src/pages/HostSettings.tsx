// The host's settings (/settings): the checks of the doctor and the health,
// the OpenRouter key as a write-only field, the namespaces the person can
// see and which one the pages show, and what this server is.
import { useEffect, useState } from 'preact/hooks';
import { getJSON, says } from '../lib/api';
import { dots, setViewNamespace, useCell, viewNamespace } from '../lib/live';
import { Command, type Check } from '../components/SetupChecklist';
import { KeyField } from '../components/KeyField';
import { btn, input } from '../lib/ui';

interface Health {
  status: string;
  database: string;
  version: string;
  openrouter_configured: boolean;
  database_kind: string;
  home: string;
  logs_dir: string;
}

const TONE: Record<string, string> = { ok: 'text-ok', warning: 'text-warn' };

/** The namespaces this person can list; the Dots' own when listing is not allowed. */
export function useNamespaces(): string[] {
  const ds = useCell(dots);
  const [listed, setListed] = useState<string[]>();
  useEffect(() => {
    getJSON<{ items: { metadata: { name: string } }[] }>('/api/v1/namespaces')
      .then((l) => setListed(l.items.map((n) => n.metadata.name).filter((n) => !n.startsWith('kube-'))))
      .catch(() => setListed([]));
  }, []);
  const seen = [...ds.items.values()].map((d) => d.metadata.namespace ?? 'default');
  return [...new Set([...(listed ?? []), ...seen, 'default'])].sort();
}

/** A choice of namespace, for a form. */
export function Namespaces({ value, onChange }: { value: string; onChange: (ns: string) => void }) {
  const all = useNamespaces();
  return (
    <div class="mt-3">
      <label for="f-namespace" class="block text-sm font-medium">
        Namespace
      </label>
      <select id="f-namespace" class={`mt-1 ${input}`} value={value} onChange={(e) => onChange((e.target as HTMLSelectElement).value)}>
        {all.map((n) => (
          <option key={n} value={n}>
            {n}
          </option>
        ))}
      </select>
    </div>
  );
}

export function HostSettings() {
  const [health, setHealth] = useState<Health>();
  const [healthError, setHealthError] = useState('');
  const [checks, setChecks] = useState<Check[]>();
  const [doctorError, setDoctorError] = useState('');
  const readHealth = () =>
    getJSON<Health>('/dots/v1/health')
      .then((h) => (setHealth(h), setHealthError('')))
      .catch((e) => setHealthError(`The server's health could not be read: ${says(e, 'Is invisible-dots server running? Reload the page to ask again.')}`));
  const readDoctor = () => {
    setChecks(undefined);
    getJSON<{ ok: boolean; checks: Check[] }>('/dots/v1/doctor')
      .then((r) => (setChecks(r.checks), setDoctorError('')))
      .catch((e) => setDoctorError(`The host's checks could not be read: ${says(e, 'Run invisible-dots doctor in a terminal to see them, or reload the page to ask again.')}`));
  };
  useEffect(() => {
    void readHealth();
    readDoctor();
  }, []);

  return (
    <div class="mx-auto max-w-3xl p-4 md:p-6">
      <h1 class="text-2xl font-semibold">Settings</h1>
      <p class="text-sm text-muted">This host's, for every Dot; a Dot's own settings are on its Settings tab.</p>

      <section aria-labelledby="checks-h" class="mt-5 rounded-card border border-border bg-surface p-4">
        <div class="flex items-center gap-2">
          <h2 id="checks-h" class="font-semibold">
            Checks
          </h2>
          <button type="button" class={`ml-auto ${btn.plain}`} onClick={() => (void readHealth(), readDoctor())}>
            Run again
          </button>
        </div>
        {healthError && <p class="mt-2 text-sm text-danger">{healthError}</p>}
        {health && (
          <ul class="mt-2 text-sm" data-testid="health-rows">
            <li>
              Control plane: <span class={health.status === 'ok' ? 'text-ok' : 'text-danger'}>{health.status}</span>
            </li>
            <li>
              Database ({health.database_kind}): <span class={health.database === 'ok' ? 'text-ok' : 'text-danger'}>{health.database}</span>
            </li>
          </ul>
        )}
        {doctorError && <p class="mt-2 text-sm text-danger">{doctorError}</p>}
        {!checks && !doctorError && <p class="mt-2 h-5 text-sm text-muted">Running the doctor (the accelerator's probe can take a while)…</p>}
        <ul class="mt-2 flex flex-col gap-2" data-testid="doctor-rows">
          {checks
            ?.filter((c) => !/openrouter/i.test(c.name))
            .map((c) => (
              <li key={c.name} class="text-sm" data-testid="doctor-row">
                <p>
                  <span class="font-medium">{c.name}</span> <span class={TONE[c.status] ?? 'text-danger'}>{c.status}</span>
                  <span class="text-muted">: {c.detail}</span>
                </p>
                {c.fix && c.status !== 'ok' && <Command text={c.fix} why={c.fixWhy} />}
              </li>
            ))}
        </ul>
      </section>

      <KeySection stored={health?.openrouter_configured} onStored={() => void readHealth()} />
      <NamespaceSwitch />

      {health && (
        <section aria-labelledby="about-h" class="mt-5 rounded-card border border-border bg-surface p-4">
          <h2 id="about-h" class="font-semibold">
            About
          </h2>
          <dl class="mt-2 grid grid-cols-[auto_1fr] gap-x-4 gap-y-1 text-sm">
            <dt class="text-muted">Version</dt>
            <dd>{health.version}</dd>
            <dt class="text-muted">Database</dt>
            <dd>{health.database_kind}</dd>
            <dt class="text-muted">Data</dt>
            <dd class="font-mono text-xs break-all">{health.home}</dd>
            <dt class="text-muted">Logs</dt>
            <dd class="font-mono text-xs break-all">{health.logs_dir}</dd>
          </dl>
          <p class="mt-2 text-sm text-muted">
            A Dot's own logs: <code class="font-mono">invisible-dots logs NAME</code>
          </p>
        </section>
      )}
    </div>
  );
}

/** The key goes in once and is never read back: the field empties at once. */
function KeySection({ stored, onStored }: { stored?: boolean; onStored: () => void }) {
  return (
    <section aria-labelledby="key-h" class="mt-5 rounded-card border border-border bg-surface p-4">
      <h2 id="key-h" class="mb-1 font-semibold">
        OpenRouter key
      </h2>
      <KeyField id="f-key" stored={stored} onStored={onStored} />
    </section>
  );
}

function NamespaceSwitch() {
  const all = useNamespaces();
  const chosen = useCell(viewNamespace);
  return (
    <section aria-labelledby="ns-h" class="mt-5 rounded-card border border-border bg-surface p-4">
      <h2 id="ns-h" class="font-semibold">
        Namespaces
      </h2>
      <p class="mt-1 text-sm text-muted">The namespaces you can see. The rail, Home and the Inbox show the one chosen here, or all of them.</p>
      <label for="f-view-ns" class="mt-2 block text-sm">
        Show
      </label>
      <select id="f-view-ns" class={`mt-1 ${input}`} value={chosen} onChange={(e) => setViewNamespace((e.target as HTMLSelectElement).value)}>
        <option value="">all namespaces</option>
        {all.map((n) => (
          <option key={n} value={n}>
            {n}
          </option>
        ))}
      </select>
    </section>
  );
}
