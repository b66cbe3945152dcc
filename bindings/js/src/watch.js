// SPDX-License-Identifier: Apache-2.0
// Watches of the change feed (docs/protocol.md, "watch, unwatch") on one protocol stream:
// WatchRouter hands a stream's `changes` and `watch_ended` notifications to their watch,
// Watch is what AgentStateSessionService.watch() returns.
//
// Contract of a Watch:
// - It is an async iterator of batches `{ changes: Change[], cursor }` in commit order
//   (each change as changeFromWire gives it); batches without changes (the server's
//   progress) only move `cursor` and are not yielded.
// - `cursor` is the point after the last batch the iterator has handed out: a watch or
//   readChanges from it misses nothing the consumer has not seen and repeats nothing.
// - Batches received before the watch ended are handed out first. Then the iterator is
//   done when the watch ended by close() (or `return()`, as `break` in `for await` calls
//   it); any other end rejects next() once with an AgentStateError whose `data` holds
//   `reason` (the server's watch_ended reason, or 'connection_lost', or 'overflow') and
//   `resume_from` (== `cursor`): kind 'unavailable' when the server shut down or the
//   connection was lost (resume from it on a new watch), 'cursor_expired' and
//   'permission_denied' as the server reported them, 'too_large' when more than
//   `maxBufferBytes` of batches waited for the consumer (the watch was unwatched), else
//   the server's error kind.
// - While the watch is live its stream keeps node's event loop alive: close() it.
// - close() unwatches it (if live), drops the batches not yet handed out and resolves
//   with `cursor`. Idempotent.
import { AgentStateError, invalid } from './errors.js';
import { eventFromWire } from './mapping.js';

/** The default bound on the bytes of batches waiting for a watch's consumer. */
export const DEFAULT_MAX_BUFFER_BYTES = 64 * 1024 * 1024;

/** The protocol's Change -> the package's (camelCase names, the event as an ADK Event). */
export function changeFromWire(wire) {
  const out = {
    cursor: wire.cursor,
    kind: wire.kind,
    appName: wire.app_name,
    userId: wire.user_id,
    sessionId: wire.session_id,
    version: wire.version,
    stateDelta: wire.state_delta ?? {},
    stateRemove: wire.state_remove ?? [],
  };
  if (wire.event !== undefined && wire.event !== null) out.event = eventFromWire(wire.event);
  return out;
}

/** The notifications of one stream's watches, by watch id. */
export class WatchRouter {
  #sinks = new Map();
  #onCount;

  /** @param {(count: number) => void} onCount called whenever the number of watches changes */
  constructor(onCount) {
    this.#onCount = onCount;
  }

  get size() {
    return this.#sinks.size;
  }

  add(id, sink) {
    this.#sinks.set(id, sink);
    this.#onCount(this.#sinks.size);
  }

