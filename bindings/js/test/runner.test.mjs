// SPDX-License-Identifier: Apache-2.0
// Real ADK-JS Runners (scripted model, tools, sub-agent transfer, outputKey, {key}
// instruction templates) on InMemorySessionService and on AgentStateSessionService:
// the same conversations give the same sessions, events and state; a restarted service
// sees all of it; 32 concurrent runners lose nothing.
import assert from 'node:assert/strict';
import { after, describe, test } from 'node:test';
import { InMemorySessionService } from '@google/adk';
import { AgentStateSessionService } from '../src/index.js';
import { agentstateBin, asJson, scratchDir } from './support/env.mjs';
import { converse, makeRunner, normalize } from './support/scripted.mjs';

const BIN = agentstateBin();
const APP = 'trip';
const GUESTS = [['u1', 'Ann', 'Paris'], ['u2', 'Bo', 'Oslo'], ['u3', 'Cy', 'Lima']];
const SESSIONS = GUESTS.flatMap(([user, name, city]) =>
  [0, 1].map((i) => ({ user, id: `${user}-s${i}`, turns: [`remember ${name} ${city}${i}`, 'hello', 'how are you', 'write', 'more please'] })));

const open = [];
after(async () => { await Promise.all(open.map((s) => s.close())); });
function agentstate(options) {
  const s = new AgentStateSessionService({ binary: BIN, ...options });
  open.push(s);
  return s;
}

// One full run: every session's conversation in order; what the app and the models saw.
async function runAll(service) {
  const { runner, models } = makeRunner(service, APP);
  const yielded = [];
  for (const s of SESSIONS) {
    await service.createSession({ appName: APP, userId: s.user, sessionId: s.id, state: { topic: 'none' } });
    yielded.push(...await converse(runner, s.user, s.id, s.turns));
  }
  const sessions = [];
  for (const s of SESSIONS) sessions.push(await service.getSession({ appName: APP, userId: s.user, sessionId: s.id }));
  const listed = await service.listSessions({ appName: APP, order: 'asc' });
  return { yielded, sessions, listed, instructions: models.map((m) => m.instructions) };
}

function stripTimes(list) {
  return { ...list, sessions: list.sessions.map((s) => ({ ...normalize(s), state: s.state })) };
}

