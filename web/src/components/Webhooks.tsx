// A Dot's Webhooks, on its Channels page: one row per Webhook whose
// spec.dotName is the Dot (name, scheme, paused, last delivery, the counts,
// the last refusal's reason), read from the resource API and read again
// every few seconds (the listener writes the counts once a second). They
// are made with the command line, which shows the secret once; the page
// never reads a Secret.
import { useEffect, useState } from 'preact/hooks';
import { GROUP, getJSON, says } from '../lib/api';
import { ago } from '../lib/format';
import type { Webhook } from '../lib/types';

/** How often the list is read again. */
const REFRESH_MS = 5000;

const SIGNATURE_WORDS: Record<string, string> = {
  github: 'GitHub (X-Hub-Signature-256)',
  standard: 'Standard Webhooks',
  token: 'bearer token',
};

/** The Webhooks of the Dot ns/name among items, by name. */
export function webhooksOf(items: Webhook[], name: string): Webhook[] {
  return items.filter((w) => w.spec.dotName === name).sort((a, b) => a.metadata.name.localeCompare(b.metadata.name));
}

export function Webhooks({ ns, name }: { ns: string; name: string }) {
  const [items, setItems] = useState<Webhook[]>();
  const [error, setError] = useState('');
  useEffect(() => {
    const ctl = new AbortController();
    let timer: ReturnType<typeof setTimeout> | undefined;
    const read = () =>
      getJSON<{ items: Webhook[] }>(`${GROUP}/namespaces/${encodeURIComponent(ns)}/webhooks`, ctl.signal)
        .then((list) => {
          setItems(webhooksOf(list.items ?? [], name));
          setError('');
        })
        .catch((e) => !ctl.signal.aborted && setError(`The webhooks could not be read: ${says(e, 'The page tries again.')}`))
        .finally(() => {
          if (!ctl.signal.aborted) timer = setTimeout(read, REFRESH_MS);
        });
    void read();
    return () => {
      ctl.abort();
      clearTimeout(timer);
    };
  }, [ns, name]);
  return (
    <section class="rounded-card border border-border bg-surface p-4" data-testid="webhooks" aria-labelledby="webhooks-title">
      <h3 id="webhooks-title" class="font-semibold">
        Webhooks
      </h3>
      <p class="mt-1 text-sm text-muted">
        Programs hand {name} work through a signed webhook: each delivery makes one task, its fields marked as coming from an untrusted
        sender. Add one with <code>invisible-dots webhook add NAME --dot {name} --description '…'</code>; its URL and secret are shown there,
        once.
      </p>
      {error && (
        <p role="alert" class="mt-2 text-sm text-danger">
          {error}
        </p>
      )}
      {!items && !error && <p class="mt-2 text-sm text-muted">Reading the webhooks…</p>}
      {items && items.length === 0 && <p class="mt-2 text-sm text-muted">{name} has no webhook.</p>}
      {items && items.length > 0 && (
        <table class="mt-3 w-full text-left text-sm">
          <thead class="text-muted">
            <tr>
              <th class="py-1 pr-3 font-medium">Name</th>
              <th class="py-1 pr-3 font-medium">Signature</th>
              <th class="py-1 pr-3 font-medium">Last delivery</th>
              <th class="py-1 pr-3 font-medium">Accepted</th>
              <th class="py-1 pr-3 font-medium">Repeated</th>
              <th class="py-1 pr-3 font-medium">Refused</th>
            </tr>
          </thead>
          <tbody>
            {items.map((w) => (
              <tr key={w.metadata.uid} class="border-t border-border align-top" data-testid="webhook-row">
                <td class="py-1 pr-3">
                  <span class="font-medium">{w.metadata.name}</span>
                  {w.spec.paused && <span class="ml-2 text-xs text-warn">paused</span>}
                  {w.status?.lastError && (
                    <p class="text-xs text-muted" title={w.status.lastErrorTime}>
                      last refused: {w.status.lastError}
                    </p>
                  )}
                </td>
                <td class="py-1 pr-3">{SIGNATURE_WORDS[w.spec.signature] ?? w.spec.signature}</td>
                <td class="py-1 pr-3">{w.status?.lastDeliveryTime ? ago(w.status.lastDeliveryTime) : 'none yet'}</td>
                <td class="py-1 pr-3 tabular-nums">{w.status?.accepted ?? 0}</td>
                <td class="py-1 pr-3 tabular-nums">{w.status?.duplicates ?? 0}</td>
                <td class="py-1 pr-3 tabular-nums">{w.status?.refused ?? 0}</td>
              </tr>
            ))}
          </tbody>
        </table>
      )}
    </section>
  );
}
