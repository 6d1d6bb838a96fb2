// The approval card's diff for the engine's file tools: the pure parts in
// Node (lib/diff.ts), then the card in the Inbox and in the Chat.
import AxeBuilder from '@axe-core/playwright';
import { expect, test } from '@playwright/test';
import { applyDot, askApproval, denyWaiting, guestSays, harness } from './harness';
import { fileChanges, lineDiff, visible } from '../src/lib/diff';

test('lineDiff keeps the common lines and marks the rest', () => {
  const cases: { reason: string; a: string; b: string; want: string[] }[] = [
    { reason: 'one line changed', a: 'a\nb\nc', b: 'a\nB\nc', want: ['  a', '- b', '+ B', '  c'] },
    { reason: 'a line added', a: 'a\nc', b: 'a\nb\nc', want: ['  a', '+ b', '  c'] },
    { reason: 'everything new', a: '', b: 'x\ny', want: ['+ x', '+ y'] },
    { reason: 'everything gone', a: 'x', b: '', want: ['- x'] },
  ];
  for (const c of cases) expect(lineDiff(c.a, c.b).map((l) => `${l.op} ${l.text}`), c.reason).toEqual(c.want);
});

test('visible shows control and bidirectional characters instead of obeying them', () => {
  expect(visible('\u001b[31mred')).toBe('\u241b[31mred');
  expect(visible('ok\rhidden')).toBe('ok\u240dhidden');
  expect(visible('if (a \u202e) {')).toBe('if (a ⟨U+202E⟩) {');
  expect(visible('tab\tkept')).toBe('tab\tkept');
});

test('fileChanges reads the arguments of write_file, edit_file and apply_patch only', () => {
  expect(fileChanges('exec', { command: 'ls' })).toEqual([]);
  expect(fileChanges('write_file', { path: 'a.txt', content: 'x' })).toEqual([{ path: 'a.txt', what: 'the whole new content', lines: [{ op: '+', text: 'x' }] }]);
  const patch = fileChanges('apply_patch', {
    edits: [
      { path: 'n.md', action: 'add', new_text: 'new' },
      { path: 'o.md', action: 'replace', old_text: 'x', new_text: 'y', replace_all: true },
    ],
  });
  expect(patch.map((p) => [p.path, p.what])).toEqual([
    ['n.md', 'a new file'],
    ['o.md', 'every occurrence replaced'],
  ]);
});

const EDIT = {
  tool: 'edit_file',
  permission: 'files.write',
  arguments: { path: '/home/dot/notes.md', old_text: 'buy milk\nbuy bread\ncall mum', new_text: 'buy milk\n<img src=x onerror="window.pwned=1">\u202e\ncall mum' },
};

test('the Inbox card shows an edit as old against new, as text, reachable with the keyboard', async ({ page }) => {
  await applyDot('diff-dot');
  await askApproval('diff-a1', 'diff-dot', 'default', EDIT);
  await page.goto(harness().url + '/inbox?dot=default/diff-dot');
  const card = page.locator('[data-card]', { hasText: 'diff-dot' });
  const diff = card.getByTestId('file-diff');
  await expect(diff).toContainText('/home/dot/notes.md');
  await expect(diff.locator('[data-op=del]')).toHaveText(['- buy bread']);
  await expect(diff.locator('[data-op=add]')).toHaveText(['+ <img src=x onerror="window.pwned=1">⟨U+202E⟩']);
  await expect(diff).toContainText('+1 −1');
  // Shown as text: no element was made from it, nothing ran.
  await expect(card.locator('img')).toHaveCount(0);
  expect(await page.evaluate(() => (window as any).pwned)).toBeUndefined();
  // The keyboard reaches the diff (to scroll it) from the card.
  await card.focus();
  const lines = diff.getByTestId('diff-lines');
  for (let i = 0; i < 5 && !(await lines.evaluate((el) => el === document.activeElement)); i++) await page.keyboard.press('Tab');
  await expect(lines).toBeFocused();
  for (const theme of ['light', 'dark']) {
    await page.evaluate((t) => localStorage.setItem('dots.theme', t), theme);
    await page.reload();
    await expect(card.getByTestId('file-diff')).toBeVisible();
    await card.screenshot({ path: test.info().outputPath(`approval-diff-${theme}.png`) });
    const { violations } = await new AxeBuilder({ page }).analyze();
    expect(violations.filter((v) => v.impact === 'serious' || v.impact === 'critical').map((v) => v.id)).toEqual([]);
  }
  await denyWaiting('diff-dot');
});

test('the Chat card shows a write and a patch as their changes', async ({ page }) => {
  await applyDot('diff-chat-dot');
  await page.goto(harness().url + '/dots/default/diff-chat-dot/chat');
  await guestSays('diff-chat-dot', [
    {
      type: 'approval.requested',
      data: {
        approval_id: 'req-patch-1',
        tool: 'apply_patch',
        permission: 'files.write',
        arguments: { edits: [{ path: 'plan.md', action: 'add', new_text: '# Plan\nstep one' }, { path: 'todo.md', action: 'replace', old_text: 'a', new_text: 'b' }] },
        reason: 'write the plan',
      },
    },
  ]);
  const diffs = page.getByRole('region', { name: 'Conversation' }).getByTestId('file-diff').locator('figure');
  await expect(diffs).toHaveCount(2);
  await expect(diffs.nth(0)).toContainText('plan.md');
  await expect(diffs.nth(0).locator('[data-op=add]')).toHaveText(['+ # Plan', '+ step one']);
  await expect(diffs.nth(1).locator('[data-op=del]')).toHaveText(['- a']);
  await expect(diffs.nth(1).locator('[data-op=add]')).toHaveText(['+ b']);
  await denyWaiting('diff-chat-dot');
});
