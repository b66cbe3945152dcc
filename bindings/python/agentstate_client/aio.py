# SPDX-License-Identifier: Apache-2.0
"""The asyncio client: one connection to ``agentstate serve`` (a spawned process over
stdin/stdout, TCP with or without TLS, or a Unix socket), any number of requests in
flight, responses matched by id."""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import ssl as _ssl
from collections.abc import AsyncIterator, Callable
from typing import Any, cast

from ._protocol import MAX_LINE_BYTES, READ_LIMIT, ProtocolMethods, change_params, encode_request
from .errors import AgentStateError, ConnectionClosedError, SpawnError, error_from_response
from .results import JsonValue, SessionMeta
from .watch import DEFAULT_MAX_BUFFER_BYTES, AsyncWatch, WatchStart

__all__ = ["AsyncClient", "find_binary", "parse_address"]

_log = logging.getLogger("agentstate_client")

# How much of a spawned server's stderr is kept for error messages (the end of it).
_STDERR_TAIL_BYTES = 16 * 1024

NotificationHandler = Callable[[str, Any], None]


def find_binary(binary: str | os.PathLike[str] | None = None) -> str:
    """The agentstate executable: ``binary`` if given, else $AGENTSTATE_BIN, else
    ``agentstate`` on PATH. Raises SpawnError naming all three when none is set."""
    return _locate_binary(binary)[0]


def _locate_binary(binary: str | os.PathLike[str] | None) -> tuple[str, str]:
    """find_binary, with where the path came from (for messages)."""
    if binary is not None:
        return os.fspath(binary), "binary="
    env = os.environ.get("AGENTSTATE_BIN")
    if env:
        return env, "$AGENTSTATE_BIN"
    found = shutil.which("agentstate")
    if found:
        return found, "PATH"
    raise SpawnError("spawn_failed", None,
                     "agentstate executable not found: pass binary=..., set AGENTSTATE_BIN, "
                     "or put agentstate on PATH")


def parse_address(address: str | tuple[str, int]) -> tuple[str, int]:
    """``"HOST:PORT"``, ``"[V6]:PORT"`` or ``(host, port)`` -> ``(host, port)``. Raises
    ValueError for anything else, and for a port outside 1..65535."""
    host: object
    port: object
    if isinstance(address, tuple) and len(address) == 2:
        host, port = address
    elif isinstance(address, str):
        if address.startswith("["):
            host, _, rest = address[1:].partition("]")
            if not rest.startswith(":"):
                raise ValueError(f"address {address!r}: expected [HOST]:PORT")
            port = rest[1:]
        else:
            host, sep, port = address.rpartition(":")
            if not sep:
                raise ValueError(f"address {address!r}: expected HOST:PORT")
    else:
        raise ValueError(f"address {address!r}: expected 'HOST:PORT' or (host, port)")
    if not isinstance(host, str) or not host:
        raise ValueError(f"address {address!r}: the host is empty")
    try:
        port_number = int(port)  # type: ignore[call-overload]  # checked: ValueError
    except (TypeError, ValueError):
        raise ValueError(f"address {address!r}: the port is not a number") from None
    if isinstance(port, bool) or not 1 <= port_number <= 65535:
        raise ValueError(f"address {address!r}: the port must be 1..65535")
    return host, port_number


class _Violation(Exception):
    """The server sent something the protocol does not allow; the stream cannot be
    trusted any further."""


