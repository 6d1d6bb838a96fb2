import { expect, test } from '@playwright/test';
import { addTask, applyDot, askApproval, getApproval, getResource, guestSays, harness } from './harness';

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

test('a card says the risk, and a file written outside the workspace is destructive where one inside is not', async ({ page }) => {
  await applyDot('write-dot');
  await askApproval('write-in', 'write-dot', 'default', { tool: 'write_file', permission: 'files.write', arguments: { path: 'notes/today.md', content: 'x' } });
  await askApproval('write-out', 'write-dot', 'default', { tool: 'write_file', permission: 'files.write', arguments: { path: '~/.bashrc', content: 'x' } });
  await page.goto(harness().url + '/inbox');
  const inside = page.locator('[data-card]', { hasText: 'notes/today.md' });
  const outside = page.locator('[data-card]', { hasText: '.bashrc' });
  await expect(inside.getByTestId('permission-phrase')).toHaveText('Write files (medium risk)');
  await expect(inside.getByTestId('destructive')).toHaveCount(0);
  await expect(outside.getByTestId('destructive')).toBeVisible();
  // The destructive one is not allowed by the a key alone.
  await outside.focus();
  await page.keyboard.press('a');
  await expect(outside.getByRole('button', { name: 'Allow once' })).toBeFocused();
  expect((await getApproval('write-out')).spec.decision).toBeUndefined();
});

test('Always allow says what it allows, then answers with always', async ({ page }) => {
  await applyDot('always-dot');
  await askApproval('always-a1', 'always-dot');
  await page.goto(harness().url + '/inbox');
  await page.locator('[data-card]', { hasText: 'always-dot' }).getByRole('button', { name: 'Always allow…' }).click();
  await expect(page.getByRole('note')).toContainText('will not ask again');
  // It names the tools the permission covers (the engine's tool table).
  await expect(page.getByTestId('always-covers')).toHaveText(/^exec, .*exec_session/);
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
  // The favicon reads the same count.
  const title = await page.title();
  await expect(page.locator('link[rel=icon]')).toHaveAttribute('data-count', /\d+/.exec(title)![0]);
  await card.getByRole('button', { name: 'Allow once' }).click();
  await expect(page.getByTestId('chat-approvals')).toHaveCount(0);
  expect((await getApproval('ask-a1')).spec.decision).toBe('approve');
});

test('an approval the Dot asks in the chat is placed where it was asked, then becomes a receipt', async ({ page }) => {
  await applyDot('placed-dot');
  await page.goto(harness().url + '/dots/default/placed-dot/chat');
  const box = page.getByLabel('Message to placed-dot');
  await box.fill('Clean my tmp folder');
  await box.press('Enter');
  await expect(page.locator('[data-testid=message-user][data-event-id]')).toBeVisible();
  await guestSays('placed-dot', [
    { type: 'approval.requested', data: { approval_id: 'req-clean-1', tool: 'exec', permission: 'computer.exec', arguments: { command: 'rm -rf ~/tmp' }, reason: 'clean tmp' } },
  ]);
  const placed = page.getByTestId('placed-approval');
  await expect(placed).toContainText('wants to use');
  await guestSays('placed-dot', [{ type: 'message.assistant', data: { text: 'I wait for your answer.' } }]);
  await expect(page.getByTestId('message-assistant')).toBeVisible();
  // In the log's order: the question, the approval, the answer; none below.
  const order = () => page.locator('[data-testid=thread] [data-testid]:not([data-testid=thread] [data-testid] [data-testid])').evaluateAll((els) => els.map((e) => e.getAttribute('data-testid')));
  expect(await order()).toEqual(['message-user', 'placed-approval', 'message-assistant']);
  await expect(page.getByTestId('chat-approvals')).toHaveCount(0);
  await placed.getByRole('button', { name: 'Allow once' }).click();
  const receipt = page.getByTestId('approval-receipt');
  await expect(receipt).toContainText('exec (computer.exec): Allowed once');
  expect(await order()).toEqual(['message-user', 'approval-receipt', 'message-assistant']);
  // The same after a reload, read from the log.
  await page.reload();
  await expect(receipt).toContainText('Allowed once');
});

