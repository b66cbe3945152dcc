// SPDX-License-Identifier: Apache-2.0
// `agentstate export --to-adk-sqlite` and `import --from-adk-sqlite` against ADK-JS's own
// DatabaseSessionService (@google/adk 2.0.0 on @mikro-orm/sqlite): a store written
// through AgentStateSessionService and exported is served by DatabaseSessionService with
// the same sessions, events and merged state; a file DatabaseSessionService wrote and
// agentstate imported is served by AgentStateSessionService the same way.
import assert from 'node:assert/strict';
import { execFileSync } from 'node:child_process';
import path from 'node:path';
import { test } from 'node:test';
import { createEvent } from '@google/adk';
import { DatabaseSessionService } from '@google/adk/sessions/database';
import { AgentStateSessionService } from '../src/index.js';
import { agentstateBin, asJson, scratchDir } from './support/env.mjs';

const BIN = agentstateBin();
const T0 = 1760000000000; // ms; every event time below is distinct (ADK orders by time)

// Sessions with events covering what a runner writes: text, function calls and responses,
// app:/user:/session/temp: state deltas, artifacts, metadata, transfers, a time that is
// not a whole millisecond. Each entry: [appName, userId, sessionId, initial state, events].
const SESSIONS = [
  ['travel', 'ana', 'trip-1', { destination: 'Lisbon', 'user:lang': 'pt', 'app:version': 3, 'temp:x': 1 }, [
    { invocationId: 'inv-1', author: 'user', timestamp: T0 + 10,
      content: { role: 'user', parts: [{ text: 'Find a hotel in Lisbon, \u00e0 la plage \u{1F3D6}' }] },
      actions: { stateDelta: { step: 'search', 'temp:draft': 'dropped' } } },
    { invocationId: 'inv-1', author: 'planner', branch: 'planner', timestamp: T0 + 700,
      content: { role: 'model', parts: [{ functionCall: { id: 'fc-1', name: 'search_hotels',
        args: { city: 'Lisbon', maxPrice: 120, tags: ['sea'] } } }] },
      usageMetadata: { promptTokenCount: 52, candidatesTokenCount: 9, totalTokenCount: 61 } },
    { invocationId: 'inv-1', author: 'planner', branch: 'planner', timestamp: T0 + 1000.25,
      content: { role: 'user', parts: [{ functionResponse: { id: 'fc-1', name: 'search_hotels',
        response: { hotels: [{ name: 'Mar', pricePerNight: 95 }] } } }] },
      actions: { stateDelta: { step: 'found', 'user:lastCity': 'Lisbon', 'app:searches': 1 },
        artifactDelta: { 'hotels.json': 0 }, skipSummarization: true } },
    { invocationId: 'inv-2', author: 'planner', timestamp: T0 + 2000,
      content: { role: 'model', parts: [{ text: 'Booked.' }] },
      customMetadata: { rating: 4.5, sourceIds: ['a1', 'b2'] }, turnComplete: true,
      actions: { stateDelta: { step: 'booked', booking: { id: 'B-7', nights: 2 } } } },
  ]],
  ['travel', 'ana', 'trip-2', { destination: 'Porto' }, []],
  ['travel', 'ben', 'ben-1', {}, [
    { invocationId: 'inv-9', author: 'user', timestamp: T0 + 3000,
      content: { role: 'user', parts: [{ text: 'Approve my refund' }] } },
    { invocationId: 'inv-9', author: 'refunds', timestamp: T0 + 3500,
      content: { role: 'model', parts: [{ functionCall: { id: 'lr-9', name: 'ask_approval', args: {} } }] },
      longRunningToolIds: ['lr-9'], actions: { transferToAgent: 'approvals', escalate: true,
        stateDelta: { 'user:tier': 'gold' } } },
  ]],
  ['notes', 'cy', 'n-1', { 'app:theme': 'dark' }, [
    { invocationId: 'inv-n', author: 'notes', timestamp: T0 + 4000,
      content: { role: 'model', parts: [{ text: 'noted' }] }, actions: { stateDelta: { count: 1 } } },
  ]],
];

// Writes SESSIONS through `service` (ids given, in order).
async function populate(service) {
  for (const [appName, userId, sessionId, state, events] of SESSIONS) {
    const session = await service.createSession({ appName, userId, sessionId, state });
    for (const fields of events) {
      await service.appendEvent({ session, event: createEvent({ id: `${sessionId}-e${fields.timestamp - T0}`, ...fields }) });
    }
  }
}

// What `service` serves for SESSIONS: every session whole, its last two events, the
// sessions listed per app (oldest and newest first) and per user.
async function served(service) {
  const out = { sessions: {}, recent: {}, lists: {} };
  for (const [appName, userId, sessionId] of SESSIONS) {
    const key = `${appName}/${userId}/${sessionId}`;
    out.sessions[key] = asJson(await service.getSession({ appName, userId, sessionId }));
    out.recent[key] = asJson(await service.getSession({ appName, userId, sessionId, config: { numRecentEvents: 2 } }));
  }
  for (const appName of ['travel', 'notes']) {
    for (const order of ['asc', 'desc']) {
      out.lists[`${appName} ${order}`] = asJson(await service.listSessions({ appName, order }));
    }
    out.lists[`${appName} ana`] = asJson(await service.listSessions({ appName, userId: 'ana', order: 'asc' }));
  }
  return out;
}

