// SPDX-License-Identifier: Apache-2.0
import type {
  BaseSessionService,
  Event,
  Session,
} from '@google/adk';

/** The protocol's error kinds (`data.kind`, docs/protocol.md "Errors"). */
export type AgentStateErrorKind =
  | 'already_exists'
  | 'not_found'
  | 'invalid_argument'
  | 'version_conflict'
  | 'too_large'
  | 'storage_full'
  | 'io_error'
  | 'unavailable'
  | 'internal'
  | 'data_corrupt'
  | 'unauthenticated'
  | 'permission_denied'
  | 'condition_failed'
  | 'cursor_expired'
  | 'moved';

export declare const ERROR_KINDS: readonly AgentStateErrorKind[];

/**
 * Every failure this package reports. Branch on `kind`.
 * - `already_exists`: createSession with a session id already used by that app and user.
 * - `invalid_argument`: a bad option or parameter, or an event member that could not be
 *   read back as given (see the README, "How events are stored").
 * - `unavailable`: the server is not running (not started, exited, closed) or the
 *   service was closed; with `addresses`, no node served the call within `retryForMs`
 *   (its shard's owner is down, say).
 * - `moved`: a cluster node started with `--no-forward` does not own the call's shard
 *   (`data`: `shard`, `owner`, `address`, `epoch`). With `address` it reaches the caller;
 *   with `addresses` the call follows it to the owner.
 * - `unauthenticated`: the server requires a token and none was given, or it refused it.
 * - `permission_denied`: the token does not grant the app a call names.
 */
export declare class AgentStateError extends Error {
  readonly name: 'AgentStateError';
  /** The protocol's `data.kind`. */
  readonly kind: AgentStateErrorKind;
  /** The JSON-RPC error code when the server answered; undefined for failures found locally. */
  readonly code: number | undefined;
  /** The error's `data` object as the server sent it (e.g. `current_version`), if any. */
  readonly data: Record<string, unknown> | undefined;
}

/**
 * node's tls.connect options, passed as given (declared here without @types/node; any
 * other tls.connect option is accepted too). Host and port come from `address`.
 */
export interface AgentStateTlsOptions {
  /** CAs to trust instead of node's default list (a private CA, a self-signed server). */
  ca?: string | Uint8Array | Array<string | Uint8Array>;
  /** The client's certificate chain and key, for a server with `--tls-client-ca`. */
  cert?: string | Uint8Array | Array<string | Uint8Array>;
  key?: string | Uint8Array | Array<string | Uint8Array>;
  /** The name the server's certificate is checked against (default: the address's host). */
  servername?: string;
  rejectUnauthorized?: boolean;
  host?: never;
  port?: never;
  path?: never;
  socket?: never;
  [option: string]: unknown;
}

/** The engine's limits (include/agentstate/options.hpp `limits`), in bytes. */
export interface AgentStateLimits {
  /** The largest event as stored (JSON), default 1 MiB. */
  maxEventBytes?: number;
  /** The largest state value, default 1 MiB. */
  maxValueBytes?: number;
  /** The largest initial state of a createSession, default 4 MiB. */
  maxStateBytes?: number;
  /** Nesting of each value given, default 64. */
  maxJsonDepth?: number;
  /** The largest answer one read builds, default 64 MiB. */
  maxResponseBytes?: number;
}

/** The engine run in this process (`store` or `memory` without `spawn`) takes these. */
interface EngineOptions {
  /** Engine worker threads; default (0) one per core. */
  threads?: number;
  /** How long a waiting engine thread polls before it sleeps, in microseconds (default 50, at most 10000; 0: never polls). */
  spinWaitUs?: number;
  /** The store's size limit; past it writes fail with `storage_full` (default 64 GiB). */
  maxStoreBytes?: number;
  /** A session idle this long is passivated (default 60000). */
  idleTimeoutMs?: number;
  /** Sessions expire this long after creation (default 0: never). */
  sessionTtlMs?: number;
  /** Each stored append moves a session's expiry to `sessionTtlMs` past it. */
  refreshTtl?: boolean;
  /** How much of the change log is kept (default 1,000,000 changes, 7 days). */
  changeRetention?: { maxEntries?: number; maxAgeMs?: number };
  limits?: AgentStateLimits;
}

