# SPDX-License-Identifier: Apache-2.0
"""Typed errors for the agentstate protocol.

Every failure a client method reports is an :class:`AgentStateError`. The server's
``error.data.kind`` picks the subclass (``not_found`` -> :class:`NotFoundError`, ...);
a kind this module does not know yet maps to :class:`AgentStateError` itself, so a newer
server never breaks an older client. Programs branch on the class (or on ``kind``);
``message`` is for people.
"""

from __future__ import annotations

from typing import Any

__all__ = [
    "AgentStateError",
    "AlreadyExistsError",
    "NotFoundError",
    "InvalidArgumentError",
    "VersionConflictError",
    "TooLargeError",
    "StorageFullError",
    "IoError",
    "UnavailableError",
    "InternalError",
    "DataCorruptError",
    "UnauthenticatedError",
    "PermissionDeniedError",
    "ConditionFailedError",
    "CursorExpiredError",
    "MovedError",
    "WatchOverflowError",
    "SpawnError",
    "ConnectionClosedError",
    "error_from_response",
    "error_from_watch_end",
    "PARSE_ERROR",
    "INVALID_REQUEST",
    "METHOD_NOT_FOUND",
    "INVALID_PARAMS",
    "ENGINE_ERROR",
]

# JSON-RPC error codes the server uses (docs/protocol.md, "Errors").
PARSE_ERROR = -32700
INVALID_REQUEST = -32600
METHOD_NOT_FOUND = -32601
INVALID_PARAMS = -32602
ENGINE_ERROR = -32000


class AgentStateError(Exception):
    """A failed request.

    kind:    the protocol's ``data.kind`` (``"not_found"``, ...).
    code:    the JSON-RPC ``error.code`` (-32000 for engine errors, -326xx for protocol
             errors), or ``None`` when the client refused the request before sending it or
             the connection failed.
    message: the server's (or client's) human-readable text.
    data:    the whole ``error.data`` object (``kind`` included), ``{}`` for client errors.
    """

    kind: str = ""

    def __init_subclass__(cls, kind: str | None = None, **kwargs: Any) -> None:
        """``class NotFoundError(AgentStateError, kind="not_found")`` sets the class's ``kind``;
        a subclass without one keeps its base's."""
        super().__init_subclass__(**kwargs)
        if kind is not None:
            cls.kind = kind

    def __init__(self, kind: str, code: int | None, message: str, data: dict[str, Any] | None = None):
        super().__init__(message)
        self.kind = kind
        self.code = code
        self.message = message
        self.data = dict(data) if data else {}

    @property
    def retryable(self) -> bool:
        """True when the same request may be sent again unchanged (an ``append_event`` with
        the same event ``id`` is deduplicated by the server): ``io_error``, ``unavailable`` and
        ``moved`` (at the address it names)."""
        return self.kind in ("io_error", "unavailable", "moved")

    def __str__(self) -> str:
        where = f" ({self.code})" if self.code is not None else ""
        return f"{self.kind}{where}: {self.message}"

    def __repr__(self) -> str:
        return f"{type(self).__name__}(kind={self.kind!r}, code={self.code!r}, message={self.message!r})"

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.kind, self.code, self.message, self.data))


class AlreadyExistsError(AgentStateError, kind="already_exists"):
    """``create_session`` with a session id already used in that (app, user)."""


class NotFoundError(AgentStateError, kind="not_found"):
    """The session (or, for ``inject_state``, a template key) does not exist."""


class InvalidArgumentError(AgentStateError, kind="invalid_argument"):
    """A value breaks a documented rule, or the request was malformed (codes -32700,
    -32600, -32601, -32602 carry this kind too)."""


class VersionConflictError(AgentStateError, kind="version_conflict"):
    """``expected_version`` differed from the session's version."""

    @property
    def current_version(self) -> int | None:
        """The session's version when the append was refused (``data.current_version``)."""
        return self.data.get("current_version")


class TooLargeError(AgentStateError, kind="too_large"):
    """A name, id, key, value, event, line or nesting depth is over its limit."""


class StorageFullError(AgentStateError, kind="storage_full"):
    """The store reached its maximum size."""


class IoError(AgentStateError, kind="io_error"):
    """The server's disk failed; nothing was acknowledged. Retryable."""


class UnavailableError(AgentStateError, kind="unavailable"):
    """The server cannot do it now: it is shutting down, the connection to it is gone, or
    (create_session) the user or app is still being deleted. Retryable."""


class InternalError(AgentStateError, kind="internal"):
    """A bug in the server (or a response the client cannot read)."""


class DataCorruptError(AgentStateError, kind="data_corrupt"):
    """Stored data failed a consistency check."""


class UnauthenticatedError(AgentStateError, kind="unauthenticated"):
    """The connection has not authenticated."""


class PermissionDeniedError(AgentStateError, kind="permission_denied"):
    """The connection may not perform this operation."""


class ConditionFailedError(AgentStateError, kind="condition_failed"):
    """A conditional state change (``compare_and_set``) found another value; nothing was
    appended."""