test('the Inbox history lists the answered approvals, filtered from the address, and pages', async ({ page }) => {
  await applyDot('hist-dot');
  await applyDot('hist-other');
  for (let i = 0; i < 52; i++) await askApproval(`hist-a${i}`, 'hist-dot');
  await askApproval('hist-b1', 'hist-other', 'default', { tool: 'write_file', permission: 'files.write', arguments: { path: '~/x' } });
  // Answered as the Inbox answers: a decision in the spec.
  for (const name of [...Array.from({ length: 52 }, (_, i) => `hist-a${i}`), 'hist-b1']) {
    const res = await fetch(`${harness().url}/apis/dots.invisible.dev/v1alpha1/namespaces/default/approvals/${name}`, {
      method: 'PATCH',
      headers: { 'Content-Type': 'application/merge-patch+json' },
      body: JSON.stringify({ spec: { decision: name === 'hist-b1' ? 'reject' : 'approve', note: name === 'hist-b1' ? 'not there' : undefined } }),
    });
    expect(res.ok).toBe(true);
  }
  await page.goto(harness().url + '/inbox?tab=history&dot=default%2Fhist-dot');
  const rows = page.getByTestId('history-row');
  await expect(rows).toHaveCount(50);
  await expect(rows.filter({ hasText: 'hist-other' })).toHaveCount(0);
  await page.getByRole('button', { name: 'Show older answers' }).click();
  await expect(rows).toHaveCount(52);
  // The filters are in the address: another permission, another Dot.
  await page.getByLabel('Dot', { exact: true }).selectOption('default/hist-other');
  await page.getByLabel('Permission').selectOption('files.write');
  await expect(page).toHaveURL(/tab=history/);
  await expect(page).toHaveURL(/permission=files.write/);
  await expect(rows).toHaveCount(1);
  await expect(rows.first()).toContainText('denied');
  await expect(rows.first()).toContainText('note: not there');
  await page.reload();
  await expect(rows).toHaveCount(1);
  await page.getByRole('link', { name: /Needs you/ }).click();
  await expect(page).toHaveURL(/\/inbox\?dot=default%2Fhist-other&permission=files.write$/);
});

test('a task that failed today needs the person until dismissed', async ({ page }) => {
  await applyDot('fail-dot');
  const t = await addTask('fail-dot', 'fail-1', { description: 'Book the flight' });
  await guestSays('fail-dot', [
    { type: 'task.started', data: { task_id: t.metadata.uid } },
    { type: 'task.failed', data: { task_id: t.metadata.uid, error: 'the airline site was down' } },
  ]);
  await expect.poll(async () => (await getResource('tasks', 'fail-1')).status?.phase).toBe('FAILED');
  await page.goto(harness().url + '/inbox?dot=default%2Ffail-dot');
  const row = page.getByTestId('failed-tasks').locator('[data-task=fail-1]');
  await expect(row).toContainText('the airline site was down');
  const count = Number(await page.getByTestId('inbox-count').textContent());
  expect(count).toBeGreaterThanOrEqual(1);
  await row.getByRole('link', { name: 'Book the flight' }).click();
  await expect(page).toHaveURL(/\/dots\/default\/fail-dot\/tasks\/fail-1$/);
  await expect(page.getByTestId('task-error')).toHaveText('the airline site was down');
  await page.goBack();
  await row.getByRole('button', { name: 'Dismiss' }).click();
  await expect(row).toHaveCount(0);
  await expect(page.getByTestId('inbox-count')).toHaveText(String(count - 1));
  // Kept in this browser.
  await page.reload();
  await expect(page.getByText('Nothing needs you now.')).toBeVisible();
});

test('an approval card shows the call as it reads best, and never a password', async ({ page }) => {
  await applyDot('args-dot');
  await askApproval('args-a1', 'args-dot', 'default', {
    tool: 'browser_identity_create',
    permission: 'browser.identity.create',
    arguments: { url: 'https://shop.example/login', proxy: { server: 'http://proxy.example:3128', password: 'hunter2' } },
  });
  await page.goto(harness().url + '/inbox?dot=default%2Fargs-dot');
  const card = page.locator('[data-card]', { hasText: 'args-dot' });
  await expect(card.getByTestId('call-summary')).toContainText('Address');
  await expect(card.getByTestId('call-summary')).toContainText('https://shop.example/login');
  await card.getByText('Details').click();
  await expect(card).toContainText('proxy.example:3128');
  await expect(card).not.toContainText('hunter2');
});

