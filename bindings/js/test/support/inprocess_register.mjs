// SPDX-License-Identifier: Apache-2.0
// `node --import ./test/support/inprocess_register.mjs`: in-process mode's module hooks
// (redirect_hooks.mjs, to inprocess_service.mjs). inprocess_suite.mjs passes it to every
// test process.
import { register } from 'node:module';

register('./redirect_hooks.mjs', import.meta.url, { data: { wrapper: './inprocess_service.mjs' } });
