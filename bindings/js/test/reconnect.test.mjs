// SPDX-License-Identifier: Apache-2.0
// `{ address }` across a restart of the server (src/reconnect.js): a real `agentstate
// serve --store DIR --listen ADDRESS`, killed (SIGKILL, by PID) and started again on the
// same store and address while calls run.
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { createEvent } from '@google/adk';
import { AgentStateError, AgentStateSessionService } from '../src/index.js';
import { agentstateBin, scratchDir } from './support/env.mjs';
import { startServer } from './support/server.mjs';

const BIN = agentstateBin();
const APP = 'reconnect';

function isKind(kind) {
  return (err) => {
    assert.ok(err instanceof AgentStateError, `not an AgentStateError: ${err}`);
    assert.equal(err.kind, kind, err.message);
    return true;
  };
}

// A server on a new store, and restart(): kill it and start another on the same store
// and address.
async function restartableServer(tag) {
  const dir = scratchDir(tag);
  const first = await startServer(BIN, ['--store', dir, '--listen', '127.0.0.1:0']);
  const state = { server: first, address: first.address, pids: [first.pid] };
  state.kill = () => state.server.kill();
  state.start = async () => {
    state.server = await startServer(BIN, ['--store', dir, '--listen', state.address]);
    state.pids.push(state.server.pid);
  };
  state.restart = async () => {
    await state.kill();
    await state.start();
  };
  state.stop = async () => {
    assert.equal(await state.server.stop(), 0, state.server.log());
  };
  return state;
}

