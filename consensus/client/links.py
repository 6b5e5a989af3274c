"""A client's connections to farm members and what it knows of the farm.

`Link` is one authenticated connection to one member (the Garlic Farm handshake, then
Hello/Welcome, then frames). `Directory` is the client's view of the farm, shared by
its threads: the members' endpoints (from Welcomes and NOT_LEADER answers), the leader
it believes in, and the members that recently failed it, so that a dead or stalled
member is tried last instead of first. `LinkPool` opens links within the directory's
bounds and keeps the calls' shared ones: `FarmClient`'s calls, its write pipelines
(pipeline.py) and its subscriptions all get and give back links through it.

Two bounds keep a dead or stalled member from costing a whole call:
- one connection attempt (TCP, handshake, Welcome) gets `connect_timeout` (and never
  more than the call has left); a round in which every member timed out doubles it, so
  a merely slow machine still gets through;
- one request gets `answer_timeout` to be answered before the caller tries the others
  (who answer NOT_LEADER naming the configuration or a new leader).
"""
from __future__ import annotations

import random
import socket
import threading
import time
from collections import deque
from typing import Iterator

from consensus.common.errors import (AuthenticationError, ConfigError, ErrorCode, FarmError,
                                     NotLeaderError, ProtocolMismatch, Unavailable)
from consensus.net.backoff import Backoff
from consensus.net.dial import close_quietly
from consensus.net.dial import dial
from consensus.net.security import Security
from consensus.raft import Configuration
from consensus.wire import extensions as ext
from consensus.wire.errors import ProtocolError
from consensus.wire.extensions import GARLICFARM_REGISTRY
from consensus.wire.jraft import JRaftDecoder, encode

SUSPECT_SECONDS = 2.0       #: a member that failed us is tried last for this long
CONNECTS_PER_SECOND = 5     #: connection attempts to one member in any second, at most
READ_BYTES = 1 << 20


def foreign_leader_text(endpoint: str) -> str:
    """Why a leader's call cannot succeed: retrying does not change what a leader speaks."""
    return (f"the members name {endpoint} as the leader, and it does not speak the Garlic "
            f"Farm handshake (a JRaft node of a mixed cluster?): a client needs a garlicfarm "
            f"leader; transfer leadership to a garlicfarm node (garlicfarm transfer-leader)")


class NoAnswer(Unavailable):
    """A request went out (or may have) and no answer came: it may still take effect."""


class NotHosted(Unavailable):
    """The member does not host our partition (the farm places it on other nodes,
    --replicas): it named the partition's members, `members` ({id: endpoint}); the
    client asks them instead and not this member again."""

    def __init__(self, message: str, members: dict[int, str]) -> None:
        super().__init__(message)
        self.members = members


