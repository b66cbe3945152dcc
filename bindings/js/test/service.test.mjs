// SPDX-License-Identifier: Apache-2.0
// AgentStateSessionService method by method, against a real `agentstate serve`, with
// ADK-JS's InMemorySessionService as the reference wherever ADK defines the answer.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { createEvent, InMemorySessionService } from '@google/adk';
import { AgentStateError, AgentStateSessionService, ERROR_KINDS } from '../src/index.js';
import { agentstateBin, asJson, ownProcess, scratchDir } from './support/env.mjs';

const BIN = agentstateBin();
let service;
before(() => { service = new AgentStateSessionService({ memory: true, binary: BIN }); });
after(async () => { await service.close(); });

function isKind(kind) {
  return (err) => {
    assert.ok(err instanceof AgentStateError, `not an AgentStateError: ${err}`);
    assert.equal(err.kind, kind, err.message);
    return true;
  };
}

function ev(id, ts, stateDelta = {}, extra = {}) {
  return createEvent({ id, invocationId: 'inv', author: 'agent', timestamp: ts, actions: { stateDelta }, ...extra });
}

describe('options', () => {
  test('bad options are refused with invalid_argument before anything starts', () => {
    const bad = [undefined, null, {}, { memory: true, store: '/tmp/x' }, { memory: false },
      { store: '' }, { address: 'nope' }, { address: 'h:0' }, { address: 'h:70000' },
      { memory: true, durability: 'always' }, { address: '127.0.0.1:7400', durability: 'sync' },
      { address: '127.0.0.1:7400', binary: BIN }, { memory: true, binary: '' }, { memory: true, stor: 'x' }];
    for (const options of bad) {
      assert.throws(() => new AgentStateSessionService(options), isKind('invalid_argument'),
        JSON.stringify(options));
    }
    assert.deepEqual(ERROR_KINDS.slice(0, 3), ['already_exists', 'not_found', 'invalid_argument']);
  });

  test('a binary that cannot be started fails every call and close() with unavailable', { skip: ownProcess('starts a server from a missing binary') }, async () => {
    const s = new AgentStateSessionService({ memory: true, binary: '/nonexistent/agentstate' });
    await assert.rejects(s.createSession({ appName: 'a', userId: 'u' }), (err) => {
      isKind('unavailable')(err);
      assert.match(err.message, /nonexistent.*AGENTSTATE_BIN/s);
      return true;
    });
    await assert.rejects(s.close(), isKind('unavailable'));
  });

  test('durability is passed to the spawned server', { skip: ownProcess('reads the spawned server\'s command line') }, async () => {
    const dir = scratchDir('durability');
    const s = new AgentStateSessionService({ store: dir, durability: 'nosync', binary: BIN });
    await s.createSession({ appName: 'a', userId: 'u', sessionId: 's' });
    const argv = fs.readFileSync(`/proc/${s.serverPid}/cmdline`, 'utf8').split('\0');
    assert.deepEqual(argv.slice(1, 6), ['serve', '--store', dir, '--durability', 'nosync']);
    await s.close();
  });

  test('AGENTSTATE_BIN names the binary when the binary option is absent', { skip: ownProcess('checks which binary is spawned') }, async () => {
    const saved = process.env.AGENTSTATE_BIN;
    process.env.AGENTSTATE_BIN = BIN;
    try {
      const s = new AgentStateSessionService({ memory: true });
      assert.ok((await s.createSession({ appName: 'a', userId: 'u' })).id);
      await s.close();
    } finally {
      if (saved === undefined) delete process.env.AGENTSTATE_BIN; else process.env.AGENTSTATE_BIN = saved;
    }
  });
});