describe('a server at an address that restarts', () => {
  test('appends running through a kill and restart: nothing acknowledged is lost, nothing is stored twice', { timeout: 120_000 }, async () => {
    const srv = await restartableServer('restart-appends');
    const service = new AgentStateSessionService({ address: srv.address, retryForMs: 60_000 });
    try {
      const key = { appName: APP, userId: 'u', sessionId: 's' };
      const session = await service.createSession(key);
      const WORKERS = 8;
      const PER_WORKER = 60;
      const acked = [];
      let restarted;
      let inFlightAtKill = 0;
      const worker = async (k) => {
        // Each worker appends in order on a session object of its own.
        const mine = { ...session, events: [], state: {} };
        for (let i = 0; i < PER_WORKER; i += 1) {
          const id = `w${k}-${i}`;
          await service.appendEvent({
            session: mine,
            event: createEvent({ id, invocationId: `w${k}`, author: 'agent', actions: { stateDelta: { [`w${k}`]: i } } }),
          });
          acked.push(id);
          if (acked.length === 100) {
            // Every other worker has an append in flight now.
            inFlightAtKill = WORKERS - 1;
            restarted = srv.restart();
          }
        }
      };
      await Promise.all(Array.from({ length: WORKERS }, (_, k) => worker(k)));
      await restarted;
      assert.equal(srv.pids.length, 2, 'the server was restarted');
      assert.equal(inFlightAtKill, WORKERS - 1);
      assert.equal(acked.length, WORKERS * PER_WORKER, 'every append was acknowledged');

      const got = await service.getSession(key);
      const ids = got.events.map((e) => e.id);
      assert.equal(new Set(ids).size, ids.length, 'no event is stored twice');
      assert.deepEqual([...ids].sort(), [...acked].sort(), 'every acknowledged event is stored, and nothing else');
      assert.equal(got.version, WORKERS * PER_WORKER);
      for (let k = 0; k < WORKERS; k += 1) {
        const own = ids.filter((id) => id.startsWith(`w${k}-`));
        assert.deepEqual(own, Array.from({ length: PER_WORKER }, (_, i) => `w${k}-${i}`), `worker ${k}'s appends in order`);
        assert.equal(got.state[`w${k}`], PER_WORKER - 1);
      }
    } finally {
      await service.close();
      await srv.stop();
    }
  });

  test('a call made while the server is down is sent once it is back; past retryForMs a call rejects with unavailable', { timeout: 60_000 }, async () => {
    const srv = await restartableServer('restart-outage');
    const service = new AgentStateSessionService({ address: srv.address, retryForMs: 30_000 });
    const short = new AgentStateSessionService({ address: srv.address, retryForMs: 200 });
    try {
      const key = { appName: APP, userId: 'u', sessionId: 'outage' };
      await service.createSession(key);
      await short.getSession(key);
      await srv.kill();
      // A read is sent again whether or not its connection had seen the server go. A
      // service made now never reaches the server before it is back, so even its create
      // (not sent twice when in doubt) is sent then.
      const read = service.getSession(key);
      const late = new AgentStateSessionService({ address: srv.address, retryForMs: 30_000 });
      const created = late.createSession({ ...key, sessionId: 'made-while-down' });
      await assert.rejects(short.getSession(key), (err) => isKind('unavailable')(err) && /retryForMs 200/.test(err.message));
      await srv.start();
      assert.equal((await created).id, 'made-while-down');
      assert.equal((await read).id, 'outage');
      assert.equal((await short.getSession(key)).id, 'outage', 'the next call reconnects: its first try is at once, not after a pause left from the outage (which spent retryForMs 200 before any try)');
      await late.close();
    } finally {
      await service.close();
      await short.close();
      await srv.stop();
    }
  });

  test('retryForMs 0 tries each call once (regression: with 0 a call rejected before its first try, even with the server up)', { timeout: 60_000 }, async () => {
    const srv = await restartableServer('retry-zero');
    const once = new AgentStateSessionService({ address: srv.address, retryForMs: 0 });
    try {
      const key = { appName: APP, userId: 'u', sessionId: 'once' };
      assert.equal((await once.createSession(key)).id, 'once');
      await srv.kill();
      // The try is made, and its error is the one the call rejects with.
      await assert.rejects(once.getSession(key),
        (err) => isKind('unavailable')(err) && /retryForMs 0: .+/.test(err.message));
      await srv.start();
      assert.equal((await once.getSession(key)).id, 'once');
    } finally {
      await once.close();
      await srv.stop();
    }
  });

  test('a createSession whose answer is lost rejects as in doubt instead of being sent again', { timeout: 60_000 }, async () => {
    const srv = await restartableServer('restart-in-doubt');
    const service = new AgentStateSessionService({ address: srv.address, retryForMs: 30_000 });
    try {
      await service.createSession({ appName: APP, userId: 'u', sessionId: 'first' });
      // The server is stopped (SIGSTOP), so the create is written and left unanswered,
      // then killed: whether it ran cannot be known.
      process.kill(srv.server.pid, 'SIGSTOP');
      const pending = service.createSession({ appName: APP, userId: 'u', sessionId: 'in-doubt' });
      pending.catch(() => {});
      // The request is written by the connection's flush, one turn of the event loop after
      // the call; one more turn lets the write reach the socket.
      for (let i = 0; i < 2; i += 1) await new Promise((resolve) => { setImmediate(resolve); });
      await srv.kill();
      await assert.rejects(pending, (err) => isKind('unavailable')(err) && err.data.in_doubt === true
        && /whether the call took effect is unknown/.test(err.message));
      await srv.start();
      assert.equal((await service.getSession({ appName: APP, userId: 'u', sessionId: 'first' })).id, 'first');
    } finally {
      await service.close();
      await srv.stop();
    }
  });

  test('a watch ends with unavailable and its cursor when the server goes; a new watch from it misses nothing', { timeout: 60_000 }, async () => {
    const srv = await restartableServer('restart-watch');
    const service = new AgentStateSessionService({ address: srv.address, retryForMs: 30_000 });
    try {
      const key = { appName: APP, userId: 'u', sessionId: 'watched' };
      const session = await service.createSession(key);
      const watch = await service.watch({ scope: 'session', ...key, from: session.cursor });
      await service.appendEvent({ session, event: createEvent({ id: 'before', author: 'a' }) });
      const first = await watch.next();
      assert.deepEqual(first.value.changes.map((c) => [c.version, c.event.id]), [[1, 'before']]);
      await srv.kill();
      await assert.rejects(watch.next(), (err) => isKind('unavailable')(err)
        && err.data.reason === 'connection_lost' && err.data.resume_from === first.value.cursor);
      await srv.start();
      await service.appendEvent({ session, event: createEvent({ id: 'after', author: 'a' }) });
      const again = await service.watch({ scope: 'session', ...key, from: watch.cursor });
      const next = await again.next();
      assert.deepEqual(next.value.changes.map((c) => c.version), [2]);
      await again.close();
    } finally {
      await service.close();
      await srv.stop();
    }
  });
});
