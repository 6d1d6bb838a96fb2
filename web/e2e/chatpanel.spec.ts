// The chat's computer panel (ref 9.7): beside the thread from 1024 px, a strip
// above it below that, the page column as tall as the window, and the
// desktop as the Computer page's Screen view draws it (one FrameView).
import AxeBuilder from '@axe-core/playwright';
import { expect, test, type Page } from '@playwright/test';
import { applyDot, fakeGuest, harness, setComputerState } from './harness';

async function seriousViolations(page: Page) {
  const { violations } = await new AxeBuilder({ page }).analyze();
  return violations.filter((v) => v.impact === 'serious' || v.impact === 'critical').map((v) => `${v.id}: ${v.nodes.map((n) => n.target.join(' ')).join(', ')}`);
}

test('the panel is beside the thread at 1280 px and a strip above it at 375 px, with the desktop, LIVE and who has control', async ({ page }) => {
  await applyDot('side-dot');
  await page.setViewportSize({ width: 1280, height: 800 });
  await page.goto(harness().url + '/dots/default/side-dot/chat');
  const panel = page.getByTestId('computer-panel');
  const thread = page.getByTestId('thread');
  // Not running: why, once, and Start.
  await expect(panel.getByRole('button', { name: 'Start the computer' })).toBeVisible();
  await expect(panel.getByTestId('computer-off')).toBeVisible();
  // One reading of the panel: the state moves on (not made yet, then
  // provisioning) while the Computer is made.
  const said = await panel.innerText();
  const state = /The computer is ([a-z ]+), so/.exec(said)![1];
  expect(said.split(state).length - 1, `"${state}" said once in the panel`).toBe(1);

  await fakeGuest(page, 'side-dot');
  await setComputerState('side-dot', 'RUNNING');
  await expect(panel.getByTestId('screen')).toBeVisible();
  await expect(panel.getByTestId('frame-live')).toHaveText('LIVE');
  await expect(panel).toContainText('The Dot has control');
  // Beside the thread, and both reach the bottom of the window; the page itself does not scroll.
  const [p, t] = [(await panel.boundingBox())!, (await thread.boundingBox())!];
  expect(p.x).toBeGreaterThan(t.x + t.width - 1);
  expect(Math.round(p.y + p.height)).toBe(800);
  expect(await page.evaluate(() => document.scrollingElement!.scrollHeight - window.innerHeight)).toBeLessThanOrEqual(0);
  await expect(page.getByRole('navigation', { name: "side-dot's pages" })).toBeInViewport();
  await page.screenshot({ path: test.info().outputPath('chat-panel-1280.png') });
  expect(await seriousViolations(page)).toEqual([]);

  // Below 1024 px: a strip above the thread, the picture in it too.
  await page.setViewportSize({ width: 375, height: 740 });
  await expect(panel.getByTestId('screen')).toBeVisible();
  await expect(panel.getByTestId('frame-live')).toBeVisible();
  const [p2, t2] = [(await panel.boundingBox())!, (await thread.boundingBox())!];
  expect(p2.y + p2.height).toBeLessThanOrEqual(t2.y + 1);
  expect(p2.height).toBeLessThan(160);
  // The message box stays at the bottom of the window, and nothing goes sideways.
  const box = (await page.getByLabel('Message to side-dot').boundingBox())!;
  expect(box.y + box.height).toBeLessThanOrEqual(740);
  expect(await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth)).toBeLessThanOrEqual(0);
  await page.screenshot({ path: test.info().outputPath('chat-panel-375.png') });
  expect(await seriousViolations(page)).toEqual([]);
});

test('the thread scrolls inside the column, not the page', async ({ page }) => {
  await applyDot('long-dot');
  await page.setViewportSize({ width: 1280, height: 600 });
  await page.goto(harness().url + '/dots/default/long-dot/chat');
  const box = page.getByLabel('Message to long-dot');
  for (let i = 0; i < 12; i++) {
    await box.fill(`line ${i} of a long conversation`);
    await box.press('Enter');
    await expect(page.locator('[data-testid=message-user][data-event-id]', { hasText: `line ${i} of` })).toBeVisible();
  }
  expect(await page.evaluate(() => document.scrollingElement!.scrollHeight - window.innerHeight)).toBeLessThanOrEqual(0);
  expect(await page.getByTestId('thread').evaluate((el) => el.scrollHeight > el.clientHeight)).toBe(true);
  await expect(page.getByRole('navigation', { name: "long-dot's pages" })).toBeInViewport();
  await expect(box).toBeInViewport();
});

test('the panel warns when no new picture has come for more than 15 s', async ({ page }) => {
  await applyDot('stale-dot');
  await setComputerState('stale-dot', 'RUNNING');
  const guest = await fakeGuest(page, 'stale-dot');
  await page.clock.install();
  await page.setViewportSize({ width: 1280, height: 800 });
  await page.goto(harness().url + '/dots/default/stale-dot/chat');
  const panel = page.getByTestId('computer-panel');
  await expect(panel.getByTestId('frame-live')).toBeVisible();
  await expect(panel.getByTestId('frame-warning')).toHaveText('');
  // The guest stops answering: its reads hang.
  guest.screenStops();
  await page.clock.fastForward(20_000);
  await expect(panel.getByTestId('frame-warning')).toContainText('The picture is more than 15 s old');
  await expect(panel.getByTestId('frame-live')).toHaveCount(0);
  // The last picture stays, and so do the words.
  await expect(panel.getByTestId('screen')).toBeVisible();
  await expect(panel).toContainText('The Dot has control');
  await page.screenshot({ path: test.info().outputPath('chat-panel-stale.png') });
});

test("a route's 409 computer_stopped gets the same answer as a stopped computer, with Start", async ({ page }) => {
  await applyDot('gone-dot');
  await setComputerState('gone-dot', 'RUNNING');
  await page.route('**/dots/v1/namespaces/default/dots/gone-dot/screenshot', (route) =>
    route.fulfill({ status: 409, json: { error: 'computer_stopped', message: 'the computer of gone-dot is not running' } }),
  );
  await page.goto(harness().url + '/dots/default/gone-dot/chat');
  const panel = page.getByTestId('computer-panel');
  await expect(panel.getByTestId('computer-off')).toContainText('The computer is stopped, so there is no screen to show.');
  await expect(panel.getByRole('button', { name: 'Start the computer' })).toBeVisible();
  // The Computer page's Screen view is the same FrameView.
  await page.goto(harness().url + '/dots/default/gone-dot/computer');
  await expect(page.getByTestId('computer-off')).toContainText('The computer is stopped, so there is no screen to show.');
});
