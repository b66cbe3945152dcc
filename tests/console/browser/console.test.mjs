// SPDX-License-Identifier: Apache-2.0
// The web console (docs/console.md) in a real browser: a real `agentstate serve
// --http` on an LMDB store, and `agentstate console` on another, driven by the
// system chromium through puppeteer-core. Every process started here is stopped
// here by its PID. AGENTSTATE names the tool; CHROMIUM the browser
// (default /usr/bin/chromium).
import { test, before, after } from 'node:test';
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { mkdtempSync, writeFileSync, rmSync, chmodSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import net from 'node:net';
import puppeteer from 'puppeteer-core';

const TOOL = process.env.AGENTSTATE;
const CHROMIUM = process.env.CHROMIUM || '/usr/bin/chromium';
const TOKEN_ALL = 'console-test-token-every-app-0001';
const TOKEN_ALPHA = 'console-test-token-alpha-only-002';
const TOKEN_READ = 'console-test-token-alpha-read-003';
const WAIT = 15000; // the bound of every wait for a condition

const children = [];
let dir, authFile, serve, listenAddr, consoleUrl, browser, rpc;
let ro; // the read-only `agentstate console`

// Resolves once `child`'s stderr (read since it started) matches `re`, with
// the match; rejects at exit, or when `WAIT` passes first. A deadline on the
// log, which is what is waited on.
function logged(child, re) {
  return new Promise((resolve, reject) => {
    const deadline = AbortSignal.timeout(WAIT);
    const check = () => {
      const m = child.log.match(re);
      if (!m) return;
      done();
      resolve(m);
    };
    const timedOut = () => { done(); reject(new Error(`${re} not logged in time:\n${child.log}`)); };
    const exited = (code) => { done(); reject(new Error(`exited ${code}:\n${child.log}`)); };
    const done = () => {
      child.stderr.off('data', check);
      child.off('exit', exited);
      deadline.removeEventListener('abort', timedOut);
    };
    child.stderr.on('data', check);
    child.on('exit', exited);
    deadline.addEventListener('abort', timedOut);
    check();
  });
}

// Starts the tool and resolves once its log names every address in `want`
// (regexps on stderr), with their first groups.
async function start(args, want) {
  const child = spawn(TOOL, args, { stdio: ['ignore', 'ignore', 'pipe'] });
  children.push(child);
  child.log = '';
  child.stderr.on('data', (d) => { child.log += d.toString(); });
  const found = [];
  for (const re of want) found.push((await logged(child, re))[1]);
  return { child, found };
}

async function stop(child) {
  if (child.exitCode !== null || child.signalCode !== null) return;
  const done = new Promise((r) => child.once('exit', r));
  child.kill('SIGTERM');
  await done;
}

// A protocol client on the serve's TCP listener: one JSON line per request.
function connect(addr) {
  const [host, port] = [addr.slice(0, addr.lastIndexOf(':')), Number(addr.slice(addr.lastIndexOf(':') + 1))];
  const sock = net.connect(port, host);
  const waiting = new Map();
  let buf = '', next = 1;
  sock.on('data', (d) => {
    buf += d.toString();
    let i;
    while ((i = buf.indexOf('\n')) >= 0) {
      const line = JSON.parse(buf.slice(0, i));
      buf = buf.slice(i + 1);
      if (line.id !== undefined && waiting.has(line.id)) {
        waiting.get(line.id)(line);
        waiting.delete(line.id);
      }
    }
  });
  const call = (method, params) => new Promise((resolve, reject) => {
    const id = next++;
    waiting.set(id, (line) => (line.error ? reject(new Error(JSON.stringify(line.error))) : resolve(line.result)));
    sock.write(JSON.stringify({ jsonrpc: '2.0', id, method, params }) + '\n');
  });
  return { call, close: () => sock.destroy(), ready: new Promise((r) => sock.once('connect', r)) };
}

const XSS = '<img src=x id=xss onerror="window.__xss=1">';

before(async () => {
  assert.ok(TOOL, 'AGENTSTATE names the agentstate tool');
  dir = mkdtempSync(join(tmpdir(), 'agentstate-console-'));
  const auth = join(dir, 'tokens');
  authFile = auth;
  writeFileSync(auth, `${TOKEN_ALL} *\n${TOKEN_ALPHA} alpha\n${TOKEN_READ} alpha read-only\n`);
  chmodSync(auth, 0o600);
  const s = await start(['serve', '--store', join(dir, 'store'), '--listen', '127.0.0.1:0', '--auth-file', auth,
    '--http', '127.0.0.1:0', '--http-actions'], [/listening on ([0-9.]+:[0-9]+)/, /console on (http:\/\/[^\s"]+)/]);
  serve = s.child;
  [listenAddr, consoleUrl] = s.found;
  rpc = connect(listenAddr);
  await rpc.ready;
  await rpc.call('authenticate', { token: TOKEN_ALL });
  await rpc.call('create_session', { app_name: 'alpha', user_id: 'u1', session_id: 's1', state: { topic: 'weather', 'user:lang': 'en', 'app:model': 'm1' } });
  await rpc.call('append_event', { app_name: 'alpha', user_id: 'u1', session_id: 's1', event: { id: 'ev-1', invocation_id: 'inv-1', author: 'planner', content: { parts: [{ text: XSS }] }, actions: { state_delta: { step: 1 } } } });
  await rpc.call('append_event', { app_name: 'alpha', user_id: 'u1', session_id: 's1', event: { id: 'ev-2', invocation_id: 'inv-2', author: 'tool', content: { parts: [{ text: 'x'.repeat(1000) }, { function_call: { name: 'lookup', args: { q: 'rain' } } }] }, actions: { state_delta: { step: 2, draft: 'd' }, state_remove: ['topic'] } } });
  await rpc.call('create_session', { app_name: 'alpha', user_id: 'u2', session_id: 'other' });
  await rpc.call('create_session', { app_name: 'beta', user_id: 'u1', session_id: 'secret' });
  const r = await start(['console', '--store', join(dir, 'store2'), '--http', '127.0.0.1:0'], [/console on (http:\/\/[^\s"]+)/]);
  ro = { child: r.child, url: r.found[0] };
  browser = await puppeteer.launch({ executablePath: CHROMIUM, headless: true, args: ['--no-sandbox', '--disable-gpu'] });
});

after(async () => {
  if (browser) await browser.close();
  if (rpc) rpc.close();
  for (const c of children) await stop(c);
  if (dir) rmSync(dir, { recursive: true, force: true });
});

// A fresh browser context (its own cookies) logged in with `token`.
async function loggedIn(token) {
  const ctx = await browser.createBrowserContext();
  const page = await ctx.newPage();
  await page.goto(consoleUrl + '/');
  await page.waitForSelector('#login', { timeout: WAIT });
  await page.type('#token', token);
  await page.click('#login button[type=submit]');
  await page.waitForSelector('#apps', { timeout: WAIT });
  return { ctx, page };
}

// fetch() from inside the page (its cookie, its origin); `csrf` adds the header.
function pageFetch(page, path, opts = {}) {
  return page.evaluate(async (path, opts) => {
    const headers = Object.assign({}, opts.headers || {});
    if (opts.csrf) {
      const w = await (await fetch('/api/whoami')).json();
      headers['X-Console-CSRF'] = w.csrf;
    }
    const r = await fetch(path, { method: opts.method || 'GET', headers, body: opts.body });
    return { status: r.status, body: await r.json() };
  }, path, opts);
}

test('a scoped token sees its apps only, and event text is shown as text', async () => {
  const { ctx, page } = await loggedIn(TOKEN_ALPHA);
  try {
    const apps = await page.$$eval('#apps li', (xs) => xs.map((x) => x.textContent));
    assert.deepEqual(apps, ['alpha']);
    const denied = await pageFetch(page, '/api/apps/beta/sessions');
    assert.equal(denied.status, 403);
    assert.equal(denied.body.error.kind, 'permission_denied');
    await page.goto(consoleUrl + '/apps/beta');
    await page.waitForSelector('[data-kind=permission_denied]', { timeout: WAIT });

    await page.goto(consoleUrl + '/apps/alpha');
    await page.waitForSelector('#sessions tr[data-session=s1]', { timeout: WAIT });
    await page.waitForFunction(() => document.getElementById('total').textContent === '2 sessions', { timeout: WAIT });
    await page.waitForSelector('#users tr[data-user=u2]', { timeout: WAIT });
    const users = await page.$$eval('#users tbody tr', (xs) => xs.map((x) => x.textContent));
    assert.deepEqual(users, ['u11', 'u21']);
    await page.type('#prefix', 'oth');
    await page.waitForFunction(() => document.querySelectorAll('#sessions tbody tr').length === 1
      && document.querySelector('#sessions tbody tr').dataset.session === 'other', { timeout: WAIT });

    await page.goto(consoleUrl + '/apps/alpha/users/u1/sessions/s1');
    await page.waitForSelector('article[data-event-id=ev-1]', { timeout: WAIT });
    const text = await page.$eval('article[data-event-id=ev-1] .event-text', (e) => e.textContent);
    assert.equal(text, XSS);
    assert.equal(await page.$('#xss'), null, 'no element was made of the event text');
    assert.equal(await page.evaluate(() => window.__xss), undefined);
    // The long text is shortened, with a way to see it whole.
    const short = await page.$eval('article[data-event-id=ev-2] .event-text', (e) => e.textContent);
    assert.ok(short.length < 1000);
    await page.click('article[data-event-id=ev-2] .show-all');
    assert.equal(await page.$eval('article[data-event-id=ev-2] .event-text', (e) => e.textContent), 'x'.repeat(1000));
    const diff = await page.$eval('article[data-event-id=ev-2] .diff', (e) => e.textContent);
    assert.match(diff, /~ step: 1 → 2/);
    assert.match(diff, /\+ draft = "d"/);
    assert.match(diff, /- topic \(was "weather"\)/);
    // The first event's diff starts from the state the session was created with.
    assert.match(await page.$eval('article[data-event-id=ev-1] .diff', (e) => e.textContent), /\+ step = 1/);
    assert.match(await page.$eval('article[data-event-id=ev-2] .call', (e) => e.textContent), /lookup/);
    // The merged state, by scope.
    assert.match(await page.$eval('[data-scope="App state"]', (e) => e.textContent), /app:model/);
    assert.match(await page.$eval('[data-scope="User state"]', (e) => e.textContent), /user:lang/);
    // A scoped token cannot act on another app, whatever it sends.
    const act = await pageFetch(page, '/api/action', { method: 'POST', csrf: true, headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ action: 'delete', app_name: 'beta', user_id: 'u1', session_id: 'secret' }) });
    assert.equal(act.status, 403);
    assert.equal(act.body.error.kind, 'permission_denied');
    assert.ok(await rpc.call('get_session', { app_name: 'beta', user_id: 'u1', session_id: 'secret' }));
  } finally {
    await ctx.close();
  }
});

test('the session at a version, and new events appear live without a reload', async () => {
  const { ctx, page } = await loggedIn(TOKEN_ALL);
  try {
    await page.goto(consoleUrl + '/apps/alpha/users/u1/sessions/s1?version=1');
    await page.waitForSelector('article[data-event-id=ev-1]', { timeout: WAIT });
    assert.equal(await page.$('article[data-event-id=ev-2]'), null);
    const state = await page.$eval('[data-scope="Session state"]', (e) => e.textContent);
    assert.match(state, /topic/);
    assert.match(state, /step1/);

    await page.goto(consoleUrl + '/apps/alpha/users/u1/sessions/s1');
    await page.waitForSelector('article[data-event-id=ev-2]', { timeout: WAIT });
    await page.waitForFunction(() => document.getElementById('live').textContent === 'live', { timeout: WAIT });
    await page.evaluate(() => { window.__marker = 'same page'; });
    await rpc.call('append_event', { app_name: 'alpha', user_id: 'u1', session_id: 's1', event: { id: 'ev-live', invocation_id: 'inv-3', author: 'planner', content: { parts: [{ text: 'arrived live' }] } } });
    await page.waitForSelector('article[data-event-id=ev-live]', { timeout: WAIT });
    assert.equal(await page.evaluate(() => window.__marker), 'same page');
  } finally {
    await ctx.close();
  }
});

test('a stream resumes after the cursor its client last saw (Last-Event-ID)', async () => {
  const { ctx, page } = await loggedIn(TOKEN_ALL);
  try {
    const created = await rpc.call('create_session', { app_name: 'alpha', user_id: 'u3', session_id: 'resume' });
    await rpc.call('append_event', { app_name: 'alpha', user_id: 'u3', session_id: 'resume', event: { id: 'r-1' } });
    await rpc.call('append_event', { app_name: 'alpha', user_id: 'u3', session_id: 'resume', event: { id: 'r-2' } });
    // The first `changes` event of a stream from `from`, or from Last-Event-ID
    // when given (what a reconnecting EventSource sends).
    const read = (from, lastEventId) => page.evaluate(async (from, lastEventId) => {
      const ctl = new AbortController();
      const headers = lastEventId ? { 'Last-Event-ID': lastEventId } : {};
      const r = await fetch('/api/watch?scope=session&app=alpha&user=u3&session=resume&from=' + encodeURIComponent(from),
        { headers, signal: ctl.signal });
      const reader = r.body.getReader();
      let text = '';
      while (!/event: changes\ndata: [^\n]*\n/.test(text)) {
        const { value, done } = await reader.read();
        if (done) break;
        text += new TextDecoder().decode(value);
      }
      ctl.abort();
      const m = text.match(/id: ([^\n]*)\nevent: changes\ndata: ([^\n]*)\n/);
      return { id: m[1], data: JSON.parse(m[2]) };
    }, from, lastEventId);
    const first = await read(created.cursor, null);
    assert.equal(first.data.changes[0].version, 1);
    const resumed = await read(created.cursor, first.data.changes[0].cursor);
    assert.equal(resumed.data.changes[0].version, 2);
  } finally {
    await ctx.close();
  }
});

test('actions: CSRF and origin are checked; rewind shows its plan, fork and delete confirm', async () => {
  const { ctx, page } = await loggedIn(TOKEN_ALL);
  try {
    const body = JSON.stringify({ action: 'delete', app_name: 'alpha', user_id: 'u1', session_id: 's1' });
    const noCsrf = await pageFetch(page, '/api/action', { method: 'POST', headers: { 'Content-Type': 'application/json' }, body });
    assert.equal(noCsrf.status, 403);
    assert.equal(noCsrf.body.error.kind, 'csrf');
    const noJson = await pageFetch(page, '/api/action', { method: 'POST', csrf: true, headers: { 'Content-Type': 'text/plain' }, body });
    assert.equal(noJson.status, 415);
    assert.ok(await rpc.call('get_session', { app_name: 'alpha', user_id: 'u1', session_id: 's1' }));

    await page.goto(consoleUrl + '/apps/alpha/users/u1/sessions/s1');
    await page.waitForSelector('#rewind-invocation option[value=inv-2]', { timeout: WAIT });
    await page.select('#rewind-invocation', 'inv-2');
    await page.click('#act-rewind');
    await page.waitForSelector('#rewind-plan', { visible: true, timeout: WAIT });
    const plan = await page.$eval('#rewind-plan', (e) => e.textContent);
    assert.match(plan, /\+ topic = "weather"/);
    assert.match(plan, /~ step: 2 → 1/);
    assert.match(plan, /- draft \(was "d"\)/);
    await page.click('#dialog-confirm');
    // The dialog closes once the page shows the session after the action.
    await page.waitForSelector('#dialog[hidden]', { timeout: WAIT });
    assert.equal(await page.$eval('#timeline article .author', (e) => e.textContent), 'user');
    const after = await rpc.call('get_session', { app_name: 'alpha', user_id: 'u1', session_id: 's1' });
    assert.equal(after.state.topic, 'weather');
    assert.equal(after.state.draft, undefined);

    await page.$eval('#fork-version', (e) => { e.value = '1'; });
    await page.type('#fork-id', 's1-fork');
    await page.click('#act-fork');
    await page.waitForSelector('#dialog:not([hidden])', { timeout: WAIT });
    await page.click('#dialog-confirm');
    await page.waitForSelector('#dialog[hidden]', { timeout: WAIT });
    assert.equal(await page.evaluate(() => location.pathname), '/apps/alpha/users/u1/sessions/s1-fork');
    const fork = await rpc.call('get_session', { app_name: 'alpha', user_id: 'u1', session_id: 's1-fork' });
    assert.equal(fork.version, 1);

    await page.waitForSelector('#act-delete', { timeout: WAIT });
    await page.click('#act-delete');
    await page.waitForSelector('#dialog:not([hidden])', { timeout: WAIT });
    assert.match(await page.$eval('#dialog-body', (e) => e.textContent), /s1-fork/);
    await page.click('#dialog-confirm');
    await page.waitForSelector('#dialog[hidden]', { timeout: WAIT });
    assert.equal(await page.evaluate(() => location.pathname), '/apps/alpha/users/u1');
    assert.equal(await rpc.call('get_session', { app_name: 'alpha', user_id: 'u1', session_id: 's1-fork' }), null);
  } finally {
    await ctx.close();
  }
});

test('bad input gets a typed JSON error with an HTTP status', async () => {
  const { ctx, page } = await loggedIn(TOKEN_ALL);
  try {
    const cases = [
      ['/api/apps/%ZZ/sessions', 400, 'invalid_argument'],
      ['/api/apps/%C3%28/sessions', 400, 'invalid_argument'],
      ['/api/apps/alpha/sessions?page_size=100000', 400, 'invalid_argument'],
      ['/api/apps/alpha/users/u1/sessions/s1?version=abc', 400, 'invalid_argument'],
      ['/api/apps/alpha/users/u1/sessions/s1?version=999', 400, 'invalid_argument'],
      ['/api/apps/alpha/users/u1/sessions/nope', 404, 'not_found'],
      ['/api/apps/alpha/nothing', 404, 'not_found'],
      ['/api/watch?scope=session&app=alpha&user=u1&session=s1&from=not-a-cursor', 400, 'invalid_argument'],
    ];
    for (const [path, status, kind] of cases) {
      const r = await pageFetch(page, path);
      assert.equal(r.status, status, path);
      assert.equal(r.body.error.kind, kind, path);
      assert.equal(typeof r.body.error.message, 'string');
    }
    const unknown = await pageFetch(page, '/api/apps/no-such-app/sessions');
    assert.equal(unknown.status, 200);
    assert.deepEqual(unknown.body.result.sessions, []);
    // A name holding '/' is one percent-encoded segment.
    await rpc.call('create_session', { app_name: 'alpha', user_id: 'a/b', session_id: 'x/y' });
    const slashed = await pageFetch(page, '/api/apps/alpha/users/a%2Fb/sessions/x%2Fy');
    assert.equal(slashed.status, 200);
    assert.equal(slashed.body.result.id, 'x/y');
  } finally {
    await ctx.close();
  }
  // A login from another origin is refused before its token is looked at.
  const cross = await fetch(consoleUrl + '/api/login', { method: 'POST', headers: { 'Content-Type': 'application/json', Origin: 'http://evil.example' },
    body: JSON.stringify({ token: TOKEN_ALL }) });
  assert.equal(cross.status, 403);
  assert.equal((await cross.json()).error.kind, 'csrf');
  // Without a login nothing but the login is answered.
  const r = await fetch(consoleUrl + '/api/apps/alpha/sessions');
  assert.equal(r.status, 401);
  assert.equal((await r.json()).error.kind, 'unauthenticated');
});

test('the store page shows the counters and the rate charts', async () => {
  const { ctx, page } = await loggedIn(TOKEN_ALL);
  try {
    await page.goto(consoleUrl + '/store');
    await page.waitForSelector('#stats', { timeout: WAIT });
    const rows = await page.$$eval('#stats tr', (xs) => xs.map((x) => x.textContent));
    assert.ok(rows.some((r) => r.startsWith('console live streams')));
    assert.ok(rows.some((r) => r.startsWith('events appended')));
    assert.ok(rows.some((r) => r.startsWith('size on disk')));
    // The serve's own listener: this file's protocol connection is open, with no watch.
    assert.ok(rows.some((r) => /^protocol connections[1-9]/.test(r)), rows.join(' | '));
    assert.ok(rows.includes('protocol watches0'), rows.join(' | '));
    await page.waitForFunction(() => document.querySelectorAll('.chart.appends .bar').length >= 1, { timeout: WAIT });
  } finally {
    await ctx.close();
  }
  const { ctx: c2, page: p2 } = await loggedIn(TOKEN_ALPHA);
  try {
    await p2.goto(consoleUrl + '/store');
    await p2.waitForSelector('[data-kind=permission_denied]', { timeout: WAIT });
  } finally {
    await c2.close();
  }
});

test('a read-only token reads, is offered no action, and an action it sends is refused', async () => {
  const { ctx, page } = await loggedIn(TOKEN_READ);
  try {
    const w = await pageFetch(page, '/api/whoami');
    assert.equal(w.body.read_only, true);
    assert.equal(w.body.actions, false);
    await page.goto(consoleUrl + '/apps/alpha/users/u2/sessions/other');
    await page.waitForSelector('#read-only', { timeout: WAIT });
    assert.equal(await page.$eval('#read-only', (e) => e.textContent), 'Read-only token.');
    assert.equal(await page.$('#actions'), null);
    const r = await pageFetch(page, '/api/action', { method: 'POST', csrf: true, headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ action: 'delete', app_name: 'alpha', user_id: 'u2', session_id: 'other' }) });
    assert.equal(r.status, 403);
    assert.equal(r.body.error.kind, 'permission_denied');
    assert.ok(await rpc.call('get_session', { app_name: 'alpha', user_id: 'u2', session_id: 'other' }));
  } finally {
    await ctx.close();
  }
});

test('agentstate console without --http-actions is read-only', async () => {
  const ctx = await browser.createBrowserContext();
  try {
    const page = await ctx.newPage();
    await page.goto(ro.url + '/');
    await page.waitForSelector('#open-app', { timeout: WAIT });
    const w = await pageFetch(page, '/api/whoami');
    assert.equal(w.body.actions, false);
    const r = await pageFetch(page, '/api/action', { method: 'POST', csrf: true, headers: { 'Content-Type': 'application/json' },
      body: JSON.stringify({ action: 'fork', app_name: 'a', user_id: 'u', session_id: 's', at_version: 0 }) });
    assert.equal(r.status, 403);
    assert.equal(r.body.error.kind, 'permission_denied');
    // A Host the console does not answer to (DNS rebinding) is refused.
    const port = new URL(ro.url).port;
    const other = await new Promise((resolve, reject) => {
      const s = net.connect(Number(port), '127.0.0.1', () => s.write(`GET /api/whoami HTTP/1.1\r\nHost: evil.example:${port}\r\nConnection: close\r\n\r\n`));
      let out = '';
      s.on('data', (d) => { out += d; });
      s.on('end', () => resolve(out));
      s.on('error', reject);
    });
    assert.match(other, /^HTTP\/1\.1 403/);
  } finally {
    await ctx.close();
  }
});

test('serve re-reads --auth-file on SIGHUP for the console too: a removed token stops working', async () => {
  const login = await fetch(consoleUrl + '/api/login', { method: 'POST', headers: { 'Content-Type': 'application/json' },
    body: JSON.stringify({ token: TOKEN_ALPHA }) });
  assert.equal(login.status, 200);
  const cookie = login.headers.get('set-cookie').split(';')[0];
  const list = () => fetch(consoleUrl + '/api/apps/alpha/sessions', { headers: { Cookie: cookie } });
  assert.equal((await list()).status, 200);
  writeFileSync(authFile, `${TOKEN_ALL} *\n`);
  // The reload happens on serve's signal thread, which logs it once the new
  // tokens are in force.
  const before = (serve.log.match(/tokens_reloaded/g) || []).length;
  const reloaded = logged(serve, new RegExp(`(?:[^]*?tokens_reloaded){${before + 1}}`));
  serve.kill('SIGHUP');
  await reloaded;
  const status = (await list()).status;
  assert.equal(status, 401);
});