/** What a store (`store` or `memory`) takes; an `address` takes none of it. */
interface StoreOptions {
  /**
   * Run `agentstate serve` as a child process instead of the engine in this process
   * (implied by `binary`). The engine options are the engine's in this process only.
   */
  spawn?: boolean;
  /** The agentstate binary to spawn (implies `spawn`); default `AGENTSTATE_BIN`, else `agentstate` on PATH. */
  binary?: string;
  /** `sync` (default): acknowledged after fsync; `nosync`: survives a crash of the process, not of the OS. */
  durability?: 'sync' | 'nosync';
  address?: never;
  addresses?: never;
  retryForMs?: never;
  token?: never;
  tls?: never;
}

type NoEngineOptions = { [K in keyof EngineOptions]?: never };

/** What a running server (`address`) or cluster (`addresses`) takes. */
interface ConnectOptions {
  /**
   * Sent in `authenticate` as each connection's first request (a server started with
   * `--auth-file`); calls wait for its answer. A refused token rejects every call
   * with kind 'unauthenticated'.
   */
  token?: string;
  /**
   * TLS on TCP addresses (`serve --tls-cert`): true, or node's tls.connect options
   * (`ca`, `cert` and `key` for mutual TLS, `servername`, ...); host and port come
   * from the address.
   */
  tls?: boolean | AgentStateTlsOptions;
  store?: never;
  memory?: never;
  spawn?: never;
  binary?: never;
  durability?: never;
}

/** Exactly one of `store`, `memory`, `address` and `addresses`. */
export type AgentStateSessionServiceOptions =
  | (StoreOptions & EngineOptions & {
      /** The LMDB store in DIR (created if missing), opened by the engine in this process. */
      store: string;
      memory?: never;
      spawn?: false;
      binary?: never;
    })
  | (StoreOptions & EngineOptions & {
      /** An in-memory store in this process: nothing is kept after close(). */
      memory: true;
      store?: never;
      spawn?: false;
      binary?: never;
    })
  | (StoreOptions & NoEngineOptions & {
      /** With `spawn` or `binary`: `agentstate serve --store DIR` as a child process. */
      store: string;
      memory?: never;
    })
  | (StoreOptions & NoEngineOptions & {
      /** With `spawn` or `binary`: `agentstate serve --memory` as a child process. */
      memory: true;
      store?: never;
    })
  | (ConnectOptions & NoEngineOptions & {
      /**
       * Connect to `agentstate serve --listen`: 'HOST:PORT' ('[::1]:7400' for IPv6) over
       * TCP, or 'unix:PATH' for a Unix socket.
       */
      address: string;
      addresses?: never;
      /**
       * The connection survives the server's restart: it is opened again after a jittered
       * exponential backoff (50 ms doubling up to 1 s), and calls whose answer was lost are
       * sent again when that is safe (reads, deletes, appends: an event without an id gets
       * one first); a `createSession` or `fork` in doubt rejects with kind 'unavailable'
       * and `data.in_doubt`. A call is tried for this many milliseconds from its start
       * (default 10000; 0: one try), then rejects with kind 'unavailable'.
       */
      retryForMs?: number;
    })
  | (ConnectOptions & NoEngineOptions & {
      /**
       * Nodes of one cluster (`serve --cluster`), 'HOST:PORT' each; one is enough. A call
       * goes to the node that answered last, follows a `moved` answer to the owner's
       * address, and after `unavailable` (or a lost connection) tries the next node after
       * a jittered exponential backoff (50 ms doubling up to 1 s). One connection per
       * address. An appended event without an id gets one before the first try, so a
       * retried append is not applied twice.
       */
      addresses: string[];
      /**
       * How long a call is tried again after `unavailable` or `moved` answers, in
       * milliseconds from its start (default 10000; 0: one try); then it rejects with the
       * last error.
       */
      retryForMs?: number;
      address?: never;
    });

/**
 * A Session this package returns. What agentstate adds is set as non-enumerable members
 * (outside ADK's Session shape: not in JSON, copies or deep comparisons), when known.
 */
