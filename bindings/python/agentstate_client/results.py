# SPDX-License-Identifier: Apache-2.0
"""The types of the client's results: the server's JSON objects (docs/protocol.md,
"Objects" and each method's "Result") as TypedDicts.

At run time every result is the plain ``dict``/``list`` the JSON decoder made, so the
wire shape is exactly the protocol's; these types only tell a type checker which members
the protocol defines. The client does not check them at run time: a member listed here
is one the server documents. Objects may carry members not listed (an event keeps every
member it was appended with, such as ADK's ``branch``); read those through
``typing.cast(Mapping[str, JsonValue], obj)``.
"""

from __future__ import annotations

from typing import Literal, NotRequired, TypedDict, Union

__all__ = [
    "JsonValue", "JsonObject", "EventActions", "Event", "AsOf", "SessionMeta", "Session",
    "SessionPage", "AppendResult", "RewindPlan", "Invocation", "StateWithCursor", "Change",
    "ChangesPage", "ChangeBatch", "UnwatchResult", "ServerStats", "Stats", "AuthResult",
]

# Any JSON value, as json.loads gives it.
JsonValue = Union[None, bool, int, float, str, list["JsonValue"], dict[str, "JsonValue"]]
# A JSON object: state maps, deltas, an event's content.
JsonObject = dict[str, JsonValue]


class EventActions(TypedDict, total=False):
    """An event's ``actions``. A stored event always has ``state_delta`` and
    ``artifact_delta``; ``state_remove`` is there when the event removed keys; a rewind
    event has one of ``rewind_before_invocation_id`` and ``rewind_before_version``."""
    state_delta: JsonObject
    artifact_delta: JsonObject
    state_remove: list[str]
    rewind_before_invocation_id: str
    rewind_before_version: int


class Event(TypedDict):
    """A stored event (docs/protocol.md, "Event"): ``id`` and ``timestamp`` are always set
    (generated when the append left them empty), the other members as they were sent."""
    id: str
    timestamp: float
    actions: EventActions
    invocation_id: NotRequired[str]
    author: NotRequired[str]
    content: NotRequired[JsonValue]
    partial: NotRequired[bool]


class AsOf(TypedDict):
    """``get_session(..., as_of_version=N)``'s ``as_of`` member."""
    version: int
    shared_state: str
    exact: bool


class SessionMeta(TypedDict):
    """A session without its events: an entry of ``list_sessions``. ``state`` is merged
    (the session's keys, ``app:KEY`` and ``user:KEY``) unless the listing asked for
    ``shared_state="once"``; ``expires_at`` (epoch seconds) only for a session with a
    lifetime."""
    app_name: str
    user_id: str
    id: str
    state: JsonObject
    last_update_time: float
    version: int
    expires_at: NotRequired[float]


class Session(SessionMeta):
    """A Session (``create_session``, ``get_session``, ``fork_session``). ``cursor`` is
    the change feed's point the session shows (servers with read cursors); ``as_of`` only
    with ``as_of_version``."""
    events: list[Event]
    cursor: NotRequired[str]
    as_of: NotRequired[AsOf]


class SessionPage(TypedDict):
    """One page of ``list_sessions``: ``total`` with ``include_total=True``;
    ``app_state`` and ``user_states`` (by user id) with ``shared_state="once"``."""
    sessions: list[SessionMeta]
    next_page_token: str | None
    total: NotRequired[int]
    app_state: NotRequired[JsonObject]
    user_states: NotRequired[dict[str, JsonObject]]


class AppendResult(TypedDict):
    """``append_event`` and ``rewind_session``: the stored event and the session's version
    after it; ``cursor``: the append's point in the change feed."""
    event: Event
    version: int
    cursor: NotRequired[str]


class RewindPlan(TypedDict):
    """``rewind_plan``: what ``rewind_session`` would write now."""
    state_delta: JsonObject
    state_remove: list[str]
    before_version: int
    exact: bool


class Invocation(TypedDict):
    """One entry of ``list_invocations``."""
    invocation_id: str
    first_version: int
    last_version: int
    events: int
    annulled: bool
    rewind: bool


class StateWithCursor(TypedDict):
    """``get_app_state``/``get_user_state`` with ``with_cursor=True``."""
    state: JsonObject
    cursor: str


class Change(TypedDict):
    """One change of the feed (``read_changes``, a watch's batches). ``kind``: ``create``,
    ``append``, ``delete``, ``delete_user``, ``delete_app``, ``remove`` (an expired
    session's deletion); later servers may add kinds. ``event``: for an append when the
    read includes sessions."""
    cursor: str
    kind: str
    app_name: str
    user_id: str
    session_id: str
    version: int
    state_delta: JsonObject
    state_remove: list[str]
    event: NotRequired[Event]


class ChangesPage(TypedDict):
    """``read_changes``: pass ``cursor`` as the next ``from_``."""
    changes: list[Change]
    cursor: str
    at_head: bool


class ChangeBatch(TypedDict):
    """What iterating a watch yields: a ``changes`` notification's batch."""
    changes: list[Change]
    cursor: str


class UnwatchResult(TypedDict):
    """``unwatch``."""
    resume_from: str


class ServerStats(TypedDict, total=False):
    """``stats()["server"]``: a network server's counters."""
    connections_open: int
    connections_total: int
    connections_refused: int
    requests: int
    errors: dict[str, int]
    bytes_in: int
    bytes_out: int
    queued_output_bytes: int
    in_flight: int
    auth_failures: int
    tls_handshake_failures: int
    idle_timeouts: int
    line_timeouts: int
    paused_reads: int
    max_connections: int
    io_threads: int


class Stats(TypedDict, total=False):
    """``stats``: the engine's counters since the server started (a newer server may
    report more); ``server`` on a network server."""
    sessions_live: int
    users_live: int
    apps_live: int
    activations: int
    passivations: int
    appends: int
    deduplicated: int
    commits: int
    batched_writes: int
    max_batch: int
    failed_writes: int
    server: ServerStats


class AuthResult(TypedDict):
    """``authenticate``: the apps the token grants, ``"*"`` for all."""
    apps: Literal["*"] | list[str]
