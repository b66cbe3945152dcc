// SPDX-License-Identifier: Apache-2.0
// One JSON-RPC connection to `agentstate serve` (docs/protocol.md): a spawned child's
// stdin/stdout, one TCP socket (optionally TLS), or one Unix socket. Requests are
// pipelined; responses are matched by id.
//
// Contract:
// - call() may be used by any number of concurrent callers; requests are written in call
//   order (the server runs requests about one session in the order it reads them).
// - With a token, `authenticate` is the connection's first request; calls made before
//   its answer are held (in call order) and written once it succeeds. A refused token
//   fails the held calls and every later one with the server's error (kind
//   'unauthenticated'); the token never appears in an error message.
// - Every call settles exactly once: with the result, with the server's error as an
//   AgentStateError, or with kind 'unavailable' when the connection ends first.
// - The server's `changes` and `watch_ended` notifications go to the watch they name
//   (src/watch.js); a watch ends with the connection.
// - While no call is waiting and no watch is live, the connection does not keep node's
//   event loop alive; a process that exits without close() closes the child's stdin,
//   and the child flushes and exits by itself.
// - close() ends the request stream, waits for the answers already owed, then for the
//   child to exit (it must exit 0) or the socket to close.
import { spawn } from 'node:child_process';
import net from 'node:net';
import tls from 'node:tls';
import { AgentStateError, invalid, settleCall } from './errors.js';
import { startWatch, WatchRouter } from './watch.js';

const NEWLINE = 10;
// Write coalescing: while more than HOLD_WHILE requests are written and unanswered,
// new requests wait (for an answer, which re-checks) until BATCH of them are queued.
// With few calls in flight every request is written at once.
const HOLD_WHILE = 16;
const BATCH = 16;
const STDERR_KEEP = 8192;
/** The server's default --max-line-bytes; a longer request would be answered with id null. */
export const MAX_LINE_BYTES = 16 * 1024 * 1024;

/**
 * 'HOST:PORT' or '[V6]:PORT' -> { host, port }; 'unix:PATH' -> { path }.
 * Throws AgentStateError (invalid_argument) for anything else.
 */
export function parseAddress(address) {
  if (typeof address !== 'string') {
    throw invalid(`address must be a string 'HOST:PORT' or 'unix:PATH', not ${typeof address}`);
  }
  if (address.startsWith('unix:')) {
    const p = address.slice('unix:'.length);
    // sockaddr_un holds 108 bytes, the terminating NUL included.
    if (p === '' || p.includes('\0') || Buffer.byteLength(p) > 107) {
      throw invalid(`address '${address}': a Unix socket path must be 1 to 107 bytes without NUL`);
    }
    return { path: p };
  }
  const m = /^(?:\[([^\]]+)\]|([^:\[\]]+)):(\d{1,5})$/.exec(address);
  const port = m ? Number(m[3]) : NaN;
  if (!m || port < 1 || port > 65535) {
    throw invalid(`address '${address}' is not HOST:PORT (IPv6 hosts in brackets: [::1]:7400)`);
  }
  return { host: m[1] ?? m[2], port };
}

export class Connection {
  #pending = new Map();
  #nextId = 1;
  #queued = [];
  #flushScheduled = false;
  #chunks = [];
  #closing = false;
  #failure = null;
  #stderr = '';
  #child = null;
  #socket = null;
  #out = null;
  #in = null;
  #ended;
  #describe;
  // Calls made while `authenticate` is unanswered: [{ id, line, method, resolve, reject }].
  #held = null;
  // Settles when `authenticate` has been answered (or failed); null without a token.
  #authSettled = null;
  #connected = false;
  #watches = new WatchRouter((n) => { if (n === 0 && this.#pending.size === 0) this.#ref(false); else if (n > 0) this.#ref(true); });

