// Every error banner of the pages, each reached by one failing answer of the
// route it reads, and each saying what to do next. The failing answer is a
// fake at the test's edge (`failing`): the real server does not fail on cue.
import { expect, test, type Page } from '@playwright/test';
import { addTask, applyDot, askApproval, denyWaiting, harness, setComputerState } from './harness';

const DOT = '/dots/v1/namespaces/default/dots/err-dot';
const GROUP = '/apis/dots.invisible.dev/v1alpha1';

/** Answers the page's requests to url (a glob), of method when given, with a failure as the server words it. */
async function failing(page: Page, url: string, status = 500, message = 'the database did not answer', method?: string) {
  await page.route(url, (route) =>
    method && route.request().method() !== method ? route.fallback() : route.fulfill({ status, json: { error: 'internal', message } }),
  );
}

const cases: { name: string; path: string; running?: boolean; task?: boolean; fail: (page: Page) => Promise<void>; act?: (page: Page) => Promise<void>; want: string[] }[] = [
  {
    name: 'Home, when the API server cannot be listed',
    path: '/',
    fail: (p) => failing(p, `**${GROUP}/dots`, 503),
    want: ['The API server cannot be reached; retrying. Is invisible-dots server running?'],
  },
  {
    name: "Home's setup checklist, when the doctor fails",
    path: '/',
    fail: (p) => failing(p, '**/dots/v1/doctor', 500, 'the doctor failed'),
    want: ["The host's checks could not be read: the doctor failed. Run invisible-dots doctor in a terminal to see them."],
  },
  {
    name: 'Host settings, when health and the doctor fail',
    path: '/settings',
    fail: async (p) => {
      await failing(p, '**/dots/v1/health', 502, 'the Dots API did not answer');
      await failing(p, '**/dots/v1/doctor', 500, 'the doctor failed');
    },
    want: [
      "The server's health could not be read: the Dots API did not answer. Is invisible-dots server running? Reload the page to ask again.",
      "The host's checks could not be read: the doctor failed. Run invisible-dots doctor in a terminal to see them, or reload the page to ask again.",
    ],
  },
  {
    name: 'Inbox, when the failed tasks cannot be read',
    path: '/inbox',
    fail: (p) => failing(p, `**/dots/v1/tasks?*`),
    want: ['The failed tasks could not be read: the database did not answer. They are read again when a task fails, or when you reload the page.'],
  },
  {
    name: 'Chat, when the conversation cannot be read',
    path: '/dots/default/err-dot/chat',
    fail: (p) => failing(p, `**${DOT}/messages?*`),
    want: ['The conversation could not be read: the database did not answer. Reload the page to try again.'],
  },
  {
    name: 'Activity, when the log cannot be read',
    path: '/dots/default/err-dot/activity',
    fail: (p) => failing(p, `**${DOT}/activity?*`),
    want: ['The log could not be read: the database did not answer. Reload the page, or Load older events, to try again.'],
  },
  {
    name: "a task's drawer, when its story cannot be read",
    path: '/dots/default/err-dot/tasks/err-task',
    task: true,
    fail: (p) => failing(p, `**${DOT}/activity?task=*`),
    want: ['The story could not be read: the database did not answer. Reload the page to try again.'],
  },
  {
    name: "a Dot's settings, when its config cannot be read",
    path: '/dots/default/err-dot/settings',
    fail: (p) => failing(p, `**${GROUP}/namespaces/default/dots/err-dot`, 500, 'etcdserver: request timed out', 'GET'),
    want: ["err-dot's config could not be read: etcdserver: request timed out. Reload the page to try again."],
  },
  {
    name: "the Computer page's Usage, when the spend cannot be read",
    path: '/dots/default/err-dot/computer?view=usage',
    fail: (p) => failing(p, `**${DOT}/usage*`),
    want: ['could not be read: the database did not answer. Reload the page to try again.'],
  },
  {
    name: "the Computer page, when the screen and the files cannot be read",
    path: '/dots/default/err-dot/computer',
    running: true,
    fail: async (p) => {
      await failing(p, `**${DOT}/screenshot`, 502, 'the guest did not answer');
      await failing(p, `**${DOT}/files/list?*`, 502, 'the guest did not answer');
    },
    act: (p) => p.getByRole('link', { name: 'Files', exact: true }).click(),
    want: [
      'The screen could not be read: the guest did not answer. Trying again.',
      'The folder could not be read: the guest did not answer. Reload the page to try again.',
    ],
  },
  {
    name: 'an approval card, when the answer is not written',
    path: '/inbox?dot=default/err-dot',
    fail: (p) => failing(p, `**${GROUP}/namespaces/default/approvals/*`, 500, 'etcdserver: leader changed', 'PATCH'),
    act: (p) => p.locator('[data-card]', { hasText: 'err-dot' }).first().getByRole('button', { name: 'Deny…' }).click().then(() => p.getByRole('button', { name: 'Deny', exact: true }).click()),
    want: ['etcdserver: leader changed. Try again.'],
  },
];

for (const c of cases) {
  test(`error banner: ${c.name}`, async ({ page }) => {
    await applyDot('err-dot');
    if (c.running) await setComputerState('err-dot', 'RUNNING');
    if (c.task) await addTask('err-dot', 'err-task', { description: 'Fail to read' }).catch(() => undefined);
    if (c.path.startsWith('/inbox?')) await askApproval(`err-a-${Date.now()}`, 'err-dot', 'default', { tool: 'read_file', permission: 'files.read', arguments: { path: 'a' } });
    await c.fail(page);
    await page.goto(harness().url + c.path);
    // With an act, the last banner is the act's, and the others are seen before it.
    const before = c.act ? c.want.slice(0, -1) : c.want;
    for (const w of before) await expect(page.getByText(w, { exact: false }).first()).toBeVisible();
    if (c.act) {
      await c.act(page);
      await expect(page.getByText(c.want.at(-1)!, { exact: false }).first()).toBeVisible();
    }
    await denyWaiting('err-dot');
  });
}