test('an answered card stays in its place as a receipt until the person leaves the page', async ({ page }) => {
  await applyDot('receipt-dot');
  const write = { tool: 'write_file', permission: 'files.write', arguments: { path: '~/a.md' } };
  await askApproval('receipt-a1', 'receipt-dot', 'default', write);
  await askApproval('receipt-a2', 'receipt-dot', 'default', write);
  await page.goto(harness().url + '/inbox?dot=default%2Freceipt-dot');
  const items = page.getByTestId('approvals').locator(':scope > li');
  await expect(items).toHaveCount(2);
  await items.first().getByRole('button', { name: 'Allow once' }).click();
  // The first place now holds the receipt; the second card has not moved up.
  await expect(items.first()).toHaveAttribute('data-testid', 'answered-receipt');
  await expect(items.first()).toContainText('allowed once');
  await expect(items.nth(1)).toHaveAttribute('data-card');
  // Away and back, in the app: the receipt is gone, the waiting card stays.
  await page.getByRole('link', { name: 'Dots', exact: true }).click();
  await expect(page.getByRole('heading', { name: 'Home' })).toBeVisible();
  await page.getByRole('link', { name: /^Inbox/ }).click();
  await expect(page.locator('[data-card]', { hasText: 'receipt-dot' })).toHaveCount(1);
  await expect(page.getByTestId('answered-receipt')).toHaveCount(0);
});

test("a delegated task's approval names both Dots, its task read among its Dot's tasks by selector", async ({ page }) => {
  await applyDot('deleg-asker');
  await applyDot('deleg-doer');
  await addTask('deleg-asker', 'deleg-asker-t', { description: 'plan the trip' });
  const post = async (kind: string, body: unknown) => {
    const res = await fetch(`${harness().url}/apis/dots.invisible.dev/v1alpha1/namespaces/default/${kind}`, {
      method: 'POST',
      headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify(body),
    });
    expect(res.ok, `make ${kind}: ${res.status} ${await res.clone().text()}`).toBe(true);
  };
  // As the control plane makes a delegated task (controllers/delegation_controller.go):
  // its asker in its spec and in its label.
  await post('tasks', {
    apiVersion: 'dots.invisible.dev/v1alpha1',
    kind: 'Task',
    metadata: { name: 'deleg-doer-t', labels: { 'dots.invisible.dev/requested-by': 'deleg-asker' } },
    spec: { dotName: 'deleg-doer', description: 'book the train', requestedBy: { dot: 'deleg-asker', task: 'deleg-asker-t', depth: 1 } },
  });
  await post('approvals', {
    apiVersion: 'dots.invisible.dev/v1alpha1',
    kind: 'Approval',
    metadata: { name: 'deleg-ask' },
    spec: { dotName: 'deleg-doer', taskName: 'deleg-doer-t', tool: 'exec', permission: 'computer.exec', arguments: { command: 'ls' }, reason: 'look at the tickets' },
  });
  const selectors: string[] = [];
  page.on('request', (r) => {
    const u = new URL(r.url());
    const s = u.searchParams.get('labelSelector');
    if (s) selectors.push(s);
    if (u.pathname.startsWith('/apis/') && u.pathname.endsWith('/tasks') && !s) selectors.push(`every task: ${u}`);
  });

  await page.goto(harness().url + '/inbox');
  const card = page.locator('[data-card]', { hasText: 'deleg-doer' });
  await expect(card.getByTestId('asked-by')).toHaveText('asked by deleg-asker (task deleg-asker-t)');
  expect(selectors).toContain('dots.invisible.dev/dot=deleg-doer');

  // The asker's task lists what it asked, by the asker's requested-by label.
  await card.getByRole('link', { name: 'deleg-asker-t' }).click();
  await expect(page.getByTestId('task-asked')).toContainText('deleg-doer: book the train');
  expect(selectors).toContain('dots.invisible.dev/requested-by=deleg-asker');
  expect(selectors.filter((s) => s.startsWith('every task'))).toEqual([]);
});
