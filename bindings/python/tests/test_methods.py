# SPDX-License-Identifier: Apache-2.0
"""Every protocol method through AsyncClient against a real ``serve --store``."""

from __future__ import annotations

from conftest import run

from agentstate_client import AsyncClient, Client, InvalidArgumentError, UnavailableError

APP, USER = "chat", "alice"


def test_create_get_append_with_scoped_state(agentstate_bin, store):
    async def body():
        async with await AsyncClient.spawn(store, binary=agentstate_bin) as c:
            s = await c.create_session(APP, USER, "s1", {
                "topic": "weather", "user:lang": "en", "app:model": "m1", "temp:draft": "x"})
            assert s["id"] == "s1" and s["app_name"] == APP and s["user_id"] == USER
            assert s["version"] == 0 and s["events"] == []
            assert s["state"] == {"topic": "weather", "user:lang": "en", "app:model": "m1"}

            r = await c.append_event(APP, USER, "s1", {
                "id": "ev-1", "invocation_id": "inv-1", "author": "planner",
                "timestamp": 1700000000.5, "content": {"parts": [{"text": "Looking it up"}]},
                "actions": {"state_delta": {"step": 1, "temp:scratch": "y", "user:lang": "fr"}}})
            assert r["version"] == 1
            assert r["event"]["id"] == "ev-1"
            assert r["event"]["actions"]["state_delta"] == {"step": 1, "user:lang": "fr"}

            got = await c.get_session(APP, USER, "s1")
            assert got["version"] == 1 and [e["id"] for e in got["events"]] == ["ev-1"]
            assert got["events"][0]["content"] == {"parts": [{"text": "Looking it up"}]}
            assert got["state"] == {"topic": "weather", "step": 1, "user:lang": "fr",
                                    "app:model": "m1"}
            # The live invocation's temp: keys are visible only when it is named.
            live = await c.get_session(APP, USER, "s1", invocation_id="inv-1")
            assert live["state"]["temp:scratch"] == "y"

            assert await c.get_user_state(APP, USER) == {"lang": "fr"}
            assert await c.get_app_state(APP) == {"model": "m1"}
            assert await c.get_user_state(APP, "nobody") == {}
            assert await c.get_app_state("no-app") == {}
            assert await c.get_session(APP, USER, "missing") is None
    run(body())


def test_generated_session_id_and_delete(agentstate_bin, store):
    async def body():
        async with await AsyncClient.spawn(store, binary=agentstate_bin) as c:
            a = await c.create_session(APP, USER)
            b = await c.create_session(APP, USER, "   ")
            assert a["id"] and b["id"] and a["id"] != b["id"]
            trimmed = await c.create_session(APP, USER, "  padded  ")
            assert trimmed["id"] == "padded"
            await c.append_event(APP, USER, a["id"], {"author": "x", "actions": {
                "state_delta": {"user:kept": True}}})
            assert await c.delete_session(APP, USER, a["id"]) is None
            assert await c.get_session(APP, USER, a["id"]) is None
            assert await c.delete_session(APP, USER, a["id"]) is None  # missing: not an error
            assert await c.get_user_state(APP, USER) == {"kept": True}  # user state stays
            assert await c.get_session(APP, USER, b["id"]) is not None
    run(body())


def test_get_session_filters(agentstate_bin, store):
    async def body():
        async with await AsyncClient.spawn(store, binary=agentstate_bin) as c:
            await c.create_session(APP, USER, "s")
            for i, ts in enumerate([10.0, 20.0, 30.0, 40.0]):
                await c.append_event(APP, USER, "s", {"id": f"e{i}", "author": "a", "timestamp": ts})

            async def ids(**kw):
                return [e["id"] for e in (await c.get_session(APP, USER, "s", **kw))["events"]]

            assert await ids() == ["e0", "e1", "e2", "e3"]
            assert await ids(num_recent_events=2) == ["e2", "e3"]
            assert await ids(num_recent_events=0) == []
            assert await ids(after_timestamp=20.0) == ["e1", "e2", "e3"]   # inclusive
            assert await ids(after_timestamp=20.5) == ["e2", "e3"]
            assert await ids(after_timestamp=0) == ["e0", "e1", "e2", "e3"]  # 0: no filter
            assert await ids(after_timestamp=15.0, num_recent_events=1) == ["e3"]
    run(body())


