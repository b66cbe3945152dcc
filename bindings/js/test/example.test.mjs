// SPDX-License-Identifier: Apache-2.0
// examples/quickstart.mjs, run as a user would (the package imported by its name).
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import path from 'node:path';
import { test } from 'node:test';
import { promisify } from 'node:util';
import { AgentStateSessionService } from '../src/index.js';
import { agentstateBin, needsAddon, PACKAGE_DIR, scratchDir } from './support/env.mjs';

const run = promisify(execFile);

test('examples/quickstart.mjs runs and its session is in the store', { skip: needsAddon() }, async () => {
  const store = path.join(scratchDir('quickstart'), 'data');
  const { stdout } = await run(process.execPath, ['examples/quickstart.mjs', store], {
    cwd: PACKAGE_DIR, env: { ...process.env, AGENTSTATE_BIN: agentstateBin() },
  });
  assert.equal(stdout.trim(), "1 { 'app:calls': 7, step: 1, 'user:lang': 'en' }");
  const s = new AgentStateSessionService({ store, binary: agentstateBin() });
  const listed = await s.listSessions({ appName: 'my-app', userId: 'alice' });
  assert.equal(listed.totalItems, 1);
  const got = await s.getSession({ appName: 'my-app', userId: 'alice', sessionId: listed.sessions[0].id });
  assert.equal(got.events[0].content.parts[0].text, 'Looking it up');
  assert.ok(!JSON.stringify(got).includes('temp:'));
  await s.close();
});
