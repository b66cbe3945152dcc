// SPDX-License-Identifier: Apache-2.0
// The agentstate console's page (docs/console.md). Everything the store holds is
// untrusted: it is put on the page as text (textContent), never as markup.
'use strict';

const $ = (id) => document.getElementById(id);
let who = null; // /api/whoami
let stream = null; // the EventSource of the page's live view
let refreshTimer = null;

// el('div', {class: 'x'}, 'text', child...): attributes set one by one, strings
// become text nodes.
function el(tag, attrs, ...children) {
  const e = document.createElement(tag);
  for (const [k, v] of Object.entries(attrs || {})) {
    if (k === 'class') e.className = v;
    else if (k === 'onclick') e.addEventListener('click', v);
    else if (v !== undefined && v !== null) e.setAttribute(k, String(v));
  }
  for (const c of children) {
    if (c === null || c === undefined) continue;
    e.append(typeof c === 'string' || typeof c === 'number' ? document.createTextNode(String(c)) : c);
  }
  return e;
}

const seg = (s) => encodeURIComponent(s);
const appPath = (app) => `/apps/${seg(app)}`;
const userPath = (app, user) => `${appPath(app)}/users/${seg(user)}`;
const sessionPath = (app, user, id) => `${userPath(app, user)}/sessions/${seg(id)}`;
const time = (t) => (typeof t === 'number' ? new Date(t * 1000).toISOString() : '');
const show = (v) => JSON.stringify(v);

class ApiError extends Error {
  constructor(status, err) {
    super(err && err.message ? err.message : `HTTP ${status}`);
    this.status = status;
    this.kind = err && err.kind ? err.kind : 'internal';
  }
}

async function api(path, opts) {
  const r = await fetch(path, Object.assign({ credentials: 'same-origin' }, opts || {}));
  let body = null;
  try { body = await r.json(); } catch (e) { body = null; }
  if (!r.ok) throw new ApiError(r.status, body && body.error);
  return body && 'result' in body ? body.result : body;
}

async function post(path, body) {
  return api(path, {
    method: 'POST',
    headers: { 'Content-Type': 'application/json', 'X-Console-CSRF': (who && who.csrf) || '' },
    body: JSON.stringify(body),
  });
}

function go(path) {
  history.pushState(null, '', path);
  return route();
}

function link(path, text) {
  const a = el('a', { href: path }, text);
  a.addEventListener('click', (ev) => {
    if (ev.button !== 0 || ev.ctrlKey || ev.metaKey || ev.shiftKey) return;
    ev.preventDefault();
    go(path);
  });
  return a;
}

function errorBox(e) {
  return el('p', { class: 'error', 'data-kind': e.kind || 'internal' },
    `${e.kind || 'error'}: ${e.message}`);
}

function setLive(on, text) {
  const l = $('live');
  l.className = 'live ' + (on ? 'on' : 'off');
  l.textContent = text;
}

function stopLive() {
  if (stream) stream.close();
  stream = null;
  if (refreshTimer) clearInterval(refreshTimer);
  refreshTimer = null;
  setLive(false, 'not live');
}

// Follows the change feed from `from` (a cursor): the server's events carry the
// cursor as their id, so a reconnect resumes where the page left off.
// `onChanges` runs only while this stream is the page's.
function follow(params, onChanges) {
  const q = new URLSearchParams(params);
  stream = new EventSource('/api/watch?' + q.toString());
  const mine = stream;
  stream.addEventListener('ready', () => setLive(true, 'live'));
  stream.addEventListener('changes', (ev) => {
    const d = JSON.parse(ev.data);
    if (stream === mine && d.changes && d.changes.length) onChanges(d.changes, () => stream === mine);
  });
  stream.addEventListener('ended', (ev) => {
    const d = JSON.parse(ev.data);
    setLive(false, 'ended: ' + d.reason);
    mine.close();
  });
  stream.addEventListener('error', () => {
    if (mine.readyState === EventSource.CLOSED) setLive(false, 'not live');
    else setLive(false, 'reconnecting');
  });
}

function crumbs(parts) {
  const c = $('crumbs');
  c.replaceChildren();
  parts.forEach(([path, text], i) => {
    if (i > 0) c.append(el('span', { class: 'muted' }, '/'));
    c.append(path ? link(path, text) : el('span', {}, text));
  });
}

