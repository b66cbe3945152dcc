// SPDX-License-Identifier: Apache-2.0
/**
 * Every failure this package reports is an AgentStateError.
 *
 * `kind` is the protocol's `data.kind` (docs/protocol.md, "Errors"): programs branch on
 * it. `code` is the JSON-RPC error code when the server answered (-32000 for engine
 * errors, -32602 for bad parameters, ...), and undefined when the failure was found on
 * this side (bad options, a value that cannot be mapped, a server that is not running).
 * `data` is the error's `data` object as the server sent it (for example
 * `current_version` on a version conflict), or undefined.
 */
export class AgentStateError extends Error {
  constructor(kind, message, { code, data, cause } = {}) {
    super(message, cause === undefined ? undefined : { cause });
    this.name = 'AgentStateError';
    this.kind = kind;
    this.code = code;
    this.data = data;
  }

  /** An error from a JSON-RPC error object `{code, message, data: {kind}}`. */
  static fromRpc(error, method) {
    const kind = (error && error.data && typeof error.data.kind === 'string')
      ? error.data.kind : 'internal';
    const text = error && typeof error.message === 'string' ? error.message : 'unknown error';
    return new AgentStateError(kind, `${method}: ${text}`, {
      code: error ? error.code : undefined,
      data: error ? error.data : undefined,
    });
  }
}

/** The error kinds the protocol defines, in the order docs/protocol.md lists them. */
export const ERROR_KINDS = Object.freeze([
  'already_exists', 'not_found', 'invalid_argument', 'version_conflict', 'too_large',
  'storage_full', 'io_error', 'unavailable', 'internal', 'data_corrupt',
  'unauthenticated', 'permission_denied', 'condition_failed', 'cursor_expired', 'moved',
]);

export function invalid(message) {
  return new AgentStateError('invalid_argument', message);
}

/**
 * Settles a waiting call with its answer `msg` (a JSON-RPC response): rejects with the
 * server's error, or resolves with the result (through `waiter.onResult` when set; what it
 * throws rejects the call).
 * @param {{ method: string, resolve: Function, reject: Function, onResult?: Function }} waiter
 * @param {{ result?: unknown, error?: object }} msg
 */
export function settleCall(waiter, msg) {
  if (msg.error !== undefined) {
    waiter.reject(AgentStateError.fromRpc(msg.error, waiter.method));
  } else if (waiter.onResult !== undefined) {
    try {
      waiter.resolve(waiter.onResult(msg.result));
    } catch (err) {
      waiter.reject(err);
    }
  } else {
    waiter.resolve(msg.result);
  }
}
