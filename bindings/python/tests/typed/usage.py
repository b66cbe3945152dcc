# SPDX-License-Identifier: Apache-2.0
"""Typed use of agentstate_client, checked by mypy --strict (test_typing.py) and run
against the real binary (test_typing.py::test_typed_usage_runs). Every result is used
through its declared type; a result typed Any would let the wrong uses in
test_typing.py's negative check through."""

from __future__ import annotations

import asyncio

from agentstate_client import (
    AgentStateError,
    AppendResult,
    AsyncClient,
    ChangeBatch,
    ChangesPage,
    Client,
    Event,
    JsonObject,
    Session,
    SessionMeta,
    SpawnError,
    StateWithCursor,
)


def blocking_usage(binary: str) -> list[str]:
    """Returns the ids of the events appended, read back."""
    with Client.spawn(memory=True, binary=binary) as c:
        s: Session = c.create_session("app", "u", "s1", {"user:lang": "en"})
        version: int = s["version"]
        r: AppendResult = c.append_event("app", "u", "s1",
                                         {"id": "e1", "author": "a",
                                          "actions": {"state_delta": {"n": 1}}},
                                         expected_version=version)
        stored: Event = r["event"]
        delta: JsonObject = stored["actions"].get("state_delta", {})
        assert delta == {"n": 1}
        got = c.get_session("app", "u", "s1")
        assert got is not None
        ids = [e["id"] for e in got["events"]]
        metas: list[SessionMeta] = list(c.iter_sessions("app", "u"))
        assert [m["id"] for m in metas] == ["s1"]
        user: JsonObject = c.get_user_state("app", "u")
        with_cursor: StateWithCursor = c.get_user_state("app", "u", with_cursor=True)
        assert user == with_cursor["state"] == {"lang": "en"}
        page: ChangesPage = c.read_changes("session", app_name="app", user_id="u",
                                           session_id="s1")
        kinds: list[str] = [ch["kind"] for ch in page["changes"]]
        assert kinds == ["create", "append"]
        appends: int = c.stats().get("appends", 0)
        assert appends == 1
        pong: str = c.ping()
        assert pong == "pong"
        return ids


async def async_usage(binary: str) -> int:
    """Returns the version of the session after one append seen through a watch."""
    async with await AsyncClient.spawn(memory=True, binary=binary) as c:
        s = await c.create_session("app", "u")
        sid: str = s["id"]
        async with c.watch("session", app_name="app", user_id="u", session_id=sid) as w:
            await c.append_event("app", "u", sid, {"author": "a"})
            async for batch in w:
                b: ChangeBatch = batch
                if b["changes"]:
                    return b["changes"][0]["version"]
        return -1


def missing_binary(path: str) -> str:
    """The kind of the error spawning ``path`` raises."""
    try:
        Client.spawn(memory=True, binary=path).close()
    except SpawnError as e:
        return e.kind
    except AgentStateError as e:
        return "other: " + e.kind
    return "none"


def run_all(binary: str, missing: str) -> tuple[list[str], int, str]:
    return blocking_usage(binary), asyncio.run(async_usage(binary)), missing_binary(missing)
