import AxeBuilder from '@axe-core/playwright';
import { expect, test, type Page } from '@playwright/test';
import { addTask, applyDot, getResource, guestSays, harness, patchDotSpec, waitForEvent } from './harness';

async function noSeriousViolation(page: Page) {
  const { violations } = await new AxeBuilder({ page }).analyze();
  const serious = violations
    .filter((v) => v.impact === 'serious' || v.impact === 'critical')
    .map((v) => `${v.id}: ${v.help} (${v.nodes.map((n) => n.target.join(' ')).join(', ')})`);
  expect(serious).toEqual([]);
}

test("the queue is in the dispatcher's order, and a scheduled task is apart", async ({ page }) => {
  await applyDot('queue-dot');
  // The first is dispatched at once and holds the Dot (one task at a time).
  await addTask('queue-dot', 'q-first', { description: 'first' });
  await page.goto(harness().url + '/dots/default/queue-dot/tasks');
  await expect(page.getByTestId('tasks-running').getByTestId('task-card')).toHaveAttribute('data-task', 'q-first');
  // Made in this order; the dispatcher takes the higher priority first,
  // then the older (internal/lifecycle.NextTask). Creation times are in
  // seconds: the old one is made a second before the new one.
  await addTask('queue-dot', 'q-low', { description: 'low', priority: -5 });
  await addTask('queue-dot', 'q-old', { description: 'old normal' });
  await addTask('queue-dot', 'q-high', { description: 'urgent', priority: 50 });
  await new Promise((r) => setTimeout(r, 1100));
  await addTask('queue-dot', 'a-new', { description: 'new normal' });
  const later = new Date(Date.now() + 3 * 86400_000).toISOString().replace(/\.\d+Z$/, 'Z');
  await addTask('queue-dot', 'q-later', { description: 'in three days', priority: 90, scheduledAt: later });
  const queue = page.getByTestId('tasks-queue').getByTestId('task-card');
  await expect(queue).toHaveCount(4);
  expect(await queue.evaluateAll((els) => els.map((e) => e.getAttribute('data-task')))).toEqual(['q-high', 'q-old', 'a-new', 'q-low']);
  await expect(page.getByTestId('tasks-scheduled').getByTestId('task-card')).toHaveAttribute('data-task', 'q-later');
  await noSeriousViolation(page);
});

test("a task's address opens its drawer with its story, and cancel asks first", async ({ page }) => {
  await applyDot('story-dot');
  const t = await addTask('story-dot', 'story-1', { description: 'Find the cheapest fare to Lisbon' });
  // The guest starts a task only once it was given it.
  await waitForEvent('story-dot', 'task.created');
  await guestSays('story-dot', [
    { type: 'task.started', data: { task_id: t.metadata.uid } },
    { type: 'tool.called', data: { task_id: t.metadata.uid, tool: 'browser_navigate', permission: 'browser.navigate', decision: 'allow', ok: true, duration_ms: 800, target: 'https://fares.example' } },
    { type: 'task.progress', data: { task_id: t.metadata.uid, text: 'compared three airlines' } },
    // Another task's step is not this task's story.
    { type: 'tool.called', data: { task_id: 'another-task', tool: 'exec', permission: 'computer.exec', decision: 'allow', ok: true, duration_ms: 5 } },
  ]);
  await page.goto(harness().url + '/dots/default/story-dot/tasks/story-1');
  const drawer = page.getByTestId('task-drawer');
  await expect(drawer.getByRole('heading', { name: 'Find the cheapest fare to Lisbon' })).toBeVisible();
  const story = drawer.getByTestId('task-story').locator('li');
  // The words of internal/eventtext, through the activity route.
  await expect(story).toHaveText([/task story-1 given to the Dot \(run 1\)/, /task \w+ started/, /ran browser_navigate https:\/\/fares\.example in 800ms/, /compared three airlines/]);
  // Live: a new step of the task joins the open story.
  await guestSays('story-dot', [{ type: 'task.progress', data: { task_id: t.metadata.uid, text: 'booked nothing yet' } }]);
  await expect(story).toHaveCount(5);
  await noSeriousViolation(page);
  // Escape closes the drawer and goes back to the list.
  await page.keyboard.press('Escape');
  await expect(page).toHaveURL(/\/dots\/default\/story-dot\/tasks$/);
  await expect(drawer).toHaveCount(0);

  const card = page.locator('[data-task=story-1]');
  await card.getByRole('button', { name: 'Cancel' }).click();
  await expect(card).toContainText('Cancel this task?');
  expect((await getResource('tasks', 'story-1')).spec.cancelRequested ?? false).toBe(false);
  await card.getByRole('button', { name: 'Cancel the task' }).click();
  await expect.poll(async () => (await getResource('tasks', 'story-1')).spec.cancelRequested).toBe(true);
});

