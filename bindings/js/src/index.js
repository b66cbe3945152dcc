export { AgentStateSessionService } from './service.js';
export { AgentStateError, ERROR_KINDS } from './errors.js';