  /**
   * @param {{ bin?: string, args?: string[], host?: string, port?: number, path?: string,
   *           tls?: object, token?: string }} target
   *   a binary and its arguments to spawn; a TCP host and port (with `tls`: node's
   *   tls.connect options, host and port aside); or a Unix socket path. `token`: sent in
   *   `authenticate` before anything else.
   */
  constructor(target) {
    let endedResolve;
    this.#ended = new Promise((resolve) => { endedResolve = resolve; });
    if (target.bin !== undefined) {
      this.#describe = `agentstate serve (${target.bin} ${target.args.join(' ')})`;
      const child = spawn(target.bin, target.args, { stdio: ['pipe', 'pipe', 'pipe'] });
      this.#child = child;
      this.#out = child.stdin;
      this.#in = child.stdout;
      child.stdin.on('error', () => {}); // EPIPE after the child died: 'exit' reports it
      child.stderr.setEncoding('utf8');
      child.stderr.on('data', (s) => {
        this.#stderr = (this.#stderr + s).slice(-STDERR_KEEP);
      });
      child.on('error', (err) => {
        this.#fail(new AgentStateError('unavailable',
          `cannot start ${this.#describe}: ${err.message} (set the 'binary' option or ` +
          'AGENTSTATE_BIN, or put agentstate on PATH)', { cause: err }));
        endedResolve({ code: null, signal: null, error: err });
      });
      child.on('exit', (code, signal) => {
        // stdout may still hold answers: let it drain before failing what is left.
        const finish = () => {
          if (code !== 0 || !this.#closing) {
            const how = signal ? `was killed by ${signal}` : `exited with code ${code}`;
            this.#fail(new AgentStateError('unavailable',
              `${this.#describe} ${how}${this.#closing ? ' while closing' : ''}` +
              `${this.#stderr ? `: ${this.#stderr.trim()}` : ''}`));
          } else {
            this.#fail(new AgentStateError('unavailable', 'the session service is closed'));
          }
          endedResolve({ code, signal });
        };
        if (child.stdout.readableEnded || child.stdout.destroyed) finish();
        else child.stdout.once('close', finish);
      });
      child.unref();
      for (const s of [child.stdin, child.stdout, child.stderr]) s.unref();
    } else {
      let socket;
      if (target.path !== undefined) {
        this.#describe = `agentstate at unix:${target.path}`;
        socket = net.connect({ path: target.path });
      } else if (target.tls !== undefined) {
        this.#describe = `agentstate at ${target.host}:${target.port} (TLS)`;
        socket = tls.connect({ ...target.tls, host: target.host, port: target.port });
        socket.setNoDelay(true);
      } else {
        this.#describe = `agentstate at ${target.host}:${target.port}`;
        socket = net.connect({ host: target.host, port: target.port });
        socket.setNoDelay(true);
      }
      this.#socket = socket;
      socket.once(target.tls !== undefined ? 'secureConnect' : 'connect', () => { this.#connected = true; });
      this.#out = socket;
      this.#in = socket;
      socket.on('error', (err) => {
        this.#fail(new AgentStateError('unavailable',
          `connection to ${this.#describe} failed: ${err.message}`, { cause: err }));
      });
      socket.on('close', () => {
        this.#fail(new AgentStateError('unavailable', this.#closing
          ? 'the session service is closed' : `${this.#describe} closed the connection`));
        endedResolve({ code: 0, signal: null });
      });
      socket.unref();
    }
    this.#in.on('data', (chunk) => this.#onData(chunk));
    if (target.token !== undefined) this.#authenticate(target.token);
  }

  // Sends `authenticate` and holds every other call until it is answered.
  #authenticate(token) {
    const id = this.#nextId++;
    let settle;
    this.#authSettled = new Promise((resolve) => { settle = resolve; });
    this.#held = [];
    this.#ref(true);
    this.#pending.set(id, {
      method: 'authenticate',
      resolve: () => {
        const held = this.#held ?? [];
        this.#held = null;
        for (const h of held) this.#enqueue(h);
        settle();
      },
      reject: (err) => {
        settle();
        const error = err.kind === 'unavailable' ? err : new AgentStateError(err.kind,
          `${this.#describe} refused the token: ${err.message.replace(/^authenticate: /, '')}`,
          { code: err.code, data: err.data });
        this.#failHeld(error);
        this.#fail(error);
      },
    });
    this.#queued.push(JSON.stringify({ jsonrpc: '2.0', id, method: 'authenticate', params: { token } }) + '\n');
    this.#scheduleFlush();
  }

  #failHeld(error) {
    const held = this.#held ?? [];
    this.#held = null;
    for (const h of held) h.reject(error);
  }

  /** Whether the connection has failed: every call from now on rejects with its error. */
  get failed() {
    return this.#failure !== null;
  }

  /**
   * Whether a socket connection was ever made (for a TLS one: its handshake done). Until
   * it is, no request has reached a server.
   */
  get connected() {
    return this.#connected;
  }

  /** The spawned server's process id; undefined for a socket. */
  get pid() {
    return this.#child ? this.#child.pid : undefined;
  }

  /**
   * Sends one request; resolves with its `result`, or with what `onResult(result)` gives:
   * it runs as the answer is read, before the stream's next line.
   */
  call(method, params, onResult) {
    if (this.#failure) return Promise.reject(this.#failure);
    if (this.#closing) {
      return Promise.reject(new AgentStateError('unavailable', 'the session service is closed'));
    }
    const id = this.#nextId++;
    let line;
    try {
      line = JSON.stringify({ jsonrpc: '2.0', id, method, params }) + '\n';
    } catch (err) {
      return Promise.reject(new AgentStateError('invalid_argument',
        `${method}: a value cannot be sent as JSON: ${err.message}`, { cause: err }));
    }
    if (line.length > MAX_LINE_BYTES / 4 && Buffer.byteLength(line) > MAX_LINE_BYTES) {
      return Promise.reject(new AgentStateError('too_large',
        `${method}: the request is ${Buffer.byteLength(line)} bytes, over the server's line limit of ${MAX_LINE_BYTES}`));
    }
    return new Promise((resolve, reject) => {
      const request = { id, line, method, resolve, reject, onResult };
      if (this.#held) this.#held.push(request);
      else this.#enqueue(request);
    });
  }

  #enqueue({ id, line, method, resolve, reject, onResult }) {
    if (this.#failure) {
      reject(this.#failure);
      return;
    }
    if (this.#pending.size === 0) this.#ref(true);
    this.#pending.set(id, { resolve, reject, method, onResult });
    this.#queued.push(line);
    this.#scheduleFlush();
  }

  #scheduleFlush() {
    if (!this.#flushScheduled) {
      this.#flushScheduled = true;
      setImmediate(() => this.#flush(false));
    }
  }

  // Requests issued in one turn of the event loop go out in one write; under a deep
  // pipeline they wait for BATCH (see HOLD_WHILE).
  #flush(force) {
    this.#flushScheduled = false;
    if (this.#queued.length === 0 || this.#failure) return;
    const unanswered = this.#pending.size - this.#queued.length;
    if (!force && unanswered > HOLD_WHILE && this.#queued.length < BATCH) return;
    const text = this.#queued.length === 1 ? this.#queued[0] : this.#queued.join('');
    this.#queued = [];
    this.#out.write(text);
  }

  // While calls wait (and from close() on), the connection keeps node's event loop alive.
  #ref(on) {
    if (!on && this.#closing) return;
    const handles = this.#child ? [this.#child, this.#child.stdout] : [this.#socket];
    for (const h of handles) {
      if (on) h.ref(); else h.unref();
    }
  }

  #onData(chunk) {
    let start = 0;
    let nl = chunk.indexOf(NEWLINE);
    while (nl !== -1) {
      let line;
      if (this.#chunks.length > 0) {
        this.#chunks.push(chunk.subarray(start, nl));
        line = Buffer.concat(this.#chunks).toString('utf8');
        this.#chunks = [];
      } else {
        line = chunk.toString('utf8', start, nl);
      }
      this.#onLine(line);
      start = nl + 1;
      nl = chunk.indexOf(NEWLINE, start);
    }
    if (start < chunk.length) this.#chunks.push(chunk.subarray(start));
  }

  #onLine(line) {
    let msg;
    try {
      msg = JSON.parse(line);
    } catch (err) {
      this.#fail(new AgentStateError('internal',
        `${this.#describe} sent a line that is not JSON: ${line.slice(0, 200)}`));
      return;
    }
    if (msg !== null && typeof msg === 'object' && msg.id === undefined
        && typeof msg.method === 'string') {
      this.#watches.route(msg, line.length); // a notification for no watch of ours is dropped
      return;
    }
    const waiter = this.#pending.get(msg.id);
    if (waiter === undefined) {
      // An answer with id null means the server could not read one of our lines: which
      // call it belongs to is unknown, so every waiting call gets the error.
      const error = msg.error ? AgentStateError.fromRpc(msg.error, 'request')
        : new AgentStateError('internal', `${this.#describe} answered an unknown id ${JSON.stringify(msg.id)}`);
      this.#fail(error);
      return;
    }
    this.#pending.delete(msg.id);
    settleCall(waiter, msg);
    if (this.#pending.size === 0 && this.#watches.size === 0) this.#ref(false);
    if (this.#queued.length > 0) this.#scheduleFlush();
  }

  #fail(error) {
    if (!this.#failure) this.#failure = error;
    const waiting = [...this.#pending.values()];
    this.#pending.clear();
    this.#queued = [];
    for (const w of waiting) w.reject(error);
    this.#failHeld(this.#failure);
    this.#watches.fail(this.#failure);
  }

  /** Starts a watch (params as the protocol's `watch`); resolves with the Watch. */
  watch(params, options) {
    return startWatch(this, this.#watches, params, options);
  }

  /**
   * Ends the request stream and waits for the server's side to finish. Rejects with
   * kind 'unavailable' when a spawned server exits with a code other than 0.
   * Idempotent.
   */
  async close() {
    if (!this.#closing) {
      this.#closing = true;
      // Calls held for `authenticate` were made before close(): they are sent first.
      if (this.#authSettled) await this.#authSettled;
      this.#flush(true);
      if (this.#child) {
        this.#child.ref();
        this.#child.stdout.ref();
        this.#child.stdin.end();
      } else {
        this.#socket.ref();
        this.#socket.end();
      }
    }
    const { code, signal, error } = await this.#ended;
    if (this.#child && (error || code !== 0)) {
      const how = error ? error.message : signal ? `was killed by ${signal}` : `exited with code ${code}`;
      throw new AgentStateError('unavailable', `${this.#describe} ${how}` +
        `${this.#stderr ? `: ${this.#stderr.trim()}` : ''}`);
    }
  }
}
