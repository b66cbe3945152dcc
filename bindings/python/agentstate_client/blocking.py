# SPDX-License-Identifier: Apache-2.0
"""The blocking client: an AsyncClient on a private event-loop thread, for threaded and
synchronous programs."""

from __future__ import annotations

import asyncio
import concurrent.futures
import os
import ssl as _ssl
import threading
from collections.abc import Coroutine, Iterator
from typing import Any

from ._protocol import MAX_LINE_BYTES, ProtocolMethods
from .aio import AsyncClient, NotificationHandler
from .errors import ConnectionClosedError

__all__ = ["Client"]


class Client(ProtocolMethods):
    """A blocking connection to one ``agentstate serve``: the same methods as AsyncClient
    (see ProtocolMethods), each returning its result.

    Threads: every method may be called from any number of threads at once; calls from
    different threads are pipelined on the one connection (each blocks only its caller).
    The connection runs on a private daemon thread with its own event loop, started by
    spawn()/connect() and ended by close(). ``on_notification`` runs on that thread and
    must not call this client (it would wait on itself).
    """

    def __init__(self, loop: asyncio.AbstractEventLoop, thread: threading.Thread,
                 inner: AsyncClient):
        """Private: use spawn() or connect()."""
        self._loop = loop
        self._thread = thread
        self._inner = inner
        self._lock = threading.Lock()   # guards _closed against calls racing close()
        self._closed = False
        self._close_done = threading.Event()
        self._close_error: BaseException | None = None

    @classmethod
    def spawn(cls, store: str | os.PathLike[str] | None = None, *, memory: bool = False,
              binary: str | os.PathLike[str] | None = None, durability: str | None = None,
              threads: int | None = None, max_line_bytes: int | None = None,
              on_notification: NotificationHandler | None = None) -> Client:
        """AsyncClient.spawn, blocking: same arguments, same errors."""
        return cls._start(lambda: AsyncClient.spawn(
            store, memory=memory, binary=binary, durability=durability, threads=threads,
            max_line_bytes=max_line_bytes, on_notification=on_notification))

    @classmethod
    def connect(cls, address: str | tuple[str, int], *, token: str | None = None,
                ssl: _ssl.SSLContext | None = None, server_hostname: str | None = None,
                max_line_bytes: int = MAX_LINE_BYTES,
                on_notification: NotificationHandler | None = None) -> Client:
        """AsyncClient.connect, blocking: same arguments, same errors."""
        return cls._start(lambda: AsyncClient.connect(
            address, token=token, ssl=ssl, server_hostname=server_hostname,
            max_line_bytes=max_line_bytes, on_notification=on_notification))

    @classmethod
    def _start(cls, make: Any) -> Client:
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=_run_loop, args=(loop,), name="agentstate-client",
                                  daemon=True)
        thread.start()
        try:
            inner = asyncio.run_coroutine_threadsafe(make(), loop).result()
        except BaseException:
            _stop_loop(loop, thread)
            raise
        return cls(loop, thread, inner)

    def _run(self, coro: Coroutine[Any, Any, Any]) -> Any:
        with self._lock:
            if self._closed:
                coro.close()
                raise ConnectionClosedError("the client is closed")
            fut = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return fut.result()
        except concurrent.futures.CancelledError:
            raise ConnectionClosedError("the request was cancelled because the client closed") from None

    def call(self, method: str, params: dict[str, Any] | None = None) -> Any:
        """AsyncClient.call, blocking."""
        return self._run(self._inner.call(method, params))

    def iter_sessions(self, app_name: str, user_id: str | None = None, *,
                      page_size: int | None = None, order: str | None = None,
                      order_by: str | None = None) -> Iterator[dict[str, Any]]:
        """Every SessionMeta of ``list_sessions``, page after page (one request per page,
        made when the previous page is used up), until ``next_page_token`` is null."""
        token = None
        while True:
            page = self.list_sessions(app_name, user_id, page_size=page_size,
                                      page_token=token, order=order, order_by=order_by)
            yield from page["sessions"]
            token = page.get("next_page_token")
            if token is None:
                return

    @property
    def returncode(self) -> int | None:
        """AsyncClient.returncode."""
        return self._inner.returncode

    @property
    def server_stderr(self) -> str:
        """AsyncClient.server_stderr."""
        return self._inner.server_stderr

    def close(self) -> None:
        """AsyncClient.close, then stops the private thread. Calls made before close()
        get their responses; calls made after raise ConnectionClosedError. A second
        close() waits for the first and raises what it raised."""
        with self._lock:
            first = not self._closed
            self._closed = True
        if first:
            try:
                asyncio.run_coroutine_threadsafe(self._inner.close(), self._loop).result()
            except BaseException as e:
                self._close_error = e
            finally:
                _stop_loop(self._loop, self._thread)
                self._close_done.set()
        else:
            self._close_done.wait()
        if self._close_error is not None:
            raise self._close_error

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _run_loop(loop: asyncio.AbstractEventLoop) -> None:
    asyncio.set_event_loop(loop)
    try:
        loop.run_forever()
    finally:
        loop.close()


def _stop_loop(loop: asyncio.AbstractEventLoop, thread: threading.Thread) -> None:
    loop.call_soon_threadsafe(loop.stop)
    thread.join()
