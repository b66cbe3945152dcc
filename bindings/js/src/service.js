// SPDX-License-Identifier: Apache-2.0
// AgentStateSessionService: ADK-JS's BaseSessionService over agentstate's protocol.
//
// Contract: each method keeps the meaning @google/adk 2.0.0 gives it (its
// InMemorySessionService is the reference), with the stored data in agentstate; the
// differences are deliberate and listed in README.md ("Where it differs from ADK-JS").
// Many concurrent calls from one process are the normal case: they share one engine
// in this process (`store`, `memory`: src/inprocess.js), one pipelined connection to a
// spawned server (src/connection.js) or to a server at an address (src/reconnect.js,
// which reconnects and retries), or one per cluster node (`addresses`: src/cluster.js,
// which also retries). Every mode speaks the same
// protocol requests and gets the same answers. Methods never block the event loop; each
// costs one request, except listSessions (one per 1,000 sessions listed),
// getOrCreateSession (up to three) and close().
import path from 'node:path';
import { BaseSessionService } from '@google/adk';
import { ClusterConnection } from './cluster.js';
import { Connection, parseAddress } from './connection.js';
import { AgentStateError, invalid } from './errors.js';
import { InProcessConnection } from './inprocess.js';
import { ReconnectingConnection } from './reconnect.js';
import {
  eventFromWire, eventToWire, msToSeconds, secondsToMs, sessionFromWire, setSessionMeta,
} from './mapping.js';
import {
  changeParams, connectOptions, optionalBoolean, optionalCount, optionalString, requireName, rewindParams, sessionParams,
} from './params.js';
import { changeFromWire, checkMaxBufferBytes } from './watch.js';

const PAGE_MAX = 1000;

// The options of the engine in this process (src/inprocess.js, native/addon.cpp): the
// engine's own options (include/agentstate/options.hpp), times in milliseconds.
const ENGINE_COUNTS = ['threads', 'spinWaitUs', 'maxStoreBytes', 'idleTimeoutMs', 'sessionTtlMs'];
const ENGINE_GROUPS = {
  limits: ['maxEventBytes', 'maxValueBytes', 'maxStateBytes', 'maxJsonDepth', 'maxResponseBytes'],
  changeRetention: ['maxEntries', 'maxAgeMs'],
};
const ENGINE_OPTIONS = [...ENGINE_COUNTS, 'refreshTtl', ...Object.keys(ENGINE_GROUPS)];

function checkCount(what, value) {
  if (!Number.isSafeInteger(value) || value < 0) {
    throw invalid(`${what} must be an integer >= 0, not ${String(value)}`);
  }
}

// { store } or { memory } with the engine's options, checked, for InProcessConnection.
function engineOptions(options) {
  const out = {};
  if (options.store !== undefined) out.store = path.resolve(options.store);
  else out.memory = true;
  if (options.durability !== undefined) out.durability = options.durability;
  for (const key of ENGINE_COUNTS) {
    if (options[key] !== undefined) {
      checkCount(key, options[key]);
      out[key] = options[key];
    }
  }
  if (options.refreshTtl !== undefined) {
    if (typeof options.refreshTtl !== 'boolean') throw invalid('refreshTtl must be a boolean');
    out.refreshTtl = options.refreshTtl;
  }
  for (const [group, keys] of Object.entries(ENGINE_GROUPS)) {
    const given = options[group];
    if (given === undefined) continue;
    if (given === null || typeof given !== 'object' || Array.isArray(given)) {
      throw invalid(`${group} must be an object with any of ${keys.join(', ')}`);
    }
    const checked = {};
    for (const [key, value] of Object.entries(given)) {
      if (!keys.includes(key)) throw invalid(`unknown ${group} option '${key}' (known: ${keys.join(', ')})`);
      checkCount(`${group}.${key}`, value);
      checked[key] = value;
    }
    out[group] = checked;
  }
  return out;
}

