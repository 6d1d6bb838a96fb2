import { render } from 'preact';
import './index.css';
import { App } from './App';
import { applyTheme } from './lib/theme';
import { startLive } from './lib/live';

applyTheme();
startLive();
render(<App />, document.getElementById('app')!);
