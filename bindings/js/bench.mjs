#!/usr/bin/env node
// SPDX-License-Identifier: Apache-2.0
// The ADK-JS session workloads on four session services in one run:
//   inprocess:  AgentStateSessionService with the engine in this process (agentstate.node)
//               on an LMDB store (--durability, default sync);
//   agentstate: AgentStateSessionService on a spawned `agentstate serve` child process
//               on an LMDB store (--durability);
//   memory:     ADK-JS's InMemorySessionService;
//   database:   ADK-JS's DatabaseSessionService on a SQLite file;
//   wire:       (only when listed in --services) workload B sent straight over the
//               protocol connection, without ADK's session bookkeeping: the ceiling the
//               agentstate service works under.
// Workloads (sizes at --scale 1), after docs/performance.md's a, b and c:
//   A  one session; 2,000 appends, each awaited                                events/s
//   B  1,000 sessions over 100 users, 20 events each; 64 chains, each taking a
//      session and appending its 20 events in order (64 appends in flight)   events/s
//   C  one session of 10,000 events; getSession full (p50 of 20 reads) and
//      with numRecentEvents 10 (p50 of 200 reads)                             ms
// B also reports the CPU time spent per event: this process's (every thread: the
// engine's too, in process) plus a spawned server's.
// Prints each figure, then the ratios against the targets, for each agentstate service
// (inprocess, agentstate): >= 30x the database service on every workload, and >= the
// in-memory service on B and both reads.
//
// usage: node bench.mjs [--scale S] [--services inprocess,agentstate,memory,database]
//                       [--durability sync|nosync] [--binary PATH]
//                       [--events-per-session N (B's 20)]
// Needs the agentstate binary (--binary, AGENTSTATE_BIN, or the repository's
// build/bin/agentstate), agentstate.node for inprocess (AGENTSTATE_ADDON, or the
// repository's build/bindings/js/agentstate.node) and devDependencies installed (npm ci).
import fs from 'node:fs';
import os from 'node:os';
import path from 'node:path';
import { fileURLToPath } from 'node:url';
import { parseArgs } from 'node:util';
import { createEvent, InMemorySessionService } from '@google/adk';
import { AgentStateSessionService } from './src/index.js';
import { Connection } from './src/connection.js';
import { eventToWire } from './src/mapping.js';

const here = path.dirname(fileURLToPath(import.meta.url));
const { values: opts } = parseArgs({
  options: {
    scale: { type: 'string', default: '1' },
    services: { type: 'string', default: 'inprocess,agentstate,memory,database' },
    durability: { type: 'string', default: 'sync' },
    binary: { type: 'string' },
    'events-per-session': { type: 'string', default: '20' },
  },
});
const scale = Number(opts.scale);
if (!(scale > 0)) throw new Error(`--scale must be a positive number, not ${opts.scale}`);
const services = opts.services.split(',');
for (const s of services) {
  if (!['inprocess', 'agentstate', 'memory', 'database', 'wire'].includes(s)) throw new Error(`unknown service '${s}'`);
}
const binary = opts.binary ?? process.env.AGENTSTATE_BIN ?? path.resolve(here, '../../build/bin/agentstate');

if (!(Number.isSafeInteger(Number(opts['events-per-session'])) && Number(opts['events-per-session']) > 0)) {
  throw new Error(`--events-per-session must be a positive integer, not ${opts['events-per-session']}`);
}
const sized = (n, min = 1) => Math.max(min, Math.round(n * scale));
const SIZES = {
  aAppends: sized(2000, 5),
  bSessions: sized(1000, 4),
  bUsers: sized(100, 2),
  bEvents: Number(opts['events-per-session']),
  bInFlight: 64,
  cEvents: sized(10000, 10),
  cFullReads: sized(20, 3),
  cRecentReads: sized(200, 10),
};

const scratch = fs.mkdtempSync(path.join(os.tmpdir(), 'agentstate-js-bench-'));
process.on('exit', () => fs.rmSync(scratch, { recursive: true, force: true }));

