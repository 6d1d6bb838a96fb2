// The changes a file-editing call would make, as lines: what the approval
// card shows for the engine's write_file, edit_file and apply_patch
// (guest/engine/tools/table.go names their arguments).

export type DiffLine = { op: ' ' | '-' | '+'; text: string };

// Beyond this many cells of the table, the diff is every old line removed
// and every new one added: still true, just not minimal, and the page stays
// quick on a call that rewrites a long file.
const MAX_CELLS = 250_000;

/** A line diff of a to b (the longest common subsequence of their lines). */
export function lineDiff(a: string, b: string): DiffLine[] {
  const x = a === '' ? [] : a.split('\n');
  const y = b === '' ? [] : b.split('\n');
  if (x.length * y.length > MAX_CELLS) {
    return [...x.map((text) => ({ op: '-' as const, text })), ...y.map((text) => ({ op: '+' as const, text }))];
  }
  // lcs[i][j]: the common lines of x[i..] and y[j..].
  const lcs = Array.from({ length: x.length + 1 }, () => new Uint32Array(y.length + 1));
  for (let i = x.length - 1; i >= 0; i--)
    for (let j = y.length - 1; j >= 0; j--) lcs[i][j] = x[i] === y[j] ? lcs[i + 1][j + 1] + 1 : Math.max(lcs[i + 1][j], lcs[i][j + 1]);
  const out: DiffLine[] = [];
  let i = 0;
  let j = 0;
  while (i < x.length && j < y.length) {
    if (x[i] === y[j]) {
      out.push({ op: ' ', text: x[i] });
      i++;
      j++;
    } else if (lcs[i + 1][j] >= lcs[i][j + 1]) out.push({ op: '-', text: x[i++] });
    else out.push({ op: '+', text: y[j++] });
  }
  while (i < x.length) out.push({ op: '-', text: x[i++] });
  while (j < y.length) out.push({ op: '+', text: y[j++] });
  return out;
}

/**
 * A line as it can be shown safely: the page renders it as text (never as
 * markup), and here the characters that would make it read as something
 * else are made visible: control characters (a terminal escape, a carriage
 * return that hides what came before it) as their control pictures, and the
 * bidirectional overrides and invisible characters that can make code read
 * differently from what runs ("Trojan Source", CVE-2021-42574) as their
 * code point.
 */
export function visible(line: string): string {
  return line
    .replace(/[\u0000-\u0008\u000b-\u001f\u007f]/g, (c) => (c === '\u007f' ? '\u2421' : String.fromCharCode(0x2400 + c.charCodeAt(0))))
    .replace(/[\u200b-\u200f\u202a-\u202e\u2060-\u2064\u2066-\u2069\ufeff]/g, (c) => `⟨U+${c.charCodeAt(0).toString(16).toUpperCase().padStart(4, '0')}⟩`);
}

/** One file's change in a call: its path and the lines. */
export type FileChange = { path: string; what: string; lines: DiffLine[] };

const str = (v: unknown) => (typeof v === 'string' ? v : '');

/** The file changes of a call of the engine's file tools; none for another tool. */
export function fileChanges(tool: string, args: unknown): FileChange[] {
  if (!args || typeof args !== 'object') return [];
  const a = args as Record<string, unknown>;
  const added = (text: string): DiffLine[] => (text === '' ? [] : text.split('\n').map((t) => ({ op: '+' as const, text: t })));
  switch (tool) {
    case 'write_file':
      return [{ path: str(a.path), what: 'the whole new content', lines: added(str(a.content)) }];
    case 'edit_file':
      return [{ path: str(a.path), what: a.replace_all === true ? 'every occurrence replaced' : 'replaced', lines: lineDiff(str(a.old_text), str(a.new_text)) }];
    case 'apply_patch':
      return (Array.isArray(a.edits) ? a.edits : []).map((e: any) =>
        e?.action === 'add'
          ? { path: str(e?.path), what: 'a new file', lines: added(str(e?.new_text)) }
          : { path: str(e?.path), what: e?.replace_all === true ? 'every occurrence replaced' : 'replaced', lines: lineDiff(str(e?.old_text), str(e?.new_text)) },
      );
  }
  return [];
}
