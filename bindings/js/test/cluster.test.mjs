// SPDX-License-Identifier: Apache-2.0
// The service's `addresses` option against a real cluster: an etcd of the test's own and two
// `serve --cluster` nodes. Sessions on both nodes' shards are served through one given node
// (forwarded, or followed after `moved`); with a node killed, the other node's sessions keep
// working and the dead node's reject with 'unavailable' once retryForMs has passed; an append
// whose answer was lost is retried and stored once. Not in `npm test`: `npm run
// test:cluster`, CTest js_cluster_client (label cluster); it needs etcd, which
// `tools/setup.sh --all` installs.
import assert from 'node:assert/strict';
import { execFileSync, spawn } from 'node:child_process';
import net from 'node:net';
import path from 'node:path';
import { performance } from 'node:perf_hooks';
import { setTimeout as sleep } from 'node:timers/promises';
import { after, before, describe, test } from 'node:test';
import { createEvent } from '@google/adk';
import { AgentStateError, AgentStateSessionService } from '../src/index.js';
import { agentstateBin, scratchDir } from './support/env.mjs';
import { startServer } from './support/server.mjs';

const BIN = agentstateBin();
const SHARDS = 16;
const USERS = Array.from({ length: 12 }, (_, i) => `u${i}`);
const TEST_TIMEOUT_MS = 120000;

function isKind(kind) {
  return (err) => {
    assert.ok(err instanceof AgentStateError, `not an AgentStateError: ${err}`);
    assert.equal(err.kind, kind, err.message);
    return true;
  };
}

