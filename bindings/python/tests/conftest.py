# SPDX-License-Identifier: Apache-2.0
"""Fixtures: the agentstate binary under test, stores in temp dirs, a TCP server.

The binary is $AGENTSTATE_BIN (CTest sets it to the one just built), else ``agentstate`` on
PATH; without one every test errors (never skips).

Cluster mode: with AGENTSTATE_TEST_ADDRESS=HOST:PORT (tests/support/cluster_harness.py sets
it to a cluster node that owns no shard), every client a test makes, by ``spawn`` or
``connect`` of AsyncClient or Client, connects to that address instead of starting a
server, and the ``tcp_server`` fixture is that address. Each test sees apps of its own: its
clients put a prefix unique to the test (10 bytes) before every non-empty ``app_name`` they
send and take it off
every ``app_name`` (and error message) they receive, so a test that expects an empty store
finds its apps empty. The tests of CLUSTER_SKIPS, which need a server process of their own,
are skipped, each with its reason."""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
import uuid
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from agentstate_client import AsyncClient  # noqa: E402

# Every async test body runs under this limit, so a hang fails instead of stalling CI.
TEST_TIMEOUT = 60.0

# The address of a running server (a cluster's node) the tests connect to; None: each test
# starts servers of its own.
CLUSTER_ADDRESS = os.environ.get("AGENTSTATE_TEST_ADDRESS") or None

# Tests skipped in cluster mode, by FILE::TEST: what each checks needs a server process of
# its own (the process's counters, its flags, its exit), which a shared cluster node is not.
STATS = ("reads the stats counters of the process it talks to; through a cluster node "
         "the appends run on the shard's owner, and the counters count every test's calls")
CLUSTER_SKIPS = {
    "test_methods.py::test_append_idempotent_partial_remove_and_extra_members": STATS,
    "test_methods.py::test_flush_and_stats": STATS,
    "test_errors.py::test_requests_refused_before_sending": STATS,
    "test_changes.py::test_watch_gets_another_connections_appends_in_commit_order":
        "compares a watch of an app with a read of its log change by change; across nodes an "
        "app's feed has no single commit order (a watch relays each node's changes as they "
        "come, a read takes them from each node in turn: docs/cluster.md), each session's "
        "order is kept",
    "test_changes.py::test_watch_from_an_old_cursor_loses_nothing_sent_right_after_its_answer":
        "takes the cursor of the first page of scope all as the store's head, true of a new "
        "store only: a shared cluster holds every earlier test's changes",
}


def pytest_collection_modifyitems(config, items):
    if CLUSTER_ADDRESS is None:
        return
    modules = {}
    for item in items:
        modules[item.path.name] = item.module
        reason = CLUSTER_SKIPS.get(f"{item.path.name}::{item.originalname}")
        if reason is not None:
            item.add_marker(pytest.mark.skip(reason=f"cluster mode: {reason}"))
    stale = [k for k in CLUSTER_SKIPS
             if k.split("::")[0] in modules and not hasattr(modules[k.split("::")[0]],
                                                              k.split("::")[1])]
    if stale:  # a renamed test would otherwise run unskipped and fail for no clear reason
        raise pytest.UsageError(f"CLUSTER_SKIPS names tests that do not exist: {stale}")


def _prefixing_client(prefix: str) -> type[AsyncClient]:
    """An AsyncClient that sends every top-level ``app_name`` with ``prefix`` before it
    and removes the prefix from every ``app_name`` member, and from error messages, of
    what it receives (responses and notifications)."""

    def strip(value: Any) -> Any:
        if isinstance(value, dict):
            out = {}
            for k, v in value.items():
                if k == "app_name" and isinstance(v, str) and v.startswith(prefix):
                    out[k] = v[len(prefix):]
                elif k == "message" and isinstance(v, str):
                    out[k] = v.replace(prefix, "")
                else:
                    out[k] = strip(v)
            return out
        if isinstance(value, list):
            return [strip(v) for v in value]
        return value

    class PrefixingClient(AsyncClient):
        async def _request(self, method, params, on_result, on_unclaimed=None):
            # An empty name stays empty: the server refuses it, as it would unprefixed.
            if isinstance(params, dict) and isinstance(params.get("app_name"), str) \
                    and params["app_name"]:
                params = dict(params, app_name=prefix + params["app_name"])
            return await super()._request(method, params, on_result, on_unclaimed)

        def _dispatch_line(self, line: bytes) -> None:
            try:
                msg = json.loads(line)
            except ValueError:
                msg = None  # not JSON: the client's own check reports it
            if msg is not None:
                line = json.dumps(strip(msg)).encode()
            super()._dispatch_line(line)

    return PrefixingClient


_connect = AsyncClient.connect.__func__  # type: ignore[attr-defined]


