# SPDX-License-Identifier: Apache-2.0
"""Spawning, closing, restarting, and servers that go away."""

from __future__ import annotations

import asyncio
import os
import pickle
import signal
import threading

import pytest
from conftest import run

import agentstate_client as ac
from agentstate_client import AsyncClient

APP, USER = "life", "u"


def test_restart_keeps_everything_acknowledged(agentstate_bin, store):
    async def body():
        c = await AsyncClient.spawn(store, binary=agentstate_bin)
        await c.create_session(APP, USER, "s", {"k": "v", "user:u": 1, "app:a": 2})
        results = await asyncio.gather(*[
            c.append_event(APP, USER, "s", {"id": f"e{i}", "author": "a",
                                            "actions": {"state_delta": {"n": i}}})
            for i in range(30)])
        assert [r["version"] for r in results] == list(range(1, 31))
        await c.close()
        assert c.returncode == 0
        with pytest.raises(ac.ConnectionClosedError):
            await c.stats()

        c = await AsyncClient.spawn(store, binary=agentstate_bin)
        got = await c.get_session(APP, USER, "s")
        assert got["version"] == 30 and got["state"] == {"k": "v", "n": 29, "user:u": 1, "app:a": 2}
        assert [e["id"] for e in got["events"]] == [f"e{i}" for i in range(30)]
        # An event id stored before the restart is still recognised.
        again = await c.append_event(APP, USER, "s", {"id": "e7", "author": "a"})
        assert again["version"] == 8
        await c.close()
    run(body())


def test_memory_store_and_binary_from_environment(agentstate_bin, monkeypatch):
    monkeypatch.setenv("AGENTSTATE_BIN", agentstate_bin)
    monkeypatch.setenv("PATH", "/nonexistent")
    assert ac.find_binary() == agentstate_bin

    async def body():
        async with await AsyncClient.spawn(memory=True) as c:
            await c.create_session(APP, USER, "s")
            assert (await c.get_session(APP, USER, "s"))["version"] == 0
        async with await AsyncClient.spawn(memory=True) as c:
            assert await c.get_session(APP, USER, "s") is None  # nothing kept
    run(body())


def test_spawn_argument_errors(agentstate_bin, store, monkeypatch, tmp_path):
    async def body():
        with pytest.raises(ValueError):
            await AsyncClient.spawn(binary=agentstate_bin)
        with pytest.raises(ValueError):
            await AsyncClient.spawn(store, memory=True, binary=agentstate_bin)
        monkeypatch.delenv("AGENTSTATE_BIN", raising=False)
        monkeypatch.setenv("PATH", str(tmp_path))
        with pytest.raises(ac.SpawnError) as e:
            await AsyncClient.spawn(store)
        assert "AGENTSTATE_BIN" in str(e.value) and e.value.kind == "spawn_failed"
        with pytest.raises(ac.SpawnError):
            ac.find_binary()
        # Bad usage: the server exits 2 before answering; its message is in the error.
        with pytest.raises(ac.ConnectionClosedError) as e:
            await AsyncClient.spawn(store, binary=agentstate_bin, durability="sometimes")
        assert e.value.returncode == 2 and "durability" in e.value.stderr
    run(body())


def test_second_server_on_one_store_is_refused(agentstate_bin, store):
    async def body():
        async with await AsyncClient.spawn(store, binary=agentstate_bin) as owner:
            with pytest.raises(ac.ConnectionClosedError) as e:
                await AsyncClient.spawn(store, binary=agentstate_bin)
            assert e.value.returncode == 1
            assert str(owner._process.pid) in e.value.stderr  # the owner is named
            assert "exited with status 1" in str(e.value)
            assert "appends" in await owner.stats()
    run(body())


def test_close_answers_everything_already_sent(agentstate_bin, store):
    async def body():
        c = await AsyncClient.spawn(store, binary=agentstate_bin)
        await c.create_session(APP, USER, "s")
        tasks = [asyncio.ensure_future(c.append_event(APP, USER, "s", {"author": "a"}))
                 for _ in range(200)]
        await asyncio.sleep(0)  # why: one turn of the event loop: each task has written its request
        await asyncio.gather(c.close(), c.close())
        assert sorted(t.result()["version"] for t in tasks) == list(range(1, 201))
        with pytest.raises(ac.ConnectionClosedError):
            await c.create_session(APP, USER, "t")
        await c.close()  # again: no effect
    run(body())