test('a task of another Dot under this address is missing', async ({ page }) => {
  await applyDot('own-dot');
  await applyDot('other-dot');
  await addTask('other-dot', 'not-yours', { description: 'theirs' });
  await page.goto(harness().url + '/dots/default/own-dot/tasks/not-yours');
  await expect(page.getByTestId('task-drawer')).toContainText('own-dot has no task not-yours');
});

test('a new task is made from the page and its drawer opens', async ({ page }) => {
  await applyDot('new-task-dot');
  await page.goto(harness().url + '/dots/default/new-task-dot/tasks');
  await page.getByRole('button', { name: 'New task' }).click();
  await page.getByLabel('What to do').fill('Water the plants');
  await page.getByLabel(/Priority/).fill('7');
  await page.getByRole('button', { name: 'Give it to new-task-dot' }).click();
  await expect(page).toHaveURL(/\/dots\/default\/new-task-dot\/tasks\/new-task-dot-\w+$/);
  const drawer = page.getByTestId('task-drawer');
  await expect(drawer.getByRole('heading', { name: 'Water the plants' })).toBeVisible();
  await expect(drawer.getByTestId('task-state')).toContainText('priority 7');
  const made = page.url().split('/').pop()!;
  expect((await getResource('tasks', made)).spec).toMatchObject({ dotName: 'new-task-dot', description: 'Water the plants', priority: 7 });
  await page.screenshot({ path: test.info().outputPath('tasks.png') });
});

test("a task's waiting approval is answerable on its card and in its drawer", async ({ page }) => {
  await applyDot('ask-task-dot');
  const t = await addTask('ask-task-dot', 'ask-task-1', { description: 'Clean the downloads' });
  await guestSays('ask-task-dot', [
    { type: 'task.started', data: { task_id: t.metadata.uid } },
    { type: 'approval.requested', data: { approval_id: 'req-task-1', task_id: t.metadata.uid, tool: 'exec', permission: 'computer.exec', arguments: { command: 'rm ~/Downloads/*.tmp' }, reason: 'clean up' } },
  ]);
  await page.goto(harness().url + '/dots/default/ask-task-dot/tasks');
  const card = page.locator('[data-task=ask-task-1]');
  await expect(card.locator('[data-card]')).toContainText('wants to use');
  await card.getByRole('link', { name: 'Clean the downloads' }).click();
  const drawer = page.getByTestId('task-drawer');
  await expect(drawer.locator('[data-card]')).toContainText('wants to use');
  await drawer.getByRole('button', { name: 'Allow once' }).click();
  await expect(drawer.locator('[data-card]')).toHaveCount(0);
  await expect(drawer.getByTestId('task-story')).toContainText('asks to run exec');
});

test("a Dot's Tasks page reads that Dot's tasks by label selector, live", async ({ page }) => {
  await applyDot('sel-dot');
  await applyDot('sel-other');
  await addTask('sel-dot', 'sel-mine', { description: 'mine' });
  await addTask('sel-other', 'sel-theirs', { description: 'theirs' });
  const urls: URL[] = [];
  page.on('request', (r) => urls.push(new URL(r.url())));
  const watchesOf = () => urls.filter((u) => u.pathname === '/web/v1/live').map((u) => u.searchParams.getAll('watch'));
  const listed = page.waitForResponse((r) => new URL(r.url()).searchParams.get('labelSelector') === 'dots.invisible.dev/dot=sel-dot');
  await page.goto(harness().url + '/dots/default/sel-dot/tasks');

  // The API server picks the tasks: the list's answer holds the Dot's alone.
  const list = await (await listed).json();
  expect(list.items.map((t: any) => t.metadata.name)).toContain('sel-mine');
  expect(list.items.filter((t: any) => t.spec.dotName !== 'sel-dot')).toEqual([]);
  await expect(page.locator('[data-task=sel-mine]')).toBeVisible();
  await expect(page.locator('[data-task=sel-theirs]')).toHaveCount(0);
  // No view lists every Task (the Inbox's count reads the failed ones of
  // the Dots API apart), and the live connection watches the Dot's by the
  // same selector.
  expect(urls.filter((u) => u.pathname.startsWith('/apis/') && u.pathname.endsWith('/tasks') && !u.searchParams.has('labelSelector')).map(String)).toEqual([]);
  await expect.poll(() => watchesOf().at(-1)?.filter((w) => w.startsWith('tasks'))).toEqual([expect.stringMatching(/^tasks@dots\.invisible\.dev\/dot=sel-dot:\d+$/)]);

  // Live: the other Dot's new task is made first, so it would arrive first
  // on a watch of every task; only this Dot's appears.
  await addTask('sel-other', 'sel-theirs-2', { description: 'theirs, later' });
  await addTask('sel-dot', 'sel-mine-2', { description: 'mine, later' });
  await expect(page.locator('[data-task=sel-mine-2]')).toBeVisible();
  await expect(page.locator('[data-task^=sel-theirs]')).toHaveCount(0);

  // Another Dot's page, reached without a reload, watches that Dot's tasks instead.
  await page.getByTestId('rail-dots').getByRole('link', { name: 'sel-other' }).click();
  await page.getByRole('link', { name: 'Tasks', exact: true }).click();
  await expect(page).toHaveURL(/\/dots\/default\/sel-other\/tasks$/);
  await expect(page.locator('[data-task=sel-theirs-2]')).toBeVisible();
  await expect(page.locator('[data-task^=sel-mine]')).toHaveCount(0);
  await expect.poll(() => watchesOf().at(-1)?.filter((w) => w.startsWith('tasks'))).toEqual([expect.stringMatching(/^tasks@dots\.invisible\.dev\/dot=sel-other:\d+$/)]);
  await addTask('sel-dot', 'sel-mine-3', { description: 'mine, latest' });
  await addTask('sel-other', 'sel-theirs-3', { description: 'theirs, latest' });
  await expect(page.locator('[data-task=sel-theirs-3]')).toBeVisible();
  await expect(page.locator('[data-task^=sel-mine]')).toHaveCount(0);
});

