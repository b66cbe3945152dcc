// SPDX-License-Identifier: Apache-2.0
// Shared test setup: the agentstate binary under test and scratch directories.
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';

const here = path.dirname(fileURLToPath(import.meta.url));
export const PACKAGE_DIR = path.resolve(here, '../..');
const REPO_DIR = path.resolve(PACKAGE_DIR, '../..');

/**
 * The binary the tests run: AGENTSTATE_BIN (CTest sets it to the built target), else
 * the repository's build/bin/agentstate. Throws when neither exists.
 */
export function agentstateBin() {
  const candidates = [process.env.AGENTSTATE_BIN, path.join(REPO_DIR, 'build/bin/agentstate')]
    .filter(Boolean);
  for (const c of candidates) {
    if (fs.existsSync(c)) return c;
  }
  throw new Error(`no agentstate binary: set AGENTSTATE_BIN or build it (tried ${candidates.join(', ')})`);
}

/** A new empty directory, removed when the process exits. */
export function scratchDir(tag) {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), `agentstate-js-${tag}-`));
  process.on('exit', () => fs.rmSync(dir, { recursive: true, force: true }));
  return dir;
}

/** A JSON copy: what survives storage (undefined members dropped, key order ignored by deepEqual). */
export function asJson(value) {
  return JSON.parse(JSON.stringify(value));
}
