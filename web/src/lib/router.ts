// The app's addresses, in the History API: / (Home), /inbox,
// /dots/{ns}/{name}/chat.
import { useEffect, useState } from 'preact/hooks';

export type Route =
  | { page: 'home' }
  | { page: 'inbox' }
  | { page: 'chat'; ns: string; name: string }
  | { page: 'missing' };

export function parse(pathname: string): Route {
  if (pathname === '/' || pathname === '') return { page: 'home' };
  if (pathname === '/inbox') return { page: 'inbox' };
  const m = /^\/dots\/([^/]+)\/([^/]+)\/chat\/?$/.exec(pathname);
  if (m) return { page: 'chat', ns: decodeURIComponent(m[1]), name: decodeURIComponent(m[2]) };
  return { page: 'missing' };
}

export const chatHref = (ns: string, name: string) =>
  `/dots/${encodeURIComponent(ns)}/${encodeURIComponent(name)}/chat`;

export function navigate(href: string) {
  history.pushState(null, '', href);
  dispatchEvent(new PopStateEvent('popstate'));
}

export function useRoute(): Route {
  const [route, setRoute] = useState(() => parse(location.pathname));
  useEffect(() => {
    const on = () => setRoute(parse(location.pathname));
    addEventListener('popstate', on);
    return () => removeEventListener('popstate', on);
  }, []);
  return route;
}

/** Follows a same-origin link without a reload (a plain click only). */
export function onLinkClick(e: MouseEvent) {
  const a = (e.target as Element).closest('a');
  if (!a || a.target || e.button !== 0 || e.metaKey || e.ctrlKey || e.shiftKey || e.altKey) return;
  const url = new URL(a.href, location.href);
  if (url.origin !== location.origin) return;
  e.preventDefault();
  navigate(url.pathname + url.search);
}
