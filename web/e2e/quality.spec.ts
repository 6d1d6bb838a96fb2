import AxeBuilder from '@axe-core/playwright';
import { expect, test } from '@playwright/test';
import { applyDot, askApproval, fakeGuest, harness, setComputerState } from './harness';

const PAGES: { name: string; path: string; running?: string }[] = [
  { name: 'Home', path: '/' },
  { name: 'Chat', path: '/dots/default/axe-dot/chat' },
  // The chat's computer panel with a desktop in it (the fake guest's picture).
  { name: 'Chat with its computer', path: '/dots/default/axe-live-dot/chat', running: 'axe-live-dot' },
  { name: 'Inbox', path: '/inbox' },
  { name: 'Tasks', path: '/dots/default/axe-dot/tasks' },
  { name: 'Computer', path: '/dots/default/axe-dot/computer' },
  { name: 'Computer usage', path: '/dots/default/axe-dot/computer?view=usage' },
  { name: 'Skills', path: '/dots/default/axe-dot/skills' },
  { name: 'Channels', path: '/dots/default/axe-dot/channels' },
  { name: 'Activity', path: '/dots/default/axe-dot/activity' },
  { name: 'Dot settings', path: '/dots/default/axe-dot/settings' },
  { name: 'Create a Dot', path: '/new' },
  { name: 'Host settings', path: '/settings' },
];

/** A page's Dot whose computer runs: its state written and its guest faked at the browser's edge. */
async function runComputer(page: import('@playwright/test').Page, p: (typeof PAGES)[number]) {
  if (!p.running) return;
  await applyDot(p.running);
  await setComputerState(p.running, 'RUNNING');
  await fakeGuest(page, p.running);
}

for (const theme of ['light', 'dark'] as const) {
  for (const p of PAGES) {
    test(`${p.name} has no serious accessibility violation (${theme})`, async ({ page }) => {
      await applyDot('axe-dot');
      await askApproval(`axe-${theme}-${p.name.toLowerCase().replace(/ /g, '-')}`, 'axe-dot');
      await page.addInitScript((t) => localStorage.setItem('dots.theme', t), theme);
      await runComputer(page, p);
      await page.goto(harness().url + p.path);
      await expect(page.getByTestId('rail-dots').getByRole('link', { name: 'axe-dot' })).toBeVisible();
      if (p.running) await expect(page.getByTestId('frame-live')).toBeVisible();
      await page.screenshot({ path: test.info().outputPath(`${p.name.toLowerCase().replace(/ /g, '-')}-${theme}.png`), fullPage: true });
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

test('the keyboard reaches everything: skip to content, the rail, a card, the chat box', async ({ page }) => {
  await applyDot('keys-dot');
  await page.goto(harness().url + '/');
  await expect(page.locator('[data-dot="default/keys-dot"]')).toBeVisible();
  await page.keyboard.press('Tab');
  await expect(page.getByRole('link', { name: 'Skip to content' })).toBeFocused();
  await page.keyboard.press('Enter');
  await expect(page.locator('main')).toBeFocused();
  // From the content, Tab reaches the card's Open chat, and Enter opens it.
  const open = page.locator('[data-dot="default/keys-dot"]').getByRole('link', { name: 'Open chat' });
  // Every Dot of the run has a card before it, each with a few stops.
  for (let i = 0; i < 400 && !(await open.evaluate((el) => el === document.activeElement)); i++) await page.keyboard.press('Tab');
  await expect(open).toBeFocused();
  await page.keyboard.press('Enter');
  await expect(page).toHaveURL(/\/dots\/default\/keys-dot\/chat$/);
  const box = page.getByLabel('Message to keys-dot');
  for (let i = 0; i < 40 && !(await box.evaluate((el) => el === document.activeElement)); i++) await page.keyboard.press('Tab');
  await expect(box).toBeFocused();
  await page.keyboard.type('typed with the keyboard');
  await page.keyboard.press('Enter');
  await expect(page.locator('[data-testid=message-user][data-event-id]', { hasText: 'typed with the keyboard' })).toBeVisible();
});

test('every page fits 375 px without a sideways scroll', async ({ page }) => {
  await applyDot('axe-dot');
  await page.setViewportSize({ width: 375, height: 740 });
  for (const p of PAGES) {
    await runComputer(page, p);
    await page.goto(harness().url + p.path);
    await expect(page.getByRole('heading').first()).toBeVisible();
    if (p.running) await expect(page.getByTestId('frame-live')).toBeVisible();
    // A settled page: the live lists and the dry run have answered.
    await page.waitForTimeout(500);
    const overflow = await page.evaluate(() => {
      const wide = [...document.querySelectorAll('body *')].filter((e) => e.getBoundingClientRect().right > window.innerWidth + 1 && getComputedStyle(e).position !== 'fixed');
      // Inside a box that scrolls sideways by design (the rail, a tab bar, a code block) is fine.
      return wide.filter((e) => !e.closest('nav, pre, [data-scrolls]')).map((e) => `${e.tagName}.${e.className}`.slice(0, 80));
    });
    expect(overflow, p.name).toEqual([]);
    expect(await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth), p.name).toBeLessThanOrEqual(0);
    await page.screenshot({ path: test.info().outputPath(`narrow-${p.name.toLowerCase().replace(/ /g, '-')}.png`), fullPage: true });
  }
});

test("a task's drawer is reached and left with the keyboard", async ({ page }) => {
  await applyDot('axe-dot');
  const res = await fetch(`${harness().url}/apis/dots.invisible.dev/v1alpha1/namespaces/default/tasks`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ apiVersion: 'dots.invisible.dev/v1alpha1', kind: 'Task', metadata: { name: 'keys-task' }, spec: { dotName: 'axe-dot', description: 'Sort the inbox' } }),
  });
  expect(res.ok || res.status === 409).toBe(true);
  await page.goto(harness().url + '/dots/default/axe-dot/tasks');
  const link = page.getByRole('link', { name: 'Sort the inbox' });
  await expect(link).toBeVisible();
  // Past the rail (every Dot of the run is in it) by the skip link.
  await page.keyboard.press('Tab');
  await page.keyboard.press('Enter');
  for (let i = 0; i < 40 && !(await link.evaluate((el) => el === document.activeElement)); i++) await page.keyboard.press('Tab');
  await expect(link).toBeFocused();
  await page.keyboard.press('Enter');
  const drawer = page.getByRole('dialog');
  await expect(drawer).toBeFocused();
  await page.keyboard.press('Escape');
  await expect(drawer).toHaveCount(0);
  // The focus goes back to where the person was.
  await expect(link).toBeFocused();
});
