// SPDX-License-Identifier: Apache-2.0
// `node --import ./test/support/cluster_register.mjs`: cluster mode's module hooks
// (redirect_hooks.mjs, to cluster_service.mjs). cluster_suite.mjs passes it to every test
// process.
import { register } from 'node:module';

register('./redirect_hooks.mjs', import.meta.url, { data: { wrapper: './cluster_service.mjs' } });