class Link:
    """One authenticated connection to one member (blocking socket)."""

    def __init__(self, endpoint: str, security: Security, timeout: float,
                 client_id: bytes, partition: int = 0) -> None:
        self.endpoint = endpoint
        self.partition = partition
        started = time.monotonic()
        dialed = dial(endpoint, security, wire="garlicfarm", timeout=timeout)
        self.sock = dialed.sock
        self.decoder = JRaftDecoder(registry=GARLICFARM_REGISTRY)
        self.frames: deque = deque()
        self.closed = False
        self.sent = 0               #: sends that went out (callers tell what was tried)
        if dialed.initial:
            self._take(self.decoder.feed(dialed.initial))
        hello = encode(ext.Hello(0, 0, 0, client_id, 1), GARLICFARM_REGISTRY)
        if partition:       # the frames of this link belong to that group (protocol.md)
            hello = ext.group_select_frame(0, partition) + hello
        try:
            self.send(hello)
            welcome = self.next_frame(started + timeout)
        except Unavailable as exc:
            self.close()
            raise Unavailable(f"{endpoint} did not welcome us in time ({exc})") from None
        if isinstance(welcome, ext.Reply) and welcome.code == int(ErrorCode.NOT_LEADER):
            self.close()        # the partition lives on other nodes: they are named
            members = (welcome.detail or {}).get("members") or {}
            raise NotHosted(f"{endpoint} does not host partition {partition}: "
                            f"{welcome.message}",
                            {int(k): str(v) for k, v in members.items() if v})
        if isinstance(welcome, ext.Reply) and welcome.code:
            self.close()        # the member does not host the partition: no retry helps
            raise ConfigError("partition", f"{endpoint} refused partition {partition}: "
                              f"{welcome.message}")
        if not isinstance(welcome, ext.Welcome):
            self.close()
            raise ProtocolMismatch(f"{endpoint} answered Hello with {type(welcome).__name__}")
        self.welcome = welcome
        self.connect_seconds = time.monotonic() - started

    def send(self, data: bytes) -> None:
        try:
            self.sock.sendall(data)
        except OSError as exc:
            self.close()
            raise NoAnswer(f"lost the connection to {self.endpoint}: {exc}") from None
        self.sent += 1

    def receive(self, deadline: float) -> bool:
        """Read what arrives before `deadline` into `frames`; False on timeout. Raises
        NoAnswer when the connection breaks, ProtocolMismatch on a corrupt stream."""
        left = deadline - time.monotonic()
        if left <= 0:
            return False
        self.sock.settimeout(left)
        # A large answer (a page of staged payloads) is read straight into a buffer of its
        # size: no chunk is copied into the decoder's stream buffer and sliced out again.
        into = self.decoder.pending_buffer()
        try:
            data = self.sock.recv(READ_BYTES) if into is None else self.sock.recv_into(into)
        except socket.timeout:
            return False
        except OSError as exc:
            self.close()
            raise NoAnswer(f"lost the connection to {self.endpoint}: {exc}") from None
        finally:
            if into is not None:
                into.release()
        if not data:
            self.close()
            raise NoAnswer(f"{self.endpoint} closed the connection")
        try:
            self._take(self.decoder.feed(data) if into is None
                       else self.decoder.filled(data))
        except ProtocolError as exc:
            self.close()
            raise ProtocolMismatch(f"corrupt answer from {self.endpoint}: {exc}") from None
        return True

    def _take(self, frames) -> None:
        """Queue the frames read; the member's GroupSelects must name our partition."""
        for frame in frames:
            if isinstance(frame, ext.GroupSelect):
                if frame.group != self.partition:
                    raise ProtocolError("group", f"{self.endpoint} answered in partition "
                                        f"{frame.group}, not {self.partition}")
            else:
                self.frames.append(frame)

    def next_frame(self, deadline: float):
        while not self.frames:
            if not self.receive(deadline):
                raise NoAnswer(f"no answer from {self.endpoint} in time")
        return self.frames.popleft()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            close_quietly(self.sock)


