"""The torture's ``flood`` fault: what a hostile or greedy client does to one member while
the workload runs, so that the history shows whether the farm stays live and correct
under it (docs/runtime.md, "Admission control"):

* **bad logins**: threads that run the Garlic Farm handshake with a wrong password as
  fast as the node lets them (each one a full challenge round and a refused login);
* **slowloris**: connections that send a handshake one byte per second, opened again
  whenever the node closes them;
* **read-back**: a reader with the right password that pages through the member's whole
  log with ``read_entries`` (what a Spark job catching up on a backlog does), over and
  over.

`Flood.stop()` ends every thread and says what each attack did; the counts go into the
fault's record. Every loop backs off when the node is down (a kill during a flood). The
admission tests and benchmarks/hostile_clients.py run the same attacks (a `Flood` as a
context manager, shaped to one attack).
"""
from __future__ import annotations

import socket
import threading
from dataclasses import dataclass, field

from consensus.common.errors import AuthenticationError, FarmError
from consensus.net.backoff import Backoff
from consensus.net.dial import dial
from consensus.net.security import Security, split_endpoint
from consensus.wire.handshake import handshake_path

SLOW_BYTE_EVERY = 1.0       #: seconds between two bytes of a slowloris connection
READ_PAGE = 4 << 20         #: bytes per read_entries page of the read-back
LOGIN_TIMEOUT = 6.0         #: a wrong login waits for its refusal (the tarpit holds it)


@dataclass(frozen=True)
class FloodShape:
    """How hard each attack pushes."""

    bad_logins: int = 16        #: threads logging in with a wrong password
    slowloris: int = 100        #: connections trickling a handshake
    readers: int = 1            #: readers paging through the whole log


@dataclass
class FloodCounts:
    """What the attacks did (read by `summary` after the threads stopped)."""

    refused_logins: int = 0
    accepted_bad_logins: int = 0    #: a wrong password let in: a security bug
    slow_opened: int = 0
    slow_closed_by_node: int = 0
    login_errors: int = 0           #: a bad login met something else than its refusal
    entries_read: int = 0
    bytes_read: int = 0
    read_errors: int = 0
    error_samples: list[str] = field(default_factory=list)     #: the first few errors
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, **amounts: int) -> None:
        with self.lock:
            for name, amount in amounts.items():
                setattr(self, name, getattr(self, name) + amount)

    def error(self, counter: str, exc: BaseException) -> None:
        with self.lock:
            setattr(self, counter, getattr(self, counter) + 1)
            if len(self.error_samples) < 10:
                self.error_samples.append(f"{type(exc).__name__}: {exc}")


class Flood:
    """The three attacks against `endpoint` (a member's client endpoint) until `stop`."""

    def __init__(self, endpoint: str, *, cluster: str, username: str, password: str,
                 shape: FloodShape = FloodShape()) -> None:
        self.endpoint = endpoint
        self.cluster = cluster
        self.username = username
        self.password = password
        self.shape = shape
        self.counts = FloodCounts()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    def __enter__(self) -> "Flood":
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        jobs = [(self._bad_logins, f"flood-login-{i}") for i in range(self.shape.bad_logins)]
        if self.shape.slowloris:
            jobs.append((self._slowloris, "flood-slowloris"))
        jobs += [(self._read_back, f"flood-read-{i}") for i in range(self.shape.readers)]
        for target, name in jobs:
            thread = threading.Thread(target=target, name=name, daemon=True)
            thread.start()
            self._threads.append(thread)

    def stop(self) -> str:
        """End every attack; what they did, in words."""
        self._stop.set()
        for thread in self._threads:
            thread.join(timeout=10.0)
        alive = [t.name for t in self._threads if t.is_alive()]
        c = self.counts
        text = (f"{c.refused_logins:,} bad logins refused, {c.slow_opened:,} slowloris "
                f"connections ({c.slow_closed_by_node:,} closed by the node), "
                f"{c.entries_read:,} entries ({c.bytes_read / 2**20:.0f} MiB) read back")
        if c.accepted_bad_logins:
            text += f"; {c.accepted_bad_logins} WRONG-PASSWORD LOGINS ACCEPTED"
        if alive:
            text += f"; threads still running: {', '.join(alive)}"
        return text

    # -- the attacks ----------------------------------------------------------------------
    def _bad_logins(self) -> None:
        security = Security(cluster=self.cluster, username=self.username,
                            password=self.password + "-wrong")
        backoff = Backoff(0.05, 1.0)
        while not self._stop.is_set():
            try:
                # longer than the node's longest tarpit (4 s): each login gets its 401
                dialed = dial(self.endpoint, security, timeout=LOGIN_TIMEOUT)
            except AuthenticationError:
                self.counts.add(refused_logins=1)
                backoff.reset()
                continue
            except (FarmError, OSError) as exc:  # node down or shedding: come back later
                self.counts.error("login_errors", exc)
                self._stop.wait(backoff.pause())
                continue
            dialed.sock.close()
            self.counts.add(accepted_bad_logins=1)

    def _slowloris(self) -> None:
        host, port = split_endpoint(self.endpoint)
        request = (f"GET {handshake_path(self.cluster)} HTTP/1.1\r\nHost: {host}\r\n"
                   "Authorization: Digest username=\"x\"\r\n").encode()
        conns: list[list] = []               # [socket, bytes sent]
        backoff = Backoff(0.05, 1.0)
        while not self._stop.is_set():
            while len(conns) < self.shape.slowloris and not self._stop.is_set():
                try:
                    sock = socket.create_connection((host, port), timeout=1.0)
                except OSError:
                    self._stop.wait(backoff.pause())
                    break
                backoff.reset()
                sock.setblocking(False)
                conns.append([sock, 0])
                self.counts.add(slow_opened=1)
            for conn in list(conns):
                sock, sent = conn
                try:
                    if sock.recv(4096, socket.MSG_PEEK) == b"":
                        raise ConnectionResetError
                except BlockingIOError:
                    pass
                except OSError:
                    self._drop(conns, conn)
                    continue
                try:
                    sock.send(request[sent % len(request):][:1])
                    conn[1] = sent + 1
                except BlockingIOError:
                    pass
                except OSError:
                    self._drop(conns, conn)
            self._stop.wait(SLOW_BYTE_EVERY)
        for sock, _ in conns:
            sock.close()

    def _drop(self, conns: list[list], conn: list) -> None:
        conns.remove(conn)
        conn[0].close()
        self.counts.add(slow_closed_by_node=1)

    def _read_back(self) -> None:
        from consensus.client.client import FarmClient

        backoff = Backoff(0.1, 2.0)
        with FarmClient(self.endpoint, cluster=self.cluster, username=self.username,
                        password=self.password, timeout=5.0) as client:
            while not self._stop.is_set():
                try:
                    first, last, _ = client.log_bounds(self.endpoint)
                    start = first
                    while start <= last and not self._stop.is_set():
                        page = client.read_entries(start, last + 1, max_bytes=READ_PAGE,
                                                   endpoint=self.endpoint)
                        if not page:
                            break
                        size = sum(len(r.payload) + sum(map(len, r.records or ()))
                                   for r in page)
                        self.counts.add(entries_read=len(page), bytes_read=size)
                        start = page[-1].index + 1
                    backoff.reset()
                except FarmError as exc:    # compacted, not applied yet, node down
                    self.counts.error("read_errors", exc)
                    self._stop.wait(backoff.pause())
