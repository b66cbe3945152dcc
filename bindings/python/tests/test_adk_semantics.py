# SPDX-License-Identifier: Apache-2.0
"""The server behaviours docs/adk-python.md builds on, one test each, through the client."""

from __future__ import annotations

import asyncio
import uuid

import pytest
from conftest import run

import agentstate_client as ac
from agentstate_client import AsyncClient

APP, USER = "adk", "u"


def test_generated_ids_timestamps_and_filled_members(agentstate_bin, store):
    async def body():
        async with await AsyncClient.spawn(store, binary=agentstate_bin) as c:
            s = await c.create_session(APP, USER)
            assert str(uuid.UUID(s["id"])) == s["id"]  # a UUID in text form
            r = await c.append_event(APP, USER, s["id"], {"author": "user"})
            ev = r["event"]
            assert ev["id"] and isinstance(ev["timestamp"], float)
            assert ev["actions"]["artifact_delta"] == {}
            assert ev["invocation_id"] == ""
            got = await c.get_session(APP, USER, s["id"])
            assert got["last_update_time"] == ev["timestamp"]
    run(body())


def test_timestamps_need_not_increase(agentstate_bin, store):
    async def body():
        async with await AsyncClient.spawn(store, binary=agentstate_bin) as c:
            await c.create_session(APP, USER, "s")
            for i, ts in enumerate([50.0, 20.0, 30.0]):
                await c.append_event(APP, USER, "s", {"id": f"e{i}", "author": "a", "timestamp": ts})
            got = await c.get_session(APP, USER, "s")
            assert [e["id"] for e in got["events"]] == ["e0", "e1", "e2"]  # append order
            assert got["last_update_time"] == 30.0                         # the last event's
            assert [e["id"] for e in (await c.get_session(
                APP, USER, "s", after_timestamp=30.0))["events"]] == ["e0", "e2"]
    run(body())


def test_state_delta_replaces_whole_values(agentstate_bin, store):
    async def body():
        async with await AsyncClient.spawn(store, binary=agentstate_bin) as c:
            await c.create_session(APP, USER, "s", {"cfg": {"a": 1, "b": 2}})
            await c.append_event(APP, USER, "s", {"author": "a", "actions": {
                "state_delta": {"cfg": {"a": 5}}}})
            assert (await c.get_session(APP, USER, "s"))["state"]["cfg"] == {"a": 5}
    run(body())


def test_temp_keys_end_with_a_new_invocation(agentstate_bin, store):
    async def body():
        async with await AsyncClient.spawn(store, binary=agentstate_bin) as c:
            await c.create_session(APP, USER, "s")
            r = await c.append_event(APP, USER, "s", {"author": "a", "invocation_id": "i1",
                                                      "actions": {"state_delta": {"temp:t": 1}}})
            assert r["event"]["actions"]["state_delta"] == {}
            assert (await c.get_session(APP, USER, "s", invocation_id="i1"))["state"] == {"temp:t": 1}
            assert (await c.get_session(APP, USER, "s"))["state"] == {}
            await c.append_event(APP, USER, "s", {"author": "a", "invocation_id": "i2"})
            assert (await c.get_session(APP, USER, "s", invocation_id="i1"))["state"] == {}
    run(body())


def test_camel_case_members_are_refused(agentstate_bin, store):
    async def body():
        async with await AsyncClient.spawn(store, binary=agentstate_bin) as c:
            await c.create_session(APP, USER, "s")
            for ev in ({"author": "a", "invocationId": "i1"},
                       {"author": "a", "actions": {"stateDelta": {"k": 1}}}):
                with pytest.raises(ac.InvalidArgumentError):
                    await c.append_event(APP, USER, "s", ev)
            assert (await c.get_session(APP, USER, "s"))["version"] == 0
    run(body())


def test_limits_named_in_the_guide(agentstate_bin, store):
    async def body():
        async with await AsyncClient.spawn(store, binary=agentstate_bin) as c:
            with pytest.raises(ac.InvalidArgumentError):
                await c.create_session(APP, "a\x00b")
            await c.create_session(APP, USER, "x" * 100)
            with pytest.raises(ac.TooLargeError):
                await c.create_session(APP, USER, "x" * 101)
            await c.create_session(APP, USER, "s", {"k" * 200: 1})
            with pytest.raises(ac.TooLargeError):
                await c.create_session(APP, USER, "t", {"k" * 201: 1})
            big = "v" * (1000 * 1000)
            with pytest.raises(ac.TooLargeError):
                await c.create_session(APP, USER, "t", {f"k{i}": big for i in range(5)})
            with pytest.raises(ac.TooLargeError):
                await c.append_event(APP, USER, "s", {"id": "i" * 129, "author": "a"})
            assert await c.get_session(APP, USER, "t") is None
    run(body())


def test_racing_creates_of_one_id_over_separate_connections(tcp_server):
    async def body():
        clients = [await AsyncClient.connect(tcp_server.address) for _ in range(8)]
        outcomes = await asyncio.gather(*[cl.create_session(APP, USER, "same") for cl in clients],
                                        return_exceptions=True)
        assert sum(isinstance(o, dict) for o in outcomes) == 1
        assert all(isinstance(o, (dict, ac.AlreadyExistsError)) for o in outcomes)
        for cl in clients:
            await cl.close()
    run(body())
