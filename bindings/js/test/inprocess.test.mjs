// SPDX-License-Identifier: Apache-2.0
// The engine in this process ({ store } and { memory: true }: src/inprocess.js,
// native/addon.cpp): what the suites run in in-process mode cannot show, because it is
// about the process: the store's owner across processes, the event loop while a call
// waits, close() and exit, the engine's options, a missing addon. (The suites themselves
// run in this mode too: test/support/inprocess_suite.mjs.)
import assert from 'node:assert/strict';
import { execFile, spawn } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import { describe, test } from 'node:test';
import { promisify } from 'node:util';
import { createEvent } from '@google/adk';
import { AgentStateError, AgentStateSessionService } from '../src/index.js';
import { agentstateBin, needsAddon, ownProcess, PACKAGE_DIR, scratchDir } from './support/env.mjs';

const run = promisify(execFile);
const INDEX = path.join(PACKAGE_DIR, 'src/index.js');

function isKind(kind) {
  return (err) => {
    assert.ok(err instanceof AgentStateError, `not an AgentStateError: ${err}`);
    assert.equal(err.kind, kind, err.message);
    return true;
  };
}

function ev(id, ts, stateDelta = {}, extra = {}) {
  return createEvent({ id, invocationId: 'inv', author: 'agent', timestamp: ts, actions: { stateDelta }, ...extra });
}

// Runs `body` (an ES module's text, with AgentStateSessionService imported) in a node
// process of its own; resolves with its exit code and stdout.
function runNode(body, { env } = {}) {
  const script = `import { AgentStateSessionService } from ${JSON.stringify(INDEX)};\n${body}`;
  const child = spawn(process.execPath, ['--input-type=module', '-e', script],
    { stdio: ['ignore', 'pipe', 'pipe'], env: env ?? process.env });
  let out = '';
  let err = '';
  child.stdout.on('data', (d) => { out += d; });
  child.stderr.on('data', (d) => { err += d; });
  return new Promise((resolve) => child.on('exit', (code) => resolve({ code, out, err })));
}

// The script's part that tries the store and prints what happened, as one JSON line.
const TRY_STORE = (dir) => `
  const s = new AgentStateSessionService({ store: ${JSON.stringify(dir)} });
  const out = {};
  try {
    const got = await s.getSession({ appName: 'l', userId: 'u', sessionId: 's' });
    out.events = got ? got.events.length : -1;
  } catch (e) { out.call = { kind: e.kind, message: e.message }; }
  try { await s.close(); } catch (e) { out.close = { kind: e.kind, message: e.message }; }
  console.log(JSON.stringify(out));
`;

describe('the store', { skip: needsAddon() }, () => {
  test('a second process on an open store fails with the engine\'s "in use by another process (pid N)"', { skip: ownProcess('opens the engine in this process') }, async () => {
    const dir = scratchDir('inproc-owner');
    const first = new AgentStateSessionService({ store: dir });
    const session = await first.createSession({ appName: 'l', userId: 'u', sessionId: 's' });
    await first.appendEvent({ session, event: ev('e1', 1000, { k: 1 }) });

    const other = await runNode(TRY_STORE(dir));
    assert.equal(other.code, 0, other.err);
    const seen = JSON.parse(other.out);
    assert.equal(seen.call.kind, 'unavailable');
    assert.match(seen.call.message, new RegExp(`in use by another process \\(pid ${process.pid}\\)`));
    assert.deepEqual(seen.close, seen.call, 'close() rejects with the same error');

    // In this process too: one engine per store.
    const second = new AgentStateSessionService({ store: dir });
    await assert.rejects(second.getSession({ appName: 'l', userId: 'u', sessionId: 's' }), isKind('unavailable'));
    await assert.rejects(second.close(), isKind('unavailable'));

    // Once close() has resolved the store is free, and holds what was written.
    await first.close();
    const after = await runNode(TRY_STORE(dir));
    assert.equal(after.code, 0, after.err);
    assert.deepEqual(JSON.parse(after.out), { events: 1 });
  });

  test('a store that cannot be opened fails every call and close() with the engine\'s error', async () => {
    const file = path.join(scratchDir('inproc-bad'), 'a-file');
    fs.writeFileSync(file, 'not a directory');
    const s = new AgentStateSessionService({ store: path.join(file, 'store') });
    const calls = [s.createSession({ appName: 'a', userId: 'u' }), s.getSession({ appName: 'a', userId: 'u', sessionId: 'x' })];
    for (const c of calls) await assert.rejects(c, isKind('io_error'));
    await assert.rejects(s.createSession({ appName: 'a', userId: 'u' }), isKind('io_error'));
    await assert.rejects(s.close(), (err) => isKind('io_error')(err) && /Not a directory/.test(err.message));
    assert.equal(fs.readFileSync(file, 'utf8'), 'not a directory');
  });
});

