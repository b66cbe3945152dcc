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

/**
 * Cluster mode (test/support/cluster_suite.mjs): the address of the cluster node the
 * services connect to; undefined otherwise.
 */
export const CLUSTER_ADDRESS = process.env.AGENTSTATE_TEST_ADDRESS || undefined;

/**
 * In-process mode (test/support/inprocess_suite.mjs): 'memory' or 'store' when the
 * services that tests would spawn a server for run the engine in the test's process;
 * undefined otherwise.
 */
export const IN_PROCESS = process.env.AGENTSTATE_TEST_IN_PROCESS || undefined;

/**
 * A test's `skip` option for a test that needs a server process of its own (it checks
 * the process: its spawn, its exit, its command line, its store's owner): the reason in
 * cluster mode and in in-process mode, false otherwise.
 */
export function ownProcess(reason) {
  if (CLUSTER_ADDRESS) return `cluster mode: ${reason}`;
  return IN_PROCESS ? `in-process mode: ${reason}` : false;
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

/**
 * A test's `skip` option for a test that needs agentstate.node (the engine in the test's
 * process): the reason when the build tree has none (CTest sets AGENTSTATE_TEST_NO_ADDON
 * in a sanitizer build), false otherwise.
 */
export function needsAddon() {
  const why = process.env.AGENTSTATE_TEST_NO_ADDON;
  return why ? `no addon: ${why}` : false;
}
