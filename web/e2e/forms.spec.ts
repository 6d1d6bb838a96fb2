import AxeBuilder from '@axe-core/playwright';
import { expect, test, type Page } from '@playwright/test';
import { applyDot, getResource, guestSays, harness, patchDotSpec, setComputerState } from './harness';

async function noSeriousViolation(page: Page) {
  const { violations } = await new AxeBuilder({ page }).analyze();
  const serious = violations
    .filter((v) => v.impact === 'serious' || v.impact === 'critical')
    .map((v) => `${v.id}: ${v.help} (${v.nodes.map((n) => n.target.join(' ')).join(', ')})`);
  expect(serious).toEqual([]);
}

test("a Dot is created through the form, and a bound the dry run refuses shows on its control", async ({ page }) => {
  await page.goto(harness().url + '/new');
  // The preflight: the harness's host has no QEMU.
  await expect(page.getByTestId('setup-checklist').getByTestId('setup-row').filter({ hasText: 'qemu' }).first()).toBeVisible();
  await page.getByLabel('Name', { exact: true }).fill('formed-dot');
  await page.getByRole('button', { name: /Computer and safety/ }).click();
  const cpu = page.locator('[data-field="spec.computer.cpu"]');
  await cpu.getByRole('spinbutton').fill('100');
  // The API server's OpenAPI bound, on the control it belongs to.
  await expect(cpu.getByTestId('field-error')).toContainText('less than or equal to 16');
  await expect(page.getByRole('button', { name: /Computer and safety \(1 to fix\)/ })).toBeVisible();
  await expect(page.getByRole('button', { name: 'Create formed-dot' })).toBeDisabled();
  // A CEL rule's field path too.
  const memory = page.locator('[data-field="spec.computer.memory"]');
  await memory.getByRole('spinbutton').fill('1');
  await expect(memory.getByTestId('field-error')).toContainText('memory must be between 2Gi and 64Gi');
  await memory.getByRole('spinbutton').fill('8');
  await cpu.getByRole('spinbutton').fill('4');
  await expect(page.getByTestId('field-error').filter({ hasText: /./ })).toHaveCount(0);
  await page.getByLabel('Run commands').selectOption('ask');
  await noSeriousViolation(page);
  await page.screenshot({ path: test.info().outputPath('new-dot.png'), fullPage: true });
  await page.getByRole('button', { name: 'Create formed-dot' }).click();
  await expect(page).toHaveURL(/\/dots\/default\/formed-dot\/chat$/);
  const made = await getResource('dots', 'formed-dot');
  expect(made.spec.computer).toMatchObject({ cpu: 4, memory: '8Gi' });
  expect(made.spec.permissions).toEqual({ 'computer.exec': 'ask' });
});

test('a name another Dot has is refused on the name field', async ({ page }) => {
  await applyDot('taken-dot');
  await page.goto(harness().url + '/new');
  await page.getByLabel('Name', { exact: true }).fill('taken-dot');
  await expect(page.locator('#f-name-err')).toContainText('default already has a Dot named taken-dot');
});

test('a settings save made on a Dot changed elsewhere is caught, and rebased on the change', async ({ page }) => {
  await applyDot('conflict-dot');
  await page.goto(harness().url + '/dots/default/conflict-dot/settings');
  await page.getByLabel('Instructions').fill('Answer in French.');
  await expect(page.getByTestId('review')).toContainText('instructions: not set → Answer in French.');
  // Meanwhile, another tab changes the Dot.
  await patchDotSpec('conflict-dot', { limits: { maxStepsPerTask: 10 } });
  await expect(page.getByTestId('conflict')).toContainText('changed elsewhere');
  await expect(page.getByRole('button', { name: /^Save/ })).toBeDisabled();
  await page.getByRole('button', { name: 'Keep my changes on top of theirs' }).click();
  await expect(page.getByTestId('rebased')).toContainText('limits.maxStepsPerTask');
  await expect(page.getByTestId('review')).toHaveText('instructions: not set → Answer in French.');
  await page.getByRole('button', { name: 'Save 1 change' }).click();
  await expect(page.getByText('Saved.')).toBeVisible();
  const d = await getResource('dots', 'conflict-dot');
  expect(d.spec.instructions).toBe('Answer in French.');
  expect(d.spec.limits.maxStepsPerTask).toBe(10);
});

test('a save that loses the race is refused by the API server, never written over', async ({ page }) => {
  await applyDot('race-dot');
  await page.goto(harness().url + '/dots/default/race-dot/settings');
  await page.getByLabel('Instructions').fill('Be brief.');
  await expect(page.getByTestId('review')).toContainText('Be brief.');
  // The change lands between the dry run and the save: the page's watch has
  // not told it, and the save's resourceVersion is the old one.
  await page.route('**/apis/dots.invisible.dev/v1alpha1/namespaces/default/dots/race-dot?fieldValidation=Strict', async (route) => {
    await patchDotSpec('race-dot', { instructions: 'Be thorough.' });
    await route.continue();
  });
  await page.getByRole('button', { name: 'Save 1 change' }).click();
  await expect(page.getByTestId('conflict')).toBeVisible();
  expect((await getResource('dots', 'race-dot')).spec.instructions).toBe('Be thorough.');
});