def test_server_killed_with_requests_in_flight(agentstate_bin, store):
    async def body():
        # nosync: acknowledged appends survive a crash of the server process.
        c = await AsyncClient.spawn(store, binary=agentstate_bin, durability="nosync")
        await c.create_session(APP, USER, "s")
        tasks = [asyncio.ensure_future(c.append_event(APP, USER, "s", {"id": f"e{i}", "author": "a"}))
                 for i in range(500)]
        await asyncio.sleep(0)  # why: one turn of the event loop: each task has written its request
        os.kill(c._process.pid, signal.SIGKILL)
        outcomes = await asyncio.gather(*tasks, return_exceptions=True)
        failed = [o for o in outcomes if isinstance(o, Exception)]
        assert all(isinstance(o, (dict, ac.ConnectionClosedError)) for o in outcomes)
        assert failed, "SIGKILL landed after all 500 appends were answered"
        assert all(o.returncode == -signal.SIGKILL and o.retryable for o in failed)
        with pytest.raises(ac.ConnectionClosedError):
            await c.stats()
        with pytest.raises(ac.ConnectionClosedError) as e:
            await c.close()
        assert e.value.returncode == -signal.SIGKILL

        # Every append that was answered is in the store; retrying the others with the
        # same ids completes the session without duplicates.
        async with await AsyncClient.spawn(store, binary=agentstate_bin,
                                           durability="nosync") as fresh:
            got = await fresh.get_session(APP, USER, "s")
            answered = {o["event"]["id"] for o in outcomes if isinstance(o, dict)}
            assert answered <= {e["id"] for e in got["events"]}
            retried = await asyncio.gather(*[
                fresh.append_event(APP, USER, "s", {"id": f"e{i}", "author": "a"})
                for i in range(500)])
            assert [r["version"] for r in retried] == list(range(1, 501))
            got = await fresh.get_session(APP, USER, "s")
            assert got["version"] == 500 and len({e["id"] for e in got["events"]}) == 500
    run(body())


def test_missing_or_unusable_binary_raises_spawn_error_not_file_not_found(store, tmp_path, monkeypatch):
    # The README promises an AgentStateError for every failure; spawning a binary that is
    # missing or cannot run used to raise FileNotFoundError / PermissionError.
    not_executable = tmp_path / "agentstate-not-executable"
    not_executable.write_text("#!/bin/sh\nexit 0\n")
    not_executable.chmod(0o644)
    directory = tmp_path / "agentstate-dir"
    directory.mkdir()
    cases = {"missing": tmp_path / "no-such-binary", "not executable": not_executable,
             "a directory": directory}

    async def body():
        for what, path in cases.items():
            with pytest.raises(ac.AgentStateError) as e:
                await AsyncClient.spawn(store, binary=path)
            err = e.value
            assert type(err) is ac.SpawnError, what
            assert not isinstance(err, OSError), what
            assert err.kind == "spawn_failed" and err.code is None and not err.retryable, what
            assert err.data == {"binary": str(path)}, what
            assert str(path) in err.message and "binary=" in err.message, what
            assert isinstance(err.__cause__, OSError), what
            copy = pickle.loads(pickle.dumps(err))
            assert type(copy) is ac.SpawnError and copy.data == err.data, what
        # The path named by $AGENTSTATE_BIN: the message says where it came from.
        monkeypatch.setenv("AGENTSTATE_BIN", str(cases["missing"]))
        with pytest.raises(ac.SpawnError) as e:
            await AsyncClient.spawn(memory=True)
        assert "$AGENTSTATE_BIN" in e.value.message
        assert not store.exists()  # nothing was started
    run(body())
    # The blocking client raises the same, and leaves no loop thread behind.
    def loop_threads():
        return [t for t in threading.enumerate() if t.name == "agentstate-client"]
    before = loop_threads()
    with pytest.raises(ac.SpawnError):
        ac.Client.spawn(store, binary=cases["not executable"])
    assert loop_threads() == before
