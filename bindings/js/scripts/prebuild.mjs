// SPDX-License-Identifier: Apache-2.0
// `npm run prebuilds` (and npm's `prepack`, so `npm pack` and `npm publish` run it): puts
// this platform's agentstate.node into prebuilds/PLATFORM-ARCH/agentstate.napi.LIBC.node,
// where the package loads it from (src/inprocess.js, through node-gyp-build) when no
// other addon is found, so that a user of the package needs no C++ toolchain. The addon
// is $AGENTSTATE_ADDON, else the repository's CMake build tree
// (build/bindings/js/agentstate.node: cmake --build build --target agentstate_node); its
// debug information is left out of the copy when `strip` is on PATH. Exits 1, saying
// what to build, when there is none: a package without the addon would not run in
// process.
import { execFileSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const packageDir = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '..');
const source = process.env.AGENTSTATE_ADDON
  || path.resolve(packageDir, '../../build/bindings/js/agentstate.node');
if (!fs.existsSync(source)) {
  console.error(`bindings/js: no agentstate.node at ${source}: build it first ` +
    '(cmake --build build --target agentstate_node) or set AGENTSTATE_ADDON');
  process.exit(1);
}
const header = process.report?.getReport()?.header ?? {};
const libc = header.glibcVersionRuntime ? 'glibc' : 'musl';
const dir = path.join(packageDir, 'prebuilds', `${process.platform}-${process.arch}`);
fs.rmSync(dir, { recursive: true, force: true });
fs.mkdirSync(dir, { recursive: true });
const target = path.join(dir, `agentstate.napi.${libc}.node`);
let stripped = false;
try {
  execFileSync('strip', ['--strip-debug', '-o', target, source], { stdio: ['ignore', 'ignore', 'pipe'] });
  stripped = true;
} catch {
  fs.copyFileSync(source, target);
}
console.error(`bindings/js: ${path.relative(packageDir, target)} from ${source}${stripped ? ' (debug information stripped)' : ''}`);