describe('createSession, getSession, deleteSession', () => {
  test('creates with a given or generated id and routes initial state by prefix', async () => {
    const s1 = await service.createSession({ appName: 'c', userId: 'alice', sessionId: 's1',
      state: { topic: 't', 'user:lang': 'en', 'app:model': 'm1', 'temp:draft': 'x' } });
    assert.deepEqual(asJson(s1), { id: 's1', appName: 'c', userId: 'alice', events: [],
      state: { topic: 't', 'user:lang': 'en', 'app:model': 'm1' }, lastUpdateTime: s1.lastUpdateTime });
    assert.ok(Math.abs(s1.lastUpdateTime - Date.now()) < 60_000);
    const s2 = await service.createSession({ appName: 'c', userId: 'alice' });
    assert.match(s2.id, /\S/);
    assert.deepEqual(s2.state, { 'user:lang': 'en', 'app:model': 'm1' });
    const s3 = await service.createSession({ appName: 'c', userId: 'bob', sessionId: '' });
    assert.deepEqual(s3.state, { 'app:model': 'm1' });
    const got = await service.getSession({ appName: 'c', userId: 'alice', sessionId: 's1' });
    assert.deepEqual(got, s1);
  });

  test('a taken id is refused with already_exists (code -32000)', async () => {
    await service.createSession({ appName: 'c2', userId: 'u', sessionId: 'dup' });
    await assert.rejects(service.createSession({ appName: 'c2', userId: 'u', sessionId: 'dup' }), (err) => {
      isKind('already_exists')(err);
      assert.equal(err.code, -32000);
      return true;
    });
  });

  test('bad names are refused with invalid_argument', async () => {
    await assert.rejects(service.createSession({ appName: 'a' }), isKind('invalid_argument'));
    await assert.rejects(service.createSession({ appName: '', userId: 'u' }), isKind('invalid_argument'));
    await assert.rejects(service.getSession({ appName: 'a', userId: 'u', sessionId: 7 }), isKind('invalid_argument'));
    await assert.rejects(service.createSession({ appName: 'a'.repeat(101), userId: 'u' }), isKind('too_large'));
    await assert.rejects(service.createSession({ appName: 'a', userId: 'u', state: [1] }), isKind('invalid_argument'));
  });

  test('getSession filters events as ADK-JS does', async () => {
    const ref = new InMemorySessionService();
    const stamps = [1000, 2000, 3000, 4000, 5000];
    for (const svc of [ref, service]) {
      const s = await svc.createSession({ appName: 'g', userId: 'u', sessionId: 'f' });
      for (const [i, ts] of stamps.entries()) await svc.appendEvent({ session: s, event: ev(`e${i}`, ts) });
    }
    const configs = [undefined, {}, { numRecentEvents: 2 }, { numRecentEvents: 0 }, { numRecentEvents: 9 },
      { afterTimestamp: 3000 }, { afterTimestamp: 2500 }, { afterTimestamp: 0 }, { afterTimestamp: 9000 },
      { numRecentEvents: 1, afterTimestamp: 2000 }, { numRecentEvents: 4, afterTimestamp: 3000 }];
    for (const config of configs) {
      const want = await ref.getSession({ appName: 'g', userId: 'u', sessionId: 'f', config });
      // ADK-JS 2.0.0 reads numRecentEvents 0 as every event; ADK's fix of #5730 (and
      // this service) as none.
      if (config?.numRecentEvents === 0) want.events = [];
      const got = await service.getSession({ appName: 'g', userId: 'u', sessionId: 'f', config });
      assert.deepEqual(got.events.map((e) => e.id), want.events.map((e) => e.id), JSON.stringify(config));
      assert.deepEqual(asJson(got.events), asJson(want.events));
    }
    await assert.rejects(service.getSession({ appName: 'g', userId: 'u', sessionId: 'f', config: { numRecentEvents: -1 } }),
      isKind('invalid_argument'));
    await assert.rejects(service.getSession({ appName: 'g', userId: 'u', sessionId: 'f', config: { afterTimestamp: 'x' } }),
      isKind('invalid_argument'));
    assert.equal(await service.getSession({ appName: 'g', userId: 'u', sessionId: 'missing' }), undefined);
  });

  test('numRecentEvents 0 answers no events, not every event (ADK #5730)', async () => {
    const s = await service.createSession({ appName: 'g0', userId: 'u', sessionId: 'zero', state: { k: 1 } });
    for (let i = 0; i < 3; i++) await service.appendEvent({ session: s, event: ev(`z${i}`, 1000 + i, { i }) });
    const none = await service.getSession({ appName: 'g0', userId: 'u', sessionId: 'zero', config: { numRecentEvents: 0 } });
    assert.deepEqual(none.events, []);
    assert.deepEqual(none.state, { k: 1, i: 2 }, 'the state is whole');
    const zeroAfter = await service.getSession({ appName: 'g0', userId: 'u', sessionId: 'zero',
      config: { numRecentEvents: 0, afterTimestamp: 1000 } });
    assert.deepEqual(zeroAfter.events, []);
    const all = await service.getSession({ appName: 'g0', userId: 'u', sessionId: 'zero', config: {} });
    assert.equal(all.events.length, 3);
  });

  test('deleteSession removes the session and its events, keeps app and user state', async () => {
    const s = await service.createSession({ appName: 'd', userId: 'u', sessionId: 'gone', state: { 'user:k': 1, 'app:k': 2 } });
    await service.appendEvent({ session: s, event: ev('e1', 1000, { x: 1 }) });
    await service.deleteSession({ appName: 'd', userId: 'u', sessionId: 'gone' });
    assert.equal(await service.getSession({ appName: 'd', userId: 'u', sessionId: 'gone' }), undefined);
    await service.deleteSession({ appName: 'd', userId: 'u', sessionId: 'gone' });
    const again = await service.createSession({ appName: 'd', userId: 'u', sessionId: 'gone' });
    assert.deepEqual(again.state, { 'user:k': 1, 'app:k': 2 });
    assert.deepEqual(again.events, []);
  });
});

