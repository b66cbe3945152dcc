// SPDX-License-Identifier: Apache-2.0
// The `token`, Unix socket and `tls` options against a real `agentstate serve --listen`
// started with --auth-file (and, for TLS, a certificate made by the openssl CLI).
import assert from 'node:assert/strict';
import fs from 'node:fs';
import path from 'node:path';
import { after, before, describe, test } from 'node:test';
import { createEvent } from '@google/adk';
import { AgentStateError, AgentStateSessionService } from '../src/index.js';
import { agentstateBin, scratchDir } from './support/env.mjs';
import { selfSignedCert, startServer, writeTokens } from './support/server.mjs';

const BIN = agentstateBin();
const ALL = 'all-apps-token-0123456789abcdef';
const ALPHA = 'alpha-only-token-0123456789abcd';

function isKind(kind, check) {
  return (err) => {
    assert.ok(err instanceof AgentStateError, `not an AgentStateError: ${err}`);
    assert.equal(err.kind, kind, err.message);
    if (check) check(err);
    return true;
  };
}

function ev(i) {
  return createEvent({ id: `e${i}`, invocationId: 'inv', author: 'agent', timestamp: 1000 + i,
    actions: { stateDelta: { n: i } } });
}

describe('a server with --auth-file, over TCP and a Unix socket', () => {
  let server;
  let tcp;
  let unix;
  before(async () => {
    const dir = scratchDir('auth');
    const tokens = writeTokens(path.join(dir, 'tokens'), { [ALL]: '*', [ALPHA]: ['alpha'] });
    server = await startServer(BIN, ['--memory', '--auth-file', tokens, '--listen', '0',
      '--listen', `unix:${path.join(dir, 'sock')}`], { listeners: 2 });
    [tcp, unix] = server.addresses;
    assert.match(unix, /^unix:\//);
  });
  after(async () => { assert.equal(await server.stop(), 0, server.log()); });

  test('the right token: calls made before authenticate is answered wait for it, in order', async () => {
    const s = new AgentStateSessionService({ address: tcp, token: ALL });
    // Issued in the same turn as the constructor: all are held behind `authenticate`.
    const created = s.createSession({ appName: 'alpha', userId: 'u', sessionId: 's' });
    const session = { appName: 'alpha', userId: 'u', id: 's', state: {}, events: [] };
    const appended = Array.from({ length: 20 }, (_, i) => s.appendEvent({ session, event: ev(i) }));
    await created;
    await Promise.all(appended);
    const got = await s.getSession({ appName: 'alpha', userId: 'u', sessionId: 's' });
    assert.deepEqual(got.events.map((e) => e.id), Array.from({ length: 20 }, (_, i) => `e${i}`));
    assert.deepEqual(got.state, { n: 19 });
    await s.createSession({ appName: 'beta', userId: 'u', sessionId: 's' });
    await s.close();
  });

  test('close() right after the constructor still answers the calls made before it', async () => {
    const s = new AgentStateSessionService({ address: tcp, token: ALL });
    const listed = s.listSessions({ appName: 'alpha' });
    await s.close();
    assert.equal((await listed).sessions.length, 1);
    await assert.rejects(s.listSessions({ appName: 'alpha' }), isKind('unavailable'));
  });

  test('no token: a request is refused with unauthenticated', async () => {
    const s = new AgentStateSessionService({ address: tcp });
    await assert.rejects(s.getSession({ appName: 'alpha', userId: 'u', sessionId: 's' }),
      isKind('unauthenticated', (err) => assert.equal(err.code, -32001)));
    await s.close();
  });

  test('a wrong token fails every call with unauthenticated and is never shown', async () => {
    const wrong = 'wrong-token-0123456789abcdefgh';
    const s = new AgentStateSessionService({ address: tcp, token: wrong });
    const held = s.createSession({ appName: 'alpha', userId: 'u' });
    const check = (err) => {
      assert.equal(err.code, -32001);
      assert.match(err.message, /refused the token/);
      assert.ok(!err.message.includes(wrong), err.message);
    };
    await assert.rejects(held, isKind('unauthenticated', check));
    await assert.rejects(s.listSessions({ appName: 'alpha' }), isKind('unauthenticated', check));
    await s.close();
    // Nothing was created.
    const ok = new AgentStateSessionService({ address: tcp, token: ALL });
    assert.equal((await ok.listSessions({ appName: 'alpha', userId: 'u' })).totalItems, 1);
    await ok.close();
  });

  test('a token scoped to app alpha gets permission_denied for app beta', async () => {
    const s = new AgentStateSessionService({ address: tcp, token: ALPHA });
    assert.ok(await s.getSession({ appName: 'alpha', userId: 'u', sessionId: 's' }));
    await assert.rejects(s.getSession({ appName: 'beta', userId: 'u', sessionId: 's' }),
      isKind('permission_denied', (err) => assert.equal(err.code, -32001)));
    await assert.rejects(s.createSession({ appName: 'beta', userId: 'u' }), isKind('permission_denied'));
    // The connection goes on serving the granted app.
    assert.equal((await s.listSessions({ appName: 'alpha' })).totalItems, 1);
    await s.close();
  });

  test('address unix:PATH connects to the Unix socket, with the same tokens', async () => {
    const s = new AgentStateSessionService({ address: unix, token: ALPHA });
    assert.equal(s.serverPid, undefined);
    const got = await s.getSession({ appName: 'alpha', userId: 'u', sessionId: 's' });
    assert.equal(got.events.length, 20); // the store the TCP test wrote
    await assert.rejects(s.listSessions({ appName: 'beta' }), isKind('permission_denied'));
    await s.close();
    const anonymous = new AgentStateSessionService({ address: unix });
    await assert.rejects(anonymous.listSessions({ appName: 'alpha' }), isKind('unauthenticated'));
    await anonymous.close();
  });
});

test('a Unix socket nobody listens on fails calls with unavailable once retryForMs has passed', async () => {
  const dir = scratchDir('nosock');
  const s = new AgentStateSessionService({ address: `unix:${path.join(dir, 'none')}`, token: ALL, retryForMs: 300 });
  await assert.rejects(s.listSessions({ appName: 'a' }), isKind('unavailable', (err) => {
    assert.match(err.message, /unix:.*none/);
  }));
  await s.close();
});

test('tls: a server with --tls-cert, trusted through the ca option', async () => {
  const dir = scratchDir('tls');
  const { cert, key } = selfSignedCert(dir);
  const tokens = writeTokens(path.join(dir, 'tokens'), { [ALL]: '*' });
  const server = await startServer(BIN, ['--memory', '--listen', '0', '--auth-file', tokens,
    '--tls-cert', cert, '--tls-key', key]);
  try {
    const s = new AgentStateSessionService({ address: server.address, token: ALL,
      tls: { ca: fs.readFileSync(cert) } });
    const session = await s.createSession({ appName: 'a', userId: 'u', sessionId: 's' });
    await s.appendEvent({ session, event: ev(1) });
    assert.deepEqual((await s.getSession({ appName: 'a', userId: 'u', sessionId: 's' })).state, { n: 1 });
    // close() with calls in flight: their answers still arrive.
    const inFlight = Array.from({ length: 50 }, (_, i) => s.appendEvent({ session, event: ev(i + 2) }));
    await s.close();
    assert.equal((await Promise.all(inFlight)).length, 50);
    const again = new AgentStateSessionService({ address: server.address, token: ALL, tls: { ca: fs.readFileSync(cert) } });
    assert.equal((await again.getSession({ appName: 'a', userId: 'u', sessionId: 's' })).events.length, 51);
    await again.close();
    // Without the CA, the self-signed certificate is refused before any request is sent
    // (one try: retryForMs 0; the retries are reconnect.test.mjs's).
    const untrusted = new AgentStateSessionService({ address: server.address, token: ALL, tls: true, retryForMs: 0 });
    await assert.rejects(untrusted.listSessions({ appName: 'a' }), isKind('unavailable', (err) => {
      assert.match(err.message, /TLS/);
    }));
    await untrusted.close();
    // Plain text to the TLS port gets no answer: the server closes the connection.
    const plain = new AgentStateSessionService({ address: server.address, token: ALL, retryForMs: 0 });
    await assert.rejects(plain.listSessions({ appName: 'a' }), isKind('unavailable'));
    await plain.close();
  } finally {
    assert.equal(await server.stop(), 0, server.log());
  }
});

test('token, tls and unix: addresses are checked before anything starts', () => {
  const bad = [
    { memory: true, token: ALL }, { store: '/tmp/x', token: ALL }, { memory: true, tls: true },
    { address: '127.0.0.1:7400', token: '' }, { address: '127.0.0.1:7400', token: 7 },
    { address: 'unix:/tmp/s', tls: true }, { address: '127.0.0.1:7400', tls: 'yes' },
    { address: '127.0.0.1:7400', tls: null }, { address: 'unix:' },
    { address: `unix:/${'x'.repeat(107)}` },
  ];
  for (const options of bad) {
    assert.throws(() => new AgentStateSessionService(options), isKind('invalid_argument'),
      JSON.stringify(options));
  }
});