describe('the event loop', { skip: needsAddon() }, () => {
  test('calls wait for the store\'s writer off the event loop: timers fire and other calls are answered meanwhile', { skip: ownProcess('holds the store\'s LMDB writer from another process') }, async () => {
    const dir = scratchDir('inproc-loop');
    const s = new AgentStateSessionService({ store: dir });
    const session = await s.createSession({ appName: 'a', userId: 'u', sessionId: 's' });
    await s.createSession({ appName: 'a', userId: 'u', sessionId: 'other', state: { o: 1 } });

    // mdb_load (lmdb-utils) opens the store's LMDB environment after reading its
    // header, begins a write transaction, then reads records from stdin: given the
    // header only, it holds LMDB's writer lock (shared between processes) until it is
    // killed, and writes nothing. It holds it once data.mdb is open and it is blocked in
    // read(0) (/proc/PID/syscall starts with "0 0x0").
    const holder = spawn('mdb_load', [dir], { stdio: ['pipe', 'ignore', 'pipe'] });
    let holderErr = '';
    holder.stderr.on('data', (d) => { holderErr += d; });
    const holderExit = new Promise((resolve) => holder.on('exit', resolve));
    try {
      holder.stdin.write('VERSION=3\nformat=bytevalue\ntype=btree\nHEADER=END\n');
      const holds = () => {
        try {
          const fds = fs.readdirSync(`/proc/${holder.pid}/fd`).map((f) => {
            try { return fs.readlinkSync(`/proc/${holder.pid}/fd/${f}`); } catch { return ''; }
          });
          return fds.some((f) => f.endsWith('/data.mdb'))
            && fs.readFileSync(`/proc/${holder.pid}/syscall`, 'utf8').startsWith('0 0x0 ');
        } catch {
          return false;
        }
      };
      let held = holds();
      for (let i = 0; i < 500 && !held; i++) {
        await new Promise((r) => setTimeout(r, 10)); // bounded poll of another process's state
        held = holds();
      }
      assert.ok(held, `mdb_load did not take the writer lock: ${holderErr}`);

      // The appends need the writer: none can be acknowledged while mdb_load holds it.
      let answered = 0;
      const appends = Array.from({ length: 20 }, (_, i) =>
        s.appendEvent({ session, event: ev(`e${i}`, 1000 + i, { i }) }).then(() => { answered += 1; }));
      // Meanwhile the event loop runs: a chain of 100 immediates and a timer, and a read
      // of another session is answered (reads take no writer lock).
      let ticks = 0;
      for (let i = 0; i < 100; i++) {
        await new Promise((r) => setImmediate(r));
        ticks += 1;
      }
      // why: a timer that fires shows the loop's timers phase runs too (its delay is no
      // bound: nothing is measured).
      await new Promise((r) => setTimeout(r, 1));
      const other = await s.getSession({ appName: 'a', userId: 'u', sessionId: 'other' });
      assert.deepEqual(other.state, { o: 1 });
      assert.equal(ticks, 100);
      assert.equal(answered, 0, 'an append was acknowledged while another process held the writer');

      process.kill(holder.pid, 'SIGKILL'); // releases the lock; its transaction is discarded
      await holderExit;
      await Promise.all(appends);
      assert.equal(answered, 20);
    } finally {
      if (holder.exitCode === null && holder.signalCode === null) process.kill(holder.pid, 'SIGKILL');
      await holderExit;
    }
    const got = await s.getSession({ appName: 'a', userId: 'u', sessionId: 's' });
    assert.deepEqual(got.events.map((e) => e.id), Array.from({ length: 20 }, (_, i) => `e${i}`));
    await s.close();
  });
});

