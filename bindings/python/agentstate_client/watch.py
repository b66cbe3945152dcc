# SPDX-License-Identifier: Apache-2.0
"""AsyncWatch: one ``watch`` of an AsyncClient's connection, as an async iterator of
batches (docs/protocol.md, "watch, unwatch")."""

from __future__ import annotations

import asyncio
import collections
from collections.abc import Coroutine, Generator
from typing import TYPE_CHECKING, Any, cast

from .errors import (
    AgentStateError,
    ConnectionClosedError,
    NotFoundError,
    WatchOverflowError,
    error_from_watch_end,
)
from .results import Change, ChangeBatch

if TYPE_CHECKING:
    from .aio import AsyncClient

__all__ = ["AsyncWatch", "DEFAULT_MAX_BUFFER_BYTES"]

# The batches one watch may hold in the client, waiting for its consumer, as bytes of
# their notification lines (one batch is always accepted, however large).
DEFAULT_MAX_BUFFER_BYTES = 16 * 1024 * 1024


class AsyncWatch:
    """A running watch: ``async for batch in w`` yields the server's ``changes``
    notifications in commit order, each ``{"changes": [Change...], "cursor": C}`` (an empty
    ``changes`` is idle progress: the cursor moved past changes the watch does not take).

    Made by ``AsyncClient.watch(...)``; leave it with ``async with`` (or ``aclose()``),
    which unwatches it. Use it from the client's event loop only.

    - ``cursor``: past every batch yielded so far (at first: where the watch started).
    - ``reason``: None while it runs; then the server's ``watch_ended`` reason
      (``cancelled``, ``closing``, ``cursor_expired``, ``failed``), ``overflow`` (see
      below) or ``connection_closed``.
    - ``resume_from``: None while it runs; then a cursor from which ``read_changes`` or a
      new watch gives every change after the last batch yielded, once and with no gap.
      Batches received but not yet yielded when ``aclose()`` runs are dropped, and
      ``resume_from`` is then the ``cursor`` of the last one yielded.

    The iteration ends quietly when the watch is cancelled (``aclose()``, ``unwatch``) or
    the server is closing (a ``watch_ended`` without ``error``); it raises the error a
    ``watch_ended`` carries: CursorExpiredError (``.oldest``) when the watch fell behind
    the server's change retention, the server's error for ``failed``;
    ConnectionClosedError when the connection ended, and WatchOverflowError as below. It
    raises only after yielding every batch received before the end.

    Memory: the client's reader never waits for a consumer (responses to other requests
    on the connection must keep flowing), so batches wait in the watch. When adding one
    would pass ``max_buffer_bytes`` (line bytes; one batch is always accepted), the client
    unwatches the watch, drops what arrives after, and the iteration raises
    WatchOverflowError once the batches already held are yielded; ``resume_from`` then
    continues exactly after them. A consumer that keeps up never sees this.
    """

    def __init__(self, client: AsyncClient, watch_id: str, cursor: str, max_buffer_bytes: int):
        """Private: made by AsyncClient.watch, on the reader, before the next line is read."""
        self._client = client
        self._watch_id = watch_id
        self._cursor = cursor
        self._max_buffer_bytes = max_buffer_bytes
        # ("batch", params, bytes) | ("end", reason, resume_from, error | None)
        self._queue: collections.deque[tuple[Any, ...]] = collections.deque()
        self._queued_bytes = 0
        self._last_queued_cursor = cursor
        self._stopped = False      # reader side: nothing more is queued (an "end" is)
        self._finished = False     # consumer side: the end was taken or aclose() ran
        self._reason: str | None = None
        self._resume_from: str | None = None
        self._wakeup = asyncio.Event()
        self._closing: asyncio.Task[str | None] | None = None
        self._unwatch_task: asyncio.Task[Any] | None = None

    @property
    def watch_id(self) -> str:
        return self._watch_id

    @property
    def cursor(self) -> str:
        """Past every batch yielded so far (or where the watch started)."""
        return self._cursor

    @property
    def reason(self) -> str | None:
        """Why the watch ended (None while it runs or has batches left to yield)."""
        return self._reason

    @property
    def resume_from(self) -> str | None:
        """Where to continue after the end (None while it runs)."""
        return self._resume_from

    # -- the reader's side (AsyncClient._dispatch_line; synchronous, in line order) ----

    def _on_changes(self, params: dict[str, Any], nbytes: int) -> None:
        if self._stopped:
            return  # after an overflow: the server has not seen the unwatch yet
        if self._queue and self._queued_bytes + nbytes > self._max_buffer_bytes:
            self._stop(("end", "overflow", self._last_queued_cursor, None))
            self._unwatch_task = self._client._loop.create_task(self._unwatch_quietly())
            return
        self._queue.append(("batch", params, nbytes))
        self._queued_bytes += nbytes
        self._last_queued_cursor = params["cursor"]
        self._wakeup.set()

    def _on_ended(self, params: dict[str, Any]) -> None:
        """``watch_ended``: the server sends no more for this watch."""
        self._client._watches.pop(self._watch_id, None)
        if self._stopped:
            return
        # A reason with an error (cursor_expired, failed) raises it; one without ends quietly.
        error = error_from_watch_end(params["error"]) if "error" in params else None
        self._stop(("end", params["reason"], params["resume_from"], error))

    def _on_connection_end(self, error: ConnectionClosedError) -> None:
        if not self._stopped:
            self._stop(("end", "connection_closed", None, error))

    def _abandon(self) -> None:
        """The ``watch`` caller was cancelled before it got this watch: end it (its
        notifications, until the server's watch_ended, are dropped)."""
        if self._stopped:
            return
        self._finished = True
        self._stopped = True
        self._queue.clear()
        self._queued_bytes = 0
        self._unwatch_task = self._client._loop.create_task(self._unwatch_quietly())

    def _stop(self, end: tuple[Any, ...]) -> None:
        self._stopped = True
        self._queue.append(end)
        self._wakeup.set()

    async def _unwatch_quietly(self) -> None:
        try:
            await self._client.unwatch(self._watch_id)
        except AgentStateError:
            pass  # already ended, or the connection is gone: either way it sends no more

    # -- the consumer's side -------------------------------------------------------

    def __aiter__(self) -> AsyncWatch:
        return self

    async def __anext__(self) -> ChangeBatch:
        """The next batch, waiting for one. Cancelling the wait loses nothing."""
        while True:
            if self._finished:
                raise StopAsyncIteration
            if self._queue:
                item = self._queue.popleft()
                if item[0] == "batch":
                    _, params, nbytes = item
                    self._queued_bytes -= nbytes
                    self._cursor = params["cursor"]
                    return {"changes": cast(list[Change], params["changes"]),
                            "cursor": params["cursor"]}
                _, reason, resume_from, error = item
                self._finish(reason, resume_from if resume_from is not None else self._cursor)
                if reason == "overflow":
                    raise WatchOverflowError(
                        "watch_overflow", None,
                        f"watch {self._watch_id}: the consumer fell more than "
                        f"{self._max_buffer_bytes} bytes of batches behind; resume from "
                        f"resume_from", {"kind": "watch_overflow", "resume_from": self._resume_from})
                if error is not None:
                    raise error
                raise StopAsyncIteration
            self._wakeup.clear()
            await self._wakeup.wait()

    def _finish(self, reason: str, resume_from: str | None) -> None:
        self._finished = True
        self._reason = reason
        self._resume_from = resume_from
        self._queue.clear()
        self._queued_bytes = 0
        self._wakeup.set()

    async def aclose(self) -> str | None:
        """Ends the watch (``unwatch`` unless it has ended already) and gives
        ``resume_from``. Batches not yet yielded are dropped (``resume_from`` then follows
        the last batch yielded). Safe to call more than once and concurrently; a closed
        connection is not an error here."""
        if self._closing is None:
            self._closing = self._client._loop.create_task(self._close())
        return await asyncio.shield(self._closing)

    async def _close(self) -> str | None:
        answer = None
        if not self._stopped:
            try:
                answer = await self._client.unwatch(self._watch_id)
            except (NotFoundError, ConnectionClosedError):
                pass  # it ended meanwhile: its end (or the connection's) is queued
        elif self._unwatch_task is not None:
            await self._unwatch_task
        if self._finished:
            return self._resume_from
        # Everything still queued is dropped; only an end left alone keeps its resume_from.
        end = self._queue[-1] if self._queue and self._queue[-1][0] == "end" else None
        if end is not None and len(self._queue) == 1 and end[2] is not None:
            self._finish(end[1], end[2])
        elif not self._queue and isinstance(answer, dict) and isinstance(answer.get("resume_from"), str):
            self._finish("cancelled", answer["resume_from"])
        else:
            self._finish(end[1] if end is not None else "cancelled", self._cursor)
        return self._resume_from

    async def __aenter__(self) -> AsyncWatch:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()


class WatchStart:
    """What ``AsyncClient.watch(...)`` returns: ``await`` it for the AsyncWatch, or use
    it directly in ``async with`` (which awaits it, then closes the watch at the end)."""

    def __init__(self, start: Coroutine[Any, Any, AsyncWatch]):
        self._start = start        # a coroutine giving the AsyncWatch
        self._watch: AsyncWatch | None = None

    def __await__(self) -> Generator[Any, None, AsyncWatch]:
        return self._start.__await__()

    async def __aenter__(self) -> AsyncWatch:
        watch = await self._start
        self._watch = watch
        return watch

    async def __aexit__(self, *exc: object) -> None:
        assert self._watch is not None
        await self._watch.aclose()
