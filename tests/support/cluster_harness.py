#!/usr/bin/env python3
# SPDX-License-Identifier: Apache-2.0
"""A 3-node agentstate cluster on loopback for tests in any language (stdlib only).

Starts one etcd (free loopback ports, a temporary data directory), runs ``agentstate
cluster init``, starts NODES ``agentstate serve --cluster`` nodes (``--listen
127.0.0.1:0``, each with a store of its own in the temporary directory), waits until
``cluster status --json`` shows every shard owned, then starts one more node, which
therefore owns no shard (a shard once owned keeps its owner; the harness checks it owns
0), and waits until every node's own view names every shard's owner (until then a node
answers ``unavailable`` for a shard). Every request through that last node is forwarded
to the shard's owner: it is the address tests connect to.

Without COMMAND: prints one JSON line on stdout, ``{"address": HOST:PORT of the node that
owns nothing, "etcd": URL, "cluster": NAME, "shards": S, "etcd_pid": PID, "nodes": [{"id",
"address", "pid", "alive", "shards", "log"}, ...]}``, then reads commands, one a line, and
answers each with one such JSON line (with ``"ok": true``, or ``{"ok": false, "error"}``):
``kill ID`` (SIGKILL), ``stop ID`` (SIGTERM and the exit), ``start ID`` (a node stopped
or killed, again on its own store, once it serves and its view names every shard's owner)
for a node ID (n0, n1, ..., spare) or
``etcd`` (kill and stop), and ``status``; until its standard input ends or it gets
SIGTERM, SIGINT or SIGHUP (exit 0; 1 when the cluster could not be started).

With ``-- COMMAND ARGS...``: runs COMMAND with AGENTSTATE_TEST_ADDRESS set to that
address (AGENTSTATE_TEST_CLUSTER to the JSON line, AGENTSTATE_BIN to the binary the nodes
run), and exits with its exit status (1 if it succeeded but the last node came to own a
shard meanwhile);
when it fails, the tail of every node's log goes to stderr.

Either way it then stops every process it started by its PID (SIGTERM, then SIGKILL after
a bounded wait) and removes the temporary directory. Each child also gets SIGKILL from
the kernel if the harness dies first (PR_SET_PDEATHSIG), so none outlives it.

Why Python and not a C++ tool: the suites it serves are Python and JavaScript, started by
CTest as scripts; the standard library has all it needs (processes, sockets, JSON), and
it needs no build. It follows tests/support/etcd_process.hpp and
tests/cluster/serve_cluster_test.cpp: etcd retried on other ports when it cannot bind,
nodes' addresses read from their "listening on" log line, readiness from their
"serving" event, the settled map polled through ``cluster_map`` on every node.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ETCD_START_S = 20.0   # etcd answering a read
NODE_START_S = 20.0   # a node's "serving" event after its start
SETTLE_S = 30.0       # every shard owned, in etcd and in every node's view
STOP_S = 10.0         # a process exiting after SIGTERM, before SIGKILL
POLL_S = 0.05


class HarnessError(Exception):
    pass


def free_port() -> int:
    """A loopback port free at the moment of the call (another process may take it
    before it is used: etcd's start is retried on other ports)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _die_with_parent() -> None:
    """In the child before exec: SIGKILL when the harness's thread that started it ends."""
    libc = ctypes.CDLL(None, use_errno=True)
    pr_set_pdeathsig = 1
    libc.prctl(pr_set_pdeathsig, signal.SIGKILL, 0, 0, 0)


def wait_until(what: str, deadline_s: float, check, on_timeout=lambda: ""):
    """Polls ``check()`` until it returns a value that is not None, at most deadline_s.
    A poll because the processes waited on (etcd, nodes) offer no readiness signal other
    than their logs and answers; the deadline bounds every wait of the harness."""
    deadline = time.monotonic() + deadline_s
    while True:
        value = check()
        if value is not None:
            return value
        if time.monotonic() >= deadline:
            raise HarnessError(f"timed out after {deadline_s:.0f} s waiting for {what}. "
                               f"{on_timeout()}")
        time.sleep(POLL_S)  # poll: another process sets the condition (see above)


def rpc(address: str, method: str, params: dict | None = None, timeout: float = 5.0) -> dict:
    """One JSON-RPC request on a new TCP connection; the response object."""
    host, port = address.rsplit(":", 1)
    with socket.create_connection((host, int(port)), timeout=timeout) as s:
        s.sendall(json.dumps({"jsonrpc": "2.0", "id": 1, "method": method,
                              "params": params or {}}).encode() + b"\n")
        buf = b""
        while not buf.endswith(b"\n"):
            chunk = s.recv(65536)
            if not chunk:
                raise HarnessError(f"{address} closed the connection during {method}")
            buf += chunk
    return json.loads(buf)


class Child:
    """A child process whose stdout and stderr go to ``log``."""

    def __init__(self, name: str, argv: list[str], log: Path):
        self.name = name
        self.log = log
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=out,
                                         stderr=subprocess.STDOUT,
                                         preexec_fn=_die_with_parent)

    @property
    def pid(self) -> int:
        return self.proc.pid

    def text(self) -> str:
        try:
            return self.log.read_text("utf-8", "replace")
        except FileNotFoundError:
            return ""

    def tail(self, n: int = 20) -> str:
        lines = self.text().splitlines()[-n:]
        return f"--- {self.name} (pid {self.pid}), last {len(lines)} lines of {self.log}:\n" + \
            "\n".join(lines)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self, sig: int = signal.SIGTERM) -> None:
        """Sends ``sig`` by PID, waits at most STOP_S for the exit, then SIGKILLs."""
        if self.proc.poll() is None:
            os.kill(self.proc.pid, sig)
            try:
                self.proc.wait(STOP_S)
            except subprocess.TimeoutExpired:
                os.kill(self.proc.pid, signal.SIGKILL)
                self.proc.wait()


