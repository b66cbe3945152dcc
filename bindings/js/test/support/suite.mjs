// SPDX-License-Identifier: Apache-2.0
// `npm test`: node's test runner over test/*.test.mjs, except the cluster tier
// (test/cluster.test.mjs needs etcd: `npm run test:cluster`, CTest js_cluster_client).
// Arguments are passed on to `node --test`.
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { PACKAGE_DIR } from './env.mjs';

const CLUSTER_TIER = new Set(['cluster.test.mjs']);
const files = fs.readdirSync(path.join(PACKAGE_DIR, 'test'))
  .filter((f) => f.endsWith('.test.mjs') && !CLUSTER_TIER.has(f))
  .sort()
  .map((f) => path.join('test', f));
const run = spawnSync(process.execPath, ['--test', '--test-concurrency=2', ...process.argv.slice(2), ...files],
  { cwd: PACKAGE_DIR, stdio: 'inherit' });
if (run.error) console.error(`bindings/js: cannot run node --test: ${run.error.message}`);
process.exit(run.status ?? 1);
