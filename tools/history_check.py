#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
# Over 600 lines: one checker; the history's parsing and every per-session check share
# its record model (Attempt, Read, Session, History).
"""Checks a recorded history of appends and reads against agentstate's session guarantees.

Input: JSON Lines, one record per line, in the real-time order the test harness saw the events
(a line's position is its time). Blank lines are skipped. Operation records:

  {"process": P, "type": T, "f": F, "session": [app, user, id], "value": V, "time": NS}

  process  integer or string naming one client thread; at most one operation outstanding
  type     invoke | ok (happened) | fail (did not happen) | info (indeterminate)
  f        append | read | create (create is only checked for invoke/completion pairing)
  time     optional, informative only

  append invoke  {"event": EVENT, "expected_version": N}   (expected_version optional)
  append ok      {"version": N, "event": STORED_EVENT}
  append fail    {"error": KIND}
  append info    {"error": KIND} or {}
  read invoke    {}
  read ok        {"version": N, "events": [STORED_EVENT, ...]}   (the whole session log)

EVENT always has a string "id"; a retry of an append resends the same id and content.
After the run, one record per session, without a process:

  {"type": "final", "session": [app, user, id], "value": {"version": N, "events": [...]}}

An invoke left without a completion at the end of the history counts as indeterminate.

Content rule: a stored event matches a sent one when every top-level key of the sent event is in
the stored one with an equal JSON value (the server may add keys such as "timestamp"). Numbers
compare by value (1 equals 1.0); true and false equal no number. Two stored events (a read's and
the final log's) must be equal as whole JSON values.

An attempt is one append invoke. Attempts with the same event id are one event: the first
attempt that reaches the server appends it and later ones get it back (idempotence). An event
in the final log is explained by an attempt with its id and matching content whose outcome is
ok, info or none; an attempt that got fail is one that did not happen.

Rules (each violation names its rule, session, event id or version, and line numbers):
  lost             an ok append is in the final log at its acknowledged version, with the
                   content sent; the ok's own event matches the content sent
  phantom          every event of the final log was attempted with that id and content; no
                   read shows an event before any attempt with its id was invoked
  failed-applied   an event whose every attempt with matching content got fail is not in the
                   final log, nor in a read completed before any other attempt was invoked
  duplicate        no event id twice in the final log or in a read
  gap              a log's version equals its number of events (versions 1..N, no gap)
  real-time-order  an event's version is above every version acknowledged to an append, and
                   every version a read returned, before the event's first attempt that did
                   not fail was invoked
  read-after-ack   a read shows every append acknowledged before it was invoked, at its
                   version with the content sent, and at least as many events as every read
                   completed before it was invoked
  read-prefix      a read's events equal the final log's at each version
  compare-and-set  an ok append with expected_version k has version k+1 (unless the id was
                   already appended by an earlier attempt); an event whose only matching
                   attempts failed with version_conflict is not in the final log; no version is
                   acknowledged to two different event ids

Exit status: 0 valid (a one-line summary JSON on stdout), 1 violations (the first 50 on
stdout, then the count), 2 malformed input or usage (a message naming the line on stderr).
"""

import argparse
import gc
import json
import sys

MAX_LISTED = 50
JSON_SPACE = " \t\r\n"
TYPES = ("invoke", "ok", "fail", "info")
FUNCTIONS = ("append", "read", "create")


class Malformed(Exception):
    """The history cannot be checked: `line` (1-based, 0 for none) says where."""

    def __init__(self, line, message):
        super().__init__(message)
        self.line = line
        self.message = message


def same(a, b):
    """JSON equality: numbers by value, booleans distinct from numbers. Iterative, so that
    any value the parser accepted can be compared."""
    stack = [(a, b)]
    while stack:
        x, y = stack.pop()
        tx = type(x)
        ty = type(y)
        if tx is not ty:
            if tx in (int, float) and ty in (int, float) and x == y:
                continue
            return False
        if tx is dict:
            if len(x) != len(y):
                return False
            for k, v in x.items():
                if k not in y:
                    return False
                stack.append((v, y[k]))
        elif tx is list:
            if len(x) != len(y):
                return False
            stack.extend(zip(x, y))
        elif x != y:
            return False
    return True