describe('appendEvent', () => {
  test('updates the caller\'s session and event as InMemorySessionService does', async () => {
    const ref = new InMemorySessionService();
    const steps = [
      { id: 'a', ts: 1000, delta: { count: 1, 'user:name': 'Ann', 'app:calls': 1, 'temp:scratch': 'x' } },
      { id: 'b', ts: 2000, delta: { count: 2, nested: { list: [1, { k: null }] } } },
      { id: 'p', ts: 2500, delta: { count: 99 }, partial: true },
      { id: 'c', ts: 3000, delta: { 'temp:only': true } },
      { id: 'd', ts: 4000, delta: { count: null, 'user:name': 'Bo' } },
    ];
    const live = [];
    for (const svc of [ref, service]) {
      const session = await svc.createSession({ appName: 'ap', userId: 'u', sessionId: 'live', state: { seed: 0 } });
      const events = [];
      for (const step of steps) {
        const event = ev(step.id, step.ts, { ...step.delta }, step.partial ? { partial: true } : {});
        const returned = await svc.appendEvent({ session, event });
        assert.equal(returned, event);
        events.push(event);
      }
      live.push({ session, events });
    }
    const [want, got] = live;
    assert.deepEqual(asJson(got.events), asJson(want.events), 'the caller\'s events');
    assert.deepEqual(asJson(got.session.events), asJson(want.session.events), 'the live session\'s events');
    assert.deepEqual(got.session.state, want.session.state, 'the live session\'s state');
    assert.equal(got.session.lastUpdateTime, want.session.lastUpdateTime);
    const storedWant = await ref.getSession({ appName: 'ap', userId: 'u', sessionId: 'live' });
    const storedGot = await service.getSession({ appName: 'ap', userId: 'u', sessionId: 'live' });
    assert.deepEqual(asJson(storedGot), asJson(storedWant), 'the stored session');
    assert.ok(!storedGot.events.some((e) => e.id === 'p'), 'partial events are not stored');
  });

  test('a re-used event id answers with the stored event and changes nothing', async () => {
    const session = await service.createSession({ appName: 'reuse', userId: 'u', sessionId: 'reuse' });
    const first = ev('same', 1000, { v: 1 });
    await service.appendEvent({ session, event: first });
    const retry = ev('same', 1000, { v: 1 });
    assert.equal(await service.appendEvent({ session, event: retry }), retry, 'an exact retry is the caller\'s event');
    const other = ev('same', 2000, { v: 2 }, { content: { role: 'model', parts: [{ text: 'new' }] } });
    const returned = await service.appendEvent({ session, event: other });
    assert.notEqual(returned, other);
    assert.deepEqual(asJson(returned), asJson(first));
    assert.equal(session.events.length, 1);
    assert.deepEqual(asJson(session.events[0]), asJson(first));
    assert.deepEqual(session.state, { v: 1 });
    const stored = await service.getSession({ appName: 'reuse', userId: 'u', sessionId: 'reuse' });
    assert.deepEqual(asJson(stored.events), [asJson(first)]);
    assert.deepEqual(stored.state, { v: 1 });
  });

  test('the caller\'s session.events stays ADK\'s after the caller changes it itself', async () => {
    // The service keeps an index of the ids in session.events (ADK scans the list on
    // every append); each change made by the caller below must be seen by the next append.
    const live = [];
    for (const svc of [new InMemorySessionService(), service]) {
      const session = await svc.createSession({ appName: 'own', userId: 'u', sessionId: 'own' });
      const seen = [];
      const step = async (id, ts, delta) => {
        await svc.appendEvent({ session, event: ev(id, ts, delta) });
        seen.push(asJson(session.events));
      };
      await step('e1', 1000, { n: 1 });
      await step('e2', 2000, { n: 2 });
      session.events.push(ev('x', 2500)); // pushed by hand: the append of x replaces it
      await step('x', 2500, { n: 3 });
      session.events[1] = ev('y', 2600); // a middle element replaced by another id
      session.events.pop(); // and the last removed: x is appended again below
      await step('x', 2500, { n: 3 });
      await step('y', 2600, { n: 4 }); // replaces the y put in by hand
      session.events = [session.events[0]]; // a new list
      await step('e3', 3000, { n: 5 });
      await step('e3', 3000, { n: 5 }); // an exact retry
      live.push({ seen, state: session.state });
    }
    const [want, got] = live;
    assert.deepEqual(got.seen.map((events) => events.map((e) => e.id)),
      [['e1'], ['e1', 'e2'], ['e1', 'e2', 'x'], ['e1', 'y', 'x'], ['e1', 'y', 'x'], ['e1', 'e3'], ['e1', 'e3']]);
    assert.deepEqual(got.seen, want.seen);
    assert.deepEqual(got.state, want.state);
  });

  test('appending to a session that does not exist fails with not_found', async () => {
    const session = { id: 'nope', appName: 'ap', userId: 'u', state: {}, events: [], lastUpdateTime: 0 };
    await assert.rejects(service.appendEvent({ session, event: ev('x', 1) }), isKind('not_found'));
    assert.deepEqual(session.events, []);
  });

  test('many concurrent appends keep each session\'s order and lose nothing', async () => {
    const sessions = await Promise.all(Array.from({ length: 40 }, (_, i) =>
      service.createSession({ appName: 'conc', userId: `u${i % 4}`, sessionId: `s${i}` })));
    const calls = [];
    for (let n = 0; n < 50; n++) {
      for (const s of sessions) {
        calls.push(service.appendEvent({ session: s, event: ev(`${s.id}-${n}`, 1000 + n, { n }) }));
      }
    }
    await Promise.all(calls);
    const read = await Promise.all(sessions.map((s) =>
      service.getSession({ appName: 'conc', userId: s.userId, sessionId: s.id })));
    for (const [i, s] of read.entries()) {
      assert.deepEqual(s.events.map((e) => e.id), Array.from({ length: 50 }, (_, n) => `s${i}-${n}`));
      assert.equal(s.state.n, 49);
    }
  });
});

