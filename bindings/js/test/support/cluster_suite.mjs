// SPDX-License-Identifier: Apache-2.0
// `node test/support/cluster_suite.mjs [FILE...]`: the service and runner suites
// (default test/service.test.mjs and test/runner.test.mjs) through a running cluster:
// AGENTSTATE_TEST_ADDRESS=HOST:PORT names a node (tests/support/cluster_harness.py
// starts the cluster and sets it; CTest: js_conformance_cluster). Every service a test
// would start on a server of its own connects there instead (cluster_service.mjs); the
// tests that need a process of their own skip themselves (ownProcess in env.mjs).
import { spawnSync } from 'node:child_process';
import path from 'node:path';
import { CLUSTER_ADDRESS, PACKAGE_DIR } from './env.mjs';
import './check_install.mjs'; // exits with what to install when node_modules is incomplete

if (!CLUSTER_ADDRESS) {
  console.error('cluster_suite.mjs: set AGENTSTATE_TEST_ADDRESS=HOST:PORT (tests/support/cluster_harness.py does)');
  process.exit(2);
}
const files = process.argv.length > 2 ? process.argv.slice(2)
  : ['test/service.test.mjs', 'test/runner.test.mjs'];
const run = spawnSync(process.execPath, ['--import', path.join(PACKAGE_DIR, 'test/support/cluster_register.mjs'),
  '--test', '--test-concurrency=2', ...files], { cwd: PACKAGE_DIR, stdio: 'inherit' });
if (run.error) console.error(`bindings/js: cannot run node --test: ${run.error.message}`);
process.exit(run.status ?? 1);
