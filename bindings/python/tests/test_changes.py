# SPDX-License-Identifier: Apache-2.0
"""The change feed through the client: read_changes paging and resuming, watches (routing,
commit order, unwatch and resume_from, overflow, the blocking form), cursor_expired, and
read-then-watch from a read's cursor."""

from __future__ import annotations

import asyncio
import threading

import pytest

import agentstate_client as ac
from agentstate_client import AsyncClient, Client
from conftest import run

APP = "feed"
SESSION = {"app_name": APP, "user_id": "u", "session_id": "s"}  # the tests' one session


def described(changes):
    """What identifies a change, in order."""
    return [(c["kind"], c["session_id"], c["version"], c["cursor"]) for c in changes]


async def read_all(c, scope, *, from_=None, limit=None, **names):
    """Every change of ``scope`` after ``from_``, page by page, and the last page's cursor."""
    out = []
    while True:
        page = await c.read_changes(scope, from_=from_, limit=limit, **names)
        out += page["changes"]
        from_ = page["cursor"]
        if page["at_head"]:
            return out, from_


async def take(w, n):
    """Batches of ``w`` until ``n`` changes have come (an empty batch is progress)."""
    got = []
    if n == 0:
        return got
    async for batch in w:
        assert batch["cursor"] == w.cursor
        got += batch["changes"]
        if len(got) >= n:
            return got
    raise AssertionError(f"the watch ended ({w.reason}) after {len(got)} of {n} changes")


def spawn_noting(store, binary, into):
    """A client on a spawned ``serve`` on ``store`` whose notifications that no watch took
    are appended to ``into`` as ``(method, params)``."""
    return AsyncClient.spawn(store, binary=binary,
                             on_notification=lambda method, params: into.append((method, params)))


async def wait_for(condition):
    """Bounded wait: polls ``condition()`` every 10 ms, at most 1000 times; returns its last
    value (the caller asserts it)."""
    for _ in range(1000):
        if condition():
            break
        await asyncio.sleep(0.01)  # bounded poll of what the serve child sends
    return condition()


def test_read_changes_pages_and_resumes_without_gap_or_duplicate(agentstate_bin, store):
    async def body():
        async with await AsyncClient.spawn(store, binary=agentstate_bin) as c:
            await c.create_session(APP, "u", "s", {"user:lang": "en"})
            cursors = []
            for i in range(25):
                r = await c.append_event(APP, "u", "s", {"id": f"e{i}", "author": "a",
                                                         "actions": {"state_delta": {"n": i}}})
                cursors.append(r["cursor"])
            pages, from_ = [], None
            while True:
                page = await c.read_changes("session", from_=from_, limit=7, **SESSION)
                assert len(page["changes"]) <= 7
                pages.append(page["changes"])
                from_ = page["cursor"]
                if page["at_head"]:
                    break
            assert len(pages) >= 4
            changes = [ch for p in pages for ch in p]
            assert [ch["kind"] for ch in changes] == ["create"] + ["append"] * 25
            assert [ch["version"] for ch in changes] == list(range(26))
            assert changes[0]["state_delta"] == {"user:lang": "en"}
            assert [ch["state_delta"] for ch in changes[1:]] == [{"n": i} for i in range(25)]
            assert len({ch["cursor"] for ch in changes}) == 26
            # An append's cursor resumes right after it.
            after_ten, _ = await read_all(c, "session", from_=cursors[9], **SESSION)
            assert described(after_ten) == described(changes[11:])
            # At the head: nothing, then exactly what was appended since.
            assert (await c.read_changes("session", from_=from_, **SESSION))["changes"] == []
            for i in range(25, 30):
                await c.append_event(APP, "u", "s", {"author": "a",
                                                     "actions": {"state_delta": {"n": i}}})
            more, _ = await read_all(c, "session", from_=from_, **SESSION)
            assert [ch["version"] for ch in more] == list(range(26, 31))
            # The user scope keeps only user: keys unless sessions are included.
            user_only, _ = await read_all(c, "user", app_name=APP, user_id="u")
            assert [ch["state_delta"] for ch in user_only] == [{"user:lang": "en"}]
            with_sessions, _ = await read_all(c, "user", app_name=APP, user_id="u",
                                              include_sessions=True, limit=10)
            assert len(with_sessions) == 31
            assert all("event" in ch for ch in with_sessions if ch["kind"] == "append")
            with pytest.raises(ac.InvalidArgumentError):
                await c.read_changes("session", app_name=APP)
    run(body())


