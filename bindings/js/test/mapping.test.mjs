// SPDX-License-Identifier: Apache-2.0
// The event mapping, through a real `agentstate serve` (the walk over every member of
// ADK-JS's Event type is in types.test.mjs).
import assert from 'node:assert/strict';
import { describe, test } from 'node:test';
import { createEvent } from '@google/adk';
import { AgentStateError } from '../src/index.js';
import { eventFromWire, eventToWire, msToSeconds, secondsToMs } from '../src/mapping.js';
import { camelToSnake, FROM_WIRE, KNOWN, TO_WIRE } from '../src/names.js';
import { asJson } from './support/env.mjs';
import { memoryServiceForFile, rawServer } from './support/memory_service.mjs';

const APP = 'mapping';
const shared = memoryServiceForFile();

describe('the name table', () => {
  test('maps names one to one and back', () => {
    for (const name of KNOWN) {
      assert.ok(!name.includes('_'), `known name ${name} holds '_'`);
      const wire = TO_WIRE.get(name) ?? name;
      assert.equal(wire, camelToSnake(name));
      assert.equal(FROM_WIRE.get(wire) ?? wire, name);
    }
    assert.equal(new Set(TO_WIRE.values()).size, TO_WIRE.size);
    assert.ok(!KNOWN.has('invocation_id'));
    assert.equal(TO_WIRE.get('invocationId'), 'invocation_id');
    assert.equal(TO_WIRE.get('authProviderX509CertUrl'), 'auth_provider_x509_cert_url');
  });
});

describe('events through the server', () => {
  test('an event made by createEvent comes back as created', async () => {
    const session = await shared.service.createSession({ appName: APP, userId: 'u' });
    const event = createEvent({ author: 'agent', invocationId: 'inv-1', content: { role: 'model', parts: [{ text: 'hi' }] } });
    const expected = asJson(event);
    await shared.service.appendEvent({ session, event });
    const got = await shared.service.getSession({ appName: APP, userId: 'u', sessionId: session.id });
    assert.deepEqual(asJson(got.events), [expected]);
  });

  test('an event without author, id or timestamp gets the server\'s id and time; author stays absent', async () => {
    const session = await shared.service.createSession({ appName: APP, userId: 'u' });
    const before = Date.now();
    const event = { invocationId: 'inv', actions: { stateDelta: {}, artifactDelta: {} } };
    await shared.service.appendEvent({ session, event });
    assert.equal(typeof event.id, 'string');
    assert.ok(event.id.length > 0);
    assert.ok(event.timestamp >= before - 1000 && event.timestamp <= Date.now() + 1000);
    const got = await shared.service.getSession({ appName: APP, userId: 'u', sessionId: session.id });
    assert.deepEqual(asJson(got.events), [asJson(event)]);
    assert.ok(!('author' in got.events[0]));
  });

  test('milliseconds come back exactly, fractions included', async () => {
    const session = await shared.service.createSession({ appName: APP, userId: 'u' });
    const stamps = [Date.now(), 1_700_000_000_123.456, 0.001, 1, 2 ** 52 + 0.5, 1_795_443_518_795, 1e-300];
    for (const [i, ts] of stamps.entries()) {
      await shared.service.appendEvent({ session, event: { id: `t${i}`, invocationId: 'i', author: 'a', timestamp: ts } });
    }
    const got = await shared.service.getSession({ appName: APP, userId: 'u', sessionId: session.id });
    assert.deepEqual(got.events.map((e) => e.timestamp), stamps);
    for (let i = 0; i < 20000; i++) {
      const whole = Math.floor(Math.random() * 4e12);
      assert.equal(secondsToMs(msToSeconds(whole)), whole);
      const micros = Number((Math.random() * 4e12).toFixed(3));
      assert.equal(secondsToMs(msToSeconds(micros)), micros);
      // Finer fractions: within one unit in the last place.
      const fine = Math.random() * 4e12;
      const back = secondsToMs(msToSeconds(fine));
      assert.ok(Math.abs(back - fine) <= fine * Number.EPSILON, `${fine} came back as ${back}`);
    }
  });

  test('a member that could not be read back as given is refused and nothing is stored', async () => {
    const session = await shared.service.createSession({ appName: APP, userId: 'u' });
    const bad = [
      { invocation_id: 'x' },
      { actions: { state_delta: { a: 1 } } },
      { content: { parts: [{ function_call: { name: 'f' } }] } },
      { usageMetadata: { prompt_token_count: 3 } },
    ];
    for (const extra of bad) {
      const event = { id: 'bad', author: 'a', invocationId: 'i', ...extra };
      await assert.rejects(shared.service.appendEvent({ session, event }), (err) => {
        assert.ok(err instanceof AgentStateError);
        assert.equal(err.kind, 'invalid_argument');
        assert.match(err.message, /could not be read back/);
        return true;
      });
    }
    await assert.rejects(shared.service.appendEvent({ session, event: { author: 'a', content: { parts: [{ text: 'x' }, { function_call: {} }] } } }),
      { kind: 'invalid_argument', message: /event\.content\.parts\[1\]\.function_call .*'functionCall'/ });
    await assert.rejects(shared.service.appendEvent({ session, event: { timestamp: NaN } }), { kind: 'invalid_argument' });
    const got = await shared.service.getSession({ appName: APP, userId: 'u', sessionId: session.id });
    assert.deepEqual(got.events, []);
    assert.deepEqual(session.events, []);
  });

  test('an event written in snake_case by another client reads as ADK-JS and writes back the same', async () => {
    const conn = rawServer();
    try {
      const python = {
        id: 'py-1', invocation_id: 'inv-py', author: 'py_agent', timestamp: 1_700_000_001.5,
        content: { role: 'model', parts: [{ function_call: { id: 'c1', name: 'lookup', args: { city_name: 'Oslo' } } }] },
        actions: { state_delta: { topic: 'x' }, artifact_delta: {}, state_remove: ['old'], transfer_to_agent: 'b', rewind_before_invocation_id: 'i0' },
        long_running_tool_ids: ['c1'], usage_metadata: { prompt_token_count: 3 }, python_only: { some_field: 1 },
      };
      for (const s of ['a', 'b']) await conn.call('create_session', { app_name: APP, user_id: 'u', session_id: s });
      const first = (await conn.call('append_event', { app_name: APP, user_id: 'u', session_id: 'a', event: python })).event;
      const js = eventFromWire(first);
      assert.equal(js.invocationId, 'inv-py');
      assert.equal(js.timestamp, 1_700_000_001_500);
      assert.deepEqual(js.content.parts[0].functionCall.args, { city_name: 'Oslo' });
      assert.deepEqual(js.actions.stateRemove, ['old']);
      assert.equal(js.actions.transferToAgent, 'b');
      assert.equal(js.actions.rewind_before_invocation_id, 'i0');
      assert.deepEqual(js.longRunningToolIds, ['c1']);
      assert.equal(js.usageMetadata.promptTokenCount, 3);
      assert.deepEqual(js.python_only, { some_field: 1 });
      const second = (await conn.call('append_event', { app_name: APP, user_id: 'u', session_id: 'b', event: eventToWire(js) })).event;
      assert.deepEqual(second, first);
    } finally {
      await conn.close();
    }
  });
});
