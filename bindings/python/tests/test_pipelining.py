# SPDX-License-Identifier: Apache-2.0
"""Many requests in flight on one connection: each caller gets its own response."""

from __future__ import annotations

import asyncio
import json

from conftest import run

from agentstate_client import AsyncClient

APP = "pipe"


def test_thousands_in_flight_matched_by_id(agentstate_bin, store):
    sessions, per_session = 20, 100

    async def body():
        async with await AsyncClient.spawn(store, binary=agentstate_bin,
                                           durability="nosync") as c:
            await asyncio.gather(*[c.create_session(APP, f"user{k % 4}", f"s{k}")
                                   for k in range(sessions)])
            # Interleave appends to 20 sessions with reads of other scopes, all written at
            # once. Each append's result names its own session and event, so a response
            # handed to the wrong caller fails the checks below.
            calls = []
            for n in range(per_session):
                for k in range(sessions):
                    calls.append(("append", k, n, c.append_event(
                        APP, f"user{k % 4}", f"s{k}",
                        {"id": f"s{k}-e{n}", "author": f"agent{k}",
                         "actions": {"state_delta": {"n": n, f"user:last{k}": n}}})))
                calls.append(("user", n % 4, n, c.get_user_state(APP, f"user{n % 4}")))
                calls.append(("echo", None, n, c.inject_state(APP, "user0", "s0", f"echo-{n}")))
            results = await asyncio.gather(*[coro for *_, coro in calls])

            for (what, k, n, _), result in zip(calls, results):
                if what == "append":
                    assert result["event"]["id"] == f"s{k}-e{n}"
                    assert result["event"]["author"] == f"agent{k}"
                    # Requests about one session run in the order they were written.
                    assert result["version"] == n + 1
                elif what == "user":
                    assert isinstance(result, dict)
                    assert all(key.startswith("last") and int(key[4:]) % 4 == k for key in result)
                else:
                    assert result == f"echo-{n}"

            for k in range(sessions):
                got = await c.get_session(APP, f"user{k % 4}", f"s{k}")
                assert got["version"] == per_session
                assert [e["id"] for e in got["events"]] == [f"s{k}-e{n}" for n in range(per_session)]
                assert got["state"]["n"] == per_session - 1
    run(body())


def test_cancelled_caller_leaves_the_connection_usable(agentstate_bin, store):
    async def body():
        async with await AsyncClient.spawn(store, binary=agentstate_bin) as c:
            await c.create_session(APP, "u", "s")
            tasks = [asyncio.ensure_future(c.append_event(APP, "u", "s", {"id": f"e{i}", "author": "a"}))
                     for i in range(50)]
            await asyncio.sleep(0)  # why: one turn of the event loop: every request is written
            for t in tasks[::2]:
                t.cancel()
            outcomes = await asyncio.gather(*tasks, return_exceptions=True)
            assert all(isinstance(o, (dict, asyncio.CancelledError)) for o in outcomes)
            assert all(isinstance(o, dict) for o in outcomes[1::2])
            # A cancelled caller does not cancel its request: all 50 ran, in order.
            got = await c.get_session(APP, "u", "s")
            assert [e["id"] for e in got["events"]] == [f"e{i}" for i in range(50)]
            assert await c.inject_state(APP, "u", "s", "ok") == "ok"
            assert c._pending == {}
    run(body())


def test_notifications_are_routed_to_the_handler(agentstate_bin, store):
    """No server method sends notifications yet, so the routing is driven with lines fed
    to the reader's dispatcher on a live connection: a notification reaches
    on_notification, is never taken for a response, and a raising handler is contained."""
    seen = []

    def handler(method, params):
        seen.append((method, params))
        if params == {"boom": True}:
            raise RuntimeError("handler failure")

    async def body():
        async with await AsyncClient.spawn(store, binary=agentstate_bin,
                                           on_notification=handler) as c:
            pending = asyncio.ensure_future(c.create_session(APP, "u", "s"))
            await asyncio.sleep(0)  # why: one turn of the event loop: the request is written
            for params in ({"session_id": "s"}, {"boom": True}, None):
                msg = {"jsonrpc": "2.0", "method": "changes"}
                if params is not None:
                    msg["params"] = params
                c._dispatch_line(json.dumps(msg).encode())
            assert (await pending)["id"] == "s"
            assert seen == [("changes", {"session_id": "s"}), ("changes", {"boom": True}),
                            ("changes", None)]
            assert await c.inject_state(APP, "u", "s", "still fine") == "still fine"
    run(body())
