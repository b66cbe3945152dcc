// SPDX-License-Identifier: Apache-2.0
export { AgentStateSessionService } from './service.js';
export { AgentStateError, ERROR_KINDS } from './errors.js';
export { Watch as AgentStateWatch } from './watch.js';
