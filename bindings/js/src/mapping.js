// SPDX-License-Identifier: Apache-2.0
// ADK-JS objects <-> the protocol's JSON (docs/protocol.md, "Objects").
//
// Contract: for every ADK-JS Event E that this module accepts,
//   eventFromWire(eventToWire(E)) equals E as JSON (undefined members are absent in
//   both), given that the server stores the wire event unchanged except for the members
//   it fills in (`id` and `timestamp` when missing, `actions.state_delta` and
//   `actions.artifact_delta` when missing, `invocation_id` and `author` as "").
// The rules (README.md, "How events are stored"):
// - known member names (names.js) go to snake_case and back; unknown members are kept
//   under their own name with their value untouched, at any level;
// - an unknown member whose name is the wire name of a known one (`function_call`
//   beside ADK's `functionCall`) could not be told apart on the way back, so it is
//   refused (invalid_argument);
// - OPAQUE members keep their value as given; MAP_OF_RECORDS members keep their keys;
// - `timestamp` is milliseconds in ADK-JS and seconds on the wire; `author` "" (the
//   server's fill-in for a missing author) reads back as absent.
import { AgentStateError, invalid } from './errors.js';
import { FROM_WIRE, KNOWN, MAP_OF_RECORDS, OPAQUE, TO_WIRE } from './names.js';

const TEMP_PREFIX = 'temp:';

function isRecord(v) {
  return typeof v === 'object' && v !== null && !Array.isArray(v);
}

// Plain assignment of `__proto__` would change the prototype instead of adding a member.
function put(obj, key, value) {
  if (key === '__proto__') {
    Object.defineProperty(obj, key, { value, writable: true, enumerable: true, configurable: true });
  } else {
    obj[key] = value;
  }
}

// One lookup per member: how a known name is written (WRITE, by ADK-JS name) and read
// (READ, by wire name). Members absent from both tables are unknown and kept as given.
const RECURSE = 1;
const KEEP = 2; // OPAQUE: the value is data
const RECORDS = 3; // MAP_OF_RECORDS: keys are data, values are records
const WRITE = new Map();
const READ = new Map();
for (const name of KNOWN) {
  const mode = OPAQUE.has(name) ? KEEP : MAP_OF_RECORDS.has(name) ? RECORDS : RECURSE;
  const wire = TO_WIRE.get(name) ?? name;
  WRITE.set(name, { name: wire, mode });
  READ.set(wire, { name, mode });
}

// Thrown for a member whose name is another member's stored name; eventToWire adds
// where it is.
class Ambiguous extends Error {
  constructor(key) {
    super(key);
    this.key = key;
  }
}

function convert(value, mode, recordFn) {
  if (mode === KEEP) return value;
  if (Array.isArray(value)) {
    const out = new Array(value.length);
    for (let i = 0; i < value.length; i++) out[i] = convert(value[i], mode === RECORDS ? RECURSE : mode, recordFn);
    return out;
  }
  if (!isRecord(value)) return value;
  if (mode === RECURSE) return recordFn(value);
  const out = {};
  for (const key of Object.keys(value)) {
    const v = value[key];
    if (v !== undefined) put(out, key, isRecord(v) ? recordFn(v) : v);
  }
  return out;
}

function recordToWire(record) {
  const out = {};
  for (const key of Object.keys(record)) {
    const value = record[key];
    if (value === undefined) continue;
    const known = WRITE.get(key);
    if (known !== undefined) {
      out[known.name] = convert(value, known.mode, recordToWire);
    } else if (FROM_WIRE.has(key)) {
      throw new Ambiguous(key);
    } else {
      put(out, key, value);
    }
  }
  return out;
}

// The read side walks every event of a session read, so it has its own loop: READ_BY
// as a null-prototype object (a property lookup), `for...in` over the parsed record
// (JSON.parse gives plain objects with own members only), no per-member closures.
const READ_BY = Object.create(null);
for (const [wire, known] of READ) READ_BY[wire] = known;

function fromWireValue(value, mode) {
  if (typeof value !== 'object' || value === null) return value;
  if (Array.isArray(value)) {
    const out = new Array(value.length);
    for (let i = 0; i < value.length; i++) out[i] = fromWireValue(value[i], RECURSE);
    return out;
  }
  if (mode === RECURSE) return recordFromWire(value);
  const out = {}; // RECORDS: keys are data
  for (const key in value) {
    const v = value[key];
    put(out, key, isRecord(v) ? recordFromWire(v) : v);
  }
  return out;
}

function recordFromWire(record) {
  const out = {};
  for (const key in record) {
    const value = record[key];
    const known = READ_BY[key];
    if (known !== undefined) out[known.name] = known.mode === KEEP ? value : fromWireValue(value, known.mode);
    else if (key === '__proto__') put(out, key, value);
    else out[key] = value;
  }
  return out;
}

// Where `key` sits in `value` as recordToWire walks it, for the error message.
function pathTo(value, key, path) {
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) {
      const found = pathTo(value[i], key, `${path}[${i}]`);
      if (found) return found;
    }
    return undefined;
  }
  if (!isRecord(value)) return undefined;
  for (const k of Object.keys(value)) {
    if (k === key) return `${path}.${k}`;
    const known = WRITE.get(k);
    if (known === undefined || known.mode === KEEP) continue;
    const found = pathTo(value[k], key, `${path}.${k}`);
    if (found) return found;
  }
  return undefined;
}

