// SPDX-License-Identifier: Apache-2.0
// The package as npm packs it: `npm pack` (of a copy of the package, so nothing is written
// here) puts this platform's agentstate.node under prebuilds/, and the package unpacked
// into a project of its own runs a { memory: true } service in process from that prebuilt
// addon, in a node whose PATH holds node alone (no compiler, no cmake, no agentstate),
// without AGENTSTATE_ADDON and out of reach of the repository's build tree.
import assert from 'node:assert/strict';
import { execFile } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { test } from 'node:test';
import { promisify } from 'node:util';
import { needsAddon, PACKAGE_DIR, scratchDir } from './support/env.mjs';

const run = promisify(execFile);
const PLATFORM = `${process.platform}-${process.arch}`;

test('npm pack ships the prebuilt addon, and the unpacked package runs the engine in process from it', { skip: needsAddon(), timeout: 120_000 }, async () => {
  const work = scratchDir('pack');
  const copy = path.join(work, 'package');
  fs.mkdirSync(copy);
  for (const entry of ['package.json', 'README.md', 'src', 'scripts']) {
    fs.cpSync(path.join(PACKAGE_DIR, entry), path.join(copy, entry), { recursive: true });
  }
  const { stdout } = await run('npm', ['pack', '--json', '--pack-destination', work],
    { cwd: copy, env: { ...process.env, npm_config_loglevel: 'error' }, maxBuffer: 16 << 20 });
  const [packed] = JSON.parse(stdout);
  const files = packed.files.map((f) => f.path);
  const prebuilt = `prebuilds/${PLATFORM}/agentstate.napi.glibc.node`;
  assert.ok(files.includes(prebuilt), `${prebuilt} is not in the package: ${files.join(', ')}`);
  for (const f of ['package.json', 'README.md', 'src/index.js', 'src/index.d.ts', 'src/inprocess.js']) {
    assert.ok(files.includes(f), `${f} is not in the package`);
  }
  assert.deepEqual(files.filter((f) => f.startsWith('test/') || f.startsWith('scripts/') || f.startsWith('native/')), []);
  const manifest = JSON.parse(fs.readFileSync(path.join(copy, 'package.json'), 'utf8'));
  assert.ok(manifest.dependencies['node-gyp-build'], 'node-gyp-build is a dependency');

  // A project with the package unpacked into its node_modules; its dependencies (ADK, its
  // peer, and node-gyp-build) are links to this package's installed ones.
  const project = path.join(work, 'project');
  const installed = path.join(project, 'node_modules/@agentstate/adk');
  fs.mkdirSync(installed, { recursive: true });
  await run('tar', ['-xzf', path.join(work, packed.filename), '-C', installed, '--strip-components=1']);
  fs.mkdirSync(path.join(project, 'node_modules/@google'), { recursive: true });
  fs.symlinkSync(path.join(PACKAGE_DIR, 'node_modules/@google/adk'), path.join(project, 'node_modules/@google/adk'));
  fs.symlinkSync(path.join(PACKAGE_DIR, 'node_modules/node-gyp-build'), path.join(project, 'node_modules/node-gyp-build'));
  const bin = path.join(work, 'bin');
  fs.mkdirSync(bin);
  fs.symlinkSync(process.execPath, path.join(bin, 'node'));

  const script = `
    import fs from 'node:fs';
    import { AgentStateSessionService } from '@agentstate/adk';
    const s = new AgentStateSessionService({ memory: true });
    const session = await s.createSession({ appName: 'p', userId: 'u', sessionId: 's' });
    await s.appendEvent({ session, event: { id: 'e1', author: 'a', invocationId: 'i', actions: { stateDelta: { k: 1 } } } });
    const got = await s.getSession({ appName: 'p', userId: 'u', sessionId: 's' });
    await s.close();
    const loaded = fs.readFileSync('/proc/self/maps', 'utf8').split('\\n')
      .map((l) => l.split(/\\s+/)[5]).filter((f) => f && f.endsWith('.node'));
    console.log(JSON.stringify({ events: got.events.map((e) => e.id), state: got.state, loaded: [...new Set(loaded)] }));
  `;
  const env = { PATH: bin, HOME: work };
  const child = await run(path.join(bin, 'node'), ['--input-type=module', '-e', script], { cwd: project, env });
  const out = JSON.parse(child.stdout);
  assert.deepEqual(out.events, ['e1']);
  assert.deepEqual(out.state, { k: 1 });
  assert.deepEqual(out.loaded, [fs.realpathSync(path.join(installed, prebuilt))], 'the addon loaded is the package\'s prebuilt one');
});
