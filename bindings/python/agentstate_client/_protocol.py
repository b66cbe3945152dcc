# SPDX-License-Identifier: Apache-2.0
"""What both clients share: request encoding with the server's limits checked up front,
and the protocol's methods, written once over an abstract ``call``."""

from __future__ import annotations

import abc
import json
from collections.abc import Iterable, Mapping, Sequence
from typing import Any, Literal, cast, overload

from .errors import InvalidArgumentError, TooLargeError
from .results import (
    AppendResult,
    AuthResult,
    ChangesPage,
    Invocation,
    JsonObject,
    JsonValue,
    RewindPlan,
    Session,
    SessionPage,
    StateWithCursor,
    Stats,
    UnwatchResult,
)

# The server's default --max-line-bytes: the longest request line it reads, newline excluded.
MAX_LINE_BYTES = 16 * 1024 * 1024
# The deepest nesting of arrays and objects the server parses in one request line
# (the engine's max_json_depth, 64, plus 8); the request object itself is level 1.
MAX_LINE_DEPTH = 72
# The read buffer for response lines: a line up to 16 MiB plus slack is read in one piece;
# longer response lines (a get_session with many large events) are read in several.
READ_LIMIT = MAX_LINE_BYTES + 64 * 1024


def _deeper_than(value: Any, limit: int) -> bool:
    """True when ``value`` nests arrays/objects more than ``limit`` levels deep. Visits each
    container once (cost: the number of elements), stops at the first path over the limit."""
    stack: list[tuple[Any, int]] = [(value, 1)]
    while stack:
        v, depth = stack.pop()
        children: Iterable[Any]
        if isinstance(v, dict):
            children = v.values()
        elif isinstance(v, (list, tuple)):
            children = v
        else:
            continue
        if depth > limit:
            return True
        for c in children:
            if isinstance(c, (dict, list, tuple)):
                stack.append((c, depth + 1))
    return False


def encode_request(request_id: int, method: str, params: dict[str, Any] | None,
                   max_line_bytes: int) -> bytes:
    """One request line (newline included). Raises, before anything is sent:
    InvalidArgumentError when ``params`` is not JSON (a non-serialisable object, NaN or
    infinity, a circular reference, a string with a lone surrogate); TooLargeError when the
    line would nest deeper than the server parses or be longer than ``max_line_bytes``.
    The server would answer such lines with ``id`` null, which no caller could be given."""
    msg: dict[str, Any] = {"jsonrpc": "2.0", "id": request_id, "method": method}
    if params is not None:
        msg["params"] = params
    try:
        text = json.dumps(msg, ensure_ascii=False, allow_nan=False, separators=(",", ":"))
        line = text.encode("utf-8")
    except RecursionError:
        raise TooLargeError("too_large", None, f"{method}: parameters nest too deeply to encode") from None
    except UnicodeEncodeError as e:
        raise InvalidArgumentError("invalid_argument", None,
                                   f"{method}: a string is not valid Unicode ({e.reason})") from None
    except (TypeError, ValueError) as e:
        raise InvalidArgumentError("invalid_argument", None,
                                   f"{method}: parameters are not JSON: {e}") from None
    # The request object and "params" are levels 1 and 2. (Checked after encoding, which
    # has refused circular structures.)
    if params is not None and _deeper_than(params, MAX_LINE_DEPTH - 1):
        raise TooLargeError("too_large", None,
                            f"{method}: parameters nest deeper than the server parses "
                            f"({MAX_LINE_DEPTH} levels per request line)")
    if len(line) > max_line_bytes:
        raise TooLargeError("too_large", None,
                            f"{method}: request line of {len(line)} bytes exceeds the server's "
                            f"limit of {max_line_bytes} bytes")
    return line + b"\n"


def _params(**kw: Any) -> dict[str, Any]:
    """By-name params without the ones left as None (the server treats null as absent)."""
    return {k: v for k, v in kw.items() if v is not None}


def change_params(scope: str, **kw: Any) -> dict[str, Any]:
    """The params of ``read_changes`` and ``watch`` (``from_`` sent as ``from``)."""
    params = _params(scope=scope, **kw)
    if "from_" in params:
        params["from"] = params.pop("from_")
    return params


