# SPDX-License-Identifier: Apache-2.0
"""tests/support/cluster_harness.py against a real etcd and real nodes: what it prints,
a request through its node that owns nothing reaching the owner's store, kill and start
of a node by id, and every process gone and the temporary directory removed at the end
of its input, on SIGTERM and after a command. (CTest: cluster_harness_test, label
cluster; $AGENTSTATE_BIN is the binary under test.)"""

from __future__ import annotations

import json
import os
import select
import signal
import subprocess
import sys
from pathlib import Path

import pytest

HARNESS = Path(__file__).resolve().parent.parent / "support" / "cluster_harness.py"
sys.path.insert(0, str(HARNESS.parent))
from cluster_harness import rpc  # noqa: E402

START_S = 90.0  # the harness's own waits are bounded (20-30 s each); this bounds them all


@pytest.fixture(scope="module")
def binary() -> str:
    path = os.environ.get("AGENTSTATE_BIN")
    if not path or not os.access(path, os.X_OK):
        pytest.fail("set AGENTSTATE_BIN to the agentstate binary (CTest does)")
    return path


def read_line(proc: subprocess.Popen, timeout: float = START_S) -> dict:
    """The next JSON line of the harness's stdout, within ``timeout``."""
    ready, _, _ = select.select([proc.stdout], [], [], timeout)
    assert ready, f"no line from the harness within {timeout} s"
    line = proc.stdout.readline()
    assert line, f"the harness ended (exit {proc.wait(10)})"
    return json.loads(line)


def gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    return False


def start(binary: str) -> tuple[subprocess.Popen, dict]:
    proc = subprocess.Popen([sys.executable, str(HARNESS), "--bin", binary],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    return proc, read_line(proc)


def check_stopped(proc: subprocess.Popen, info: dict, code: int) -> None:
    assert proc.wait(60) == code
    pids = [info["etcd_pid"], *(n["pid"] for n in info["nodes"])]
    assert all(gone(pid) for pid in pids), pids
    assert not Path(info["nodes"][0]["log"]).parent.exists()


def test_a_request_through_the_node_that_owns_nothing_runs_on_the_owner(binary):
    proc, info = start(binary)
    try:
        nodes = {n["id"]: n for n in info["nodes"]}
        assert list(nodes) == ["n0", "n1", "n2", "spare"]
        assert nodes["spare"]["shards"] == 0 and info["address"] == nodes["spare"]["address"]
        assert sum(n["shards"] for n in nodes.values()) == info["shards"] == 16
        assert all(n["shards"] > 0 for i, n in nodes.items() if i != "spare")
        assert all(n["alive"] and not gone(n["pid"]) for n in nodes.values())

        params = {"app_name": "app", "user_id": "u", "session_id": "s"}
        assert "result" in rpc(info["address"], "create_session", params)
        where = rpc(info["address"], "cluster_map", {"app_name": "app", "user_id": "u"})
        shard = where["result"]["shard"]
        owner = where["result"]["shards"][shard]["owner"]
        assert owner != "spare"
        # The owner, asked directly, serves it from its own store.
        got = rpc(nodes[owner]["address"], "get_session", params)
        assert got["result"]["id"] == "s", got
    finally:
        proc.stdin.close()
    check_stopped(proc, info, 0)


def test_kill_and_start_a_node_by_id_then_sigterm_stops_everything(binary):
    proc, info = start(binary)
    try:
        before = {n["id"]: n for n in info["nodes"]}
        proc.stdin.write("kill n1\n")
        proc.stdin.flush()
        killed = read_line(proc)
        assert killed["ok"] and gone(before["n1"]["pid"])
        assert [n["alive"] for n in killed["nodes"]] == [True, False, True, True]

        proc.stdin.write("start n1\n")
        proc.stdin.flush()
        again = {n["id"]: n for n in read_line(proc)["nodes"]}
        assert again["n1"]["alive"] and again["n1"]["pid"] != before["n1"]["pid"]
        assert rpc(again["n1"]["address"], "ping")["result"] == "pong"

        proc.stdin.write("start n1\n")  # running: refused, nothing changes
        proc.stdin.flush()
        refused = read_line(proc)
        assert not refused["ok"] and "running" in refused["error"]
        info = {**info, "nodes": list(again.values())}
    finally:
        proc.send_signal(signal.SIGTERM)
    check_stopped(proc, info, 0)


def test_a_command_runs_with_the_address_and_its_status_is_the_harness(binary, tmp_path):
    out = tmp_path / "env.json"
    script = ("import json, os, sys; json.dump({k: os.environ[k] for k in ("
              "'AGENTSTATE_TEST_ADDRESS', 'AGENTSTATE_TEST_CLUSTER', 'AGENTSTATE_BIN')}, "
              f"open({str(out)!r}, 'w')); sys.exit(3)")
    r = subprocess.run([sys.executable, str(HARNESS), "--bin", binary, "--",
                        sys.executable, "-c", script], stdin=subprocess.DEVNULL,
                       capture_output=True, text=True, timeout=START_S)
    assert r.returncode == 3, r.stderr
    env = json.loads(out.read_text())
    info = json.loads(env["AGENTSTATE_TEST_CLUSTER"])
    assert env["AGENTSTATE_TEST_ADDRESS"] == info["address"]
    assert env["AGENTSTATE_BIN"] == os.path.abspath(binary)
    pids = [info["etcd_pid"], *(n["pid"] for n in info["nodes"])]
    assert all(gone(pid) for pid in pids)
    assert not Path(info["nodes"][0]["log"]).parent.exists()
