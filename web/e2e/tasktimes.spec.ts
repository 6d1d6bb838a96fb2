import { expect, test, type Page } from '@playwright/test';
import { addTask, applyDot, getResource, guestSays, harness } from './harness';

// A task's times are its status.startTime and status.completionTime, which
// the controllers derive from the log (api/v1alpha1/task_types.go), never its
// creation: "Running for" does not count the time in the queue, History is in
// the order the tasks ended, and the Inbox's last 24 hours hold a task made
// days ago that failed today. The harness cannot make a task days ago, so
// the list the page reads is given older creation times at the test's edge;
// its runs are left out too, so the page is held to the Task's own times.

async function madeDaysAgo(page: Page, days: Record<string, number>) {
  await page.route('**/apis/dots.invisible.dev/v1alpha1/tasks', async (route) => {
    const res = await route.fetch();
    const list = await res.json();
    for (const t of list.items) {
      const d = days[t.metadata.name];
      if (d === undefined) continue;
      t.metadata.creationTimestamp = new Date(Date.now() - d * 86400_000).toISOString().replace(/\.\d+Z$/, 'Z');
      if (t.status) delete t.status.runs;
    }
    await route.fulfill({ response: res, json: list });
  });
}

const status = async (name: string) => (await getResource('tasks', name)).status ?? {};

/** Waits for the controllers to give the task to its Dot (its first run). */
async function given(name: string): Promise<string> {
  await expect.poll(async () => (await status(name)).startTime, { timeout: 20_000 }).toBeTruthy();
  return (await getResource('tasks', name)).metadata.uid;
}

test('Running for, History and the Inbox read the times the task started and ended, not when it was made', async ({ page }) => {
  // Two tasks of one Dot, made A then B, ended A then B.
  await applyDot('times-dot');
  const a = await addTask('times-dot', 'times-a', { description: 'first made, first ended' });
  await addTask('times-dot', 'times-b', { description: 'then made, then ended' });
  const aUID = await given('times-a');
  await guestSays('times-dot', [
    { type: 'task.started', data: { task_id: aUID } },
    { type: 'task.completed', data: { task_id: aUID, summary: 'done first' } },
  ]);
  expect(a.metadata.uid).toBe(aUID);
  await expect.poll(async () => (await status('times-a')).completionTime).toBeTruthy();
  // Times are in seconds: B ends in a later one.
  await new Promise((r) => setTimeout(r, 1100));
  const bUID = await given('times-b');
  await guestSays('times-dot', [
    { type: 'task.started', data: { task_id: bUID } },
    { type: 'task.completed', data: { task_id: bUID, summary: 'done second' } },
  ]);
  await expect.poll(async () => (await status('times-b')).completionTime).toBeTruthy();

  // A task running now, made two days ago.
  await applyDot('times-run-dot');
  await addTask('times-run-dot', 'times-run', { description: 'running a little while' });
  const runUID = await given('times-run');
  await guestSays('times-run-dot', [{ type: 'task.started', data: { task_id: runUID } }]);

  // A task made two days ago that failed now.
  await applyDot('times-fail-dot');
  await addTask('times-fail-dot', 'times-fail', { description: 'Renew the passport' });
  const failUID = await given('times-fail');
  await guestSays('times-fail-dot', [
    { type: 'task.started', data: { task_id: failUID } },
    { type: 'task.failed', data: { task_id: failUID, error: 'the office was closed' } },
  ]);
  await expect.poll(async () => (await status('times-fail')).phase).toBe('FAILED');

  // B made before A, so made-order and end-order disagree.
  await madeDaysAgo(page, { 'times-a': 2, 'times-b': 3, 'times-run': 2, 'times-fail': 2 });

  await page.goto(harness().url + '/dots/default/times-dot/tasks');
  const history = page.getByTestId('tasks-history').getByTestId('task-card');
  await expect(history).toHaveCount(2);
  expect.soft(await history.evaluateAll((els) => els.map((e) => e.getAttribute('data-task'))), 'History, the last ended first').toEqual(['times-b', 'times-a']);
  await expect.soft(history.first()).toContainText(/ended (just now|\d+ min ago)/);

  await page.goto(harness().url + '/dots/default/times-run-dot/tasks');
  const running = page.getByTestId('tasks-running').locator('[data-task=times-run]');
  await expect.soft(running, 'running for the time since it started').toContainText(/running for \d+ (s|min)/);
  await expect.soft(running.getByTestId('task-running-for')).toHaveText(/running for (\d+ s|\d+ min)$/);

  await page.goto(harness().url + '/inbox?dot=default%2Ftimes-fail-dot');
  await expect(page.getByTestId('failed-tasks').locator('[data-task=times-fail]')).toContainText('the office was closed');
});
