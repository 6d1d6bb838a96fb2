// `make bench-web`: the time from opening Home to every card of 50 Dots shown
// (and to every card complete: its last activity and spend read),
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
  const full: number[] = [];
  // A card is complete once its last activity and its spend today are read.
  const unread = page.locator('[data-dot^="default/bench-"] :is([data-testid=last-activity], [data-testid=spent-today])', { hasText: /^–$/ });
  for (let i = 0; i < 5; i++) {
    const t0 = Date.now();
    await page.reload();
    await expect(page.locator('[data-dot^="default/bench-"]')).toHaveCount(50);
    runs.push(Date.now() - t0);
    await expect(unread).toHaveCount(0);
    full.push(Date.now() - t0);
  }
  const median = (xs: number[]) => xs.sort((a, b) => a - b) && `${xs[2]} ms median of 5 (min ${xs[0]}, max ${xs[4]})`;
  for (const line of [`Home with 50 Dots: load to 50 cards ${median(runs)}`, `Home with 50 Dots: load to 50 complete cards ${median(full)}`]) {
    console.log(line);
    test.info().annotations.push({ type: 'figure', description: line });
  }
});