def test_watch_gets_another_connections_appends_in_commit_order(tcp_server):
    async def body():
        async with await AsyncClient.connect(tcp_server.address) as watcher, \
                await AsyncClient.connect(tcp_server.address) as writer:
            async with watcher.watch("app", app_name=APP, include_sessions=True) as w:
                start = w.cursor
                assert w.reason is None and w.resume_from is None
                await writer.create_session(APP, "u1", "a")
                await writer.create_session(APP, "u2", "b")
                # Interleaved appends to two sessions, all in flight at once.
                await asyncio.gather(*[
                    writer.append_event(APP, "u1" if i % 2 else "u2", "a" if i % 2 else "b",
                                        {"id": f"e{i}", "author": "w",
                                         "actions": {"state_delta": {"i": i}}})
                    for i in range(60)])
                got = await take(w, 62)
                # Exactly the log's order and content, nothing else.
                logged, _ = await read_all(writer, "app", app_name=APP, include_sessions=True,
                                           from_=start)
                assert described(got) == described(logged)
                assert got == logged
                for sid in ("a", "b"):
                    versions = [ch["version"] for ch in got if ch["session_id"] == sid]
                    assert versions == list(range(31))
            assert w.reason == "cancelled"
            assert w.resume_from is not None
            rest, _ = await read_all(writer, "app", app_name=APP, from_=w.resume_from)
            assert rest == []
    run(body())


def test_unwatch_resume_from_continues_exactly(agentstate_bin, store):
    async def body():
        async with await AsyncClient.spawn(store, binary=agentstate_bin) as c:
            await c.create_session(APP, "u", "s")
            begin = (await c.read_changes("session", **SESSION))["changes"][0]["cursor"]
            w = await c.watch("session", **SESSION)
            for i in range(40):
                await c.append_event(APP, "u", "s", {"author": "a",
                                                     "actions": {"state_delta": {"n": i}}})
            seen = await take(w, 10)
            resume = await w.aclose()
            assert resume == w.resume_from and w.reason == "cancelled"
            assert await w.aclose() == resume  # again: the same answer
            with pytest.raises(StopAsyncIteration):
                await w.__anext__()
            for i in range(40, 45):
                await c.append_event(APP, "u", "s", {"author": "a",
                                                     "actions": {"state_delta": {"n": i}}})
            rest, _ = await read_all(c, "session", from_=resume, **SESSION)
            # What the watch yielded and what follows its resume_from: every append once.
            assert [ch["version"] for ch in seen + rest] == list(range(1, 46))
            everything, _ = await read_all(c, "session", from_=begin, **SESSION)
            assert described(seen + rest) == described(everything)
            # The watch is gone on the server.
            with pytest.raises(ac.NotFoundError):
                await c.unwatch(w.watch_id)
    run(body())


def test_watch_from_an_old_cursor_loses_nothing_sent_right_after_its_answer(agentstate_bin, store):
    # The history follows the watch answer at once, usually in the same read: the watch
    # must be routed before the reader takes the next line.
    async def body():
        async with await AsyncClient.spawn(store, binary=agentstate_bin) as c:
            start = (await c.read_changes("all"))["cursor"]
            await c.create_session(APP, "u", "s")
            await asyncio.gather(*[c.append_event(APP, "u", "s", {"author": "a"})
                                   for _ in range(300)])
            for _ in range(3):
                async with c.watch("all", from_=start) as w:
                    got = await take(w, 301)
                    assert [ch["version"] for ch in got] == list(range(301))
    run(body())


