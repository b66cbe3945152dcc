# SPDX-License-Identifier: Apache-2.0
"""ClusterClient against a real cluster: an etcd of the test's own and two
``serve --cluster`` nodes. Calls reach every session through any node, follow ``moved``
from ``--no-forward`` nodes, and move to the other node when one is killed; appends
retried after a lost answer are not applied twice. (CTest: python_cluster_client, label
cluster; it needs etcd, which ``tools/setup.sh --all`` installs.)"""

from __future__ import annotations

import re
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from conftest import TcpServer, run  # noqa: E402

import agentstate_client as ac  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture
def etcd(tmp_path: Path):
    client, peer = free_port(), free_port()
    url, peer_url = f"http://127.0.0.1:{client}", f"http://127.0.0.1:{peer}"
    proc = subprocess.Popen(
        ["etcd", "--name", "t", "--data-dir", str(tmp_path / "etcd"),
         "--listen-client-urls", url, "--advertise-client-urls", url,
         "--listen-peer-urls", peer_url, "--initial-advertise-peer-urls", peer_url,
         "--initial-cluster", f"t={peer_url}", "--log-level", "error"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 20
        while True:  # bounded poll of etcd's start (no readiness signal)
            try:
                with socket.create_connection(("127.0.0.1", client), timeout=0.2):
                    break
            except OSError:
                assert time.monotonic() < deadline, "etcd did not start"
                time.sleep(0.05)  # bounded poll of etcd starting (another process)
        yield url
    finally:
        proc.kill()
        proc.wait()


def start_cluster(binary: str, etcd_url: str, tmp_path: Path, *extra: str) -> list[TcpServer]:
    subprocess.run([binary, "cluster", "init", "--etcd", etcd_url, "--cluster", "c",
                    "--shards", "16", "--expect-nodes", "2"], check=True,
                   stdout=subprocess.DEVNULL)
    nodes = [TcpServer(binary, tmp_path / f"n{i}", ["--cluster", "c", "--etcd", etcd_url,
                                                     "--node-id", f"n{i}", "--lease-ttl-s", "2",
                                                     *extra])
             for i in range(2)]
    deadline = time.monotonic() + 15
    # Bounded poll of each node's log: it logs its 8 of the 16 shards once its own view has
    # the map (until then it answers `unavailable` for them, also when a call is forwarded).
    while not all(any(re.search(r"event=shards .*owned=8 shards=16", line) for line in list(n.log))
                  for n in nodes):
        assert time.monotonic() < deadline, [n.log for n in nodes]
        time.sleep(0.05)  # bounded poll of the nodes' logs (other processes)
    return nodes


@pytest.mark.parametrize("forward", [True, False])
def test_every_session_through_either_node(agentstate_bin, etcd, tmp_path, forward):
    nodes = start_cluster(agentstate_bin, etcd, tmp_path, *([] if forward else ["--no-forward"]))
    try:
        async def body():
            # Only the first node is given: moved answers name the other.
            async with ac.ClusterClient([nodes[0].address]) as c:
                for u in range(12):
                    await c.create_session("app", f"u{u}", "s")
                    r = await c.append_event("app", f"u{u}", "s", {"author": "a",
                                                                  "actions": {"state_delta": {"n": u}}})
                    assert r["version"] == 1
                    assert r["event"]["id"]  # given by the client
                    s = await c.get_session("app", f"u{u}", "s")
                    assert s is not None and s["state"]["n"] == u
                if not forward:
                    assert len(c.addresses) == 2  # it followed moved to the other node
                # app: state is kept at the app's home shard, from any node.
                made = await c.create_session("app", "u0", "s2", {"app:x": 1})
                assert made["state"]["app:x"] == 1
                s = await c.get_session("app", "u1", "s")
                assert s is not None and s["state"]["app:x"] == 1
        run(body())
    finally:
        for n in nodes:
            n.stop()


def test_a_killed_node_sends_calls_to_the_other(agentstate_bin, etcd, tmp_path):
    nodes = start_cluster(agentstate_bin, etcd, tmp_path)
    try:
        async def body():
            async with ac.ClusterClient([n.address for n in nodes], retry_for=5.0) as c:
                users = [f"u{u}" for u in range(12)]
                for u in users:
                    await c.create_session("app", u, "s")
                # Which node owns which user's shard.
                info = await c.call("cluster_map", {"app_name": "app"})
                owner = {}
                for u in users:
                    m = await c.call("cluster_map", {"app_name": "app", "user_id": u})
                    owner[u] = info["shards"][m["shard"]]["owner"]
                first = [u for u in users if owner[u] == "n0"]
                second = [u for u in users if owner[u] == "n1"]
                assert first and second
                nodes[0].proc.kill()
                nodes[0].proc.wait()
                # The client was on n0: its calls move to n1, which serves its own shards
                # and answers n0's unavailable (after the retries, within retry_for).
                for u in second:
                    r = await c.append_event("app", u, "s", {"author": "a", "id": f"e-{u}"})
                    assert r["version"] == 1
                with pytest.raises(ac.UnavailableError):
                    await c.append_event("app", first[0], "s", {"author": "a", "id": "x"})
                # A retry of an acknowledged append returns it; nothing is applied twice.
                again = await c.append_event("app", second[0], "s", {"author": "a",
                                                                    "id": f"e-{second[0]}"})
                assert again["version"] == 1
        run(body())
    finally:
        for n in nodes:
            if n.proc.poll() is None:
                n.stop()


def test_bad_arguments():
    with pytest.raises(ValueError):
        ac.ClusterClient([])
    with pytest.raises(ValueError):
        ac.ClusterClient("127.0.0.1:1")  # a list is needed
    with pytest.raises(ValueError):
        ac.ClusterClient(["127.0.0.1:1"], backoff=0)


def test_no_node_reachable_is_unavailable_within_retry_for():
    port = free_port()

    async def body():
        c = ac.ClusterClient([f"127.0.0.1:{port}"], retry_for=0.3)
        start = time.monotonic()
        with pytest.raises(ac.UnavailableError):
            await c.get_session("app", "u", "s")
        assert time.monotonic() - start < 5  # a hang guard, not a measurement
        await c.close()
    run(body())