async function open(kind) {
  if (kind === 'inprocess') {
    const dir = fs.mkdtempSync(path.join(scratch, 'store-'));
    const s = new AgentStateSessionService({ store: dir, durability: opts.durability });
    return { service: s, close: () => s.close() };
  }
  if (kind === 'agentstate') {
    const dir = fs.mkdtempSync(path.join(scratch, 'store-'));
    const s = new AgentStateSessionService({ store: dir, binary, durability: opts.durability });
    return { service: s, close: () => s.close() };
  }
  if (kind === 'memory') return { service: new InMemorySessionService(), close: async () => {} };
  const { DatabaseSessionService } = await import('@google/adk/sessions/database');
  const file = path.join(fs.mkdtempSync(path.join(scratch, 'sqlite-')), 'sessions.db');
  const s = new DatabaseSessionService(`sqlite://${file}`);
  return { service: s, close: async () => { if (s.orm) await s.orm.close(); } };
}

function event(invocationId, i) {
  return createEvent({
    invocationId,
    author: 'planner',
    content: { role: 'model', parts: [{ text: `Step ${i}: looking up the next leg of the trip.` }] },
    actions: { stateDelta: { step: i } },
  });
}

function p50(samples) {
  const sorted = [...samples].sort((a, b) => a - b);
  return sorted[Math.floor((sorted.length - 1) / 2)];
}

async function workloadA(service) {
  const session = await service.createSession({ appName: 'bench-a', userId: 'u' });
  const t0 = performance.now();
  for (let i = 0; i < SIZES.aAppends; i++) {
    await service.appendEvent({ session, event: event('inv-a', i) });
  }
  const s = (performance.now() - t0) / 1000;
  const stored = await service.getSession({ appName: 'bench-a', userId: 'u', sessionId: session.id, config: { numRecentEvents: 1 } });
  if (stored.state.step !== SIZES.aAppends - 1) throw new Error('A: the last append is not stored');
  return SIZES.aAppends / s;
}

// CPU time (user + system) of a spawned server, in microseconds: /proc/PID/stat's utime
// and stime, in clock ticks of 10 ms (Linux's USER_HZ). 0 without a server.
function serverCpuUs(service) {
  const pid = service.serverPid;
  if (pid === undefined) return 0;
  const fields = fs.readFileSync(`/proc/${pid}/stat`, 'utf8').split(') ')[1].split(' ');
  return (Number(fields[11]) + Number(fields[12])) * 10_000;
}

async function workloadB(service) {
  const sessions = [];
  for (let i = 0; i < SIZES.bSessions; i++) {
    sessions.push(await service.createSession({ appName: 'bench-b', userId: `user${i % SIZES.bUsers}` }));
  }
  let next = 0;
  const chain = async () => {
    while (next < sessions.length) {
      const session = sessions[next++];
      for (let i = 0; i < SIZES.bEvents; i++) {
        await service.appendEvent({ session, event: event(`inv-${session.id}`, i) });
      }
    }
  };
  const cpu0 = process.cpuUsage();
  const server0 = serverCpuUs(service);
  const t0 = performance.now();
  await Promise.all(Array.from({ length: SIZES.bInFlight }, chain));
  const s = (performance.now() - t0) / 1000;
  const cpu = process.cpuUsage(cpu0);
  const events = SIZES.bSessions * SIZES.bEvents;
  const cpuUs = { node: (cpu.user + cpu.system) / events, server: (serverCpuUs(service) - server0) / events };
  const check = await service.getSession({ appName: 'bench-b', userId: sessions[0].userId, sessionId: sessions[0].id });
  if (check.events.length !== SIZES.bEvents) throw new Error(`B: ${check.events.length} events stored, not ${SIZES.bEvents}`);
  return { rate: events / s, cpuUs };
}

async function workloadC(service) {
  const session = await service.createSession({ appName: 'bench-c', userId: 'u' });
  for (let i = 0; i < SIZES.cEvents; i++) {
    await service.appendEvent({ session, event: event(`inv-${i >> 4}`, i) });
  }
  const req = { appName: 'bench-c', userId: 'u', sessionId: session.id };
  const full = [];
  for (let i = 0; i < SIZES.cFullReads; i++) {
    const t0 = performance.now();
    const got = await service.getSession(req);
    full.push(performance.now() - t0);
    if (got.events.length !== SIZES.cEvents) throw new Error(`C: full read gave ${got.events.length} events`);
  }
  const recent = [];
  for (let i = 0; i < SIZES.cRecentReads; i++) {
    const t0 = performance.now();
    const got = await service.getSession({ ...req, config: { numRecentEvents: 10 } });
    recent.push(performance.now() - t0);
    if (got.events.length !== 10) throw new Error(`C: recent read gave ${got.events.length} events`);
  }
  return { full: p50(full), recent: p50(recent) };
}

