// The OpenRouter key as a write-only field (ref 9.7): the key goes in once
// over PUT /dots/v1/secrets/openrouter and is never read back; the field
// empties at once. Host settings and the setup checklist both draw it. The
// answer says how many running Dots got the key (running_dots).
import { useState } from 'preact/hooks';
import { request } from '../lib/api';
import { btn, input } from '../lib/ui';

interface Stored {
  secret: string;
  created: boolean;
  running_dots?: number;
}

/** What the page says once the key is stored, from the answer's count. */
export function storedMessage(running?: number): string {
  if (running === undefined) return 'Stored. Every Dot without a key of its own uses it; running Dots get it from their host.';
  if (running === 0) return 'Stored. No Dot is running now; every Dot without a key of its own gets it when its computer starts.';
  const dots = running === 1 ? '1 running Dot got' : `${running} running Dots got`;
  return `Stored. ${dots} the new key; every other Dot without a key of its own gets it when its computer starts.`;
}

export function KeyField({ id, label, stored, onStored }: { id: string; label?: string; stored?: boolean; onStored: (running?: number) => void }) {
  const [key, setKey] = useState('');
  const [busy, setBusy] = useState(false);
  const [message, setMessage] = useState<{ ok: boolean; text: string }>();
  async function save() {
    const value = key;
    if (!value || busy) return;
    setKey('');
    setBusy(true);
    try {
      const out = await request<Stored>('/dots/v1/secrets/openrouter', {
        method: 'PUT',
        headers: { 'Content-Type': 'application/json' },
        body: JSON.stringify({ key: value }),
      });
      setMessage({ ok: true, text: storedMessage(out?.running_dots) });
      onStored(out?.running_dots);
    } catch (err) {
      setMessage({ ok: false, text: `${(err as Error).message} Paste the key again.` });
    } finally {
      setBusy(false);
    }
  }
  return (
    // Not a form of its own: the checklist also sits inside Create a Dot's form.
    <div data-testid="key-field">
      {stored !== undefined && (
        <p class="text-sm" data-testid="key-state">
          {stored ? 'A key is stored. A new one replaces it.' : 'No key is stored: a Dot cannot call its models.'}
        </p>
      )}
      <label for={id} class="mt-2 block text-sm">
        {label ?? 'Key (never shown again once stored)'}
      </label>
      <div class="mt-1 flex flex-wrap gap-2">
        <input
          id={id}
          type="password"
          autoComplete="off"
          spellcheck={false}
          class={`min-w-0 flex-1 ${input}`}
          value={key}
          onInput={(e) => setKey((e.target as HTMLInputElement).value)}
          onKeyDown={(e) => {
            if (e.key !== 'Enter') return;
            e.preventDefault();
            void save();
          }}
        />
        <button type="button" class={btn.primary} disabled={busy || !key} onClick={() => void save()}>
          Store the key
        </button>
      </div>
      <p role="status" class={`mt-1 min-h-5 text-sm ${message?.ok ? 'text-ok' : 'text-danger'}`} data-testid="key-message">
        {message?.text}
      </p>
    </div>
  );
}
