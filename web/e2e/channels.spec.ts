// A Dot's Channels page against the real server, whose Telegram adapter
// talks to FakeBotApi (the one fake, at Telegram's edge). A server of its
// own, with people's sign-in: an editor links a bot (a wrong token refused in
// words, a good one connected with the bot's name), pairs a chat (the words,
// the link and its QR; the fake's person sends the code and appears), flips a
// setting, pauses, gives a new token when Telegram refuses the old one (the
// Inbox lists the Channel until then), unpairs and unlinks, each behind its
// question; a viewer sees it all with no control. No token is ever in an
// address, on the page or in the server's log.
import AxeBuilder from '@axe-core/playwright';
import { expect, test, type Page } from '@playwright/test';
import { spawnSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { adminCallOn, halt, launch, type Harness } from './harness';
import { FakeBotApi } from './fake-bot-api';

const GROUP = '/apis/dots.invisible.dev/v1alpha1';
const NS = 'team';
const DOT = 'talker';
const BOT = { id: 7001, username: 'fake_dots_bot' };
const GOOD = '7001:AAfake-good-token-of-the-bot';
// The token @BotFather gives the same bot after the first was revoked.
const RENEWED = '7001:AAfake-renewed-token-of-the-bot';
const WRONG = '7001:AAfake-wrong-token';
const NO_TELEGRAM = '7001:AAfake-token-telegram-never-answers';
// A token of another bot: a Channel keeps its bot.
const OTHER_BOT = '7002:AAfake-token-of-another-bot';
const ADA = { id: 424242, first_name: 'Ada' };
const GRACE = { id: 515151, first_name: 'Grace' };

let h: Harness;
let bot: FakeBotApi;
const tokens: Record<string, string> = {};
// Every address the browser asked for, across the tests: none holds a token.
const addresses: string[] = [];

function userAdd(name: string, role: string) {
  const kubeconfig = join(h.home, `${name}.kubeconfig`);
  const run = spawnSync(process.env.INVISIBLE_DOTS_BIN!, ['user', 'add', name, '--namespace', NS, '--role', role, '--output', kubeconfig], {
    env: { PATH: process.env.PATH, HOME: process.env.HOME, INVISIBLE_DOTS_HOME: h.home },
    encoding: 'utf8',
    timeout: 60_000,
  });
  if (run.status !== 0) throw new Error(`user add ${name}: ${run.stderr}`);
  tokens[name] = /token: (\S+)/.exec(readFileSync(kubeconfig, 'utf8'))![1];
}

async function admin(method: string, path: string, body?: unknown) {
  const res = await adminCallOn(h, method, path, body);
  return { status: res.status, json: res.text ? JSON.parse(res.text) : undefined };
}

async function applyDot(name: string) {
  const res = await adminCallOn(h, 'POST', `${GROUP}/namespaces/${NS}/dots`, {
    apiVersion: 'dots.invisible.dev/v1alpha1',
    kind: 'Dot',
    metadata: { name, namespace: NS },
    spec: { model: { provider: 'openrouter', id: 'z-ai/glm-5.3-flash' } },
  });
  if (res.status !== 201) throw new Error(`apply Dot ${name}: ${res.status} ${res.text}`);
}

const channel = () => admin('GET', `${GROUP}/namespaces/${NS}/channels/${DOT}-telegram`);

async function signIn(page: Page, who: string) {
  page.on('request', (r) => addresses.push(r.url()));
  await page.goto(h.url);
  await page.getByLabel('Token').fill(tokens[who]);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await expect(page.getByTestId('signed-in')).toBeVisible();
}

async function openChannels(page: Page, who = 'eddie', dot = DOT) {
  await signIn(page, who);
  await page.goto(`${h.url}/dots/${NS}/${dot}/chat`);
  await page.getByRole('link', { name: 'Channels', exact: true }).click();
  await expect(page).toHaveURL(new RegExp(`/dots/${NS}/${dot}/channels$`));
  await expect(page.getByRole('heading', { name: 'Channels', level: 2 })).toBeVisible();
}

const card = (page: Page) => page.locator('[data-testid=channel][data-channel="talker-telegram"]');

const serious = async (page: Page) =>
  (await new AxeBuilder({ page }).analyze()).violations
    .filter((v) => v.impact === 'serious' || v.impact === 'critical')
    .map((v) => `${v.id}: ${v.help} (${v.nodes.map((n) => n.target.join(' ')).join(', ')})`);

test.describe('a Dot linked to Telegram', () => {
  test.describe.configure({ mode: 'serial' });

  test.beforeAll(async () => {
    test.setTimeout(180_000);
    bot = await FakeBotApi.start();
    bot.knows(GOOD, BOT);
    bot.knows(RENEWED, BOT);
    bot.knows(NO_TELEGRAM, BOT);
    bot.knows(OTHER_BOT, { id: 7002, username: 'other_fake_bot' });
    bot.dropsCallsOf(NO_TELEGRAM);
    h = await launch({ signIn: true, env: { INVISIBLE_DOTS_TELEGRAM_API: bot.url } });
    const ns = await adminCallOn(h, 'POST', '/api/v1/namespaces', { apiVersion: 'v1', kind: 'Namespace', metadata: { name: NS } });
    if (ns.status !== 201 && ns.status !== 409) throw new Error(`namespace ${NS}: ${ns.status} ${ns.text}`);
    await applyDot(DOT);
    await applyDot('second');
    userAdd('eddie', 'editor');
    userAdd('viv', 'viewer');
  });

  test.afterAll(async () => {
    if (h) {
      // The server never writes a token down, not even one it refused.
      const log = readFileSync(h.log, 'utf8');
      for (const t of [GOOD, RENEWED, WRONG, NO_TELEGRAM, OTHER_BOT]) expect(log, 'the server log holds a token').not.toContain(t.split(':')[1]);
      await halt(h);
    }
    await bot?.close();
    for (const t of [GOOD, RENEWED, WRONG, NO_TELEGRAM, OTHER_BOT]) expect(addresses.filter((a) => a.includes(t.split(':')[1])), 'an address holds a token').toEqual([]);
  });

  test('a wrong token is refused in words, an unreachable Telegram is said, and the good one links the bot', async ({ page }) => {
    await openChannels(page);
    const add = page.getByTestId('add-telegram');
    await expect(add.getByTestId('not-private')).toHaveText(
      'Telegram chats are not end-to-end encrypted: Telegram can read what you and the Dot write there.',
    );
    const field = add.getByLabel("The bot's token");
    await expect(field).toHaveAttribute('type', 'password');

    await field.fill(WRONG);
    await add.getByRole('button', { name: 'Link Telegram' }).click();
    await expect(add.getByTestId('add-error')).toContainText('Telegram does not accept this token. Copy the whole token again from @BotFather');
    // Emptied the moment it was sent, and never shown back.
    await expect(field).toHaveValue('');
    await expect(page.locator('body')).not.toContainText(WRONG);

    await field.fill(NO_TELEGRAM);
    await add.getByRole('button', { name: 'Link Telegram' }).click();
    await expect(add.getByTestId('add-error')).toContainText('Telegram could not be reached from this machine');
    expect((await channel()).status).toBe(404);

    await field.fill(GOOD);
    await add.getByRole('button', { name: 'Link Telegram' }).click();
    const c = card(page);
    await expect(c.getByTestId('channel-account')).toHaveText('@fake_dots_bot');
    // Connected once the hub started the bot: its webhook gone, polling.
    await expect(c.getByTestId('channel-state')).toHaveText('Connected');
    expect(bot.made('deleteWebhook').length).toBeGreaterThan(0);
    expect(bot.made('getUpdates').length).toBeGreaterThan(0);
    await expect(page.getByTestId('add-telegram')).toHaveCount(0);
    await expect(c.getByText('Nobody yet')).toBeVisible();
    await expect(page.locator('body')).not.toContainText(GOOD);
  });

  test('a bot serves one Dot: another Dot is told so in words', async ({ page }) => {
    await openChannels(page, 'eddie', 'second');
    const add = page.getByTestId('add-telegram');
    await add.getByLabel("The bot's token").fill(GOOD);
    await add.getByRole('button', { name: 'Link Telegram' }).click();
    await expect(add.getByTestId('add-error')).toContainText('This bot already serves another Dot, and a bot serves one Dot only.');
    expect((await admin('GET', `${GROUP}/namespaces/${NS}/channels/second-telegram`)).status).toBe(404);
  });

  test('pairing shows the words, the link and its QR, and closes when the person sends the code', async ({ page }) => {
    await openChannels(page);
    const c = card(page);
    await c.getByRole('button', { name: 'Pair a chat' }).click();
    const panel = c.getByTestId('pairing');
    const words = (await panel.getByTestId('pairing-words').textContent())!;
    const code = /^\/start (\S+)$/.exec(words)?.[1];
    expect(code, `the words to send: ${words}`).toBeTruthy();
    const link = panel.getByTestId('pairing-link');
    await expect(link).toHaveAttribute('href', `https://t.me/fake_dots_bot?start=${code}`);
    const qr = panel.getByTestId('pairing-qr');
    await expect(qr).toBeVisible();
    await expect(qr).toHaveAttribute('aria-label', `QR code of the link https://t.me/fake_dots_bot?start=${code}`);
    expect((await qr.locator('path').getAttribute('d'))!.length).toBeGreaterThan(500);
    await expect(panel.getByTestId('pairing-expires')).toContainText(/The code works once, for (10:00|9:\d\d) more/);
    for (const theme of ['light', 'dark']) {
      await page.evaluate((t) => document.documentElement.setAttribute('data-theme', t), theme);
      await page.screenshot({ path: test.info().outputPath(`channels-pairing-${theme}.png`), fullPage: true });
      expect(await serious(page)).toEqual([]);
    }
    // The card, the code and the link fit a phone's width.
    await page.setViewportSize({ width: 375, height: 740 });
    await expect(qr).toBeVisible();
    expect(await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth)).toBeLessThanOrEqual(0);
    expect(await panel.evaluate((el) => el.getBoundingClientRect().right <= window.innerWidth)).toBe(true);
    await page.screenshot({ path: test.info().outputPath('channels-pairing-375.png'), fullPage: true });

    // Ada sends the words to the bot: the hub pairs her, the list shows her.
    bot.personSays(ADA, words);
    await expect(c.getByTestId('people').locator(`[data-person="${ADA.id}"]`)).toContainText('Ada');
    await expect(panel).toHaveCount(0);
    await expect(c.getByTestId('paired')).toContainText('paired: they can talk to talker from Telegram now');
  });

  test('a code nobody sent runs out: the panel says so and offers a new one', async ({ page }) => {
    await page.clock.install();
    await openChannels(page);
    const c = card(page);
    await c.getByRole('button', { name: 'Pair a chat' }).click();
    const panel = c.getByTestId('pairing');
    const first = await panel.getByTestId('pairing-words').textContent();
    await page.clock.fastForward('10:01');
    await expect(panel.getByTestId('pairing-expired')).toHaveText('The code expired before anyone sent it.');
    await expect(panel.getByTestId('pairing-qr')).toHaveCount(0);
    await panel.getByRole('button', { name: 'New code' }).click();
    await expect(panel.getByTestId('pairing-words')).not.toHaveText(first!);
    await panel.getByRole('button', { name: 'Close' }).click();
    await expect(panel).toHaveCount(0);
  });

  test('a setting flipped is saved as the Channel spec says', async ({ page }) => {
    await openChannels(page);
    const c = card(page);
    const notify = c.getByRole('switch', { name: 'Tell me when a task ends' });
    await expect(notify).toBeChecked();
    await notify.click();
    await expect(notify).not.toBeChecked();
    await expect.poll(async () => (await channel()).json.spec.settings.notifyTasks).toBe(false);
    await page.reload();
    await expect(card(page).getByRole('switch', { name: 'Tell me when a task ends' })).not.toBeChecked();
    await expect(card(page).getByRole('switch', { name: 'Ask for approvals here' })).toBeChecked();
  });

  test('Pause stops the link and Resume starts it again', async ({ page }) => {
    await openChannels(page);
    const c = card(page);
    await c.getByRole('button', { name: 'Pause' }).click();
    await expect(c.getByTestId('channel-state')).toHaveText('Paused');
    await expect(c.getByText('Paused: nothing is read from Telegram or sent there.')).toBeVisible();
    await expect(c.getByRole('button', { name: 'Pair a chat' })).toHaveCount(0);
    expect((await channel()).json.spec.enabled).toBe(false);
    await c.getByRole('button', { name: 'Resume' }).click();
    await expect(c.getByTestId('channel-state')).toHaveText('Connected');
  });

  test('a token Telegram refuses: the Inbox lists the Channel, and a new token brings it back with its people', async ({ page }) => {
    await signIn(page, 'eddie');
    bot.revoke(GOOD);
    await page.goto(`${h.url}/inbox`);
    const row = page.getByTestId('relink-channels').locator('[data-channel="talker-telegram"]');
    await expect(row).toContainText("talker's Telegram");
    await expect(row).toContainText('needs a new token');
    await expect(page.getByRole('heading', { name: 'Channels to link again' })).toBeVisible();
    await expect(page.getByTestId('inbox-count')).toHaveText('1');
    expect(await serious(page)).toEqual([]);
    await row.getByRole('link', { name: "talker's Telegram" }).click();
    await expect(page).toHaveURL(new RegExp(`/dots/${NS}/${DOT}/channels$`));
    const c = card(page);
    await expect(c.getByTestId('channel-state')).toHaveText('Needs a new token');
    const box = c.getByTestId('needs-token');
    await expect(box).toContainText('Telegram needs a new token');
    await box.getByLabel("The bot's new token").fill(WRONG);
    await box.getByRole('button', { name: 'Use this token' }).click();
    await expect(box.getByTestId('token-error')).toContainText('Telegram does not accept this token');
    await box.getByLabel("The bot's new token").fill(OTHER_BOT);
    await box.getByRole('button', { name: 'Use this token' }).click();
    await expect(box.getByTestId('token-error')).toContainText("this token is another bot's (@other_fake_bot, not @fake_dots_bot)");
    await box.getByLabel("The bot's new token").fill(RENEWED);
    await box.getByRole('button', { name: 'Use this token' }).click();
    await expect(c.getByTestId('channel-state')).toHaveText('Connected');
    await expect(c.getByTestId('people').locator(`[data-person="${ADA.id}"]`)).toBeVisible();
    await expect(page.getByTestId('inbox-count')).toHaveText('0');
  });

  test('a viewer sees the Channel, its bot and its people, and no control', async ({ page }) => {
    await openChannels(page, 'viv');
    const c = card(page);
    await expect(c.getByTestId('channel-account')).toHaveText('@fake_dots_bot');
    await expect(c.getByTestId('people')).toContainText('Ada');
    await expect(c.getByRole('switch', { name: 'Ask for approvals here' })).toBeDisabled();
    await expect(c.getByText('Changing these needs the editor role in namespace team.')).toBeVisible();
    for (const name of ['Pair a chat', 'Pause', 'Unlink Telegram', 'Unpair', 'New token…'])
      await expect(page.getByRole('button', { name }), name).toHaveCount(0);
    await expect(page.locator('input[type=password]')).toHaveCount(0);
  });

  test('Unpair asks first, then the person is gone', async ({ page }) => {
    await openChannels(page);
    const c = card(page);
    const ada = c.getByTestId('people').locator(`[data-person="${ADA.id}"]`);
    await ada.getByRole('button', { name: 'Unpair' }).click();
    await expect(ada).toContainText('Unpair Ada? They can no longer talk to talker or answer its approvals from Telegram');
    await ada.getByRole('button', { name: 'Unpair' }).click();
    await expect(c.getByTestId('people')).toHaveCount(0);
    await expect(c.getByText('Nobody yet')).toBeVisible();
  });

  test('Unlink asks, saying the people and the pairing go with it, then the Dot has no Telegram', async ({ page }) => {
    await openChannels(page);
    const c = card(page);
    // Grace pairs, so that someone goes with the link.
    await c.getByRole('button', { name: 'Pair a chat' }).click();
    bot.personSays(GRACE, (await c.getByTestId('pairing-words').textContent())!);
    await expect(c.getByTestId('people').locator(`[data-person="${GRACE.id}"]`)).toContainText('Grace');
    await c.getByRole('button', { name: 'Unlink Telegram' }).click();
    const ask = c.getByRole('group', { name: 'Unlink Telegram' });
    await expect(ask).toContainText(
      "Unlink Telegram from talker? The bot's token, the person paired and any pairing code go with it: nobody can talk to talker from Telegram",
    );
    await ask.getByRole('button', { name: 'No' }).click();
    await expect(c.getByTestId('channel-state')).toHaveText('Connected');
    await c.getByRole('button', { name: 'Unlink Telegram' }).click();
    await c.getByRole('group', { name: 'Unlink Telegram' }).getByRole('button', { name: 'Unlink' }).click();
    await expect(card(page)).toHaveCount(0);
    await expect(page.getByTestId('add-telegram')).toBeVisible();
    await expect.poll(async () => (await channel()).status).toBe(404);
  });
});
