// SPDX-License-Identifier: Apache-2.0
// `node --import ./test/support/inprocess_register.mjs`: in-process mode's module hooks
// (inprocess_hooks.mjs). inprocess_suite.mjs passes it to every test process.
import { register } from 'node:module';

register('./inprocess_hooks.mjs', import.meta.url);