def test_a_watch_whose_caller_was_cancelled_is_unwatched(agentstate_bin, store):
    async def body():
        stray = []
        async with await spawn_noting(store, agentstate_bin, stray) as c:
            await c.create_session(APP, "u", "s")
            # Cancelled before the answer, and (by the later rounds' timing) after it was
            # read but before the caller took it: either way nobody holds the watch.
            async def start():
                return await c.watch("all")

            for delay in range(1, 6):
                starting = asyncio.ensure_future(start())
                for _ in range(delay):
                    await asyncio.sleep(0)  # input: turns of the event loop before the cancel
                starting.cancel()
                try:
                    w = await starting
                except asyncio.CancelledError:
                    pass
                else:
                    await w.aclose()  # the caller got it in time: its own to end
            await c.ping()  # every watch answer has been read
            assert await wait_for(lambda: not c._watches)  # their unwatch round trips
            await c.append_event(APP, "u", "s", {"author": "a"})
            await c.flush()
            assert stray == []
    run(body())


def test_cursor_expired_is_typed_with_oldest(tcp_server_factory):
    server = tcp_server_factory("--change-retention", "10")

    async def body():
        async with await AsyncClient.connect(server.address) as c:
            start = (await c.read_changes("all"))["cursor"]
            await c.create_session(APP, "u", "s")
            for i in range(60):
                await c.append_event(APP, "u", "s", {"author": "a",
                                                     "actions": {"state_delta": {"k": i}}})
            with pytest.raises(ac.CursorExpiredError) as info:
                await c.read_changes("all", from_=start)
            e = info.value
            assert e.kind == "cursor_expired" and e.code == ac.ENGINE_ERROR
            assert isinstance(e.oldest, str) and e.oldest == e.data["oldest"]
            with pytest.raises(ac.CursorExpiredError):
                await c.watch("all", from_=start)
            kept, _ = await read_all(c, "all", from_=e.oldest)
            assert 10 <= len(kept) <= 30
            assert kept[-1]["state_delta"] == {"k": 59}
            versions = [ch["version"] for ch in kept]
            assert versions == list(range(versions[0], 61))
            assert not c._watches  # the refused watch left nothing behind
    run(body())


def test_a_consumer_that_falls_behind_gets_overflow_with_an_exact_resume_point(agentstate_bin, store):
    async def body():
        async with await AsyncClient.spawn(store, binary=agentstate_bin) as c:
            await c.create_session(APP, "u", "s")
            # One batch fits; a second one waiting with it does not.
            async with c.watch("session", max_buffer_bytes=1, **SESSION) as w:
                for i in range(20):
                    await c.append_event(APP, "u", "s", {"author": "a",
                                                         "actions": {"state_delta": {"n": i}}})
                    # The first change's batch is queued before the others are written, so
                    # they come in a second batch (a loaded server could else send all 20 in
                    # one, which fits).
                    if i == 0:
                        assert await wait_for(lambda: w._queued_bytes > 0)
                # Bounded wait for the overflow (a condition, polled): the reader stops
                # taking this watch's batches once a second one would not fit.
                assert await wait_for(lambda: w._stopped)
                seen = []
                with pytest.raises(ac.WatchOverflowError) as info:
                    async for batch in w:
                        seen += batch["changes"]
                assert seen  # the batch held when it overflowed
                assert w.reason == "overflow"
                assert info.value.resume_from == w.resume_from == w.cursor
            rest, _ = await read_all(c, "session", from_=w.resume_from, **SESSION)
            assert [ch["version"] for ch in seen + rest] == list(range(1, 21))
            # The client unwatched it on the server.
            with pytest.raises(ac.NotFoundError):
                await c.unwatch(w.watch_id)
            assert not c._watches
    run(body())


