# SPDX-License-Identifier: Apache-2.0
"""Clients that retry: ClusterClient over the nodes of an agentstate cluster (``serve
--cluster``, docs/cluster.md), and ReconnectingClient, one server at an address that
survives the server's restart."""

from __future__ import annotations

import asyncio
import random
import ssl as _ssl
import uuid
from collections.abc import Sequence
from typing import Any

from ._protocol import ProtocolMethods
from .aio import AsyncClient, parse_address
from .errors import ConnectionClosedError, MovedError, UnavailableError
from .results import JsonValue

__all__ = ["ClusterClient", "ReconnectingClient"]

#: How many ``moved`` answers one call follows before it gives up.
MAX_MOVES = 8

#: Methods whose effect is that of one call when sent twice (an ``append_event`` and a
#: ``rewind_session`` given their ids first): what ReconnectingClient sends again after a
#: lost answer.
RESENDABLE = frozenset({
    "get_session", "list_sessions", "get_app_state", "get_user_state", "read_changes",
    "rewind_plan", "list_invocations", "inject_state", "stats", "ping", "flush", "cluster_map",
    "delete_session", "delete_user", "delete_app", "end_invocation", "append_event",
    "rewind_session",
})


class ClusterClient(ProtocolMethods):
    """The protocol's methods over a cluster's nodes. Any node answers any session's
    requests (it forwards them to the shard's owner), so a call goes to the node that
    answered last; a ``moved`` answer (a node started with ``--no-forward``) sends it to the
    owner's address; ``unavailable`` or a lost connection sends it to the next address, after
    a jittered exponential backoff (``backoff`` doubling up to ``max_backoff`` seconds), until
    ``retry_for`` seconds have passed since the call began: then the last error is raised.

    A retried request may already have run on a node that failed before answering. Appends
    are safe to retry: an ``append_event`` whose event has no ``"id"`` gets one here, and the
    server answers a stored id with the stored event instead of appending it again. Other
    writes (``create_session`` with an id, deletes) may come back as ``already_exists`` or
    ``not_found`` after such a retry.

    One connection per node, opened on first use (``token`` and ``ssl`` as
    AsyncClient.connect). Not for watches: use AsyncClient on one node. Use from one event
    loop; close() when done."""

    def __init__(self, addresses: Sequence[str | tuple[str, int]], *, token: str | None = None,
                 ssl: _ssl.SSLContext | None = None, retry_for: float = 10.0,
                 backoff: float = 0.05, max_backoff: float = 1.0) -> None:
        if isinstance(addresses, (str, tuple)) or not addresses:
            raise ValueError("addresses must be a non-empty list of node addresses")
        self._addresses = [self._key(a) for a in addresses]
        if retry_for < 0 or backoff <= 0 or max_backoff < backoff:
            raise ValueError("need retry_for >= 0 and 0 < backoff <= max_backoff")
        self._token = token
        self._ssl = ssl
        self._retry_for = retry_for
        self._backoff = backoff
        self._max_backoff = max_backoff
        self._clients: dict[str, AsyncClient] = {}
        self._current = 0
        self._closed = False

    @staticmethod
    def _key(address: str | tuple[str, int]) -> str:
        if isinstance(address, str) and address.startswith("unix:"):
            return address  # AsyncClient.connect checks the path
        host, port = parse_address(address)
        return f"[{host}]:{port}" if ":" in host else f"{host}:{port}"

    @property
    def addresses(self) -> list[str]:
        """The node addresses, in the order they are tried (``moved`` adds the owners')."""
        return list(self._addresses)

    async def _client(self, address: str) -> AsyncClient:
        client = self._clients.get(address)
        if client is None:
            client = await AsyncClient.connect(address, token=self._token, ssl=self._ssl)
            self._clients[address] = client
        return client

    async def _drop(self, address: str, client: AsyncClient | None = None) -> None:
        """Closes the connection to ``address`` (only if it is ``client``, when given: one
        opened since by another call stays)."""
        current = self._clients.get(address)
        if current is None or (client is not None and current is not client):
            return
        del self._clients[address]
        await current.close()

    async def call(self, method: str, params: dict[str, Any] | None = None) -> JsonValue:
        """Sends one request as the class says and gives its result. Raises what the node
        that answered raised; UnavailableError (or ConnectionClosedError) when no node
        answered within ``retry_for``."""
        if self._closed:
            raise UnavailableError("unavailable", None, "the cluster client is closed")
        if method == "append_event" and params is not None:
            event = params.get("event")
            if isinstance(event, dict) and not event.get("id"):
                params = dict(params, event=dict(event, id=uuid.uuid4().hex))
        elif method == "rewind_session" and params is not None and not params.get("event_id"):
            params = dict(params, event_id=uuid.uuid4().hex)
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self._retry_for
        wait = self._backoff
        moves = 0
        address = self._addresses[self._current]
        while True:
            client = None
            try:
                client = await self._client(address)
                result = await client.call(method, params)
                self._current = self._addresses.index(address)
                return result
            except MovedError as e:
                moves += 1
                owner = e.address
                if owner is None or moves > MAX_MOVES:
                    raise
                address = self._key(owner)
                if address not in self._addresses:
                    self._addresses.append(address)
            except UnavailableError as e:
                # Not answered here (a node down or fenced, a lost connection): the next
                # node, after a pause.
                if client is not None:
                    await self._drop(address, client)
                if client is not None and isinstance(e, ConnectionClosedError) and not self._may_resend(method):
                    raise ConnectionClosedError(
                        f"{method}: the connection to {address} was lost before the answer; "
                        f"whether the call took effect is unknown: {e.message}") from e
                if loop.time() + wait > deadline:
                    raise
                await asyncio.sleep(wait * random.uniform(0.5, 1.0))
                wait = min(wait * 2, self._max_backoff)
                i = (self._addresses.index(address) + 1) % len(self._addresses)
                address = self._addresses[i]

    def _may_resend(self, method: str) -> bool:
        """Whether a call whose answer was lost is sent again (every call, here)."""
        return True

    async def close(self) -> None:
        """Closes every node connection."""
        self._closed = True
        for address in list(self._clients):
            await self._drop(address)

    async def __aenter__(self) -> ClusterClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


