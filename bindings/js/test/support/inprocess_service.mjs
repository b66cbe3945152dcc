// SPDX-License-Identifier: Apache-2.0
// In-process mode's src/index.js (test files import it through redirect_hooks.mjs): the
// package's exports, with an AgentStateSessionService that, given the options of a
// server it would spawn ({ memory: true } or { store: DIR }, with binary, spawn and
// durability), runs the engine in this process on the same store instead. With
// AGENTSTATE_TEST_IN_PROCESS=store, { memory: true } becomes a new store directory of
// its own (an LMDB store, durability nosync), so the suites run on a real store too.
// Other options (an address, bad options) go to the package's own class unchanged.
import { AgentStateSessionService as Base } from '../../src/index.js';
import { IN_PROCESS, scratchDir } from './env.mjs';

export * from '../../src/index.js';

if (!IN_PROCESS) throw new Error('inprocess_service.mjs: AGENTSTATE_TEST_IN_PROCESS is not set');

// The options of a server the service would spawn, valid as the package checks them.
function spawnOptions(options) {
  if (options === null || typeof options !== 'object') return false;
  const keys = Object.keys(options);
  if (!keys.every((k) => ['store', 'memory', 'binary', 'spawn', 'durability'].includes(k))) return false;
  const { store, memory, binary, spawn, durability } = options;
  if (binary === undefined && spawn !== true) return false;
  if ((store !== undefined) === (memory !== undefined)) return false;
  if (store !== undefined && (typeof store !== 'string' || store === '')) return false;
  if (memory !== undefined && memory !== true) return false;
  if (binary !== undefined && (typeof binary !== 'string' || binary === '')) return false;
  return durability === undefined || durability === 'sync' || durability === 'nosync';
}

export class AgentStateSessionService extends Base {
  constructor(options) {
    if (!spawnOptions(options)) {
      super(options);
      return;
    }
    const { binary, spawn, ...rest } = options;
    if (IN_PROCESS === 'store' && rest.memory) {
      super({ store: scratchDir('inprocess'), durability: rest.durability ?? 'nosync' });
    } else {
      super(rest);
    }
  }
}
