# SPDX-License-Identifier: Apache-2.0
"""list_sessions ordering (update and creation time), offset, total and shared_state;
append_event's atomic ``modify`` operations."""

from __future__ import annotations

import asyncio

import pytest
from conftest import run

import agentstate_client as ac
from agentstate_client import AsyncClient, Client

APP, USER = "opts", "u"


def test_list_sessions_order_offset_total(agentstate_bin, store):
    async def body():
        async with await AsyncClient.spawn(store, binary=agentstate_bin) as c:
            for i in range(6):
                await c.create_session(APP, USER, f"s{i}")
                await c.append_event(APP, USER, f"s{i}", {"author": "a", "timestamp": 100.0 + i})

            asc = await c.list_sessions(APP, USER, include_total=True)
            assert [m["id"] for m in asc["sessions"]] == [f"s{i}" for i in range(6)]
            assert asc["total"] == 6
            assert "total" not in await c.list_sessions(APP, USER)

            desc = await c.list_sessions(APP, USER, order="desc", page_size=4)
            assert [m["id"] for m in desc["sessions"]] == ["s5", "s4", "s3", "s2"]
            rest = await c.list_sessions(APP, USER, order="desc", page_size=4,
                                         page_token=desc["next_page_token"])
            assert [m["id"] for m in rest["sessions"]] == ["s1", "s0"]
            assert rest["next_page_token"] is None
            assert [m["id"] async for m in c.iter_sessions(APP, USER, page_size=4, order="desc")] == \
                [f"s{i}" for i in reversed(range(6))]

            skipped = await c.list_sessions(APP, USER, offset=2, page_size=2, include_total=True)
            assert [m["id"] for m in skipped["sessions"]] == ["s2", "s3"]
            assert skipped["total"] == 6
            assert (await c.list_sessions(APP, USER, offset=10))["sessions"] == []

            for bad in ({"order": "sideways"}, {"offset": -1}):
                with pytest.raises(ac.InvalidArgumentError):
                    await c.list_sessions(APP, USER, **bad)
            with pytest.raises(ac.InvalidArgumentError) as e:
                await c.list_sessions(APP, USER, include_total="yes")
            assert e.value.code == ac.INVALID_PARAMS
    run(body())


def test_list_sessions_created_order_and_shared_state_once(agentstate_bin, store):
    with Client.spawn(store, binary=agentstate_bin) as c:
        c.create_session(APP, USER, "first", {"app:model": "m1", "user:lang": "en"})
        c.create_session(APP, USER, "second", {"own": 2})
        # An append moves "first" after "second" in update order, not in creation order.
        c.append_event(APP, USER, "first", {"author": "a"})
        assert [m["id"] for m in c.list_sessions(APP, USER)["sessions"]] == ["second", "first"]
        assert [m["id"] for m in c.iter_sessions(APP, USER, page_size=1, order_by="created")] == \
            ["first", "second"]
        once = c.list_sessions(APP, USER, shared_state="once")
        assert once["app_state"] == {"app:model": "m1"}
        assert once["user_states"] == {USER: {"user:lang": "en"}}
        assert {m["id"]: m["state"] for m in once["sessions"]} == {"first": {}, "second": {"own": 2}}
        with pytest.raises(ac.InvalidArgumentError):
            c.list_sessions(APP, USER, order_by="birth")


def test_modify_operations(agentstate_bin, store):
    async def body():
        async with await AsyncClient.spawn(store, binary=agentstate_bin) as c:
            await c.create_session(APP, USER, "s", {"user:tags": ["a"], "cfg": {"x": 1}})
            r = await c.append_event(APP, USER, "s", {"author": "a"}, modify=[
                {"key": "user:visits", "op": "increment", "by": 1},
                {"key": "app:calls", "op": "increment", "by": 2.5},
                {"key": "user:tags", "op": "append", "value": "b"},
                {"key": "cfg", "op": "merge", "value": {"y": 2}},
                {"key": "owner", "op": "set_if_absent", "value": "alice"},
            ])
            delta = r["event"]["actions"]["state_delta"]
            assert delta == {"user:visits": 1, "app:calls": 2.5, "user:tags": ["a", "b"],
                             "cfg": {"x": 1, "y": 2}, "owner": "alice"}
            r = await c.append_event(APP, USER, "s", {"author": "a"}, modify=[
                {"key": "owner", "op": "set_if_absent", "value": "bob"},
                {"key": "owner", "op": "compare_and_set", "expected": "alice", "value": "carol"},
            ])
            assert r["event"]["actions"]["state_delta"]["owner"] == "carol"

            with pytest.raises(ac.ConditionFailedError) as e:
                await c.append_event(APP, USER, "s", {"id": "cas-1", "author": "a"}, modify=[
                    {"key": "owner", "op": "compare_and_set", "expected": "alice", "value": "dave"}])
            assert e.value.kind == "condition_failed" and e.value.code == ac.ENGINE_ERROR
            assert "owner" in e.value.message and not e.value.retryable
            with pytest.raises(ac.ConditionFailedError):
                await c.append_event(APP, USER, "s", {"author": "a"}, modify=[
                    {"key": "missing", "op": "compare_and_set", "expected": None, "value": 1}])
            with pytest.raises(ac.InvalidArgumentError):
                await c.append_event(APP, USER, "s", {"author": "a"}, modify=[
                    {"key": "owner", "op": "increment", "by": 1}])

            got = await c.get_session(APP, USER, "s")
            assert got["version"] == 2 and "cas-1" not in [ev["id"] for ev in got["events"]]
            assert got["state"]["owner"] == "carol"
            assert await c.get_user_state(APP, USER) == {"visits": 1, "tags": ["a", "b"]}
    run(body())


def test_increments_from_many_sessions_lose_nothing(agentstate_bin, store):
    sessions, per_session = 10, 20

    async def body():
        async with await AsyncClient.spawn(store, binary=agentstate_bin, durability="nosync") as c:
            await asyncio.gather(*[c.create_session(APP, f"user{k}", "s") for k in range(sessions)])
            await asyncio.gather(*[
                c.append_event(APP, f"user{k}", "s", {"author": "a"},
                               modify=[{"key": "app:counter", "op": "increment", "by": 1}])
                for _ in range(per_session) for k in range(sessions)])
            assert await c.get_app_state(APP) == {"counter": sessions * per_session}
    run(body())


def test_blocking_threads_compare_and_set(agentstate_bin, store):
    """Threads race one compare_and_set each per round; exactly one wins every round."""
    with Client.spawn(store, binary=agentstate_bin, durability="nosync") as c:
        for t in range(4):
            c.create_session(APP, USER, f"t{t}")
        c.append_event(APP, USER, "t0", {"author": "a", "actions": {"state_delta": {"app:turn": 0}}})
        from concurrent.futures import ThreadPoolExecutor

        def attempt(t, turn):
            try:
                c.append_event(APP, USER, f"t{t}", {"author": f"t{t}"}, modify=[
                    {"key": "app:turn", "op": "compare_and_set", "expected": turn, "value": turn + 1}])
                return True
            except ac.ConditionFailedError:
                return False

        with ThreadPoolExecutor(4) as pool:
            for turn in range(10):
                wins = list(pool.map(attempt, range(4), [turn] * 4))
                assert wins.count(True) == 1
        assert c.get_app_state(APP) == {"turn": 10}
