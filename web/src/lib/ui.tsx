// Small pieces the pages share: the button styles, and a confirmation that
// asks in place (no modal to trap the focus).
import type { ComponentChildren } from 'preact';
import { useState } from 'preact/hooks';

export const btn = {
  primary: 'rounded-card bg-accent px-3 py-1.5 text-sm font-medium text-accent-fg disabled:opacity-50',
  plain: 'rounded-card border border-border px-3 py-1.5 text-sm hover:bg-surface-2 disabled:opacity-50',
  danger: 'rounded-card border border-danger px-3 py-1.5 text-sm text-danger disabled:opacity-50',
  dangerSolid: 'rounded-card bg-danger px-3 py-1.5 text-sm text-surface disabled:opacity-50',
  quiet: 'rounded-card px-3 py-1.5 text-sm text-muted hover:bg-surface-2',
};

export const input = 'rounded-card border border-border bg-surface px-2 py-1.5';

/** A button that asks its question in place before it acts. */
export function Confirm({
  label,
  question,
  yes,
  onYes,
  danger = false,
  disabled = false,
}: {
  label: string;
  question: ComponentChildren;
  yes: string;
  onYes: () => Promise<void> | void;
  danger?: boolean;
  disabled?: boolean;
}) {
  const [asking, setAsking] = useState(false);
  const [busy, setBusy] = useState(false);
  const [error, setError] = useState('');
  if (!asking)
    return (
      <button type="button" class={danger ? btn.danger : btn.plain} disabled={disabled} onClick={() => setAsking(true)}>
        {label}
      </button>
    );
  return (
    <div class="flex flex-wrap items-center gap-2" role="group" aria-label={label}>
      <span class="text-sm">{question}</span>
      <button
        type="button"
        autoFocus
        disabled={busy}
        class={danger ? btn.dangerSolid : btn.primary}
        onClick={async () => {
          setBusy(true);
          setError('');
          try {
            await onYes();
            setAsking(false);
          } catch (e) {
            setError(`${(e as Error).message} Try again.`);
          } finally {
            setBusy(false);
          }
        }}
      >
        {yes}
      </button>
      <button type="button" class={btn.quiet} onClick={() => setAsking(false)}>
        No
      </button>
      {error && (
        <p role="alert" class="w-full text-sm text-danger">
          {error}
        </p>
      )}
    </div>
  );
}
