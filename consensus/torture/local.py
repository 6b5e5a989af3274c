"""`LocalCluster`: a farm of real node processes on loopback (tests, demos, Spark tests).

    with LocalCluster(3) as farm:
        leader = farm.wait_for_leader()
        with farm.client() as client:
            client.append([b"hello"])

Each node is a ``python -m consensus.cli node`` process (it never imports pyspark) with
its own data directory and log file. The listening sockets are bound here, on ephemeral
ports of 127.0.0.1 (or of `host`), and handed to the processes (``--listen-fd``): no port
can be taken between choosing and binding, and a restarted node gets its port back.
Leaving the block stops every process (SIGTERM, then SIGKILL after a grace period) and
removes a temporary data directory.
"""
from __future__ import annotations

import json
import os
import re
import secrets
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from typing import Any, Callable, Iterable, Mapping, Sequence

from consensus.client.client import FarmClient
from consensus.common.errors import FarmError, Unavailable
from consensus.common.partitions import check_partitions, check_replicas
from consensus.net.security import WILDCARDS

STOP_GRACE = 10.0
METRICS_LINE = re.compile(rb"metrics on https?://[^\s/]+:(\d+)/metrics")


class LocalCluster:
    def __init__(self, nodes: int = 3, data_dir: str | None = None, wire: str = "garlicfarm",
                 cluster: str = "farm", username: str = "farm", password: str | None = None,
                 fsync: str = "batch", observers: int = 0, extra_args: Sequence[str] = (),
                 status_interval: float = 2.0,
                 peer_address: Callable[[int, int, str], str] | None = None,
                 host: str = "127.0.0.1", advertise: str | None = None,
                 client_options: Mapping[str, Any] | None = None,
                 metrics: bool = False, partitions: int = 1,
                 replicas: int | None = None) -> None:
        """`peer_address(source, target, target_endpoint)`, when given, is asked at every
        (re)start of `source` where it must dial `target` (e.g. a fault proxy).
        `host`: the address the nodes listen on; `advertise`: the one their endpoints
        name (peers and clients dial it; needed when `host` is a wildcard).
        `client_options`: FarmClient arguments of `client()` (e.g. TLS settings).
        `metrics`: each node serves Prometheus metrics on a free loopback port
        (`metrics_port`). `partitions`: Raft groups per node (`--partitions`); address
        one with `client(partition=p)`. `replicas`: nodes per partition k >= 1
        (`--replicas`; None: every node)."""
        if nodes < 1:
            raise ValueError("a LocalCluster needs at least one node")
        if advertise is None and host in WILDCARDS:
            raise ValueError(f"a LocalCluster listening on {host} needs `advertise`: the "
                             "address (or name) other machines reach this one at")
        self.host, self.advertise = host, advertise or host
        self.client_options = dict(client_options or {})
        self.wire, self.cluster, self.fsync = wire, cluster, fsync
        self.username = username
        self.password = password if password is not None else secrets.token_hex(12)
        self.extra_args = list(extra_args)
        self.status_interval = status_interval
        self.metrics = metrics
        self.partitions = check_partitions(partitions, "partitions")
        self.replicas = None if replicas is None else check_replicas(replicas, nodes,
                                                                      "replicas")
        self._log_starts: dict[int, int] = {}   # node id -> its log's size at its last start
        self.peer_address = peer_address
        self._temp = data_dir is None
        self.data_dir = data_dir or tempfile.mkdtemp(prefix="garlicfarm-")
        self.voter_ids = list(range(1, nodes + 1))
        self.observer_ids = list(range(nodes + 1, nodes + observers + 1))
        self._sockets: dict[int, socket.socket] = {}
        self._retired: dict[int, str] = {}      # node id -> its endpoint (port closed)
        self._procs: dict[int, subprocess.Popen] = {}
        self._args: dict[int, list[str]] = {}
        self._logs: dict[int, Any] = {}
        self._ports_file = os.path.join(self.data_dir, "ports.json")
        self._saved_ports = self._load_ports()
        for node_id in self.voter_ids + self.observer_ids:
            self._bind(node_id)

    # -- the contract -----------------------------------------------------------------------
    @property
    def node_ids(self) -> list[int]:
        return sorted(self._args) or self.voter_ids + self.observer_ids

    @property
    def endpoints(self) -> str:
        return ",".join(self.endpoint_of(i) for i in self.voter_ids + self.observer_ids
                        if i in self._sockets)

    def endpoint_of(self, node_id: int) -> str:
        if node_id in self._retired:
            return self._retired[node_id]
        address = f"[{self.advertise}]" if ":" in self.advertise else self.advertise
        return f"{address}:{self._sockets[node_id].getsockname()[1]}"

    def log_path(self, node_id: int) -> str:
        return os.path.join(self.data_dir, f"node-{node_id}.log")

    def node_dir(self, node_id: int) -> str:
        return os.path.join(self.data_dir, f"node-{node_id}")

    def client(self, **kw: Any) -> FarmClient:
        options = dict(cluster=self.cluster, username=self.username, password=self.password)
        options.update(self.client_options)
        options.update(kw)
        endpoints = options.pop("endpoints", self.endpoints)
        return FarmClient(endpoints, **options)

    def __enter__(self) -> "LocalCluster":
        try:
            for node_id in self.voter_ids + self.observer_ids:
                self._start(node_id, self._initial_args(node_id))
        except BaseException:
            self.close()
            raise
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def wait_for_leader(self, timeout: float = 10.0, *, partition: int = 0) -> int:
        """The leader's id (of `partition`), once one node leads and answers (FarmError
        at the deadline)."""
        deadline = time.monotonic() + timeout
        with self.client(timeout=min(2.0, timeout), partition=partition) as client:
            while True:
                leader = self._agreed_leader(client)
                if leader is not None:
                    return leader
                if not any(self.running(i) for i in self.node_ids):
                    raise Unavailable(f"every node exited before a leader was elected\n"
                                      f"{self.describe_nodes()}")
                if time.monotonic() >= deadline:
                    raise Unavailable(f"no leader within {timeout}s\n{self.describe_nodes()}")
                time.sleep(0.02)

    def describe_nodes(self, lines: int = 6) -> str:
        """Each node's state and the end of its log (a temporary data dir is gone by the
        time anyone reads an error: the log's tail travels in the message instead)."""
        parts = []
        for node_id in self.node_ids:
            proc = self._procs.get(node_id)
            state = ("not started" if proc is None else "running" if proc.poll() is None
                     else f"exited with {proc.returncode}")
            try:
                with open(self.log_path(node_id), "rb") as f:
                    f.seek(0, os.SEEK_END)
                    f.seek(max(0, f.tell() - 4096))
                    tail = f.read().decode("utf-8", "replace").splitlines()[-lines:]
            except OSError:
                tail = []
            parts.append(f"node {node_id} ({state}), {self.log_path(node_id)}:"
                         + "".join(f"\n    {line}" for line in tail))
        return "\n".join(parts)

    def _agreed_leader(self, client: FarmClient) -> int | None:
        for node_id in self.node_ids:
            if not self.running(node_id):
                continue
            try:
                answer = client.ping(self.endpoint_of(node_id))
            except FarmError:
                continue
            if answer.get("role") == "leader":
                return node_id
        return None

    def kill(self, node_id: int) -> None:
        """SIGKILL, as a crash."""
        proc = self._procs[node_id]
        if proc.poll() is None:
            proc.send_signal(signal.SIGKILL)
        proc.wait()

    def stop(self, node_id: int, timeout: float = STOP_GRACE) -> int:
        """SIGTERM and wait (SIGKILL after `timeout`); the exit code."""
        proc = self._procs[node_id]
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        return proc.returncode

    def restart(self, node_id: int) -> None:
        """Start a stopped or killed node again, on the same port and data directory."""
        proc = self._procs.get(node_id)
        if proc is not None and proc.poll() is None:
            raise RuntimeError(f"node {node_id} is still running: stop or kill it first")
        if node_id in self._retired:
            raise RuntimeError(f"node {node_id} is retired: it cannot start again")
        self._start(node_id, self._args[node_id])

    def retire(self, node_id: int) -> None:
        """Stop a node for good (SIGTERM if it runs) and close its listening socket: its
        port refuses connections from now on, as a machine taken out of the farm would
        (a stopped node's port otherwise still accepts, held here for a restart). It
        cannot be restarted; its id is not given out again."""
        if node_id not in self._sockets:
            raise ValueError(f"node {node_id} has no socket here (retired already?)")
        if node_id in self._procs:
            self.stop(node_id)
        endpoint = self.endpoint_of(node_id)
        self._sockets.pop(node_id).close()
        self._retired[node_id] = endpoint

    def pause(self, node_id: int) -> None:
        """SIGSTOP: the process keeps its sockets but does nothing (a stalled node)."""
        os.kill(self._procs[node_id].pid, signal.SIGSTOP)

    def resume(self, node_id: int) -> None:
        os.kill(self._procs[node_id].pid, signal.SIGCONT)

    def pid(self, node_id: int) -> int | None:
        proc = self._procs.get(node_id)
        return proc.pid if proc is not None and proc.poll() is None else None

    def running(self, node_id: int) -> bool:
        proc = self._procs.get(node_id)
        return proc is not None and proc.poll() is None

    def partition_views(self, *, timeout: float = 3.0,
                        answer_timeout: float | None = None) -> dict[int, list[dict]]:
        """Each running node's own view of every partition it hosts (the `partitions`
        call, asked of that node); a node that does not answer is left out. `timeout`
        and `answer_timeout` are the client's."""
        options: dict[str, Any] = {"timeout": timeout}
        if answer_timeout is not None:
            options["answer_timeout"] = answer_timeout
        found: dict[int, list[dict]] = {}
        with self.client(**options) as client:
            for node in self.node_ids:
                if self.running(node):
                    try:
                        found[node] = client.partitions(self.endpoint_of(node))["partitions"]
                    except FarmError:
                        pass
        return found

    def partition_leaders(self, nodes: Iterable[int] | None = None, *, timeout: float = 3.0,
                          answer_timeout: float | None = None) -> dict[int, int]:
        """Partition -> the running node (of `nodes`, default all) that says it leads it
        (the later node in id order, should two say so in different terms); partitions
        none of them leads are missing."""
        chosen = None if nodes is None else set(nodes)
        found: dict[int, int] = {}
        views = self.partition_views(timeout=timeout, answer_timeout=answer_timeout)
        for node, parts in sorted(views.items()):
            if chosen is None or node in chosen:
                for part in parts:
                    if part["role"] == "leader":
                        found[part["partition"]] = node
        return found

    def spawn(self, node_id: int | None = None, *, join: bool = True,
              observer: bool = False) -> int:
        """Start an extra node that is not in the initial configuration (it waits to be
        added with add_server / update_voters / update_observers); its id."""
        node_id = node_id or max([*self._sockets, *self._retired]) + 1
        if node_id in self._procs or node_id in self._retired:
            raise ValueError(f"node {node_id} exists already")
        self._bind(node_id)
        args = self._common_args(node_id)
        args += ["--peers", self._members(self.voter_ids)]
        if join:
            args.append("--join")
        if observer:
            args.append("--observer")
        self._start(node_id, args)
        return node_id

    def close(self) -> None:
        for node_id, proc in list(self._procs.items()):
            if proc.poll() is None:
                proc.send_signal(signal.SIGCONT)        # a paused node must hear SIGTERM
                proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + STOP_GRACE
        for proc in self._procs.values():
            try:
                proc.wait(max(0.01, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for f in self._logs.values():
            f.close()
        self._logs.clear()
        for sock in self._sockets.values():
            sock.close()
        if self._temp:
            shutil.rmtree(self.data_dir, ignore_errors=True)

    def metrics_port(self, node_id: int, timeout: float = 10.0) -> int:
        """The loopback port of `node_id`'s Prometheus metrics (since its last start), from
        the line the node logs when it serves them."""
        if not self.metrics:
            raise ValueError("this LocalCluster runs without metrics: pass metrics=True")
        deadline = time.monotonic() + timeout
        while True:
            with open(self.log_path(node_id), "rb") as f:
                f.seek(self._log_starts[node_id])
                found = METRICS_LINE.search(f.read())
            if found is not None:
                return int(found.group(1))
            if not self.running(node_id) or time.monotonic() >= deadline:
                raise Unavailable(f"node {node_id} logged no metrics address "
                                  f"({self.log_path(node_id)})\n{self.describe_nodes()}")
            time.sleep(0.02)

    # -- processes -----------------------------------------------------------------------------
    def _load_ports(self) -> dict[int, int]:
        try:
            with open(self._ports_file, encoding="utf-8") as f:
                return {int(k): int(v) for k, v in json.load(f).items()}
        except (OSError, ValueError, AttributeError):
            return {}

    def _bind(self, node_id: int) -> None:
        """Listen for a node: on the port it had in this data directory before (its
        peers' logs may name it), else on a fresh ephemeral port."""
        family = socket.AF_INET6 if ":" in self.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)   # past TIME_WAIT
        try:
            sock.bind((self.host, self._saved_ports.get(node_id, 0)))
        except OSError:
            sock.bind((self.host, 0))
        sock.listen(256)
        sock.set_inheritable(True)
        self._sockets[node_id] = sock
        ports = {i: s.getsockname()[1] for i, s in self._sockets.items()}
        os.makedirs(self.data_dir, exist_ok=True)
        with open(self._ports_file, "w", encoding="utf-8") as f:
            json.dump(ports, f)

    def _members(self, ids: Sequence[int]) -> str:
        return ",".join(f"{i}={self.endpoint_of(i)}" for i in ids)

    def _common_args(self, node_id: int) -> list[str]:
        return ["--id", str(node_id), "--listen", self.endpoint_of(node_id),
                "--data-dir", self.node_dir(node_id), "--cluster", self.cluster,
                "--wire", self.wire, "--credentials", self._credentials_file(),
                "--fsync", self.fsync, "--status-interval", str(self.status_interval),
                *(["--metrics", "127.0.0.1:0"] if self.metrics else []),
                *(["--partitions", str(self.partitions)] if self.partitions > 1 else []),
                *(["--replicas", str(self.replicas)] if self.replicas is not None else [])]

    def _credentials_file(self) -> str:
        """The farm's ``user:password`` in a file only this user can read, for the nodes'
        ``--credentials``: a password on the command line shows in every `ps`, and one
        that starts with "-" reads to argparse as another option (the nodes then exit at
        once: a generated password did so once in 64 starts)."""
        if "\n" in self.password or "\r" in self.password or ":" in self.username:
            raise ValueError("LocalCluster: the username cannot hold ':' and the password "
                             "cannot hold a line break (credentials file format)")
        path = os.path.join(self.data_dir, "credentials")
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(f"{self.username}:{self.password}\n")
        return path

    def _initial_args(self, node_id: int) -> list[str]:
        args = self._common_args(node_id)
        args += ["--peers", self._members(self.voter_ids)]
        if self.observer_ids:
            args += ["--observers", self._members(self.observer_ids)]
        if node_id in self.observer_ids:
            args.append("--observer")
        return args

    def _peer_address_args(self, node_id: int) -> list[str]:
        if self.peer_address is None:
            return []
        args = []
        for target in sorted(self._sockets):
            if target != node_id:
                address = self.peer_address(node_id, target, self.endpoint_of(target))
                args += ["--peer-address", f"{target}={address}"]
        return args

    def _start(self, node_id: int, args: list[str]) -> None:
        self._args[node_id] = args
        sock = self._sockets[node_id]
        command = [sys.executable, "-m", "consensus.cli", "node", *args,
                   "--listen-fd", str(sock.fileno()), *self._peer_address_args(node_id),
                   *self.extra_args]
        log = self._logs.get(node_id)
        if log is None:
            log = self._logs[node_id] = open(self.log_path(node_id), "ab")
        self._log_starts[node_id] = log.tell()
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self._procs[node_id] = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log,
                                                stderr=subprocess.STDOUT, env=env,
                                                pass_fds=(sock.fileno(),))
