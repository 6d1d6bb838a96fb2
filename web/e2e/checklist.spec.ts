import AxeBuilder from '@axe-core/playwright';
import { expect, test, type Page, type Route } from '@playwright/test';
import { applyDot, deleteDefaultKey, getResource, harness, setComputerState } from './harness';

// The setup checklist on Home (ref 9.7): each row's fix is the command to
// paste, in a block a button copies, with what it does beside it; the key is
// taken in place, in a write-only field; a row that passes stays, turned
// green, and so does the list once the last thing is done.

/** Answers the doctor route with the real report, with the rows named in ok made ok. */
async function doctorWith(page: Page, ok: () => Set<string>) {
  await page.route('**/dots/v1/doctor', async (route: Route) => {
    const res = await route.fetch();
    const report = await res.json();
    for (const c of report.checks) {
      if (ok().has(c.name) || ok().has('*')) Object.assign(c, { status: 'ok', detail: `${c.name} is in place`, fix: undefined, fixWhy: undefined });
    }
    await route.fulfill({ response: res, json: report });
  });
}

const comeBack = (page: Page) => page.evaluate(() => dispatchEvent(new Event('focus')));

test('the checklist gives each fix as a command to paste with its words beside it, takes the key in place, and its rows turn green as they pass', async ({
  page,
  context,
}) => {
  await context.grantPermissions(['clipboard-read', 'clipboard-write'], { origin: harness().url });
  const ok = new Set<string>();
  await doctorWith(page, () => ok);
  await page.goto(harness().url + '/');
  const list = page.getByTestId('setup-checklist');
  await expect(list.getByRole('heading')).toHaveText('This computer is not ready for a Dot yet');
  const rows = list.getByTestId('setup-row');
  // The harness's host has no QEMU (its QEMU directory is empty) and no key.
  const qemu = list.locator('[data-check="qemu"]');
  await expect(qemu).toHaveAttribute('data-status', 'missing');
  const command = qemu.getByTestId('fix-command');
  await expect(command).toHaveText('unset INVISIBLE_DOTS_QEMU_DIR && sudo apt-get install -y qemu-system-x86');
  await expect(qemu.getByTestId('fix-why')).toContainText('INVISIBLE_DOTS_QEMU_DIR chooses');
  // Every command is one line a shell takes as it is: no prose in it.
  for (const text of await list.getByTestId('fix-command').allTextContents()) {
    expect(text, 'a fix command').not.toMatch(/[()\n]|, then |\(or/);
    expect(text.trim()).toBe(text);
  }
  // The button copies the command exactly.
  await qemu.getByRole('button', { name: 'Copy' }).click();
  await expect(qemu.getByRole('button', { name: 'Copied' })).toBeVisible();
  expect(await page.evaluate(() => navigator.clipboard.readText())).toBe('unset INVISIBLE_DOTS_QEMU_DIR && sudo apt-get install -y qemu-system-x86');

  await page.screenshot({ path: test.info().outputPath('checklist.png'), fullPage: true });

  const names = await rows.evaluateAll((els) => els.map((e) => e.getAttribute('data-check')));
  expect(names).toContain('OpenRouter key');
  try {
    // The key, in place: a write-only field in the key's row.
    const keyRow = list.locator('[data-check="OpenRouter key"]');
    await expect(keyRow).toHaveAttribute('data-status', 'missing');
    const field = keyRow.getByLabel('Paste your OpenRouter key (never shown again once stored)');
    await expect(field).toHaveAttribute('type', 'password');
    await expect(keyRow.getByTestId('fix-command')).toHaveText('invisible-dots secret openrouter');
    await field.fill('sk-or-v1-0123456789abcdef');
    await keyRow.getByRole('button', { name: 'Store the key' }).click();
    // The row stays, turned green, and says how many running Dots got it.
    await expect(keyRow).toHaveAttribute('data-status', 'ok');
    await expect(keyRow).toContainText(/done: Stored\. (No Dot is running now|\d+ running Dots? got the new key)/);
    await expect(keyRow.getByLabel(/Paste your OpenRouter key/)).toHaveCount(0);
    expect(await page.content()).not.toContain('0123456789abcdef');
    await expect(rows).toHaveCount(names.length);

    // QEMU is installed meanwhile: back at the window, its rows turn green and stay.
    ok.add('qemu').add('qemu-img').add('accelerator');
    await comeBack(page);
    await expect(qemu).toHaveAttribute('data-status', 'ok');
    await expect(qemu).toContainText('qemu is in place');
    await expect(qemu.getByTestId('fix-command')).toHaveCount(0);
    await expect(rows).toHaveCount(names.length);
    await expect(list.getByRole('heading')).toHaveText('This computer is not ready for a Dot yet');

    // The last thing done: the whole list stays, turned green.
    ok.add('*');
    await comeBack(page);
    await expect(list).toHaveAttribute('data-ready', 'true');
    await expect(list.getByRole('heading')).toHaveText('This computer is ready for a Dot');
    await expect(rows).toHaveCount(names.length);
    for (const name of names) await expect(list.locator(`[data-check="${name}"]`)).toHaveAttribute('data-status', 'ok');
    const { violations } = await new AxeBuilder({ page }).include('[data-testid=setup-checklist]').analyze();
    expect(violations.filter((v) => v.impact === 'serious' || v.impact === 'critical').map((v) => v.id)).toEqual([]);
    await page.screenshot({ path: test.info().outputPath('checklist-green.png'), fullPage: true });

    // A host that is ready when the list is first read shows none of it.
    const read = Promise.all([page.waitForResponse('**/dots/v1/doctor'), page.waitForResponse('**/dots/v1/health')]);
    await page.reload();
    await read;
    await expect(page.getByRole('heading', { name: 'Home' })).toBeVisible();
    await page.waitForTimeout(500);
    await expect(page.getByTestId('setup-checklist')).toHaveCount(0);
  } finally {
    await deleteDefaultKey();
  }
});

test('Host settings give the doctor rows as commands with their words, and say how many running Dots got a new key', async ({ page }) => {
  await applyDot('keyed-dot');
  // A Computer just made is written by its controllers for a moment: its state is set once they let it be.
  await expect(async () => await setComputerState('keyed-dot', 'RUNNING')).toPass({ timeout: 20_000 });
  await page.goto(harness().url + '/settings');
  const qemu = page.getByTestId('doctor-row').filter({ hasText: /^qemu / }).first();
  await expect(qemu.getByTestId('fix-command')).toHaveText('unset INVISIBLE_DOTS_QEMU_DIR && sudo apt-get install -y qemu-system-x86');
  await expect(qemu.getByTestId('fix-why')).toContainText('INVISIBLE_DOTS_QEMU_DIR chooses');
  try {
    await page.getByLabel('Key (never shown again once stored)').fill('sk-or-v1-0123456789abcdef');
    await page.getByRole('button', { name: 'Store the key' }).click();
    const said = page.getByTestId('key-message');
    await expect(said).toHaveText(/^Stored\. \d+ running Dots? got the new key; every other Dot without a key of its own gets it when its computer starts\.$/);
    const running = Number((await said.textContent())!.match(/(\d+) running/)![1]);
    expect(running).toBeGreaterThanOrEqual(1);
    // The running Dot was told at once, so its host agent pushes the key without waiting for its poll.
    const dot = await getResource('dots', 'keyed-dot');
    expect(dot.metadata.annotations?.['dots.invisible.dev/secrets-changed']).toBeTruthy();
  } finally {
    // Back to where the harness's host leaves every computer.
    await setComputerState('keyed-dot', 'PROVISIONING');
    await deleteDefaultKey();
  }
});

test("Create a Dot's preflight takes the key in place too, without submitting the Dot's form", async ({ page }) => {
  await page.goto(harness().url + '/new');
  const keyRow = page.getByTestId('setup-checklist').locator('[data-check="OpenRouter key"]');
  try {
    await keyRow.getByLabel(/Paste your OpenRouter key/).fill('sk-or-v1-0123456789abcdef');
    await keyRow.getByLabel(/Paste your OpenRouter key/).press('Enter');
    await expect(keyRow).toHaveAttribute('data-status', 'ok');
    await expect(page).toHaveURL(/\/new$/);
  } finally {
    await deleteDefaultKey();
  }
});