function stateTable(title, obj, prefix) {
  const rows = Object.keys(obj || {}).sort().map((k) =>
    el('tr', {}, el('td', {}, prefix + k), el('td', { class: 'state' }, show(obj[k]))));
  return el('section', { 'data-scope': title },
    el('h2', {}, title),
    rows.length ? el('table', { class: 'state-table' }, el('tbody', {}, ...rows))
      : el('p', { class: 'muted' }, 'no keys'));
}

// -- pages -------------------------------------------------------------------

async function loginPage(main) {
  crumbs([]);
  const input = el('input', { type: 'password', id: 'token', autocomplete: 'off', size: 48 });
  const msg = el('div');
  const form = el('form', { id: 'login' }, el('h1', {}, 'Log in'),
    el('p', {}, 'Give a token of the server\'s --auth-file. It is kept by the console, not by this page.'),
    input, ' ', el('button', { type: 'submit' }, 'Log in'), msg);
  form.addEventListener('submit', async (ev) => {
    ev.preventDefault();
    try {
      await post('/api/login', { token: input.value });
      input.value = '';
      route();
    } catch (e) {
      msg.replaceChildren(errorBox(e));
    }
  });
  main.replaceChildren(form);
}

async function rootPage(main) {
  crumbs([]);
  const open = el('input', { id: 'open-app', placeholder: 'app name' });
  const form = el('form', {}, 'Open an app: ', open, ' ', el('button', { type: 'submit' }, 'Open'));
  form.addEventListener('submit', (ev) => {
    ev.preventDefault();
    if (open.value) go(appPath(open.value));
  });
  const parts = [el('h1', {}, 'Apps')];
  if (!who.all_apps) {
    parts.push(el('ul', { id: 'apps' }, ...who.apps.map((a) => el('li', {}, link(appPath(a), a)))));
    main.replaceChildren(...parts, form);
    return;
  }
  // A token for every app: the protocol has no listing of apps, so the apps
  // shown are the ones the store's change feed names from now on.
  const seen = new Set();
  const apps = el('ul', { id: 'apps' });
  const feed = el('ul', { id: 'feed', class: 'feed' });
  parts.push(form, el('h2', {}, 'Apps changed since this page opened'), apps,
    el('h2', {}, 'Store changes'), feed);
  main.replaceChildren(...parts);
  follow({ scope: 'all' }, (changes) => {
    for (const c of changes) {
      if (c.app_name && !seen.has(c.app_name)) {
        seen.add(c.app_name);
        apps.append(el('li', {}, link(appPath(c.app_name), c.app_name)));
      }
      const where = c.session_id
        ? link(sessionPath(c.app_name, c.user_id, c.session_id), `${c.app_name} / ${c.user_id} / ${c.session_id}`)
        : el('span', {}, `${c.app_name} / ${c.user_id || ''}`);
      feed.prepend(el('li', {}, `${c.kind} v${c.version} `, where));
      while (feed.children.length > 50) feed.lastChild.remove();
    }
  });
}

function sessionList(app, user) {
  const box = el('section', { id: 'sessions' });
  const order = el('select', { id: 'order' },
    el('option', { value: 'desc' }, 'newest first'), el('option', { value: 'asc' }, 'oldest first'));
  const orderBy = el('select', { id: 'order-by' },
    el('option', { value: 'update_time' }, 'by update'), el('option', { value: 'created' }, 'by creation'),
    el('option', { value: 'id' }, 'by id'));
  const prefix = el('input', { id: 'prefix', placeholder: 'session id prefix' });
  const total = el('span', { id: 'total', class: 'muted' });
  const body = el('tbody');
  const more = el('button', { id: 'more', hidden: '' }, 'Next page');
  const msg = el('div');
  let token = null;
  const base = user ? `/api/apps/${seg(app)}/users/${seg(user)}/sessions` : `/api/apps/${seg(app)}/sessions`;
  async function load(reset) {
    const q = new URLSearchParams({ order: order.value, order_by: orderBy.value, page_size: '50' });
    if (prefix.value) q.set('prefix', prefix.value);
    if (reset) q.set('total', '1');
    if (!reset && token) q.set('page_token', token);
    try {
      const r = await api(base + '?' + q.toString());
      if (reset) body.replaceChildren();
      if (r.total !== undefined) total.textContent = `${r.total} sessions`;
      for (const s of r.sessions) {
        body.append(el('tr', { 'data-session': s.id },
          el('td', {}, link(sessionPath(app, s.user_id, s.id), s.id)),
          el('td', {}, link(userPath(app, s.user_id), s.user_id)),
          el('td', {}, String(s.version)),
          el('td', {}, time(s.last_update_time)),
          el('td', {}, s.expires_at ? time(s.expires_at) : '')));
      }
      token = r.next_page_token;
      more.hidden = !token;
      msg.replaceChildren();
    } catch (e) {
      msg.replaceChildren(errorBox(e));
    }
  }
  for (const c of [order, orderBy]) c.addEventListener('change', () => load(true));
  prefix.addEventListener('input', () => load(true));
  more.addEventListener('click', () => load(false));
  box.append(el('h2', {}, 'Sessions'), el('div', { class: 'controls' }, order, orderBy, prefix, total), msg,
    el('table', {}, el('thead', {}, el('tr', {}, el('th', {}, 'session'), el('th', {}, 'user'),
      el('th', {}, 'version'), el('th', {}, 'updated'), el('th', {}, 'expires'))), body), more);
  load(true);
  return { box, reload: () => load(true) };
}