class Cluster:
    def __init__(self, binary: str, nodes: int, shards: int, name: str = "conf"):
        self.binary = binary
        self.node_count = nodes
        self.shards = shards
        self.name = name
        self.dir = Path(tempfile.mkdtemp(prefix="agentstate-cluster-"))
        self.etcd: Child | None = None
        self.etcd_url = ""
        self.nodes: list[Child] = []
        self.addresses: dict[str, str] = {}
        self.runs: dict[str, int] = {}  # processes started per node id

    # -- start ---------------------------------------------------------------------

    def start(self) -> None:
        self._start_etcd()
        self._cli("init", "--shards", str(self.shards), "--expect-nodes", str(self.node_count))
        for i in range(self.node_count):
            self._start_node(f"n{i}")
        wait_until("every shard owned in etcd", SETTLE_S, self._all_owned,
                   lambda: self._tails())
        spare = self._start_node("spare")
        status = self._status()
        owned = {n["id"]: n["shards"] for n in status["nodes"]}
        if owned.get(spare.name) != 0 or status["unowned"]:
            raise HarnessError(f"the last node owns {owned.get(spare.name)} shards, "
                               f"{len(status['unowned'])} unowned: {status}")
        for node in self.nodes:
            wait_until(f"{node.name}'s view of the map naming every owner", SETTLE_S,
                       lambda node=node: self._view_settled(node), lambda: self._tails())

    def _start_etcd(self) -> None:
        for attempt in range(3):
            client, peer = free_port(), free_port()
            url, peer_url = f"http://127.0.0.1:{client}", f"http://127.0.0.1:{peer}"
            etcd = Child("etcd", ["etcd", "--name", "t",
                                  "--data-dir", str(self.dir / f"etcd-{attempt}"),
                                  "--listen-client-urls", url, "--advertise-client-urls", url,
                                  "--listen-peer-urls", peer_url,
                                  "--initial-advertise-peer-urls", peer_url,
                                  "--initial-cluster", f"t={peer_url}", "--log-level", "warn"],
                         self.dir / f"etcd-{attempt}.log")
            self.etcd, self.etcd_url = etcd, url

            def answers() -> bool | None:
                if not etcd.alive():
                    return False  # exited: a port was taken meanwhile
                try:
                    with socket.create_connection(("127.0.0.1", client), timeout=0.5) as s:
                        s.sendall(_range_request())
                        reply = s.recv(64)
                    return True if reply.startswith(b"HTTP/1.") and b" 200 " in reply else None
                except OSError:
                    return None

            if wait_until("etcd answering", ETCD_START_S, answers, etcd.tail):
                return
            etcd.stop(signal.SIGKILL)
        raise HarnessError(f"etcd did not start in 3 attempts\n{self.etcd.tail() if self.etcd else ''}")

    def _start_node(self, node_id: str) -> Child:
        """Starts node ``node_id`` (again, if it ran before: its store and id, a log of
        its own) and waits until it serves. A node started again within its old lease's
        TTL waits for that lease to expire (at most TTL + 1 s: docs/cluster.md)."""
        store = self.dir / f"{node_id}-store"
        runs = self.runs.get(node_id, 0)
        self.runs[node_id] = runs + 1
        node = Child(node_id, [self.binary, "serve", "--store", str(store),
                               "--listen", "127.0.0.1:0", "--cluster", self.name,
                               "--etcd", self.etcd_url, "--node-id", node_id],
                     self.dir / (f"{node_id}.log" if runs == 0 else f"{node_id}.{runs}.log"))
        old = [i for i, n in enumerate(self.nodes) if n.name == node_id]
        if old:
            self.nodes[old[0]] = node
        else:
            self.nodes.append(node)

        def serving() -> str | None:
            if not node.alive():
                raise HarnessError(f"node {node_id} exited ({node.proc.returncode})\n{node.tail()}")
            text = node.text()
            m = re.search(r'listening on (127\.0\.0\.1:[0-9]+)', text)
            if m and re.search(r'event=serving|"event":"serving"', text):
                return m.group(1)
            return None

        self.addresses[node_id] = wait_until(f"node {node_id} serving", NODE_START_S, serving,
                                             node.tail)
        return node

    def _cli(self, action: str, *extra: str) -> str:
        r = subprocess.run([self.binary, "cluster", action, "--etcd", self.etcd_url,
                            "--cluster", self.name, *extra],
                           stdin=subprocess.DEVNULL, capture_output=True, text=True,
                           timeout=30)
        if r.returncode != 0:
            raise HarnessError(f"agentstate cluster {action} exited {r.returncode}: "
                               f"{r.stdout}{r.stderr}")
        return r.stdout

    def _status(self) -> dict:
        return json.loads(self._cli("status", "--json"))

    def _all_owned(self) -> bool | None:
        status = self._status()
        return True if not status["unowned"] and len(status["map"]) == self.shards else None

    def _view_settled(self, node: Child) -> bool | None:
        """True once the node's cluster_map names an owner for every shard."""
        if not node.alive():
            raise HarnessError(f"node {node.name} exited\n{node.tail()}")
        try:
            r = rpc(self.addresses[node.name], "cluster_map")
        except (OSError, HarnessError, ValueError):
            return None  # not answering yet: polled again until the deadline
        if "result" not in r:
            return None
        shards = r["result"]["shards"]
        return True if len(shards) == self.shards and all(s["owner"] for s in shards) else None

    def spare_owns_nothing(self) -> None:
        """Raises HarnessError unless the last node started still owns no shard."""
        status = self._status()
        owned = {n["id"]: n["shards"] for n in status["nodes"]}
        spare = self.nodes[-1].name
        if owned.get(spare) != 0:
            raise HarnessError(f"node {spare} owns {owned.get(spare)} shards: {status}")

    def control(self, line: str) -> dict:
        """One command of standard input: ``kill ID`` (SIGKILL), ``stop ID`` (SIGTERM,
        then the exit) or ``start ID`` (a stopped node again, on its store), for a node
        ID or ``etcd`` (kill and stop only); ``status``. The answer: ``{"ok": true,
        ...describe()}`` or ``{"ok": false, "error": TEXT}``."""
        words = line.split()
        try:
            if words == ["status"]:
                return {"ok": True, **self.describe()}
            if len(words) != 2 or words[0] not in ("kill", "stop", "start"):
                raise HarnessError(f"unknown command {line.strip()!r}: kill ID, stop ID, "
                                   "start ID, status")
            action, name = words
            if name == "etcd" and action != "start" and self.etcd is not None:
                self.etcd.stop(signal.SIGKILL if action == "kill" else signal.SIGTERM)
                return {"ok": True, **self.describe(status=False)}
            node = next((n for n in self.nodes if n.name == name), None)
            if node is None:
                raise HarnessError(f"no node {name!r}")
            if action == "start":
                if node.alive():
                    raise HarnessError(f"node {name} is running (pid {node.pid})")
                node = self._start_node(name)
                # Its own view of the map first (the others learn of its return
                # through etcd on their own: until then they answer `unavailable`).
                wait_until(f"{name}'s view of the map naming every owner", SETTLE_S,
                           lambda: self._view_settled(node), node.tail)
            else:
                node.stop(signal.SIGKILL if action == "kill" else signal.SIGTERM)
            return {"ok": True, **self.describe(status=False)}
        except (HarnessError, OSError) as e:
            return {"ok": False, "error": str(e)}

    def _tails(self) -> str:
        return "\n".join(c.tail() for c in [*self.nodes, *([self.etcd] if self.etcd else [])])

    # -- what tests read -----------------------------------------------------------

    def describe(self, status: bool = True) -> dict:
        """The cluster as tests read it; each node's shard count from ``cluster status``
        (None with status=False, or while etcd is down), ``alive`` whether its process
        runs."""
        owned: dict[str, int] = {}
        if status and self.etcd is not None and self.etcd.alive():
            owned = {n["id"]: n["shards"] for n in self._status()["nodes"]}
        return {
            "address": self.addresses[self.nodes[-1].name],
            "etcd": self.etcd_url,
            "cluster": self.name,
            "shards": self.shards,
            "etcd_pid": self.etcd.pid if self.etcd else None,
            "nodes": [{"id": n.name, "address": self.addresses[n.name], "pid": n.pid,
                       "alive": n.alive(), "shards": owned.get(n.name), "log": str(n.log)}
                      for n in self.nodes],
        }

    # -- stop ----------------------------------------------------------------------

    def stop(self) -> None:
        """Every node (the last started first), then etcd, each by its PID; then the
        temporary directory. Nodes stop before etcd so that they can end their leases."""
        try:
            for node in reversed(self.nodes):
                node.stop()
            if self.etcd is not None:
                self.etcd.stop()
        finally:
            shutil.rmtree(self.dir, ignore_errors=True)