class ReconnectingClient(ClusterClient):
    """The protocol's methods (as AsyncClient, without watches) on one server at
    ``address`` (``"HOST:PORT"`` or ``"unix:PATH"``), surviving a lost connection and a
    restart of the server: ClusterClient's retries on one address. After ``unavailable``
    or a lost connection a new connection is opened after a jittered exponential backoff
    (``backoff`` doubling up to ``max_backoff`` seconds, each pause 50-100% of it) and the
    call is sent again, until ``retry_for`` seconds have passed since it began; then the
    last UnavailableError (or ConnectionClosedError) is raised.

    A call whose answer was lost may have run. It is sent again when that is safe: reads,
    deletes, ``end_invocation``, ``flush``, and appends (an ``append_event`` whose event
    has no ``"id"`` gets one first, a ``rewind_session`` without ``event_id`` too, so the
    server answers a repeat with what it stored). Others (``create_session``,
    ``fork_session``, ``prune``, ...) raise ConnectionClosedError saying the call is in
    doubt; calls that never reached the server (the connection could not be opened) are
    always sent again. Use from one event loop; close() when done."""

    def __init__(self, address: str | tuple[str, int], *, token: str | None = None,
                 ssl: _ssl.SSLContext | None = None, retry_for: float = 10.0,
                 backoff: float = 0.05, max_backoff: float = 1.0) -> None:
        if isinstance(address, str) and address.startswith("unix:") and ssl is not None:
            raise ValueError("ssl applies to a TCP address; a Unix socket is not encrypted")
        super().__init__([address], token=token, ssl=ssl, retry_for=retry_for,
                         backoff=backoff, max_backoff=max_backoff)

    @property
    def address(self) -> str:
        """The server's address."""
        return self._addresses[0]

    def _may_resend(self, method: str) -> bool:
        return method in RESENDABLE