describe('lifecycle', { skip: needsAddon() }, () => {
  test('close() answers every call made before it, syncs and releases the store; later calls reject', async () => {
    const dir = scratchDir('inproc-close');
    const s = new AgentStateSessionService({ store: dir });
    assert.equal(s.serverPid, undefined);
    const session = await s.createSession({ appName: 'l', userId: 'u', sessionId: 's', state: { 'app:a': 1 } });
    const pending = [];
    for (let i = 0; i < 200; i++) pending.push(s.appendEvent({ session, event: ev(`e${i}`, 1000 + i, { i }) }));
    await s.close();
    await Promise.all(pending);
    await assert.rejects(s.getSession({ appName: 'l', userId: 'u', sessionId: 's' }), isKind('unavailable'));
    await s.close();
    const again = new AgentStateSessionService({ store: dir });
    const got = await again.getSession({ appName: 'l', userId: 'u', sessionId: 's' });
    assert.equal(got.events.length, 200);
    assert.deepEqual(got.state, { 'app:a': 1, i: 199 });
    await again.close();
  });

  test('calls made before the store is open wait for it, and close() right after the constructor answers them', async () => {
    const s = new AgentStateSessionService({ memory: true });
    const created = s.createSession({ appName: 'l', userId: 'u', sessionId: 'early' });
    const read = s.getSession({ appName: 'l', userId: 'u', sessionId: 'early' });
    const closed = s.close();
    assert.equal((await created).id, 'early');
    assert.equal((await read).id, 'early');
    await closed;
  });

  test('an unclosed service does not keep node running; what it acknowledged is in the store', { skip: ownProcess('a child node process opens the store') }, async () => {
    const dir = scratchDir('inproc-unref');
    const child = await runNode(`
      const s = new AgentStateSessionService({ store: ${JSON.stringify(dir)} });
      const session = await s.createSession({ appName: 'x', userId: 'u', sessionId: 's' });
      await s.appendEvent({ session, event: { id: 'e', invocationId: 'i', author: 'a', actions: { stateDelta: { k: 1 }, artifactDelta: {} } } });
      console.log('done');
    `);
    assert.equal(child.code, 0, child.err);
    assert.equal(child.out.trim(), 'done');
    const s = new AgentStateSessionService({ store: dir });
    const got = await s.getSession({ appName: 'x', userId: 'u', sessionId: 's' });
    assert.deepEqual(got.state, { k: 1 });
    await s.close();
  });
});

describe('kill -9', { skip: needsAddon() }, () => {
  test('a node process killed with SIGKILL in sync mode loses no acknowledged append', { skip: ownProcess('a child node process opens the store and is killed') }, async () => {
    const dir = scratchDir('inproc-sigkill');
    const sessions = 8;
    // The child appends on 8 sessions at once and prints each append it has an answer
    // for; a write to a pipe is synchronous on Linux, so a printed line was printed
    // before the kill.
    const script = `import { AgentStateSessionService } from ${JSON.stringify(INDEX)};
      const s = new AgentStateSessionService({ store: ${JSON.stringify(dir)}, durability: 'sync' });
      await Promise.all(Array.from({ length: ${sessions} }, async (_, k) => {
        let session = await s.createSession({ appName: 'k', userId: 'u' + k, sessionId: 's' });
        console.log('created ' + k);
        for (let i = 0; ; i++) {
          const id = 'u' + k + '-e' + i;
          await s.appendEvent({ session, event: { id, invocationId: 'i', author: 'a', timestamp: 1000 + i, actions: { stateDelta: { n: i }, artifactDelta: {} } } });
          console.log('acked ' + k + ' ' + id);
        }
      }));`;
    const child = spawn(process.execPath, ['--input-type=module', '-e', script], { stdio: ['ignore', 'pipe', 'pipe'] });
    const acked = new Map(); // session index -> acknowledged event ids, in order
    let created = 0;
    let err = '';
    let buffered = '';
    child.stderr.on('data', (d) => { err += d; });
    const exited = new Promise((resolve) => child.on('exit', (code, signal) => resolve({ code, signal })));
    await new Promise((resolve, reject) => {
      // The kill comes once 400 appends are acknowledged (why: 60 s bound the wait).
      const bound = setTimeout(() => reject(new Error(`fewer than 400 appends acknowledged in 60 s:\n${err}`)), 60_000);
      let total = 0;
      child.stdout.on('data', (d) => {
        buffered += d;
        let nl;
        while ((nl = buffered.indexOf('\n')) >= 0) {
          const line = buffered.slice(0, nl);
          buffered = buffered.slice(nl + 1);
          const [what, k, id] = line.split(' ');
          if (what === 'created') created += 1;
          if (what !== 'acked') continue;
          if (!acked.has(k)) acked.set(k, []);
          acked.get(k).push(id);
          if (++total === 400) {
            child.kill('SIGKILL');
            clearTimeout(bound);
            resolve();
          }
        }
      });
      child.on('exit', () => { clearTimeout(bound); resolve(); });
    });
    const ended = await exited;
    assert.equal(ended.signal, 'SIGKILL', `the child ended on its own: ${ended.code}\n${err}`);
    assert.equal(created, sessions);
    const s = new AgentStateSessionService({ store: dir });
    try {
      let total = 0;
      for (const [k, ids] of acked) {
        const got = await s.getSession({ appName: 'k', userId: 'u' + k, sessionId: 's' });
        assert.ok(got, `session u${k} is gone`);
        const stored = got.events.map((e) => e.id);
        // Every acknowledged append is stored, in order, with nothing before it missing;
        // one acknowledged after the last line read may follow them.
        assert.deepEqual(stored.slice(0, ids.length), ids, `session u${k}`);
        assert.ok(stored.length <= ids.length + 1, `session u${k}: ${stored.length} stored, ${ids.length} acknowledged`);
        assert.equal(got.state.n, stored.length - 1);
        total += ids.length;
      }
      assert.ok(total >= 400);
    } finally {
      await s.close();
    }
  });
});