def equal(a, b, strict):
    """same(a, b). Without `strict` (neither side can hold true or false), Python's own ==,
    which then agrees with same() and runs at C speed."""
    return same(a, b) if strict else a == b


def matches(sent, stored, strict):
    """The content rule: every top-level key of the sent event is equal in the stored one."""
    for k, v in sent.items():
        if k not in stored:
            return False
        w = stored[k]
        if not (same(v, w) if strict else v == w):
            return False
    return True


def _reject_constant(name):
    raise ValueError(f"{name} is not JSON")


def _is_int(v):
    return type(v) is int


def _describe_session(session):
    return json.dumps(list(session), ensure_ascii=False)


class Attempt:
    """One append invoke and its outcome."""

    __slots__ = (
        "invoke_line", "event", "bools", "expected", "floor", "floor_line",
        "outcome", "outcome_line", "version", "stored", "stored_bools", "error",
    )

    def __init__(self, invoke_line, event, bools, expected, floor, floor_line):
        self.invoke_line = invoke_line
        self.event = event
        self.bools = bools  # whether the invoke's line may hold true or false
        self.expected = expected
        # The highest version an ok append or read of the session completed with before this
        # invoke, and the line that completed it (0: none).
        self.floor = floor
        self.floor_line = floor_line
        self.outcome = None  # None: no completion in the history (indeterminate)
        self.outcome_line = 0
        self.version = 0
        self.stored = None
        self.stored_bools = False
        self.error = None


class Read:
    """One read that got ok."""

    __slots__ = ("invoke_line", "ok_line", "acks_before", "read_floor", "read_floor_line",
                 "version", "events", "bools")

    def __init__(self, invoke_line, acks_before, read_floor, read_floor_line):
        self.invoke_line = invoke_line
        self.ok_line = 0
        self.acks_before = acks_before
        self.read_floor = read_floor
        self.read_floor_line = read_floor_line
        self.version = 0
        self.events = None
        self.bools = False


class Session:
    __slots__ = ("key", "first_line", "attempts", "acks", "reads", "floor", "floor_line",
                 "read_floor", "read_floor_line", "final", "final_line", "final_bools", "known")

    def __init__(self, key, first_line):
        self.key = key
        self.first_line = first_line
        self.attempts = {}  # event id -> [Attempt] in invoke order
        self.acks = []  # ok Attempts in the order of their ok lines
        self.reads = []  # ok Reads in the order of their ok lines
        self.floor = 0  # highest version of any completed ok append or read so far
        self.floor_line = 0
        self.read_floor = 0  # highest number of events of any completed read so far
        self.read_floor_line = 0
        self.final = None
        self.final_line = 0
        self.final_bools = False
        # event id -> (a stored event seen for it, whether its line may hold true or false):
        # reads' and the final log's events equal to it are replaced by it, so that a history
        # of many reads keeps one copy of each event and compares most of them by identity.
        self.known = {}

    def intern(self, events, bools):
        known = self.known
        for i, e in enumerate(events):
            eid = e["id"]
            k = known.get(eid)
            if k is None:
                known[eid] = (e, bools)
            elif equal(k[0], e, bools or k[1]):
                events[i] = k[0]


class Pending:
    __slots__ = ("line", "f", "session", "op")

    def __init__(self, line, f, session, op):
        self.line = line
        self.f = f
        self.session = session
        self.op = op


def _session_key(record, line):
    s = record.get("session")
    if not (type(s) is list and len(s) == 3 and type(s[0]) is str and type(s[1]) is str
            and type(s[2]) is str):
        raise Malformed(line, "\"session\" must be [app, user, id], three strings")
    return (s[0], s[1], s[2])


def _stored_events(value, line, what):
    if not isinstance(value, dict):
        raise Malformed(line, f"{what} value must be an object")
    version = value.get("version")
    events = value.get("events")
    if not _is_int(version) or version < 0:
        raise Malformed(line, f"{what} value needs \"version\", an integer >= 0")
    if not isinstance(events, list):
        raise Malformed(line, f"{what} value needs \"events\", an array")
    for i, e in enumerate(events):
        if not isinstance(e, dict) or type(e.get("id")) is not str:
            raise Malformed(line, f"{what} events[{i}] is not an object with a string \"id\"")
    return version, events