function resolveTarget(options) {
  if (options === null || typeof options !== 'object') {
    throw invalid("options must be an object: { store: DIR } | { memory: true } | { address: 'HOST:PORT' | 'unix:PATH' } | { addresses: ['HOST:PORT', ...] }");
  }
  const known = new Set(['store', 'memory', 'address', 'addresses', 'retryForMs', 'spawn', 'binary',
    'durability', 'token', 'tls', ...ENGINE_OPTIONS]);
  for (const key of Object.keys(options)) {
    if (!known.has(key)) throw invalid(`unknown option '${key}' (known: ${[...known].join(', ')})`);
  }
  const { store, memory, address, addresses, binary, durability, token } = options;
  const given = [store !== undefined && 'store', memory !== undefined && 'memory',
    address !== undefined && 'address', addresses !== undefined && 'addresses'].filter(Boolean);
  if (given.length !== 1) {
    throw invalid(`give exactly one of store, memory, address and addresses (given: ${given.join(', ') || 'none'})`);
  }
  if (durability !== undefined && durability !== 'sync' && durability !== 'nosync') {
    throw invalid(`durability must be 'sync' or 'nosync', not ${JSON.stringify(durability)}`);
  }
  if (options.spawn !== undefined && options.spawn !== true && options.spawn !== false) {
    throw invalid('spawn must be a boolean');
  }
  const spawned = options.spawn === true || (binary !== undefined && options.spawn !== false);
  if (options.spawn === false && binary !== undefined) {
    throw invalid('binary applies to a spawned server (spawn: true)');
  }
  const engineGiven = ENGINE_OPTIONS.filter((k) => options[k] !== undefined);
  if (engineGiven.length > 0 && (spawned || address !== undefined || addresses !== undefined)) {
    throw invalid(`${engineGiven.join(', ')} apply to the engine in this process ({ store } or { memory: true } without spawn or binary)`);
  }
  if (options.spawn !== undefined && (address !== undefined || addresses !== undefined)) {
    throw invalid('spawn applies to store and memory, not to an address');
  }
  if (options.retryForMs !== undefined && addresses === undefined && address === undefined) {
    throw invalid('retryForMs applies to a server at an address or the nodes of a cluster (address, addresses)');
  }
  if (addresses !== undefined) {
    if (durability !== undefined) {
      throw invalid('durability applies to a server this service starts; a cluster\'s nodes have their own');
    }
    if (binary !== undefined) throw invalid('binary applies to a server this service starts, not to addresses');
    if (!Array.isArray(addresses)) throw invalid("addresses must be an array of node addresses ['HOST:PORT', ...]");
    const unix = addresses.some((a) => typeof a === 'string' && a.startsWith('unix:'));
    return { cluster: { addresses, retryForMs: options.retryForMs, ...connectOptions(options, unix) } };
  }
  if (address !== undefined) {
    if (durability !== undefined) {
      throw invalid('durability applies to a server this service starts; a server at an address has its own');
    }
    if (binary !== undefined) throw invalid('binary applies to a server this service starts, not to address');
    const target = parseAddress(address);
    const reconnect = { ...target, ...connectOptions(options, target.path !== undefined) };
    if (options.retryForMs !== undefined) reconnect.retryForMs = options.retryForMs;
    return { reconnect };
  }
  if (token !== undefined) {
    throw invalid('token applies to a server at an address; the engine in this process and a spawned server need none');
  }
  if (options.tls !== undefined) throw invalid('tls applies to a server at an address, not to a store');
  if (store !== undefined) {
    if (typeof store !== 'string' || store === '') throw invalid('store must be a non-empty directory path');
  } else if (memory !== true) {
    throw invalid('memory must be true when given');
  }
  if (!spawned) return { inProcess: engineOptions(options) };
  const args = store !== undefined ? ['serve', '--store', path.resolve(store)] : ['serve', '--memory'];
  if (durability !== undefined) args.push('--durability', durability);
  if (binary !== undefined && (typeof binary !== 'string' || binary === '')) {
    throw invalid('binary must be a non-empty path');
  }
  const bin = binary ?? (process.env.AGENTSTATE_BIN || 'agentstate');
  return { bin, args };
}

export class AgentStateSessionService extends BaseSessionService {
  #conn;

  /**
   * @param {{store?: string, memory?: true, address?: string, addresses?: string[],
   *          retryForMs?: number, spawn?: boolean, binary?: string,
   *          durability?: 'sync'|'nosync', token?: string, tls?: true|object}} options
   *   (and the engine's options in this process: README.md, "Options")
   */
  constructor(options) {
    super();
    const target = resolveTarget(options);
    if (target.inProcess !== undefined) this.#conn = new InProcessConnection(target.inProcess);
    else if (target.cluster !== undefined) this.#conn = new ClusterConnection(target.cluster);
    else if (target.reconnect !== undefined) this.#conn = new ReconnectingConnection(target.reconnect);
    else this.#conn = new Connection(target);
  }

