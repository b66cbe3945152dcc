# SPDX-License-Identifier: Apache-2.0
"""The blocking client: an AsyncClient on a private event-loop thread, for threaded and
synchronous programs."""

from __future__ import annotations

import asyncio
import concurrent.futures
import functools
import os
import ssl as _ssl
import threading
from collections.abc import Awaitable, Callable, Coroutine, Iterator
from typing import Any, Concatenate, Literal, ParamSpec, TypeVar, cast, overload

from ._protocol import MAX_LINE_BYTES, ProtocolMethods
from .aio import AsyncClient, NotificationHandler
from .errors import ConnectionClosedError
from .results import ChangeBatch, JsonObject, JsonValue, SessionMeta, StateWithCursor
from .watch import DEFAULT_MAX_BUFFER_BYTES, AsyncWatch

__all__ = ["Client", "Watch"]

_P = ParamSpec("_P")
_T = TypeVar("_T")


def _blocking(method: Callable[Concatenate[ProtocolMethods, _P], Coroutine[Any, Any, _T]],
              ) -> Callable[Concatenate[Client, _P], _T]:
    """The blocking form of one of ProtocolMethods' coroutines: same parameters, same
    docstring, the coroutine's result."""
    @functools.wraps(method)   # help() and inspect.signature show the coroutine's
    def blocking(self: Client, /, *args: _P.args, **kwargs: _P.kwargs) -> _T:
        return self._run(method(self._inner, *args, **kwargs))
    blocking.__qualname__ = f"Client.{method.__name__}"
    return blocking


