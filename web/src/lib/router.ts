// The app's addresses, in the History API: / (Home), /inbox, /new (Create a
// Dot), /settings (the host's), and a Dot's pages under /dots/{ns}/{name}/:
// chat, tasks (tasks/{task} opens a task's drawer), computer, skills,
// channels, activity, settings.
import { useEffect, useState } from 'preact/hooks';

export type DotPage = 'chat' | 'tasks' | 'computer' | 'skills' | 'channels' | 'activity' | 'settings';
export const DOT_PAGES: DotPage[] = ['chat', 'tasks', 'computer', 'skills', 'channels', 'activity', 'settings'];

export type Route =
  | { page: 'home' }
  | { page: 'inbox' }
  | { page: 'new' }
  | { page: 'settings' }
  | { page: 'dot'; tab: DotPage; ns: string; name: string; task?: string }
  | { page: 'missing' };

/**
 * The address an old one moved to (ref 9.7), or null: /approvals and a Dot's
 * approvals are the Inbox (that Dot's, with ?dot=), a Dot's timeline is its
 * Activity, and its Browser view is the Computer page's Screen. Followed in
 * place (history.replaceState), so Back does not lead to the old address.
 */
export function moved(pathname: string): string | null {
  if (/^\/approvals\/?$/.test(pathname)) return '/inbox';
  const m = /^\/dots\/([^/]+)\/([^/]+)\/(approvals|timeline|browser)\/?$/.exec(pathname);
  if (!m) return null;
  const [ns, name] = [decodeURIComponent(m[1]), decodeURIComponent(m[2])];
  switch (m[3]) {
    case 'approvals':
      return `/inbox?dot=${encodeURIComponent(`${ns}/${name}`)}`;
    case 'timeline':
      return dotHref(ns, name, 'activity');
    default:
      return `${dotHref(ns, name, 'computer')}?view=screen`;
  }
}

export function parse(pathname: string): Route {
  if (pathname === '/' || pathname === '') return { page: 'home' };
  if (pathname === '/inbox') return { page: 'inbox' };
  if (pathname === '/new') return { page: 'new' };
  if (pathname === '/settings') return { page: 'settings' };
  const m = /^\/dots\/([^/]+)\/([^/]+)\/(chat|tasks|computer|skills|channels|activity|settings)(?:\/([^/]+))?\/?$/.exec(pathname);
  if (m && (!m[4] || m[3] === 'tasks')) {
    const r: Route = { page: 'dot', tab: m[3] as DotPage, ns: decodeURIComponent(m[1]), name: decodeURIComponent(m[2]) };
    if (m[4]) r.task = decodeURIComponent(m[4]);
    return r;
  }
  return { page: 'missing' };
}

export const dotHref = (ns: string, name: string, tab: DotPage = 'chat') =>
  `/dots/${encodeURIComponent(ns)}/${encodeURIComponent(name)}/${tab}`;

export const chatHref = (ns: string, name: string) => dotHref(ns, name, 'chat');

export const taskHref = (ns: string, name: string, task: string) => `${dotHref(ns, name, 'tasks')}/${encodeURIComponent(task)}`;

export function navigate(href: string, replace = false) {
  if (replace) history.replaceState(null, '', href);
  else history.pushState(null, '', href);
  dispatchEvent(new PopStateEvent('popstate'));
}

export function useRoute(): Route {
  const [route, setRoute] = useState(() => parse(location.pathname));
  useEffect(() => {
    const on = () => {
      const to = moved(location.pathname);
      if (to) navigate(to, true);
      else setRoute(parse(location.pathname));
    };
    addEventListener('popstate', on);
    on();
    return () => removeEventListener('popstate', on);
  }, []);
  return route;
}

/** The address's query, read again on every navigation. */
export function useQuery(): URLSearchParams {
  const [q, setQ] = useState(() => new URLSearchParams(location.search));
  useEffect(() => {
    const on = () => setQ(new URLSearchParams(location.search));
    addEventListener('popstate', on);
    return () => removeEventListener('popstate', on);
  }, []);
  return q;
}

/** Follows a same-origin link without a reload (a plain click only). */
export function onLinkClick(e: MouseEvent) {
  const a = (e.target as Element).closest('a');
  if (!a || a.target || a.hasAttribute('download') || e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || e.altKey) return;
  const url = new URL(a.href, location.href);
  if (url.origin !== location.origin) return;
  // The API's own paths (a file's download) are not pages of the app.
  if (/^\/(api|apis|dots\/v1)\//.test(url.pathname)) return;
  e.preventDefault();
  navigate(url.pathname + url.search);
}
