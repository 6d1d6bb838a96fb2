// The client in three tabs of one browser: a browser opens at most six
// HTTP/1.1 connections to one origin across its tabs, so each tab may hold
// only one for its live state (internal/webui/live.go), and the third tab's
// reads and writes still get answers.
import { expect, test } from '@playwright/test';
import { applyDot, harness } from './harness';

test('three tabs of one browser all stay live and get answers', async ({ context }) => {
  await applyDot('tabs-dot');
  const url = harness().url;
  const home = await context.newPage();
  await home.goto(url + '/');
  await expect(home.locator('[data-dot="default/tabs-dot"]')).toBeVisible();
  const tasks = await context.newPage();
  await tasks.goto(url + '/dots/default/tabs-dot/tasks');
  await expect(tasks.getByRole('heading', { name: 'tabs-dot', exact: true })).toBeVisible();
  const chat = await context.newPage();
  await chat.goto(url + '/dots/default/tabs-dot/chat');

  // A read in the third tab, timed: it waits for a free connection when the
  // other tabs' live state holds them all.
  const ms = await chat.evaluate(async () => {
    const t0 = performance.now();
    const ctl = new AbortController();
    const timer = setTimeout(() => ctl.abort(), 20_000);
    try {
      await fetch('/apis/dots.invisible.dev/v1alpha1/dots', { signal: ctl.signal });
      return performance.now() - t0;
    } catch {
      return -1;
    } finally {
      clearTimeout(timer);
    }
  });
  const line = `a read in the third tab answered in ${ms < 0 ? 'never (20 s)' : `${Math.round(ms)} ms`}`;
  console.log(line);
  test.info().annotations.push({ type: 'figure', description: line });
  expect(ms, line).toBeGreaterThanOrEqual(0);
  expect(ms, line).toBeLessThan(5_000);

  // A write in the third tab, and its answer through the live stream.
  const box = chat.getByLabel('Message to tabs-dot');
  await box.fill('Are all three tabs alive?');
  await box.press('Enter');
  await expect(chat.locator('[data-testid=message-user][data-event-id]', { hasText: 'all three tabs' })).toBeVisible();

  // A Dot applied now reaches every tab through its watch.
  await applyDot('tabs-dot-2');
  for (const p of [home, tasks, chat]) await expect(p.getByTestId('rail-dots').getByRole('link', { name: 'tabs-dot-2' })).toBeVisible();
  await expect(home.locator('[data-dot="default/tabs-dot-2"]')).toBeVisible();
  for (const p of [home, tasks, chat]) await expect(p.getByTitle('live stream live')).toBeVisible();
});
