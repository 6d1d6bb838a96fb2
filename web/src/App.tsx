import { Rail } from './components/Rail';
import { DotHeader } from './components/DotHeader';
import { Home } from './pages/Home';
import { Chat } from './pages/Chat';
import { Inbox } from './pages/Inbox';
import { Tasks } from './pages/Tasks';
import { ComputerPage } from './pages/Computer';
import { ComputerPanel } from './components/ComputerPanel';
import { Activity } from './pages/Activity';
import { Skills } from './pages/Skills';
import { Channels } from './pages/Channels';
import { DotSettings, NewDot } from './pages/DotForm';
import { HostSettings } from './pages/HostSettings';
import { SignIn } from './pages/SignIn';
import { onLinkClick, useRoute, type Route } from './lib/router';
import { useSession } from './lib/session';

function DotPages({ route }: { route: Extract<Route, { page: 'dot' }> }) {
  const { ns, name, tab } = route;
  const k = `${ns}/${name}`;
  return (
    <div class="flex h-full flex-col">
      <DotHeader ns={ns} name={name} tab={tab} />
      <div class={`min-h-0 flex-1 ${tab === 'chat' ? 'flex flex-col lg:flex-row-reverse' : 'overflow-y-auto'}`}>
        {tab === 'chat' && <ComputerPanel key={`panel-${k}`} ns={ns} name={name} />}
        {tab === 'chat' && (
          <div class="min-h-0 min-w-0 flex-1">
            <Chat key={k} ns={ns} name={name} />
          </div>
        )}
        {tab === 'tasks' && <Tasks key={k} ns={ns} name={name} open={route.task} />}
        {tab === 'computer' && <ComputerPage key={k} ns={ns} name={name} />}
        {tab === 'skills' && <Skills key={k} ns={ns} name={name} />}
        {tab === 'channels' && <Channels key={k} ns={ns} name={name} />}
        {tab === 'activity' && <Activity key={k} ns={ns} name={name} />}
        {tab === 'settings' && <DotSettings key={k} ns={ns} name={name} />}
      </div>
    </div>
  );
}

export function App() {
  const route = useRoute();
  const s = useSession();
  if (s.signIn && !s.person) return <SignIn />;
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
      <main
        id="main"
        tabIndex={-1}
        class={`relative min-h-0 min-w-0 flex-1 focus:outline-none ${route.page === 'dot' ? 'overflow-hidden' : 'overflow-y-auto'}`}
      >
        {route.page === 'home' && <Home />}
        {route.page === 'inbox' && <Inbox />}
        {route.page === 'new' && <NewDot />}
        {route.page === 'settings' && <HostSettings />}
        {route.page === 'dot' && <DotPages route={route} />}
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
