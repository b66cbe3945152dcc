# SPDX-License-Identifier: Apache-2.0
"""docs/adk-python.md's ``to_adk_session`` (its ```python adk-recipe block, run as
written) turns every kind of session answer of a real server into something ADK's Session
model accepts. ADK cannot be installed here, so unless google.adk is importable the block's
``google.adk.sessions.Session`` is a pydantic model with the members of ADK's Session that,
like ADK's, forbids any other member."""

from __future__ import annotations

import importlib.util
import json
import re
import sys
import types
from pathlib import Path
from typing import Any

import pydantic
import pytest
from conftest import run

from agentstate_client import AsyncClient

DOC = Path(__file__).resolve().parents[3] / "docs" / "adk-python.md"
RECIPES = re.findall(r"^```python adk-recipe\n(.*?)^```$", DOC.read_text(), flags=re.S | re.M)
ADK_FIELDS = {"id", "app_name", "user_id", "state", "events", "last_update_time"}
APP, USER = "adk", "u"


class StrictSession(pydantic.BaseModel):
    """ADK's Session members (google/adk/sessions/session.py), extra members refused."""
    id: str
    app_name: str
    user_id: str
    state: dict[str, Any] = {}
    events: list[dict[str, Any]] = []
    last_update_time: float = 0.0

    class Config:
        extra = "forbid"

    @classmethod
    def model_validate_json(cls, text: str) -> StrictSession:
        """pydantic 2's name (ADK's pydantic) for pydantic 1's parse_raw."""
        return cls.parse_raw(text)


@pytest.fixture
def recipe(monkeypatch) -> dict[str, Any]:
    """The recipe block's namespace, executed with google.adk.sessions.Session being
    ADK's when it is installed, else StrictSession."""
    assert len(RECIPES) == 1, "docs/adk-python.md has one ```python adk-recipe block"
    if importlib.util.find_spec("google") is None or importlib.util.find_spec("google.adk") is None:
        for name in ("google", "google.adk"):
            monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
        sessions = types.ModuleType("google.adk.sessions")
        sessions.Session = StrictSession  # type: ignore[attr-defined]
        monkeypatch.setitem(sys.modules, "google.adk.sessions", sessions)
    namespace: dict[str, Any] = {"__name__": "adk_recipe"}
    exec(compile(RECIPES[0], f"{DOC}:adk-recipe", "exec"), namespace)
    return namespace


def test_strict_session_refuses_what_the_server_adds():
    # The validator is as strict as ADK's: the raw answers the recipe used to validate fail.
    base = {"id": "s", "app_name": APP, "user_id": USER, "state": {}, "events": [],
            "last_update_time": 1.0}
    assert StrictSession.model_validate_json(json.dumps(base)).id == "s"
    for extra in ("version", "cursor", "expires_at", "as_of"):
        with pytest.raises(pydantic.ValidationError, match=extra):
            StrictSession.parse_obj({**base, extra: 1})


def test_recipe_converts_every_session_answer(recipe, agentstate_bin, store):
    to_adk_session = recipe["to_adk_session"]
    session_model = sys.modules["google.adk.sessions"].Session

    async def body():
        async with await AsyncClient.spawn(store, binary=agentstate_bin) as c:
            answers: dict[str, Any] = {}
            # A lifetime gives expires_at; create and get carry cursor.
            answers["create"] = await c.create_session(APP, USER, "s1", {"k": 1, "user:u": 2},
                                                       ttl_s=3600)
            await c.append_event(APP, USER, "s1", {
                "id": "e1", "invocation_id": "i1", "author": "agent",
                "content": {"parts": [{"text": "hi"}]},
                "actions": {"state_delta": {"k": 2}}})
            await c.append_event(APP, USER, "s1", {"id": "e2", "invocation_id": "i2",
                                                   "author": "agent"})
            answers["get"] = await c.get_session(APP, USER, "s1")
            answers["get_recent"] = await c.get_session(APP, USER, "s1", num_recent_events=1)
            answers["as_of"] = await c.get_session(APP, USER, "s1", as_of_version=1)
            answers["fork"] = await c.fork_session(APP, USER, "s1", 1, "s1-fork")
            page = await c.list_sessions(APP, USER)
            answers.update({f"list:{m['id']}": m for m in page["sessions"]})

            added = {"version", "cursor", "expires_at", "as_of"}
            seen_added: set[str] = set()
            for what, answer in answers.items():
                seen_added |= added & answer.keys()
                with pytest.raises(pydantic.ValidationError):   # why the recipe converts
                    session_model.parse_obj(dict(answer))
                adk = to_adk_session(answer)
                assert isinstance(adk, session_model), what
                assert (adk.id, adk.app_name, adk.user_id) == (answer["id"], APP, USER), what
                assert adk.state == answer["state"], what
                assert adk.last_update_time == answer["last_update_time"], what
                assert adk.events == answer.get("events", []), what
                assert set(recipe["adk_session_fields"](answer)) <= ADK_FIELDS, what
            # Every member the server adds was met (so each was dropped at least once).
            assert seen_added == added
            got = to_adk_session(answers["get"])
            assert [e["id"] for e in got.events] == ["e1", "e2"]
            assert got.state == {"k": 2, "user:u": 2}
            assert [e["id"] for e in to_adk_session(answers["as_of"]).events] == ["e1"]
            assert {m for m in answers if m.startswith("list:")} == {"list:s1", "list:s1-fork"}
    run(body())
