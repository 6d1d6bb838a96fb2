import { expect, test } from '@playwright/test';
import { applyDot, askApproval, getApproval, harness } from './harness';

test('the Inbox answers approvals with the keyboard and with a note', async ({ page }) => {
  await applyDot('inbox-dot');
  await page.goto(harness().url + '/inbox');
  const write = { tool: 'write_file', permission: 'files.write', arguments: { path: '~/workspace/notes.md' } };
  await askApproval('inbox-a1', 'inbox-dot', 'default', write);
  await askApproval('inbox-a2', 'inbox-dot', 'default', write);
  const cards = page.locator('[data-card]', { hasText: 'inbox-dot' });
  await expect(cards).toHaveCount(2);
  await expect(page.getByTestId('inbox-count')).toHaveText('2');

  // j moves into the list's next card; a allows the card in focus once.
  await cards.first().focus();
  await page.keyboard.press('j');
  await expect(cards.nth(1)).toBeFocused();
  await page.keyboard.press('k');
  await expect(cards.first()).toBeFocused();
  await page.keyboard.press('a');
  await expect(cards).toHaveCount(1);
  await expect(page.getByTestId('inbox-count')).toHaveText('1');
  const first = await getApproval('inbox-a1');
  expect(first.spec.decision).toBe('approve');
  expect(first.spec.always ?? false).toBe(false);

  // d asks for a note, then Deny sends it.
  await cards.first().focus();
  await page.keyboard.press('d');
  await page.getByLabel('A note for the Dot (optional)').fill('not in the home directory');
  await page.getByRole('button', { name: 'Deny', exact: true }).click();
  await expect(cards).toHaveCount(0);
  await expect(page.getByText('Nothing needs you now.')).toBeVisible();
  const second = await getApproval('inbox-a2');
  expect(second.spec).toMatchObject({ decision: 'reject', note: 'not in the home directory' });
});

test('a command is not allowed by the a key alone: it focuses Allow once', async ({ page }) => {
  await applyDot('exec-dot');
  await askApproval('exec-a1', 'exec-dot');
  await page.goto(harness().url + '/inbox');
  const card = page.locator('[data-card]', { hasText: 'exec-dot' });
  await card.focus();
  await page.keyboard.press('a');
  await expect(card.getByRole('button', { name: 'Allow once' })).toBeFocused();
  expect((await getApproval('exec-a1')).spec.decision).toBeUndefined();
  await page.keyboard.press('Enter');
  await expect(card).toHaveCount(0);
  expect((await getApproval('exec-a1')).spec.decision).toBe('approve');
});

test('Always allow says what it allows, then answers with always', async ({ page }) => {
  await applyDot('always-dot');
  await askApproval('always-a1', 'always-dot');
  await page.goto(harness().url + '/inbox');
  await page.locator('[data-card]', { hasText: 'always-dot' }).getByRole('button', { name: 'Always allow…' }).click();
  await expect(page.getByRole('note')).toContainText('will not ask again');
  await page.getByRole('button', { name: 'Always allow computer.exec' }).click();
  await expect(page.locator('[data-card]', { hasText: 'always-dot' })).toHaveCount(0);
  const a = await getApproval('always-a1');
  expect(a.spec).toMatchObject({ decision: 'approve', always: true });
});

for (const theme of ['light', 'dark'] as const) {
  test(`Home and Chat in the ${theme} theme`, async ({ page }) => {
    await applyDot('theme-dot');
    await page.addInitScript((t) => localStorage.setItem('dots.theme', t), theme);
    await page.goto(harness().url + '/');
    await expect(page.locator('html')).toHaveAttribute('data-theme', theme);
    await expect(page.locator('[data-dot="default/theme-dot"]')).toBeVisible();
    await page.screenshot({ path: test.info().outputPath(`home-${theme}.png`) });
    await page.goto(harness().url + '/dots/default/theme-dot/chat');
    await expect(page.getByLabel('Message to theme-dot')).toBeVisible();
    await page.screenshot({ path: test.info().outputPath(`chat-${theme}.png`) });
  });
}

test("a Dot's waiting approval is answerable in its chat, and the tab title counts it", async ({ page }) => {
  await applyDot('ask-dot');
  await page.goto(harness().url + '/dots/default/ask-dot/chat');
  await askApproval('ask-a1', 'ask-dot');
  const card = page.getByTestId('chat-approvals').locator('[data-card]');
  await expect(card).toContainText('wants to use');
  await expect(page).toHaveTitle(/^\(\d+\) Dots$/);
  await card.getByRole('button', { name: 'Allow once' }).click();
  await expect(page.getByTestId('chat-approvals')).toHaveCount(0);
  expect((await getApproval('ask-a1')).spec.decision).toBe('approve');
});