function freePort() {
  return new Promise((resolve, reject) => {
    const s = net.createServer();
    s.once('error', reject);
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

function canConnect(port) {
  return new Promise((resolve) => {
    const s = net.connect({ host: '127.0.0.1', port });
    s.once('connect', () => { s.destroy(); resolve(true); });
    s.once('error', () => { s.destroy(); resolve(false); });
  });
}

/** One etcd member on loopback ports with a data directory in `dir`; stop() kills it by PID. */
async function startEtcd(dir) {
  const client = await freePort();
  const peer = await freePort();
  const url = `http://127.0.0.1:${client}`;
  const peerUrl = `http://127.0.0.1:${peer}`;
  const child = spawn('etcd', ['--name', 't', '--data-dir', path.join(dir, 'etcd'),
    '--listen-client-urls', url, '--advertise-client-urls', url,
    '--listen-peer-urls', peerUrl, '--initial-advertise-peer-urls', peerUrl,
    '--initial-cluster', `t=${peerUrl}`, '--log-level', 'error'], { stdio: 'ignore' });
  const exited = new Promise((resolve) => child.once('exit', resolve));
  const spawnError = new Promise((resolve) => child.once('error', resolve));
  const etcd = {
    url,
    async stop() {
      if (child.pid !== undefined && child.exitCode === null && child.signalCode === null) {
        process.kill(child.pid, 'SIGKILL');
        await exited;
      }
    },
  };
  try {
    const deadline = performance.now() + 20000;
    // Bounded poll of etcd's client port: etcd gives no readiness signal of its own.
    while (!(await canConnect(client))) {
      if (child.exitCode !== null || child.signalCode !== null) throw new Error('etcd exited at start');
      const failed = await Promise.race([spawnError, sleep(50, null)]); // the poll's interval
      if (failed) throw new Error(`cannot start etcd (tools/setup.sh --all installs it): ${failed.message}`);
      assert.ok(performance.now() < deadline, 'etcd did not start within 20 s');
    }
  } catch (err) {
    await etcd.stop();
    throw err;
  }
  return etcd;
}

/**
 * `cluster init` of `name` (16 shards, 2 nodes) and nodes n0 and n1, pushed to `nodes` as
 * they start (so the caller stops them whatever happens); resolves once each node's own
 * view has the map.
 */
async function startCluster(etcdUrl, name, nodes, extra = []) {
  execFileSync(BIN, ['cluster', 'init', '--etcd', etcdUrl, '--cluster', name,
    '--shards', String(SHARDS), '--expect-nodes', '2'], { stdio: ['ignore', 'ignore', 'pipe'] });
  const dir = scratchDir(`cluster-${name}`);
  for (const id of ['n0', 'n1']) {
    nodes.push(await startServer(BIN, ['--store', path.join(dir, id), '--listen', '127.0.0.1:0',
      '--cluster', name, '--etcd', etcdUrl, '--node-id', id, '--lease-ttl-s', '2', ...extra]));
  }
  const settled = /event=shards .*owned=8 shards=16/;
  const deadline = performance.now() + 15000;
  // Bounded poll of each node's log: a node logs its 8 of the 16 shards once its own view
  // has the map; until then it answers 'unavailable' for them, forwarded calls included.
  while (!nodes.every((n) => settled.test(n.log()))) {
    assert.ok(performance.now() < deadline, `the map did not settle: ${nodes.map((n) => n.log()).join('\n')}`);
    await sleep(50); // bounded poll of other processes' logs
  }
}

/** The shard map's owner of each shard, from `agentstate cluster status --json`. */
function owners(etcdUrl, name) {
  const status = JSON.parse(execFileSync(BIN, ['cluster', 'status', '--etcd', etcdUrl,
    '--cluster', name, '--json'], { encoding: 'utf8' }));
  const owner = new Map();
  for (const s of status.map) owner.set(s.shard, s.owner);
  return owner;
}

/** h(bytes) as docs/cluster.md defines it: FNV-1a 64, then MurmurHash3's 64-bit finalizer. */
function shardHash(bytes) {
  const mask = 0xffffffffffffffffn;
  let h = 14695981039346656037n;
  for (const b of bytes) {
    h = ((h ^ BigInt(b)) * 1099511628211n) & mask;
  }
  h ^= h >> 33n;
  h = (h * 0xff51afd7ed558ccdn) & mask;
  h ^= h >> 33n;
  h = (h * 0xc4ceb9fe1a85ec53n) & mask;
  h ^= h >> 33n;
  return h;
}

/** The shard of hash `h` among `shards`: ((h >> 32) * S) >> 32. */
function shardOfHash(h, shards) {
  return Number(((h >> 32n) * BigInt(shards)) >> 32n);
}

/** shard_of(app, user): the shard of h(app ‖ 0x00 ‖ user). */
function shardOf(app, user, shards) {
  return shardOfHash(shardHash(Buffer.concat([Buffer.from(app), Buffer.from([0]), Buffer.from(user)])), shards);
}

/** home_shard(app): the shard of h(app). */
function homeShardOf(app, shards) {
  return shardOfHash(shardHash(Buffer.from(app)), shards);
}

/** Each user's owning node id. */
function ownerOfUsers(etcdUrl, name) {
  const owner = owners(etcdUrl, name);
  const byUser = new Map(USERS.map((u) => [u, owner.get(shardOf('app', u, SHARDS))]));
  const ids = new Set(byUser.values());
  assert.ok(ids.has('n0') && ids.has('n1'), `the users' shards are not on both nodes: ${[...byUser]}`);
  return byUser;
}

/**
 * A TCP proxy on loopback to `port` that loses one answer: once armed, it passes the next
 * append_event request on and, when that request's answer arrives (the append is stored),
 * closes the client's connection instead of passing the answer back.
 */
async function lossyProxy(port) {
  const state = { armed: false, lost: 0 };
  const sockets = new Set();
  const server = net.createServer((client) => {
    const upstream = net.connect({ host: '127.0.0.1', port });
    sockets.add(client);
    sockets.add(upstream);
    const end = () => {
      client.destroy();
      upstream.destroy();
      sockets.delete(client);
      sockets.delete(upstream);
    };
    for (const s of [client, upstream]) {
      s.on('error', end);
      s.on('close', end);
      s.setEncoding('utf8');
    }
    let dropId = null;
    let fromClient = '';
    let fromServer = '';
    client.on('data', (text) => {
      fromClient += text;
      for (let nl = fromClient.indexOf('\n'); nl !== -1; nl = fromClient.indexOf('\n')) {
        const line = fromClient.slice(0, nl + 1);
        fromClient = fromClient.slice(nl + 1);
        const request = JSON.parse(line);
        if (state.armed && request.method === 'append_event') {
          state.armed = false;
          dropId = request.id;
        }
        upstream.write(line);
      }
    });
    upstream.on('data', (text) => {
      fromServer += text;
      for (let nl = fromServer.indexOf('\n'); nl !== -1; nl = fromServer.indexOf('\n')) {
        const line = fromServer.slice(0, nl + 1);
        fromServer = fromServer.slice(nl + 1);
        if (dropId !== null && JSON.parse(line).id === dropId) {
          state.lost += 1;
          end();
          return;
        }
        client.write(line);
      }
    });
  });
  await new Promise((resolve) => server.listen(0, '127.0.0.1', resolve));
  return {
    address: `127.0.0.1:${server.address().port}`,
    state,
    async close() {
      for (const s of sockets) s.destroy();
      await new Promise((resolve) => server.close(resolve));
    },
  };
}

// Stops what a test started, each by its own handle, whatever the test's outcome.
async function cleanup(services, nodes) {
  for (const s of services) await s.close().catch(() => {});
  for (const n of nodes) await n.stop();
}

describe('a cluster through the addresses option', () => {
  let etcd;
  before(async () => { etcd = await startEtcd(scratchDir('cluster-etcd')); });
  after(async () => { if (etcd) await etcd.stop(); });

  test('the shard function matches docs/cluster.md', () => {
    assert.equal(shardOf('chat', 'alice', 256), 12);
    assert.equal(shardOf('chat', 'alice', 65536), 3261);
    assert.equal(homeShardOf('chat', 256), 255);
  });

  test('bad cluster options are refused with invalid_argument', () => {
    const bad = [{ addresses: [] }, { addresses: '127.0.0.1:1' }, { addresses: ['nope'] },
      { addresses: ['127.0.0.1:1'], retryForMs: -1 }, { addresses: ['127.0.0.1:1'], retryForMs: '5' },
      { addresses: ['127.0.0.1:1'], retryForMs: Infinity }, { address: '127.0.0.1:1', retryForMs: -5 },
      { memory: true, retryForMs: 5 },
      { addresses: ['127.0.0.1:1'], address: '127.0.0.1:1' }, { addresses: ['127.0.0.1:1'], binary: BIN },
      { addresses: ['unix:/tmp/x'], tls: true }, { addresses: ['127.0.0.1:1'], token: '' }];
    for (const options of bad) {
      assert.throws(() => new AgentStateSessionService(options), isKind('invalid_argument'),
        JSON.stringify(options));
    }
  });

  test('no reachable node rejects with unavailable once retryForMs has passed', { timeout: TEST_TIMEOUT_MS }, async () => {
    const s = new AgentStateSessionService({ addresses: [`127.0.0.1:${await freePort()}`], retryForMs: 300 });
    try {
      const start = performance.now();
      await assert.rejects(s.getSession({ appName: 'app', userId: 'u', sessionId: 's' }), isKind('unavailable'));
      // The last try starts at or after the deadline (retries happened, none cut short).
      assert.ok(performance.now() - start >= 300);
    } finally {
      await s.close();
    }
  });

  for (const forward of [true, false]) {
    const mode = forward ? 'forwarding' : '--no-forward';
    test(`sessions on both nodes' shards through one given node (${mode})`, { timeout: TEST_TIMEOUT_MS }, async () => {
      const name = forward ? 'fwd' : 'nofwd';
      const nodes = [];
      const services = [];
      try {
        await startCluster(etcd.url, name, nodes, forward ? [] : ['--no-forward']);
        const owner = ownerOfUsers(etcd.url, name);
        // Only n0 is given: n1's sessions reach it forwarded, or by following `moved`.
        const s = new AgentStateSessionService({ addresses: [nodes[0].address] });
        services.push(s);
        for (const [i, userId] of USERS.entries()) {
          const session = await s.createSession({ appName: 'app', userId, sessionId: 's', state: { n: i } });
          const event = createEvent({ invocationId: 'inv', author: 'agent', actions: { stateDelta: { step: i } } });
          await s.appendEvent({ session, event });
          const read = await s.getSession({ appName: 'app', userId, sessionId: 's' });
          assert.deepEqual(read.events.map((e) => e.id), [event.id]);
          assert.deepEqual(read.state, { n: i, step: i });
        }
        // Each session is in its owner's store: the owner serves it itself.
        const direct = nodes.map((n) => new AgentStateSessionService({ address: n.address }));
        services.push(...direct);
        for (const [i, userId] of USERS.entries()) {
          const read = await direct[owner.get(userId) === 'n0' ? 0 : 1].getSession({ appName: 'app', userId, sessionId: 's' });
          assert.deepEqual(read.state, { n: i, step: i });
        }
        const other = USERS.find((u) => owner.get(u) === 'n1');
        const call = direct[0].getSession({ appName: 'app', userId: other, sessionId: 's' });
        if (forward) {
          assert.deepEqual((await call).state.n, USERS.indexOf(other));
        } else {
          // What the addresses option follows: one address alone gets `moved` to the owner.
          await assert.rejects(call, (err) => {
            isKind('moved')(err);
            assert.equal(err.data.owner, 'n1');
            assert.equal(err.data.address, nodes[1].address);
            return true;
          });
        }
        // An app's listing runs on every node when n0 forwards; a --no-forward node refuses
        // it, and refusals are passed on, not retried (so is a taken id).
        if (forward) {
          const listed = await s.listSessions({ appName: 'app' });
          assert.equal(listed.totalItems, USERS.length);
          assert.deepEqual(listed.sessions.map((x) => x.userId).sort(), [...USERS].sort());
        } else {
          await assert.rejects(s.listSessions({ appName: 'app' }), isKind('invalid_argument'));
        }
        await assert.rejects(s.createSession({ appName: 'app', userId: 'u0', sessionId: 's' }), isKind('already_exists'));
        // app: state is kept at the app's home shard, from any node.
        const made = await s.createSession({ appName: 'app', userId: other, state: { 'app:x': 1 } });
        assert.equal(made.state['app:x'], 1);
        const read = await s.getSession({ appName: 'app', userId: 'u0', sessionId: 's' });
        assert.equal(read.state['app:x'], 1);
      } finally {
        await cleanup(services, nodes);
      }
    });
  }

  test('an append whose answer was lost is retried with its id and stored once', { timeout: TEST_TIMEOUT_MS }, async () => {
    const nodes = [];
    const services = [];
    let proxy;
    try {
      await startCluster(etcd.url, 'lost', nodes);
      proxy = await lossyProxy(Number(nodes[1].address.split(':')[1]));
      const s = new AgentStateSessionService({ addresses: [proxy.address] });
      services.push(s);
      for (const userId of ['u0', 'u1', 'u2', 'u3']) {
        const session = await s.createSession({ appName: 'app', userId, sessionId: 's' });
        const event = createEvent({ invocationId: 'inv', author: 'agent', actions: { stateDelta: { k: userId } } });
        delete event.id; // an event without an id: the client makes one before the first try
        proxy.state.armed = true;
        const lostBefore = proxy.state.lost;
        const stored = await s.appendEvent({ session, event });
        assert.equal(proxy.state.lost, lostBefore + 1, 'the first answer was not lost');
        assert.ok(stored.id, 'the event has no id after the append');
        const read = await s.getSession({ appName: 'app', userId, sessionId: 's' });
        assert.deepEqual(read.events.map((e) => e.id), [stored.id], 'the append was applied twice');
        assert.deepEqual(session.events.map((e) => e.id), [stored.id]);
      }
    } finally {
      await cleanup(services, nodes);
      if (proxy) await proxy.close();
    }
  });

  for (const forward of [true, false]) {
    const mode = forward ? 'forwarding' : '--no-forward';
    test(`a killed node: the other's sessions keep working, its own reject with unavailable (${mode})`,
      { timeout: TEST_TIMEOUT_MS }, async () => {
        const name = forward ? 'kill-fwd' : 'kill-nofwd';
        const nodes = [];
        const services = [];
        try {
          await startCluster(etcd.url, name, nodes, forward ? [] : ['--no-forward']);
          const owner = ownerOfUsers(etcd.url, name);
          const home = owners(etcd.url, name).get(homeShardOf('app', SHARDS));
          const retryForMs = 2500;
          const s = new AgentStateSessionService({ addresses: nodes.map((n) => n.address), retryForMs });
          services.push(s);
          const sessions = new Map();
          for (const userId of USERS) {
            sessions.set(userId, await s.createSession({ appName: 'app', userId, sessionId: 's' }));
          }
          await nodes[0].kill(); // n0, the node the service was using
          const live = USERS.filter((u) => owner.get(u) === 'n1');
          const dead = USERS.filter((u) => owner.get(u) === 'n0');
          for (const userId of live) {
            const event = createEvent({ invocationId: 'inv', author: 'agent', actions: { stateDelta: { after: 1 } } });
            await s.appendEvent({ session: sessions.get(userId), event });
            // A session's read shows the app: state, kept at the app's home shard: with the
            // home on the dead node it cannot be whole, and is refused.
            if (home === 'n0') {
              await assert.rejects(s.getSession({ appName: 'app', userId, sessionId: 's' }),
                isKind('unavailable'));
              continue;
            }
            const read = await s.getSession({ appName: 'app', userId, sessionId: 's' });
            assert.deepEqual(read.events.map((e) => e.id), [event.id]);
          }
          const start = performance.now();
          await assert.rejects(s.appendEvent({
            session: sessions.get(dead[0]),
            event: createEvent({ invocationId: 'inv', author: 'agent' }),
          }), isKind('unavailable'));
          // It was retried until the deadline: the last try starts at or after it.
          assert.ok(performance.now() - start >= retryForMs);
          await assert.rejects(s.getSession({ appName: 'app', userId: dead[1] ?? dead[0], sessionId: 's' }),
            isKind('unavailable'));
          // The live node's sessions still work after those failures.
          const after = createEvent({ invocationId: 'inv', author: 'agent' });
          const stored = await s.appendEvent({ session: sessions.get(live[0]), event: after });
          assert.equal(stored.id, after.id);
          if (home !== 'n0') {
            const read = await s.getSession({ appName: 'app', userId: live[0], sessionId: 's' });
            assert.equal(read.events.length, 2);
          }
        } finally {
          await cleanup(services, nodes);
        }
      });
  }
});
