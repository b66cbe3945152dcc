# SPDX-License-Identifier: Apache-2.0
"""The TCP transport against ``serve --listen 127.0.0.1:0``."""

from __future__ import annotations

import asyncio
import socket

import pytest
from conftest import run

import agentstate_client as ac
from agentstate_client import AsyncClient, Client

APP, USER = "tcp", "u"


def test_parse_address():
    assert ac.parse_address("127.0.0.1:7400") == ("127.0.0.1", 7400)
    assert ac.parse_address("[::1]:80") == ("::1", 80)
    assert ac.parse_address(("localhost", 1)) == ("localhost", 1)
    for bad in ("7400", "host:", ":7400", "host:port", "host:0", "host:65536", "[::1]7400",
                "[::1]", 7400, ("h", "x"), ("h",), ("h", True)):
        with pytest.raises(ValueError):
            ac.parse_address(bad)


def test_two_connections_one_store(tcp_server):
    async def body():
        a = await AsyncClient.connect(tcp_server.address)
        b = await AsyncClient.connect(tcp_server.address)
        await a.create_session(APP, USER, "s", {"user:n": 0})
        # Appends from two connections to one session interleave; each gets its own version.
        results = await asyncio.gather(*[
            (a if i % 2 else b).append_event(APP, USER, "s", {"id": f"e{i}", "author": "x"})
            for i in range(100)])
        assert sorted(r["version"] for r in results) == list(range(1, 101))
        got = await b.get_session(APP, USER, "s")
        assert got["version"] == 100 and got["state"] == {"user:n": 0}
        assert await a.inject_state(APP, USER, "s", "{user:n}") == "0"
        assert a.returncode is None and a.server_stderr == ""
        await a.close()
        with pytest.raises(ac.ConnectionClosedError):
            await a.stats()
        # Closing one connection leaves the server and the other connection running.
        assert (await b.stats())["appends"] == 100
        await b.close()
    run(body())


def test_blocking_client_over_tcp(tcp_server):
    with Client.connect(tcp_server.address) as c:
        c.create_session(APP, USER, "s")
        assert c.append_event(APP, USER, "s", {"author": "x"})["version"] == 1
        assert c.get_session(APP, USER, "s")["version"] == 1


def test_connection_refused_is_typed():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]  # bound, not listening: connecting is refused

        async def body():
            with pytest.raises(ac.ConnectionClosedError) as e:
                await AsyncClient.connect(("127.0.0.1", port))
            assert str(port) in str(e.value) and e.value.retryable
        run(body())
        with pytest.raises(ac.ConnectionClosedError):
            Client.connect(f"127.0.0.1:{port}")


def test_server_shutdown_ends_the_connection(tcp_server_factory):
    server = tcp_server_factory(name="shutdown-store")

    async def body():
        c = await AsyncClient.connect(server.address)
        await c.create_session(APP, USER, "s")
        assert await asyncio.to_thread(server.stop) == 0
        with pytest.raises(ac.ConnectionClosedError):
            await c.stats()
        await c.close()
    run(body())