class AsyncClient(ProtocolMethods):
    """A connection to one ``agentstate serve``.

    Create with :meth:`spawn` (a child process over stdin/stdout) or :meth:`connect`
    (TCP, TLS or a Unix socket, with a token when the server requires one); end with :meth:`close` (or ``async with``). Every protocol method is a
    coroutine (see ProtocolMethods); any number may be awaited concurrently from tasks of
    the loop the client was created on: each request gets its own id, is written as one
    line and is matched with its response by id, whatever order responses come in.
    Requests about one session run in the order they were written.

    Not thread-safe: use it from its own event loop only (the blocking ``Client`` runs one
    on a private thread for threaded programs).

    ``on_notification(method, params)``: called on the loop, in arrival order, for every
    server notification (a message with ``method`` and no ``id``) that is not for a watch
    made with :meth:`watch` (those go to their AsyncWatch); it must not block. An
    exception it raises is logged and does not affect requests.
    """

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter, *,
                 max_line_bytes: int = MAX_LINE_BYTES,
                 on_notification: NotificationHandler | None = None,
                 process: asyncio.subprocess.Process | None = None,
                 description: str = "agentstate serve"):
        """Private: use spawn() or connect()."""
        self._loop = asyncio.get_running_loop()
        self._reader = reader
        self._writer = writer
        self._max_line_bytes = max_line_bytes
        self._on_notification = on_notification
        self._process = process
        self._description = description
        self._pending: dict[int, asyncio.Future[Any]] = {}
        # Run by the reader on a request's result before the next line is read (so that
        # state the result creates, such as a watch's routing, exists for that line).
        self._result_hooks: dict[int, Callable[[Any, bool], Any]] = {}
        self._watches: dict[str, AsyncWatch] = {}   # by watch_id, until its watch_ended
        self._next_id = 0
        self._closing = False        # close() or abort started: no new requests
        self._ended: ConnectionClosedError | None = None  # why the stream ended
        self._stderr_tail = bytearray()
        self._stderr_task = None
        if process is not None and process.stderr is not None:
            self._stderr_task = self._loop.create_task(self._drain_stderr(process.stderr))
        self._reader_task = self._loop.create_task(self._read_loop())
        self._close_task: asyncio.Task[None] | None = None

    # -- creation ------------------------------------------------------------------

    @classmethod
    async def spawn(cls, store: str | os.PathLike[str] | None = None, *, memory: bool = False,
                    binary: str | os.PathLike[str] | None = None, durability: str | None = None,
                    threads: int | None = None, max_line_bytes: int | None = None,
                    on_notification: NotificationHandler | None = None) -> AsyncClient:
        """Starts ``agentstate serve --store STORE`` (or ``--memory``) as a child process
        and returns a client on its stdin/stdout, after one round trip has shown the store
        is open. The executable: ``binary``, else $AGENTSTATE_BIN, else PATH.

        Raises ValueError unless exactly one of ``store`` and ``memory=True`` is given;
        SpawnError when no executable is found, or the one found does not exist, is not
        executable or cannot be run; ConnectionClosedError (with the exit
        status and the server's stderr) when the server exits instead of answering, e.g.
        because another process owns the store. The server's stderr is kept (its last
        16 KiB, see ``server_stderr``), not forwarded."""
        if (store is None) == (not memory):
            raise ValueError("give exactly one of store=DIR and memory=True")
        path, source = _locate_binary(binary)
        args = [path, "serve"]
        args += ["--memory"] if memory or store is None else ["--store", os.fspath(store)]
        if durability is not None:
            args += ["--durability", durability]
        if threads is not None:
            args += ["--threads", str(threads)]
        if max_line_bytes is not None:
            args += ["--max-line-bytes", str(max_line_bytes)]
        try:
            proc = await asyncio.create_subprocess_exec(
                *args, stdin=asyncio.subprocess.PIPE, stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE, limit=READ_LIMIT)
        except OSError as e:
            raise SpawnError("spawn_failed", None,
                             f"cannot run the agentstate executable {path!r} (from {source}): "
                             f"{e.strerror or e}", {"binary": path}) from e
        assert proc.stdout is not None and proc.stdin is not None  # both are PIPE
        client = cls(proc.stdout, proc.stdin,
                     max_line_bytes=max_line_bytes if max_line_bytes is not None else MAX_LINE_BYTES,
                     on_notification=on_notification, process=proc,
                     description=f"agentstate serve (pid {proc.pid})")
        try:
            await client.call("stats")
        except BaseException:
            await client._abort()
            raise
        return client

    @classmethod
    async def connect(cls, address: str | tuple[str, int], *,
                      token: str | None = None,
                      ssl: _ssl.SSLContext | None = None,
                      server_hostname: str | None = None,
                      max_line_bytes: int = MAX_LINE_BYTES,
                      on_notification: NotificationHandler | None = None) -> AsyncClient:
        """A client on a connection to ``agentstate serve --listen``. ``address``:
        ``"HOST:PORT"``, ``"[V6]:PORT"`` or ``(host, port)`` for TCP; ``"unix:PATH"`` for a
        Unix socket. ``max_line_bytes`` must not exceed the server's --max-line-bytes
        (default 16 MiB): longer requests are refused locally with TooLargeError.

        ``token``: sent in ``authenticate`` as the connection's first request (a server
        started with --auth-file); the client is returned once the server has accepted it.
        ``ssl``: TLS on a TCP address (``serve --tls-cert``), with this context (load a CA
        for a self-signed server, a certificate chain for --tls-client-ca);
        ``server_hostname``: the name the server's certificate is checked against, default
        the address's host.

        Raises ValueError for a malformed address, or ``ssl`` with a Unix socket;
        ConnectionClosedError when the connection (or the TLS handshake) cannot be made;
        UnauthenticatedError when the server refuses the token (the connection is then
        closed). The token never appears in a message."""
        if token is not None and (not isinstance(token, str) or not token):
            raise ValueError("token must be a non-empty string")
        if ssl is not None and not isinstance(ssl, _ssl.SSLContext):
            raise ValueError(f"ssl must be an ssl.SSLContext, not {type(ssl).__name__}")
        if isinstance(address, str) and address.startswith("unix:"):
            path = address[len("unix:"):]
            if not path or "\0" in path or len(os.fsencode(path)) > 107:
                raise ValueError(f"address {address!r}: a Unix socket path must be 1 to 107 "
                                 "bytes without NUL")
            if ssl is not None or server_hostname is not None:
                raise ValueError("ssl and server_hostname apply to a TCP address; a Unix "
                                 "socket is not encrypted")
            description = f"agentstate serve at unix:{path}"
            opening = asyncio.open_unix_connection(path, limit=READ_LIMIT)
        else:
            host, port = parse_address(address)
            if server_hostname is not None and ssl is None:
                raise ValueError("server_hostname needs ssl")
            description = f"agentstate serve at {host}:{port}" + (" (TLS)" if ssl else "")
            opening = asyncio.open_connection(host, port, limit=READ_LIMIT, ssl=ssl,
                                              server_hostname=server_hostname)
        try:
            reader, writer = await opening
        except (OSError, _ssl.SSLError) as e:
            raise ConnectionClosedError(f"cannot connect to {description}: {e}") from e
        client = cls(reader, writer, max_line_bytes=max_line_bytes,
                     on_notification=on_notification, description=description)
        if token is not None:
            try:
                await client.authenticate(token)
            except AgentStateError as e:
                await client._abort()
                if isinstance(e, ConnectionClosedError):
                    raise
                raise type(e)(e.kind, e.code, f"{description} refused the token: {e.message}",
                              e.data) from None
            except BaseException:
                await client._abort()
                raise
        return client

    # -- requests ------------------------------------------------------------------

    async def call(self, method: str, params: dict[str, Any] | None = None) -> JsonValue:
        """Sends ``method`` with ``params`` and returns the response's result. Raises the
        AgentStateError subclass of the response's ``data.kind``; InvalidArgumentError or
        TooLargeError (``code`` None) when the request cannot be encoded within the server's
        limits, before anything is sent; ConnectionClosedError when the client is closed or
        the connection ends before the response. Cancelling the caller leaves the request
        running on the server; its response is then discarded."""
        return cast(JsonValue, await self._request(method, params, None))

    async def _request(self, method: str, params: dict[str, Any] | None,
                       on_result: Callable[[Any, bool], Any] | None,
                       on_unclaimed: Callable[[Any], None] | None = None) -> Any:
        """call(); ``on_result(result, wanted)``, when given, runs on the reader when the
        success arrives and gives the caller's result (``wanted`` False: the caller was
        cancelled); an exception it raises is a protocol violation. ``on_unclaimed(value)``
        runs when the caller is cancelled after that result was set but before it took it."""
        if not isinstance(method, str):
            raise TypeError(f"method must be a string, not {type(method).__name__}")
        if params is not None and not isinstance(params, dict):
            raise TypeError(f"params must be a dict or None, not {type(params).__name__}")
        if self._ended is not None:
            raise self._ended_error()
        if self._closing:
            raise ConnectionClosedError(f"the client of {self._description} is closed")
        self._next_id += 1
        request_id = self._next_id
        line = encode_request(request_id, method, params, self._max_line_bytes)
        fut: asyncio.Future[Any] = self._loop.create_future()
        self._pending[request_id] = fut
        if on_result is not None:
            self._result_hooks[request_id] = on_result
        try:
            self._writer.write(line)
            await self._writer.drain()
            return await fut
        except asyncio.CancelledError:
            if (on_unclaimed is not None and fut.done() and not fut.cancelled()
                    and fut.exception() is None):
                on_unclaimed(fut.result())
            fut.cancel()
            raise
        except (ConnectionError, OSError) as e:
            self._pending.pop(request_id, None)
            self._result_hooks.pop(request_id, None)
            if fut.done() and not fut.cancelled():
                return fut.result()
            fut.cancel()
            if self._process is not None:
                # A spawned server that exited: its end of stream follows (the reader then
                # waits for the exit status), so the error can carry the status and log.
                await asyncio.wait([self._reader_task], timeout=10)
                if self._ended is not None:
                    raise self._ended_error() from e
            raise ConnectionClosedError(f"writing to {self._description} failed: {e}",
                                        returncode=self.returncode,
                                        stderr=self.server_stderr) from e

    def watch(self, scope: str, *, app_name: str | None = None, user_id: str | None = None,
              session_id: str | None = None, include_sessions: bool | None = None,
              key_prefix: str | None = None, from_: str | None = None,
              max_buffer_bytes: int = DEFAULT_MAX_BUFFER_BYTES) -> WatchStart:
        """Starts a watch of the change feed (the filters of ``read_changes``; ``from_``
        absent: from the newest change now). Use as ``async with c.watch(...) as w:`` (the
        watch ends with the block) or ``w = await c.watch(...)`` (then ``await
        w.aclose()``); ``async for batch in w`` yields ``{"changes": [...], "cursor": C}``
        in commit order. See AsyncWatch for the end of a watch and for
        ``max_buffer_bytes``. Raises what ``read_changes`` raises for the same params."""
        if not isinstance(max_buffer_bytes, int) or max_buffer_bytes < 1:
            raise ValueError("max_buffer_bytes must be a positive integer")
        params = change_params(scope, app_name=app_name, user_id=user_id, session_id=session_id,
                               include_sessions=include_sessions, key_prefix=key_prefix,
                               from_=from_)

        def started(result: Any, wanted: bool) -> AsyncWatch:
            # On the reader, before the next line: the watch's notifications, which follow
            # this answer, find it registered.
            if (not isinstance(result, dict) or not isinstance(result.get("watch_id"), str)
                    or not isinstance(result.get("cursor"), str)):
                raise _Violation(f"the server answered watch with {result!r}")
            w = AsyncWatch(self, result["watch_id"], result["cursor"], max_buffer_bytes)
            self._watches[w.watch_id] = w
            if not wanted:
                w._abandon()
            return w

        return WatchStart(self._request("watch", params, started, AsyncWatch._abandon))

    async def iter_sessions(self, app_name: str, user_id: str | None = None, *,
                            page_size: int | None = None, order: str | None = None,
                            order_by: str | None = None) -> AsyncIterator[SessionMeta]:
        """Every SessionMeta of ``list_sessions``, page after page (one request per page,
        ``page_size`` each), until ``next_page_token`` is null."""
        token = None
        while True:
            page = await self.list_sessions(app_name, user_id, page_size=page_size,
                                            page_token=token, order=order, order_by=order_by)
            for meta in page["sessions"]:
                yield meta
            token = page["next_page_token"]
            if token is None:
                return

    # -- the spawned process -------------------------------------------------------

    @property
    def returncode(self) -> int | None:
        """The spawned server's exit status once it has exited; None before, and for TCP."""
        return self._process.returncode if self._process is not None else None

    @property
    def server_stderr(self) -> str:
        """The last 16 KiB of the spawned server's stderr (its log); "" for TCP."""
        return self._stderr_tail.decode("utf-8", "replace")

    async def _drain_stderr(self, stream: asyncio.StreamReader) -> None:
        while True:
            chunk = await stream.read(64 * 1024)
            if not chunk:
                return
            self._stderr_tail += chunk
            if len(self._stderr_tail) > _STDERR_TAIL_BYTES:
                del self._stderr_tail[:-_STDERR_TAIL_BYTES]

    # -- reading -------------------------------------------------------------------

    async def _read_line(self) -> bytes | None:
        """The next line without its newline; None at a clean end of stream. A response
        longer than the read buffer is read in pieces (no upper bound)."""
        parts = []
        while True:
            try:
                chunk = await self._reader.readuntil(b"\n")
            except asyncio.LimitOverrunError as e:
                parts.append(await self._reader.readexactly(e.consumed))
                continue
            except asyncio.IncompleteReadError as e:
                if e.partial or parts:
                    raise _Violation("the connection ended inside a response line") from None
                return None
            parts.append(chunk)
            line = b"".join(parts) if len(parts) > 1 else chunk
            return line[:-1]

    def _dispatch_line(self, line: bytes) -> None:
        """Routes one message from the server: a response to the request with its id, a
        notification to ``on_notification``. Raises _Violation for anything else."""
        try:
            msg = json.loads(line)
        except ValueError:
            raise _Violation(f"the server sent a line that is not JSON: {line[:200]!r}") from None
        if not isinstance(msg, dict):
            raise _Violation(f"the server sent a line that is not an object: {line[:200]!r}")
        if "id" in msg and ("result" in msg or "error" in msg):
            request_id = msg["id"]
            fut = self._pending.pop(request_id, None) if isinstance(request_id, int) else None
            hook = self._result_hooks.pop(request_id, None) if fut is not None else None
            if fut is None:
                # id null: the server could not read one of our lines (this client checks
                # the limits it knows; the server's may be lower). Which request it was is
                # unknown, so no request can be answered with it.
                cause = error_from_response(msg["error"]) if "error" in msg else None
                raise _Violation(f"the server sent a response to no pending request "
                                 f"(id {request_id!r}): {cause or msg.get('result')!r}") from cause
            if "error" in msg:
                if not fut.done():  # else the caller was cancelled
                    fut.set_exception(error_from_response(msg["error"]))
                return
            result = msg["result"]
            if hook is not None:
                try:
                    result = hook(result, not fut.done())
                except _Violation:
                    self._pending[request_id] = fut  # failed with the connection by _end
                    raise
            if not fut.done():
                fut.set_result(result)
        elif "method" in msg and "id" not in msg:
            if self._route_to_watch(msg["method"], msg.get("params"), len(line)):
                return
            if self._on_notification is not None:
                try:
                    self._on_notification(msg["method"], msg.get("params"))
                except Exception:
                    _log.exception("on_notification raised on %r", msg["method"])
        else:
            raise _Violation(f"the server sent a message that is neither a response nor a "
                             f"notification: {line[:200]!r}")

    def _route_to_watch(self, method: Any, params: Any, nbytes: int) -> bool:
        """Hands a ``changes`` or ``watch_ended`` notification to its AsyncWatch; False
        when it is for no watch of this client. Raises _Violation for a malformed one."""
        if method not in ("changes", "watch_ended") or not isinstance(params, dict):
            return False
        w = self._watches.get(params.get("watch_id"))  # type: ignore[arg-type]
        if w is None:
            return False
        if method == "changes":
            if not isinstance(params.get("changes"), list) or not isinstance(params.get("cursor"), str):
                raise _Violation(f"the server sent a malformed changes notification for watch "
                                 f"{w.watch_id}: {str(params)[:200]}")
            w._on_changes(params, nbytes)
        else:
            if not isinstance(params.get("reason"), str) or not isinstance(params.get("resume_from"), str):
                raise _Violation(f"the server sent a malformed watch_ended notification: "
                                 f"{str(params)[:200]}")
            w._on_ended(params)
        return True

    async def _read_loop(self) -> None:
        reason = "the server closed the connection"
        cause: BaseException | None = None
        try:
            try:
                while (line := await self._read_line()) is not None:
                    self._dispatch_line(line)
            except _Violation as e:
                # Stop sending; whatever the server still writes is read and discarded so
                # that a spawned server is never blocked on a full pipe and can exit.
                reason, cause = str(e), e.__cause__
                self._closing = True
                self._writer.close()
                while await self._reader.read(64 * 1024):
                    pass
        except (ConnectionError, OSError) as e:
            reason, cause = f"reading from the server failed: {e}", e
        finally:
            await self._end(reason, cause)

    async def _end(self, reason: str, cause: BaseException | None) -> None:
        """The stream is over: refuse new requests, fail the pending ones with
        ConnectionClosedError (with the exit status and log of a spawned server)."""
        self._closing = True
        try:
            self._writer.close()
        except OSError:
            pass
        returncode = None
        if self._process is not None:
            try:
                returncode = await asyncio.wait_for(self._process.wait(), 10)
            except asyncio.TimeoutError:
                pass
            if self._stderr_task is not None:
                await asyncio.wait([self._stderr_task], timeout=2)
        message = f"{self._description}: {reason}"
        if returncode is not None:
            message += f"; it exited with status {returncode}"
            if returncode != 0:
                message += f"; its last log lines: {_last_lines(self.server_stderr.strip())}"
        self._ended = ConnectionClosedError(message, returncode=returncode, stderr=self.server_stderr)
        self._ended.__cause__ = cause
        pending, self._pending = self._pending, {}
        self._result_hooks.clear()
        for fut in pending.values():
            if not fut.done():
                fut.set_exception(self._ended_error())
        watches, self._watches = self._watches, {}
        for w in watches.values():
            w._on_connection_end(self._ended_error())

    def _ended_error(self) -> ConnectionClosedError:
        assert self._ended is not None
        e = ConnectionClosedError(self._ended.message, returncode=self._ended.returncode,
                                  stderr=self._ended.stderr)
        e.__cause__ = self._ended.__cause__
        return e

    # -- closing -------------------------------------------------------------------

    async def close(self) -> None:
        """Ends the request stream and waits for every request already sent to be
        answered (their callers get their results), then for the connection to close. A
        spawned server then flushes, closes its store and exits; close() waits for that and
        raises ConnectionClosedError if its exit status is not 0. Later requests raise
        ConnectionClosedError. Safe to call more than once and concurrently."""
        if self._close_task is None:
            self._close_task = self._loop.create_task(self._close())
        await asyncio.shield(self._close_task)

    async def _close(self) -> None:
        self._closing = True
        if self._writer.transport.get_extra_info("sslcontext") is not None:
            # TLS has no half-close: wait for the answers owed, then close both ways.
            owed = [f for f in self._pending.values() if not f.done()]
            if owed:
                await asyncio.wait(owed)
            self._writer.close()
        else:
            try:
                self._writer.write_eof()
            except (OSError, RuntimeError):
                pass  # the stream has already ended; the reader has seen or will see it
        await self._reader_task
        if self._process is None:
            try:
                await self._writer.wait_closed()
            except OSError:
                pass
            return
        returncode = await self._process.wait()
        if self._stderr_task is not None:
            await self._stderr_task
        if returncode != 0:
            raise ConnectionClosedError(
                f"{self._description} exited with status {returncode}; its last log lines: "
                f"{_last_lines(self.server_stderr.strip())}",
                returncode=returncode, stderr=self.server_stderr)

    async def _abort(self) -> None:
        """Closes at once: kills a spawned server, drops the connection."""
        self._closing = True
        if self._process is not None and self._process.returncode is None:
            self._process.kill()
        self._writer.close()
        await self._reader_task
        if self._process is not None:
            await self._process.wait()
            if self._stderr_task is not None:
                await self._stderr_task

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()


def _last_lines(text: str, n: int = 5) -> str:
    return " | ".join(text.splitlines()[-n:]) if text else "(none)"
