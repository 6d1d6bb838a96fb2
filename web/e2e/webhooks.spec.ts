// A Dot's Webhooks on its Channels page, against the real server: a
// Webhook applied as kubectl would, its counts as the listener writes them
// (its status), shown in a row; another Dot's Webhook is not. The page
// never reads the Webhook's Secret.
import AxeBuilder from '@axe-core/playwright';
import { expect, test } from '@playwright/test';
import { applyDot, harness } from './harness';

const GROUP = '/apis/dots.invisible.dev/v1alpha1';

async function call(method: string, path: string, body: unknown, contentType = 'application/json') {
  const res = await fetch(harness().url + path, { method, headers: { 'Content-Type': contentType }, body: JSON.stringify(body) });
  if (!res.ok) throw new Error(`${method} ${path}: ${res.status} ${await res.text()}`);
  return res.json();
}

async function applyWebhook(name: string, dot: string, signature: string) {
  await call('POST', `${GROUP}/namespaces/default/webhooks`, {
    apiVersion: 'dots.invisible.dev/v1alpha1',
    kind: 'Webhook',
    metadata: { name, namespace: 'default' },
    spec: { dotName: dot, signature, secretRef: { name: `${name}-webhook` }, task: { description: 'Look at {{.title}}' } },
  });
}

test("a Dot's Channels page lists its webhooks with their deliveries", async ({ page }) => {
  await applyDot('hooked-dot');
  await applyDot('other-dot');
  await applyWebhook('ci-red', 'hooked-dot', 'github');
  await applyWebhook('form', 'hooked-dot', 'token');
  await applyWebhook('not-mine', 'other-dot', 'standard');
  await call(
    'PATCH',
    `${GROUP}/namespaces/default/webhooks/ci-red/status`,
    { status: { accepted: 3, duplicates: 1, refused: 2, lastDeliveryTime: new Date().toISOString().replace(/\.\d+Z$/, 'Z'), lastError: 'the signature does not match the secret' } },
    'application/merge-patch+json',
  );
  await call('PATCH', `${GROUP}/namespaces/default/webhooks/form`, { spec: { paused: true } }, 'application/merge-patch+json');

  const secrets: string[] = [];
  page.on('request', (r) => r.url().includes('/secrets') && secrets.push(r.url()));
  await page.goto(harness().url + '/dots/default/hooked-dot/channels');
  const rows = page.getByTestId('webhooks').getByTestId('webhook-row');
  await expect(rows).toHaveCount(2);
  const ci = rows.filter({ hasText: 'ci-red' });
  await expect(ci).toContainText('GitHub');
  await expect(ci).toContainText('just now');
  await expect(ci).toContainText('last refused: the signature does not match the secret');
  await expect(ci.locator('td.tabular-nums')).toHaveText(['3', '1', '2']);
  const form = rows.filter({ hasText: 'form' });
  await expect(form).toContainText('paused');
  await expect(form).toContainText('bearer token');
  await expect(form).toContainText('none yet');
  await expect(page.getByTestId('webhooks')).not.toContainText('not-mine');
  expect(secrets).toEqual([]);

  const { violations } = await new AxeBuilder({ page }).include('[data-testid="webhooks"]').analyze();
  expect(violations.filter((v) => v.impact === 'serious' || v.impact === 'critical').map((v) => v.id)).toEqual([]);
});
