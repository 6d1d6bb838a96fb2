import AxeBuilder from '@axe-core/playwright';
import { expect, test } from '@playwright/test';
import { applyDot, askApproval, harness } from './harness';

const PAGES = [
  { name: 'Home', path: '/' },
  { name: 'Chat', path: '/dots/default/axe-dot/chat' },
  { name: 'Inbox', path: '/inbox' },
];

for (const theme of ['light', 'dark'] as const) {
  for (const p of PAGES) {
    test(`${p.name} has no serious accessibility violation (${theme})`, async ({ page }) => {
      await applyDot('axe-dot');
      await askApproval(`axe-${theme}-${p.name.toLowerCase()}`, 'axe-dot');
      await page.addInitScript((t) => localStorage.setItem('dots.theme', t), theme);
      await page.goto(harness().url + p.path);
      await expect(page.getByTestId('rail-dots').getByRole('link', { name: 'axe-dot' })).toBeVisible();
      const { violations } = await new AxeBuilder({ page }).analyze();
      const serious = violations
        .filter((v) => v.impact === 'serious' || v.impact === 'critical')
        .map((v) => `${v.id}: ${v.help} (${v.nodes.map((n) => n.target.join(' ')).join(', ')})`);
      expect(serious).toEqual([]);
    });
  }
}

test('a card does not move when live data arrives', async ({ page }) => {
  await applyDot('steady-dot');
  await page.goto(harness().url + '/');
  const card = page.locator('[data-dot="default/steady-dot"]');
  await expect(card).toBeVisible();
  const before = await card.boundingBox();
  await askApproval('steady-a1', 'steady-dot');
  await expect(card.getByRole('link', { name: /1 waiting/ })).toBeVisible();
  expect(await card.boundingBox()).toEqual(before);
});