  /** The spawned server's process id; undefined in this process and at an address. */
  get serverPid() {
    return this.#conn.pid;
  }

  /**
   * ADK's createSession; agentstate adds `ttlMs` (the session expires this long after
   * its creation; 0: never; default: the engine's or server's) and `refreshTtl` (each
   * stored append moves the expiry to `ttlMs` past it). The session's expiry is its
   * `expiresAt` (milliseconds).
   */
  async createSession({ appName, userId, state, sessionId, ttlMs, refreshTtl } = {}) {
    const params = {
      app_name: requireName('appName', appName),
      user_id: requireName('userId', userId),
    };
    if (sessionId !== undefined && sessionId !== null && sessionId !== '') {
      params.session_id = requireName('sessionId', sessionId);
    }
    if (state !== undefined && state !== null) {
      if (typeof state !== 'object' || Array.isArray(state)) throw invalid('state must be an object');
      params.state = state;
    }
    if (ttlMs !== undefined && ttlMs !== null) {
      if (typeof ttlMs !== 'number' || !Number.isFinite(ttlMs) || ttlMs < 0) {
        throw invalid(`ttlMs must be a finite number of milliseconds >= 0, not ${String(ttlMs)}`);
      }
      params.ttl_s = ttlMs / 1000;
    }
    const refresh = optionalBoolean('refreshTtl', refreshTtl);
    if (refresh !== undefined) params.refresh_ttl = refresh;
    return sessionFromWire(await this.#conn.call('create_session', params));
  }

  /**
   * ADK's getSession; agentstate adds `asOfVersion` (the session as it was after that
   * version: its events up to it and its own state then; `asOf` says so) and
   * `applyRewinds` (leave out rewind events and the events they undid).
   */
  async getSession({ appName, userId, sessionId, config, asOfVersion, applyRewinds } = {}) {
    const params = {
      app_name: requireName('appName', appName),
      user_id: requireName('userId', userId),
      session_id: requireName('sessionId', sessionId),
    };
    if (config !== undefined && config !== null) {
      // numRecentEvents: absent is every event, 0 none (as ADK's fix of #5730 has it;
      // ADK-JS 2.0.0 reads 0 as every event). afterTimestamp 0 is no time filter.
      const n = optionalCount('config.numRecentEvents', config.numRecentEvents);
      if (n !== undefined) params.num_recent_events = n;
      const after = config.afterTimestamp;
      if (after !== undefined && after !== null) {
        if (typeof after !== 'number' || !Number.isFinite(after)) {
          throw invalid(`config.afterTimestamp must be a finite number of milliseconds, not ${String(after)}`);
        }
        if (after) params.after_timestamp = msToSeconds(after);
      }
    }
    const asOf = optionalCount('asOfVersion', asOfVersion);
    if (asOf !== undefined) params.as_of_version = asOf;
    const rewinds = optionalBoolean('applyRewinds', applyRewinds);
    if (rewinds !== undefined) params.apply_rewinds = rewinds;
    const wire = await this.#conn.call('get_session', params);
    return wire === null ? undefined : sessionFromWire(wire);
  }

  async listSessions({ appName, userId, limit, offset, page, order } = {}) {
    const base = { app_name: requireName('appName', appName) };
    if (userId !== undefined && userId !== null) base.user_id = requireName('userId', userId);
    if (order !== undefined && order !== null) {
      if (order !== 'asc' && order !== 'desc') throw invalid(`order must be 'asc' or 'desc', not ${JSON.stringify(order)}`);
      base.order = order;
    }
    limit = optionalCount('limit', limit);
    offset = optionalCount('offset', offset);
    page = optionalCount('page', page, { min: 1 });

    if (limit === undefined) {
      // ADK returns every session (after `offset`) as one page.
      const { sessions, total } = await this.#collect(base, offset ?? 0, Infinity);
      const totalItems = total;
      return { sessions, page: 1, limit: totalItems, totalItems, totalPages: totalItems === 0 ? 0 : 1 };
    }
    const start = page !== undefined ? (page - 1) * limit : (offset ?? 0);
    const effectivePage = page !== undefined ? page : limit === 0 ? 1 : Math.floor(start / limit) + 1;
    const { sessions, total } = await this.#collect(base, start, limit);
    return {
      sessions,
      page: effectivePage,
      limit,
      totalItems: total,
      totalPages: limit === 0 ? 0 : Math.ceil(total / limit),
    };
  }

  // Up to `count` sessions from position `skip` on, and the number of all matching ones.
  // A cluster node does not serve `offset` on a listing of a whole app across its nodes
  // (invalid_argument naming 'offset'): then the first `skip` sessions are read and dropped.
  async #collect(base, skip, count) {
    try {
      return await this.#collectFrom(base, skip, count, true);
    } catch (e) {
      if (skip > 0 && e instanceof AgentStateError && e.kind === 'invalid_argument'
          && e.message.includes("'offset'")) {
        return this.#collectFrom(base, skip, count, false);
      }
      throw e;
    }
  }