// An app's users with their session counts, paged.
function userList(app) {
  const body = el('tbody');
  const more = el('button', { id: 'more-users', hidden: '' }, 'More users');
  const msg = el('div');
  const seen = new Set();
  let token = null;
  async function load() {
    const q = new URLSearchParams({ page_size: '20' });
    if (token) q.set('page_token', token);
    try {
      const r = await api(`/api/apps/${seg(app)}/users?` + q.toString());
      for (const u of r.users) {
        if (seen.has(u.user_id)) continue; // a user a page boundary split
        seen.add(u.user_id);
        body.append(el('tr', { 'data-user': u.user_id }, el('td', {}, link(userPath(app, u.user_id), u.user_id)),
          el('td', {}, String(u.sessions))));
      }
      token = r.next_page_token;
      more.hidden = !token;
    } catch (e) {
      msg.replaceChildren(errorBox(e));
    }
  }
  more.addEventListener('click', load);
  load();
  return el('section', { id: 'users' }, el('h2', {}, 'Users'), msg,
    el('table', {}, el('thead', {}, el('tr', {}, el('th', {}, 'user'), el('th', {}, 'sessions'))), body), more);
}

async function scopePage(main, app, user) {
  crumbs(user ? [[appPath(app), app], [null, user]] : [[null, app]]);
  main.replaceChildren(el('h1', {}, user ? `User ${user}` : `App ${app}`));
  let stateBox = el('div');
  const list = sessionList(app, user);
  main.append(stateBox);
  if (!user) main.append(userList(app));
  main.append(list.box);
  try {
    const path = user ? `/api/apps/${seg(app)}/users/${seg(user)}/state` : `/api/apps/${seg(app)}/state`;
    const s = await api(path);
    stateBox.replaceChildren(stateTable(user ? 'User state' : 'App state', s.state, user ? 'user:' : 'app:'));
    let pending = false;
    follow(Object.assign({ scope: user ? 'user' : 'app', app, from: s.cursor }, user ? { user } : {}), (changes, current) => {
      if (pending) return;
      pending = true;
      setTimeout(async () => {
        pending = false;
        if (!current()) return;
        list.reload();
        try {
          const s2 = await api(path);
          stateBox.replaceChildren(stateTable(user ? 'User state' : 'App state', s2.state, user ? 'user:' : 'app:'));
        } catch (e) { stateBox.replaceChildren(errorBox(e)); }
      }, 200);
    });
  } catch (e) {
    stateBox.replaceChildren(errorBox(e));
  }
}

const SHORT = 400;

function shortened(text, cls) {
  const box = el('div', { class: cls });
  if (text.length <= SHORT) {
    box.textContent = text;
    return box;
  }
  const span = el('span', {}, text.slice(0, SHORT) + '…');
  const btn = el('button', { class: 'show-all' }, `show all (${text.length} characters)`);
  btn.addEventListener('click', () => { span.textContent = text; btn.remove(); });
  box.append(span, btn);
  return box;
}

const shared = (k) => k.startsWith('app:') || k.startsWith('user:');

// The session's own keys of a state (app: and user: keys are left out).
function ownKeys(state) {
  const out = {};
  for (const [k, v] of Object.entries(state || {})) if (!shared(k)) out[k] = v;
  return out;
}