describe('a Runner on agentstate', () => {
  const dir = scratchDir('runner');
  let reference;
  let stored;

  test('gives the same sessions, events and state as on InMemorySessionService', async () => {
    reference = await runAll(new InMemorySessionService());
    const service = agentstate({ store: dir });
    const mine = await runAll(service);
    stored = mine.sessions;

    assert.deepEqual(mine.instructions, reference.instructions, 'the models saw the same instructions');
    assert.deepEqual(normalize({ events: mine.yielded }), normalize({ events: reference.yielded }), 'the runner yielded the same events');
    for (const [i, s] of mine.sessions.entries()) {
      assert.deepEqual(normalize(s), normalize(reference.sessions[i]), `session ${SESSIONS[i].id}`);
      assert.equal(s.lastUpdateTime, s.events[s.events.length - 1].timestamp);
    }
    // InMemorySessionService lists sessions without state; agentstate lists merged state.
    assert.deepEqual(mine.listed.sessions.map((s) => s.id), reference.listed.sessions.map((s) => s.id));
    assert.deepEqual(mine.listed.sessions.map((s) => s.state), mine.sessions.map((s) => s.state));

    // The run used what it is meant to test.
    const last = mine.sessions[mine.sessions.length - 1];
    assert.equal(last.state['app:visits'], SESSIONS.length);
    assert.equal(last.state['user:name'], 'Cy');
    assert.equal(last.state.topic, 'Lima1');
    assert.equal(last.state.last_answer, 'Turn 2');
    assert.match(last.state.draft, /^Draft \d+$/);
    for (const s of SESSIONS) assert.equal(last.state[`app:seen_${s.id}`], true);
    const events = mine.sessions.flatMap((s) => s.events);
    assert.ok(events.some((e) => e.actions.transferToAgent === 'writer'));
    assert.ok(events.some((e) => e.content?.parts?.[0]?.functionResponse?.response?.scratch === 'scratch-1'),
      'temp: state is visible within its invocation');
    const text = JSON.stringify(mine.sessions);
    assert.ok(!text.includes('temp:'), 'temp: keys are never stored');
    assert.ok(mine.instructions[1].some((i) => i === 'Write about Paris0 for Ann; earlier draft: .'));
    assert.ok(mine.instructions[0].some((i) => i === 'Guest Bo; topic Oslo1; last answer Turn 2; visits 4.'));
  });

  test('a new service on the same store after a restart sees all of it and goes on alike', async () => {
    await open.pop().close();
    const service = agentstate({ store: dir });
    for (const [i, s] of SESSIONS.entries()) {
      const got = await service.getSession({ appName: APP, userId: s.user, sessionId: s.id });
      assert.deepEqual(asJson(got), asJson(stored[i]), `session ${s.id} after restart`);
    }
    const listed = await service.listSessions({ appName: APP, userId: 'u2' });
    assert.deepEqual(listed.sessions.map((s) => s.id), ['u2-s0', 'u2-s1']);
    assert.equal(listed.totalItems, 2);

    // One more turn on the restarted service and on the in-memory reference.
    const ref = new InMemorySessionService();
    const refRunner = makeRunner(ref, APP);
    for (const s of SESSIONS) {
      await ref.createSession({ appName: APP, userId: s.user, sessionId: s.id, state: { topic: 'none' } });
      await converse(refRunner.runner, s.user, s.id, s.turns);
    }
    const mineRunner = makeRunner(service, APP);
    await converse(mineRunner.runner, 'u1', 'u1-s0', ['hello again']);
    await converse(refRunner.runner, 'u1', 'u1-s0', ['hello again']);
    const mine = await service.getSession({ appName: APP, userId: 'u1', sessionId: 'u1-s0' });
    const want = await ref.getSession({ appName: APP, userId: 'u1', sessionId: 'u1-s0' });
    assert.deepEqual(normalize(mine), normalize(want));
    assert.equal(mineRunner.models[1].instructions.at(-1), refRunner.models[1].instructions.at(-1));
    assert.match(mineRunner.models[1].instructions.at(-1), /^Write about Paris0 for Ann; earlier draft: Draft \d+\.$/);
  });

  test('32 concurrent runners on 32 sessions lose nothing', async () => {
    const service = agentstate({ store: scratchDir('concurrent') });
    const ref = new InMemorySessionService();
    const n = 32;
    const turns = (i) => [`remember G${i} C${i}`, 'hello', 'write', 'more please', 'again'];
    const results = [];
    for (const svc of [ref, service]) {
      await Promise.all(Array.from({ length: n }, async (_, i) => {
        await svc.createSession({ appName: 'busy', userId: `user${i}`, sessionId: `s${i}`, state: { topic: 'none' } });
        const { runner } = makeRunner(svc, 'busy');
        await converse(runner, `user${i}`, `s${i}`, turns(i));
      }));
      results.push(await Promise.all(Array.from({ length: n }, (_, i) =>
        svc.getSession({ appName: 'busy', userId: `user${i}`, sessionId: `s${i}` }))));
    }
    const [want, got] = results;
    // app:visits is a read-modify-write across sessions (lost updates are the app's own,
    // on either service): compare everything else.
    const shape = (s) => {
      const j = normalize(s);
      for (const e of j.events) {
        if (e.actions.stateDelta) delete e.actions.stateDelta['app:visits'];
        const fr = e.content?.parts?.[0]?.functionResponse;
        if (fr?.name === 'remember') delete fr.response.visits;
      }
      delete j.state['app:visits'];
      return j;
    };
    for (let i = 0; i < n; i++) {
      assert.equal(got[i].events.length, want[i].events.length, `session s${i}`);
      assert.deepEqual(shape(got[i]), shape(want[i]), `session s${i}`);
      assert.equal(got[i].state['user:name'], `G${i}`);
      assert.equal(got[i].state.topic, `C${i}`);
    }
    const seen = Object.keys(got[0].state).filter((k) => k.startsWith('app:seen_'));
    assert.equal(seen.length, n);
  });
});