class History:
    def __init__(self):
        self.sessions = {}
        self.pending = {}  # process -> Pending
        self.operations = 0
        self.acknowledged = 0
        self.indeterminate = 0

    def session(self, key, line):
        s = self.sessions.get(key)
        if s is None:
            s = Session(key, line)
            self.sessions[key] = s
        return s

    def add(self, record, line, bools):
        if not isinstance(record, dict):
            raise Malformed(line, "a record must be a JSON object")
        t = record.get("type")
        if t == "final":
            self._final(record, line, bools)
            return
        if t not in TYPES:
            raise Malformed(line, f"unknown \"type\" {json.dumps(t)} "
                                  "(expected invoke, ok, fail, info or final)")
        f = record.get("f")
        if f not in FUNCTIONS:
            raise Malformed(line, f"unknown \"f\" {json.dumps(f)} (expected append, read or create)")
        process = record.get("process")
        if type(process) not in (int, str):
            raise Malformed(line, "\"process\" must be an integer or a string")
        key = _session_key(record, line)
        value = record.get("value", {})
        if not isinstance(value, dict):
            raise Malformed(line, "\"value\" must be an object")
        s = self.session(key, line)
        if s.final is not None:
            raise Malformed(line, f"operation on session {_describe_session(key)} after its "
                                  f"final record (line {s.final_line})")
        if t == "invoke":
            self._invoke(s, process, f, value, line, bools)
        else:
            self._complete(s, process, t, f, value, line, bools)

    def _invoke(self, s, process, f, value, line, bools):
        p = self.pending.get(process)
        if p is not None:
            raise Malformed(line, f"process {json.dumps(process)} invokes while its operation "
                                  f"invoked at line {p.line} is outstanding")
        self.operations += 1
        op = None
        if f == "append":
            event = value.get("event")
            if not isinstance(event, dict) or type(event.get("id")) is not str:
                raise Malformed(line, "append invoke needs \"event\", an object with a string \"id\"")
            expected = value.get("expected_version")
            if expected is not None and (not _is_int(expected) or expected < 0):
                raise Malformed(line, "\"expected_version\" must be an integer >= 0")
            op = Attempt(line, event, bools, expected, s.floor, s.floor_line)
            s.attempts.setdefault(event["id"], []).append(op)
        elif f == "read":
            op = Read(line, len(s.acks), s.read_floor, s.read_floor_line)
        self.pending[process] = Pending(line, f, s, op)

    def _complete(self, s, process, t, f, value, line, bools):
        p = self.pending.pop(process, None)
        if p is None:
            raise Malformed(line, f"{t} of process {json.dumps(process)} without an invoke")
        if p.f != f or p.session is not s:
            raise Malformed(line, f"{t} ({f} on {_describe_session(s.key)}) completes the "
                                  f"invoke at line {p.line} ({p.f} on "
                                  f"{_describe_session(p.session.key)})")
        op = p.op
        if f == "append":
            op.outcome = t
            op.outcome_line = line
            if t == "ok":
                version = value.get("version")
                stored = value.get("event")
                if not _is_int(version) or version < 1:
                    raise Malformed(line, "append ok needs \"version\", an integer >= 1")
                if not isinstance(stored, dict) or type(stored.get("id")) is not str:
                    raise Malformed(line, "append ok needs \"event\", an object with a string \"id\"")
                op.version = version
                op.stored = stored
                op.stored_bools = bools
                if stored["id"] not in s.known:
                    s.known[stored["id"]] = (stored, bools)
                s.acks.append(op)
                self.acknowledged += 1
                if version > s.floor:
                    s.floor = version
                    s.floor_line = line
            else:
                error = value.get("error")
                if t == "fail" and type(error) is not str:
                    raise Malformed(line, "append fail needs \"error\", a string")
                if error is not None and type(error) is not str:
                    raise Malformed(line, "\"error\" must be a string")
                op.error = error
                if t == "info":
                    self.indeterminate += 1
        elif f == "read" and t == "ok":
            version, events = _stored_events(value, line, "read ok")
            op.ok_line = line
            op.version = version
            s.intern(events, bools)
            op.events = events
            op.bools = bools
            s.reads.append(op)
            n = len(events)
            if n > s.floor:
                s.floor = n
                s.floor_line = line
            if n > s.read_floor:
                s.read_floor = n
                s.read_floor_line = line

    def _final(self, record, line, bools):
        if "process" in record:
            raise Malformed(line, "a final record has no \"process\"")
        key = _session_key(record, line)
        s = self.session(key, line)
        if s.final is not None:
            raise Malformed(line, f"second final record for session {_describe_session(key)} "
                                  f"(the first is at line {s.final_line})")
        version, events = _stored_events(record.get("value"), line, "final")
        s.intern(events, bools)
        s.final = (version, events)
        s.final_line = line
        s.final_bools = bools

    def finish(self):
        for p in self.pending.values():
            if p.f == "append":
                self.indeterminate += 1
        self.pending.clear()
        for s in self.sessions.values():
            if s.final is None:
                raise Malformed(0, f"session {_describe_session(s.key)} (first seen at line "
                                   f"{s.first_line}) has no final record")


