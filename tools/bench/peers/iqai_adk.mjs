#!/usr/bin/env node
// SPDX-License-Identifier: Apache-2.0
// The in-memory session service of @iqai/adk (an ADK port for TypeScript),
// driven with `agentstate bench`'s workloads a and b, for the same-run ratio
// `agentstate bench --peer tools/bench/peers/iqai_adk.mjs` prints as
// "peer" and "ratio_to_peer". Optional: it needs node >= 20 and `npm ci` in
// this folder; the bench reports a peer that cannot run and goes on.
//
//   a  one session; 20,000* appends, each awaited
//   b  1,000* sessions over 100 users, 20 appends each, 64 chains in flight
//      (each chain awaits its previous append)
// Each append carries a one-key state delta, as the bench's own. Prints one
// JSON object on one line: peer, version, workload, events, events_per_s.
//
// usage: node iqai_adk.mjs --workload a|b [--scale F]
import { createRequire } from 'node:module';
import { parseArgs } from 'node:util';
import { Event, EventActions, InMemorySessionService } from '@iqai/adk';

const { values: opts } = parseArgs({
  options: { workload: { type: 'string' }, scale: { type: 'string', default: '1' } },
});
const scale = Number(opts.scale);
if (!(scale > 0 && scale <= 10)) throw new Error(`--scale must be a number, 0 < F <= 10, not ${opts.scale}`);
const sized = (n, min) => Math.max(min, Math.round(n * scale));
const version = createRequire(import.meta.url)('@iqai/adk/package.json').version;

function event(invocationId, i) {
  return new Event({
    invocationId,
    author: 'bench',
    actions: new EventActions({ stateDelta: { step: i } }),
  });
}

async function workloadA(service) {
  const n = sized(20000, 10);
  const session = await service.createSession('bench-a', 'u0');
  const t0 = performance.now();
  for (let i = 0; i < n; i++) await service.appendEvent(session, event('inv-a', i));
  const seconds = (performance.now() - t0) / 1000;
  if (session.state.step !== n - 1) throw new Error('a: the last append is not in the session');
  return { events: n, events_per_s: n / seconds };
}

async function workloadB(service) {
  const sessions = [];
  const count = sized(1000, 8);
  for (let i = 0; i < count; i++) {
    sessions.push(await service.createSession('bench-b', `u${i % Math.min(100, count)}`));
  }
  const per = 20;
  let next = 0;
  const chain = async () => {
    while (next < sessions.length) {
      const session = sessions[next++];
      for (let k = 0; k < per; k++) await service.appendEvent(session, event(`inv-${session.id}`, k));
    }
  };
  const t0 = performance.now();
  await Promise.all(Array.from({ length: Math.min(64, count) }, chain));
  const seconds = (performance.now() - t0) / 1000;
  for (const s of sessions) {
    if (s.events.length !== per) throw new Error(`b: session ${s.id} holds ${s.events.length} events`);
  }
  return { events: count * per, events_per_s: (count * per) / seconds };
}

const run = { a: workloadA, b: workloadB }[opts.workload];
if (!run) throw new Error(`--workload must be a or b, not ${opts.workload}`);
const result = await run(new InMemorySessionService());
console.log(JSON.stringify({ peer: '@iqai/adk InMemorySessionService', version, workload: opts.workload, ...result }));
