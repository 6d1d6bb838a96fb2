// Prints the compressed size of the JavaScript a first load fetches and fails
// the build above the budget of issue 11 (250 KB gzip).
import { readFileSync, readdirSync } from 'node:fs';
import { gzipSync } from 'node:zlib';
import { join } from 'node:path';

const BUDGET = 250 * 1024;
const dir = new URL('../dist/app/assets/', import.meta.url).pathname;
let js = 0, css = 0;
for (const f of readdirSync(dir)) {
  const n = gzipSync(readFileSync(join(dir, f)), { level: 9 }).length;
  if (f.endsWith('.js')) js += n;
  if (f.endsWith('.css')) css += n;
}
const kb = (n) => (n / 1024).toFixed(1) + ' KB';
console.log(`first load: ${kb(js)} of JavaScript and ${kb(css)} of CSS, gzip (budget ${kb(BUDGET)} of JavaScript)`);
if (js > BUDGET) {
  console.error('the JavaScript of a first load is over its budget');
  process.exit(1);
}
