// SPDX-License-Identifier: Apache-2.0
// ReconnectingConnection: the Connection interface (call, watch, close) to one server at
// an address (`{ address }`) that survives the server's restart and a lost connection.
//
// Contract:
// - Calls go over one pipelined Connection, in call order. When it is lost (or the server
//   answers 'unavailable' while shutting down), a new one is opened after a jittered
//   exponential backoff (BACKOFF_MS doubling up to MAX_BACKOFF_MS, each pause a random
//   50-100% of it, as src/cluster.js), and once it answers a `ping` the calls waiting are
//   written on it in their call order. Nothing is reconnected while no call waits.
// - A call whose answer was lost is in doubt: it may have run. It is sent again when
//   sending it twice has the effect of sending it once: reads, deletes, `end_invocation`,
//   `flush`, and the writes made idempotent here: an `append_event` whose event has no id
//   gets one (a random UUID) and a `rewind_session` without `event_id` gets one, before
//   the first try, so the server answers a repeat with what it stored the first time.
//   Other calls in doubt (`create_session`, `fork_session`, `prune`, ...) reject with
//   kind 'unavailable' and `data.in_doubt: true`. Calls that cannot have reached the
//   server (made while no connection was up, or on one that never connected) are
//   always sent.
// - Each call is tried once, and again until `retryForMs` has passed since it was made
//   (0: one try); then it rejects
//   with kind 'unavailable' (retryable: an append re-sent with the same event id is
//   stored once). Errors that a new connection would not change (a refused token, a TLS
//   certificate that is not trusted, every answer of the server but 'unavailable')
//   reject at once.
// - A watch runs on the connection of the moment and is not moved: it ends with kind
//   'unavailable' and its cursor when the connection is lost (src/watch.js).
// - close() rejects the calls waiting for a connection, then closes the connection after
//   the answers already owed. Idempotent.
import { randomUUID } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { BACKOFF_MS, DEFAULT_RETRY_FOR_MS, MAX_BACKOFF_MS } from './cluster.js';
import { Connection } from './connection.js';
import { AgentStateError, invalid } from './errors.js';

// Methods that have the effect of one call when sent twice (given the ids set in call()).
const RESENDABLE = new Set([
  'get_session', 'list_sessions', 'get_app_state', 'get_user_state', 'read_changes',
  'rewind_plan', 'list_invocations', 'inject_state', 'stats', 'ping', 'flush', 'cluster_map',
  'delete_session', 'delete_user', 'delete_app', 'end_invocation', 'append_event',
  'rewind_session',
]);

// Socket errors that a later connection may not meet again.
const TRANSIENT_CODES = new Set([
  'ECONNREFUSED', 'ECONNRESET', 'ECONNABORTED', 'EPIPE', 'ENOENT', 'ETIMEDOUT',
  'EHOSTUNREACH', 'ENETUNREACH', 'ENETDOWN', 'EAI_AGAIN', 'ERR_SOCKET_CLOSED',
]);

function transient(err) {
  if (!(err instanceof AgentStateError) || err.kind !== 'unavailable') return false;
  const code = err.cause && err.cause.code;
  return typeof code !== 'string' || TRANSIENT_CODES.has(code);
}

function sleep(ms) {
  return new Promise((resolve) => { setTimeout(resolve, ms); });
}

function describe(target) {
  return target.path !== undefined ? `unix:${target.path}` : `${target.host}:${target.port}`;
}

export class ReconnectingConnection {
  #target;
  #retryForMs;
  #conn;
  #waiting = []; // { method, params, deadline, resolve, reject } to send once connected
  #reconnecting = false;
  #wait = 0; // the next pause before a connection is tried; 0 after a call succeeded
  #closed = false;
  #lastError = null;

  /**
   * @param {{ host?: string, port?: number, path?: string, tls?: object, token?: string,
   *           retryForMs?: number }} target as Connection takes it, and how long a call
   *   is tried
   */
  constructor({ retryForMs = DEFAULT_RETRY_FOR_MS, ...target }) {
    if (typeof retryForMs !== 'number' || !Number.isFinite(retryForMs) || retryForMs < 0) {
      throw invalid(`retryForMs must be a finite number >= 0, not ${String(retryForMs)}`);
    }
    this.#target = target;
    this.#retryForMs = retryForMs;
    this.#conn = new Connection(target);
  }

  /** No process is spawned for an address. */
  get pid() {
    return undefined;
  }