// One event; `before` holds the session's own keys just before it, so each key it
// sets or removes shows its value before (app: and user: keys show the new value
// only: their history is not kept).
function eventView(ev, version, before) {
  const parts = (ev.content && Array.isArray(ev.content.parts)) ? ev.content.parts : [];
  const body = [];
  for (const p of parts) {
    if (p && typeof p.text === 'string') body.push(shortened(p.text, 'event-text'));
    if (p && p.function_call) body.push(shortened('call ' + show(p.function_call), 'call'));
    if (p && p.functionCall) body.push(shortened('call ' + show(p.functionCall), 'call'));
    if (p && p.function_response) body.push(shortened('response ' + show(p.function_response), 'call'));
    if (p && p.functionResponse) body.push(shortened('response ' + show(p.functionResponse), 'call'));
  }
  const actions = ev.actions || {};
  const delta = actions.state_delta || {};
  const diff = el('div', { class: 'diff' });
  for (const k of Object.keys(delta).sort()) {
    if (!shared(k) && before && k in before)
      diff.append(el('div', { class: 'set' }, `~ ${k}: ${show(before[k])} → ${show(delta[k])}`));
    else diff.append(el('div', { class: 'set' }, `+ ${k} = ${show(delta[k])}`));
  }
  for (const k of actions.state_remove || []) {
    const was = !shared(k) && before && k in before ? ` (was ${show(before[k])})` : '';
    diff.append(el('div', { class: 'rm' }, `- ${k}${was}`));
  }
  return el('article', { class: 'event', 'data-version': version, 'data-event-id': ev.id || '' },
    el('div', { class: 'event-head' },
      el('span', {}, `v${version}`), el('span', { class: 'author' }, ev.author || ''),
      el('span', { class: 'invocation' }, ev.invocation_id || ''), el('span', {}, time(ev.timestamp)),
      ev.partial ? el('span', {}, 'partial') : null),
    ...body, diff.childNodes.length ? diff : null);
}

// The views of `events` (versions first, first + 1, ...), newest first, each
// diffed against the session's own keys before it, starting from the state
// after version first - 1 (one more read).
async function eventViews(path, events, first) {
  let state = null;
  if (events.length) {
    try {
      const r = await api(path + '?' + new URLSearchParams({ version: String(first - 1), events: '0' }));
      state = ownKeys(r.state);
    } catch (e) {
      state = null; // the diffs then show new values only
    }
  }
  const views = events.map((ev, i) => {
    const v = eventView(ev, first + i, state);
    if (state) {
      const a = ev.actions || {};
      for (const [k, val] of Object.entries(a.state_delta || {})) if (!shared(k)) state[k] = val;
      for (const k of a.state_remove || []) delete state[k];
    }
    return v;
  });
  return views.reverse();
}

async function sessionPage(main, app, user, id, version) {
  crumbs([[appPath(app), app], [userPath(app, user), user], [null, id]]);
  const path = `/api/apps/${seg(app)}/users/${seg(user)}/sessions/${seg(id)}`;
  const q = new URLSearchParams({ events: '50' });
  if (version !== null) q.set('version', String(version));
  let s;
  try {
    s = await api(path + '?' + q.toString());
  } catch (e) {
    main.replaceChildren(el('h1', {}, `Session ${id}`), errorBox(e));
    return;
  }
  const own = {}, userState = {}, appState = {};
  for (const [k, v] of Object.entries(s.state || {})) {
    if (k.startsWith('app:')) appState[k.slice(4)] = v;
    else if (k.startsWith('user:')) userState[k.slice(5)] = v;
    else own[k] = v;
  }
  const verInput = el('input', { id: 'version', type: 'number', min: 0, max: s.version, value: s.version });
  const verForm = el('form', { class: 'controls' }, 'Version ', verInput, ' ', el('button', { type: 'submit' }, 'View'),
    version !== null ? link(sessionPath(app, user, id), 'latest') : el('span', { class: 'muted' }, '(latest)'));
  verForm.addEventListener('submit', (ev) => {
    ev.preventDefault();
    go(sessionPath(app, user, id) + '?version=' + encodeURIComponent(verInput.value));
  });
  const info = el('p', { id: 'session-info' }, `version ${s.version}, updated ${time(s.last_update_time)}`,
    s.expires_at ? `, expires ${time(s.expires_at)}` : ', no TTL',
    s.as_of ? ` (as of version ${s.as_of.version}; app: and user: keys are current)` : '');
  const timeline = el('section', { id: 'timeline' });
  const older = el('button', { id: 'older' }, 'Older events');
  const n = s.events.length;
  let first = s.version - n + 1; // the version of the first event shown
  timeline.append(...await eventViews(path, s.events, first));
  older.hidden = first <= 1;
  older.addEventListener('click', async () => {
    try {
      const r = await api(path + '?' + new URLSearchParams({ events: '50', version: String(first - 1) }));
      const base = r.version - r.events.length + 1;
      timeline.append(...await eventViews(path, r.events, base));
      first = base;
      older.hidden = first <= 1;
    } catch (e) {
      timeline.append(errorBox(e));
    }
  });
  main.replaceChildren(el('h1', {}, `Session ${id}`), info, verForm, actionBar(app, user, id, s),
    stateTable('Session state', own, ''), stateTable('User state', userState, 'user:'),
    stateTable('App state', appState, 'app:'), el('h2', {}, 'Events (newest first)'), timeline, older);
  if (version === null) {
    let pending = false;
    follow({ scope: 'session', app, user, session: id, from: s.cursor }, (changes, current) => {
      if (pending) return;
      pending = true;
      setTimeout(() => { pending = false; if (current()) route(true); }, 100);
    });
  }
}

