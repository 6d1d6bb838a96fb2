import AxeBuilder from '@axe-core/playwright';
import { expect, test } from '@playwright/test';
import { applyDot, getResource, harness } from './harness';

test('the Computer page stops and starts the computer through its resource, as the command line does', async ({ page }) => {
  await applyDot('power-dot');
  await page.goto(harness().url + '/dots/default/power-dot/computer');
  await expect(page.getByTestId('computer-state')).toBeVisible();
  // The harness's host runs no VM: the screen says so, with Start.
  await expect(page.getByTestId('computer-off')).toContainText('so there is no screen or files to show');

  await page.getByRole('button', { name: 'Stop', exact: true }).click();
  await expect(page.getByText('Its automations do not run while it is stopped.')).toBeVisible();
  await page.getByRole('button', { name: 'Stop the computer' }).click();
  await expect.poll(async () => (await getResource('computers', 'power-dot')).spec.runStrategy).toBe('Halted');
  await expect(page.getByTestId('computer-why')).toContainText('Stopped by a person');
  // A stopped computer offers Start, not Reboot.
  await expect(page.getByRole('button', { name: 'Reboot' })).toHaveCount(0);

  await page.getByRole('button', { name: 'Start', exact: true }).click();
  await expect.poll(async () => (await getResource('computers', 'power-dot')).spec.runStrategy).toBe('OnDemand');
  const c = await getResource('computers', 'power-dot');
  expect(Date.parse(c.metadata.annotations['dots.invisible.dev/start-requested'])).toBeGreaterThan(Date.now() - 60_000);

  await page.getByRole('button', { name: 'Reboot' }).click();
  await page.getByRole('button', { name: 'Reboot', exact: true }).last().click();
  await expect.poll(async () => (await getResource('computers', 'power-dot')).metadata.annotations?.['dots.invisible.dev/reboot-requested']).toBeTruthy();
  await page.screenshot({ path: test.info().outputPath('computer.png') });

  const { violations } = await new AxeBuilder({ page }).analyze();
  expect(violations.filter((v) => v.impact === 'serious' || v.impact === 'critical').map((v) => v.id)).toEqual([]);
});

test('the files view says the computer is off rather than failing', async ({ page }) => {
  await applyDot('files-dot');
  await page.goto(harness().url + '/dots/default/files-dot/computer?view=files');
  await expect(page.getByRole('link', { name: 'Files', exact: true })).toHaveAttribute('aria-current', 'page');
  await expect(page.getByTestId('computer-off')).toBeVisible();
  await expect(page.getByRole('button', { name: 'Start the computer' })).toBeVisible();
});