function checkContent(got) {
  const trip = got.sessions['travel/ana/trip-1'];
  assert.equal(trip.events.length, 4);
  assert.deepEqual(trip.state, { destination: 'Lisbon', step: 'booked', booking: { id: 'B-7', nights: 2 },
    'user:lang': 'pt', 'user:lastCity': 'Lisbon', 'app:version': 3, 'app:searches': 1 });
  assert.equal(trip.events[2].timestamp, T0 + 1000.25);
  assert.deepEqual(got.sessions['travel/ben/ben-1'].state, { 'user:tier': 'gold', 'app:version': 3, 'app:searches': 1 });
  // Last updated: trip-1 and ben-1 at their last event, trip-2 when it was created (now).
  assert.deepEqual(got.lists['travel asc'].sessions.map((s) => s.id), ['trip-1', 'ben-1', 'trip-2']);
}

// `served` output with every session's lastUpdateTime in whole milliseconds, as ADK-JS
// serves it: DatabaseSessionService reads update_time into a Date, which drops a fraction
// of a millisecond (the server stamps a session created without events with its clock's
// full precision). Event times come from event_data and keep theirs.
function inWholeMs(out) {
  const fix = (s) => ({ ...s, lastUpdateTime: Math.floor(s.lastUpdateTime) });
  const map = (o, f) => Object.fromEntries(Object.entries(o).map(([k, v]) => [k, f(v)]));
  return {
    sessions: map(out.sessions, fix),
    recent: map(out.recent, fix),
    lists: map(out.lists, (l) => ({ ...l, sessions: l.sessions.map(fix) })),
  };
}

// ADK-JS's DatabaseSessionService on `file`, closed after `use`.
async function withDatabase(file, use) {
  const db = new DatabaseSessionService(`sqlite://${file}`);
  try {
    return await use(db);
  } finally {
    if (db.orm) await db.orm.close();
  }
}

test('export --to-adk-sqlite: DatabaseSessionService serves the store as AgentStateSessionService did', async () => {
  const dir = scratchDir('adk-export');
  const store = path.join(dir, 'store');
  const file = path.join(dir, 'sessions.db');
  const ours = new AgentStateSessionService({ store, binary: BIN });
  await populate(ours);
  const expected = await served(ours);
  await ours.close();
  checkContent(expected);

  const summary = JSON.parse(execFileSync(BIN, ['export', '--to-adk-sqlite', file, store], { encoding: 'utf8' }));
  assert.equal(summary.sessions, 4);
  assert.equal(summary.events, 7);

  await withDatabase(file, async (db) => {
    const got = await served(db);
    const want = inWholeMs(expected);
    assert.deepEqual(got.sessions, want.sessions);
    assert.deepEqual(got.recent, want.recent);
    assert.deepEqual(got.lists, want.lists);
    // The file is ADK's own from then on: it appends to an exported session.
    const session = await db.getSession({ appName: 'travel', userId: 'ben', sessionId: 'ben-1' });
    await db.appendEvent({ session, event: createEvent({ id: 'later', invocationId: 'inv-10', author: 'user',
      timestamp: T0 + 5000, actions: { stateDelta: { 'user:tier': 'platinum', done: true } } }) });
    const after = await db.getSession({ appName: 'travel', userId: 'ben', sessionId: 'ben-1' });
    assert.deepEqual(after.events.map((e) => e.id), ['ben-1-e3000', 'ben-1-e3500', 'later']);
    assert.deepEqual(after.state, { 'user:tier': 'platinum', done: true, 'app:version': 3, 'app:searches': 1 });
  });
});

test('import --from-adk-sqlite: AgentStateSessionService serves a DatabaseSessionService file as ADK did', async () => {
  const dir = scratchDir('adk-import');
  const file = path.join(dir, 'sessions.db');
  const store = path.join(dir, 'store');
  const expected = await withDatabase(file, async (db) => {
    await populate(db);
    return served(db);
  });
  checkContent(expected);

  const summary = JSON.parse(execFileSync(BIN, ['import', '--from-adk-sqlite', file, store], { encoding: 'utf8' }));
  assert.equal(summary.sessions, 4);
  assert.equal(summary.events, 7);

  const ours = new AgentStateSessionService({ store, binary: BIN });
  try {
    const got = await served(ours);
    assert.deepEqual(got.sessions, expected.sessions);
    assert.deepEqual(got.recent, expected.recent);
    assert.deepEqual(got.lists, expected.lists);
  } finally {
    await ours.close();
  }
});
