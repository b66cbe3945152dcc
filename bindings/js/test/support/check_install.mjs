// SPDX-License-Identifier: Apache-2.0
// Run before the tests (npm's pretest): fails with one clear line when what the tests
// need is not installed, instead of a wall of import errors.
import fs from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const dir = path.resolve(path.dirname(fileURLToPath(import.meta.url)), '../..');
const fix = 'run tools/setup.sh --all from the repository root (it runs `npm ci` in bindings/js)';
const problems = [];
const [major] = process.versions.node.split('.').map(Number);
if (major < 20) problems.push(`node ${process.versions.node} is older than 20`);
const lock = JSON.parse(fs.readFileSync(path.join(dir, 'package-lock.json'), 'utf8'));
for (const name of ['@google/adk', '@mikro-orm/core', '@mikro-orm/sqlite', 'sqlite3', 'typescript',
  'node-addon-api', 'node-api-headers', 'node-gyp-build']) {
  const file = path.join(dir, 'node_modules', name, 'package.json');
  const want = lock.packages[`node_modules/${name}`]?.version;
  if (!fs.existsSync(file)) {
    problems.push(`${name} is not installed (bindings/js/node_modules is missing or incomplete)`);
    continue;
  }
  const have = JSON.parse(fs.readFileSync(file, 'utf8')).version;
  if (want && have !== want) problems.push(`${name} ${have} is installed, the lock file wants ${want}`);
}
if (problems.length === 0) {
  try {
    createRequire(path.join(dir, 'package.json'))('sqlite3');
  } catch (err) {
    problems.push(`the sqlite3 native module does not load (${err.message.split('\n')[0]}); its build needs g++, make and python3`);
  }
}
if (problems.length > 0) {
  for (const p of problems) console.error(`bindings/js: ${p}`);
  console.error(`bindings/js: ${fix}`);
  process.exit(1);
}
