import { Rail } from './components/Rail';
import { Home } from './pages/Home';
import { Chat } from './pages/Chat';
import { Inbox } from './pages/Inbox';
import { onLinkClick, useRoute } from './lib/router';

export function App() {
  const route = useRoute();
  return (
    <div class="flex h-full flex-col md:flex-row" onClick={onLinkClick}>
      <Rail route={route} />
      <main class="relative min-h-0 min-w-0 flex-1 overflow-y-auto">
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
