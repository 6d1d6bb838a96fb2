import AxeBuilder from '@axe-core/playwright';
import { expect, test, type Page } from '@playwright/test';
import { applyDot, guestSays, harness, setComputerState } from './harness';

const SKILLS = {
  skills: [
    {
      name: 'weekly-report',
      description: 'Writes the weekly report from the notes',
      source: 'dot',
      path: '/home/dot/.skills/weekly-report/SKILL.md',
      content: '---\nname: weekly-report\ndescription: Writes the weekly report from the notes\n---\n# Weekly report\n\nRead **notes.md** first.\n',
    },
    { name: 'browse', description: 'Use the browser', source: 'builtin', path: '/opt/dot/skills/browse/SKILL.md', content: '# Browse\n' },
  ],
};

/**
 * A fake of the Dot's engine at the edge of the test: the harness's host
 * runs no VM, so the browser's request to the skills route is answered here
 * as the route answers (guest/protocol Skills, or the Dots API's error body).
 */
async function fakeSkills(page: Page, dot: string, answer: { status: number; json: unknown }) {
  await page.route(`**/dots/v1/namespaces/default/dots/${dot}/skills`, (route) => route.fulfill(answer));
}

const serious = async (page: Page) =>
  (await new AxeBuilder({ page }).analyze()).violations.filter((v) => v.impact === 'serious' || v.impact === 'critical').map((v) => v.id);

test('the Skills page lists the skills and opens one as Markdown, without its frontmatter', async ({ page }) => {
  await applyDot('skill-dot');
  await setComputerState('skill-dot', 'RUNNING');
  await fakeSkills(page, 'skill-dot', { status: 200, json: SKILLS });
  await page.goto(harness().url + '/dots/default/skill-dot/chat');
  await page.getByRole('link', { name: 'Skills', exact: true }).click();
  await expect(page).toHaveURL(/\/dots\/default\/skill-dot\/skills$/);
  const list = page.getByTestId('skills');
  await expect(list.locator('[data-skill]')).toHaveCount(2);
  await expect(list.locator('[data-skill="browse"]')).toContainText('built in');
  await expect(list.locator('[data-skill="weekly-report"]')).toContainText('written by the Dot');
  await list.locator('[data-skill="weekly-report"]').click();
  await expect(page).toHaveURL(/\?skill=weekly-report$/);
  const view = page.getByTestId('skill-view');
  await expect(view).toContainText('/home/dot/.skills/weekly-report/SKILL.md');
  await expect(view.getByRole('heading', { name: 'Weekly report' })).toBeVisible();
  await expect(view.locator('strong', { hasText: 'notes.md' })).toBeVisible();
  await expect(view).not.toContainText('name: weekly-report');
  for (const theme of ['light', 'dark']) {
    await page.evaluate((t) => localStorage.setItem('dots.theme', t), theme);
    await page.reload();
    await expect(page.getByTestId('skill-view')).toBeVisible();
    await page.screenshot({ path: test.info().outputPath(`skills-open-${theme}.png`), fullPage: true });
    expect(await serious(page)).toEqual([]);
  }
});

test('the Skills page says the computer is off, with Start, rather than failing', async ({ page }) => {
  await applyDot('skill-off-dot');
  await page.goto(harness().url + '/dots/default/skill-off-dot/skills');
  await expect(page.getByTestId('computer-off')).toContainText('so there is no list of skills to show');
  await expect(page.getByRole('button', { name: 'Start the computer' })).toBeVisible();
});

test("the skills route's own computer_stopped gets the same answer, and any other failure says what to do", async ({ page }) => {
  await applyDot('skill-409-dot');
  await setComputerState('skill-409-dot', 'RUNNING');
  await fakeSkills(page, 'skill-409-dot', { status: 409, json: { error: 'computer_stopped', message: 'the computer of skill-409-dot is not running' } });
  await page.goto(harness().url + '/dots/default/skill-409-dot/skills');
  await expect(page.getByTestId('computer-off')).toContainText('no list of skills to show');

  await page.unrouteAll();
  await fakeSkills(page, 'skill-409-dot', { status: 502, json: { error: 'guest_unreachable', message: 'the guest did not answer' } });
  await page.reload();
  await expect(page.getByTestId('skills-error')).toContainText('The skills could not be read: the guest did not answer');
  await expect(page.getByTestId('skills-error')).toContainText('Try again');
});

test('the list is read again when a turn ends, which may have written a skill', async ({ page }) => {
  await applyDot('skill-turn-dot');
  // Placed on the harness's host first (the guest's events come through it), then shown running.
  await guestSays('skill-turn-dot', [{ type: 'agent.state', data: { state: 'THINKING' } }]);
  await setComputerState('skill-turn-dot', 'RUNNING');
  let reads = 0;
  await page.route('**/dots/v1/namespaces/default/dots/skill-turn-dot/skills', (route) => {
    reads++;
    const skills = reads === 1 ? SKILLS.skills.slice(1) : SKILLS.skills;
    return route.fulfill({ status: 200, json: { skills } });
  });
  await page.goto(harness().url + '/dots/default/skill-turn-dot/skills');
  await expect(page.getByTestId('skills').locator('[data-skill]')).toHaveCount(1);
  await guestSays('skill-turn-dot', [{ type: 'agent.state', data: { state: 'IDLE' } }]);
  await expect(page.getByTestId('skills').locator('[data-skill="weekly-report"]')).toBeVisible();
});
