// People sign in to a shared web client (server --web-sign-in): a server of
// its own, two people `invisible-dots user add` made for the namespace team
// (a viewer and an editor), and a Dot in team and one in another namespace.
// Each person acts with their own rights: the viewer's pages offer no write,
// the editor's write lands, the other namespace is not seen, a sign-out ends
// the session and a forged cookie is refused.
import AxeBuilder from '@axe-core/playwright';
import { expect, test, type BrowserContext, type Page } from '@playwright/test';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { adminCallOn, halt, launch, type Harness } from './harness';

const GROUP = '/apis/dots.invisible.dev/v1alpha1';
let h: Harness;
const people: Record<string, { kubeconfig: string; token: string; said: string }> = {};

function userAdd(name: string, role: string) {
  const kubeconfig = join(h.home, `${name}.kubeconfig`);
  const run = spawnSync(process.env.INVISIBLE_DOTS_BIN!, ['user', 'add', name, '--namespace', 'team', '--role', role, '--output', kubeconfig], {
    env: { PATH: process.env.PATH, HOME: process.env.HOME, INVISIBLE_DOTS_HOME: h.home },
    encoding: 'utf8',
    timeout: 60_000,
  });
  if (run.status !== 0) throw new Error(`user add ${name}: ${run.stderr}`);
  const token = /token: (\S+)/.exec(readFileSync(kubeconfig, 'utf8'))![1];
  people[name] = { kubeconfig, token, said: run.stderr };
}

async function applyDot(ns: string, name: string) {
  const res = await adminCallOn(h, 'POST', `${GROUP}/namespaces/${ns}/dots`, {
    apiVersion: 'dots.invisible.dev/v1alpha1',
    kind: 'Dot',
    metadata: { name, namespace: ns },
    spec: { model: { provider: 'openrouter', id: 'z-ai/glm-5.3-flash' } },
  });
  if (res.status !== 201) throw new Error(`apply Dot ${ns}/${name}: ${res.status} ${res.text}`);
}

async function signInWithToken(page: Page, token: string) {
  await page.goto(h.url);
  await expect(page.getByRole('heading', { name: 'Sign in to Dots' })).toBeVisible();
  await page.getByLabel('Token').fill(token);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await expect(page.getByTestId('signed-in')).toBeVisible();
}

const sessionCookie = async (ctx: BrowserContext) => (await ctx.cookies()).find((c) => c.name === 'dots-session');