  async #collectFrom(base, skip, count, serverSkips) {
    const sessions = [];
    let total;
    let token = null;
    let first = true;
    let toDrop = serverSkips ? 0 : skip;
    do {
      const want = toDrop > 0 ? PAGE_MAX : count - sessions.length;
      const params = { ...base, page_size: Math.max(1, Math.min(PAGE_MAX, want)) };
      if (first) {
        params.include_total = true;
        if (skip > 0 && serverSkips) params.offset = skip;
      } else {
        params.page_token = token;
      }
      const r = await this.#conn.call('list_sessions', params);
      if (first) {
        if (!Number.isSafeInteger(r.total)) {
          throw new AgentStateError('internal', 'list_sessions answered without total: the agentstate binary is older than this package needs');
        }
        total = r.total;
        first = false;
      }
      for (const s of r.sessions) {
        if (toDrop > 0) toDrop -= 1;
        else if (sessions.length < count) sessions.push(sessionFromWire(s));
      }
      token = r.next_page_token;
    } while (token !== null && token !== undefined && sessions.length < count);
    return { sessions, total };
  }

  async deleteSession({ appName, userId, sessionId } = {}) {
    await this.#conn.call('delete_session', {
      app_name: requireName('appName', appName),
      user_id: requireName('userId', userId),
      session_id: requireName('sessionId', sessionId),
    });
  }

  /**
   * Stores `event` in `session`, then updates the caller's `session` as ADK-JS does
   * (state delta applied without `temp:` keys, event appended or replaced by id,
   * lastUpdateTime set to the event's timestamp). Partial events are returned unstored.
   * When the event's id is already stored with a different event, nothing is changed:
   * the stored event is returned (and put into `session.events` in place of any copy).
   *
   * agentstate adds `expectedVersion` (store it only if the session is at that version,
   * else kind 'version_conflict' with `data.current_version`) and `modify` (atomic
   * updates of state keys resolved at commit, docs/protocol.md "append_event"; their
   * results become the event's `actions.stateDelta` members of those keys). The
   * session's `version` and `cursor` are set to the append's.
   */
  async appendEvent({ session, event, expectedVersion, modify } = {}) {
    if (event === null || typeof event !== 'object') throw invalid('event must be an object');
    if (event.partial) return event;
    if (session === null || typeof session !== 'object') throw invalid('session must be a Session object');
    const wire = eventToWire(event);
    const params = {
      app_name: requireName('session.appName', session.appName),
      user_id: requireName('session.userId', session.userId),
      session_id: requireName('session.id', session.id),
      event: wire,
    };
    const expected = optionalCount('expectedVersion', expectedVersion);
    if (expected !== undefined) params.expected_version = expected;
    if (modify !== undefined && modify !== null) {
      if (!Array.isArray(modify) || modify.some((m) => m === null || typeof m !== 'object' || Array.isArray(m))) {
        throw invalid('modify must be an array of { key, op, ... } objects');
      }
      params.modify = modify;
    }
    const result = await this.#conn.call('append_event', params);
    const stored = result.event;
    setSessionMeta(session, { version: result.version, cursor: result.cursor });
    if (!isSameEvent(wire, stored)) {
      const kept = eventFromWire(stored);
      replaceOrPush(session.events, kept);
      return kept;
    }
    // Server fill-ins (a generated id, the current time) become the caller's too.
    if (!event.id) event.id = stored.id;
    if (event.timestamp === undefined) event.timestamp = secondsToMs(stored.timestamp);
    if (params.modify !== undefined) {
      const delta = (stored.actions && stored.actions.state_delta) ?? {};
      if (event.actions === null || typeof event.actions !== 'object') event.actions = {};
      if (event.actions.stateDelta === null || typeof event.actions.stateDelta !== 'object') event.actions.stateDelta = {};
      for (const { key } of params.modify) {
        if (typeof key === 'string' && Object.hasOwn(delta, key)) event.actions.stateDelta[key] = delta[key];
      }
    }
    await this.#applyToSession(session, event);
    const removed = stored.actions && stored.actions.state_remove;
    if (Array.isArray(removed)) {
      for (const key of removed) delete session.state[key];
    }
    session.lastUpdateTime = event.timestamp;
    return event;
  }

  // ADK's own appendEvent (state delta, temp: trimming, then "replace the event with the
  // same id, else push") on the caller's session. ADK finds the id by scanning
  // session.events, which makes a session's appends quadratic; ids tells in O(1) whether
  // the id is there, and when it is not, ADK works on a view of the session whose events
  // list is empty and the event is pushed here. Cost: O(1) per append while the caller
  // leaves session.events to this service; one O(n) rebuild of ids after any other change.
  // The event reaches session.events before this returns to the event loop (as with
  // ADK's own call), so appends resolved in one order are listed in that order.
  async #applyToSession(session, event) {
    const events = session.events;
    const ids = Array.isArray(events) ? idsOf(events) : undefined;
    if (ids === undefined || ids.has(event.id)) {
      const done = super.appendEvent({ session, event });
      if (ids !== undefined) noteIds(events, ids);
      await done;
      return;
    }
    const view = Object.create(session, {
      events: { value: [], writable: true, enumerable: true, configurable: true },
    });
    const done = super.appendEvent({ session: view, event });
    moveAll(view.events, events);
    noteIds(events, ids);
    await done;
    if (view.events.length > 0) { // an ADK whose appendEvent pushes after an await
      moveAll(view.events, events);
      noteIds(events, idsOf(events));
    }
  }

  /**
   * The session if it exists, else a new one. Two calls racing on the same id both
   * resolve to the same stored session: the one whose create loses reads the winner's.
   */
  async getOrCreateSession(request = {}) {
    if (!request.sessionId) return this.createSession(request);
    const found = await this.getSession({
      appName: request.appName, userId: request.userId, sessionId: request.sessionId,
    });
    if (found) return found;
    try {
      return await this.createSession(request);
    } catch (err) {
      if (!(err instanceof AgentStateError) || err.kind !== 'already_exists') throw err;
    }
    const winner = await this.getSession({
      appName: request.appName, userId: request.userId, sessionId: request.sessionId,
    });
    if (!winner) {
      throw new AgentStateError('not_found',
        `session '${request.sessionId}' was created by another caller and deleted before it could be read`);
    }
    return winner;
  }

  /**
   * Deletes every session of the user and the user's `user:` state (one change of kind
   * 'delete_user' in the feed).
   */
  async deleteUser({ appName, userId } = {}) {
    await this.#conn.call('delete_user', {
      app_name: requireName('appName', appName),
      user_id: requireName('userId', userId),
    });
  }

  /** Deletes every session of every user of the app, their `user:` state and the app's `app:` state. */
  async deleteApp({ appName } = {}) {
    await this.#conn.call('delete_app', { app_name: requireName('appName', appName) });
  }

  /**
   * Appends the event that restores the session's own state as it was just before
   * `beforeInvocationId`'s first event, or after version `beforeVersion` - 1 (exactly
   * one). `eventId`: the rewind event's id (re-sending a stored one answers the stored
   * event); `expectedVersion` as appendEvent's. Resolves with { event, version, cursor }.
   */
  async rewind(request = {}) {
    const params = rewindParams(request);
    const eventId = optionalString('eventId', request.eventId);
    if (eventId !== undefined) params.event_id = eventId;
    const r = await this.#conn.call('rewind_session', params);
    return { event: eventFromWire(r.event), version: r.version, cursor: r.cursor };
  }

  /**
   * What rewind() would write now, writing nothing: { stateDelta, stateRemove,
   * beforeVersion, exact }.
   */
  async rewindPlan(request = {}) {
    const r = await this.#conn.call('rewind_plan', rewindParams(request));
    return {
      stateDelta: r.state_delta ?? {},
      stateRemove: r.state_remove ?? [],
      beforeVersion: r.before_version,
      exact: r.exact,
    };
  }

  /**
   * The session's invocations in the order of their first event: { invocationId,
   * firstVersion, lastVersion, events, annulled, rewind } each.
   */
  async listInvocations(request = {}) {
    const r = await this.#conn.call('list_invocations', sessionParams(request));
    return r.map((i) => ({
      invocationId: i.invocation_id,
      firstVersion: i.first_version,
      lastVersion: i.last_version,
      events: i.events,
      annulled: i.annulled,
      rewind: i.rewind,
    }));
  }

  /**
   * A new session of the same app and user with the source's events 1..`atVersion` and
   * its own state after that version (`newSessionId`, or a generated id). Resolves with
   * the new Session, without events.
   */
  async fork({ atVersion, newSessionId, ...source } = {}) {
    const params = sessionParams(source);
    if (atVersion === undefined || atVersion === null) throw invalid('atVersion is required');
    params.at_version = optionalCount('atVersion', atVersion);
    const id = optionalString('newSessionId', newSessionId);
    if (id !== undefined && id !== '') params.new_session_id = id;
    return sessionFromWire(await this.#conn.call('fork_session', params));
  }

  /**
   * One page of the change feed: { changes, cursor, atHead }. `scope` 'session', 'user',
   * 'app' or 'all' with the names it takes; `from` a cursor (a session's, a change's, a
   * page's, a watch's) or 'start'; `limit` 1..10000 (default 100). Pass `cursor` as the
   * next `from`.
   */
  async readChanges(request = {}) {
    const params = changeParams(request);
    const limit = optionalCount('limit', request.limit, { min: 1 });
    if (limit !== undefined) params.limit = limit;
    const r = await this.#conn.call('read_changes', params);
    return { changes: r.changes.map(changeFromWire), cursor: r.cursor, atHead: r.at_head };
  }

  /**
   * A live Watch of the change feed (src/watch.js): the filters of readChanges, `from`
   * absent: from the newest change now. `maxBufferBytes` bounds the batches waiting for
   * the consumer (default 64 MiB). close() it when done.
   */
  async watch(request = {}) {
    const params = changeParams(request);
    const maxBufferBytes = checkMaxBufferBytes(request.maxBufferBytes);
    return this.#conn.watch(params, { maxBufferBytes });
  }

  /**
   * Ends the connection after the answers already owed. A spawned server flushes its
   * store and must exit 0 (else this rejects with kind 'unavailable'). Later calls
   * reject with kind 'unavailable'. Idempotent.
   */
  close() {
    return this.#conn.close();
  }
}

