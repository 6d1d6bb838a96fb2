import { expect, test } from '@playwright/test';
import { addTask, adminCallOn, applyDot, getResource, guestSays, harness, makeNamespace } from './harness';

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

test("a card's power menu reboots at once while no task runs, and asks, naming the task, while one does", async ({ page }) => {
  await applyDot('asks-dot');
  await page.goto(harness().url + '/');
  const menu = page.locator('[data-dot="default/asks-dot"]').getByTestId('power-menu');
  await menu.locator('summary').click();
  // No task: Reboot is one press (once the tasks are read; until then it asks).
  await menu.getByTestId('reboot-now').click();
  await expect(menu.getByRole('group', { name: 'Reboot' })).toHaveCount(0);
  await expect.poll(async () => (await getResource('computers', 'asks-dot')).metadata.annotations?.['dots.invisible.dev/reboot-requested']).toBeTruthy();
  const first = (await getResource('computers', 'asks-dot')).metadata.annotations['dots.invisible.dev/reboot-requested'];

  const t = await addTask('asks-dot', 'asks-task', { description: 'Renew the passport\nbefore May' });
  await guestSays('asks-dot', [{ type: 'task.started', data: { task_id: t.metadata.uid } }]);
  await expect.poll(async () => (await getResource('tasks', 'asks-task')).status?.phase).toBe('RUNNING');
  await expect(menu.getByTestId('reboot-now')).toHaveCount(0);
  await menu.getByRole('button', { name: 'Reboot', exact: true }).click();
  const ask = menu.getByRole('group', { name: 'Reboot' });
  await expect(ask.getByTestId('confirm-task')).toHaveText('Renew the passport');
  await page.screenshot({ path: test.info().outputPath('home-reboot-asks.png') });
  // Asked, not done: nothing was written until the answer.
  expect((await getResource('computers', 'asks-dot')).metadata.annotations['dots.invisible.dev/reboot-requested']).toBe(first);
  await ask.getByRole('button', { name: 'No' }).click();
  // Stop always asks, and says the automations pause.
  await menu.getByRole('button', { name: 'Stop', exact: true }).click();
  await expect(menu.getByRole('group', { name: 'Stop' })).toContainText('Its automations do not run while it is stopped.');
});

test("Home shows a namespace's spend today against its DotQuota, and its question for more, answered there", async ({ page }) => {
  const ns = 'quota-home';
  await makeNamespace(ns);
  const made = await adminCallOn(harness(), 'POST', `/apis/dots.invisible.dev/v1alpha1/namespaces/${ns}/dotquotas`, {
    apiVersion: 'dots.invisible.dev/v1alpha1',
    kind: 'DotQuota',
    metadata: { name: 'default', namespace: ns },
    spec: { spendPerDayUSD: '1', activeDots: 4 },
  });
  expect([201, 409]).toContain(made.status);
  await applyDot('spender', ns);
  await guestSays('spender', [{ type: 'message.assistant', data: { text: 'Hello.', spent_usd: 1.5 } }], ns);
  await expect.poll(async () => (await getResource('dotquotas', 'default', ns)).status?.spendRequest?.phase, { timeout: 20_000 }).toBe('Pending');
  // The question is an Approval too, in the log of the Dot whose work waits: the Inbox shows it as the
  // namespace's, with no "always".
  await page.goto(harness().url + '/inbox');
  const card = page.locator('[data-card]', { has: page.getByTestId('spend-question') });
  await expect(card.getByTestId('spend-question')).toHaveText(`Namespace ${ns} reached its daily spend cap`);
  await expect(card.getByTestId('permission-phrase')).toHaveText('Spend more today in this namespace');
  await expect(card).toContainText(`spent $1.50 of $1.00 today in namespace ${ns}; allow $1.00 more?`);
  await expect(card.getByRole('button', { name: /Always allow/ })).toHaveCount(0);
  await page.goto(harness().url + '/');
  const line = page.locator(`[data-testid="quota"][data-namespace="${ns}"]`);
  await expect(line.getByTestId('quota-spend')).toHaveText(`Today: $1.50 of $1 (namespace ${ns})`);
  await expect(line.getByTestId('quota-active')).toContainText('of 4 active Dots');
  const ask = line.getByTestId('quota-ask');
  await expect(ask).toContainText(`spent $1.50 of $1.00 today in namespace ${ns}; allow $1.00 more?`);
  await ask.getByRole('button', { name: 'Allow $1.00 more' }).click();
  await expect.poll(async () => (await getResource('dotquotas', 'default', ns)).spec?.spendDecision?.decision).toBe('approve');
  await expect(line.getByTestId('quota-ask')).toHaveCount(0);
  // Answered on Home, the Approval follows and leaves the Inbox.
  await page.goto(harness().url + '/inbox');
  await expect(page.getByTestId('spend-question')).toHaveCount(0, { timeout: 20_000 });
});

test("a Dot beyond its namespace's active-Dots cap says on its card which cap holds it and how to change it", async ({ page }) => {
  const ns = 'quota-cap';
  await makeNamespace(ns);
  const made = await adminCallOn(harness(), 'POST', `/apis/dots.invisible.dev/v1alpha1/namespaces/${ns}/dotquotas`, {
    apiVersion: 'dots.invisible.dev/v1alpha1',
    kind: 'DotQuota',
    metadata: { name: 'default', namespace: ns },
    spec: { activeDots: 0 },
  });
  expect([201, 409]).toContain(made.status);
  await applyDot('waits', ns);
  await page.goto(harness().url + '/');
  const card = page.locator(`[data-dot="${ns}/waits"]`);
  await expect(card).toContainText(`0 of 0 active Dots in namespace ${ns} (DotQuota default)`);
  await expect(page.locator(`[data-testid="quota"][data-namespace="${ns}"]`).getByTestId('quota-active')).toHaveText('0 of 0 active Dots');
});
