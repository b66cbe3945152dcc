// SPDX-License-Identifier: Apache-2.0
// A test file's shared service on `agentstate serve --memory`, and raw connections to servers of their own.
import { after, before } from 'node:test';
import { AgentStateSessionService } from '../../src/index.js';
import { Connection } from '../../src/connection.js';
import { agentstateBin } from './env.mjs';

/**
 * One AgentStateSessionService on a spawned `serve --memory`, started by a `before` hook
 * and closed by an `after` hook registered where this is called (at a file's top level:
 * around all of the file's tests). The tests read it as `.service` of the returned object.
 */
export function memoryServiceForFile() {
  const shared = { service: undefined };
  before(() => {
    shared.service = new AgentStateSessionService({ memory: true, binary: agentstateBin() });
  });
  after(async () => {
    await shared.service.close();
  });
  return shared;
}

/** A protocol connection to a new `agentstate serve --memory` of its own; the caller closes it. */
export function rawServer() {
  return new Connection({ bin: agentstateBin(), args: ['serve', '--memory'] });
}
