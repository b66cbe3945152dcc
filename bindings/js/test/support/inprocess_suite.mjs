// SPDX-License-Identifier: Apache-2.0
// `node test/support/inprocess_suite.mjs memory|store [FILE...]`: the suites that use
// the service (default: the service, runner, mapping, types and adk_sqlite suites) with
// every service a test would spawn a server for running the engine in the test's own
// process instead (inprocess_service.mjs): on the same store, or with `store`, every
// { memory: true } on a new store directory of its own. The tests that check a spawned
// server's process skip themselves (ownProcess in env.mjs). CTest: js_adk_in_process_memory,
// js_adk_in_process_store.
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { PACKAGE_DIR } from './env.mjs';
import './check_install.mjs'; // exits with what to install when node_modules is incomplete

const [mode, ...rest] = process.argv.slice(2);
if (mode !== 'memory' && mode !== 'store') {
  console.error('usage: node test/support/inprocess_suite.mjs memory|store [FILE...]');
  process.exit(2);
}
const files = rest.length > 0 ? rest : ['test/service.test.mjs', 'test/runner.test.mjs',
  'test/mapping.test.mjs', 'test/types.test.mjs', 'test/adk_sqlite.test.mjs'];
const run = spawnSync(process.execPath, ['--import', path.join(PACKAGE_DIR, 'test/support/inprocess_register.mjs'),
  '--test', '--test-concurrency=2', ...files], {
  cwd: PACKAGE_DIR, stdio: 'inherit', env: { ...process.env, AGENTSTATE_TEST_IN_PROCESS: mode },
});
if (run.error) console.error(`bindings/js: cannot run node --test: ${run.error.message}`);
process.exit(run.status ?? 1);
