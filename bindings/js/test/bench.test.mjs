// SPDX-License-Identifier: Apache-2.0
// bench.mjs at a tiny size, so that it cannot rot; the figures are not checked.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import { test } from 'node:test';
import { promisify } from 'node:util';
import { agentstateBin, needsAddon, PACKAGE_DIR } from './support/env.mjs';

const run = promisify(execFile);

test('bench.mjs runs every workload on every service', { skip: needsAddon() }, async () => {
  const { stdout } = await run(process.execPath, ['bench.mjs', '--scale', '0.001', '--events-per-session', '2', '--binary', agentstateBin()], {
    cwd: PACKAGE_DIR, timeout: 120_000,
  });
  const last = JSON.parse(stdout.trim().split('\n').at(-1));
  for (const kind of ['inprocess', 'agentstate', 'memory', 'database']) {
    for (const figure of ['A', 'B', 'C_full', 'C_recent']) {
      assert.ok(last.results[kind][figure] > 0, `${kind} ${figure}`);
    }
  }
  assert.equal(last.ratios.length, 16);
  assert.match(stdout, /ratio agentstate\/database A/);
  assert.match(stdout, /ratio inprocess\/memory   B/);
});
