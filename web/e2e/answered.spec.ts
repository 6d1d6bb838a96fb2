import { expect, test } from '@playwright/test';
import { applyDot, askApproval, getApproval, harness } from './harness';

const GROUP = '/apis/dots.invisible.dev/v1alpha1';

// Ref 9.6: the host answers 409 already_resolved to the second answer; the
// card says the approval was answered somewhere else.
test('an approval answered somewhere else while the card answers it says so, and keeps the first answer', async ({ page }) => {
  await applyDot('elsewhere-dot');
  await askApproval('elsewhere-a1', 'elsewhere-dot');
  await page.goto(harness().url + '/inbox?dot=default%2Felsewhere-dot');
  const card = page.locator('[data-card]', { hasText: 'elsewhere-dot' });
  await expect(card).toHaveCount(1);
  // The command line (or kubectl) answers while this page's answer is on
  // its way; the page's write then reaches the API server second.
  await page.route('**/approvals/elsewhere-a1', async (route) => {
    if (route.request().method() === 'PATCH') {
      const res = await fetch(`${harness().url}${GROUP}/namespaces/default/approvals/elsewhere-a1`, {
        method: 'PATCH',
        headers: { 'Content-Type': 'application/merge-patch+json' },
        body: JSON.stringify({ spec: { decision: 'reject', note: 'not now' } }),
      });
      expect(res.status).toBe(200);
      // The same decision from this page would be no change to the API
      // server: the page writes over the version it read.
      const again = await fetch(route.request().url(), { method: 'PATCH', headers: route.request().headers(), body: route.request().postData() });
      expect(again.status).toBe(409);
      expect((await again.json()).message).toMatch(/^already_resolved: Approval default\/elsewhere-a1 was already answered elsewhere: reject/);
    }
    await route.continue();
  });
  await card.getByRole('button', { name: 'Allow once' }).click();
  await expect(page.getByTestId('approvals')).toContainText('answered somewhere else');
  await expect(page.getByTestId('answered-receipt')).toContainText('denied (answered somewhere else)');
  expect((await getApproval('elsewhere-a1')).spec).toMatchObject({ decision: 'reject', note: 'not now' });
});

test("an approval answered on this page is the page's own receipt", async ({ page }) => {
  await applyDot('here-dot');
  await askApproval('here-a1', 'here-dot');
  await page.goto(harness().url + '/inbox?dot=default%2Fhere-dot');
  await page.locator('[data-card]', { hasText: 'here-dot' }).getByRole('button', { name: 'Allow once' }).click();
  await expect(page.getByTestId('answered-receipt')).toHaveText(/allowed once$/);
  expect((await getApproval('here-a1')).spec.decision).toBe('approve');
});
