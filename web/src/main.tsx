import { render } from 'preact';
import './index.css';
import { App } from './App';
import { applyTheme } from './lib/theme';
import { startLive } from './lib/live';
import { readSession } from './lib/session';

applyTheme();
// Who the page acts for decides what it lists: read it first.
void readSession().then((s) => {
  if (!s.signIn || s.person) startLive();
  render(<App />, document.getElementById('app')!);
});
