// SPDX-License-Identifier: Apache-2.0
// Compiled (not run) by test/types.test.mjs against src/index.d.ts and @google/adk's types.
import { BaseSessionService, createEvent, Runner, LlmAgent } from '@google/adk';
import type { Event, Session } from '@google/adk';
import { AgentStateError, AgentStateSessionService, ERROR_KINDS } from '@agentstate/adk';
import type {
  AgentStateChange, AgentStateErrorKind, AgentStateSession, AgentStateSessionServiceOptions, AgentStateTlsOptions,
  AgentStateWatch,
} from '@agentstate/adk';

const base: BaseSessionService = new AgentStateSessionService({ store: './data' });
new AgentStateSessionService({ memory: true, durability: 'nosync', binary: '/usr/bin/agentstate' });
new AgentStateSessionService({ store: './data', spawn: true, durability: 'nosync' });
new AgentStateSessionService({
  store: './data', durability: 'nosync', threads: 2, maxStoreBytes: 1 << 30, idleTimeoutMs: 1000,
  sessionTtlMs: 60_000, refreshTtl: true, changeRetention: { maxEntries: 10, maxAgeMs: 1000 },
  limits: { maxEventBytes: 1024, maxResponseBytes: 1 << 20 },
});
// @ts-expect-error the engine's options are the in-process engine's, not a spawned server's
new AgentStateSessionService({ memory: true, binary: '/usr/bin/agentstate', threads: 2 });
// @ts-expect-error nor a server's at an address
new AgentStateSessionService({ address: 'h:1', limits: { maxEventBytes: 1 } });
// @ts-expect-error limits are counts
new AgentStateSessionService({ memory: true, limits: { maxEventBytes: '1' } });
new AgentStateSessionService({ address: '127.0.0.1:7400' });
new AgentStateSessionService({ address: '127.0.0.1:7400', retryForMs: 30_000 });
// @ts-expect-error retryForMs is for a server at an address or a cluster
new AgentStateSessionService({ memory: true, retryForMs: 5 });
new AgentStateSessionService({ address: 'unix:/run/agentstate/sock', token: 'secret-token-0123456789' });
new AgentStateSessionService({ address: 'db:7400', token: 't', tls: { ca: 'PEM', servername: 'db' } });
new AgentStateSessionService({ address: 'db:7400', tls: true });
const mutual: AgentStateTlsOptions = { ca: ['PEM'], cert: new Uint8Array(4), key: 'PEM', minVersion: 'TLSv1.3' };
new AgentStateSessionService({ address: 'db:7400', tls: mutual });
// @ts-expect-error ca is text or bytes
new AgentStateSessionService({ address: 'db:7400', tls: { ca: 7 } });
// @ts-expect-error a token is for a server at an address
new AgentStateSessionService({ memory: true, token: 't' });
// @ts-expect-error tls is for a server at an address
new AgentStateSessionService({ store: './x', tls: true });
// @ts-expect-error host and port come from the address
new AgentStateSessionService({ address: 'db:7400', tls: { port: 1 } });
const options: AgentStateSessionServiceOptions = { store: './x', durability: 'sync' };
// @ts-expect-error exactly one of store, memory and address
new AgentStateSessionService({ memory: true, store: './x' });
// @ts-expect-error durability belongs to a spawned server
new AgentStateSessionService({ address: 'h:1', durability: 'sync' });
// @ts-expect-error durability is sync or nosync
new AgentStateSessionService({ memory: true, durability: 'always' });

new Runner({ appName: 'a', agent: new LlmAgent({ name: 'x', model: 'm' }), sessionService: base });

export async function use(service: AgentStateSessionService): Promise<number> {
  const session: Session = await service.createSession({ appName: 'a', userId: 'u', state: { k: 1 } });
  const got: Session | undefined = await service.getSession({
    appName: 'a', userId: 'u', sessionId: session.id, config: { numRecentEvents: 10, afterTimestamp: 1 },
  });
  const event: Event = await service.appendEvent({ session, event: createEvent({ author: 'a' }) });
  const listed = await service.listSessions({ appName: 'a', userId: 'u', limit: 10, offset: 0, page: 1, order: 'desc' });
  const same: Session = await service.getOrCreateSession({ appName: 'a', userId: 'u', sessionId: 's' });
  await service.deleteSession({ appName: 'a', userId: 'u', sessionId: same.id });
  const pid: number | undefined = service.serverPid;
  const key = { appName: 'a', userId: 'u', sessionId: 's' };
  const expiring: AgentStateSession = await service.createSession({ appName: 'a', userId: 'u', ttlMs: 1000, refreshTtl: true });
  const version: number | undefined = expiring.version;
  const then = await service.getSession({ ...key, asOfVersion: 1, applyRewinds: true });
  const exact: boolean | undefined = then?.asOf?.exact;
  await service.appendEvent({
    session, event, expectedVersion: 1,
    modify: [{ key: 'n', op: 'increment', by: 1 }, { key: 'k', op: 'compare_and_set', expected: 1, value: 2 }],
  });
  // @ts-expect-error increment takes `by`
  await service.appendEvent({ session, event, modify: [{ key: 'n', op: 'increment', value: 1 }] });
  await service.deleteUser({ appName: 'a', userId: 'u' });
  await service.deleteApp({ appName: 'a' });
  const plan = await service.rewindPlan({ ...key, beforeVersion: 2 });
  const rewound = await service.rewind({ ...key, beforeInvocationId: 'i', eventId: 'rw', expectedVersion: 3 });
  // @ts-expect-error one point only
  await service.rewind({ ...key, beforeInvocationId: 'i', beforeVersion: 2 });
  const invocations = await service.listInvocations(key);
  const forked: AgentStateSession = await service.fork({ ...key, atVersion: 1, newSessionId: 'f' });
  const page = await service.readChanges({ scope: 'user', appName: 'a', userId: 'u', includeSessions: true, from: 'start', limit: 10 });
  // @ts-expect-error scope all names no app
  await service.readChanges({ scope: 'all', appName: 'a' });
  const watch: AgentStateWatch = await service.watch({ scope: 'session', ...key, from: page.cursor, maxBufferBytes: 1 << 20 });
  for await (const batch of watch) {
    const change: AgentStateChange = batch.changes[0];
    if (change.kind === 'append' && change.event) break;
  }
  const resume: string = await watch.close();
  try {
    await service.close();
  } catch (err) {
    if (err instanceof AgentStateError) {
      const kind: AgentStateErrorKind = err.kind;
      const code: number | undefined = err.code;
      if (kind === 'unavailable' && code === undefined && ERROR_KINDS.includes(kind)) return -1;
    }
  }
  return listed.totalPages + listed.totalItems + listed.page + listed.limit + event.timestamp
    + (got?.events.length ?? 0) + (pid ?? 0) + String(options.durability).length
    + (version ?? 0) + Number(exact) + plan.beforeVersion + rewound.version + invocations.length
    + forked.events.length + resume.length + Number(page.atHead);
}