class Directory:
    """What a client knows of the farm (thread-safe; every method is short)."""

    def __init__(self, seeds: list[str], connect_timeout: float) -> None:
        self.seeds = seeds
        self.base_timeout = self.connect_timeout = connect_timeout
        self._timeouts = 0                       # connection attempts timed out in a row
        self._book: dict[int, str] = {}          # node id -> endpoint
        self._leader: str | None = None
        self._suspect: dict[str, float] = {}     # endpoint -> monotonic time it is cleared
        self._foreign: set[str] = set()          # endpoints that do not speak our wire
        self._elsewhere: set[str] = set()        # members that do not host our partition
        self._dialed: dict[str, deque[float]] = {}   # endpoint -> its latest attempts
        self._rotation = 0
        self._lock = threading.Lock()

    @property
    def leader(self) -> str | None:
        return self._leader

    def reachable_leader(self) -> str | None:
        """The leader's endpoint unless it failed us lately (a member's Welcome may still
        name a leader that has just died)."""
        leader = self._leader
        return leader if leader is not None and self.reachable(leader) else None

    def reachable(self, endpoint: str) -> bool:
        """Has `endpoint` not failed us lately?"""
        with self._lock:
            return self._suspect.get(endpoint, 0.0) <= time.monotonic()

    def attempts(self, deadline: float, *, leader: bool,
                 endpoint: str | None = None) -> Iterator[str]:
        """Endpoints to try until the deadline (only `endpoint`, when given): rounds over
        the members (`candidates`), straight to a new leader when one is learnt during
        a round, with a backoff between rounds."""
        backoff, redirects = Backoff(0.02, 0.5), 0
        while True:
            redirected = False
            for candidate in [endpoint] if endpoint else self.candidates(leader):
                if time.monotonic() >= deadline:
                    return
                yield candidate
                if leader and endpoint is None and self._leader not in (None, candidate):
                    redirected = True
                    break
            if redirected and redirects < 3:
                redirects += 1
                continue
            redirects = 0
            if time.monotonic() + backoff.peek() >= deadline:
                return
            time.sleep(backoff.pause())

    def connect_wait(self, endpoint: str) -> float:
        """Seconds to wait before the next connection attempt to `endpoint` (at most
        CONNECTS_PER_SECOND in any second, whatever loop asks), with jitter so that
        clients that failed together do not come back together; the attempt is then
        counted."""
        with self._lock:
            now = time.monotonic()
            recent = self._dialed.setdefault(endpoint, deque())
            while recent and recent[0] <= now - 1.0:
                recent.popleft()
            wait = 0.0
            if len(recent) >= CONNECTS_PER_SECOND:     # a second after the 5th-latest
                wait = recent[-CONNECTS_PER_SECOND] + 1.0 - now + random.uniform(0.0, 0.1)
            recent.append(now + wait)
            return wait

    def mismatched(self, endpoint: str) -> None:
        """`endpoint` does not speak the Garlic Farm handshake (a JRaft node of a mixed
        cluster, another service): no retry will change that."""
        with self._lock:
            self._foreign.add(endpoint)
        self.failed(endpoint)

    def all_foreign(self) -> bool:
        """Has every member we know of answered in something other than our wire?"""
        with self._lock:
            return set(self.seeds) | set(self._book.values()) <= self._foreign

    def foreign_leader(self) -> str | None:
        """The endpoint the members name as leader when it does not speak our wire."""
        leader = self._leader
        return leader if leader in self._foreign else None

    def endpoint_of(self, node_id: int) -> str | None:
        return self._book.get(node_id)

    def learn(self, welcome: ext.Welcome) -> None:
        """A member's Welcome: the configuration as it knows it and whom it follows."""
        try:
            config = Configuration.decode(welcome.configuration)
        except Exception:       # noqa: BLE001 - a member with no configuration yet
            config = None
        with self._lock:
            if config is not None:
                self._book.update(config.addresses)
            if welcome.leader_id is not None and welcome.leader_id in self._book:
                self._leader = self._book[welcome.leader_id]

    def redirect(self, exc: NotLeaderError) -> str | None:
        """A NOT_LEADER answer: learn the members it names; the leader's endpoint."""
        with self._lock:
            for node_id, address in exc.members.items():
                if address:
                    self._book[node_id] = address
            endpoint = exc.leader_endpoint or (self._book.get(exc.leader_id)
                                               if exc.leader_id is not None else None)
            self._leader = endpoint
            if endpoint is not None and endpoint in self._foreign:
                self._suspect[endpoint] = time.monotonic() + SUSPECT_SECONDS
            return endpoint

    def not_hosted(self, endpoint: str, exc: NotHosted) -> None:
        """`endpoint` does not host our partition: learn the members it named, and
        try it no more (it is still tried when no other member is known)."""
        with self._lock:
            self._elsewhere.add(endpoint)
            self._book.update(exc.members)
            if self._leader == endpoint:
                self._leader = None

    def failed(self, endpoint: str) -> None:
        """`endpoint` did not connect or did not answer in time: try it last for a while,
        and stop believing it leads."""
        with self._lock:
            self._suspect[endpoint] = time.monotonic() + SUSPECT_SECONDS
            if self._leader == endpoint:
                self._leader = None

    def connected(self, endpoint: str, seconds: float) -> None:
        """A connection attempt succeeded in `seconds`: the bound follows the machine
        (three times the last successful attempt, never below the configured one)."""
        with self._lock:
            self._suspect.pop(endpoint, None)
            self._foreign.discard(endpoint)
            self._timeouts = 0
            self.connect_timeout = max(self.base_timeout, min(10.0, 3 * seconds))

    def connect_timed_out(self, endpoint: str) -> None:
        """A connection attempt ran out of time. When every member known did in a row,
        the machine may be slow rather than the farm dead: double the bound."""
        self.failed(endpoint)
        with self._lock:
            self._timeouts += 1
            if self._timeouts >= len(set(self.seeds) | set(self._book.values())):
                self._timeouts = 0
                self.connect_timeout = min(10.0, self.connect_timeout * 2)

    def candidates(self, leader: bool) -> list[str]:
        """Members to try, in order: the leader first (for leader calls) unless it failed
        us lately; the rest rotated, so that clients spread over the members; members
        that failed us lately last."""
        with self._lock:
            known = list(dict.fromkeys(self.seeds + list(self._book.values())))
            known = [e for e in known if e not in self._elsewhere] or known
            self._rotation += 1
            shift = self._rotation % len(known)
            order = known[shift:] + known[:shift]
            if leader and self._leader is not None:
                order = [self._leader] + [e for e in order if e != self._leader]
            now = time.monotonic()
            suspects = {e for e, until in self._suspect.items() if until > now}
            return [e for e in order if e not in suspects] + \
                [e for e in order if e in suspects]


