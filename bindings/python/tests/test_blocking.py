# SPDX-License-Identifier: Apache-2.0
"""The blocking Client: every method, from many threads at once."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

import agentstate_client as ac
from agentstate_client import Client

APP = "blk"


def test_every_method_blocking(agentstate_bin, store):
    with Client.spawn(store, binary=agentstate_bin) as c:
        s = c.create_session(APP, "u", "s", {"user:lang": "en", "app:m": 1})
        assert s["version"] == 0
        r = c.append_event(APP, "u", "s", {"id": "e1", "author": "a", "invocation_id": "i1",
                                           "actions": {"state_delta": {"temp:t": 1, "x": 2}}})
        assert r["version"] == 1
        assert c.get_session(APP, "u", "s", invocation_id="i1")["state"]["temp:t"] == 1
        assert c.inject_state(APP, "u", "s", "{x}/{temp:t}", invocation_id="i1") == "2/1"
        assert c.end_invocation(APP, "u", "s", "i1") is None
        assert c.inject_state(APP, "u", "s", "{temp:t?}", invocation_id="i1") == ""
        assert c.get_user_state(APP, "u") == {"lang": "en"}
        assert c.get_app_state(APP) == {"m": 1}
        assert [m["id"] for m in c.list_sessions(APP, "u")["sessions"]] == ["s"]
        for i in range(4):
            c.create_session(APP, "u", f"t{i}")
        assert len(list(c.iter_sessions(APP, "u", page_size=2))) == 5
        assert c.flush() is None
        assert c.stats()["appends"] == 1
        assert c.delete_session(APP, "u", "s") is None
        assert c.get_session(APP, "u", "s") is None
        with pytest.raises(ac.AlreadyExistsError):
            c.create_session(APP, "u", "t0")
        with pytest.raises(ac.InvalidArgumentError):
            c.call("nope")
    assert c.returncode == 0
    with pytest.raises(ac.ConnectionClosedError):
        c.stats()
    c.close()  # again: no effect


def test_many_threads_share_one_client(agentstate_bin, store):
    threads, per_thread = 16, 40
    with Client.spawn(store, binary=agentstate_bin, durability="nosync") as c:
        c.create_session(APP, "u", "shared")
        for t in range(threads):
            c.create_session(APP, "u", f"own{t}")

        def work(t: int):
            out = []
            for i in range(per_thread):
                shared = c.append_event(APP, "u", "shared", {"id": f"t{t}-{i}", "author": f"t{t}"})
                own = c.append_event(APP, "u", f"own{t}", {"id": f"o{i}", "author": f"t{t}",
                                                          "actions": {"state_delta": {"i": i}}})
                assert shared["event"]["id"] == f"t{t}-{i}"
                assert own["version"] == i + 1  # only this thread appends to own{t}
                out.append(shared["version"])
            assert c.get_session(APP, "u", f"own{t}", num_recent_events=0)["state"] == {"i": per_thread - 1}
            return out

        with ThreadPoolExecutor(threads) as pool:
            versions = [v for vs in pool.map(work, range(threads)) for v in vs]
        assert sorted(versions) == list(range(1, threads * per_thread + 1))
        got = c.get_session(APP, "u", "shared")
        assert got["version"] == threads * per_thread
        assert len({e["id"] for e in got["events"]}) == threads * per_thread


def test_close_racing_calls_from_other_threads(agentstate_bin, store):
    """Calls racing close() either complete or raise ConnectionClosedError; none hangs."""
    c = Client.spawn(store, binary=agentstate_bin)
    c.create_session(APP, "u", "s")
    start = threading.Barrier(9)
    outcomes: list[object] = []
    lock = threading.Lock()

    def caller(t: int):
        start.wait()
        for i in range(200):
            try:
                r = c.append_event(APP, "u", "s", {"id": f"{t}-{i}", "author": "a"})
            except ac.ConnectionClosedError as e:
                with lock:
                    outcomes.append(e)
                return
            with lock:
                outcomes.append(r)

    workers = [threading.Thread(target=caller, args=(t,)) for t in range(8)]
    for w in workers:
        w.start()
    start.wait()
    c.close()
    for w in workers:
        w.join(30)
        assert not w.is_alive()
    answered = [o for o in outcomes if isinstance(o, dict)]
    assert len(outcomes) - len(answered) <= 8
    with Client.spawn(store, binary=agentstate_bin) as again:
        assert again.get_session(APP, "u", "s")["version"] == len(answered)


def client_threads() -> int:
    return sum(t.name == "agentstate-client" for t in threading.enumerate())


def test_spawn_failure_raises_and_leaves_no_thread(agentstate_bin, store):
    before = client_threads()
    with Client.spawn(store, binary=agentstate_bin):
        assert client_threads() == before + 1
        with pytest.raises(ac.ConnectionClosedError) as e:
            Client.spawn(store, binary=agentstate_bin)
        assert e.value.returncode == 1
        assert client_threads() == before + 1
    assert client_threads() == before
