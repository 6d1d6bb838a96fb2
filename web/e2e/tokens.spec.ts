// Every pair of colors the pages put text on, in both sets of tokens.css,
// meets WCAG AA for normal text (4.5:1).
import { expect, test } from '@playwright/test';
import { readFileSync } from 'node:fs';

const css = readFileSync(new URL('../src/tokens.css', import.meta.url), 'utf8');

function tokens(selector: string): Record<string, string> {
  const start = css.indexOf(selector + ' {');
  const body = css.slice(start, css.indexOf('}', start));
  return Object.fromEntries([...body.matchAll(/--([\w-]+):\s*(#[0-9a-f]{6});/gi)].map((m) => [m[1], m[2]]));
}

function luminance(hex: string): number {
  const [r, g, b] = [1, 3, 5].map((i) => {
    const c = parseInt(hex.slice(i, i + 2), 16) / 255;
    return c <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4;
  });
  return 0.2126 * r + 0.7152 * g + 0.0722 * b;
}

export function contrast(a: string, b: string): number {
  const [hi, lo] = [luminance(a), luminance(b)].sort((x, y) => y - x);
  return (hi + 0.05) / (lo + 0.05);
}

// [text, background]
const PAIRS: [string, string][] = [
  ['fg', 'bg'], ['fg', 'surface'], ['fg', 'surface-2'],
  ['muted', 'bg'], ['muted', 'surface'], ['muted', 'surface-2'],
  ['accent', 'surface'], ['accent', 'bg'], ['accent-fg', 'accent'],
  ['bubble-user-fg', 'bubble-user'],
  ['ok', 'surface'], ['warn', 'surface'], ['danger', 'surface'], ['danger', 'bg'],
  ['surface', 'warn'], ['surface', 'danger'],
];

for (const [name, selector] of [['light', ':root'], ['dark', ':root[data-theme="dark"]']]) {
  test(`the ${name} tokens meet WCAG AA contrast`, () => {
    const t = { ...tokens(':root'), ...tokens(selector) };
    const failing = PAIRS.map(([fg, bg]) => ({ pair: `${fg} on ${bg}`, ratio: Math.round(contrast(t[fg], t[bg]) * 100) / 100 })).filter(
      (p) => !(p.ratio >= 4.5),
    );
    expect(failing, `pairs under 4.5:1 in the ${name} theme`).toEqual([]);
  });
}