class LinkPool:
    """A client's links: opened within the directory's bounds (`open`), the calls' one
    per member kept between calls (`shared`, under the client's call lock). Every link
    given out comes back through `release`, which tells the directory of a failure."""

    def __init__(self, directory: Directory, security: Security, client_id: bytes,
                 partition: int = 0) -> None:
        self.directory = directory
        self.security = security
        self.client_id = client_id
        self.partition = partition      #: the Raft group every link addresses
        self.refused: FarmError | None = None   #: the last refusal at a handshake (404, TLS)
        self._shared: dict[str, Link] = {}
        self._closed = False

    @property
    def closed(self) -> bool:
        return self._closed

    def open(self, endpoint: str, deadline: float) -> Link:
        """A new link to `endpoint`, the attempt bounded by the directory's
        `connect_timeout` (and the deadline). Refusals and timeouts raise Unavailable
        (nothing was sent); the member goes to the end of the directory's order."""
        if self._closed:
            raise FarmError("this FarmClient is closed")
        directory = self.directory
        wait = directory.connect_wait(endpoint)
        if wait > 0:
            if time.monotonic() + wait >= deadline:
                raise Unavailable(f"{endpoint}: no time left for another connection attempt "
                                  f"(at most {CONNECTS_PER_SECOND} a second per member)")
            time.sleep(wait)
        bound = min(directory.connect_timeout, deadline - time.monotonic())
        if bound <= 0:
            raise Unavailable(f"no time left to connect to {endpoint}")
        started = time.monotonic()
        try:
            link = Link(endpoint, self.security, bound, self.client_id, self.partition)
        except AuthenticationError:
            raise
        except NotHosted as exc:
            directory.not_hosted(endpoint, exc)
            raise
        except ProtocolMismatch as exc:
            directory.mismatched(endpoint)
            self.refused = exc
            raise
        except Unavailable:
            if time.monotonic() - started >= bound * 0.9:
                directory.connect_timed_out(endpoint)
            else:
                directory.failed(endpoint)
            raise
        directory.connected(endpoint, link.connect_seconds)
        directory.learn(link.welcome)
        self.refused = None
        return link

    def shared(self, endpoint: str, deadline: float) -> Link:
        """The calls' link to `endpoint`, opened when there is none (hold the call lock)."""
        link = self._shared.get(endpoint)
        if link is None or link.closed:
            link = self._shared[endpoint] = self.open(endpoint, deadline)
        return link

    def acquire(self, endpoint: str, deadline: float, *, shared: bool) -> Link:
        """The calls' link (`shared`: the caller holds the call lock) or one of its own."""
        return self.shared(endpoint, deadline) if shared else self.open(endpoint, deadline)

    def release(self, link: Link, *, failed: bool, shared: bool = False) -> None:
        """Give a link back for good: closed, and `failed` tells the directory (a shared
        link the calls replaced since is only closed)."""
        if shared:
            if self._shared.get(link.endpoint) is link:
                self.drop(link.endpoint, failed=failed)
                return
        elif failed:
            self.directory.failed(link.endpoint)
        link.close()

    def drop(self, endpoint: str, *, failed: bool) -> None:
        """Close the calls' link to `endpoint` (if any); `failed` tells the directory."""
        link = self._shared.pop(endpoint, None)
        if link is not None:
            link.close()
        if failed:
            self.directory.failed(endpoint)

    def close(self) -> None:
        self._closed = True
        links, self._shared = list(self._shared.values()), {}
        for link in links:
            link.close()
