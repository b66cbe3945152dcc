# SPDX-License-Identifier: Apache-2.0
"""ReconnectingClient across a restart of the server: a real ``serve --store DIR --listen
ADDRESS``, killed (SIGKILL, by PID) and started again on the same store and address while
calls run."""

from __future__ import annotations

import asyncio
import signal
from pathlib import Path

import pytest
from conftest import CLUSTER_ADDRESS, TcpServer, run

from agentstate_client import ConnectionClosedError, ReconnectingClient, UnavailableError

APP, USER = "reconnect", "u"

pytestmark = pytest.mark.skipif(CLUSTER_ADDRESS is not None,
                                reason="cluster mode: kills and restarts a server of its own")


class Restartable:
    """A server on ``store``; restart() kills it (SIGKILL, by PID) and starts another on
    the same store and address."""

    def __init__(self, binary: str, store: Path):
        self.binary = binary
        self.store = store
        self.server = TcpServer(binary, store, [])
        self.address = self.server.address
        self.pids = [self.server.proc.pid]

    def kill(self) -> None:
        self.server.proc.kill()
        self.server.proc.wait(30)

    def start(self) -> None:
        self.server = TcpServer(self.binary, self.store, [], (self.address,))
        self.pids.append(self.server.proc.pid)

    def restart(self) -> None:
        self.kill()
        self.start()

    def stop(self) -> None:
        assert self.server.stop() == 0, self.server.log


def test_appends_through_a_kill_and_restart_nothing_acknowledged_lost_nothing_twice(agentstate_bin, tmp_path):
    srv = Restartable(agentstate_bin, tmp_path / "store")
    workers, per_worker = 8, 50

    async def body():
        c = ReconnectingClient(srv.address, retry_for=45)
        await c.create_session(APP, USER, "s")
        acked: list[str] = []
        restarted: list[asyncio.Future[None]] = []

        async def worker(k: int) -> None:
            for i in range(per_worker):
                eid = f"w{k}-{i}"
                await c.append_event(APP, USER, "s", {
                    "id": eid, "author": "agent", "actions": {"state_delta": {f"w{k}": i}}})
                acked.append(eid)
                if len(acked) == 100:
                    # The other workers each have an append in flight as the server dies.
                    srv.kill()
                    restarted.append(asyncio.ensure_future(asyncio.to_thread(srv.start)))

        await asyncio.gather(*(worker(k) for k in range(workers)))
        await restarted[0]
        assert len(srv.pids) == 2
        assert len(acked) == workers * per_worker
        got = await c.get_session(APP, USER, "s")
        assert got is not None
        ids = [e["id"] for e in got["events"]]
        assert len(set(ids)) == len(ids), "an event stored twice"
        assert sorted(ids) == sorted(acked), "every acknowledged event is stored, nothing else"
        assert got["version"] == workers * per_worker
        for k in range(workers):
            assert [i for i in ids if i.startswith(f"w{k}-")] == [f"w{k}-{i}" for i in range(per_worker)]
            assert got["state"][f"w{k}"] == per_worker - 1
        await c.close()

    try:
        run(body())
    finally:
        srv.stop()


def test_calls_while_down_wait_for_the_server_or_raise_unavailable_after_retry_for(agentstate_bin, tmp_path):
    srv = Restartable(agentstate_bin, tmp_path / "store")

    async def body():
        c = ReconnectingClient(srv.address, retry_for=45)
        short = ReconnectingClient(srv.address, retry_for=0.2)
        await c.create_session(APP, USER, "s")
        assert (await short.get_session(APP, USER, "s")) is not None
        srv.kill()
        read = asyncio.ensure_future(c.get_session(APP, USER, "s"))
        with pytest.raises(UnavailableError):
            await short.get_session(APP, USER, "s")
        # A create made while the server is down never reaches it before it is back.
        late = ReconnectingClient(srv.address, retry_for=45)
        created = asyncio.ensure_future(late.create_session(APP, USER, "made-while-down"))
        await asyncio.to_thread(srv.start)
        assert (await read)["id"] == "s"
        assert (await created)["id"] == "made-while-down"
        assert (await short.get_session(APP, USER, "s"))["id"] == "s", "the next call reconnects"
        for client in (c, short, late):
            await client.close()

    try:
        run(body())
    finally:
        srv.stop()


def test_a_create_whose_answer_is_lost_raises_in_doubt_not_sent_twice(agentstate_bin, tmp_path):
    srv = Restartable(agentstate_bin, tmp_path / "store")

    async def body():
        c = ReconnectingClient(srv.address, retry_for=45)
        await c.create_session(APP, USER, "s")
        # The server is stopped (SIGSTOP), so the create is written and left unanswered,
        # then killed: the client cannot know whether it ran.
        srv.server.proc.send_signal(signal.SIGSTOP)
        pending = asyncio.ensure_future(c.create_session(APP, USER, "in-doubt"))
        connection = c._clients[c.address]
        for _ in range(1000):
            if connection._pending:
                break  # written: the request's id is registered as it is written
            await asyncio.sleep(0)  # poll: one turn of the loop, until the create is written
        assert connection._pending, "the create was not written"
        await asyncio.to_thread(srv.kill)
        with pytest.raises(ConnectionClosedError, match="whether the call took effect is unknown"):
            await pending
        await asyncio.to_thread(srv.start)
        await c.close()

    try:
        run(body())
    finally:
        srv.stop()