export interface AgentStateSession extends Session {
  /** How many events are stored (after appendEvent on this object: the append's version). */
  version?: number;
  /** The point in the change feed this session shows: readChanges or watch from it misses nothing. */
  cursor?: string;
  /** When the session expires, in epoch milliseconds; absent when it does not. */
  expiresAt?: number;
  /** With getSession's `asOfVersion`: the version shown; `app:` and `user:` state are the current ones. */
  asOf?: { version: number; sharedState: 'current'; exact: boolean };
}

/** An atomic update of one state key, resolved at commit (docs/protocol.md, "append_event"). */
export type AgentStateModify =
  | { key: string; op: 'increment'; by: number }
  | { key: string; op: 'append'; value: unknown }
  | { key: string; op: 'merge'; value: Record<string, unknown> }
  | { key: string; op: 'set_if_absent'; value: unknown }
  | { key: string; op: 'compare_and_set'; expected: unknown; value: unknown };

/** Names a session. */
export interface AgentStateSessionKey {
  appName: string;
  userId: string;
  sessionId: string;
}

/** The point of a rewind: just before an invocation's first event, or after version N - 1. */
export type AgentStateRewindPoint =
  | { beforeInvocationId: string; beforeVersion?: never }
  | { beforeVersion: number; beforeInvocationId?: never };

/** The change feed's filters (readChanges, watch). */
export type AgentStateChangeScope =
  | { scope: 'session'; appName: string; userId: string; sessionId: string }
  | { scope: 'user'; appName: string; userId: string; sessionId?: never }
  | { scope: 'app'; appName: string; userId?: never; sessionId?: never }
  | { scope: 'all'; appName?: never; userId?: never; sessionId?: never };

export type AgentStateChangeFilter = AgentStateChangeScope & {
  /** `user`/`app`: every change of every session inside too, events included (default false). */
  includeSessions?: boolean;
  /** Only keys starting with it (as an event names them: 'user:cart'). */
  keyPrefix?: string;
  /** A cursor (a session's, a change's, a page's, a watch's) to start after, or 'start'. */
  from?: string;
};

/** One committed change of the feed. */
export interface AgentStateChange {
  cursor: string;
  kind: 'create' | 'append' | 'delete' | 'delete_user' | 'delete_app';
  appName: string;
  userId: string;
  sessionId: string;
  /** The session's version after the change. */
  version: number;
  /** The keys set, with their committed values (prefixed as in an event). */
  stateDelta: Record<string, unknown>;
  stateRemove: string[];
  /** An append's event, when the read includes sessions. */
  event?: Event;
}

/** A batch of a watch: changes in commit order, and the cursor after them. */
export interface AgentStateChangeBatch {
  changes: AgentStateChange[];
  cursor: string;
}

/**
 * A live watch of the change feed: an async iterator of batches. Batches received before
 * the watch ended are handed out first; then iteration is done after close() (or
 * `break`), and any other end rejects next() once with an AgentStateError whose `data`
 * has `reason` and `resume_from`: kind 'unavailable' (the server shut down, the
 * connection was lost), 'cursor_expired', 'permission_denied', 'too_large' (more than
 * `maxBufferBytes` waited for the consumer), or the server's error kind. While live it
 * keeps node's event loop alive.
 */
export declare class AgentStateWatch implements AsyncIterableIterator<AgentStateChangeBatch> {
  private constructor();
  /** The server's id of the watch. */
  readonly id: string;
  /** The point after the last batch handed out: a new watch from it misses and repeats nothing. */
  readonly cursor: string;
  /** Why and where it ended; undefined while live. */
  readonly ended: { reason: string; resumeFrom: string } | undefined;
  next(): Promise<IteratorResult<AgentStateChangeBatch, undefined>>;
  return(): Promise<IteratorResult<AgentStateChangeBatch, undefined>>;
  [Symbol.asyncIterator](): AgentStateWatch;
  /** Unwatches, drops the batches not handed out, resolves with `cursor`. Idempotent. */
  close(): Promise<string>;
}

type ServiceMethods = Pick<BaseSessionService,
  'createSession' | 'getSession' | 'listSessions' | 'deleteSession' | 'appendEvent' | 'getOrCreateSession'>;

/**
 * ADK-JS's BaseSessionService stored in agentstate. All methods may be called
 * concurrently; they share the engine in this process (`store`, `memory`), or one
 * pipelined connection (a spawned server, `address`; one per node with `addresses`).
 * Methods reject with AgentStateError.
 */