  delete(id) {
    if (this.#sinks.delete(id)) this.#onCount(this.#sinks.size);
  }

  /** Hands a notification to its watch; false when it is for none of them. */
  route(msg, bytes) {
    const params = msg.params;
    if ((msg.method !== 'changes' && msg.method !== 'watch_ended')
        || params === null || typeof params !== 'object') {
      return false;
    }
    const sink = this.#sinks.get(params.watch_id);
    if (sink === undefined) return false;
    if (msg.method === 'changes') {
      sink.onChanges(params, bytes);
    } else {
      this.delete(params.watch_id);
      sink.onEnded(params);
    }
    return true;
  }

  /** The stream is gone: every watch ends with `error`. */
  fail(error) {
    const sinks = [...this.#sinks.values()];
    this.#sinks.clear();
    if (sinks.length > 0) this.#onCount(0);
    for (const s of sinks) s.onLost(error);
  }
}

/** A watch's `maxBufferBytes` option, checked; the default when absent. */
export function checkMaxBufferBytes(value) {
  if (value === undefined) return DEFAULT_MAX_BUFFER_BYTES;
  if (!Number.isSafeInteger(value) || value < 1) {
    throw invalid(`maxBufferBytes must be an integer >= 1, not ${String(value)}`);
  }
  return value;
}

/**
 * Starts a watch on `conn` (a Connection or InProcessConnection) whose notifications
 * reach `router`; resolves with the Watch once the server has answered.
 */
export function startWatch(conn, router, params, { maxBufferBytes }) {
  return conn.call('watch', params, (result) => {
    // Runs before the stream's next line: the watch's notifications find it registered.
    if (result === null || typeof result !== 'object' || typeof result.watch_id !== 'string'
        || typeof result.cursor !== 'string') {
      throw new AgentStateError('internal', `watch answered ${JSON.stringify(result)}`);
    }
    const watch = new Watch(conn, router, result.watch_id, result.cursor, maxBufferBytes);
    return watch;
  });
}

export class Watch {
  #conn;
  #router;
  #id;
  #cursor;
  #queue = [];
  #queuedBytes = 0;
  #maxBufferBytes;
  #waiter = null; // { resolve, reject } of a pending next()
  #ended = null; // the reason, once the watch is over
  #failure = null; // the error next() rejects with, once
  #done = false; // next() answers done from now on
  #closing = null;

  /** Private: AgentStateSessionService.watch() makes them. */
  constructor(conn, router, id, cursor, maxBufferBytes) {
    this.#conn = conn;
    this.#router = router;
    this.#id = id;
    this.#cursor = cursor;
    this.#maxBufferBytes = maxBufferBytes;
    router.add(id, {
      onChanges: (params, bytes) => this.#onChanges(params, bytes),
      onEnded: (params) => this.#onEnded(params),
      onLost: (error) => this.#onLost(error),
    });
  }

  /** The server's id of the watch. */
  get id() {
    return this.#id;
  }

  /** Where a new watch (or readChanges) continues after what was handed out. */
  get cursor() {
    return this.#cursor;
  }

  /** Why and where the watch ended: { reason, resumeFrom }; undefined while it is live. */
  get ended() {
    return this.#ended === null ? undefined : { reason: this.#ended, resumeFrom: this.#cursor };
  }

  [Symbol.asyncIterator]() {
    return this;
  }

  next() {
    if (this.#waiter !== null) {
      return Promise.reject(invalid('a watch is read by one consumer: next() is already waiting'));
    }
    const now = this.#take();
    if (now !== undefined) return now;
    return new Promise((resolve, reject) => { this.#waiter = { resolve, reject }; });
  }

  /** Ends the iteration (`break` in `for await`): as close(). */
  async return() {
    await this.close();
    return { value: undefined, done: true };
  }

  /**
   * Unwatches (if the watch is live), drops the batches not yet handed out and resolves
   * with `cursor`. Idempotent.
   */
  close() {
    if (this.#closing === null) this.#closing = this.#close();
    return this.#closing;
  }

  async #close() {
    this.#done = true;
    this.#queue = [];
    this.#queuedBytes = 0;
    this.#settleWaiter();
    if (this.#ended === null) {
      try {
        await this.#conn.call('unwatch', { watch_id: this.#id });
      } catch (err) {
        // The watch ended meanwhile (by itself, or with its connection): nothing to undo.
        if (!(err instanceof AgentStateError) || (err.kind !== 'not_found' && err.kind !== 'unavailable')) throw err;
      }
      this.#router.delete(this.#id);
    }
    return this.#cursor;
  }

  // The next result now, or undefined when next() must wait.
  #take() {
    for (;;) {
      if (this.#done) return Promise.resolve({ value: undefined, done: true });
      const batch = this.#queue.shift();
      if (batch !== undefined) {
        this.#queuedBytes -= batch.bytes;
        this.#cursor = batch.cursor;
        if (batch.changes.length === 0) continue;
        let changes;
        try {
          changes = batch.changes.map(changeFromWire);
        } catch (err) {
          return Promise.reject(err);
        }
        return Promise.resolve({ value: { changes, cursor: batch.cursor }, done: false });
      }
      if (this.#ended === null) return undefined;
      this.#done = true;
      if (this.#failure !== null) {
        this.#failure.data = { ...this.#failure.data, reason: this.#ended, resume_from: this.#cursor };
        return Promise.reject(this.#failure);
      }
    }
  }

  #settleWaiter() {
    if (this.#waiter === null) return;
    const now = this.#take();
    if (now === undefined) return;
    const { resolve, reject } = this.#waiter;
    this.#waiter = null;
    now.then(resolve, reject);
  }

  #onChanges(params, bytes) {
    if (this.#done || this.#ended !== null) return;
    if (!Array.isArray(params.changes) || typeof params.cursor !== 'string') {
      this.#end('failed', new AgentStateError('internal',
        `watch ${this.#id}: the server sent a malformed changes notification`));
      return;
    }
    this.#queue.push({ changes: params.changes, cursor: params.cursor, bytes });
    this.#queuedBytes += bytes;
    if (this.#queuedBytes > this.#maxBufferBytes) {
      // The consumer fell behind: what waits is dropped and the watch ends where the
      // consumer is, so nothing is missed when it resumes from `cursor`.
      this.#queue = [];
      const queued = this.#queuedBytes;
      this.#queuedBytes = 0;
      this.#router.delete(this.#id);
      this.#conn.call('unwatch', { watch_id: this.#id }).catch(() => {});
      this.#end('overflow', new AgentStateError('too_large',
        `watch ${this.#id}: ${queued} bytes of batches waited for the consumer, over maxBufferBytes ` +
        `${this.#maxBufferBytes}; resume from the watch's cursor`));
      return;
    }
    this.#settleWaiter();
  }

  #onEnded(params) {
    const reason = typeof params.reason === 'string' ? params.reason : 'failed';
    if (reason === 'cancelled') {
      this.#end(reason, null);
      return;
    }
    const error = params.error !== null && typeof params.error === 'object' ? params.error : {};
    const kind = reason === 'closing' ? 'unavailable'
      : reason === 'cursor_expired' || reason === 'permission_denied' ? reason
        : typeof error.kind === 'string' ? error.kind : 'internal';
    const detail = typeof error.message === 'string' ? `: ${error.message}` : '';
    this.#end(reason, new AgentStateError(kind, `watch ${this.#id} ended (${reason})${detail}`, { data: { ...error } }));
  }

  #onLost(error) {
    this.#end('connection_lost', new AgentStateError('unavailable',
      `watch ${this.#id} ended with its connection: ${error.message}`, { cause: error }));
  }

  // The watch is over; `error` (or null) is what next() rejects with once the batches
  // received before are handed out (its data then gets the reason and the resume point).
  #end(reason, error) {
    if (this.#ended !== null) return;
    this.#ended = reason;
    if (error !== null && !this.#done) this.#failure = error;
    this.#settleWaiter();
  }
}