describe('listSessions', () => {
  const users = ['u1', 'u2', 'u3'];
  let ref;
  before(async () => {
    ref = new InMemorySessionService();
    let ts = 10_000;
    for (const svc of [ref, service]) {
      ts = 10_000;
      for (const user of users) {
        for (let i = 0; i < 4; i++) {
          const s = await svc.createSession({ appName: 'ls', userId: user, sessionId: `${user}-${i}`,
            state: { i, 'user:who': user } });
          await svc.appendEvent({ session: s, event: ev(`e-${user}-${i}`, (ts += 10)) });
        }
      }
    }
  });

  test('paging, order and totals are ADK-JS\'s', async () => {
    const requests = [];
    for (const userId of [undefined, 'u2', 'nobody']) {
      for (const order of ['asc', 'desc']) {
        requests.push({ userId, order });
        for (const limit of [0, 1, 3, 5, 12, 20]) {
          requests.push({ userId, order, limit });
          for (const offset of [0, 2, 7, 13]) requests.push({ userId, order, limit, offset });
          for (const page of [1, 2, 3, 5]) requests.push({ userId, order, limit, page });
        }
        for (const offset of [1, 5, 12, 30]) requests.push({ userId, order, offset });
      }
    }
    for (const r of requests) {
      const want = await ref.listSessions({ appName: 'ls', ...r });
      const got = await service.listSessions({ appName: 'ls', ...r });
      const what = JSON.stringify(r);
      assert.deepEqual(got.sessions.map((s) => s.id), want.sessions.map((s) => s.id), what);
      assert.deepEqual({ ...got, sessions: null }, { ...want, sessions: null }, what);
      for (const s of got.sessions) {
        assert.equal(s.lastUpdateTime, want.sessions.find((w) => w.id === s.id).lastUpdateTime);
      }
    }
  });

  test('without an order, sessions come oldest first', async () => {
    const got = await service.listSessions({ appName: 'ls' });
    const want = await ref.listSessions({ appName: 'ls', order: 'asc' });
    assert.deepEqual(got.sessions.map((s) => s.id), want.sessions.map((s) => s.id));
  });

  test('listed sessions carry merged state and no events', async () => {
    const got = await service.listSessions({ appName: 'ls', userId: 'u1', limit: 1 });
    assert.deepEqual(got.sessions[0].state, { i: 0, 'user:who': 'u1' });
    assert.deepEqual(got.sessions[0].events, []);
    assert.equal(got.sessions[0].appName, 'ls');
    assert.equal(got.sessions[0].userId, 'u1');
  });

  test('more sessions than one protocol page are all returned', async () => {
    const n = 1205;
    await Promise.all(Array.from({ length: n }, (_, i) =>
      service.createSession({ appName: 'many', userId: `u${i % 7}`, sessionId: `s${String(i).padStart(5, '0')}` })));
    const all = await service.listSessions({ appName: 'many' });
    assert.equal(all.sessions.length, n);
    assert.equal(new Set(all.sessions.map((s) => s.id)).size, n);
    assert.deepEqual({ ...all, sessions: null }, { sessions: null, page: 1, limit: n, totalItems: n, totalPages: 1 });
    const tail = await service.listSessions({ appName: 'many', offset: 1000 });
    assert.deepEqual(tail.sessions.map((s) => s.id), all.sessions.slice(1000).map((s) => s.id));
    const big = await service.listSessions({ appName: 'many', limit: 1100, offset: 50, order: 'desc' });
    const desc = [...all.sessions].reverse();
    assert.equal(big.sessions.length, 1100);
    assert.deepEqual(big.sessions.map((s) => s.id), desc.slice(50, 1150).map((s) => s.id));
    assert.deepEqual([big.page, big.limit, big.totalItems, big.totalPages], [1, 1100, n, 2]);
  });

  test('bad paging values are refused', async () => {
    for (const r of [{ limit: -1 }, { offset: 1.5 }, { page: 0 }, { order: 'up' }, { limit: '3' }]) {
      await assert.rejects(service.listSessions({ appName: 'ls', ...r }), isKind('invalid_argument'), JSON.stringify(r));
    }
  });
});