// Whether the server stored this event (new, or an exact retry), rather than answering
// with a different event stored earlier under the same id.
function isSameEvent(sent, stored) {
  if (stored === null || typeof stored !== 'object') {
    throw new AgentStateError('internal', 'append_event answered without the stored event');
  }
  if (sent.timestamp !== undefined && sent.timestamp !== stored.timestamp) return false;
  if ((sent.invocation_id ?? '') !== stored.invocation_id) return false;
  if ((sent.author ?? '') !== stored.author) return false;
  return true;
}

// The ids in a session's events list as this service last left it. A list changed
// since (length, or the last element's identity, differs) is read again.
const knownIds = new WeakMap();

function idsOf(events) {
  const known = knownIds.get(events);
  if (known !== undefined && known.length === events.length
      && (events.length === 0 || known.last === events[events.length - 1])) {
    return known.ids;
  }
  const ids = new Set();
  for (const e of events) if (e !== null && typeof e === 'object') ids.add(e.id);
  return ids;
}

function noteIds(events, ids) {
  const last = events.length === 0 ? undefined : events[events.length - 1];
  if (last !== null && typeof last === 'object') ids.add(last.id);
  knownIds.set(events, { ids, length: events.length, last });
}

function moveAll(from, to) {
  for (const e of from) to.push(e);
  from.length = 0;
}

function replaceOrPush(events, event) {
  const i = events.findIndex((e) => e.id === event.id);
  if (i >= 0) events[i] = event;
  else events.push(event);
}