test.describe('people sign in', () => {
  test.describe.configure({ mode: 'serial' });

  test.beforeAll(async () => {
    test.setTimeout(180_000);
    h = await launch({ signIn: true });
    for (const ns of ['team', 'other']) {
      const res = await adminCallOn(h, 'POST', '/api/v1/namespaces', { apiVersion: 'v1', kind: 'Namespace', metadata: { name: ns } });
      if (res.status !== 201 && res.status !== 409) throw new Error(`namespace ${ns}: ${res.status} ${res.text}`);
    }
    await applyDot('team', 'shared');
    await applyDot('other', 'hidden');
    userAdd('viv', 'viewer');
    userAdd('eddie', 'editor');
  });

  test.afterAll(async () => {
    if (h) await halt(h);
  });

  test('user add says where to sign in, and the API answers no one before a sign-in', async ({ page }) => {
    expect(people.viv.said).toContain(`sign in to the web client at ${h.url}`);
    const res = await page.request.get(`${h.url}${GROUP}/dots`);
    expect(res.status()).toBe(401);
    expect((await res.json()).message).toContain('sign in first');
    await page.goto(h.url);
    await page.getByLabel('Token').fill('not-a-token');
    await page.getByRole('button', { name: 'Sign in' }).click();
    await expect(page.getByRole('alert')).toContainText('does not accept this token');
    expect(await sessionCookie(page.context())).toBeUndefined();
    const { violations } = await new AxeBuilder({ page }).analyze();
    expect(violations.filter((v) => v.impact === 'serious' || v.impact === 'critical').map((v) => `${v.id}: ${v.help}`)).toEqual([]);
  });

  test("a viewer sees their namespace's Dot and is offered no write", async ({ page }) => {
    await signInWithToken(page, people.viv.token);
    await expect(page.getByTestId('signed-in')).toContainText('viv · team');
    const rail = page.getByTestId('rail-dots');
    await expect(rail.getByRole('link', { name: /shared/ })).toBeVisible();
    await expect(rail.getByRole('link', { name: /hidden/ })).toHaveCount(0);
    await expect(page.getByRole('link', { name: '+ New Dot' })).toHaveCount(0);
    await expect(page.getByRole('link', { name: 'Settings' })).toHaveCount(0);
    await expect(page.getByRole('link', { name: 'Create a Dot' })).toHaveCount(0);
    // The host's readiness is the owner's: not shown to a person of one namespace.
    await expect(page.getByText('This computer is not ready')).toHaveCount(0);

    await page.goto(`${h.url}/dots/team/shared/chat`);
    await expect(page.getByTestId('chat-read-only')).toContainText('needs the editor role in namespace team');
    await expect(page.getByRole('textbox', { name: 'Message to shared' })).toHaveCount(0);
    await expect(page.getByRole('button', { name: 'Start the computer' })).toHaveCount(0);
    await page.goto(`${h.url}/dots/team/shared/tasks`);
    await expect(page.getByRole('button', { name: 'New task' })).toHaveCount(0);
    await page.goto(`${h.url}/dots/team/shared/settings`);
    await expect(page.getByTestId('settings-read-only')).toBeVisible();
    await expect(page.getByRole('button', { name: /Delete/ })).toHaveCount(0);

    // What the page does not offer, the API refuses, and says which role it needs.
    const write = await page.evaluate(async (path) => {
      const res = await fetch(path, { method: 'POST', headers: { 'Content-Type': 'application/json' }, body: JSON.stringify({ text: 'hi' }) });
      return { status: res.status, body: await res.text() };
    }, '/dots/v1/namespaces/team/dots/shared/messages');
    expect(write.status).toBe(403);
    // Another namespace is not seen at all.
    const other = await page.evaluate(async (path) => (await fetch(path)).status, `${GROUP}/namespaces/other/dots/hidden`);
    expect(other).toBe(403);
  });

  test("an editor's write lands", async ({ page }) => {
    await page.goto(h.url);
    await page.getByLabel('or a kubeconfig file').setInputFiles(people.eddie.kubeconfig);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await expect(page.getByTestId('signed-in')).toContainText('eddie · team');
    await expect(page.getByRole('link', { name: '+ New Dot' })).toBeVisible();
    await expect(page.getByTestId('rail-dots').getByRole('link', { name: /hidden/ })).toHaveCount(0);

    await page.goto(`${h.url}/dots/team/shared/chat`);
    const box = page.getByRole('textbox', { name: 'Message to shared' });
    await box.fill('hello from eddie');
    await box.press('Enter');
    await expect(page.getByText('hello from eddie')).toBeVisible();
    // The message is in the Dot's log (the page shows it as it is sent, before the server has it).
    await expect
      .poll(async () => (await adminCallOn(h, 'GET', '/dots/v1/namespaces/team/dots/shared/events', undefined)).text, { timeout: 15_000 })
      .toContain('hello from eddie');
  });

  test('a sign-out ends the session: its cookie is refused after it', async ({ page, context }) => {
    await signInWithToken(page, people.eddie.token);
    const cookie = await sessionCookie(context);
    expect(cookie?.httpOnly).toBe(true);
    expect(cookie?.sameSite).toBe('Strict');
    await page.getByRole('button', { name: 'Sign out' }).click();
    await expect(page.getByRole('heading', { name: 'Sign in to Dots' })).toBeVisible();
    const res = await fetch(`${h.url}${GROUP}/namespaces/team/dots`, { headers: { Cookie: `dots-session=${cookie!.value}` } });
    expect(res.status).toBe(401);
    expect((await res.json()).message).toContain('sign in again');
  });

  test('a forged cookie is refused', async ({ page, context }) => {
    await context.addCookies([{ name: 'dots-session', value: 'A'.repeat(43), url: h.url }]);
    await page.goto(h.url);
    await expect(page.getByRole('heading', { name: 'Sign in to Dots' })).toBeVisible();
    const res = await fetch(`${h.url}${GROUP}/namespaces/team/dots`, { headers: { Cookie: `dots-session=${'A'.repeat(43)}` } });
    expect(res.status).toBe(401);
  });
});
