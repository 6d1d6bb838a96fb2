// The Channels page's WhatsApp view. The shared server runs no WhatsApp (an
// opt-in program, off unless INVISIBLE_DOTS_WHATSAPP=1, which would reach
// WhatsApp's network for its codes), so the two answers only a server
// running it gives are faked at the browser's edge: the channel kinds naming
// WhatsApp, and the link stream's frames (a code, then failed or linked).
// Everything else is the real server: the Channel made as kubectl makes it,
// its controller's status (WhatsApp is off here, so it says so), the watch,
// the deletion and the refused add of Link again, and the pause that Cancel
// writes.
import AxeBuilder from '@axe-core/playwright';
import { expect, test, type Page } from '@playwright/test';
import { adminCallOn, applyDot, getResource, halt, harness, launch, type Harness } from './harness';
import { FAKE_NUMBER, fakeWhatsAppProgram } from './fake-whatsapp-program';

const GROUP = '/apis/dots.invisible.dev/v1alpha1';

/** The server's answers that only a server running WhatsApp gives, faked at the browser's edge. */
async function fakeWhatsAppServer(page: Page, dot: string, streams: string[][]) {
  const base = `**/dots/v1/namespaces/default/dots/${dot}/channels`;
  await page.route(base, (route) =>
    route.request().method() === 'GET'
      ? route.fulfill({
          json: {
            dot,
            available: [
              { type: 'telegram', name: 'Telegram', linked_by: 'token' },
              { type: 'whatsapp', name: 'WhatsApp', linked_by: 'code' },
            ],
          },
        })
      : route.fallback(),
  );
  let n = 0;
  await page.route(`${base}/${dot}-whatsapp/link`, (route) =>
    route.fulfill({
      status: 200,
      headers: { 'Content-Type': 'text/event-stream', 'Cache-Control': 'no-store' },
      body: (streams[n++] ?? []).map((f) => `data: ${f}\n\n`).join(''),
    }),
  );
}

// The Channels made here go, so no later test finds them (in the Inbox's count, say).
test.afterEach(async () => {
  for (const name of ['whatsapp-scan-whatsapp', 'whatsapp-again-whatsapp', 'whatsapp-cancel-whatsapp']) await adminCallOn(harness(), 'DELETE', `${GROUP}/namespaces/default/channels/${name}`, undefined);
});

async function makeWhatsAppChannel(dot: string) {
  const made = await adminCallOn(harness(), 'POST', `${GROUP}/namespaces/default/channels`, {
    apiVersion: 'dots.invisible.dev/v1alpha1',
    kind: 'Channel',
    metadata: { name: `${dot}-whatsapp`, namespace: 'default' },
    spec: { dotName: dot, type: 'whatsapp' },
  });
  expect(made.status, made.text).toBe(201);
}

test('WhatsApp: the risk is said first, and a link is followed until the phone linked it', async ({ page }) => {
  await applyDot('whatsapp-scan');
  await fakeWhatsAppServer(page, 'whatsapp-scan', [['{"code":"2@first-code"}', '{"linked":"+15551234567"}']]);
  await page.goto(harness().url + '/dots/default/whatsapp-scan/channels');
  const add = page.getByTestId('add-whatsapp');
  await expect(add.getByTestId('whatsapp-risk')).toContainText('This is not an official way to use WhatsApp');
  await expect(add.getByTestId('whatsapp-risk')).toContainText('WhatsApp can restrict or ban the number');
  await expect(page.getByTestId('add-telegram')).toBeVisible();

  // Made as kubectl makes it: the page follows its link at once.
  await makeWhatsAppChannel('whatsapp-scan');
  const c = page.locator('[data-testid=channel][data-channel="whatsapp-scan-whatsapp"]');
  await expect(c.getByTestId('scan-link').getByTestId('link-linked')).toHaveText('Linked to +15551234567. Now pair a chat.');
  await expect(page.getByTestId('add-whatsapp')).toHaveCount(0);
  expect((await new AxeBuilder({ page }).analyze()).violations.filter((v) => v.impact === 'serious' || v.impact === 'critical')).toEqual([]);
  await page.screenshot({ path: test.info().outputPath('channels-whatsapp.png'), fullPage: true });
});

test('WhatsApp: a link that failed says why, and Link again makes a new one (refused in words by a server without WhatsApp)', async ({ page }) => {
  await applyDot('whatsapp-again');
  await fakeWhatsAppServer(page, 'whatsapp-again', [['{"code":"2@first-code"}', '{"failed":"the code ran out before it was scanned"}']]);
  await makeWhatsAppChannel('whatsapp-again');
  await page.goto(harness().url + '/dots/default/whatsapp-again/channels');
  const c = page.locator('[data-testid=channel][data-channel="whatsapp-again-whatsapp"]');
  const failed = c.getByTestId('link-failed');
  await expect(failed).toContainText('The link did not finish: the code ran out before it was scanned');
  // Nothing linked and nobody paired: no question. The old Channel goes,
  // and the new one is this server's to refuse.
  await failed.getByRole('button', { name: 'Link again' }).click();
  await expect(page.getByTestId('relink')).toContainText('This server does not run WhatsApp. WhatsApp is off on this server');
  await expect(c).toHaveCount(0);
  expect((await adminCallOn(harness(), 'GET', `${GROUP}/namespaces/default/channels/whatsapp-again-whatsapp`, undefined)).status).toBe(404);
});