test('a task that asked another Dot shows that Dot\'s spend beside its own, and together', async ({ page }) => {
  await applyDot('spend-asker');
  await applyDot('spend-doer');
  // Both consent, or the control plane cancels the request.
  await patchDotSpec('spend-asker', { delegation: { canAsk: ['spend-doer'] } });
  await patchDotSpec('spend-doer', { delegation: { acceptsFrom: ['spend-asker'] } });
  const parent = await addTask('spend-asker', 'spend-parent', { description: 'plan the trip' });
  // As the control plane makes a delegated task (controllers/delegation_controller.go).
  const res = await fetch(`${harness().url}/apis/dots.invisible.dev/v1alpha1/namespaces/default/tasks`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({
      apiVersion: 'dots.invisible.dev/v1alpha1',
      kind: 'Task',
      metadata: { name: 'spend-child', labels: { 'dots.invisible.dev/requested-by': 'spend-asker' } },
      spec: { dotName: 'spend-doer', description: 'book the train', requestedBy: { dot: 'spend-asker', task: 'spend-parent', depth: 1 } },
    }),
  });
  expect(res.ok, `make the request's task: ${res.status}`).toBe(true);
  const child = await res.json();
  await waitForEvent('spend-asker', 'task.created');
  await waitForEvent('spend-doer', 'task.created');
  // Each Dot's spend is counted where it happens: the asker's in its task,
  // the doer's in the request's.
  await guestSays('spend-asker', [
    { type: 'task.started', data: { task_id: parent.metadata.uid } },
    { type: 'task.progress', data: { task_id: parent.metadata.uid, text: 'asked spend-doer', spent_usd: 0.01 } },
  ]);
  await guestSays('spend-doer', [
    { type: 'task.started', data: { task_id: child.metadata.uid } },
    { type: 'task.completed', data: { task_id: child.metadata.uid, summary: 'booked the 9:40', spent_usd: 0.02 } },
  ]);
  await expect.poll(async () => (await getResource('tasks', 'spend-parent')).status?.delegatedSpentUSD).toBe(0.02);

  await page.goto(harness().url + '/dots/default/spend-asker/tasks/spend-parent');
  const drawer = page.getByTestId('task-drawer');
  await expect(drawer.getByTestId('task-state')).toContainText('spent $0.01 + $0.02 by the Dots it asked ($0.03 together)');
  const asked = drawer.getByTestId('task-asked').locator('li');
  await expect(asked).toHaveCount(1);
  await expect(asked).toContainText('spend-doer: book the train');
  await expect(asked).toContainText('completed · spent $0.02');
  await noSeriousViolation(page);

  // The request's own page names who asked, and links back.
  await asked.getByRole('link').click();
  await expect(page).toHaveURL(/\/dots\/default\/spend-doer\/tasks\/spend-child$/);
  await expect(page.getByTestId('task-asked-by')).toHaveText('asked by spend-asker (task spend-parent)');
  await expect(page.getByTestId('task-state')).toContainText('spent $0.02');
});
