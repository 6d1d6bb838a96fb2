import { expect, test } from '@playwright/test';
import { applyDot, guestSays, harness } from './harness';

test("a Home card's last activity is read from the Dot's log, then follows the stream, and the card does not move", async ({ page }) => {
  await applyDot('last-dot');
  await applyDot('quiet-dot');
  await guestSays('last-dot', [{ type: 'message.assistant', data: { text: 'Hello.' } }]);
  await page.goto(harness().url + '/');
  const card = page.locator('[data-dot="default/last-dot"]');
  const last = card.getByTestId('last-activity');
  // One read of the log, newest first: the answer logged before the page opened.
  await expect(last).toHaveText('just now · its answer');
  await expect(page.locator('[data-dot="default/quiet-dot"]').getByTestId('last-activity')).toHaveText('none yet');
  const before = await card.boundingBox();
  // Then the stream: a tool call logged now.
  await guestSays('last-dot', [
    { type: 'tool.called', data: { tool: 'exec', permission: 'computer.exec', decision: 'allow', ok: true, duration_ms: 12, target: 'ls' } },
  ]);
  await expect(last).toHaveText('just now · a tool call');
  expect(await card.boundingBox()).toEqual(before);
});