def parse(stream):
    """Reads a history from a binary stream; raises Malformed."""
    h = History()
    decode = json.JSONDecoder(parse_constant=_reject_constant).raw_decode
    line = 0
    for raw in stream:
        line += 1
        try:
            text = raw.decode("utf-8").strip(JSON_SPACE)
        except UnicodeDecodeError as e:
            raise Malformed(line, f"not UTF-8 ({e.reason} at byte {e.start})") from None
        if not text:
            continue
        try:
            record, end = decode(text)
        except ValueError as e:
            raise Malformed(line, f"not JSON: {e}") from None
        except RecursionError:
            raise Malformed(line, "JSON nested too deeply") from None
        if end != len(text):
            raise Malformed(line, f"not JSON: extra data at column {end + 1}")
        # Without the words true or false anywhere in the line, no value parsed from it holds
        # a boolean, and == is exact JSON equality.
        h.add(record, line, b"true" in raw or b"false" in raw)
    h.finish()
    return h


class Checker:
    def __init__(self, history):
        self.h = history
        self.violations = []

    def report(self, rule, s, event_id, version, lines, message):
        lines = sorted({n for n in lines if n})
        self.violations.append({
            "rule": rule,
            "session": list(s.key),
            "id": event_id,
            "version": version,
            "lines": lines,
            "message": message,
        })

    def run(self):
        for s in self.h.sessions.values():
            self.check_session(s)
        self.violations.sort(key=lambda v: (v["lines"][0] if v["lines"] else 0))
        return self.violations

    def check_log(self, s, version, events, where, lines):
        """duplicate and gap for one log (the final one or a read's)."""
        if version != len(events):
            self.report("gap", s, None, version, lines,
                        f"{where} says version {version} but holds {len(events)} events")
        seen = {}
        for i, e in enumerate(events):
            eid = e["id"]
            if eid in seen:
                self.report("duplicate", s, eid, i + 1, lines,
                            f"{where} holds event {json.dumps(eid)} at versions {seen[eid]} and {i + 1}")
            else:
                seen[eid] = i + 1
        return seen

    def check_session(self, s):
        final_version, final = s.final
        fl = s.final_line
        fb = s.final_bools
        position = self.check_log(s, final_version, final, "the final log", [fl])

        # lost (and the ok's own event), compare-and-set on versions.
        by_version = {}
        for a in s.acks:
            eid = a.event["id"]
            ok_matches = a.stored["id"] == eid and matches(a.event, a.stored,
                                                           a.bools or a.stored_bools)
            if not ok_matches:
                self.report("lost", s, eid, a.version, [a.invoke_line, a.outcome_line],
                            f"the ok of append {json.dumps(eid)} returned an event that differs "
                            f"from the one sent")
            v = a.version
            if v > len(final):
                self.report("lost", s, eid, v, [a.outcome_line, fl],
                            f"append {json.dumps(eid)} acknowledged at version {v}; the final "
                            f"log ends at version {len(final)}")
            elif final[v - 1]["id"] != eid:
                where = position.get(eid)
                also = f" (it is at version {where})" if where else " (it is absent)"
                self.report("lost", s, eid, v, [a.outcome_line, fl],
                            f"append {json.dumps(eid)} acknowledged at version {v}; the final "
                            f"log has {json.dumps(final[v - 1]['id'])} there{also}")
            elif not (ok_matches if final[v - 1] is a.stored
                      else matches(a.event, final[v - 1], a.bools or fb)):
                self.report("lost", s, eid, v, [a.invoke_line, fl],
                            f"append {json.dumps(eid)} acknowledged at version {v}; the final "
                            f"log's event there differs from the one sent")
            other = by_version.get(v)
            if other is None:
                by_version[v] = a
            elif other.event["id"] != eid:
                self.report("compare-and-set", s, eid, v, [other.outcome_line, a.outcome_line],
                            f"version {v} acknowledged to both {json.dumps(other.event['id'])} "
                            f"and {json.dumps(eid)}")
            if a.expected is not None and v != a.expected + 1 and not self.deduplicated(s, a):
                self.report("compare-and-set", s, eid, v, [a.invoke_line, a.outcome_line],
                            f"append {json.dumps(eid)} with expected_version {a.expected} "
                            f"acknowledged at version {v}, not {a.expected + 1}")

        # phantom, failed-applied, compare-and-set on conflicts.
        for i, e in enumerate(final):
            eid = e["id"]
            v = i + 1
            if position[eid] != v:
                continue  # a duplicate, reported above
            attempts = s.attempts.get(eid)
            if not attempts:
                self.report("phantom", s, eid, v, [fl],
                            f"the final log holds {json.dumps(eid)} at version {v}, never attempted")
                continue
            same_content = [a for a in attempts if matches(a.event, e, a.bools or fb)]
            if not same_content:
                self.report("phantom", s, eid, v, [fl] + [a.invoke_line for a in attempts],
                            f"the final log holds {json.dumps(eid)} at version {v} with content "
                            f"that differs from every attempt with that id")
                continue
            if all(a.outcome == "fail" for a in same_content):
                conflicts = [a for a in same_content
                             if a.error == "version_conflict" and a.expected is not None]
                rule = "compare-and-set" if conflicts else "failed-applied"
                kinds = ", ".join(sorted({a.error for a in same_content}))
                self.report(rule, s, eid, v, [fl] + [a.outcome_line for a in same_content],
                            f"the final log holds {json.dumps(eid)} at version {v}, but every "
                            f"attempt that sent it failed ({kinds})")

        # real-time order, from each event's first attempt that did not fail.
        first_live = {}  # event id -> invoke line of that attempt
        for eid, attempts in s.attempts.items():
            first = None
            acked = None
            for a in attempts:
                if first is None and a.outcome != "fail":
                    first = a
                if acked is None and a.outcome == "ok":
                    acked = a
            if first is None:
                continue
            first_live[eid] = first.invoke_line
            if acked is not None:
                v = acked.version
            elif eid in position:
                v = position[eid]
            else:
                continue
            if v <= first.floor:
                self.report("real-time-order", s, eid, v, [first.floor_line, first.invoke_line],
                            f"event {json.dumps(eid)} is at version {v}, but version "
                            f"{first.floor} was completed (line {first.floor_line}) before its "
                            f"first attempt was invoked (line {first.invoke_line})")

        for r in s.reads:
            self.check_read(s, r, final, fl, fb, first_live)

    def deduplicated(self, s, a):
        """Whether an earlier attempt with a's id may have appended it at a's version."""
        for b in s.attempts[a.event["id"]]:
            if b is a:
                return False
            if b.outcome != "fail" and (b.expected is None or b.expected + 1 == a.version):
                return True
        return False

    def check_read(self, s, r, final, fl, fb, first_live):
        lines = [r.invoke_line, r.ok_line]
        events = r.events
        n = len(events)
        self.check_log(s, r.version, events, f"the read at line {r.ok_line}", [r.ok_line])

        # read-after-ack: acknowledged appends, then earlier reads.
        acks = s.acks
        for j in range(r.acks_before):
            a = acks[j]
            eid = a.event["id"]
            v = a.version
            if v <= n:
                e = events[v - 1]
                # The ok's own event was checked against the one sent above.
                if e is a.stored or (e["id"] == eid and matches(a.event, e, a.bools or r.bools)):
                    continue
            self.report("read-after-ack", s, eid, v, lines + [a.outcome_line],
                        f"the read invoked at line {r.invoke_line} does not show "
                        f"{json.dumps(eid)} at version {v}, acknowledged at line "
                        f"{a.outcome_line}")
            break
        if n < r.read_floor:
            self.report("read-after-ack", s, None, n, lines + [r.read_floor_line],
                        f"the read invoked at line {r.invoke_line} shows {n} events; "
                        f"the read completed at line {r.read_floor_line} showed {r.read_floor}")

        # read-prefix
        if n > len(final):
            self.report("read-prefix", s, None, n, lines + [fl],
                        f"the read at line {r.ok_line} shows {n} events; the final "
                        f"log has {len(final)}")
        strict = r.bools or fb
        for i in range(min(n, len(final))):
            x = events[i]
            y = final[i]
            if x is not y and not equal(x, y, strict):
                self.report("read-prefix", s, x["id"], i + 1, lines + [fl],
                            f"the read at line {r.ok_line} shows {json.dumps(x['id'])} "
                            f"at version {i + 1}; the final log has a different event there "
                            f"({json.dumps(y['id'])})")
                break

        # phantom / failed-applied: shown before any attempt that could have appended it.
        ok_line = r.ok_line
        for i, e in enumerate(events):
            eid = e["id"]
            first = first_live.get(eid)
            if first is not None and first < ok_line:
                continue
            attempts = s.attempts.get(eid)
            if not attempts:
                self.report("phantom", s, eid, i + 1, lines,
                            f"the read at line {ok_line} shows {json.dumps(eid)}, never attempted")
                continue
            earlier = [a for a in attempts if a.invoke_line < ok_line]
            if earlier:
                self.report("failed-applied", s, eid, i + 1,
                            lines + [a.outcome_line for a in earlier],
                            f"the read at line {ok_line} shows {json.dumps(eid)}, whose only "
                            f"attempts invoked before it failed")
            else:
                self.report("phantom", s, eid, i + 1, lines + [attempts[0].invoke_line],
                            f"the read at line {ok_line} shows {json.dumps(eid)} before any "
                            f"attempt with that id was invoked (line {attempts[0].invoke_line})")


