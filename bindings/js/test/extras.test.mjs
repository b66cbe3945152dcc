// SPDX-License-Identifier: Apache-2.0
// What agentstate adds to ADK's BaseSessionService (TTL, expectedVersion, modify,
// deleteUser and deleteApp, rewind, rewindPlan, listInvocations, fork, asOfVersion,
// readChanges, watch), in each mode: the engine in this process, a spawned server and a
// server at an address. Each extra with good input and with bad input (a typed error,
// stored data intact).
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { createEvent } from '@google/adk';
import { AgentStateError, AgentStateSessionService } from '../src/index.js';
import { agentstateBin, needsAddon } from './support/env.mjs';
import { startServer } from './support/server.mjs';

function isKind(kind, pattern) {
  return (err) => {
    assert.ok(err instanceof AgentStateError, `not an AgentStateError: ${err}`);
    assert.equal(err.kind, kind, err.message);
    if (pattern) assert.match(err.message, pattern);
    return true;
  };
}

function ev(id, invocationId, stateDelta = {}, extra = {}) {
  return createEvent({ id, invocationId, author: 'agent', actions: { stateDelta }, ...extra });
}

// Collects changes from `watch` until `count` have arrived.
async function collect(watch, count) {
  const changes = [];
  while (changes.length < count) {
    const { value, done } = await watch.next();
    assert.equal(done, false, `the watch ended after ${changes.length} of ${count} changes`);
    changes.push(...value.changes);
  }
  return changes;
}

const MODES = {
  'in this process': {
    skip: needsAddon(),
    async open() {
      return { service: new AgentStateSessionService({ memory: true }), stop: async () => {} };
    },
  },
  'a spawned server': {
    skip: false,
    async open() {
      return {
        service: new AgentStateSessionService({ memory: true, binary: agentstateBin() }),
        stop: async () => {},
      };
    },
  },
  'a server at an address': {
    skip: false,
    async open() {
      const server = await startServer(agentstateBin(), ['--memory', '--listen', '127.0.0.1:0']);
      return {
        service: new AgentStateSessionService({ address: server.address }),
        stop: async () => { assert.equal(await server.stop(), 0, server.log()); },
      };
    },
  },
};

