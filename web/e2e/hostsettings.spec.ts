import AxeBuilder from '@axe-core/playwright';
import { expect, test } from '@playwright/test';
import { applyDot, deleteDefaultKey, harness, makeNamespace } from './harness';

test('Host settings show the checks and store the key through a write-only field', async ({ page }) => {
  await page.goto(harness().url + '/settings');
  // The harness's host has no QEMU: the doctor says so, with the fix.
  await expect(page.getByTestId('doctor-row').filter({ hasText: /qemu/i }).first()).toContainText('apt-get install');
  await expect(page.getByTestId('health-rows')).toContainText('Control plane: ok');
  await expect(page.getByTestId('key-state')).toHaveText('No key is stored: a Dot cannot call its models.');
  try {
    const field = page.getByLabel('Key (never shown again once stored)');
    await expect(field).toHaveAttribute('type', 'password');
    await field.fill('sk-or not a key');
    await page.getByRole('button', { name: 'Store the key' }).click();
    await expect(page.getByRole('status').filter({ hasText: 'Paste the key again' })).toBeVisible();
    await expect(field).toHaveValue('');
    await field.fill('sk-or-v1-0123456789abcdef');
    await page.getByRole('button', { name: 'Store the key' }).click();
    await expect(page.getByTestId('key-state')).toHaveText('A key is stored. A new one replaces it.');
    await expect(field).toHaveValue('');
    // The key never comes back to the page.
    expect(await page.content()).not.toContain('0123456789abcdef');
    const { violations } = await new AxeBuilder({ page }).analyze();
    expect(violations.filter((v) => v.impact === 'serious' || v.impact === 'critical').map((v) => v.id)).toEqual([]);
    await page.screenshot({ path: test.info().outputPath('settings.png'), fullPage: true });
  } finally {
    await deleteDefaultKey();
  }
});

test('the namespace switch narrows the rail and Home to one namespace', async ({ page }) => {
  await makeNamespace('team-b');
  await applyDot('b-dot', 'team-b');
  await applyDot('a-dot');
  await page.goto(harness().url + '/settings');
  const rail = page.getByTestId('rail-dots');
  await expect(rail.getByRole('link', { name: 'b-dot' })).toBeVisible();
  await expect(rail.getByRole('link', { name: 'a-dot' })).toBeVisible();
  await page.getByLabel('Show', { exact: true }).selectOption('team-b');
  await expect(rail.getByRole('link', { name: 'a-dot' })).toHaveCount(0);
  await expect(rail.getByRole('link', { name: 'b-dot' })).toBeVisible();
  // Kept in this browser across a reload.
  await page.goto(harness().url + '/');
  await expect(page.locator('[data-dot="team-b/b-dot"]')).toBeVisible();
  await expect(page.locator('[data-dot="default/a-dot"]')).toHaveCount(0);
  await page.goto(harness().url + '/settings');
  await page.getByLabel('Show', { exact: true }).selectOption('');
  await expect(rail.getByRole('link', { name: 'a-dot' })).toBeVisible();
});
