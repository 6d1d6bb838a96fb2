import { expect, test, type Page } from '@playwright/test';
import { applyDot, guestSays, harness } from './harness';

test('Home lists an applied Dot, live', async ({ page }) => {
  await page.goto(harness().url + '/');
  await expect(page.getByRole('heading', { name: 'Home' })).toBeVisible();
  // Applied after the page loaded: the watch brings it.
  await applyDot('home-dot');
  const card = page.locator('[data-testid=dot-card][data-dot="default/home-dot"]');
  await expect(card).toBeVisible();
  await expect(card).toContainText('z-ai/glm-5.3-flash');
  await expect(card.getByRole('link', { name: 'Open chat' })).toBeVisible();
  await expect(page.getByTestId('rail-dots').getByRole('link', { name: 'home-dot' })).toBeVisible();
  await page.screenshot({ path: test.info().outputPath('home.png'), fullPage: true });
});

test('Chat posts a message and shows it logged', async ({ page }) => {
  await applyDot('chat-dot');
  await page.goto(harness().url + '/dots/default/chat-dot/chat');
  const box = page.getByLabel('Message to chat-dot');
  await box.fill('Find me the cheapest fare to Lisbon');
  await box.press('Enter');
  // The logged message (it has an event id) takes the typed one's place.
  const logged = page.locator('[data-testid=message-user][data-event-id]', { hasText: 'cheapest fare to Lisbon' });
  await expect(logged).toBeVisible();
  await expect(page.getByTestId('message-pending')).toHaveCount(0);
  // The computer cannot start on this host: the page says it is waking up.
  await expect(page.getByTestId('chat-status')).toContainText('Waking up');
  // After a reload it comes from GET .../messages.
  await page.reload();
  await expect(logged).toBeVisible();
  await expect(box).toHaveValue('');
});

/**
 * Lets the page's message POST to the Dot reach the server, which logs the
 * message (logged resolves then), and holds its answer until release().
 */
async function holdMessagePost(page: Page, dot: string) {
  let release = () => {};
  const released = new Promise<void>((r) => (release = r));
  let taken = () => {};
  const logged = new Promise<void>((r) => (taken = r));
  await page.route(`**/dots/v1/namespaces/default/dots/${dot}/messages`, async (route) => {
    if (route.request().method() !== 'POST') return route.continue();
    const response = await route.fetch();
    taken();
    await released;
    await route.fulfill({ response });
  });
  return { logged, release };
}

test("a sent message shows once when the stream brings the logged one before the POST's answer", async ({ page }) => {
  await applyDot('twin-dot');
  // The POST reaches the server, which logs the message; its answer is held
  // until the stream has brought the logged message to the page.
  const post = await holdMessagePost(page, 'twin-dot');
  await page.goto(harness().url + '/dots/default/twin-dot/chat');
  const box = page.getByLabel('Message to twin-dot');
  await box.fill('say this once');
  await box.press('Enter');
  await expect(page.locator('[data-testid=message-user][data-event-id]', { hasText: 'say this once' })).toBeVisible();
  await expect(page.getByText('say this once')).toHaveCount(1);
  await expect(page.getByTestId('message-pending')).toHaveCount(0);
  const answered = page.waitForResponse((r) => r.url().endsWith('/twin-dot/messages') && r.request().method() === 'POST');
  post.release();
  await answered;
  // The answer names the message already shown: still one.
  await expect(page.getByText('say this once')).toHaveCount(1);
});

test('a message logged before the page\'s stream began is shown', async ({ page }) => {
  await applyDot('late-stream-dot');
  // The page's first stream (no event id to resume from) is held until the
  // message is logged, and the POST's answer until the end: the message can
  // come from neither, only from the read the stream's start calls for.
  let openStream = () => {};
  const streamOpened = new Promise<void>((r) => (openStream = r));
  await page.route('**/web/v1/live?**', async (route) => {
    if (!new URL(route.request().url()).searchParams.has('after')) await streamOpened;
    await route.continue();
  });
  const post = await holdMessagePost(page, 'late-stream-dot');
  await page.goto(harness().url + '/dots/default/late-stream-dot/chat');
  const box = page.getByLabel('Message to late-stream-dot');
  await box.fill('logged in the gap');
  await box.press('Enter');
  await post.logged;
  openStream();
  await expect(page.locator('[data-testid=message-user][data-event-id]', { hasText: 'logged in the gap' })).toBeVisible();
  await expect(page.getByText('logged in the gap')).toHaveCount(1);
  post.release();
});

