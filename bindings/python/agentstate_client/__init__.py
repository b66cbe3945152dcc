# SPDX-License-Identifier: Apache-2.0
"""agentstate_client: a client for ``agentstate serve`` (docs/protocol.md), standard
library only, Python >= 3.11.

- AsyncClient: asyncio; ``await AsyncClient.spawn(store=DIR)`` starts the server as a
  child process over stdin/stdout, ``await AsyncClient.connect("127.0.0.1:7400")`` uses
  TCP (``ssl=`` for TLS, ``"unix:PATH"`` for a Unix socket, ``token=`` for a server with
  --auth-file). Requests may be awaited concurrently; responses are matched by id.
- Client: the same methods, blocking, safe to call from many threads at once.
- ReconnectingClient: AsyncClient's methods on one server at an address, surviving its
  restart (reconnects with backoff, re-sends what is safe to re-send: appends by event id);
  ClusterClient: the same over the nodes of a cluster.
- AsyncWatch / Watch: a change-feed watch (``client.watch(...)``) as an iterator of batches.
- errors: AgentStateError and one subclass per ``error.data.kind``.
- results: the TypedDicts of the results (Session, Event, Change, ...).
"""

from ._protocol import MAX_LINE_BYTES, MAX_LINE_DEPTH
from .aio import AsyncClient, find_binary, parse_address
from .blocking import Client, Watch
from .cluster import ClusterClient, ReconnectingClient
from .errors import (
    ENGINE_ERROR,
    INVALID_PARAMS,
    INVALID_REQUEST,
    METHOD_NOT_FOUND,
    PARSE_ERROR,
    AgentStateError,
    AlreadyExistsError,
    ConditionFailedError,
    ConnectionClosedError,
    CursorExpiredError,
    MovedError,
    DataCorruptError,
    InternalError,
    InvalidArgumentError,
    IoError,
    NotFoundError,
    PermissionDeniedError,
    SpawnError,
    StorageFullError,
    TooLargeError,
    UnauthenticatedError,
    UnavailableError,
    VersionConflictError,
    WatchOverflowError,
    error_from_response,
    error_from_watch_end,
)
from .results import (
    AppendResult,
    AsOf,
    AuthResult,
    Change,
    ChangeBatch,
    ChangesPage,
    Event,
    EventActions,
    Invocation,
    JsonObject,
    JsonValue,
    RewindPlan,
    ServerStats,
    Session,
    SessionMeta,
    SessionPage,
    StateWithCursor,
    Stats,
    UnwatchResult,
)
from .watch import AsyncWatch, WatchStart

__all__ = [
    "AsyncClient", "Client", "AsyncWatch", "Watch", "find_binary", "parse_address", "MAX_LINE_BYTES", "MAX_LINE_DEPTH",
    "AgentStateError", "AlreadyExistsError", "NotFoundError", "InvalidArgumentError",
    "VersionConflictError", "TooLargeError", "StorageFullError", "IoError", "UnavailableError",
    "InternalError", "DataCorruptError", "UnauthenticatedError", "PermissionDeniedError",
    "ConditionFailedError", "CursorExpiredError", "MovedError", "ClusterClient", "ReconnectingClient", "WatchOverflowError", "SpawnError", "ConnectionClosedError", "error_from_response",
    "error_from_watch_end",
    "PARSE_ERROR", "INVALID_REQUEST", "METHOD_NOT_FOUND", "INVALID_PARAMS", "ENGINE_ERROR",
    "WatchStart", "JsonValue", "JsonObject", "EventActions", "Event", "AsOf", "SessionMeta",
    "Session", "SessionPage", "AppendResult", "RewindPlan", "Invocation", "StateWithCursor",
    "Change", "ChangesPage", "ChangeBatch", "UnwatchResult", "ServerStats", "Stats",
    "AuthResult",
]