describe('getOrCreateSession', () => {
  test('racing calls on one id all get the one session', async () => {
    const results = await Promise.all(Array.from({ length: 8 }, () =>
      service.getOrCreateSession({ appName: 'race', userId: 'u', sessionId: 'one', state: { k: 1 } })));
    for (const s of results) assert.deepEqual(s, results[0]);
    const listed = await service.listSessions({ appName: 'race' });
    assert.deepEqual(listed.sessions.map((s) => s.id), ['one']);
  });

  test('returns the stored session when it exists and creates one without an id', async () => {
    const s = await service.createSession({ appName: 'race', userId: 'u', sessionId: 'two' });
    await service.appendEvent({ session: s, event: ev('e', 5, { a: 1 }) });
    const got = await service.getOrCreateSession({ appName: 'race', userId: 'u', sessionId: 'two' });
    assert.deepEqual(got.state, { a: 1 });
    assert.equal(got.events.length, 1);
    const fresh = await service.getOrCreateSession({ appName: 'race', userId: 'u' });
    assert.notEqual(fresh.id, 'two');
  });
});

describe('lifecycle', () => {
  test('close() waits for every call in flight; the store keeps them; the child exits 0', { skip: ownProcess('checks the spawned server\'s exit') }, async () => {
    const dir = scratchDir('close');
    const s = new AgentStateSessionService({ store: dir, binary: BIN });
    const session = await s.createSession({ appName: 'l', userId: 'u', sessionId: 's', state: { 'app:a': 1 } });
    const pending = [];
    for (let i = 0; i < 200; i++) pending.push(s.appendEvent({ session, event: ev(`e${i}`, 1000 + i, { i }) }));
    const pid = s.serverPid;
    await s.close();
    await Promise.all(pending);
    assert.throws(() => process.kill(pid, 0), { code: 'ESRCH' });
    await assert.rejects(s.getSession({ appName: 'l', userId: 'u', sessionId: 's' }), isKind('unavailable'));
    await s.close();
    const again = new AgentStateSessionService({ store: dir, binary: BIN });
    const got = await again.getSession({ appName: 'l', userId: 'u', sessionId: 's' });
    assert.equal(got.events.length, 200);
    assert.deepEqual(got.state, { 'app:a': 1, i: 199 });
    await again.close();
  });

  test('a second server on an open store fails with the server\'s reason', { skip: ownProcess('starts two servers on one store') }, async () => {
    const dir = scratchDir('owner');
    const first = new AgentStateSessionService({ store: dir, binary: BIN });
    await first.createSession({ appName: 'l', userId: 'u' });
    const second = new AgentStateSessionService({ store: dir, binary: BIN });
    await assert.rejects(second.createSession({ appName: 'l', userId: 'u' }), (err) => {
      isKind('unavailable')(err);
      assert.match(err.message, /exited with code 1/);
      return true;
    });
    await assert.rejects(second.close(), isKind('unavailable'));
    await first.close();
  });

  test('connects over TCP to a running server', async () => {
    const server = spawn(BIN, ['serve', '--memory', '--listen', '0'], { stdio: ['ignore', 'ignore', 'pipe'] });
    try {
      const address = await new Promise((resolve, reject) => {
        let text = '';
        server.stderr.setEncoding('utf8');
        server.stderr.on('data', (s) => {
          text += s;
          const m = /listening on ([^\s"]+)/.exec(text); // the log line quotes its message
          if (m) resolve(m[1]);
        });
        server.on('exit', (code) => reject(new Error(`server exited ${code}: ${text}`)));
      });
      const a = new AgentStateSessionService({ address });
      assert.equal(a.serverPid, undefined);
      const s = await a.createSession({ appName: 't', userId: 'u', sessionId: 's' });
      await Promise.all(Array.from({ length: 100 }, (_, i) =>
        a.appendEvent({ session: s, event: ev(`e${i}`, 1000 + i, { i }) })));
      await a.close();
      const b = new AgentStateSessionService({ address });
      const got = await b.getSession({ appName: 't', userId: 'u', sessionId: 's' });
      assert.equal(got.events.length, 100);
      await b.close();
      // One try (retryForMs 0): the retries are reconnect.test.mjs's.
      const refused = new AgentStateSessionService({ address: '127.0.0.1:1', retryForMs: 0 });
      await assert.rejects(refused.getSession({ appName: 't', userId: 'u', sessionId: 's' }), isKind('unavailable'));
      await refused.close();
    } finally {
      server.kill('SIGTERM');
    }
  });

  test('an unclosed service does not keep node running; its server still flushes', { skip: ownProcess('a child node process spawns a server and reads its store') }, async () => {
    const dir = scratchDir('unref');
    const script = `
      import { AgentStateSessionService } from ${JSON.stringify(path.resolve('src/index.js'))};
      const s = new AgentStateSessionService({ store: ${JSON.stringify(dir)}, binary: ${JSON.stringify(BIN)} });
      const session = await s.createSession({ appName: 'x', userId: 'u', sessionId: 's' });
      await s.appendEvent({ session, event: { id: 'e', invocationId: 'i', author: 'a', actions: { stateDelta: { k: 1 }, artifactDelta: {} } } });
      console.log(s.serverPid);
    `;
    const child = spawn(process.execPath, ['--input-type=module', '-e', script], { stdio: ['ignore', 'pipe', 'inherit'] });
    let out = '';
    child.stdout.on('data', (d) => { out += d; });
    const code = await new Promise((resolve) => child.on('exit', resolve));
    assert.equal(code, 0);
    const pid = Number(out.trim());
    // The server ends when node closes its stdin; another service opens the store after it.
    // Ended: no such process, or (Linux) a zombie no parent has reaped yet.
    const ended = () => {
      try {
        if (/^\d+ \(.*\) Z/.test(fs.readFileSync(`/proc/${pid}/stat`, 'utf8'))) return true;
      } catch {}
      try { process.kill(pid, 0); return false; } catch { return true; }
    };
    let gone = false;
    for (let i = 0; i < 200 && !(gone = ended()); i++) {
      await new Promise((r) => setTimeout(r, 50)); // bounded poll of the server's exit (another process)
    }
    assert.ok(gone, `the server ${pid} still runs 10 s after its node exited`);
    const s = new AgentStateSessionService({ store: dir, binary: BIN });
    const got = await s.getSession({ appName: 'x', userId: 'u', sessionId: 's' });
    assert.deepEqual(got.state, { k: 1 });
    await s.close();
  });
});
