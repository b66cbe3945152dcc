// The event mapping, through a real `agentstate serve`: every member of ADK-JS's Event
// type (read from the installed type declarations) survives storage, is stored under
// ADK-Python's snake_case names, and unknown members are kept as given.
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import { createEvent } from '@google/adk';
import { AgentStateError, AgentStateSessionService } from '../src/index.js';
import { Connection } from '../src/connection.js';
import { eventFromWire, eventToWire, msToSeconds, secondsToMs } from '../src/mapping.js';
import { camelToSnake, FROM_WIRE, KNOWN, MAP_OF_RECORDS, OPAQUE, TO_WIRE } from '../src/names.js';
import { reachableEventMembers, sampleEvent } from './support/adk_types.mjs';
import { agentstateBin, asJson } from './support/env.mjs';

const APP = 'mapping';
let service;
before(() => {
  service = new AgentStateSessionService({ memory: true, binary: agentstateBin() });
});
after(async () => {
  await service.close();
});

function rawServer() {
  return new Connection({ bin: agentstateBin(), args: ['serve', '--memory'] });
}

// Every key of a stored (wire) event outside free-form values, with its path.
function wireKeys(value, path = 'event', out = [], name = '') {
  if (Array.isArray(value)) {
    value.forEach((v, i) => wireKeys(v, `${path}[${i}]`, out, name));
  } else if (value && typeof value === 'object') {
    for (const key of Object.keys(value)) {
      const camel = FROM_WIRE.get(key) ?? key;
      if (!KNOWN.has(camel)) continue; // an unknown member: kept as given
      out.push({ key, path: `${path}.${key}` });
      if (OPAQUE.has(camel)) continue;
      if (MAP_OF_RECORDS.has(camel)) {
        for (const k of Object.keys(value[key])) wireKeys(value[key][k], `${path}.${key}.${k}`, out, camel);
        continue;
      }
      wireKeys(value[key], `${path}.${key}`, out, camel);
    }
  }
  return out;
}

function fullEvent() {
  const event = sampleEvent();
  event.timestamp = 1_700_000_000_123.25;
  event.partial = false;
  // Members ADK-JS does not declare, at three levels, in several styles.
  event.extraTopLevel = { nested_snake: 1, nestedCamel: [{ mimeType: 'not converted' }] };
  event.another_extra = 'snake-named unknown member';
  event.actions.futureFlag = { when: 'later', how_much: 2 };
  event.content.parts[0].futurePart = { keep_me: true };
  return event;
}

