// SPDX-License-Identifier: Apache-2.0
// What needs ADK-JS's type declarations (one TypeScript program, read once): the name
// table covers every member of the Event type; an Event with every member set, plus
// unknown ones, survives the server and is stored under snake_case names; and
// src/index.d.ts compiles against @google/adk's types and rejects misuse.
import assert from 'node:assert/strict';
import path from 'node:path';
import { describe, test } from 'node:test';
import { eventToWire } from '../src/mapping.js';
import { FROM_WIRE, KNOWN, MAP_OF_RECORDS, OPAQUE } from '../src/names.js';
import { reachableEventMembers, sampleEvent, usageDiagnostics } from './support/adk_types.mjs';
import { asJson, PACKAGE_DIR } from './support/env.mjs';
import { memoryServiceForFile, rawServer } from './support/memory_service.mjs';

const APP = 'types';
const shared = memoryServiceForFile();

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

describe('ADK-JS\'s Event type', () => {
  test('covers every member reachable from @google/adk\'s Event type', () => {
    const reachable = reachableEventMembers();
    assert.ok(reachable.size > 150, `only ${reachable.size} members found: the type walk is broken`);
    const missing = [...reachable].filter(([name]) => !KNOWN.has(name)).map(([n, p]) => `${n} (${p})`);
    assert.deepEqual(missing, [], 'members of ADK-JS\'s Event missing from src/names.js KNOWN');
  });

  test('every field of ADK-JS\'s Event, and unknown ones, come back as given', async () => {
    const session = await shared.service.createSession({ appName: APP, userId: 'u', sessionId: 'full' });
    const event = fullEvent();
    const expected = asJson(event);
    const returned = await shared.service.appendEvent({ session, event });
    assert.equal(returned, event, 'appendEvent returns the caller\'s event');
    const got = await shared.service.getSession({ appName: APP, userId: 'u', sessionId: 'full' });
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

});

test('the type declarations compile and reject misuse', () => {
  const { diagnostics, files } = usageDiagnostics();
  assert.deepEqual(diagnostics, []);
  assert.ok(files.includes(path.join(PACKAGE_DIR, 'src/index.d.ts')), 'the package resolved to its own declarations');
});