def test_append_idempotent_partial_remove_and_extra_members(agentstate_bin, store):
    async def body():
        async with await AsyncClient.spawn(store, binary=agentstate_bin) as c:
            await c.create_session(APP, USER, "s", {"draft": "d", "keep": 1})
            ev = {"id": "ev-1", "author": "model", "timestamp": 5.0,
                  "custom_metadata": {"trace": [1, 2]},
                  "actions": {"state_delta": {"n": 1}, "rewind_before_invocation_id": "inv-0",
                              "skip_summarization": True}}
            first = await c.append_event(APP, USER, "s", ev)
            again = await c.append_event(APP, USER, "s", ev)
            assert first == again and first["version"] == 1
            assert (await c.stats())["deduplicated"] == 1
            # Members the protocol does not name are stored and returned unchanged.
            stored = (await c.get_session(APP, USER, "s"))["events"][0]
            assert stored["custom_metadata"] == {"trace": [1, 2]}
            assert stored["actions"]["rewind_before_invocation_id"] == "inv-0"
            assert stored["actions"]["skip_summarization"] is True

            partial = await c.append_event(APP, USER, "s", {
                "author": "model", "partial": True, "actions": {"state_delta": {"n": 99}}})
            assert partial["version"] == 1
            removed = await c.append_event(APP, USER, "s", {
                "author": "model", "actions": {"state_delta": {"n": None},
                                               "state_remove": ["draft", "missing"]}})
            assert removed["version"] == 2
            assert removed["event"]["actions"]["state_remove"] == ["draft", "missing"]
            got = await c.get_session(APP, USER, "s")
            assert got["version"] == 2 and len(got["events"]) == 2
            assert got["state"] == {"keep": 1, "n": None}  # null is a value, not a delete

            with_version = await c.append_event(APP, USER, "s", {"author": "m"}, expected_version=2)
            assert with_version["version"] == 3
    run(body())


def test_invocation_state_inject_and_end(agentstate_bin, store):
    async def body():
        async with await AsyncClient.spawn(store, binary=agentstate_bin) as c:
            await c.create_session(APP, USER, "s", {"topic": "weather", "user:lang": "en"})
            await c.append_event(APP, USER, "s", {
                "author": "a", "invocation_id": "inv-1",
                "actions": {"state_delta": {"temp:scratch": "y"}}})
            text = await c.inject_state(APP, USER, "s",
                                        "Answer in {user:lang} about {topic}.{temp:scratch?}",
                                        invocation_id="inv-1")
            assert text == "Answer in en about weather.y"
            assert await c.inject_state(APP, USER, "s", "{temp:scratch?}|{a-b}") == "|{a-b}"
            assert await c.end_invocation(APP, USER, "s", "inv-1") is None
            after = await c.get_session(APP, USER, "s", invocation_id="inv-1")
            assert "temp:scratch" not in after["state"]
            assert await c.inject_state(APP, USER, "s", "{temp:scratch?}",
                                        invocation_id="inv-1") == ""
    run(body())


def test_list_sessions_pages_and_iter(agentstate_bin, store):
    async def body():
        async with await AsyncClient.spawn(store, binary=agentstate_bin) as c:
            for i in range(5):
                await c.create_session(APP, USER, f"s{i}", {"i": i})
                await c.append_event(APP, USER, f"s{i}", {"author": "a", "timestamp": 100.0 + i})
            await c.create_session(APP, "bob", "b0")
            await c.append_event(APP, "bob", "b0", {"author": "a", "timestamp": 50.0})

            first = await c.list_sessions(APP, USER, page_size=2)
            assert [m["id"] for m in first["sessions"]] == ["s0", "s1"]
            assert "events" not in first["sessions"][0]
            assert first["sessions"][0]["state"] == {"i": 0}
            assert first["next_page_token"] is not None
            second = await c.list_sessions(APP, USER, page_size=2,
                                           page_token=first["next_page_token"])
            assert [m["id"] for m in second["sessions"]] == ["s2", "s3"]

            assert [m["id"] async for m in c.iter_sessions(APP, USER, page_size=2)] == \
                ["s0", "s1", "s2", "s3", "s4"]
            everyone = [(m["user_id"], m["id"]) async for m in c.iter_sessions(APP, page_size=4)]
            assert everyone == [("bob", "b0")] + [(USER, f"s{i}") for i in range(5)]
            assert (await c.list_sessions("no-app")) == {"sessions": [], "next_page_token": None}
    run(body())


def test_flush_and_stats(agentstate_bin, store):
    async def body():
        async with await AsyncClient.spawn(store, binary=agentstate_bin, durability="nosync") as c:
            await c.create_session(APP, USER, "s")
            for _ in range(3):
                await c.append_event(APP, USER, "s", {"author": "a"})
            assert await c.flush() is None
            stats = await c.stats()
            assert stats["appends"] == 3
            assert all(isinstance(v, int) for v in stats.values())
    run(body())


def test_ping(agentstate_bin, store):
    async def body():
        async with await AsyncClient.spawn(store, binary=agentstate_bin) as c:
            assert await c.ping() == "pong"
            with Client.spawn(memory=True, binary=agentstate_bin) as b:
                assert b.ping() == "pong"
    run(body())


