// SPDX-License-Identifier: Apache-2.0
// The service's requests as the protocol's params: each value checked, a bad one an
// AgentStateError of kind invalid_argument naming the option.
import { invalid } from './errors.js';

export function requireName(what, value) {
  if (typeof value !== 'string') {
    throw invalid(`${what} must be a string, not ${value === null ? 'null' : typeof value}`);
  }
  return value;
}

export function optionalBoolean(what, value) {
  if (value === undefined || value === null) return undefined;
  if (typeof value !== 'boolean') throw invalid(`${what} must be a boolean, not ${typeof value}`);
  return value;
}

export function optionalString(what, value) {
  if (value === undefined || value === null) return undefined;
  return requireName(what, value);
}

const SCOPES = ['session', 'user', 'app', 'all'];

// The change feed's filters (readChanges, watch) as the protocol's params.
export function changeParams({ scope, appName, userId, sessionId, includeSessions, keyPrefix, from }) {
  if (!SCOPES.includes(scope)) {
    throw invalid(`scope must be one of ${SCOPES.map((x) => `'${x}'`).join(', ')}, not ${JSON.stringify(scope)}`);
  }
  const params = { scope };
  if (scope === 'all') {
    if (appName !== undefined || userId !== undefined || sessionId !== undefined) {
      throw invalid("scope 'all' takes no appName, userId or sessionId");
    }
  } else {
    params.app_name = requireName('appName', appName);
  }
  if (scope === 'user' || scope === 'session') params.user_id = requireName('userId', userId);
  else if (userId !== undefined) throw invalid(`userId applies to scopes 'user' and 'session', not '${scope}'`);
  if (scope === 'session') params.session_id = requireName('sessionId', sessionId);
  else if (sessionId !== undefined) throw invalid(`sessionId applies to scope 'session', not '${scope}'`);
  const include = optionalBoolean('includeSessions', includeSessions);
  if (include !== undefined) params.include_sessions = include;
  const prefix = optionalString('keyPrefix', keyPrefix);
  if (prefix !== undefined) params.key_prefix = prefix;
  const start = optionalString('from', from);
  if (start !== undefined) params.from = start;
  return params;
}

export function sessionParams({ appName, userId, sessionId }) {
  return {
    app_name: requireName('appName', appName),
    user_id: requireName('userId', userId),
    session_id: requireName('sessionId', sessionId),
  };
}

// The point of a rewind: exactly one of beforeInvocationId and beforeVersion.
export function rewindParams(request) {
  const params = sessionParams(request);
  const { beforeInvocationId, beforeVersion, expectedVersion } = request;
  const byInvocation = beforeInvocationId !== undefined && beforeInvocationId !== null;
  const byVersion = beforeVersion !== undefined && beforeVersion !== null;
  if (byInvocation === byVersion) throw invalid('give exactly one of beforeInvocationId and beforeVersion');
  if (byInvocation) params.before_invocation_id = requireName('beforeInvocationId', beforeInvocationId);
  else params.before_version = optionalCount('beforeVersion', beforeVersion, { min: 1 });
  const expected = optionalCount('expectedVersion', expectedVersion);
  if (expected !== undefined) params.expected_version = expected;
  return params;
}

export function optionalCount(what, value, { min = 0 } = {}) {
  if (value === undefined || value === null) return undefined;
  if (!Number.isSafeInteger(value) || value < min) {
    throw invalid(`${what} must be an integer >= ${min}, not ${String(value)}`);
  }
  return value;
}

// The checked `token` and `tls` options of a server at an address (or addresses).
export function connectOptions(options, unix) {
  const out = {};
  if (options.token !== undefined) {
    if (typeof options.token !== 'string' || options.token === '') throw invalid('token must be a non-empty string');
    out.token = options.token;
  }
  if (options.tls !== undefined && options.tls !== false) {
    if (unix) throw invalid('tls applies to a TCP address; a Unix socket is not encrypted');
    if (options.tls !== true && (options.tls === null || typeof options.tls !== 'object' || Array.isArray(options.tls))) {
      throw invalid("tls must be true or an object of node's tls.connect options");
    }
    out.tls = options.tls === true ? {} : options.tls;
  }
  return out;
}
