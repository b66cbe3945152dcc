// SPDX-License-Identifier: Apache-2.0
// ClusterConnection: the Connection interface (call, close) over the nodes of an agentstate
// cluster (`serve --cluster`, docs/cluster.md).
//
// Contract:
// - A call goes to the node that answered last (at first, the first address). A node
//   answers any session's request (it forwards it to the shard's owner), except one
//   started with --no-forward, which answers kind 'moved' with the owner's address in
//   `data.address`: the call goes there at once (the address joins the list).
// - Kind 'unavailable' (the node answered it: an owner down, a map not yet settled, a node
//   cut off from etcd; or found here: the connection could not be opened or was lost)
//   sends the call to the next address after a jittered exponential backoff (BACKOFF_MS
//   doubling up to MAX_BACKOFF_MS, each pause a random 50-100% of it). More than MAX_MOVES
//   'moved' answers in a row (nodes whose views of the map disagree) pause the same way.
//   The call is tried again until `retryForMs` has passed since it began; then it rejects
//   with the last error. Every other error rejects at once.
// - An `append_event` whose event has no id gets one here, before the first try, so every
//   try sends the same id: the server answers an id already stored in the session with the
//   stored event instead of appending again, and a try whose answer was lost is not applied
//   twice. Other writes are not made idempotent: a retried create_session with an id may
//   reject with 'already_exists', one without an id may have created a session nobody
//   returned, a retried delete may find nothing.
// - One Connection per address, opened on first use with the given token and TLS options;
//   one that failed is dropped and opened again on the next try. A node that stops
//   answering without closing the connection holds the call (as a single-address
//   connection does).
// - close() closes every connection after the answers already owed; calls after it, and
//   calls between tries when it comes, reject with kind 'unavailable'.
import { randomUUID } from 'node:crypto';
import { performance } from 'node:perf_hooks';
import { Connection, parseAddress } from './connection.js';
import { AgentStateError, invalid } from './errors.js';

/** The first pause after a retryable answer; it doubles up to MAX_BACKOFF_MS. */
export const BACKOFF_MS = 50;
export const MAX_BACKOFF_MS = 1000;
/** How long a call is retried by default (Python's ClusterClient: retry_for=10.0). */
export const DEFAULT_RETRY_FOR_MS = 10000;
/** 'moved' answers followed in a row before the call pauses as for 'unavailable'. */
export const MAX_MOVES = 8;

/** The address as a key: 'HOST:PORT' ('[V6]:PORT') or 'unix:PATH'. */
function addressKey(address) {
  const a = parseAddress(address);
  if (a.path !== undefined) return `unix:${a.path}`;
  return a.host.includes(':') ? `[${a.host}]:${a.port}` : `${a.host}:${a.port}`;
}

function sleep(ms) {
  return new Promise((resolve) => { setTimeout(resolve, ms); });
}

export class ClusterConnection {
  #addresses;
  #current = 0;
  #conns = new Map();
  #token;
  #tls;
  #retryForMs;
  #closed = false;

  /**
   * @param {{ addresses: string[], token?: string, tls?: object, retryForMs?: number }} target
   *   node addresses as parseAddress takes them; `token` and `tls` (node's tls.connect
   *   options) for every connection; `retryForMs` as the contract says.
   */
  constructor({ addresses, token, tls, retryForMs = DEFAULT_RETRY_FOR_MS }) {
    if (!Array.isArray(addresses) || addresses.length === 0) {
      throw invalid("addresses must be a non-empty array of node addresses ['HOST:PORT', ...]");
    }
    this.#addresses = [];
    for (const a of addresses) {
      const key = addressKey(a);
      if (tls !== undefined && key.startsWith('unix:')) {
        throw invalid('tls applies to TCP addresses; a Unix socket is not encrypted');
      }
      if (!this.#addresses.includes(key)) this.#addresses.push(key);
    }
    if (typeof retryForMs !== 'number' || !Number.isFinite(retryForMs) || retryForMs < 0) {
      throw invalid(`retryForMs must be a finite number >= 0, not ${String(retryForMs)}`);
    }
    this.#token = token;
    this.#tls = tls;
    this.#retryForMs = retryForMs;
  }

  /** No process is spawned for a cluster. */
  get pid() {
    return undefined;
  }

  #connection(address) {
    let conn = this.#conns.get(address);
    if (conn === undefined) {
      const target = parseAddress(address);
      if (this.#token !== undefined) target.token = this.#token;
      if (this.#tls !== undefined) target.tls = this.#tls;
      conn = new Connection(target);
      this.#conns.set(address, conn);
    }
    return conn;
  }

  // A connection that failed (lost, refused, or ended by the server) keeps failing every
  // call: it goes, and the next try opens a new one.
  #drop(address, conn) {
    if (this.#conns.get(address) === conn) this.#conns.delete(address);
    conn.close().catch(() => {});
  }

  /** Sends one request as the contract says; resolves with its `result`. */
  async call(method, params) {
    if (method === 'append_event' && params !== null && typeof params === 'object'
        && params.event !== null && typeof params.event === 'object' && !params.event.id) {
      params = { ...params, event: { ...params.event, id: randomUUID() } };
    }
    const deadline = performance.now() + this.#retryForMs;
    let wait = BACKOFF_MS;
    let moves = 0;
    let address = this.#addresses[this.#current];
    for (;;) {
      if (this.#closed) throw new AgentStateError('unavailable', 'the session service is closed');
      const conn = this.#connection(address);
      let error;
      try {
        const result = await conn.call(method, params);
        this.#current = this.#addresses.indexOf(address);
        return result;
      } catch (err) {
        error = err;
      }
      if (!(error instanceof AgentStateError)) throw error;
      if (conn.failed) this.#drop(address, conn);
      let next;
      if (error.kind === 'moved') {
        let owner;
        try {
          owner = addressKey(error.data && error.data.address);
        } catch {
          throw error; // no address to follow
        }
        if (!this.#addresses.includes(owner)) this.#addresses.push(owner);
        if (moves < MAX_MOVES) {
          moves += 1;
          address = owner;
          continue;
        }
        next = owner; // moved too often in a row: pause, then the owner again
      } else if (error.kind !== 'unavailable' || this.#closed) {
        throw error;
      }
      const now = performance.now();
      if (now >= deadline) throw error;
      // The pause ends by the deadline; a try that fails at or after it is the last.
      await sleep(Math.min(wait * (0.5 + Math.random() / 2), deadline - now));
      wait = Math.min(wait * 2, MAX_BACKOFF_MS);
      moves = 0;
      if (next !== undefined) {
        address = next;
      } else {
        const i = this.#addresses.indexOf(address);
        address = this.#addresses[(i + 1) % this.#addresses.length];
      }
    }
  }

  /**
   * Starts a watch on the node that answered last (params as the protocol's `watch`;
   * a watch of scope app or all there spans the cluster's nodes). Not retried: a watch
   * that fails to start, or ends with its node, is resumed by a new watch from its cursor.
   */
  watch(params, options) {
    if (this.#closed) return Promise.reject(new AgentStateError('unavailable', 'the session service is closed'));
    const address = this.#addresses[this.#current];
    const conn = this.#connection(address);
    return conn.watch(params, options).catch((err) => {
      if (conn.failed) this.#drop(address, conn);
      throw err;
    });
  }

  /** Closes every connection after the answers already owed. Idempotent. */
  async close() {
    this.#closed = true;
    const conns = [...this.#conns.values()];
    this.#conns.clear();
    await Promise.all(conns.map((c) => c.close()));
  }
}