for (const [mode, { skip, open }] of Object.entries(MODES)) {
  describe(`the extras, ${mode}`, { skip }, () => {
    let service;
    let stop;
    let n = 0;
    const APP = 'extras';
    const fresh = (prefix) => `${prefix}-${++n}`;

    before(async () => {
      ({ service, stop } = await open());
    });
    after(async () => {
      await service.close();
      await stop();
    });

    test('ttlMs sets the session\'s expiresAt; bad TTLs are invalid_argument', async () => {
      const s = await service.createSession({ appName: APP, userId: 'u', sessionId: fresh('ttl'), ttlMs: 3_600_000 });
      assert.equal(typeof s.expiresAt, 'number');
      assert.ok(Math.abs(s.expiresAt - s.lastUpdateTime - 3_600_000) < 1, `${s.expiresAt} vs ${s.lastUpdateTime}`);
      assert.equal(JSON.stringify(s).includes('expiresAt'), false, 'not part of ADK\'s Session shape');
      const got = await service.getSession({ appName: APP, userId: 'u', sessionId: s.id });
      assert.equal(got.expiresAt, s.expiresAt);
      const plain = await service.createSession({ appName: APP, userId: 'u', sessionId: fresh('ttl') });
      assert.equal(plain.expiresAt, undefined, 'a session without a TTL does not expire');
      const refreshed = await service.createSession({
        appName: APP, userId: 'u', sessionId: fresh('ttl'), ttlMs: 60_000, refreshTtl: true,
      });
      assert.ok(Math.abs(refreshed.expiresAt - refreshed.lastUpdateTime - 60_000) < 1);

      const id = fresh('ttl');
      await assert.rejects(service.createSession({ appName: APP, userId: 'u', sessionId: id, ttlMs: -1 }),
        isKind('invalid_argument', /ttlMs/));
      await assert.rejects(service.createSession({ appName: APP, userId: 'u', sessionId: id, ttlMs: 'soon' }),
        isKind('invalid_argument', /ttlMs/));
      await assert.rejects(service.createSession({ appName: APP, userId: 'u', sessionId: id, refreshTtl: 'yes' }),
        isKind('invalid_argument', /refreshTtl/));
      await assert.rejects(service.createSession({ appName: APP, userId: 'u', sessionId: id, refreshTtl: true }),
        isKind('invalid_argument'), 'refresh_ttl needs a ttl');
      assert.equal(await service.getSession({ appName: APP, userId: 'u', sessionId: id }), undefined);
    });

    test('expectedVersion stores an event only at that version; a conflict carries current_version', async () => {
      const session = await service.createSession({ appName: APP, userId: 'u', sessionId: fresh('ev') });
      assert.equal(session.version, 0);
      await service.appendEvent({ session, event: ev('e1', 'i1', { a: 1 }), expectedVersion: 0 });
      assert.equal(session.version, 1);
      assert.equal(typeof session.cursor, 'string');
      await assert.rejects(service.appendEvent({ session, event: ev('e2', 'i1', { a: 2 }), expectedVersion: 0 }),
        (err) => isKind('version_conflict')(err) && err.data.current_version === 1);
      await assert.rejects(service.appendEvent({ session, event: ev('e3', 'i1'), expectedVersion: -1 }),
        isKind('invalid_argument', /expectedVersion/));
      const stored = await service.getSession({ appName: APP, userId: 'u', sessionId: session.id });
      assert.deepEqual(stored.events.map((e) => e.id), ['e1']);
      assert.deepEqual(stored.state, { a: 1 });
      assert.equal(stored.version, 1);
    });

    test('modify updates state atomically at commit; its results are in the event\'s stateDelta', async () => {
      const session = await service.createSession({ appName: APP, userId: 'u', sessionId: fresh('mod'), state: { tag: 'x' } });
      const first = await service.appendEvent({
        session, event: ev('m1', 'i1'), modify: [{ key: 'n', op: 'increment', by: 2 }, { key: 'log', op: 'append', value: 'a' }],
      });
      assert.equal(first.actions.stateDelta.n, 2);
      await Promise.all([1, 2, 3].map((i) => service.appendEvent({
        session, event: ev(`m${i + 1}`, 'i1'), modify: [{ key: 'n', op: 'increment', by: 1 }],
      })));
      assert.equal(session.state.n, 5, 'the caller\'s session has the committed result');
      await assert.rejects(service.appendEvent({
        session, event: ev('bad-cas', 'i1'), modify: [{ key: 'tag', op: 'compare_and_set', expected: 'y', value: 'z' }],
      }), isKind('condition_failed'));
      await assert.rejects(service.appendEvent({
        session, event: ev('bad-type', 'i1'), modify: [{ key: 'tag', op: 'increment', by: 1 }],
      }), isKind('invalid_argument'));
      await assert.rejects(service.appendEvent({
        session, event: ev('bad-op', 'i1'), modify: [{ key: 'tag', op: 'explode' }],
      }), isKind('invalid_argument'));
      await assert.rejects(service.appendEvent({ session, event: ev('bad-shape', 'i1'), modify: 'n+1' }),
        isKind('invalid_argument', /modify/));
      const stored = await service.getSession({ appName: APP, userId: 'u', sessionId: session.id });
      assert.equal(stored.events.length, 4, 'the refused appends stored nothing');
      assert.deepEqual(stored.state, { tag: 'x', n: 5, log: ['a'] });
    });

    test('deleteUser and deleteApp remove their scope and nothing else', async () => {
      const app = fresh('delapp');
      const other = fresh('keepapp');
      for (const [a, u] of [[app, 'u1'], [app, 'u2'], [other, 'u1']]) {
        await service.createSession({ appName: a, userId: u, sessionId: 's', state: { 'user:k': u, 'app:k': a } });
      }
      await service.deleteUser({ appName: app, userId: 'u1' });
      assert.equal(await service.getSession({ appName: app, userId: 'u1', sessionId: 's' }), undefined);
      const u2 = await service.getSession({ appName: app, userId: 'u2', sessionId: 's' });
      assert.equal(u2.state['user:k'], 'u2');
      await service.deleteApp({ appName: app });
      assert.equal(await service.getSession({ appName: app, userId: 'u2', sessionId: 's' }), undefined);
      assert.ok(await service.getSession({ appName: other, userId: 'u1', sessionId: 's' }), 'another app is untouched');

      await assert.rejects(service.deleteUser({ appName: other }), isKind('invalid_argument', /userId/));
      await assert.rejects(service.deleteApp({ appName: 7 }), isKind('invalid_argument', /appName/));
      await assert.rejects(service.deleteUser({ appName: other, userId: 'u'.repeat(101) }), isKind('too_large'));
      assert.ok(await service.getSession({ appName: other, userId: 'u1', sessionId: 's' }));
    });

    test('rewindPlan, rewind (idempotent by eventId), listInvocations and applyRewinds', async () => {
      const id = fresh('rw');
      const key = { appName: APP, userId: 'u', sessionId: id };
      const session = await service.createSession({ ...key, state: { topic: 'weather' } });
      await service.appendEvent({ session, event: ev('e1', 'inv-1', { step: 1 }) });
      await service.appendEvent({ session, event: ev('e2', 'inv-2', { step: 2, draft: 'x', topic: 'rain' }) });

      const plan = await service.rewindPlan({ ...key, beforeInvocationId: 'inv-2' });
      assert.deepEqual(plan, { stateDelta: { step: 1, topic: 'weather' }, stateRemove: ['draft'], beforeVersion: 2, exact: true });
      assert.equal((await service.getSession(key)).version, 2, 'a plan writes nothing');

      const done = await service.rewind({ ...key, beforeInvocationId: 'inv-2', eventId: 'rw-1' });
      assert.equal(done.version, 3);
      assert.equal(done.event.id, 'rw-1');
      assert.equal(done.event.actions.rewindBeforeInvocationId ?? done.event.actions.rewind_before_invocation_id, 'inv-2');
      assert.equal(typeof done.cursor, 'string');
      const again = await service.rewind({ ...key, beforeInvocationId: 'inv-2', eventId: 'rw-1' });
      assert.equal(again.version, 3, 'the stored rewind answers a re-sent eventId');
      const got = await service.getSession(key);
      assert.deepEqual(got.state, { step: 1, topic: 'weather' });
      assert.equal(got.version, 3);

      const invocations = await service.listInvocations(key);
      assert.deepEqual(invocations.map((i) => [i.invocationId, i.firstVersion, i.lastVersion, i.events, i.annulled, i.rewind]).slice(0, 2),
        [['inv-1', 1, 1, 1, false, false], ['inv-2', 2, 2, 1, true, false]]);
      assert.equal(invocations[2].rewind, true);
      const kept = await service.getSession({ ...key, applyRewinds: true });
      assert.deepEqual(kept.events.map((e) => e.id), ['e1']);

      await assert.rejects(service.rewind({ ...key }), isKind('invalid_argument', /exactly one/));
      await assert.rejects(service.rewindPlan({ ...key, beforeInvocationId: 'inv-1', beforeVersion: 1 }),
        isKind('invalid_argument', /exactly one/));
      await assert.rejects(service.rewind({ ...key, beforeVersion: 9 }), isKind('invalid_argument'));
      await assert.rejects(service.rewind({ ...key, beforeInvocationId: 'no-such' }), isKind('invalid_argument'));
      await assert.rejects(service.rewind({ ...key, beforeVersion: 1, expectedVersion: 1 }),
        (err) => isKind('version_conflict')(err) && err.data.current_version === 3);
      await assert.rejects(service.listInvocations({ ...key, sessionId: fresh('missing') }), isKind('not_found'));
      await assert.rejects(service.getSession({ ...key, applyRewinds: 'yes' }), isKind('invalid_argument', /applyRewinds/));
      assert.equal((await service.getSession(key)).version, 3, 'the refused rewinds wrote nothing');
    });

    test('fork and asOfVersion read and copy the session as it was at a version', async () => {
      const id = fresh('fork');
      const key = { appName: APP, userId: 'u', sessionId: id };
      const session = await service.createSession({ ...key, state: { a: 0 } });
      await service.appendEvent({ session, event: ev('f1', 'i1', { a: 1 }) });
      await service.appendEvent({ session, event: ev('f2', 'i2', { a: 2, b: 1 }) });

      const then = await service.getSession({ ...key, asOfVersion: 1 });
      assert.deepEqual(then.events.map((e) => e.id), ['f1']);
      assert.deepEqual(then.state, { a: 1 });
      assert.equal(then.version, 1);
      assert.deepEqual(then.asOf, { version: 1, sharedState: 'current', exact: true });

      const alt = fresh('alt');
      const forked = await service.fork({ ...key, atVersion: 1, newSessionId: alt });
      assert.equal(forked.id, alt);
      assert.deepEqual(forked.state, { a: 1 });
      assert.equal(forked.version, 1);
      const altStored = await service.getSession({ ...key, sessionId: alt });
      assert.deepEqual(altStored.events.map((e) => e.id), ['f1']);
      const generated = await service.fork({ ...key, atVersion: 0 });
      assert.notEqual(generated.id, id);
      assert.deepEqual(generated.state, { a: 0 });

      await assert.rejects(service.getSession({ ...key, asOfVersion: 9 }), isKind('invalid_argument'));
      await assert.rejects(service.getSession({ ...key, asOfVersion: -1 }), isKind('invalid_argument', /asOfVersion/));
      await assert.rejects(service.fork({ ...key, atVersion: 9 }), isKind('invalid_argument'));
      await assert.rejects(service.fork({ ...key }), isKind('invalid_argument', /atVersion/));
      await assert.rejects(service.fork({ ...key, atVersion: 1, newSessionId: alt }), isKind('already_exists'));
      await assert.rejects(service.fork({ ...key, sessionId: fresh('missing'), atVersion: 0 }), isKind('not_found'));
      assert.equal((await service.getSession(key)).version, 2, 'the source is unchanged');
    });

    test('readChanges pages the feed from a session\'s cursor; bad scopes and cursors are typed errors', async () => {
      const userId = fresh('feed-user');
      const key = { appName: APP, userId, sessionId: 's' };
      const session = await service.createSession({ ...key, state: { k: 0 } });
      const created = session.cursor;
      for (let i = 1; i <= 3; i += 1) await service.appendEvent({ session, event: ev(`c${i}`, 'i', { k: i }) });

      const page = await service.readChanges({ scope: 'session', ...key, from: created, limit: 2 });
      assert.deepEqual(page.changes.map((c) => c.version), [1, 2]);
      const next = await service.readChanges({ scope: 'session', ...key, from: page.cursor });
      assert.deepEqual(next.changes.map((c) => c.version), [3]);
      assert.equal(next.atHead, true);
      const all = await service.readChanges({ scope: 'user', appName: APP, userId, includeSessions: true, from: 'start' });
      const appends = all.changes.filter((c) => c.kind === 'append' && c.sessionId === 's');
      assert.deepEqual(appends.map((c) => c.version), [1, 2, 3]);
      assert.deepEqual(appends.map((c) => c.stateDelta.k), [1, 2, 3]);
      assert.deepEqual(appends.map((c) => c.event.id), ['c1', 'c2', 'c3'], 'events as ADK Events');
      assert.equal(appends[0].event.invocationId, 'i');
      assert.equal(all.atHead, true);
      const rest = await service.readChanges({ scope: 'user', appName: APP, userId, from: all.cursor });
      assert.deepEqual(rest.changes, []);

      await assert.rejects(service.readChanges({ scope: 'galaxy', appName: APP }), isKind('invalid_argument', /scope/));
      await assert.rejects(service.readChanges({ scope: 'user', appName: APP }), isKind('invalid_argument', /userId/));
      await assert.rejects(service.readChanges({ scope: 'all', appName: APP }), isKind('invalid_argument', /'all'/));
      await assert.rejects(service.readChanges({ scope: 'app', appName: APP, limit: 0 }), isKind('invalid_argument', /limit/));
      await assert.rejects(service.readChanges({ scope: 'app', appName: APP, from: 'not-a-cursor' }), isKind('invalid_argument'));
    });

    test('watch delivers changes from a cursor; close() gives the cursor a new watch resumes from', { timeout: 30_000 }, async () => {
      const key = { appName: APP, userId: 'u', sessionId: fresh('watched') };
      const session = await service.createSession(key);
      const watch = await service.watch({ scope: 'session', ...key, from: session.cursor });
      assert.equal(typeof watch.id, 'string');
      for (let i = 1; i <= 3; i += 1) await service.appendEvent({ session, event: ev(`w${i}`, 'i', { n: i }) });
      const seen = await collect(watch, 3);
      assert.deepEqual(seen.map((c) => [c.kind, c.version, c.stateDelta.n]), [['append', 1, 1], ['append', 2, 2], ['append', 3, 3]]);
      const resume = await watch.close();
      assert.equal(resume, watch.cursor);
      assert.deepEqual(await watch.next(), { value: undefined, done: true });
      assert.equal(await watch.close(), resume, 'close() is idempotent');

      await service.appendEvent({ session, event: ev('w4', 'i', { n: 4 }) });
      const again = await service.watch({ scope: 'session', ...key, from: resume });
      const next = await collect(again, 1);
      assert.deepEqual(next.map((c) => c.version), [4], 'nothing missed, nothing repeated');
      // `for await` ends the watch at `break`.
      await service.appendEvent({ session, event: ev('w5', 'i', { n: 5 }) });
      for await (const batch of again) {
        assert.deepEqual(batch.changes.map((c) => c.version), [5]);
        break;
      }
      assert.equal(again.ended.reason, 'cancelled');

      await assert.rejects(service.watch({ scope: 'user', appName: APP }), isKind('invalid_argument', /userId/));
      await assert.rejects(service.watch({ scope: 'session', ...key, from: 'not-a-cursor' }), isKind('invalid_argument'));
      await assert.rejects(service.watch({ scope: 'app', appName: APP, maxBufferBytes: 0 }), isKind('invalid_argument', /maxBufferBytes/));
    });

    test('a watch whose consumer falls behind maxBufferBytes ends with too_large at the consumer\'s cursor', { timeout: 30_000 }, async () => {
      const key = { appName: APP, userId: 'u', sessionId: fresh('slow') };
      const session = await service.createSession(key);
      const start = session.cursor;
      const watch = await service.watch({ scope: 'session', ...key, from: start, maxBufferBytes: 2048 });
      const big = 'x'.repeat(1024);
      for (let i = 1; i <= 4; i += 1) await service.appendEvent({ session, event: ev(`b${i}`, 'i', { big, i }) });
      // Nothing is read: once the four changes' notifications (over 4 KiB) have arrived the
      // watch has ended. They may arrive after the appends' answers, so this polls for the
      // end, bounded.
      for (let i = 0; i < 1000 && watch.ended === undefined; i += 1) {
        await new Promise((resolve) => { setTimeout(resolve, 10); }); // poll: see above
      }
      assert.equal(watch.ended?.reason, 'overflow');
      await assert.rejects(watch.next(), (err) => isKind('too_large')(err)
        && err.data.reason === 'overflow' && err.data.resume_from === start);
      const rest = await service.readChanges({ scope: 'session', ...key, from: watch.cursor });
      assert.deepEqual(rest.changes.map((c) => c.version), [1, 2, 3, 4], 'resuming from its cursor misses nothing');
    });
  });
}
