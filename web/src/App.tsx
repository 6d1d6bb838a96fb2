import { Rail } from './components/Rail';
import { Home } from './pages/Home';
import { Chat } from './pages/Chat';
import { Inbox } from './pages/Inbox';
import { onLinkClick, useRoute } from './lib/router';

export function App() {
  const route = useRoute();
  return (
    <div class="flex h-full flex-col md:flex-row" onClick={onLinkClick}>
      <a
        href="#main"
        class="sr-only focus:not-sr-only focus:absolute focus:top-2 focus:left-2 focus:z-10 focus:rounded-card focus:bg-accent focus:px-3 focus:py-2 focus:text-accent-fg"
        onClick={(e) => {
          e.preventDefault();
          e.stopPropagation();
          document.getElementById('main')?.focus();
        }}
      >
        Skip to content
      </a>
      <Rail route={route} />
      <main id="main" tabIndex={-1} class="relative min-h-0 min-w-0 flex-1 overflow-y-auto focus:outline-none">
        {route.page === 'home' && <Home />}
        {route.page === 'inbox' && <Inbox />}
        {route.page === 'chat' && <Chat key={`${route.ns}/${route.name}`} ns={route.ns} name={route.name} />}
        {route.page === 'missing' && (
          <div class="p-6">
            <h1 class="text-xl font-semibold">No such page</h1>
            <p class="mt-2 text-muted">
              <a class="text-accent underline" href="/">
                Go to Home
              </a>
            </p>
          </div>
        )}
      </main>
    </div>
  );
}