class CursorExpiredError(AgentStateError, kind="cursor_expired"):
    """A change cursor is older than the change log keeps (``read_changes`` from it, or a
    watch that fell further behind than the server's ``--change-retention``)."""

    @property
    def oldest(self) -> str | None:
        """The oldest cursor the server still serves (``data.oldest``): resuming from it
        accepts the gap; otherwise re-read the state."""
        return self.data.get("oldest")


class MovedError(AgentStateError, kind="moved"):
    """A cluster node does not own the request's shard (``serve --cluster --no-forward``):
    send the request again to the owner at ``address``. Retryable there."""

    @property
    def shard(self) -> int | None:
        """The request's shard."""
        v = self.data.get("shard")
        return v if isinstance(v, int) else None

    @property
    def owner(self) -> str | None:
        """The id of the node that owns the shard."""
        v = self.data.get("owner")
        return v if isinstance(v, str) else None

    @property
    def address(self) -> str | None:
        """The owner's ``HOST:PORT``."""
        v = self.data.get("address")
        return v if isinstance(v, str) else None


class WatchOverflowError(AgentStateError, kind="watch_overflow"):
    """Raised by a watch's iterator (never by the server) when its consumer fell so far
    behind that the batches waiting in the client passed the watch's ``max_buffer_bytes``.
    The client then unwatched it; every batch received before that was yielded, and the
    watch's ``resume_from`` (also in ``data["resume_from"]``) continues after the last one,
    missing nothing. ``code`` is None."""

    @property
    def resume_from(self) -> str | None:
        """Where a ``read_changes`` or a new watch continues without a gap."""
        return self.data.get("resume_from")


class SpawnError(AgentStateError, kind="spawn_failed"):
    """Raised by ``spawn`` (never by the server) when the agentstate executable cannot be
    started: none was found (no ``binary=``, no $AGENTSTATE_BIN, none on PATH), or the
    one named does not exist, is not executable or is not a program. ``code`` is None;
    ``data["binary"]`` is the path tried, when there was one. Not retryable."""


class ConnectionClosedError(UnavailableError):
    """The connection ended before this request was answered, or the client is closed.

    Whether an unanswered request took effect is unknown: re-send it (an ``append_event``
    with the same event ``id`` is safe) on a new connection. ``returncode`` is the spawned
    server's exit status when known, ``stderr`` the end of its log (spawned servers only).
    """

    def __init__(self, message: str, *, returncode: int | None = None, stderr: str = ""):
        super().__init__("unavailable", None, message)
        self.returncode = returncode
        self.stderr = stderr

    def __reduce__(self) -> tuple[Any, ...]:
        return (_rebuild_connection_closed, (self.message, self.returncode, self.stderr))


def _rebuild_connection_closed(message: str, returncode: int | None, stderr: str) -> ConnectionClosedError:
    return ConnectionClosedError(message, returncode=returncode, stderr=stderr)


_BY_KIND: dict[str, type[AgentStateError]] = {
    cls.kind: cls
    for cls in (
        AlreadyExistsError,
        NotFoundError,
        InvalidArgumentError,
        VersionConflictError,
        TooLargeError,
        StorageFullError,
        IoError,
        UnavailableError,
        InternalError,
        DataCorruptError,
        UnauthenticatedError,
        PermissionDeniedError,
        ConditionFailedError,
        CursorExpiredError,
        MovedError,
    )
}


def error_from_response(error: Any) -> AgentStateError:
    """The typed exception for a response's ``error`` member. A member that does not have
    the documented shape becomes an :class:`InternalError` describing it."""
    if not isinstance(error, dict):
        return InternalError("internal", None, f"server sent an error that is not an object: {error!r}")
    code = error.get("code")
    message = error.get("message")
    data = error.get("data")
    if not isinstance(code, int) or isinstance(code, bool) or not isinstance(message, str):
        return InternalError("internal", None, f"server sent a malformed error: {error!r}")
    if not isinstance(data, dict):
        data = {}
    kind = data.get("kind")
    if not isinstance(kind, str):
        kind = "internal"
    cls = _BY_KIND.get(kind, AgentStateError)
    return cls(kind, code, message, data)


def error_from_watch_end(error: Any) -> AgentStateError:
    """The typed exception for the ``error`` member of a ``watch_ended`` notification
    (``{"kind", "message", "oldest"?}``, reasons ``cursor_expired`` and ``failed``); ``code``
    is ENGINE_ERROR and ``data`` the member itself, so CursorExpiredError.oldest works."""
    if not isinstance(error, dict) or not isinstance(error.get("kind"), str):
        return InternalError("internal", None, f"server ended a watch with a malformed error: {error!r}")
    kind = error["kind"]
    message = error.get("message")
    if not isinstance(message, str):
        message = f"the watch ended: {kind}"
    cls = _BY_KIND.get(kind, AgentStateError)
    return cls(kind, ENGINE_ERROR, message, error)
