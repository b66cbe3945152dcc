// SPDX-License-Identifier: Apache-2.0
// Quick start: ADK-JS sessions stored by agentstate.
// Run: node examples/quickstart.mjs [STORE_DIR] (the addon: $AGENTSTATE_ADDON, else the build
// tree's build/bindings/js/agentstate.node)
// The README quotes the region between the readme markers word for word
// (tests/tools/readme_snippets_test.cpp checks it).
// [readme:adk-js]
import { createEvent } from '@google/adk';
import { AgentStateSessionService } from '@agentstate/adk';

// Opens the store DIR in this process (fsync per commit); hand it to a Runner as
// `new Runner({ appName, agent, sessionService: sessions })`.
const sessions = new AgentStateSessionService({ store: process.argv[2] ?? './agentstate-data' });

const session = await sessions.createSession({
  appName: 'my-app', userId: 'alice', state: { 'user:lang': 'en' },
});
await sessions.appendEvent({
  session,
  event: createEvent({
    invocationId: 'inv-1',
    author: 'planner',
    content: { role: 'model', parts: [{ text: 'Looking it up' }] },
    actions: { stateDelta: { step: 1, 'app:calls': 7, 'temp:scratch': 'never stored' } },
  }),
});

const stored = await sessions.getSession({ appName: 'my-app', userId: 'alice', sessionId: session.id });
console.log(stored.events.length, stored.state); // 1 { 'app:calls': 7, step: 1, 'user:lang': 'en' }
await sessions.close(); // syncs and releases the store
// [/readme:adk-js]