def check(stream):
    """Parses and checks a history; returns the result object. Raises Malformed."""
    # The history's objects hold no reference cycles: the cycle collector's passes over a heap
    # of millions of them would only cost time.
    enabled = gc.isenabled()
    gc.disable()
    try:
        h = parse(stream)
        violations = Checker(h).run()
    finally:
        if enabled:
            gc.enable()
    return {
        "ok": not violations,
        "operations": h.operations,
        "sessions": len(h.sessions),
        "acknowledged": h.acknowledged,
        "indeterminate": h.indeterminate,
        "violation_count": len(violations),
        "violations": violations,
    }


def _format(v):
    where = ", ".join(str(n) for n in v["lines"]) or "-"
    return f"line {where}: {v['rule']}: session {_describe_session(v['session'])}: {v['message']}"


def main(argv=None):
    ap = argparse.ArgumentParser(
        prog="history_check.py",
        description=__doc__.split("\n\n", 1)[0],
        epilog=__doc__.split("\n\n", 1)[1],
        formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("history", help="the history file (JSON Lines), or - for standard input")
    ap.add_argument("--json", action="store_true",
                    help="print the whole result (every violation) as one JSON object")
    args = ap.parse_args(argv)
    try:
        if args.history == "-":
            result = check(sys.stdin.buffer)
        else:
            try:
                stream = open(args.history, "rb")
            except OSError as e:
                print(f"history_check: cannot open {args.history}: {e.strerror}", file=sys.stderr)
                return 2
            with stream:
                result = check(stream)
    except Malformed as e:
        where = f"line {e.line}: " if e.line else ""
        print(f"history_check: malformed history: {where}{e.message}", file=sys.stderr)
        if args.json:
            print(json.dumps({"ok": False, "malformed": {"line": e.line, "message": e.message}},
                             separators=(",", ":"), ensure_ascii=False))
        return 2
    if args.json:
        print(json.dumps(result, separators=(",", ":"), ensure_ascii=False))
    elif result["ok"]:
        summary = {k: result[k] for k in ("ok", "operations", "sessions", "acknowledged",
                                          "indeterminate")}
        print(json.dumps(summary, separators=(",", ":")))
    else:
        violations = result["violations"]
        for v in violations[:MAX_LISTED]:
            print(_format(v))
        if len(violations) > MAX_LISTED:
            print(f"... and {len(violations) - MAX_LISTED} more")
        print(f"{len(violations)} violations in {result['operations']} operations")
    return 0 if result["ok"] else 1


if __name__ == "__main__":
    sys.exit(main())
