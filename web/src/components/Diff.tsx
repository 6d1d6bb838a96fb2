import { fileChanges, visible } from '../lib/diff';

// The most lines one file's change shows in a card; the rest are under the
// card's Details, as the raw arguments.
const MAX_LINES = 400;

/**
 * What a file-editing call would change, old against new, for each file it
 * touches. Every line is text (never markup) and made visible by `visible`;
 * each block takes the focus, so the keyboard can scroll it.
 */
export function FileDiffs({ tool, args }: { tool: string; args: unknown }) {
  const changes = fileChanges(tool, args);
  if (!changes.length) return null;
  return (
    <div class="mt-2 flex flex-col gap-2" data-testid="file-diff">
      {changes.map((c, n) => {
        const added = c.lines.filter((l) => l.op === '+').length;
        const removed = c.lines.filter((l) => l.op === '-').length;
        return (
          <figure key={n} class="text-sm">
            <figcaption class="flex flex-wrap gap-x-2">
              <span class="text-muted">File</span>
              <code class="min-w-0 font-mono break-all">{visible(c.path) || '(no path given)'}</code>
              <span class="text-muted">· {c.what}</span>
              <span class="ml-auto text-xs tabular-nums">
                <span class="text-ok">+{added}</span> <span class="text-danger">−{removed}</span>
              </span>
            </figcaption>
            <pre tabIndex={0} class="mt-1 max-h-80 overflow-auto rounded-card border border-border bg-surface p-2 font-mono text-xs" data-testid="diff-lines">
              {c.lines.slice(0, MAX_LINES).map((l, i) =>
                l.op === '+' ? (
                  <ins key={i} class="block text-ok no-underline" data-op="add">
                    + {visible(l.text)}
                  </ins>
                ) : l.op === '-' ? (
                  <del key={i} class="block text-danger no-underline" data-op="del">
                    - {visible(l.text)}
                  </del>
                ) : (
                  <span key={i} class="block text-muted">
                    {'  '}
                    {visible(l.text)}
                  </span>
                ),
              )}
              {c.lines.length > MAX_LINES && <span class="block text-muted">… {c.lines.length - MAX_LINES} more lines: see Details</span>}
              {c.lines.length === 0 && <span class="block text-muted">(empty)</span>}
            </pre>
          </figure>
        );
      })}
    </div>
  );
}