@pytest.fixture(autouse=True)
def cluster_mode(monkeypatch, request):
    """In cluster mode: AsyncClient.spawn and .connect (and so Client's) give a client of
    CLUSTER_ADDRESS whose app names carry a prefix unique to this test."""
    if CLUSTER_ADDRESS is None:
        yield None
        return
    client_class = _prefixing_client(f"t{uuid.uuid4().hex[:8]}-")

    async def spawn(cls, store=None, *, memory=False, binary=None, durability=None,
                    threads=None, max_line_bytes=None, on_notification=None):
        if (store is None) == (not memory):
            raise ValueError("give exactly one of store=DIR and memory=True")
        # The server's own settings (durability, threads) are the cluster node's.
        kwargs = {} if max_line_bytes is None else {"max_line_bytes": max_line_bytes}
        return await _connect(client_class, CLUSTER_ADDRESS, on_notification=on_notification,
                              **kwargs)

    async def connect(cls, address, **kwargs):
        return await _connect(client_class, address, **kwargs)

    monkeypatch.setattr(AsyncClient, "spawn", classmethod(spawn))
    monkeypatch.setattr(AsyncClient, "connect", classmethod(connect))
    yield CLUSTER_ADDRESS


@pytest.fixture(scope="session")
def agentstate_bin() -> str:
    path = os.environ.get("AGENTSTATE_BIN") or shutil.which("agentstate")
    if not path or not os.access(path, os.X_OK):
        pytest.fail("no agentstate binary: set AGENTSTATE_BIN (CTest does) or put agentstate on PATH")
    return os.path.abspath(path)  # tests run children in other directories


@pytest.fixture
def store(tmp_path: Path) -> Path:
    return tmp_path / "store"


def run(coro):
    """Runs one async test body on a fresh event loop, failing it after TEST_TIMEOUT s."""
    async def bounded():
        return await asyncio.wait_for(coro, TEST_TIMEOUT)
    return asyncio.run(bounded())


class TcpServer:
    """``agentstate serve --listen 127.0.0.1:0`` (or the given ``listen`` specs) as a child
    process; ``addresses`` are the addresses it logged, in --listen order (``HOST:PORT``,
    ``unix:PATH``), ``address`` the first. Its stderr is drained on a thread (kept in
    ``log``)."""

    def __init__(self, binary: str, store: Path, extra: list[str],
                 listen: tuple[str, ...] = ("127.0.0.1:0",)):
        args = [binary, "serve", "--store", str(store)]
        for spec in listen:
            args += ["--listen", spec]
        self.proc = subprocess.Popen(
            [*args, *extra],
            stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        self.log: list[str] = []
        self.addresses: list[str] = []
        self.address = None
        for raw in self.proc.stderr:
            line = raw.decode("utf-8", "replace").rstrip("\n")
            self.log.append(line)
            # The log line (text or json format) holds "listening on ADDRESS".
            m = re.search(r'listening on ([^\s"]+)', line)
            if m:
                self.addresses.append(m.group(1))
                if len(self.addresses) == len(listen):
                    self.address = self.addresses[0]
                    break
        if self.address is None:
            self.proc.wait(10)
            raise RuntimeError(f"serve --listen printed no address; exit {self.proc.returncode}: {self.log}")
        self._drain = threading.Thread(target=self._read_rest, daemon=True)
        self._drain.start()

    def _read_rest(self) -> None:
        for raw in self.proc.stderr:
            self.log.append(raw.decode("utf-8", "replace").rstrip("\n"))

    def stop(self) -> int:
        """SIGTERM, then the exit status (the server exits 0 after a clean shutdown)."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        code = self.proc.wait(30)
        self._drain.join(10)
        return code


class ClusterServer:
    """In cluster mode, what ``tcp_server`` gives: the cluster node's address; stop() does
    not stop it (the harness does)."""

    def __init__(self, address: str):
        self.address = address
        self.addresses = [address]
        self.log: list[str] = []

    def stop(self) -> int:
        return 0


@pytest.fixture
def tcp_server_factory(agentstate_bin: str, tmp_path: Path):
    servers: list[TcpServer] = []

    def make(*extra: str, name: str = "tcp-store",
             listen: tuple[str, ...] = ("127.0.0.1:0",)) -> TcpServer:
        if CLUSTER_ADDRESS is not None:
            if extra or listen != ("127.0.0.1:0",):
                pytest.skip(f"cluster mode: needs a server of its own started with "
                            f"{[*extra, *listen]}")
            return ClusterServer(CLUSTER_ADDRESS)  # type: ignore[return-value]
        server = TcpServer(agentstate_bin, tmp_path / name, list(extra), listen)
        servers.append(server)
        return server

    yield make
    for server in servers:
        assert server.stop() == 0, server.log


@pytest.fixture
def tcp_server(tcp_server_factory) -> TcpServer:
    return tcp_server_factory()
