import AxeBuilder from '@axe-core/playwright';
import { expect, test } from '@playwright/test';
import { readFileSync } from 'node:fs';
import { applyDot, guestSays, harness } from './harness';

test('the Activity page pages back through 3,000 events to the start of the log', async ({ page }) => {
  test.setTimeout(180_000);
  await applyDot('long-dot');
  for (let b = 0; b < 3; b++) {
    await guestSays(
      'long-dot',
      Array.from({ length: 1000 }, (_, i) => ({ type: 'task.progress', data: { task_id: 't-long', text: `step ${b * 1000 + i}` } })),
    );
  }
  await page.goto(harness().url + '/dots/default/long-dot/activity');
  const lines = page.getByTestId('activity-line');
  await expect(lines).toHaveCount(200);
  await expect(lines.first()).toContainText('step 2999');
  const older = page.getByRole('button', { name: 'Load older events' });
  for (let i = 0; i < 20 && (await older.count()); i++) {
    const n = await lines.count();
    await older.click();
    await expect.poll(() => lines.count()).toBeGreaterThan(n);
  }
  await expect(page.getByText('This is where the log starts.')).toBeVisible();
  // 3,000 steps, and the Dot's own dot.created at the start.
  const count = await lines.count();
  expect(count).toBeGreaterThanOrEqual(3000);
  await expect(lines.last()).not.toContainText('step');
  await expect(page.getByTestId('activity-line').filter({ hasText: 'step 0' })).toHaveCount(1);
});

test('family chips become the types filter, search is over what is loaded, and the export is JSON Lines', async ({ page }) => {
  await applyDot('act-dot');
  await guestSays('act-dot', [
    { type: 'message.assistant', data: { text: 'The fare is 89 euros.' } },
    { type: 'tool.called', data: { tool: 'exec', permission: 'computer.exec', decision: 'deny', ok: false, duration_ms: 3, target: 'rm -rf ~/tmp' } },
  ]);
  await page.goto(harness().url + '/dots/default/act-dot/activity');
  const lines = page.getByTestId('activity-line');
  // internal/eventtext's words.
  await expect(lines.filter({ hasText: 'ran exec rm -rf ~/tmp (denied) in 3ms' })).toHaveCount(1);
  await expect(lines.filter({ hasText: 'dot: The fare is 89 euros.' })).toHaveCount(1);

  // Leaving out tools asks for the other types only.
  const asked = page.waitForRequest((r) => r.url().includes('/activity?') && r.url().includes('types='));
  await page.getByTestId('family-chips').getByRole('button', { name: 'tools' }).click();
  const url = new URL((await asked).url());
  expect(url.searchParams.get('types')!.split(',')).not.toContain('tool.called');
  expect(url.searchParams.get('types')!.split(',')).toContain('message.assistant');
  await expect(lines.filter({ hasText: 'ran exec' })).toHaveCount(0);
  await expect(lines.filter({ hasText: 'The fare' })).toHaveCount(1);
  // Live: a new event of a chosen family arrives; one of a family left out does not.
  await guestSays('act-dot', [
    { type: 'message.assistant', data: { text: 'Booked.' } },
    { type: 'tool.called', data: { tool: 'read_file', permission: 'files.read', decision: 'allow', ok: true, duration_ms: 1 } },
  ]);
  await expect(lines.filter({ hasText: 'dot: Booked.' })).toHaveCount(1);
  await expect(lines.filter({ hasText: 'read_file' })).toHaveCount(0);

  await page.getByLabel('Search the events read so far').fill('fare');
  await expect(lines).toHaveCount(1);
  await expect(page.getByTestId('activity-count')).toContainText('1 of the');

  const download = page.waitForEvent('download');
  await page.getByRole('button', { name: 'Export JSON Lines' }).click();
  const file = await download;
  expect(file.suggestedFilename()).toMatch(/^default-act-dot-events-\d+-\d+\.jsonl$/);
  const rows = readFileSync((await file.path())!, 'utf8').trim().split('\n').map((l) => JSON.parse(l));
  expect(rows).toHaveLength(1);
  expect(rows[0]).toMatchObject({ type: 'message.assistant', data: { text: 'The fare is 89 euros.' } });
  expect(rows[0].text).toBeUndefined();

  const { violations } = await new AxeBuilder({ page }).analyze();
  expect(violations.filter((v) => v.impact === 'serious' || v.impact === 'critical').map((v) => v.id)).toEqual([]);
  await page.screenshot({ path: test.info().outputPath('activity.png') });
});
