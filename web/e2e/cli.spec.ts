import { expect, test } from '@playwright/test';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

for (const value of ['127.0.0.2', '127.0.0.2:0', 'localhost:http', ':3000']) {
  test(`server refuses INVISIBLE_DOTS_WEB_LISTEN=${value} at start`, () => {
    const home = mkdtempSync(join(tmpdir(), 'dots-web-listen-'));
    try {
      const run = spawnSync(process.env.INVISIBLE_DOTS_BIN!, ['server'], {
        env: { PATH: process.env.PATH, INVISIBLE_DOTS_HOME: join(home, 'home'), INVISIBLE_DOTS_WEB_LISTEN: value },
        encoding: 'utf8',
        timeout: 20_000,
      });
      expect(run.status).toBe(1);
      expect(run.stderr).toContain(`INVISIBLE_DOTS_WEB_LISTEN="${value}" is not host:port`);
      // Nothing was started or made before the refusal.
      expect(readdirSync(home)).toEqual([]);
    } finally {
      rmSync(home, { recursive: true, force: true });
    }
  });
}
