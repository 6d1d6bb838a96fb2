import { useEffect, useState } from 'preact/hooks';
import { dots, inView, streamState, useCell, viewNamespace } from '../lib/live';
import { scope, signOut, useCan, useSession } from '../lib/session';
import { useAttention } from '../lib/attention';
import { chatHref, type Route } from '../lib/router';
import { phaseLabel, phaseTone, toneRing } from '../lib/format';
import { currentTheme, toggleTheme } from '../lib/theme';
import { key } from '../lib/types';

const linkState = { live: 'bg-ok', connecting: 'bg-warn', down: 'bg-danger' } as const;

export function Rail({ route }: { route: Route }) {
  const ds = useCell(dots);
  const stream = useCell(streamState);
  const chosen = useCell(viewNamespace);
  const [theme, setTheme] = useState(currentTheme());
  const inbox = useAttention().count;
  const me = useSession();
  const can = useCan(scope() || 'default');
  useEffect(() => {
    document.title = inbox ? `(${inbox}) Dots` : 'Dots';
    setFavicon(inbox);
  }, [inbox]);
  const list = [...ds.items.values()].filter((d) => inView(d.metadata.namespace, chosen)).sort((a, b) => key(a.metadata).localeCompare(key(b.metadata)));
  const navItem = (active: boolean) =>
    `flex items-center gap-2 rounded-card px-2 py-1.5 text-sm whitespace-nowrap hover:bg-surface-2 ${active ? 'bg-surface-2 font-semibold' : ''}`;
  return (
    <nav
      aria-label="Dots"
      class="relative flex shrink-0 items-center gap-1 overflow-x-auto border-b border-border bg-surface p-2 md:w-60 md:flex-col md:items-stretch md:overflow-y-auto md:border-r md:border-b-0"
    >
      <a href="/" class={navItem(route.page === 'home')} aria-current={route.page === 'home' ? 'page' : undefined}>
        <span class="font-bold tracking-tight">Dots</span>
      </a>
      <a href="/inbox" class={navItem(route.page === 'inbox')} aria-current={route.page === 'inbox' ? 'page' : undefined}>
        Inbox
        <span
          data-testid="inbox-count"
          class={`ml-auto min-w-6 rounded-full px-1.5 text-center text-xs tabular-nums ${inbox ? 'bg-warn text-surface' : 'bg-surface-2 text-muted'}`}
          aria-label={`${inbox} waiting`}
        >
          {inbox}
        </span>
      </a>
      {/* The host's settings are the machine's owner's: hidden from a person who may not read the Hosts. */}
      {can('list', 'hosts') && (
        <a href="/settings" class={navItem(route.page === 'settings')} aria-current={route.page === 'settings' ? 'page' : undefined}>
          Settings
        </a>
      )}
      <div class="hidden items-center px-2 pt-3 pb-1 text-xs uppercase tracking-wide text-muted md:flex">
        Your Dots
        {can('create', 'dots') && (
          <a href="/new" class="ml-auto rounded-card px-1.5 normal-case tracking-normal text-accent hover:bg-surface-2" aria-current={route.page === 'new' ? 'page' : undefined}>
            + New Dot
          </a>
        )}
      </div>
      <ul class="flex gap-1 md:flex-col" data-testid="rail-dots">
        {list.map((d) => {
          const active = route.page === 'dot' && route.ns === d.metadata.namespace && route.name === d.metadata.name;
          const tone = phaseTone(d.status?.phase);
          return (
            <li key={d.metadata.uid}>
              <a
                href={chatHref(d.metadata.namespace ?? 'default', d.metadata.name)}
                class={navItem(active)}
                aria-current={active ? 'page' : undefined}
                title={`${d.metadata.namespace}/${d.metadata.name}: ${phaseLabel(d.status?.phase)}`}
              >
                <span
                  aria-hidden="true"
                  class={`grid size-6 shrink-0 place-items-center rounded-full bg-surface-2 text-xs font-semibold uppercase ring-2 ${toneRing[tone]}`}
                >
                  {d.metadata.name.slice(0, 1)}
                </span>
                <span class="truncate">{d.metadata.name}</span>
                <span class="sr-only">{phaseLabel(d.status?.phase)}</span>
              </a>
            </li>
          );
        })}
        {ds.loaded && list.length === 0 && <li class="hidden px-2 text-sm text-muted md:block">None yet</li>}
      </ul>
      {me.person && (
        <div class="flex items-center gap-2 px-2 text-xs text-muted md:mt-auto md:pt-4" data-testid="signed-in">
          <span class="truncate" title={`${me.person.user}${me.person.namespace ? `, namespace ${me.person.namespace}` : ''}`}>
            {me.person.name}
            {me.person.namespace ? ` · ${me.person.namespace}` : ''}
          </span>
          <button type="button" class="ml-auto rounded-card border border-border px-2 py-1 hover:bg-surface-2" onClick={() => void signOut()}>
            Sign out
          </button>
        </div>
      )}
      <div class={`ml-auto flex items-center gap-3 px-2 text-xs text-muted md:ml-0 ${me.person ? 'md:pt-2' : 'md:mt-auto md:pt-4'}`}>
        <span class="flex items-center gap-1" title={ds.error ?? `API ${ds.state}`}>
          <span aria-hidden="true" class={`size-2 rounded-full ${linkState[ds.state]}`} />
          API
          <span class="sr-only">{ds.state}</span>
        </span>
        <span class="flex items-center gap-1" title={`live stream ${stream}`}>
          <span aria-hidden="true" class={`size-2 rounded-full ${linkState[stream]}`} />
          Live
          <span class="sr-only">{stream}</span>
        </span>
        <button
          type="button"
          class="rounded-card border border-border px-2 py-1 hover:bg-surface-2"
          onClick={() => setTheme(toggleTheme())}
          aria-label={`Switch to the ${theme === 'dark' ? 'light' : 'dark'} theme`}
        >
          {theme === 'dark' ? 'Light' : 'Dark'}
        </button>
      </div>
    </nav>
  );
}

/** The tab's icon: a dot in the accent color, the warning color while something needs the person. */
function setFavicon(count: number) {
  let link = document.querySelector<HTMLLinkElement>('link[rel=icon]');
  if (!link) {
    link = document.createElement('link');
    link.rel = 'icon';
    document.head.append(link);
  }
  // The colors are the tokens' (src/tokens.css), read from the page.
  const fill = getComputedStyle(document.documentElement).getPropertyValue(count ? '--warn' : '--accent').trim() || 'gray';
  const svg = `<svg xmlns="http://www.w3.org/2000/svg" viewBox="0 0 16 16"><circle cx="8" cy="8" r="7" fill="${fill}"/></svg>`;
  link.href = `data:image/svg+xml,${encodeURIComponent(svg)}`;
  link.dataset.count = String(count);
}