export declare class AgentStateSessionService extends BaseSessionService {
  constructor(options: AgentStateSessionServiceOptions);
  /**
   * `ttlMs`: the session expires this long after creation (0: never; default: the
   * engine's `sessionTtlMs` or the server's --session-ttl-s); `refreshTtl`: each stored
   * append moves the expiry to `ttlMs` past it (needs a TTL). The protocol has no TTL
   * update after creation.
   */
  createSession(request: Parameters<ServiceMethods['createSession']>[0] & {
    ttlMs?: number; refreshTtl?: boolean;
  }): Promise<AgentStateSession>;
  /**
   * `asOfVersion`: the session as it was after that version (0: as created), its `asOf`
   * set; `applyRewinds`: without rewind events and the events they undid.
   */
  getSession(request: Parameters<ServiceMethods['getSession']>[0] & {
    asOfVersion?: number; applyRewinds?: boolean;
  }): Promise<AgentStateSession | undefined>;
  listSessions(request: Parameters<ServiceMethods['listSessions']>[0]): ReturnType<ServiceMethods['listSessions']>;
  deleteSession(request: Parameters<ServiceMethods['deleteSession']>[0]): Promise<void>;
  /**
   * `expectedVersion`: store it only at that version (else 'version_conflict' with
   * `data.current_version`); `modify`: atomic updates resolved at commit (their results
   * land in the event's `actions.stateDelta`; 'condition_failed' when a compare_and_set
   * finds another value). Sets the session's `version` and `cursor`.
   */
  appendEvent(request: {
    session: Session; event: Event; expectedVersion?: number; modify?: AgentStateModify[];
  }): Promise<Event>;
  /** Deletes the user's sessions and `user:` state. */
  deleteUser(request: { appName: string; userId: string }): Promise<void>;
  /** Deletes the app's sessions, its users' `user:` state and its `app:` state. */
  deleteApp(request: { appName: string }): Promise<void>;
  /**
   * Appends the event restoring the session's own state at the point. `eventId`:
   * re-sending a stored one answers the stored rewind.
   */
  rewind(request: AgentStateSessionKey & AgentStateRewindPoint & {
    eventId?: string; expectedVersion?: number;
  }): Promise<{ event: Event; version: number; cursor: string }>;
  /** What rewind() would write now; writes nothing. */
  rewindPlan(request: AgentStateSessionKey & AgentStateRewindPoint & { expectedVersion?: number }): Promise<{
    stateDelta: Record<string, unknown>; stateRemove: string[]; beforeVersion: number; exact: boolean;
  }>;
  /** The session's invocations in the order of their first event. */
  listInvocations(request: AgentStateSessionKey): Promise<Array<{
    invocationId: string; firstVersion: number; lastVersion: number; events: number;
    annulled: boolean; rewind: boolean;
  }>>;
  /** A new session with the source's events 1..atVersion and its state then (without events). */
  fork(request: AgentStateSessionKey & { atVersion: number; newSessionId?: string }): Promise<AgentStateSession>;
  /** One page of the change feed; pass `cursor` as the next `from`. */
  readChanges(request: AgentStateChangeFilter & { limit?: number }): Promise<{
    changes: AgentStateChange[]; cursor: string; atHead: boolean;
  }>;
  /**
   * A live watch (`from` absent: from the newest change now). `maxBufferBytes` bounds
   * what waits for the consumer (default 64 MiB). With `addresses`: on the node that
   * answered last, not retried.
   */
  watch(request: AgentStateChangeFilter & { maxBufferBytes?: number }): Promise<AgentStateWatch>;
  getOrCreateSession(request: Parameters<ServiceMethods['getOrCreateSession']>[0]): Promise<AgentStateSession>;
  /** The spawned server's process id; undefined in this process and at an address or addresses. */
  readonly serverPid: number | undefined;
  /**
   * Answers the calls already made, then: the engine in this process syncs and releases
   * its store (rejecting with the engine's error when it could not open or close it); a
   * spawned server flushes and must exit 0 (else this rejects with kind 'unavailable');
   * a connection ends. Idempotent.
   */
  close(): Promise<void>;
}