test('the YAML is the same draft, and keeps what the form has no control for', async ({ page }) => {
  await applyDot('yaml-dot');
  await page.goto(harness().url + '/dots/default/yaml-dot/settings');
  await page.getByRole('button', { name: 'YAML', exact: true }).click();
  const box = page.getByLabel("The Dot's spec as YAML");
  await expect(box).toHaveValue(/id: z-ai\/glm-5\.3-flash/);
  await box.fill(
    ['model:', '  provider: openrouter', '  id: z-ai/glm-5.3-flash', 'instructions: from the YAML', 'mcpServers:', '  - name: time', '    command: time-mcp'].join('\n'),
  );
  await expect(page.getByTestId('yaml-only')).toContainText('mcpServers');
  await expect(page.getByTestId('review')).toContainText('instructions: not set → from the YAML');
  await page.getByRole('button', { name: 'Form', exact: true }).click();
  await expect(page.getByLabel('Instructions')).toHaveValue('from the YAML');
  await page.getByRole('button', { name: /^Save/ }).click();
  await expect(page.getByText('Saved.')).toBeVisible();
  expect((await getResource('dots', 'yaml-dot')).spec.mcpServers).toEqual([{ name: 'time', command: 'time-mcp' }]);
});

test('the danger zone deletes the Dot once its name is typed', async ({ page }) => {
  await applyDot('doomed-dot');
  await page.goto(harness().url + '/dots/default/doomed-dot/settings');
  const del = page.getByRole('button', { name: 'Delete doomed-dot' });
  await expect(del).toBeDisabled();
  await page.getByLabel('Type doomed-dot to delete it').fill('doomed-do');
  await expect(del).toBeDisabled();
  await page.getByLabel('Type doomed-dot to delete it').fill('doomed-dot');
  await noSeriousViolation(page);
  await del.click();
  await expect(page).toHaveURL(harness().url + '/');
  await expect
    .poll(async () => {
      const res = await fetch(`${harness().url}/apis/dots.invisible.dev/v1alpha1/namespaces/default/dots/doomed-dot`);
      return res.status === 404 || !!(await res.json()).metadata?.deletionTimestamp;
    })
    .toBe(true);
});

test("Always allow changes the Dot's spec, and an edit under way is rebased on it, never undoing it", async ({ page, browser }) => {
  await applyDot('always-spec-dot');
  await page.goto(harness().url + '/dots/default/always-spec-dot/settings');
  await page.getByLabel('Instructions').fill('Plan the week.');
  await expect(page.getByTestId('review')).toContainText('Plan the week.');
  // The Dot asks for a permission whose default is ask; in another tab the
  // person allows it for good.
  await guestSays('always-spec-dot', [
    { type: 'approval.requested', data: { approval_id: 'req-auto-1', tool: 'cron', permission: 'automations', arguments: { schedule: '0 9 * * 1' }, reason: 'weekly plan' } },
  ]);
  // Another browser context, as another person's browser would be.
  const other = await browser.newContext();
  const inbox = await other.newPage();
  await inbox.goto(harness().url + '/inbox');
  const card = inbox.locator('[data-card]', { hasText: 'always-spec-dot' });
  await card.getByRole('button', { name: 'Always allow…' }).click();
  await card.getByRole('button', { name: 'Always allow automations' }).click();
  await expect.poll(async () => (await getResource('dots', 'always-spec-dot')).spec.permissions?.automations).toBe('allow');
  await other.close();

  await expect(page.getByTestId('conflict')).toBeVisible();
  await page.getByRole('button', { name: 'Keep my changes on top of theirs' }).click();
  await expect(page.getByTestId('rebased')).toContainText('permissions.automations');
  await expect(page.getByLabel('Schedule automations')).toHaveValue('allow');
  await page.getByRole('button', { name: 'Save 1 change' }).click();
  await expect(page.getByText('Saved.')).toBeVisible();
  const d = await getResource('dots', 'always-spec-dot');
  expect(d.spec).toMatchObject({ instructions: 'Plan the week.', permissions: { automations: 'allow' } });
});

test("the permission editor shows each permission's tools from the Dot's own table, or why it cannot", async ({ page }) => {
  await applyDot('tools-dot');
  await page.goto(harness().url + '/dots/default/tools-dot/settings');
  await expect(page.getByTestId('tools-off')).toContainText('start it to see the tools');
  // A fake of the guest's tool table at the test's edge: the harness runs no VM.
  await page.route('**/dots/v1/namespaces/default/dots/tools-dot/tools', (route) =>
    route.fulfill({
      json: {
        tools: [
          { name: 'exec', permission: 'computer.exec', offered: true, description: 'run a command' },
          { name: 'cron', permission: 'automations', offered: false, description: 'schedule' },
        ],
        mcp_servers: [],
      },
    }),
  );
  await setComputerState('tools-dot', 'RUNNING');
  await expect(page.getByTestId('tools-computer.exec')).toHaveText('exec');
  await expect(page.getByTestId('tools-automations')).toContainText('cron (not offered)');
  await page.getByLabel('Schedule automations').selectOption('allow');
  await expect(page.getByTestId('tools-automations')).toContainText('the tools show this change once it is saved');
});
