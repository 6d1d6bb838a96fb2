// The Channels page's WhatsApp view. This build cannot run WhatsApp (an
// opt-in program, off unless INVISIBLE_DOTS_WHATSAPP=1), so the two answers
// only it gives are faked at the browser's edge: the channel kinds naming
// WhatsApp, and the link stream's frames (a code, then failed or linked).
// Everything else is the real server: the Channel made as kubectl makes it,
// its controller's status (WhatsApp is off here, so it says so), the watch,
// and the pause that Cancel writes.
import AxeBuilder from '@axe-core/playwright';
import { expect, test, type Page } from '@playwright/test';
import { adminCallOn, applyDot, getResource, harness } from './harness';

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
  for (const name of ['whatsapp-scan-whatsapp', 'whatsapp-cancel-whatsapp']) await adminCallOn(harness(), 'DELETE', `${GROUP}/namespaces/default/channels/${name}`, undefined);
});

test('WhatsApp: the risk is said first, a link that fails says why and links again, and ends linked with the number', async ({ page }) => {
  await applyDot('whatsapp-scan');
  await fakeWhatsAppServer(page, 'whatsapp-scan', [
    ['{"code":"2@first-code"}', '{"failed":"the code ran out before it was scanned"}'],
    ['{"code":"2@second-code"}', '{"linked":"+15551234567"}'],
  ]);
  await page.goto(harness().url + '/dots/default/whatsapp-scan/channels');
  const add = page.getByTestId('add-whatsapp');
  await expect(add.getByTestId('whatsapp-risk')).toContainText('This is not an official way to use WhatsApp');
  await expect(add.getByTestId('whatsapp-risk')).toContainText('WhatsApp can restrict or ban the number');
  await expect(page.getByTestId('add-telegram')).toBeVisible();

  // Made as kubectl makes it: the page follows its link at once.
  const made = await adminCallOn(harness(), 'POST', `${GROUP}/namespaces/default/channels`, {
    apiVersion: 'dots.invisible.dev/v1alpha1',
    kind: 'Channel',
    metadata: { name: 'whatsapp-scan-whatsapp', namespace: 'default' },
    spec: { dotName: 'whatsapp-scan', type: 'whatsapp' },
  });
  expect(made.status, made.text).toBe(201);
  const c = page.locator('[data-testid=channel][data-channel="whatsapp-scan-whatsapp"]');
  const scan = c.getByTestId('scan-link');
  await expect(scan.getByTestId('link-failed')).toContainText('The link did not finish: the code ran out before it was scanned');
  await expect(page.getByTestId('add-whatsapp')).toHaveCount(0);
  await scan.getByRole('button', { name: 'Link again' }).click();
  await expect(scan.getByTestId('link-linked')).toHaveText('Linked to +15551234567. Now pair a chat.');
  expect((await new AxeBuilder({ page }).analyze()).violations.filter((v) => v.impact === 'serious' || v.impact === 'critical')).toEqual([]);
  await page.screenshot({ path: test.info().outputPath('channels-whatsapp.png'), fullPage: true });
});

test('WhatsApp: Cancel pauses a Channel the page did not make, and deletes nothing', async ({ page }) => {
  await applyDot('whatsapp-cancel');
  // A link that never sends a code: the page waits for it.
  await fakeWhatsAppServer(page, 'whatsapp-cancel', []);
  await page.route('**/dots/v1/namespaces/default/dots/whatsapp-cancel/channels/whatsapp-cancel-whatsapp/link', () => undefined);
  const made = await adminCallOn(harness(), 'POST', `${GROUP}/namespaces/default/channels`, {
    apiVersion: 'dots.invisible.dev/v1alpha1',
    kind: 'Channel',
    metadata: { name: 'whatsapp-cancel-whatsapp', namespace: 'default' },
    spec: { dotName: 'whatsapp-cancel', type: 'whatsapp' },
  });
  expect(made.status, made.text).toBe(201);
  await page.goto(harness().url + '/dots/default/whatsapp-cancel/channels');
  const c = page.locator('[data-testid=channel][data-channel="whatsapp-cancel-whatsapp"]');
  await expect(c.getByTestId('scan-link')).toContainText('Waiting for WhatsApp’s code…');
  await c.getByRole('button', { name: 'Cancel' }).click();
  await expect(c.getByRole('button', { name: 'Resume' })).toBeVisible();
  expect((await getResource('channels', 'whatsapp-cancel-whatsapp')).spec.enabled).toBe(false);
});