  /** Sends one request as the contract says; resolves with its `result`. */
  call(method, params) {
    if (this.#closed) return Promise.reject(new AgentStateError('unavailable', 'the session service is closed'));
    if (params !== null && typeof params === 'object') {
      if (method === 'append_event' && params.event !== null && typeof params.event === 'object' && !params.event.id) {
        params = { ...params, event: { ...params.event, id: randomUUID() } };
      } else if (method === 'rewind_session' && !params.event_id) {
        params = { ...params, event_id: randomUUID() };
      }
    }
    return new Promise((resolve, reject) => {
      this.#dispatch({ method, params, deadline: performance.now() + this.#retryForMs, tried: false, resolve, reject });
    });
  }

  #dispatch(c) {
    if (this.#closed) c.reject(new AgentStateError('unavailable', 'the session service is closed'));
    else if (c.tried && performance.now() >= c.deadline) c.reject(this.#expired(c));
    else if (this.#conn !== null && !this.#conn.failed) this.#send(this.#conn, c);
    else {
      this.#waiting.push(c);
      this.#reconnect();
    }
  }

  #send(conn, c) {
    conn.call(c.method, c.params).then((result) => {
      this.#wait = 0;
      c.resolve(result);
    }, (err) => {
      c.tried = true;
      if (!transient(err) || this.#closed) {
        c.reject(err);
        return;
      }
      this.#lastError = err;
      if (!conn.failed) {
        // The server answered 'unavailable' (shutting down, a commit failed before this
        // call): the call did not run. Tried again after a pause.
        if (!RESENDABLE.has(c.method)) c.reject(err);
        else sleep(BACKOFF_MS * (0.5 + Math.random() / 2)).then(() => this.#dispatch(c));
        return;
      }
      if (this.#conn === conn) this.#conn = null;
      if (RESENDABLE.has(c.method) || !conn.connected) {
        this.#dispatch(c);
        return;
      }
      c.reject(new AgentStateError('unavailable',
        `${c.method}: the connection to agentstate at ${describe(this.#target)} was lost before the answer; ` +
        `whether the call took effect is unknown: ${err.message}`, { data: { in_doubt: true }, cause: err }));
    });
  }

  #expired(c) {
    const last = this.#lastError;
    return new AgentStateError('unavailable',
      `${c.method}: agentstate at ${describe(this.#target)} did not answer within retryForMs ${this.#retryForMs}` +
      `${last ? `: ${last.message}` : ''}`, { cause: last ?? undefined });
  }

  // Rejects the waiting calls that were tried and whose time is up; the earliest deadline
  // of the others (a call is tried once, however short its retryForMs).
  #expire() {
    const now = performance.now();
    let next = Infinity;
    const keep = [];
    for (const c of this.#waiting) {
      if (c.tried && now >= c.deadline) c.reject(this.#expired(c));
      else {
        keep.push(c);
        next = Math.min(next, c.deadline);
      }
    }
    this.#waiting = keep;
    return next;
  }

  #rejectWaiting(error) {
    const waiting = this.#waiting;
    this.#waiting = [];
    for (const c of waiting) c.reject(error);
  }

  #reconnect() {
    if (this.#reconnecting) return;
    this.#reconnecting = true;
    this.#reconnectLoop().finally(() => { this.#reconnecting = false; });
  }

  // Opens connections until one answers a ping, pausing between tries, while calls wait;
  // then writes the waiting calls on it in their order. The first try is at once: a pause
  // left from an earlier outage would spend a new call's whole retryForMs before any try.
  async #reconnectLoop() {
    this.#wait = 0;
    for (;;) {
      const next = this.#expire();
      if (this.#closed || this.#waiting.length === 0) return;
      if (this.#wait > 0) {
        await sleep(Math.min(this.#wait * (0.5 + Math.random() / 2), Math.max(0, next - performance.now())));
        if (this.#closed || this.#expire() === Infinity) continue;
      }
      this.#wait = this.#wait === 0 ? BACKOFF_MS : Math.min(this.#wait * 2, MAX_BACKOFF_MS);
      const conn = new Connection(this.#target);
      try {
        await conn.call('ping');
      } catch (err) {
        conn.close().catch(() => {});
        if (!transient(err)) {
          this.#rejectWaiting(err);
          return;
        }
        this.#lastError = err;
        for (const c of this.#waiting) c.tried = true; // this connection was their try
        continue;
      }
      if (this.#closed) {
        conn.close().catch(() => {});
        this.#rejectWaiting(new AgentStateError('unavailable', 'the session service is closed'));
        return;
      }
      this.#conn = conn;
      const waiting = this.#waiting;
      this.#waiting = [];
      for (const c of waiting) this.#send(conn, c);
      return;
    }
  }

  /**
   * Starts a watch on the connection of the moment (after reconnecting if need be, within
   * retryForMs); not moved to a later connection.
   */
  async watch(params, options) {
    if (this.#conn === null || this.#conn.failed) await this.call('ping');
    const conn = this.#conn;
    if (conn === null || conn.failed) {
      throw new AgentStateError('unavailable', `the connection to agentstate at ${describe(this.#target)} was lost`);
    }
    return conn.watch(params, options);
  }

  /** Rejects the calls waiting for a connection, closes the connection. Idempotent. */
  async close() {
    this.#closed = true;
    this.#rejectWaiting(new AgentStateError('unavailable', 'the session service is closed'));
    const conn = this.#conn;
    if (conn !== null) await conn.close();
  }
}
