// A Dot's skills (ref 8.6), read only: the engine's list through the Dots
// API's skills route, each with its name, its description and whether it is
// built in or the Dot wrote it; the open one (?skill=) as Markdown.
import { useEffect, useState } from 'preact/hooks';
import { ApiError, dotPath, getJSON } from '../lib/api';
import { computers, onStreamEvent, useCell } from '../lib/live';
import { Markdown } from '../lib/markdown';
import { dotHref, useQuery } from '../lib/router';
import type { Skill } from '../lib/types';
import { NotRunning } from '../components/NotRunning';
import { power } from '../lib/power';

const SOURCE_WORDS: Record<string, string> = { builtin: 'built in', dot: 'written by the Dot' };

/** A SKILL.md without its frontmatter (the name and description, shown above it). */
export function withoutFrontmatter(md: string): string {
  const m = /^---\r?\n[\s\S]*?\r?\n---\r?\n?/.exec(md);
  return m ? md.slice(m[0].length) : md;
}

export function Skills({ ns, name }: { ns: string; name: string }) {
  const c = useCell(computers).items.get(`${ns}/${name}`);
  const state = c?.status?.state;
  const running = state === 'RUNNING';
  const q = useQuery();
  const open = q.get('skill') ?? '';
  const [skills, setSkills] = useState<Skill[]>();
  const [error, setError] = useState('');
  // The route's own 409: the computer stopped between the watch and the read.
  const [stopped, setStopped] = useState(false);
  const [version, setVersion] = useState(0);
  useEffect(() => {
    if (!running) return;
    const ctl = new AbortController();
    setError('');
    setStopped(false);
    getJSON<{ skills: Skill[] }>(`${dotPath(ns, name)}/skills`, ctl.signal)
      .then((s) => setSkills([...s.skills].sort((a, b) => a.name.localeCompare(b.name))))
      .catch((e) => {
        if (ctl.signal.aborted) return;
        if (e instanceof ApiError && e.code === 'computer_stopped') setStopped(true);
        else setError(`The skills could not be read: ${(e as Error).message}`);
      });
    return () => ctl.abort();
  }, [ns, name, running, version]);
  // A turn that ends may have written a skill: read the list again then.
  useEffect(
    () =>
      onStreamEvent((e) => {
        if (e.namespace === ns && e.dot === name && e.type === 'agent.state' && e.data?.state === 'IDLE') setVersion((n) => n + 1);
      }),
    [ns, name],
  );
  const base = dotHref(ns, name, 'skills');
  const shown = skills?.find((s) => s.name === open);
  if (!running || stopped)
    return (
      <div class="mx-auto max-w-5xl p-4 md:p-6">
        <NotRunning ns={ns} state={stopped ? 'stopped' : state} what="list of skills" onStart={() => power(ns, name, 'start')} />
      </div>
    );
  return (
    <div class="mx-auto grid max-w-5xl gap-4 p-4 md:grid-cols-[18rem_1fr] md:p-6">
      <section aria-labelledby="skills-h">
        <h2 id="skills-h" class="font-semibold">
          Skills
        </h2>
        {error && (
          <p role="alert" class="mt-2 text-sm text-danger" data-testid="skills-error">
            {error} Try again once the computer answers, or see its Activity.
          </p>
        )}
        {!skills && !error && <p class="mt-2 text-sm text-muted">Reading the skills…</p>}
        {skills && skills.length === 0 && <p class="mt-2 text-sm text-muted">{name} has no skills yet; it can write its own.</p>}
        <ul class="mt-2 flex flex-col gap-1" data-testid="skills">
          {skills?.map((s) => (
            <li key={s.name}>
              <a
                href={`${base}?skill=${encodeURIComponent(s.name)}`}
                aria-current={s.name === open ? 'page' : undefined}
                class={`block rounded-card px-2 py-1.5 text-sm hover:bg-surface-2 ${s.name === open ? 'bg-surface-2' : ''}`}
                data-skill={s.name}
              >
                <span class="font-medium">{s.name}</span>{' '}
                <span class="text-xs text-muted">· {SOURCE_WORDS[s.source] ?? s.source}</span>
                <span class="block truncate text-xs text-muted">{s.description}</span>
              </a>
            </li>
          ))}
        </ul>
      </section>
      <div>
        {open && skills && !shown && <p class="text-sm text-muted">{name} has no skill named {open}.</p>}
        {shown && (
          <article class="rounded-card border border-border bg-surface p-4" data-testid="skill-view">
            <p class="truncate font-mono text-xs text-muted">{shown.path}</p>
            <h3 class="mt-1 text-lg font-semibold">{shown.name}</h3>
            <p class="text-sm text-muted">{shown.description}</p>
            <div class="mt-3">
              <Markdown text={withoutFrontmatter(shown.content)} />
            </div>
          </article>
        )}
      </div>
    </div>
  );
}
