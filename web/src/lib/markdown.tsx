// The Dot's answers as Markdown, turned into elements and never into HTML:
// raw HTML in an answer is shown as the text it is, a link opens in a new tab
// without a referrer and only for http, https and mailto, an image is a link
// to it, a fenced block has a copy button.
import type { ComponentChildren } from 'preact';
import { useState } from 'preact/hooks';

const SAFE_URL = /^(https?:|mailto:)/i;

function Link({ href, children }: { href: string; children: ComponentChildren }) {
  if (!SAFE_URL.test(href)) return <>{children}</>;
  return (
    <a href={href} target="_blank" rel="noopener noreferrer" referrerpolicy="no-referrer" class="text-accent underline">
      {children}
    </a>
  );
}

// One inline token at a time, earliest match first.
const INLINE =
  /(`+)([^`]|[^`][\s\S]*?[^`])\1|!\[([^\]]*)\]\(([^)\s]+)\)|\[([^\]]+)\]\(([^)\s]+)\)|\*\*([^*]+)\*\*|__([^_]+)__|\*([^*\s][^*]*)\*|_([^_\s][^_]*)_|(https?:\/\/[^\s<>()]+[^\s<>().,;:!?'"])/;

export function inline(text: string): ComponentChildren[] {
  const out: ComponentChildren[] = [];
  let rest = text;
  while (rest) {
    const m = INLINE.exec(rest);
    if (!m) {
      out.push(rest);
      break;
    }
    if (m.index > 0) out.push(rest.slice(0, m.index));
    const k = out.length;
    if (m[2] !== undefined) out.push(<code key={k} class="rounded bg-surface-2 px-1 font-mono text-[0.9em]">{m[2]}</code>);
    else if (m[4] !== undefined) out.push(<Link key={k} href={m[4]}>{m[3] || m[4]}</Link>);
    else if (m[6] !== undefined) out.push(<Link key={k} href={m[6]}>{inline(m[5])}</Link>);
    else if (m[7] !== undefined || m[8] !== undefined) out.push(<strong key={k}>{inline(m[7] ?? m[8])}</strong>);
    else if (m[9] !== undefined || m[10] !== undefined) out.push(<em key={k}>{inline(m[9] ?? m[10])}</em>);
    else if (m[11] !== undefined) out.push(<Link key={k} href={m[11]}>{m[11]}</Link>);
    rest = rest.slice(m.index + m[0].length);
  }
  return out;
}

function CodeBlock({ code, lang }: { code: string; lang: string }) {
  const [copied, setCopied] = useState(false);
  return (
    <div class="relative my-2">
      <pre tabIndex={0} class="overflow-x-auto rounded-card bg-surface-2 p-3 pr-16 font-mono text-sm" data-lang={lang || undefined}>
        <code>{code}</code>
      </pre>
      <button
        type="button"
        class="absolute top-2 right-2 rounded-card border border-border bg-surface px-2 py-0.5 text-xs"
        onClick={() => {
          void navigator.clipboard?.writeText(code).then(() => {
            setCopied(true);
            setTimeout(() => setCopied(false), 1500);
          });
        }}
      >
        {copied ? 'Copied' : 'Copy'}
      </button>
    </div>
  );
}

/** Lines with single newlines kept as line breaks. */
function lines(text: string): ComponentChildren[] {
  return text.split('\n').flatMap((l, i) => (i ? [<br key={`br${i}`} />, ...inline(l)] : inline(l)));
}

export function Markdown({ text }: { text: string }) {
  const blocks: ComponentChildren[] = [];
  const src = text.replace(/\r\n?/g, '\n').split('\n');
  let i = 0;
  const key = () => blocks.length;
  while (i < src.length) {
    const line = src[i];
    const fence = /^\s*(```+|~~~+)\s*([\w+-]*)\s*$/.exec(line);
    if (fence) {
      const body: string[] = [];
      i++;
      while (i < src.length && !src[i].trimStart().startsWith(fence[1])) body.push(src[i++]);
      i++;
      blocks.push(<CodeBlock key={key()} code={body.join('\n')} lang={fence[2]} />);
      continue;
    }
    if (!line.trim()) {
      i++;
      continue;
    }
    const heading = /^(#{1,6})\s+(.*)$/.exec(line);
    if (heading) {
      blocks.push(
        <p key={key()} class="mt-2 font-semibold" role="heading" aria-level={Math.min(6, heading[1].length + 2)}>
          {inline(heading[2])}
        </p>,
      );
      i++;
      continue;
    }
    const listItem = /^\s*([-*+]|\d+[.)])\s+(.*)$/;
    if (listItem.test(line)) {
      const ordered = /^\s*\d/.test(line);
      const items: string[] = [];
      while (i < src.length && listItem.test(src[i])) items.push(listItem.exec(src[i++])![2]);
      const Tag = ordered ? 'ol' : 'ul';
      blocks.push(
        <Tag key={key()} class={`my-1 pl-5 ${ordered ? 'list-decimal' : 'list-disc'}`}>
          {items.map((it, n) => (
            <li key={n}>{inline(it)}</li>
          ))}
        </Tag>,
      );
      continue;
    }
    if (line.startsWith('>')) {
      const quoted: string[] = [];
      while (i < src.length && src[i].startsWith('>')) quoted.push(src[i++].replace(/^>\s?/, ''));
      blocks.push(
        <blockquote key={key()} class="my-1 border-l-2 border-border pl-3 text-muted">
          {lines(quoted.join('\n'))}
        </blockquote>,
      );
      continue;
    }
    const para: string[] = [];
    while (i < src.length && src[i].trim() && !/^\s*(```|~~~)/.test(src[i]) && !/^#{1,6}\s/.test(src[i]) && !listItem.test(src[i]) && !src[i].startsWith('>'))
      para.push(src[i++]);
    blocks.push(
      <p key={key()} class="my-1">
        {lines(para.join('\n'))}
      </p>,
    );
  }
  return <div class="break-words">{blocks}</div>;
}
