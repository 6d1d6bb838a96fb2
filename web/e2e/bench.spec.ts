// `make bench-web`: the time from opening Home to every card of 50 Dots shown,
// on a warm server. A figure, not a test: it runs only with WEB_BENCH=1.
import { expect, test } from '@playwright/test';
import { applyDot, harness } from './harness';

test('Home with 50 Dots', async ({ page }) => {
  test.skip(!process.env.WEB_BENCH, 'a figure for make bench-web');
  test.setTimeout(300_000);
  for (let i = 0; i < 50; i++) await applyDot(`bench-${String(i).padStart(2, '0')}`);
  await page.goto(harness().url + '/');
  await expect(page.locator('[data-dot^="default/bench-"]')).toHaveCount(50);
  const runs: number[] = [];
  for (let i = 0; i < 5; i++) {
    const t0 = Date.now();
    await page.reload();
    await expect(page.locator('[data-dot^="default/bench-"]')).toHaveCount(50);
    runs.push(Date.now() - t0);
  }
  runs.sort((a, b) => a - b);
  const line = `Home with 50 Dots: load to 50 cards ${runs[2]} ms median of 5 (min ${runs[0]}, max ${runs[4]})`;
  console.log(line);
  test.info().annotations.push({ type: 'figure', description: line });
});
