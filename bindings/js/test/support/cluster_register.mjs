// SPDX-License-Identifier: Apache-2.0
// `node --import ./test/support/cluster_register.mjs`: cluster mode's module hooks
// (cluster_hooks.mjs). cluster_suite.mjs passes it to every test process.
import { register } from 'node:module';

register('./cluster_hooks.mjs', import.meta.url);