test('the page works at 375 px', async ({ page }) => {
  await applyDot('narrow-dot');
  await page.setViewportSize({ width: 375, height: 740 });
  await page.goto(harness().url + '/');
  await expect(page.locator('[data-dot="default/narrow-dot"]')).toBeVisible();
  const overflow = await page.evaluate(() => document.documentElement.scrollWidth - window.innerWidth);
  expect(overflow).toBeLessThanOrEqual(0);
});

test('the proxy refuses a cross-site request and never hands out the token', async ({ request }) => {
  const h = harness();
  const refused = await request.get(h.url + '/apis', { headers: { 'Sec-Fetch-Site': 'cross-site' } });
  expect(refused.status()).toBe(403);
  const page = await (await request.get(h.url + '/')).text();
  expect(page).not.toContain('Bearer');
});

test('Chat shows the tool line and the answer as they arrive', async ({ page }) => {
  await applyDot('live-dot');
  await page.goto(harness().url + '/dots/default/live-dot/chat');
  const box = page.getByLabel('Message to live-dot');
  await box.fill('What is in my home directory?');
  await box.press('Enter');
  const asked = page.locator('[data-testid=message-user][data-event-id]', { hasText: 'home directory' });
  await expect(asked).toBeVisible();
  const messageId = `message-${await asked.getAttribute('data-event-id')}`;
  await guestSays('live-dot', [
    { type: 'agent.state', data: { state: 'THINKING' } },
    { type: 'tool.called', data: { tool: 'exec', permission: 'computer.exec', decision: 'allow', ok: true, duration_ms: 120, target: 'ls -la ~' } },
  ]);
  await expect(page.getByTestId('chat-status')).toHaveText('Thinking…');
  await expect(page.getByTestId('tool-line')).toContainText('exec ls -la ~');
  await guestSays('live-dot', [
    { type: 'message.assistant', data: { text: 'Your home holds workspace/ and notes.md.', in_reply_to: messageId } },
    { type: 'agent.state', data: { state: 'IDLE' } },
  ]);
  const answer = page.getByTestId('message-assistant');
  await expect(answer).toHaveText('Your home holds workspace/ and notes.md.');
  await expect(page.getByTestId('chat-status')).toHaveText('');
  // In the log's order: the question, the tool line, the answer.
  const order = await page.locator('[data-testid=thread] [data-testid]').evaluateAll((els) => els.map((e) => e.getAttribute('data-testid')));
  expect(order).toEqual(['message-user', 'tool-line', 'message-assistant']);
  // The same thread after a reload, read from the log.
  await page.reload();
  await expect(answer).toBeVisible();
  await expect(page.getByTestId('tool-line')).toHaveCount(1);
});

test('a tab hidden for a while lets its connections go and catches up when shown', async ({ page }) => {
  await applyDot('parked-dot');
  await page.clock.install();
  await page.goto(harness().url + '/dots/default/parked-dot/chat');
  await expect(page.getByText('No messages yet.')).toBeVisible();
  const setVisible = (visible: boolean) =>
    page.evaluate((v) => {
      Object.defineProperty(document, 'visibilityState', { configurable: true, get: () => (v ? 'visible' : 'hidden') });
      document.dispatchEvent(new Event('visibilitychange'));
    }, visible);
  await setVisible(false);
  await page.clock.fastForward(31_000);
  // Sent from elsewhere while this tab holds no stream: not shown yet.
  const res = await fetch(`${harness().url}/dots/v1/namespaces/default/dots/parked-dot/messages`, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ text: 'sent from another tab' }),
  });
  expect(res.status).toBe(202);
  const sent = page.getByTestId('message-user').filter({ hasText: 'sent from another tab' });
  await page.waitForTimeout(1500);
  await expect(sent).toHaveCount(0);
  await setVisible(true);
  await expect(sent).toHaveCount(1);
});

