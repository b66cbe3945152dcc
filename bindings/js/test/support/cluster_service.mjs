// SPDX-License-Identifier: Apache-2.0
// Cluster mode's src/index.js (test files import it through redirect_hooks.mjs): the
// package's exports, with an AgentStateSessionService that, given the options of a
// server it would start ({ memory: true } or { store: DIR }, with binary and durability),
// connects to AGENTSTATE_TEST_ADDRESS instead (a cluster node that owns no shard:
// tests/support/cluster_harness.py). Other options (an address, bad options) go to the
// package's own class unchanged.
//
// A spawned server starts with its own data, so each such service gets apps of its own:
// a prefix (10 bytes) put before every non-empty app_name it sends and taken off every
// app_name and error message it receives. A new { memory: true } service gets a new
// prefix; { store: DIR } gets the prefix of DIR, so a service made again on the same
// store (a restart) sees what the earlier one wrote.
import { AsyncLocalStorage } from 'node:async_hooks';
import { randomBytes } from 'node:crypto';
import path from 'node:path';
import { Connection } from '../../src/connection.js';
import { AgentStateSessionService as Base } from '../../src/index.js';
import { CLUSTER_ADDRESS } from './env.mjs';

export * from '../../src/index.js';

if (!CLUSTER_ADDRESS) throw new Error('cluster_service.mjs: AGENTSTATE_TEST_ADDRESS is not set');

// The prefix of the service whose method is running (each method runs in its context).
const current = new AsyncLocalStorage();
const storePrefixes = new Map();

function newPrefix() {
  return `t${randomBytes(4).toString('hex')}-`;
}

function strip(value, prefix) {
  if (Array.isArray(value)) return value.map((v) => strip(v, prefix));
  if (value === null || typeof value !== 'object') return value;
  const out = {};
  for (const [k, v] of Object.entries(value)) {
    out[k] = k === 'app_name' && typeof v === 'string' && v.startsWith(prefix) ? v.slice(prefix.length) : strip(v, prefix);
  }
  return out;
}

const call = Connection.prototype.call;
Connection.prototype.call = async function prefixedCall(method, params) {
  const prefix = current.getStore();
  if (prefix === undefined) return call.call(this, method, params);
  const sent = params && typeof params.app_name === 'string' && params.app_name !== ''
    ? { ...params, app_name: prefix + params.app_name } : params;
  try {
    return strip(await call.call(this, method, sent), prefix);
  } catch (err) {
    if (err && typeof err.message === 'string') err.message = err.message.split(prefix).join('');
    throw err;
  }
};

// The options of a server the service would start, valid as the package checks them.
function spawnOptions(options) {
  if (options === null || typeof options !== 'object') return false;
  const keys = Object.keys(options);
  if (!keys.every((k) => ['store', 'memory', 'binary', 'durability'].includes(k))) return false;
  const { store, memory, binary, durability } = options;
  if ((store !== undefined) === (memory !== undefined)) return false;
  if (store !== undefined && (typeof store !== 'string' || store === '')) return false;
  if (memory !== undefined && memory !== true) return false;
  if (binary !== undefined && (typeof binary !== 'string' || binary === '')) return false;
  return durability === undefined || durability === 'sync' || durability === 'nosync';
}

export class AgentStateSessionService extends Base {
  #prefix;

  constructor(options) {
    if (!spawnOptions(options)) {
      super(options);
      return;
    }
    super({ address: CLUSTER_ADDRESS });
    if (options.store === undefined) {
      this.#prefix = newPrefix();
    } else {
      const dir = path.resolve(options.store);
      if (!storePrefixes.has(dir)) storePrefixes.set(dir, newPrefix());
      this.#prefix = storePrefixes.get(dir);
    }
  }

  /** The prefix of this service's app names; undefined when not connected to the cluster. */
  get clusterPrefix() {
    return this.#prefix;
  }
}

// Every method of the package's service runs with its service's prefix.
for (const name of Object.getOwnPropertyNames(Base.prototype)) {
  const d = Object.getOwnPropertyDescriptor(Base.prototype, name);
  if (name === 'constructor' || typeof d.value !== 'function') continue;
  Object.defineProperty(AgentStateSessionService.prototype, name, {
    ...d,
    value(...args) {
      const prefix = this.clusterPrefix;
      return prefix === undefined ? d.value.apply(this, args) : current.run(prefix, () => d.value.apply(this, args));
    },
  });
}