def _range_request() -> bytes:
    """An HTTP request for etcd's v3 JSON gateway: a range read of key "/"."""
    body = json.dumps({"key": "Lw=="}).encode()  # base64 of "/"
    return (b"POST /v3/kv/range HTTP/1.0\r\nContent-Type: application/json\r\n"
            b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)


class _Stop(Exception):
    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _on_signal(signum, frame):  # noqa: ARG001
    raise _Stop(signum)


def main(argv: list[str]) -> int:
    if "--" in argv:
        i = argv.index("--")
        argv, command = argv[:i], argv[i + 1:]
    else:
        command = []
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                usage="%(prog)s [options] [-- COMMAND ARGS...]")
    p.add_argument("--bin", default=os.environ.get("AGENTSTATE_BIN") or shutil.which("agentstate"),
                   help="the agentstate binary (default $AGENTSTATE_BIN, else PATH)")
    p.add_argument("--nodes", type=int, default=3, help="nodes that own the shards (default 3)")
    p.add_argument("--shards", type=int, default=16, help="the cluster's shards (default 16)")
    args = p.parse_args(argv)
    if not args.bin or not os.access(args.bin, os.X_OK):
        p.error("no agentstate binary: give --bin or set AGENTSTATE_BIN")
    if shutil.which("etcd") is None:
        p.error("etcd not found (tools/setup.sh --all installs etcd-server)")

    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, _on_signal)
    cluster = Cluster(os.path.abspath(args.bin), args.nodes, args.shards)
    child: subprocess.Popen | None = None
    try:
        cluster.start()
        info = cluster.describe()
        line = json.dumps(info)
        if not command:
            print(line, flush=True)
            for command_line in sys.stdin:
                if command_line.strip():
                    print(json.dumps(cluster.control(command_line)), flush=True)
            return 0
        env = dict(os.environ, AGENTSTATE_TEST_ADDRESS=info["address"],
                   AGENTSTATE_TEST_CLUSTER=line, AGENTSTATE_BIN=cluster.binary)
        print(f"cluster_harness: {line}", file=sys.stderr, flush=True)
        child = subprocess.Popen(command, env=env)
        code = child.wait()
        child = None
        if code != 0:
            print(cluster._tails(), file=sys.stderr)
            return code
        # Everything the command did went through a node that owns nothing: still so.
        cluster.spare_owns_nothing()
        return 0
    except HarnessError as e:
        print(f"cluster_harness: {e}", file=sys.stderr)
        return 1
    except _Stop as e:
        # Without a command a signal is how it is asked to stop; with one, the command
        # was cut short.
        print(f"cluster_harness: {e}: stopping", file=sys.stderr)
        return 128 + e.signum if command else 0
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        signal.signal(signal.SIGINT, signal.SIG_IGN)
        if child is not None and child.poll() is None:
            child.terminate()
            try:
                child.wait(STOP_S)
            except subprocess.TimeoutExpired:
                child.kill()
                child.wait()
        cluster.stop()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