describe('options', { skip: needsAddon() }, () => {
  test('the engine\'s options reach the engine', async () => {
    const s = new AgentStateSessionService({ memory: true, threads: 1, durability: 'nosync',
      limits: { maxEventBytes: 2048, maxValueBytes: 512 }, changeRetention: { maxEntries: 10 } });
    const session = await s.createSession({ appName: 'o', userId: 'u', sessionId: 's' });
    await s.appendEvent({ session, event: ev('small', 1000, { k: 'x'.repeat(100) }) });
    await assert.rejects(s.appendEvent({ session, event: ev('value', 1001, { k: 'x'.repeat(600) }) }), isKind('too_large'));
    await assert.rejects(s.appendEvent({ session, event: ev('event', 1002, {}, {
      content: { role: 'model', parts: [{ text: 'y'.repeat(3000) }] } }) }), isKind('too_large'));
    const got = await s.getSession({ appName: 'o', userId: 'u', sessionId: 's' });
    assert.deepEqual(got.events.map((e) => e.id), ['small']);
    await s.close();
  });

  test('bad engine options are refused with invalid_argument before anything starts', () => {
    const bad = [{ memory: true, threads: -1 }, { memory: true, threads: 1.5 }, { memory: true, limits: { maxEvent: 1 } },
      { memory: true, limits: 7 }, { memory: true, changeRetention: { maxEntries: '9' } }, { memory: true, refreshTtl: 1 },
      { memory: true, spawn: 'yes' }, { memory: true, spawn: true, threads: 2 }, { memory: true, binary: '/x', limits: {} },
      { memory: true, spawn: false, binary: '/x' }, { address: '127.0.0.1:7400', sessionTtlMs: 5 },
      { address: '127.0.0.1:7400', spawn: true }];
    for (const options of bad) {
      assert.throws(() => new AgentStateSessionService(options), isKind('invalid_argument'), JSON.stringify(options));
    }
  });

  test('spawn: true runs agentstate serve as a child process instead', { skip: ownProcess('checks the spawned server') }, async () => {
    const s = new AgentStateSessionService({ memory: true, spawn: true, binary: agentstateBin() });
    assert.equal(typeof s.serverPid, 'number');
    await s.createSession({ appName: 'a', userId: 'u', sessionId: 's' });
    const argv = fs.readFileSync(`/proc/${s.serverPid}/cmdline`, 'utf8').split('\0');
    assert.deepEqual(argv.slice(1, 3), ['serve', '--memory']);
    await s.close();
  });

  test('without the addon, { store } and { memory } throw unavailable saying how to get it', async () => {
    const { stdout } = await run(process.execPath, ['--input-type=module', '-e', `
      import { AgentStateSessionService } from ${JSON.stringify(INDEX)};
      try { new AgentStateSessionService({ memory: true }); console.log('constructed'); }
      catch (e) { console.log(JSON.stringify({ kind: e.kind, message: e.message })); }
    `], { env: { ...process.env, AGENTSTATE_ADDON: '/nonexistent/agentstate.node' } });
    const { kind, message } = JSON.parse(stdout);
    assert.equal(kind, 'unavailable');
    assert.match(message, /\/nonexistent\/agentstate\.node/);
    assert.match(message, /spawn: true/);
  });
});