const fmt = (x, unit) => (unit === 'ms' ? `${x.toFixed(3)} ms` : `${Math.round(x).toLocaleString('en-US')} events/s`);

console.log(`ADK-JS session services, scale ${scale}: A ${SIZES.aAppends} awaited appends; ` +
  `B ${SIZES.bSessions} sessions x ${SIZES.bEvents}, ${SIZES.bInFlight} in flight; ` +
  `C ${SIZES.cEvents}-event session, ${SIZES.cFullReads} full + ${SIZES.cRecentReads} last-10 reads`);
console.log(`agentstate: ${binary} (durability ${opts.durability}); node ${process.version}; ${os.cpus().length} cores`);

// Workload B over a bare connection: the same events in the service's wire form.
async function wireB() {
  const dir = fs.mkdtempSync(path.join(scratch, 'store-'));
  const conn = new Connection({ bin: binary, args: ['serve', '--store', dir, '--durability', opts.durability] });
  const sessions = [];
  for (let i = 0; i < SIZES.bSessions; i++) {
    sessions.push(await conn.call('create_session', { app_name: 'bench-b', user_id: `user${i % SIZES.bUsers}` }));
  }
  let next = 0;
  const chain = async () => {
    while (next < sessions.length) {
      const s = sessions[next++];
      for (let i = 0; i < SIZES.bEvents; i++) {
        await conn.call('append_event', { app_name: 'bench-b', user_id: s.user_id, session_id: s.id, event: eventToWire(event(`inv-${s.id}`, i)) });
      }
    }
  };
  const t0 = performance.now();
  await Promise.all(Array.from({ length: SIZES.bInFlight }, chain));
  const seconds = (performance.now() - t0) / 1000;
  await conn.close();
  return (SIZES.bSessions * SIZES.bEvents) / seconds;
}

const results = {};
for (const kind of services) {
  if (kind === 'wire') {
    const b = await wireB();
    console.log(`${'wire'.padEnd(10)} B          ${fmt(b)} (protocol only, no ADK bookkeeping)`);
    results.wire = { B: b };
    continue;
  }
  const r = {};
  const { service, close } = await open(kind);
  try {
    r.A = await workloadA(service);
    console.log(`${kind.padEnd(10)} A          ${fmt(r.A)}`);
    const b = await workloadB(service);
    r.B = b.rate;
    r.B_cpu_us = b.cpuUs.node + b.cpuUs.server;
    const server = b.cpuUs.server > 0 ? ` + ${b.cpuUs.server.toFixed(1)} server` : '';
    console.log(`${kind.padEnd(10)} B          ${fmt(r.B)}; CPU ${b.cpuUs.node.toFixed(1)} us/event node${server}`);
    const c = await workloadC(service);
    r.C_full = c.full;
    r.C_recent = c.recent;
    console.log(`${kind.padEnd(10)} C full     ${fmt(c.full, 'ms')}`);
    console.log(`${kind.padEnd(10)} C last 10  ${fmt(c.recent, 'ms')}`);
  } finally {
    await close();
  }
  results[kind] = r;
}

// Ratios: higher is better for agentstate (throughput over throughput, time over time).
const ratio = (ours, other, figure) => (figure.startsWith('C_')
  ? results[other][figure] / results[ours][figure]
  : results[ours][figure] / results[other][figure]);
const checks = [];
for (const ours of ['inprocess', 'agentstate']) {
  if (!results[ours]) continue;
  for (const figure of ['A', 'B', 'C_full', 'C_recent']) {
    if (results.database) checks.push({ service: ours, figure, other: 'database', ratio: ratio(ours, 'database', figure), target: 30 });
  }
  for (const figure of ['B', 'C_full', 'C_recent']) {
    if (results.memory) checks.push({ service: ours, figure, other: 'memory', ratio: ratio(ours, 'memory', figure), target: 1 });
  }
  for (const figure of ['A']) {
    if (results.memory) checks.push({ service: ours, figure, other: 'memory', ratio: ratio(ours, 'memory', figure), target: null });
  }
}
for (const c of checks) {
  const verdict = c.target === null ? '(no target)' : c.ratio >= c.target ? `>= ${c.target}x: met` : `>= ${c.target}x: MISSED`;
  console.log(`ratio ${c.service}/${c.other.padEnd(8)} ${c.figure.padEnd(8)} ${c.ratio.toFixed(2)}x ${verdict}`);
}
console.log(JSON.stringify({ scale, durability: opts.durability, sizes: SIZES, results, ratios: checks }));
