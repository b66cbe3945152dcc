// SPDX-License-Identifier: Apache-2.0
// The engine in this process (native/addon.cpp, agentstate.node): the connection of
// AgentStateSessionService's `{ store }` and `{ memory: true }` modes. Same interface as
// Connection (call, close, failed, pid), same methods, checks, ordering and errors as
// `agentstate serve` (the addon runs the protocol's own request handling on the engine),
// without a process or a pipe.
//
// Contract:
// - The store is opened on a thread of the addon's; calls made before it is open wait
//   for it (in call order). A store that cannot be opened (locked by another process,
//   bad options) fails those calls, every later one and close() with the engine's error.
// - call() never blocks the event loop: the requests of one turn of the event loop go to
//   the addon's stream thread together (one hand-over, one wake-up); answers come back
//   through one thread-safe function, one JavaScript call per batch.
// - Every call settles exactly once: with the result, the engine's error as an
//   AgentStateError (the protocol's code, kind and data), or kind 'unavailable' once
//   the service is closed.
// - The engine's `changes` and `watch_ended` notifications go to the watch they name
//   (src/watch.js); close() ends the watches.
// - While no call is waiting and no watch is live, the engine does not keep node's
//   event loop alive; a
//   process that exits without close() closes the engine on its way out (acknowledged
//   writes are in the store).
// - close() takes no new calls, answers those made before it, closes the engine (sync,
//   then release the store). Idempotent.
import fs from 'node:fs';
import { createRequire } from 'node:module';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { AgentStateError, settleCall } from './errors.js';
import { startWatch, WatchRouter } from './watch.js';

const here = path.dirname(fileURLToPath(import.meta.url));
const require = createRequire(import.meta.url);

let addon;
let addonError;

/** Where a prebuilt addon for this platform is in the package (`npm pack` puts it there). */
export const PREBUILD_DIR = path.join(here, '..', 'prebuilds', `${process.platform}-${process.arch}`);

/**
 * Where agentstate.node is looked for: $AGENTSTATE_ADDON when set; else the package's
 * build/Release (a node-gyp style build), then the repository's CMake build tree; then
 * (addonPath) the package's prebuilt addon for this platform, found by node-gyp-build.
 */
export function addonCandidates() {
  if (process.env.AGENTSTATE_ADDON) return [process.env.AGENTSTATE_ADDON];
  return [
    path.join(here, '../build/Release/agentstate.node'),
    path.resolve(here, '../../../build/bindings/js/agentstate.node'),
  ];
}

/** The addon's file: the first candidate that exists, else the prebuilt one; throws Error saying where it looked. */
export function addonPath() {
  const tried = addonCandidates();
  const file = tried.find((f) => fs.existsSync(f));
  if (file !== undefined || process.env.AGENTSTATE_ADDON) {
    if (file === undefined) throw new Error(`not found (AGENTSTATE_ADDON=${tried[0]})`);
    return file;
  }
  try {
    // prebuilds/PLATFORM-ARCH/agentstate.napi.LIBC.node, as node-gyp-build names them.
    return require('node-gyp-build').resolve(path.join(here, '..'));
  } catch (err) {
    throw new Error(`not found (tried ${tried.join(', ')}, and ${PREBUILD_DIR}: ${err.message.trim()})`);
  }
}

/** The loaded addon; throws AgentStateError (unavailable) saying where it looked. */
export function loadAddon() {
  if (addon) return addon;
  if (addonError) throw addonError;
  try {
    addon = require(addonPath());
    return addon;
  } catch (err) {
    addonError = new AgentStateError('unavailable',
      `cannot load agentstate.node, the engine for { store } and { memory: true }: ${err.message}; ` +
      'build it (cmake --build build --target agentstate_node) and set AGENTSTATE_ADDON, ' +
      'or spawn a server instead ({ spawn: true })', { cause: err });
    throw addonError;
  }
}

// Engines not yet closed: kept reachable, so that an engine nobody closes stays open
// (and is closed by the addon at exit) rather than being collected.
const open = new Set();

export class InProcessConnection {
  #engine;
  #pending = new Map();
  #nextId = 1;
  #held = []; // lines of calls made before the store is open
  #queued = []; // lines of this turn, handed over by #flush
  #flushScheduled = false;
  #opened = false;
  #closing = false;
  #closed = false;
  #failure = null;
  #openError = null;
  #closeError = null;
  #referenced = false;
  #settled; // resolves once the open has succeeded or failed
  #settledResolve;
  #ended;
  #endedResolve;
  #describe;
  #watches = new WatchRouter((n) => { if (n > 0) this.#ref(); else this.#unrefIfIdle(); });