test('more than three tool lines in a row fold into one that opens', async ({ page }) => {
  await applyDot('busy-dot');
  await guestSays(
    'busy-dot',
    ['a', 'b', 'c', 'd'].map((f) => ({
      type: 'tool.called',
      data: { tool: 'read_file', permission: 'files.read', decision: 'allow', ok: true, duration_ms: 5, target: `~/${f}.txt` },
    })),
  );
  await page.goto(harness().url + '/dots/default/busy-dot/chat');
  const folded = page.getByTestId('tool-group');
  await expect(folded).toContainText('4 tool calls: read_file');
  await expect(page.getByTestId('tool-line').first()).toBeHidden();
  await folded.locator('summary').click();
  await expect(page.getByTestId('tool-line')).toHaveCount(4);
  await expect(page.getByTestId('tool-line').nth(3)).toBeVisible();
});

test("the Dot's answer is Markdown, never HTML", async ({ page }) => {
  await applyDot('md-dot');
  const text = [
    '# Fares',
    'The **cheapest** is *TAP* at `€89`, see [the offer](https://example.com/offer) or https://example.org/x.',
    '',
    '- one',
    '- two',
    '',
    '<img src=x onerror="window.pwned=1"><script>window.pwned=2</script>',
    '[click](javascript:window.pwned=3)',
    '',
    '```sh',
    'ls -la ~',
    '```',
  ].join('\n');
  await guestSays('md-dot', [{ type: 'message.assistant', data: { text } }]);
  await page.goto(harness().url + '/dots/default/md-dot/chat');
  const answer = page.getByTestId('message-assistant');
  await expect(answer.locator('strong')).toHaveText('cheapest');
  await expect(answer.locator('em')).toHaveText('TAP');
  await expect(answer.locator('code').first()).toHaveText('€89');
  const offer = answer.getByRole('link', { name: 'the offer' });
  await expect(offer).toHaveAttribute('href', 'https://example.com/offer');
  await expect(offer).toHaveAttribute('target', '_blank');
  await expect(offer).toHaveAttribute('rel', 'noopener noreferrer');
  await expect(answer.getByRole('link', { name: 'https://example.org/x' })).toBeVisible();
  await expect(answer.locator('li')).toHaveText(['one', 'two']);
  // Raw HTML is text, and a javascript: link is no link.
  await expect(answer).toContainText('<img src=x onerror="window.pwned=1"><script>');
  await expect(answer.locator('img, script')).toHaveCount(0);
  await expect(answer.getByRole('link', { name: 'click' })).toHaveCount(0);
  expect(await page.evaluate(() => (window as any).pwned)).toBeUndefined();
  await expect(answer.locator('pre')).toHaveText('ls -la ~');
  await expect(answer.getByRole('button', { name: 'Copy' })).toBeVisible();
});

test("Home shows what this computer lacks, with the commands, and a Dot's spend today", async ({ page }) => {
  await applyDot('spend-dot');
  await guestSays('spend-dot', [{ type: 'message.assistant', data: { text: 'Done.', spent_usd: 0.25 } }]);
  await page.goto(harness().url + '/');
  await expect(page.locator('[data-dot="default/spend-dot"]').getByTestId('spent-today')).toHaveText('$0.25');
  // The harness's host has no QEMU and no key stored.
  const checklist = page.getByTestId('setup-checklist');
  await expect(checklist).toBeVisible();
  await expect(checklist.getByTestId('setup-row').filter({ hasText: 'qemu' }).first()).toContainText('apt-get install');
  await expect(checklist.getByTestId('setup-row').filter({ hasText: 'OpenRouter key' })).toContainText('invisible-dots secret openrouter');
  // Live: a new answer's spend is read again for its own Dot.
  await guestSays('spend-dot', [{ type: 'message.assistant', data: { text: 'Again.', spent_usd: 0.5 } }]);
  await expect(page.locator('[data-dot="default/spend-dot"]').getByTestId('spent-today')).toHaveText('$0.75');
});