describe('the name table', () => {
  test('covers every member reachable from @google/adk\'s Event type', () => {
    const reachable = reachableEventMembers();
    assert.ok(reachable.size > 150, `only ${reachable.size} members found: the type walk is broken`);
    const missing = [...reachable].filter(([name]) => !KNOWN.has(name)).map(([n, p]) => `${n} (${p})`);
    assert.deepEqual(missing, [], 'members of ADK-JS\'s Event missing from src/names.js KNOWN');
  });

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
  test('every field of ADK-JS\'s Event, and unknown ones, come back as given', async () => {
    const session = await service.createSession({ appName: APP, userId: 'u', sessionId: 'full' });
    const event = fullEvent();
    const expected = asJson(event);
    const returned = await service.appendEvent({ session, event });
    assert.equal(returned, event, 'appendEvent returns the caller\'s event');
    const got = await service.getSession({ appName: APP, userId: 'u', sessionId: 'full' });
    assert.equal(got.events.length, 1);
    assert.deepEqual(asJson(got.events[0]), expected);
    assert.deepEqual(asJson(session.events[0]), expected);
    for (const key of ['camelKey', 'snake_key', 'function_call', 'stateDeltaOwn']) {
      assert.deepEqual(got.state[key], expected.actions.stateDelta[key]);
    }
    assert.equal(got.lastUpdateTime, 1_700_000_000_123.25);
  });

  test('are stored under ADK-Python\'s snake_case names, free-form values as given', async () => {
    const conn = rawServer();
    try {
      await conn.call('create_session', { app_name: APP, user_id: 'u', session_id: 's' });
      // The event in the form the service sends it, read back raw.
      const appended = await conn.call('append_event', {
        app_name: APP, user_id: 'u', session_id: 's', event: eventToWire(fullEvent()),
      });
      const stored = (await conn.call('get_session', { app_name: APP, user_id: 'u', session_id: 's' })).events[0];
      assert.deepEqual(stored, appended.event);
      assert.equal(stored.invocation_id, 'invocationId-value');
      assert.equal(stored.timestamp, 1_700_000_000.12325);
      assert.ok(Array.isArray(stored.long_running_tool_ids));
      assert.equal(stored.actions.skip_summarization, true);
      assert.equal(stored.actions.transfer_to_agent, 'transferToAgent-value');
      assert.ok('camelKey' in stored.actions.state_delta, 'state keys are data');
      const part = stored.content.parts[0];
      assert.equal(part.function_call.name, 'name-value');
      assert.ok('camelKey' in part.function_call.args, 'tool arguments are data');
      assert.ok('function_call' in part.function_call.args);
      assert.ok('mime_type' in part.inline_data);
      assert.ok('response' in part.function_response);
      assert.equal(typeof stored.usage_metadata.prompt_token_count, 'number');
      assert.ok(stored.grounding_metadata.grounding_chunks[0].retrieved_context);
      const auth = stored.actions.requested_auth_configs['adk-call_1'];
      assert.equal(auth.raw_auth_credential.service_account.service_account_credential.auth_provider_x509_cert_url,
        'authProviderX509CertUrl-value');
      assert.equal(stored.actions.requested_tool_confirmations['adk-call_1'].confirmed, true);
      // Unknown members: kept under their own names, values untouched.
      assert.deepEqual(stored.extraTopLevel, { nested_snake: 1, nestedCamel: [{ mimeType: 'not converted' }] });
      assert.equal(stored.another_extra, 'snake-named unknown member');
      assert.deepEqual(stored.actions.futureFlag, { when: 'later', how_much: 2 });
      assert.deepEqual(part.futurePart, { keep_me: true });
      // Every other key is snake_case.
      const keys = wireKeys(stored);
      assert.ok(keys.length > 150);
      const notSnake = keys.filter(({ key }) => /[A-Z]/.test(key)).map(({ path }) => path);
      assert.deepEqual(notSnake, []);
    } finally {
      await conn.close();
    }
  });

  test('an event made by createEvent comes back as created', async () => {
    const session = await service.createSession({ appName: APP, userId: 'u' });
    const event = createEvent({ author: 'agent', invocationId: 'inv-1', content: { role: 'model', parts: [{ text: 'hi' }] } });
    const expected = asJson(event);
    await service.appendEvent({ session, event });
    const got = await service.getSession({ appName: APP, userId: 'u', sessionId: session.id });
    assert.deepEqual(asJson(got.events), [expected]);
  });

  test('an event without author, id or timestamp gets the server\'s id and time; author stays absent', async () => {
    const session = await service.createSession({ appName: APP, userId: 'u' });
    const before = Date.now();
    const event = { invocationId: 'inv', actions: { stateDelta: {}, artifactDelta: {} } };
    await service.appendEvent({ session, event });
    assert.equal(typeof event.id, 'string');
    assert.ok(event.id.length > 0);
    assert.ok(event.timestamp >= before - 1000 && event.timestamp <= Date.now() + 1000);
    const got = await service.getSession({ appName: APP, userId: 'u', sessionId: session.id });
    assert.deepEqual(asJson(got.events), [asJson(event)]);
    assert.ok(!('author' in got.events[0]));
  });

  test('milliseconds come back exactly, fractions included', async () => {
    const session = await service.createSession({ appName: APP, userId: 'u' });
    const stamps = [Date.now(), 1_700_000_000_123.456, 0.001, 1, 2 ** 52 + 0.5, 1_795_443_518_795, 1e-300];
    for (const [i, ts] of stamps.entries()) {
      await service.appendEvent({ session, event: { id: `t${i}`, invocationId: 'i', author: 'a', timestamp: ts } });
    }
    const got = await service.getSession({ appName: APP, userId: 'u', sessionId: session.id });
    assert.deepEqual(got.events.map((e) => e.timestamp), stamps);
    for (let i = 0; i < 100000; i++) {
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
    const session = await service.createSession({ appName: APP, userId: 'u' });
    const bad = [
      { invocation_id: 'x' },
      { actions: { state_delta: { a: 1 } } },
      { content: { parts: [{ function_call: { name: 'f' } }] } },
      { usageMetadata: { prompt_token_count: 3 } },
    ];
    for (const extra of bad) {
      const event = { id: 'bad', author: 'a', invocationId: 'i', ...extra };
      await assert.rejects(service.appendEvent({ session, event }), (err) => {
        assert.ok(err instanceof AgentStateError);
        assert.equal(err.kind, 'invalid_argument');
        assert.match(err.message, /could not be read back/);
        return true;
      });
    }
    await assert.rejects(service.appendEvent({ session, event: { author: 'a', content: { parts: [{ text: 'x' }, { function_call: {} }] } } }),
      { kind: 'invalid_argument', message: /event\.content\.parts\[1\]\.function_call .*'functionCall'/ });
    await assert.rejects(service.appendEvent({ session, event: { timestamp: NaN } }), { kind: 'invalid_argument' });
    const got = await service.getSession({ appName: APP, userId: 'u', sessionId: session.id });
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
