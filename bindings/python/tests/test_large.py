# SPDX-License-Identifier: Apache-2.0
"""Large values and lines: multi-MiB state, responses longer than the read buffer, and a
request line of exactly the server's 16 MiB limit."""

from __future__ import annotations

from conftest import run

import agentstate_client as ac
from agentstate_client import AsyncClient

APP, USER = "big", "u"
MiB = 1 << 20


def test_multi_mib_state_round_trip(agentstate_bin, store):
    async def body():
        async with await AsyncClient.spawn(store, binary=agentstate_bin) as c:
            # Initial state up to 4 MiB, each value up to 1 MiB of JSON. Non-ASCII text
            # checks the UTF-8 path: "é" is 2 bytes, "€" 3.
            state = {
                "ascii": "a" * (MiB - 2),                  # exactly 1 MiB as a JSON string
                "accented": "é" * ((MiB - 2) // 2),
                "euro": "€" * ((MiB - 2) // 3),
                "user:list": list(range(80_000)),
            }
            s = await c.create_session(APP, USER, "s", state)
            assert s["state"] == state
            got = await c.get_session(APP, USER, "s")
            assert got["state"] == state
            assert await c.get_user_state(APP, USER) == {"list": state["user:list"]}

            replaced = "z" * (MiB - 4096)  # an event is at most 1 MiB, its delta included
            await c.append_event(APP, USER, "s", {"author": "a", "actions": {
                "state_delta": {"ascii": replaced}}})
            assert (await c.get_session(APP, USER, "s", num_recent_events=0))["state"]["ascii"] == replaced
    run(body())


def test_response_longer_than_the_read_buffer(agentstate_bin, store):
    events = 18  # ~18 MiB of events in one get_session response; the buffer is 16 MiB + 64 KiB

    async def body():
        async with await AsyncClient.spawn(store, binary=agentstate_bin, durability="nosync") as c:
            await c.create_session(APP, USER, "s")
            body_text = "b" * (MiB - 4096)
            for i in range(events):
                await c.append_event(APP, USER, "s", {
                    "id": f"e{i}", "author": "a", "content": {"parts": [{"text": body_text}]}})
            got = await c.get_session(APP, USER, "s")
            assert [e["id"] for e in got["events"]] == [f"e{i}" for i in range(events)]
            assert all(e["content"]["parts"][0]["text"] == body_text for e in got["events"])
            assert await c.inject_state(APP, USER, "s", "after") == "after"
    run(body())


def test_request_line_at_the_16_mib_limit(agentstate_bin, store):
    async def body():
        async with await AsyncClient.spawn(store, binary=agentstate_bin) as c:
            assert ac.MAX_LINE_BYTES == 16 * MiB
            # The line for id 2: {"jsonrpc":"2.0","id":2,"method":"stats","params":{"pad":"..."}}
            overhead = len('{"jsonrpc":"2.0","id":2,"method":"stats","params":{"pad":""}}')
            stats = await c.call("stats", {"pad": "p" * (ac.MAX_LINE_BYTES - overhead)})
            assert "appends" in stats
            try:
                await c.call("stats", {"pad": "p" * (ac.MAX_LINE_BYTES - overhead + 1)})
            except ac.TooLargeError as e:
                assert e.code is None
            else:
                raise AssertionError("a line over 16 MiB was sent")
            assert "appends" in await c.stats()
    run(body())