class ProtocolMethods(abc.ABC):
    """The protocol's methods (docs/protocol.md, "Methods") as coroutines over
    ``self.call(method, params)``; AsyncClient has them as they are, Client (blocking.py)
    the same signatures, blocking. Results are the server's JSON as Python values (dict,
    list, str, int, float, bool, None), typed by results.py; failures raise
    AgentStateError subclasses (errors.py)."""

    @abc.abstractmethod
    async def call(self, method: str, params: dict[str, Any] | None = None) -> JsonValue:
        """Sends one request and gives its result. Methods this class does not name yet
        can be called through it."""

    async def create_session(self, app_name: str, user_id: str, session_id: str | None = None,
                       state: Mapping[str, Any] | None = None, *, ttl_s: float | None = None,
                       refresh_ttl: bool | None = None) -> Session:
        """The new Session (no events, version 0). ``session_id`` None, empty or blank ->
        a generated id; ``temp:`` keys of ``state`` are dropped. ``ttl_s``: the session
        expires that many seconds after creation (0: never; None: the server's default);
        its ``"expires_at"`` says when. ``refresh_ttl=True``: each append moves the expiry
        to ``ttl_s`` past the append. An expired session reads as absent at once.
        Raises AlreadyExistsError, InvalidArgumentError, TooLargeError."""
        return cast(Session, await self.call("create_session", _params(app_name=app_name, user_id=user_id,
                                                   session_id=session_id,
                                                   state=None if state is None else dict(state),
                                                   ttl_s=ttl_s, refresh_ttl=refresh_ttl)))

    async def get_session(self, app_name: str, user_id: str, session_id: str, *,
                    num_recent_events: int | None = None, after_timestamp: float | None = None,
                    invocation_id: str | None = None, as_of_version: int | None = None,
                    apply_rewinds: bool | None = None) -> Session | None:
        """The Session, or None when it does not exist. ``num_recent_events``: None -> all
        events, 0 -> none, n -> the last n. ``after_timestamp``: events with timestamp >= t
        (0 -> no filter). ``invocation_id``: when it is the live invocation, ``state`` also
        holds its ``temp:`` keys. ``as_of_version``: the session as it was after that version
        (0: as created; ``app:``/``user:`` keys current; the result's ``"as_of"`` says so).
        ``apply_rewinds=True``: without rewind events and the events they undid (as ADK's
        context builder). Needs a server of store format 7 for the last two."""
        return cast("Session | None", await self.call("get_session", _params(
            app_name=app_name, user_id=user_id, session_id=session_id,
            num_recent_events=num_recent_events, after_timestamp=after_timestamp,
            invocation_id=invocation_id, as_of_version=as_of_version,
            apply_rewinds=apply_rewinds)))

    async def rewind_session(self, app_name: str, user_id: str, session_id: str, *,
                       before_invocation_id: str | None = None,
                       before_version: int | None = None, event_id: str | None = None,
                       expected_version: int | None = None) -> AppendResult:
        """``{"event": the rewind event, "version": N}``: appends one event (ADK's rewind
        shape) restoring the session's own state to before ``before_invocation_id``'s first
        event, or to the state after ``before_version`` - 1 (give exactly one). Keys that did
        not exist then are deleted; ``app:``/``user:`` state is not rewound. ``event_id``
        makes a retry safe. Raises NotFoundError, InvalidArgumentError,
        VersionConflictError."""
        return cast(AppendResult, await self.call("rewind_session", _params(
            app_name=app_name, user_id=user_id, session_id=session_id,
            before_invocation_id=before_invocation_id, before_version=before_version,
            event_id=event_id, expected_version=expected_version)))

    async def rewind_plan(self, app_name: str, user_id: str, session_id: str, *,
                    before_invocation_id: str | None = None,
                    before_version: int | None = None) -> RewindPlan:
        """What ``rewind_session`` would write now, writing nothing: ``{"state_delta",
        "state_remove", "before_version", "exact"}``."""
        return cast(RewindPlan, await self.call("rewind_plan", _params(
            app_name=app_name, user_id=user_id, session_id=session_id,
            before_invocation_id=before_invocation_id, before_version=before_version)))

    async def list_invocations(self, app_name: str, user_id: str, session_id: str) -> list[Invocation]:
        """The session's invocations by first event: ``[{"invocation_id", "first_version",
        "last_version", "events", "annulled", "rewind"}]``. Raises NotFoundError."""
        return cast(list[Invocation], await self.call("list_invocations", _params(app_name=app_name, user_id=user_id,
                                                     session_id=session_id)))

    async def fork_session(self, app_name: str, user_id: str, session_id: str, at_version: int,
                     new_session_id: str | None = None) -> Session:
        """The new Session (without events) holding events 1..``at_version`` of the source
        and its own state then. Raises AlreadyExistsError, NotFoundError,
        InvalidArgumentError."""
        return cast(Session, await self.call("fork_session", _params(
            app_name=app_name, user_id=user_id, session_id=session_id, at_version=at_version,
            new_session_id=new_session_id)))

    async def list_sessions(self, app_name: str, user_id: str | None = None, *,
                      page_size: int | None = None, page_token: str | None = None,
                      order: str | None = None, offset: int | None = None,
                      include_total: bool | None = None, order_by: str | None = None,
                      shared_state: str | None = None) -> SessionPage:
        """One page: ``{"sessions": [SessionMeta...], "next_page_token": str | None}`` (plus
        ``"total"`` with ``include_total=True``). ``user_id`` None -> every user of the app;
        ``page_size`` 1..1000 (server default 100); ``order`` "asc" (default) or "desc";
        ``order_by`` "update_time" (default: last_update_time then id), "created" or "id"
        (both stable while sessions are written); ``offset`` skips that many sessions;
        ``shared_state`` "once": each session's ``state`` is its own keys, and the page adds
        ``"app_state"`` and ``"user_states"`` (by user id) once."""
        return cast(SessionPage, await self.call("list_sessions", _params(
            app_name=app_name, user_id=user_id, page_size=page_size, page_token=page_token,
            order=order, offset=offset, include_total=include_total, order_by=order_by,
            shared_state=shared_state)))

    async def delete_session(self, app_name: str, user_id: str, session_id: str) -> None:
        """Removes the session and its events (app and user state stay). None; deleting a
        missing session is not an error."""
        await self.call("delete_session", _params(app_name=app_name, user_id=user_id,
                                                   session_id=session_id))

    async def delete_user(self, app_name: str, user_id: str) -> None:
        """Removes every session of the user and its ``user:`` state. None. Gone for every
        reader at once; the server deletes the rows in the background, and until it has, a
        create_session for the user raises UnavailableError (retry)."""
        await self.call("delete_user", _params(app_name=app_name, user_id=user_id))

    async def delete_app(self, app_name: str) -> None:
        """Removes every session of every user of the app, their ``user:`` state and the
        ``app:`` state. None. As delete_user, for the whole app."""
        await self.call("delete_app", _params(app_name=app_name))

    async def append_event(self, app_name: str, user_id: str, session_id: str,
                           event: Mapping[str, Any], *, expected_version: int | None = None,
                           modify: Sequence[Mapping[str, Any]] | None = None) -> AppendResult:
        """``{"event": stored Event, "version": N}``. Re-sending an event ``id`` already in
        the session returns the stored event and its version instead of appending again.
        ``expected_version``: append only at that version (else VersionConflictError, with
        ``current_version``). ``modify``: atomic state operations applied in the commit
        (``increment``, ``append``, ``merge``, ``set_if_absent``, ``compare_and_set``; a failed
        compare_and_set raises ConditionFailedError and appends nothing).
        Raises NotFoundError, VersionConflictError, ConditionFailedError, InvalidArgumentError,
        TooLargeError, StorageFullError, IoError, UnavailableError."""
        return cast(AppendResult, await self.call("append_event", _params(
            app_name=app_name, user_id=user_id, session_id=session_id, event=dict(event),
            expected_version=expected_version,
            modify=None if modify is None else [dict(m) for m in modify])))

    async def end_invocation(self, app_name: str, user_id: str, session_id: str, invocation_id: str) -> None:
        """Drops the ``temp:`` state of ``invocation_id`` if it is the session's live
        invocation. None."""
        await self.call("end_invocation", _params(app_name=app_name, user_id=user_id,
                                                   session_id=session_id,
                                                   invocation_id=invocation_id))

    async def inject_state(self, app_name: str, user_id: str, session_id: str, template: str, *,
                     invocation_id: str | None = None) -> str:
        """``template`` rendered against the session's merged state (``{key}``, ``{key?}``).
        Raises NotFoundError naming a missing key (or the session)."""
        return cast(str, await self.call("inject_state", _params(app_name=app_name, user_id=user_id,
                                                 session_id=session_id, template=template,
                                                 invocation_id=invocation_id)))

    @overload
    async def get_app_state(self, app_name: str, *,
                            with_cursor: Literal[False] | None = None) -> JsonObject: ...

    @overload
    async def get_app_state(self, app_name: str, *, with_cursor: Literal[True]) -> StateWithCursor: ...

    @overload
    async def get_app_state(self, app_name: str, *,
                            with_cursor: bool | None = None) -> JsonObject | StateWithCursor: ...

    async def get_app_state(self, app_name: str, *,
                            with_cursor: bool | None = None) -> JsonObject | StateWithCursor:
        """The app's keys without their ``app:`` prefix (``{}`` when none). With
        ``with_cursor=True``: ``{"state": {...}, "cursor": C}``, C being the change feed's
        point the state was read at (a watch or ``read_changes`` from C misses nothing
        after it; needs a server that knows ``with_cursor``)."""
        return cast("JsonObject | StateWithCursor", await self.call(
            "get_app_state", _params(app_name=app_name, with_cursor=with_cursor)))

    @overload
    async def get_user_state(self, app_name: str, user_id: str, *,
                             with_cursor: Literal[False] | None = None) -> JsonObject: ...

    @overload
    async def get_user_state(self, app_name: str, user_id: str, *,
                             with_cursor: Literal[True]) -> StateWithCursor: ...

    @overload
    async def get_user_state(self, app_name: str, user_id: str, *,
                             with_cursor: bool | None = None) -> JsonObject | StateWithCursor: ...

    async def get_user_state(self, app_name: str, user_id: str, *,
                             with_cursor: bool | None = None) -> JsonObject | StateWithCursor:
        """The user's keys without their ``user:`` prefix (``{}`` when none). With
        ``with_cursor=True``: ``{"state": {...}, "cursor": C}`` (as get_app_state)."""
        return cast("JsonObject | StateWithCursor", await self.call(
            "get_user_state", _params(app_name=app_name, user_id=user_id,
                                      with_cursor=with_cursor)))

    async def read_changes(self, scope: str, *, app_name: str | None = None,
                     user_id: str | None = None, session_id: str | None = None,
                     include_sessions: bool | None = None, key_prefix: str | None = None,
                     from_: str | None = None, limit: int | None = None) -> ChangesPage:
        """One page of the change feed: ``{"changes": [Change...], "cursor": C, "at_head":
        bool}``. ``scope`` "session" (needs app_name, user_id, session_id), "user" (app_name,
        user_id), "app" (app_name) or "all". ``from_`` (the protocol's ``from``): a cursor
        to start after, default the oldest change kept; pass each page's ``cursor`` as the
        next ``from_`` to get every later change once. ``limit`` 1..10000 (default 100).
        ``include_sessions``: for "user"/"app", every change of their sessions too (with
        ``event``). ``key_prefix``: only keys starting with it, only changes keeping one.
        Raises CursorExpiredError (``.oldest``) for a cursor older than the log keeps,
        InvalidArgumentError (a missing name, another store's cursor), DataCorruptError."""
        return cast(ChangesPage, await self.call("read_changes", change_params(
            scope, app_name=app_name, user_id=user_id, session_id=session_id,
            include_sessions=include_sessions, key_prefix=key_prefix, from_=from_,
            limit=limit)))

    async def unwatch(self, watch_id: str) -> UnwatchResult:
        """``{"resume_from": C}``: ends a watch of this connection by its id (its
        ``watch_ended`` notification comes first). Watches made with ``watch()`` are ended
        by leaving their ``with`` block (or ``aclose()``/``close()``) instead. Raises
        NotFoundError for an id this connection is not watching."""
        return cast(UnwatchResult, await self.call("unwatch", {"watch_id": watch_id}))

    async def flush(self) -> None:
        """None, once every request sent before it has completed and everything
        acknowledged is on disk."""
        await self.call("flush")

    async def stats(self) -> Stats:
        """The engine's counters since the server started (a dict of ints)."""
        return cast(Stats, await self.call("stats"))

    async def ping(self) -> str:
        """``"pong"``: a round trip that touches no session (allowed before
        ``authenticate``)."""
        return cast(str, await self.call("ping"))

    async def authenticate(self, token: str) -> AuthResult:
        """``{"apps": "*"}`` or ``{"apps": [names]}``: the apps ``token`` grants this
        connection (a server with --auth-file; one without grants every app). ``connect(...,
        token=)`` sends it first for you. Raises UnauthenticatedError for a refused token
        (the connection stays unauthenticated)."""
        return cast(AuthResult, await self.call("authenticate", {"token": token}))