class Client:
    """A blocking connection to one ``agentstate serve``: the same methods as AsyncClient
    (see ProtocolMethods), each blocking until it returns its result.

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
    def _start(cls, make: Callable[[], Awaitable[AsyncClient]]) -> Client:
        loop = asyncio.new_event_loop()
        thread = threading.Thread(target=_run_loop, args=(loop,), name="agentstate-client",
                                  daemon=True)
        thread.start()
        try:
            async def made() -> AsyncClient:
                return await make()
            inner = asyncio.run_coroutine_threadsafe(made(), loop).result()
        except BaseException:
            _stop_loop(loop, thread)
            raise
        return cls(loop, thread, inner)

    def _run(self, coro: Coroutine[Any, Any, _T]) -> _T:
        with self._lock:
            if self._closed:
                coro.close()
                raise ConnectionClosedError("the client is closed")
            fut = asyncio.run_coroutine_threadsafe(coro, self._loop)
        try:
            return fut.result()
        except concurrent.futures.CancelledError:
            raise ConnectionClosedError("the request was cancelled because the client closed") from None

    def call(self, method: str, params: dict[str, Any] | None = None) -> JsonValue:
        """AsyncClient.call, blocking."""
        return self._run(self._inner.call(method, params))

    create_session = _blocking(ProtocolMethods.create_session)
    get_session = _blocking(ProtocolMethods.get_session)
    rewind_session = _blocking(ProtocolMethods.rewind_session)
    rewind_plan = _blocking(ProtocolMethods.rewind_plan)
    list_invocations = _blocking(ProtocolMethods.list_invocations)
    fork_session = _blocking(ProtocolMethods.fork_session)
    list_sessions = _blocking(ProtocolMethods.list_sessions)
    delete_session = _blocking(ProtocolMethods.delete_session)
    delete_user = _blocking(ProtocolMethods.delete_user)
    delete_app = _blocking(ProtocolMethods.delete_app)
    append_event = _blocking(ProtocolMethods.append_event)
    end_invocation = _blocking(ProtocolMethods.end_invocation)
    inject_state = _blocking(ProtocolMethods.inject_state)
    read_changes = _blocking(ProtocolMethods.read_changes)
    unwatch = _blocking(ProtocolMethods.unwatch)
    flush = _blocking(ProtocolMethods.flush)
    stats = _blocking(ProtocolMethods.stats)
    ping = _blocking(ProtocolMethods.ping)
    authenticate = _blocking(ProtocolMethods.authenticate)

    @overload
    def get_app_state(self, app_name: str, *,
                      with_cursor: Literal[False] | None = None) -> JsonObject: ...

    @overload
    def get_app_state(self, app_name: str, *, with_cursor: Literal[True]) -> StateWithCursor: ...

    @overload
    def get_app_state(self, app_name: str, *,
                      with_cursor: bool | None = None) -> JsonObject | StateWithCursor: ...

    def get_app_state(self, app_name: str, *,
                      with_cursor: bool | None = None) -> JsonObject | StateWithCursor:
        """AsyncClient.get_app_state, blocking."""
        return self._run(ProtocolMethods.get_app_state(self._inner, app_name,
                                                       with_cursor=with_cursor))

    @overload
    def get_user_state(self, app_name: str, user_id: str, *,
                       with_cursor: Literal[False] | None = None) -> JsonObject: ...

    @overload
    def get_user_state(self, app_name: str, user_id: str, *,
                       with_cursor: Literal[True]) -> StateWithCursor: ...

    @overload
    def get_user_state(self, app_name: str, user_id: str, *,
                       with_cursor: bool | None = None) -> JsonObject | StateWithCursor: ...

    def get_user_state(self, app_name: str, user_id: str, *,
                       with_cursor: bool | None = None) -> JsonObject | StateWithCursor:
        """AsyncClient.get_user_state, blocking."""
        return self._run(ProtocolMethods.get_user_state(self._inner, app_name, user_id,
                                                        with_cursor=with_cursor))

    def watch(self, scope: str, *, app_name: str | None = None, user_id: str | None = None,
              session_id: str | None = None, include_sessions: bool | None = None,
              key_prefix: str | None = None, from_: str | None = None,
              max_buffer_bytes: int = DEFAULT_MAX_BUFFER_BYTES) -> Watch:
        """AsyncClient.watch, blocking: returns once the watch has started, as a Watch
        (``with c.watch(...) as w: for batch in w: ...``)."""
        start = self._inner.watch(scope, app_name=app_name, user_id=user_id,
                                  session_id=session_id, include_sessions=include_sessions,
                                  key_prefix=key_prefix, from_=from_,
                                  max_buffer_bytes=max_buffer_bytes)

        async def started() -> AsyncWatch:
            return await start

        return Watch(self, self._run(started()))

    def iter_sessions(self, app_name: str, user_id: str | None = None, *,
                      page_size: int | None = None, order: str | None = None,
                      order_by: str | None = None) -> Iterator[SessionMeta]:
        """Every SessionMeta of ``list_sessions``, page after page (one request per page,
        made when the previous page is used up), until ``next_page_token`` is null."""
        token = None
        while True:
            page = self.list_sessions(app_name, user_id, page_size=page_size,
                                      page_token=token, order=order, order_by=order_by)
            yield from page["sessions"]
            token = page["next_page_token"]
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


class Watch:
    """A running watch of a blocking Client: ``for batch in w`` yields ``{"changes":
    [...], "cursor": C}`` in commit order, blocking until one arrives; ``next_batch(timeout)``
    waits at most ``timeout`` seconds. ``close()`` (or leaving ``with``) unwatches it and
    gives ``resume_from``. ``cursor``, ``reason``, ``resume_from``, the end of the
    iteration, its errors and the ``max_buffer_bytes`` bound: as AsyncWatch. Any thread
    may call it, one consumer at a time; the batches are held on the client's thread."""

    def __init__(self, client: Client, inner: AsyncWatch):
        """Private: use Client.watch()."""
        self._client = client
        self._inner = inner

    @property
    def watch_id(self) -> str:
        return self._inner.watch_id

    @property
    def cursor(self) -> str:
        """AsyncWatch.cursor."""
        return self._inner.cursor

    @property
    def reason(self) -> str | None:
        """AsyncWatch.reason."""
        return self._inner.reason

    @property
    def resume_from(self) -> str | None:
        """AsyncWatch.resume_from."""
        return self._inner.resume_from

    def next_batch(self, timeout: float | None = None) -> ChangeBatch | None:
        """The next batch; None once the watch has ended quietly. Raises TimeoutError
        when none arrives within ``timeout`` seconds (nothing is lost: call again), and
        what AsyncWatch's iteration raises."""
        async def step() -> ChangeBatch | None:
            try:
                return await asyncio.wait_for(self._inner.__anext__(), timeout)
            except StopAsyncIteration:
                return None
        return self._client._run(step())

    def __iter__(self) -> Iterator[ChangeBatch]:
        while (batch := self.next_batch()) is not None:
            yield batch

    def close(self) -> str | None:
        """AsyncWatch.aclose, blocking; returns ``resume_from``. After the client is
        closed it only reports what is known."""
        try:
            return self._client._run(self._inner.aclose())
        except ConnectionClosedError:
            return self._inner.resume_from

    def __enter__(self) -> Watch:
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
