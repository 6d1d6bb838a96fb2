import type { Condition, Dot } from './types';

export function ago(iso?: string, now = Date.now()): string {
  if (!iso) return 'no activity yet';
  const s = Math.max(0, Math.round((now - Date.parse(iso)) / 1000));
  if (s < 45) return 'just now';
  if (s < 3600) return `${Math.round(s / 60)} min ago`;
  if (s < 86400) return `${Math.round(s / 3600)} h ago`;
  return new Date(iso).toLocaleDateString();
}

export type Tone = 'ok' | 'busy' | 'warn' | 'danger' | 'idle';

/** What a Dot's ring and badge say, from its phase. */
export function phaseTone(phase?: string): Tone {
  switch (phase) {
    case 'READY':
      return 'ok';
    case 'RUNNING':
      return 'busy';
    case 'WAITING_APPROVAL':
      return 'warn';
    case 'ERROR':
      return 'danger';
    default:
      return 'idle';
  }
}

export const toneText: Record<Tone, string> = {
  ok: 'text-ok',
  busy: 'text-accent',
  warn: 'text-warn',
  danger: 'text-danger',
  idle: 'text-muted',
};

export const toneRing: Record<Tone, string> = {
  ok: 'ring-ok',
  busy: 'ring-accent',
  warn: 'ring-warn',
  danger: 'ring-danger',
  idle: 'ring-border',
};

/** Why a Dot is as it is: its error, or its Ready condition's reason when not ready. */
export function reason(d: Dot): string {
  if (d.status?.error) return d.status.error;
  // Beyond its namespace's active-Dots cap: which cap, and how to change it.
  const admitted = d.status?.conditions?.find((c: Condition) => c.type === 'Admitted');
  if (admitted && admitted.status === 'False') return admitted.message || admitted.reason || '';
  const ready = d.status?.conditions?.find((c: Condition) => c.type === 'Ready');
  if (ready && ready.status !== 'True') return ready.message || ready.reason || '';
  return '';
}

export const phaseLabel = (p?: string) => (p ? p.replace('_', ' ').toLowerCase() : 'pending');