function confirmDialog(title, body, onConfirm) {
  $('dialog-title').textContent = title;
  $('dialog-body').replaceChildren(...body);
  $('dialog').hidden = false;
  const ok = $('dialog-confirm'), cancel = $('dialog-cancel');
  const close = () => { $('dialog').hidden = true; ok.onclick = null; cancel.onclick = null; };
  cancel.onclick = close;
  ok.onclick = async () => {
    ok.disabled = true;
    try {
      await onConfirm();
      close();
    } catch (e) {
      $('dialog-body').append(errorBox(e));
    } finally {
      ok.disabled = false;
    }
  };
}

function actionBar(app, user, id, s) {
  if (!who.actions) return el('p', { class: 'muted', id: 'read-only' }, who.read_only ? 'Read-only token.' : 'Read-only console.');
  const ref = { app_name: app, user_id: user, session_id: id };
  const del = el('button', { id: 'act-delete', class: 'danger' }, 'Delete session');
  del.addEventListener('click', () => confirmDialog('Delete this session?',
    [el('p', {}, `Session ${id} of user ${user} in app ${app} (${s.version} events) will be deleted. App and user state stay.`)],
    async () => { await post('/api/action', Object.assign({ action: 'delete' }, ref)); await go(userPath(app, user)); }));
  const inv = el('select', { id: 'rewind-invocation' });
  const rew = el('button', { id: 'act-rewind' }, 'Rewind before…');
  rew.addEventListener('click', async () => {
    if (!inv.value) return;
    const planPath = `/api/apps/${seg(app)}/users/${seg(user)}/sessions/${seg(id)}/rewind_plan?before_invocation_id=${encodeURIComponent(inv.value)}`;
    try {
      const plan = await api(planPath);
      const diff = el('div', { class: 'diff', id: 'rewind-plan' });
      const now = ownKeys(s.state);
      for (const k of Object.keys(plan.state_delta || {}).sort()) {
        diff.append(el('div', { class: 'set' }, k in now
          ? `~ ${k}: ${show(now[k])} → ${show(plan.state_delta[k])}` : `+ ${k} = ${show(plan.state_delta[k])}`));
      }
      for (const k of plan.state_remove || [])
        diff.append(el('div', { class: 'rm' }, `- ${k}${k in now ? ` (was ${show(now[k])})` : ''}`));
      if (!diff.childNodes.length) diff.append(el('div', {}, 'no session keys change'));
      confirmDialog(`Rewind before invocation ${inv.value}?`,
        [el('p', {}, `One rewind event is appended; the session's state returns to version ${plan.before_version - 1}:`), diff],
        async () => {
          await post('/api/action', Object.assign({ action: 'rewind', before_invocation_id: inv.value, expected_version: s.version }, ref));
          await go(sessionPath(app, user, id));
        });
    } catch (e) {
      confirmDialog('Rewind', [errorBox(e)], async () => {});
    }
  });
  const forkVer = el('input', { id: 'fork-version', type: 'number', min: 0, max: s.version, value: s.version });
  const forkId = el('input', { id: 'fork-id', placeholder: 'new session id (optional)' });
  const fork = el('button', { id: 'act-fork' }, 'Fork');
  fork.addEventListener('click', () => confirmDialog('Fork this session?',
    [el('p', {}, `A new session ${forkId.value || '(generated id)'} of user ${user} gets events 1..${forkVer.value} and the state after version ${forkVer.value}. This session is unchanged.`)],
    async () => {
      const r = await post('/api/action', Object.assign({ action: 'fork', at_version: Number(forkVer.value) }, ref,
        forkId.value ? { new_session_id: forkId.value } : {}));
      await go(sessionPath(app, user, r.id));
    }));
  api(`/api/apps/${seg(app)}/users/${seg(user)}/sessions/${seg(id)}/invocations`).then((list) => {
    for (const i of list) if (!i.rewind) inv.append(el('option', { value: i.invocation_id }, `${i.invocation_id} (v${i.first_version})`));
  }).catch(() => {});
  return el('div', { class: 'controls', id: 'actions' }, del, inv, rew, 'at version', forkVer, forkId, fork);
}

