# SPDX-License-Identifier: Apache-2.0
"""Fixtures: the agentstate binary under test, stores in temp dirs, a TCP server.

The binary is $AGENTSTATE_BIN (CTest sets it to the one just built), else ``agentstate`` on
PATH; without one every test errors (never skips)."""

from __future__ import annotations

import asyncio
import os
import re
import shutil
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

# Every async test body runs under this limit, so a hang fails instead of stalling CI.
TEST_TIMEOUT = 60.0


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


@pytest.fixture
def tcp_server_factory(agentstate_bin: str, tmp_path: Path):
    servers: list[TcpServer] = []

    def make(*extra: str, name: str = "tcp-store",
             listen: tuple[str, ...] = ("127.0.0.1:0",)) -> TcpServer:
        server = TcpServer(agentstate_bin, tmp_path / name, list(extra), listen)
        servers.append(server)
        return server

    yield make
    for server in servers:
        assert server.stop() == 0, server.log


@pytest.fixture
def tcp_server(tcp_server_factory) -> TcpServer:
    return tcp_server_factory()