test('WhatsApp: Cancel pauses a Channel the page did not make, and deletes nothing', async ({ page }) => {
  await applyDot('whatsapp-cancel');
  // A link that never sends a code: the page waits for it.
  await fakeWhatsAppServer(page, 'whatsapp-cancel', []);
  await page.route('**/dots/v1/namespaces/default/dots/whatsapp-cancel/channels/whatsapp-cancel-whatsapp/link', () => undefined);
  await makeWhatsAppChannel('whatsapp-cancel');
  await page.goto(harness().url + '/dots/default/whatsapp-cancel/channels');
  const c = page.locator('[data-testid=channel][data-channel="whatsapp-cancel-whatsapp"]');
  await expect(c.getByTestId('scan-link')).toContainText('Waiting for WhatsApp’s code…');
  await c.getByRole('button', { name: 'Cancel' }).click();
  await expect(c.getByRole('button', { name: 'Resume' })).toBeVisible();
  expect((await getResource('channels', 'whatsapp-cancel-whatsapp')).spec.enabled).toBe(false);
});

// The whole link on a server of its own that runs WhatsApp: the real kinds,
// add, link stream, status and pairing, with FakeWhatsAppProgram in the
// place of the opt-in program (WhatsApp's network is never reached).
test.describe('WhatsApp on a server that runs it', () => {
  test.describe.configure({ mode: 'serial' });
  let h: Harness;
  const wa = fakeWhatsAppProgram();

  test.beforeAll(async () => {
    test.setTimeout(180_000);
    h = await launch({ env: { INVISIBLE_DOTS_WHATSAPP: '1', INVISIBLE_DOTS_WHATSAPP_PROGRAM: wa.program, FAKE_WHATSAPP_DIR: wa.dir } });
    const res = await adminCallOn(h, 'POST', `${GROUP}/namespaces/default/dots`, {
      apiVersion: 'dots.invisible.dev/v1alpha1',
      kind: 'Dot',
      metadata: { name: 'phone', namespace: 'default' },
      spec: { model: { provider: 'openrouter', id: 'z-ai/glm-5.3-flash' } },
    });
    if (res.status !== 201) throw new Error(`apply Dot phone: ${res.status} ${res.text}`);
  });

  test.afterAll(async () => {
    if (h) await halt(h);
  });

  test('Link WhatsApp shows the code as a QR, ends linked with the number, and pairs a person who sends the words', async ({ page }) => {
    await page.goto(`${h.url}/dots/default/phone/channels`);
    const add = page.getByTestId('add-whatsapp');
    await expect(add.getByTestId('whatsapp-risk')).toContainText('This is not an official way to use WhatsApp');
    await add.getByRole('button', { name: 'Link WhatsApp' }).click();
    const c = page.locator('[data-testid=channel][data-channel="phone-whatsapp"]');
    const qr = c.getByTestId('link-qr');
    await expect(qr).toBeVisible();
    expect((await qr.locator('path').getAttribute('d'))!.length).toBeGreaterThan(500);
    // The code is never written into the page's words or its address.
    await expect(page.locator('body')).not.toContainText('fake-link-code');
    expect(page.url()).not.toContain('fake-link-code');
    await page.screenshot({ path: test.info().outputPath('whatsapp-code.png'), fullPage: true });

    wa.scan();
    await expect(c.getByTestId('channel-account')).toHaveText(FAKE_NUMBER.name);
    await expect(c.getByTestId('channel-state')).toHaveText('Connected');
    await expect(c.getByTestId('scan-link')).toHaveCount(0);

    await c.getByRole('button', { name: 'Pair a chat' }).click();
    const words = (await c.getByTestId('pairing-words').textContent())!;
    const code = /^pair (\S+)$/.exec(words)?.[1];
    expect(code, `the words to send: ${words}`).toBeTruthy();
    // The link opens the chat with the number, the words ready to send.
    const link = new URL((await c.getByTestId('pairing-link').getAttribute('href'))!);
    expect(`${link.origin}${link.pathname}`).toBe(`https://wa.me/${FAKE_NUMBER.id}`);
    expect(link.searchParams.get('text')).toBe(words);
    await expect(c.getByTestId('pairing-qr')).toBeVisible();
    wa.personSays({ peer: '4915112345678', label: 'Ada', text: words });
    await expect(c.getByTestId('people').locator('[data-person="4915112345678"]')).toContainText('Ada');
    await expect(c.getByTestId('paired')).toContainText('paired: they can talk to phone from WhatsApp now');
    expect((await new AxeBuilder({ page }).analyze()).violations.filter((v) => v.impact === 'serious' || v.impact === 'critical')).toEqual([]);
  });

  test('a device logged out on the phone: the Inbox lists it, and Link again asks, then makes a new link', async ({ page }) => {
    wa.logout();
    await page.goto(`${h.url}/inbox`);
    const row = page.getByTestId('relink-channels').locator('[data-channel="phone-whatsapp"]');
    await expect(row).toContainText('needs linking again');
    await row.getByRole('link', { name: "phone's WhatsApp" }).click();
    const c = page.locator('[data-testid=channel][data-channel="phone-whatsapp"]');
    await expect(c.getByTestId('channel-state')).toHaveText('Needs linking again');
    const scan = c.getByTestId('scan-link');
    await scan.getByRole('button', { name: 'Link again' }).click();
    const ask = scan.getByRole('group', { name: 'Link again' });
    await expect(ask).toContainText('Link WhatsApp again? This link is removed with the person paired, and a new one is made: scan its code, then pair the people again.');
    await ask.getByRole('button', { name: 'Link again' }).click();
    // The new Channel, of the same name, shows its code; the phone scans it.
    await expect(c.getByTestId('link-qr')).toBeVisible({ timeout: 60_000 });
    await expect(c.getByText('Nobody yet')).toBeVisible();
    wa.scan();
    await expect(c.getByTestId('channel-state')).toHaveText('Connected');
    await expect(c.getByTestId('channel-account')).toHaveText(FAKE_NUMBER.name);
    await expect(page.getByTestId('inbox-count')).toHaveText('0');
  });
});