  /** @param {object} options the addon's engine options (src/service.js checks them) */
  constructor(options) {
    const native = loadAddon();
    this.#describe = options.store !== undefined ? `the store ${options.store}` : 'the memory store';
    this.#ended = new Promise((resolve) => { this.#endedResolve = resolve; });
    this.#settled = new Promise((resolve) => { this.#settledResolve = resolve; });
    this.#engine = new native.Engine(options, () => this.#onReady());
    open.add(this.#engine);
  }

  get failed() {
    return this.#failure !== null;
  }

  /** No server process: undefined. */
  get pid() {
    return undefined;
  }

  /**
   * Sends one request; resolves with its `result`, or with what `onResult(result)` gives:
   * it runs as the answer is read, before the engine's next line.
   */
  call(method, params, onResult) {
    if (this.#failure) return Promise.reject(this.#failure);
    if (this.#closing) {
      return Promise.reject(new AgentStateError('unavailable', 'the session service is closed'));
    }
    const id = this.#nextId++;
    let line;
    try {
      line = JSON.stringify({ jsonrpc: '2.0', id, method, params });
    } catch (err) {
      return Promise.reject(new AgentStateError('invalid_argument',
        `${method}: a value cannot be sent as JSON: ${err.message}`, { cause: err }));
    }
    return new Promise((resolve, reject) => {
      this.#pending.set(id, { resolve, reject, method, onResult });
      this.#ref();
      if (this.#opened) this.#enqueue(line);
      else this.#held.push(line);
    });
  }

  // JSON text holds no raw newline, so the turn's lines go over as one string.
  #enqueue(line) {
    this.#queued.push(line);
    if (!this.#flushScheduled) {
      this.#flushScheduled = true;
      setImmediate(() => this.#flush());
    }
  }

  #flush() {
    this.#flushScheduled = false;
    if (this.#queued.length === 0 || this.#closed) return;
    const text = this.#queued.length === 1 ? this.#queued[0] : this.#queued.join('\n');
    this.#queued = [];
    this.#engine.submit(text);
  }

  // Waiting for an answer (or for the close) keeps node's event loop alive.
  #ref() {
    if (!this.#referenced && !this.#closed) {
      this.#referenced = true;
      this.#engine.ref();
    }
  }

  #unrefIfIdle() {
    if (this.#referenced && !this.#closing && this.#pending.size === 0 && this.#watches.size === 0) {
      this.#referenced = false;
      this.#engine.unref();
    }
  }

  #onReady() {
    const [lines, events] = this.#engine.take();
    for (const line of lines) this.#onLine(line);
    for (const e of events) {
      if (e.type === 'open') this.#onOpen(e);
      else if (e.type === 'closed') this.#onClosed(e);
    }
    this.#unrefIfIdle();
  }

  #onOpen(e) {
    this.#settledResolve();
    if (e.kind !== undefined) {
      this.#openError = new AgentStateError(e.kind, `cannot open ${this.#describe}: ${e.message}`);
      this.#fail(this.#openError);
      this.#held = [];
      return;
    }
    this.#opened = true;
    const held = this.#held;
    this.#held = [];
    for (const line of held) this.#queued.push(line);
    this.#flush();
  }

  #onClosed(e) {
    this.#closed = true;
    open.delete(this.#engine);
    if (e.kind !== undefined) {
      this.#closeError = new AgentStateError(e.kind, `closing ${this.#describe} failed: ${e.message}`);
    }
    this.#fail(new AgentStateError('unavailable', 'the session service is closed'));
    this.#endedResolve();
  }

  #onLine(line) {
    let msg;
    try {
      msg = JSON.parse(line);
    } catch {
      this.#fail(new AgentStateError('internal', `the engine answered a line that is not JSON: ${line.slice(0, 200)}`));
      return;
    }
    if (msg !== null && typeof msg === 'object' && msg.id === undefined) {
      this.#watches.route(msg, line.length); // a notification for no watch of ours is dropped
      return;
    }
    const waiter = this.#pending.get(msg.id);
    if (waiter === undefined) {
      const error = msg.error ? AgentStateError.fromRpc(msg.error, 'request')
        : new AgentStateError('internal', `the engine answered an unknown id ${JSON.stringify(msg.id)}`);
      this.#fail(error);
      return;
    }
    this.#pending.delete(msg.id);
    settleCall(waiter, msg);
  }

  #fail(error) {
    if (!this.#failure) this.#failure = error;
    const waiting = [...this.#pending.values()];
    this.#pending.clear();
    for (const w of waiting) w.reject(this.#failure);
    this.#watches.fail(this.#failure);
  }

  /** Starts a watch (params as the protocol's `watch`); resolves with the Watch. */
  watch(params, options) {
    return startWatch(this, this.#watches, params, options);
  }

  /**
   * Answers the calls made before it, then closes the engine: what is acknowledged is
   * synced and the store released (another process may open it once this resolves).
   * Rejects with the engine's error when the store could not be opened or closed.
   * Idempotent.
   */
  async close() {
    if (!this.#closing) {
      this.#ref();
      this.#closing = true;
      // Calls made before close() (held for the open, or queued in this turn) are handed
      // in first.
      this.#settled.then(() => {
        this.#flush();
        this.#engine.close();
      });
    }
    await this.#ended;
    if (this.#openError) throw this.#openError;
    if (this.#closeError) throw this.#closeError;
  }
}
