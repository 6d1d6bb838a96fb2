import { defineConfig } from '@playwright/test';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

// The run's own record of its server (e2e/harness.ts): named once here, in
// the runner, and inherited by its workers.
process.env.INVISIBLE_DOTS_E2E_STATE ??= join(tmpdir(), `invisible-dots-web-e2e-${process.pid}.json`);

// Debian's Chromium, never a downloaded browser (PLAYWRIGHT_SKIP_BROWSER_DOWNLOAD=1
// at npm ci). The server is the real binary (e2e/harness.ts).
export default defineConfig({
  testDir: 'e2e',
  globalSetup: './e2e/global-setup.ts',
  globalTeardown: './e2e/global-teardown.ts',
  // One server for the run; two cores: one worker.
  workers: 1,
  timeout: 60_000,
  expect: { timeout: 15_000 },
  reporter: [['list']],
  outputDir: 'test-results',
  use: {
    browserName: 'chromium',
    launchOptions: {
      executablePath: process.env.CHROMIUM ?? '/usr/bin/chromium',
      args: ['--no-sandbox'],
    },
    trace: 'retain-on-failure',
    screenshot: 'only-on-failure',
  },
});