def test_history_methods(agentstate_bin, store):
    """as_of_version, rewind_plan, rewind_session, apply_rewinds, list_invocations and
    fork_session through the blocking client against a real serve --store."""
    with Client.spawn(store, binary=agentstate_bin) as c:
        c.create_session(APP, USER, "h", {"lang": "fr"})
        c.append_event(APP, USER, "h", {"id": "e1", "invocation_id": "i1", "author": "a",
                                         "actions": {"state_delta": {"n": 1}}})
        c.append_event(APP, USER, "h", {"id": "e2", "invocation_id": "i2", "author": "a",
                                         "actions": {"state_delta": {"n": 2, "lang": "de"}}})
        past = c.get_session(APP, USER, "h", as_of_version=1)
        assert past["state"] == {"lang": "fr", "n": 1}
        assert past["as_of"] == {"version": 1, "shared_state": "current", "exact": True}
        plan = c.rewind_plan(APP, USER, "h", before_invocation_id="i2")
        assert plan["state_delta"] == {"lang": "fr", "n": 1} and plan["state_remove"] == []
        r = c.rewind_session(APP, USER, "h", before_invocation_id="i2", event_id="rw")
        assert r["version"] == 3 and r["event"]["author"] == "user"
        assert c.get_session(APP, USER, "h")["state"] == {"lang": "fr", "n": 1}
        kept = c.get_session(APP, USER, "h", apply_rewinds=True)
        assert [e["id"] for e in kept["events"]] == ["e1"]
        invs = c.list_invocations(APP, USER, "h")
        assert [(i["invocation_id"], i["annulled"], i["rewind"]) for i in invs[:2]] == [
            ("i1", False, False), ("i2", True, False)]
        assert invs[2]["rewind"] is True
        fork = c.fork_session(APP, USER, "h", 2, "h2")
        assert fork["version"] == 2 and fork["state"] == {"lang": "de", "n": 2}
        try:
            c.rewind_session(APP, USER, "h", before_version=1, before_invocation_id="i1")
            raise AssertionError("both points were accepted")
        except InvalidArgumentError:
            pass


def test_session_ttl(agentstate_bin, store):
    """create_session's ttl_s and refresh_ttl against a real serve --store: the session
    carries expires_at, reads as absent once it passes, and a bad ttl_s is refused."""
    import time
    with Client.spawn(store, binary=agentstate_bin) as c:
        s = c.create_session(APP, USER, "brief", {"k": 1}, ttl_s=0.5)
        assert abs(s["expires_at"] - (s["last_update_time"] + 0.5)) < 1e-6
        sliding = c.create_session(APP, USER, "sliding", ttl_s=30, refresh_ttl=True)
        c.append_event(APP, USER, "sliding", {"author": "a", "actions": {"state_delta": {}}})
        assert c.get_session(APP, USER, "sliding")["expires_at"] >= sliding["expires_at"]
        assert "expires_at" not in c.create_session(APP, USER, "forever")
        # serve is a child process on the system clock (no clock can be given to it), so
        # time has to pass: a poll of the clock until just past the expiry.
        while time.time() <= s["expires_at"]:
            time.sleep(0.05)  # why: the child's system clock must pass the expiry (above)
        assert c.get_session(APP, USER, "brief") is None
        listed = [m["id"] for m in c.list_sessions(APP, USER)["sessions"]]
        assert "brief" not in listed and "sliding" in listed
        try:
            c.create_session(APP, USER, "bad", ttl_s=-1)
            raise AssertionError("a negative ttl_s was accepted")
        except InvalidArgumentError:
            pass


def test_delete_user_and_app(agentstate_bin, store):
    """delete_user and delete_app against a real serve --store: everything of the scope is
    gone at once, other users and apps stay, and the scope can be used again."""
    import time
    with Client.spawn(store, binary=agentstate_bin) as c:
        for user in ("u", "v"):
            c.create_session(APP, user, "s", {"user:name": user, "app:k": 1})
        c.create_session("other", "u", "s", {"app:k": 2})
        assert c.delete_user(APP, "u") is None
        assert c.get_session(APP, "u", "s") is None
        assert c.get_user_state(APP, "u") == {}
        assert [m["user_id"] for m in c.list_sessions(APP)["sessions"]] == ["v"]
        assert c.delete_app(APP) is None
        assert c.list_sessions(APP)["sessions"] == [] and c.get_app_state(APP) == {}
        assert c.get_session("other", "u", "s")["state"] == {"app:k": 2}
        deadline = time.time() + 30
        while True:  # a create waits for the purge (UnavailableError) and then succeeds
            try:
                assert c.create_session(APP, "u", "s")["state"] == {}
                break
            except UnavailableError:
                assert time.time() < deadline
                time.sleep(0.01)  # bounded poll: the child purges on its writer thread