/** Milliseconds (ADK-JS) -> epoch seconds (protocol). */
export function msToSeconds(ms) {
  return ms / 1000;
}

/**
 * Epoch seconds -> milliseconds: the inverse of msToSeconds. Every whole number of
 * milliseconds (what ADK-JS writes: Date.now()) and every value with at most three
 * decimals (microseconds) comes back exactly. Dividing by 1000 can map two adjacent
 * doubles to one, so for a finer fraction the result is the value with the shortest
 * decimal form among those that give `seconds`: at most one unit in the last place
 * from the original. Seconds written by other clients give the nearest such value.
 */
export function secondsToMs(seconds) {
  const guess = seconds * 1000;
  const whole = Math.round(guess);
  if (whole / 1000 === seconds) return whole;
  // The exact inverse, if any, is within a few units in the last place of guess.
  const buf = new DataView(new ArrayBuffer(8));
  buf.setFloat64(0, guess);
  const bits = buf.getBigInt64(0);
  let best;
  for (const step of [0n, 1n, -1n, 2n, -2n, 3n, -3n]) {
    buf.setBigInt64(0, bits + step);
    const candidate = buf.getFloat64(0);
    if (candidate / 1000 === seconds
        && (best === undefined || String(candidate).length < String(best).length)) {
      best = candidate;
    }
  }
  return best ?? guess;
}

function checkTimestamp(ms, what) {
  if (typeof ms !== 'number' || !Number.isFinite(ms)) {
    throw invalid(`${what} must be a finite number of milliseconds, not ${String(ms)}`);
  }
  return ms;
}

/**
 * An ADK-JS Event -> the protocol's event object. `temp:` keys are left out of
 * `actions.state_delta` (ADK never stores them). Throws AgentStateError
 * (invalid_argument) for a value that cannot be mapped back exactly.
 */
export function eventToWire(event) {
  if (!isRecord(event)) throw invalid('event must be an object');
  let out;
  try {
    out = recordToWire(event);
  } catch (err) {
    if (!(err instanceof Ambiguous)) throw err;
    const camel = FROM_WIRE.get(err.key);
    throw invalid(`event member ${pathTo(event, err.key, 'event') ?? err.key} is the stored name of ` +
      `ADK-JS's '${camel}'; it could not be read back as given: use '${camel}'`);
  }
  if (event.timestamp !== undefined) {
    out.timestamp = msToSeconds(checkTimestamp(event.timestamp, 'event.timestamp'));
  }
  const actions = out.actions;
  if (actions !== undefined) {
    if (!isRecord(actions)) throw invalid('event.actions must be an object');
    const delta = actions.state_delta;
    if (isRecord(delta)) {
      let temp = false;
      for (const key in delta) {
        if (key.startsWith(TEMP_PREFIX)) { temp = true; break; }
      }
      if (temp) {
        const kept = {};
        for (const key of Object.keys(delta)) {
          if (!key.startsWith(TEMP_PREFIX)) put(kept, key, delta[key]);
        }
        out.actions = { ...actions, state_delta: kept };
      }
    }
  }
  return out;
}

/** The protocol's stored event -> an ADK-JS Event (a plain object, as ADK stores them). */
export function eventFromWire(wire) {
  if (!isRecord(wire)) {
    throw new AgentStateError('internal', `the server returned an event that is not an object: ${JSON.stringify(wire)}`);
  }
  const out = recordFromWire(wire);
  if (typeof wire.timestamp === 'number') out.timestamp = secondsToMs(wire.timestamp);
  if (out.author === '') delete out.author;
  return out;
}

/**
 * The protocol's Session (or SessionMeta) -> an ADK-JS Session. What agentstate adds
 * (`version`, `cursor`, `expiresAt` in milliseconds, `asOf`) is set as non-enumerable
 * members when the server sent it: readable, but outside ADK's Session shape (not in
 * JSON, copies or deep comparisons).
 */
export function sessionFromWire(wire) {
  const session = {
    id: wire.id,
    appName: wire.app_name,
    userId: wire.user_id,
    state: wire.state ?? {},
    events: Array.isArray(wire.events) ? wire.events.map(eventFromWire) : [],
    lastUpdateTime: secondsToMs(wire.last_update_time),
  };
  setSessionMeta(session, {
    version: wire.version,
    cursor: wire.cursor,
    expiresAt: typeof wire.expires_at === 'number' ? secondsToMs(wire.expires_at) : undefined,
    asOf: wire.as_of !== null && typeof wire.as_of === 'object'
      ? { version: wire.as_of.version, sharedState: wire.as_of.shared_state, exact: wire.as_of.exact }
      : undefined,
  });
  return session;
}

/** Sets agentstate's members of a Session (non-enumerable, writable); undefined ones are skipped. */
export function setSessionMeta(session, meta) {
  for (const [key, value] of Object.entries(meta)) {
    if (value === undefined) continue;
    Object.defineProperty(session, key, { value, writable: true, enumerable: false, configurable: true });
  }
}