function chart(values, cls) {
  const max = Math.max(1, ...values);
  return el('div', { class: 'chart ' + cls },
    ...values.map((v) => { const b = el('div', { class: 'bar', title: v.toFixed(1) }); b.style.height = `${Math.round(76 * v / max)}px`; return b; }));
}

async function storePage(main) {
  crumbs([[null, 'store']]);
  async function draw() {
    try {
      const s = await api('/api/stats');
      const rates = { commits: [], appends: [] };
      for (let i = 1; i < s.samples.length; i++) {
        const [t0, c0, a0] = s.samples[i - 1], [t1, c1, a1] = s.samples[i];
        const dt = Math.max(t1 - t0, 0.001);
        rates.commits.push((c1 - c0) / dt);
        rates.appends.push((a1 - a0) / dt);
      }
      const rows = [['events appended (since start)', s.appends], ['commits (since start)', s.commits],
        ['sessions live (actors)', s.sessions_live], ['users live', s.users_live], ['apps live', s.apps_live],
        ['size on disk', s.store_bytes_on_disk !== undefined ? `${(s.store_bytes_on_disk / 1048576).toFixed(1)} MiB` : 'in memory'],
        ['console live streams', s.console.streams_open]];
      if (s.server) rows.push(['protocol connections', s.server.connections_open], ['protocol watches', s.server.watches]);
      main.replaceChildren(el('h1', {}, 'Store'),
        el('table', { id: 'stats' }, el('tbody', {}, ...rows.map(([k, v]) => el('tr', {}, el('td', {}, k), el('td', {}, String(v)))))),
        el('h2', {}, 'Commits per second'), chart(rates.commits, 'commits'),
        el('h2', {}, 'Appends per second'), chart(rates.appends, 'appends'));
    } catch (e) {
      main.replaceChildren(el('h1', {}, 'Store'), errorBox(e));
    }
  }
  await draw();
  refreshTimer = setInterval(draw, 2000);
}

async function route(keepScroll) {
  stopLive();
  const main = $('main');
  try {
    who = await api('/api/whoami');
  } catch (e) {
    main.replaceChildren(errorBox(e));
    return;
  }
  $('logout').hidden = !(who.auth_required && who.authenticated);
  if (who.auth_required && !who.authenticated) return loginPage(main);
  let segs;
  try {
    segs = location.pathname.split('/').slice(1).filter((x, i, a) => x !== '' || i < a.length - 1).map(decodeURIComponent);
  } catch (e) {
    main.replaceChildren(errorBox({ kind: 'invalid_argument', message: 'the address is not valid percent-encoding' }));
    return;
  }
  const version = new URLSearchParams(location.search).get('version');
  const y = window.scrollY;
  if (segs.length === 0) await rootPage(main);
  else if (segs.length === 1 && segs[0] === 'store') await storePage(main);
  else if (segs[0] === 'apps' && segs.length === 2) await scopePage(main, segs[1], null);
  else if (segs[0] === 'apps' && segs.length === 4 && segs[2] === 'users') await scopePage(main, segs[1], segs[3]);
  else if (segs[0] === 'apps' && segs.length === 6 && segs[2] === 'users' && segs[4] === 'sessions') {
    if (version !== null && !/^[0-9]+$/.test(version)) {
      main.replaceChildren(errorBox({ kind: 'invalid_argument', message: `version must be a whole number, not '${version}'` }));
      return;
    }
    await sessionPage(main, segs[1], segs[3], segs[5], version === null ? null : Number(version));
  } else main.replaceChildren(errorBox({ kind: 'not_found', message: 'no such page' }));
  if (keepScroll) window.scrollTo(0, y);
}

window.addEventListener('popstate', () => route());
document.addEventListener('DOMContentLoaded', () => {
  $('logout').addEventListener('click', async () => {
    try { await post('/api/logout', {}); } catch (e) { /* the cookie is cleared either way */ }
    route();
  });
  route();
});