def test_blocking_watch_iterates_and_resumes(agentstate_bin, store):
    with Client.spawn(store, binary=agentstate_bin) as c:
        c.create_session(APP, "u", "s")
        with c.watch("session", **SESSION) as w:
            # The timeout path itself: nothing is appended yet, so no batch can come
            # whatever the wait; 0.05 s is how long next_batch waits, not a race.
            with pytest.raises(TimeoutError):
                w.next_batch(timeout=0.05)

            def write():
                for i in range(30):
                    c.append_event(APP, "u", "s", {"author": "t",
                                                   "actions": {"state_delta": {"n": i}}})
            t = threading.Thread(target=write)
            t.start()
            got = []
            for batch in w:
                got += batch["changes"]
                assert w.cursor == batch["cursor"]
                if len(got) >= 30:
                    break
            t.join()
            assert [ch["version"] for ch in got] == list(range(1, 31))
        assert w.reason == "cancelled"
        page = c.read_changes("session", from_=w.resume_from, **SESSION)
        assert page["changes"] == [] and page["at_head"]
        assert w.next_batch() is None
        assert w.close() == w.resume_from


def test_with_cursor_states_and_get_session_cursor_read_then_watch(tcp_server):
    async def body():
        async with await AsyncClient.connect(tcp_server.address) as reader, \
                await AsyncClient.connect(tcp_server.address) as writer:
            await writer.create_session(APP, "u", "s", {"user:n": 0, "app:n": 0})
            if "cursor" not in await reader.get_session(APP, "u", "s"):
                pytest.skip("this agentstate binary answers get_session without a cursor "
                            "(a protocol before Session.cursor and with_cursor)")
            n = 200
            first_stored = asyncio.Event()

            async def appender():
                for i in range(1, n + 1):
                    await writer.append_event(APP, "u", "s", {"author": "w", "actions": {
                        "state_delta": {"user:n": i, "app:n": i, "x": i}}})
                    first_stored.set()
            writing = asyncio.create_task(appender())
            # Read while appends commit (once the first is acknowledged, so the read shows
            # it), then watch from the read's cursor: together they see every version
            # exactly once.
            await first_stored.wait()
            seen = await reader.get_session(APP, "u", "s")
            assert seen["version"] > 0
            async with reader.watch("session", app_name=APP, user_id="u", session_id="s",
                                    from_=seen["cursor"]) as w:
                await writing
                got = await take(w, n - seen["version"])
            assert [ch["version"] for ch in got] == list(range(seen["version"] + 1, n + 1))

            user = await reader.get_user_state(APP, "u", with_cursor=True)
            app = await reader.get_app_state(APP, with_cursor=True)
            assert user["state"] == {"n": n} and app["state"] == {"n": n}
            await writer.append_event(APP, "u", "s", {"author": "w", "actions": {
                "state_delta": {"user:n": n + 1}}})
            after, _ = await read_all(reader, "user", app_name=APP, user_id="u",
                                      from_=user["cursor"])
            assert [ch["state_delta"] for ch in after] == [{"user:n": n + 1}]
            assert await reader.get_user_state(APP, "u") == {"n": n + 1}
    run(body())


def test_a_raw_watch_notifies_on_notification(agentstate_bin, store):
    # A watch started with call("watch") is not routed: its notifications go to
    # on_notification, in order, and its watch_ended comes before unwatch's answer.
    async def body():
        seen = []
        async with await spawn_noting(store, agentstate_bin, seen) as c:
            raw = await c.call("watch", {"scope": "all"})
            await c.create_session(APP, "u", "s")
            assert await wait_for(lambda: seen)
            method, params = seen[0]
            assert method == "changes" and params["watch_id"] == raw["watch_id"]
            assert [ch["kind"] for ch in params["changes"]] == ["create"]
            ended = await c.unwatch(raw["watch_id"])
            method, params = seen[-1]
            assert method == "watch_ended" and params["reason"] == "cancelled"
            assert params["resume_from"] == ended["resume_from"]
            assert not c._watches
    run(body())
