# SPDX-License-Identifier: Apache-2.0
"""``connect(token=, ssl=)`` and ``unix:PATH`` addresses against ``serve --auth-file`` with
a TCP and a Unix socket listener (and, for TLS, a certificate made by the openssl CLI)."""

from __future__ import annotations

import asyncio
import ssl
import subprocess
from pathlib import Path

import pytest
from conftest import run

import agentstate_client as ac
from agentstate_client import AsyncClient, Client

ALL = "all-apps-token-0123456789abcdef"
ALPHA = "alpha-only-token-0123456789abcd"
WRONG = "wrong-token-0123456789abcdefgh"


def write_tokens(path: Path, tokens: dict[str, str]) -> Path:
    path.write_text("# test tokens\n" + "".join(f"{t} {apps}\n" for t, apps in tokens.items()))
    path.chmod(0o600)
    return path


@pytest.fixture
def auth_server(tcp_server_factory, tmp_path):
    tokens = write_tokens(tmp_path / "tokens", {ALL: "*", ALPHA: "alpha"})
    server = tcp_server_factory("--auth-file", str(tokens), name="auth-store",
                                listen=("127.0.0.1:0", f"unix:{tmp_path / 'sock'}"))
    server.tcp = next(a for a in server.addresses if not a.startswith("unix:"))
    server.unix = next(a for a in server.addresses if a.startswith("unix:"))
    return server


def test_right_token_then_requests(auth_server):
    async def body():
        c = await AsyncClient.connect(auth_server.tcp, token=ALL)
        await c.create_session("alpha", "u", "s")
        await c.create_session("beta", "u", "s")
        assert await c.authenticate(ALPHA) == {"apps": ["alpha"]}  # a later one replaces it
        with pytest.raises(ac.PermissionDeniedError):
            await c.get_session("beta", "u", "s")
        await c.close()
    run(body())


def test_no_token_is_unauthenticated_on_a_request(auth_server):
    async def body():
        c = await AsyncClient.connect(auth_server.tcp)
        assert await c.ping() == "pong"  # allowed before authenticating
        with pytest.raises(ac.UnauthenticatedError) as e:
            await c.list_sessions("alpha")
        assert e.value.code == -32001 and e.value.kind == "unauthenticated"
        await c.close()
    run(body())


def test_wrong_token_fails_connect_with_the_typed_error(auth_server):
    async def body():
        with pytest.raises(ac.UnauthenticatedError) as e:
            await AsyncClient.connect(auth_server.tcp, token=WRONG)
        assert "refused the token" in str(e.value) and WRONG not in str(e.value)
        assert e.value.code == -32001
    run(body())
    with pytest.raises(ac.UnauthenticatedError):
        Client.connect(auth_server.unix, token=WRONG)


def test_scoped_token_is_denied_other_apps(auth_server):
    with Client.connect(auth_server.tcp, token=ALPHA) as c:
        c.create_session("alpha", "u", "s1")
        with pytest.raises(ac.PermissionDeniedError) as e:
            c.create_session("beta", "u", "s1")
        assert e.value.code == -32001
        with pytest.raises(ac.PermissionDeniedError):
            c.stats()  # spans every app: a * token only
        assert [m["id"] for m in c.iter_sessions("alpha")] == ["s1"]


def test_unix_socket(auth_server):
    async def body():
        c = await AsyncClient.connect(auth_server.unix, token=ALPHA)
        await c.create_session("alpha", "u", "via-unix")
        with pytest.raises(ac.PermissionDeniedError):
            await c.list_sessions("beta")
        await c.close()
        t = await AsyncClient.connect(auth_server.tcp, token=ALL)
        assert (await t.get_session("alpha", "u", "via-unix"))["id"] == "via-unix"
        await t.close()
    run(body())
    with Client.connect(auth_server.unix, token=ALL) as c:
        assert c.get_session("alpha", "u", "via-unix") is not None


def test_unix_socket_nobody_listens_on(tmp_path):
    with pytest.raises(ac.ConnectionClosedError) as e:
        Client.connect(f"unix:{tmp_path / 'none'}")
    assert "unix:" in str(e.value)


def test_connect_options_are_checked():
    async def body():
        for address, kw in [("127.0.0.1:7400", {"token": ""}), ("127.0.0.1:7400", {"token": 7}),
                            ("unix:", {}), ("unix:/" + "x" * 107, {}),
                            ("unix:/tmp/s", {"ssl": ssl.create_default_context()}),
                            ("127.0.0.1:7400", {"ssl": True}),
                            ("127.0.0.1:7400", {"server_hostname": "h"})]:
            with pytest.raises(ValueError):
                await AsyncClient.connect(address, **kw)
    run(body())


def test_tls_with_a_token(tcp_server_factory, tmp_path):
    cert, key = tmp_path / "server.pem", tmp_path / "server.key"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "ec", "-pkeyopt",
                    "ec_paramgen_curve:P-256", "-nodes", "-days", "2", "-subj", "/CN=agentstate-test",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    tokens = write_tokens(tmp_path / "tokens", {ALL: "*"})
    server = tcp_server_factory("--auth-file", str(tokens), "--tls-cert", str(cert),
                                "--tls-key", str(key), name="tls-store")
    trusted = ssl.create_default_context(cafile=str(cert))

    async def body():
        c = await AsyncClient.connect(server.address, token=ALL, ssl=trusted)
        await c.create_session("a", "u", "s")
        # TLS has no half-close: close() waits for the answers owed, then closes.
        appends = [asyncio.create_task(c.append_event("a", "u", "s", {"id": f"e{i}", "author": "x"}))
                   for i in range(50)]
        await asyncio.sleep(0)  # why: one turn of the event loop: each task has written its request
        await c.close()
        assert sorted(t.result()["version"] for t in appends) == list(range(1, 51))
        # The default context does not trust the self-signed certificate.
        with pytest.raises(ac.ConnectionClosedError) as e:
            await AsyncClient.connect(server.address, token=ALL, ssl=ssl.create_default_context())
        assert "TLS" in str(e.value)
        # Plain text to the TLS port: the server closes without an answer.
        with pytest.raises(ac.ConnectionClosedError):
            await AsyncClient.connect(server.address, token=ALL)
    run(body())
    with Client.connect(server.address, token=ALL, ssl=trusted) as c:
        assert c.get_session("a", "u", "s")["version"] == 50
