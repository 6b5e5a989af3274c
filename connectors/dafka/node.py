"""What every Dafka node shares: a publishing socket, SUB sockets connected to every
peer the towers announce, the beacon, timers, drop counters, and one event loop.

A node runs either on its own thread (`start`) or, for short-lived clients, inside the
caller's calls (`run_until`). Either way one thread owns the sockets; a zmq.Poller
wakes it, each ready socket is drained until EAGAIN (bounded per wake-up), and timers
get the time as an argument.

Bounds on what peers send (docs/operations.md): every node publishes on an XPUB (a PUB
on the wire, as the C nodes' PUB/XPUB) whose subscriptions are read and bounded by a
`SubscriptionGuard` (size by ZMQ_MAXMSGSIZE, count per connection); SUBs take frames up
to the largest the protocol carries (`data_maxmsgsize`).
"""
from __future__ import annotations

import itertools
import logging
import queue
import threading
import time
import uuid
from collections import Counter
from typing import Callable, Iterator

import zmq

from connectors.dafka import proto
from connectors.dafka.beacon import BeaconChannel
from connectors.dafka.config import DafkaConfig
from consensus.wire.errors import ProtocolError
from connectors.dafka.sockets import iter_messages
from connectors.subscriptions import (SubscriptionGuard, SubscriptionLimits,
                                      publisher_maxmsgsize)

log = logging.getLogger("garlicfarm.dafka.node")
_NAMESPACE = uuid.UUID("5f1c2a4e-7d1b-4c2e-9a57-6461666b6121")  # garlicfarm/dafka
_wake_ids = itertools.count()
DRAIN_SUBSCRIPTIONS = 10_000   # subscription messages handled per wake-up


class TowerUnreachable(RuntimeError):
    """No tower welcomed the node in time."""


class NodeFailed(RuntimeError):
    """The node's thread died; raised by the next call that needs it (`Node.check`)."""


def new_address() -> str:
    """A fresh node address: a UUID as 32 uppercase hex characters (CZMQ zuuid_str)."""
    return uuid.uuid4().hex.upper()


def deterministic_address(*parts: str) -> str:
    """The same address for the same parts (UUIDv5), e.g. (query id, task partition):
    a replayed Spark task republishes into the same partition."""
    return uuid.uuid5(_NAMESPACE, "\x00".join(parts)).hex.upper()


def data_maxmsgsize(limits: proto.DafkaLimits) -> int:
    """ZMQ_MAXMSGSIZE of a SUB that receives Dafka messages: the largest frame any
    message may carry (a record's content, a bulk answer's records frame, frame 0)."""
    return max(limits.max_frame_bytes, limits.max_content_bytes, limits.max_bulk_bytes)


class FetchFilter:
    """FETCH de-duplication: one request per (subject, partition, first sequence) per
    second. The C code keys on the 100000-block instead of the sequence, which also
    suppresses the FETCH for a second gap in the same block; keying on the sequence
    repairs that gap at once and still stops the storm of identical FETCHes that every
    record after a gap would trigger. Time comes in as an argument."""

    def __init__(self) -> None:
        self._sent: dict[tuple[str, str, int], int] = {}

    def allow(self, subject: str, address: str, sequence: int, now: float) -> bool:
        key = (subject, address, sequence)
        second = int(now)
        if self._sent.get(key) == second:
            return False
        if len(self._sent) > 10_000:
            self._sent.clear()
        self._sent[key] = second
        return True


class Node:
    """Base class; subclasses create their SUBs in `_setup` and
    register them with `_add_sub`."""

    ROLE = "node"

    def __init__(self, config: DafkaConfig, *, address: str | None = None,
                 limits: proto.DafkaLimits = proto.DEFAULT_LIMITS) -> None:
        self.config = config.validate()
        self.address = address or new_address()
        if not proto.is_address(self.address):
            raise ValueError(f"address {self.address!r}: a node address is 32 uppercase "
                             f"hex characters (use new_address or deterministic_address)")
        self.decoder = proto.Decoder(limits)
        self.stats: Counter[str] = Counter()
        self.ctx = zmq.Context.instance()
        self.pub: zmq.Socket | None = None
        self.guard: SubscriptionGuard | None = None
        self.port = 0
        self.endpoint = ""
        self.beacon: BeaconChannel | None = None
        self.peers_connected: set[str] = set()
        self._subs: list[zmq.Socket] = []          # connected to every peer
        self._handlers: dict[zmq.Socket, Callable[[float], None]] = {}
        self._poller = zmq.Poller()
        self._timers: list[list] = []               # [due, interval, fn]
        self._thread: threading.Thread | None = None
        self._stopping = False
        self._welcomed = threading.Event()
        self._error: BaseException | None = None
        self._wake_recv: zmq.Socket | None = None
        self._wake_send: zmq.Socket | None = None
        self._wake_lock = threading.Lock()
        self._calls: queue.SimpleQueue[Callable[[], None]] = queue.SimpleQueue()

    # ----------------------------------------------------------------- lifecycle
    def open(self) -> "Node":
        """Bind, connect to the towers, set up subclass sockets (no thread yet)."""
        if self.pub is not None:
            return self
        limits = self.decoder.limits
        self.pub = self.ctx.socket(zmq.XPUB)
        self.pub.setsockopt(zmq.LINGER, 0)
        self.pub.setsockopt(zmq.SNDHWM, self.config.high_watermark)
        self.pub.setsockopt(zmq.XPUB_VERBOSE, 1)
        self.pub.setsockopt(zmq.MAXMSGSIZE, publisher_maxmsgsize(limits.max_subscription_bytes))
        try:
            self.pub.bind(self._bind_endpoint())
        except zmq.ZMQError as exc:
            self.pub.close(0)
            self.pub = None
            raise OSError(f"node/bind {self._bind_endpoint()!r}: {exc}") from None
        self.guard = SubscriptionGuard(
            self.pub, SubscriptionLimits(limits.max_subscription_bytes,
                                         limits.max_subscriptions),
            f"dafka {self.ROLE} {self.address}", log, self.stats)
        self._watch(self.guard.monitor, lambda now: self.guard.on_monitor())
        self.add_timer(0.25, lambda now: self.guard.release_memory())
        self._watch(self.pub, self._drain_subscriptions)
        self.endpoint = self.pub.getsockopt(zmq.LAST_ENDPOINT).decode()
        self.port = int(self.endpoint.rsplit(":", 1)[1])
        wake = f"inproc://dafka-wake-{id(self)}-{next(_wake_ids)}"
        self._wake_recv = self.ctx.socket(zmq.PULL)
        self._wake_recv.bind(wake)
        self._wake_send = self.ctx.socket(zmq.PUSH)
        self._wake_send.setsockopt(zmq.LINGER, 0)
        self._wake_send.connect(wake)
        self._poller.register(self._wake_recv, zmq.POLLIN)
        self._handlers[self._wake_recv] = self._drain_wake
        self._setup()
        self.beacon = BeaconChannel(self.ctx, self.config, self.address, self.port,
                                    self.decoder, self.stats)
        self._poller.register(self.beacon.sub, zmq.POLLIN)
        self._handlers[self.beacon.sub] = self._on_beacon
        self.beacon.send()
        self.add_timer(self.config.beacon_interval, lambda now: self.beacon.send())
        self.add_timer(min(1.0, self.config.beacon_timeout / 4), self._expire_peers)
        return self

    # How long start() waits after the welcome so that every live peer has beaconed and
    # our SUBs are connected to it (see Producer); None: no wait.
    settle: float | None = None

    def start(self, wait_for_tower: bool = True) -> "Node":
        """Run the node on its own thread; by default wait until a tower welcomed it
        (and `settle` seconds more, when set)."""
        self.open()
        self._thread = threading.Thread(target=self._run, name=f"dafka-{self.ROLE}",
                                        daemon=True)
        self._thread.start()
        if wait_for_tower and not self._welcomed.wait(self.config.tower_wait):
            self.stop()
            raise TowerUnreachable(
                f"{self.ROLE}: no tower answered at {', '.join(self.config.tower_pub)} "
                f"within {self.config.tower_wait:g} s; start `garlicfarm dafka tower` "
                f"or fix --tower")
        if wait_for_tower and self.settle:
            time.sleep(self.settle)   # discovery by beacons is what we wait for
        return self

    def stop(self) -> None:
        """Stop the loop and close every socket (idempotent)."""
        self._stopping = True
        if self._thread is not None:
            self.wake()
            self._thread.join(10)
            self._thread = None
        self._close_sockets()

    close = stop

    def __enter__(self):
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def running(self) -> bool:
        return self._thread is not None and self._thread.is_alive()

    def wake(self) -> None:
        """Interrupt the poll (callable from any thread)."""
        with self._wake_lock:
            if self._wake_send is not None:
                try:
                    self._wake_send.send(b"", zmq.NOBLOCK)
                except zmq.ZMQError:
                    pass

    def call_soon(self, fn: Callable[[], None]) -> None:
        """Run `fn` on the node's thread (socket changes from other threads)."""
        self._calls.put(fn)
        self.wake()

    def _drain_wake(self, now: float) -> None:
        while True:
            try:
                self._wake_recv.recv(zmq.NOBLOCK)
            except zmq.Again:
                break
        while True:
            try:
                fn = self._calls.get_nowait()
            except queue.Empty:
                return
            fn()

    def _close_sockets(self) -> None:
        with self._wake_lock:
            if self.guard is not None:
                self.guard.close()
            sockets = [self.pub, self._wake_recv, self._wake_send, *self._subs,
                       *self._extra_sockets()]
            for sock in sockets:
                if sock is not None and not sock.closed:
                    sock.close(0)
            self._wake_send = None
        if self.beacon is not None:
            self.beacon.close()
        self._closed()

    # ----------------------------------------------------------------- the loop
    def _run(self) -> None:
        try:
            while not self._stopping:
                self.step()
        except BaseException as exc:  # noqa: BLE001 - raised by `check`, not lost
            if not self._stopping:
                self._error = exc
                self.stats["loop_crashed"] += 1
                log.error("dafka %s %s: the node's thread failed", self.ROLE, self.address,
                          exc_info=exc)
                self._crashed()

    @property
    def error(self) -> BaseException | None:
        """The exception that ended the node's thread, if any."""
        return self._error

    def check(self) -> None:
        """Raise `NodeFailed` if the node's thread died: nothing it did (deliver,
        acknowledge, answer FETCH, beacon) happens any more."""
        if self._error is not None:
            raise NodeFailed(f"dafka {self.ROLE} {self.address}: its thread failed "
                             f"({self._error!r}); stop it and start a new one") from self._error

    def step(self, timeout: float | None = None) -> None:
        """Wait for traffic or the next timer (at most `timeout` s), handle it."""
        self._before_poll()
        now = time.monotonic()
        wait = min((t[0] for t in self._timers), default=now + 1.0) - now
        if timeout is not None:
            wait = min(wait, timeout)
        if self._has_work():
            wait = 0.0
        ready = self._poller.poll(max(0.0, wait) * 1000)
        now = time.monotonic()
        for sock, _ in ready:
            self._handlers[sock](now)
        for timer in self._timers:
            if timer[0] <= now:
                timer[0] = max(timer[0] + timer[1], now)
                timer[2](now)
        if self._has_work():
            self._work(now)

    def run_until(self, condition: Callable[[], object], timeout: float) -> bool:
        """Drive the loop in the caller's thread until `condition()` or the deadline."""
        self.open()
        deadline = time.monotonic() + timeout
        while not condition():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            self.step(left)
        return True

    def add_timer(self, interval: float, fn: Callable[[float], None],
                  first: float | None = None) -> list:
        timer = [time.monotonic() + (interval if first is None else first), interval, fn]
        self._timers.append(timer)
        return timer

    # ----------------------------------------------------------------- discovery
    def _on_beacon(self, now: float) -> None:
        connect = self.beacon.handle(now)
        if self.beacon.welcomed and not self._welcomed.is_set():
            self._welcomed.set()
            self._beacon_burst(now)
        for endpoint in connect:
            try:
                for sub in self._subs:
                    sub.connect(endpoint)
            except zmq.ZMQError:   # a tower announced what libzmq refuses: not a peer
                self.stats["peers_refused"] += 1
                continue
            self.peers_connected.add(endpoint)
            self._peer_connected(endpoint)

    def _beacon_burst(self, welcomed_at: float) -> None:
        """Beacon every 50 ms during the first interval after the welcome: the first
        beacons are dropped until the tower's subscription reaches our PUB, and peers
        should not wait a whole interval (1 s) to discover us."""
        def burst(now: float) -> None:
            if now - welcomed_at >= self.config.beacon_interval:
                timer[0] = timer[1] = float("inf")    # done: the regular timer goes on
            else:
                self.beacon.send()
        timer = self.add_timer(min(0.05, self.config.beacon_interval / 4), burst, first=0.0)

    def _expire_peers(self, now: float) -> None:
        for endpoint in self.beacon.table.expire(now):
            for sub in self._subs:
                try:
                    sub.disconnect(endpoint)
                except zmq.ZMQError:
                    pass
            self.peers_connected.discard(endpoint)
            self.stats["peers_expired"] += 1

    @property
    def welcomed(self) -> bool:
        return self._welcomed.is_set()

    # ----------------------------------------------------------------- helpers
    def _add_sub(self, prefixes: list[bytes], handler: Callable[[float], None]) -> zmq.Socket:
        sub = self.ctx.socket(zmq.SUB)
        sub.setsockopt(zmq.LINGER, 0)
        sub.setsockopt(zmq.RCVHWM, self.config.high_watermark)
        sub.setsockopt(zmq.MAXMSGSIZE, data_maxmsgsize(self.decoder.limits))
        for prefix in prefixes:
            sub.setsockopt(zmq.SUBSCRIBE, prefix)
        self._subs.append(sub)
        self._poller.register(sub, zmq.POLLIN)
        self._handlers[sub] = handler
        return sub

    def _watch(self, sock: zmq.Socket, handler: Callable[[float], None]) -> None:
        self._poller.register(sock, zmq.POLLIN)
        self._handlers[sock] = handler

    def messages(self, sock: zmq.Socket) -> Iterator[proto.Message]:
        """The decoded messages waiting on `sock` (garbage dropped and counted)."""
        return iter_messages(sock, self.decoder, self.stats)

    def subscriptions(self) -> Iterator[proto.Subscription]:
        """The subscriptions waiting on our publisher that the guard admits, decoded
        (a refused one never reaches the caller; its connection is cut)."""
        for _ in range(DRAIN_SUBSCRIPTIONS):
            try:
                frame = self.pub.recv(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                self.guard.release_memory()
                return
            if frame.more:   # a peer's multi-frame message: nothing we read
                while frame.more:
                    frame = self.pub.recv(zmq.NOBLOCK, copy=False)
                self.stats["dropped_unexpected"] += 1
                continue
            if not self.guard.admit(frame):
                continue
            try:
                msg = self.decoder.decode([frame.bytes])
            except ProtocolError:
                self.stats["dropped_malformed"] += 1
                continue
            if type(msg) is proto.Subscription:
                yield msg
            else:
                self.stats["dropped_unexpected"] += 1

    def _drain_subscriptions(self, now: float) -> None:
        """Subscriptions to our publisher: nothing to do but bound them (subclasses that
        answer some override this and iterate `subscriptions`)."""
        for _ in self.subscriptions():
            pass

    def _bind_endpoint(self) -> str:
        """Where our publisher binds (node/bind)."""
        return self.config.bind_endpoint

    def drop_unexpected(self) -> None:
        self.stats["dropped_unexpected"] += 1

    def send(self, msg: proto.Message) -> None:
        self.pub.send_multipart(proto.encode(msg))

    # ----------------------------------------------------------------- subclass hooks
    def _setup(self) -> None:
        """Create and register the node's SUB sockets."""

    def _before_poll(self) -> None:
        """Called before each poll (flow control)."""

    def _has_work(self) -> bool:
        """True while queued work waits for `_work`: the loop then polls without waiting."""
        return False

    def _work(self, now: float) -> None:
        """One bounded slice of queued work, after each poll: a long job done in slices
        keeps the node beaconing and answering (a node silent for beacon/timeout is
        forgotten by its peers, which drop what they had queued from it)."""

    def _peer_connected(self, endpoint: str) -> None:
        """A new peer publisher was connected."""

    def _crashed(self) -> None:
        """The node's thread is dying (`error` is set): wake whoever waits on it."""

    def _extra_sockets(self) -> list[zmq.Socket]:
        return []

    def _closed(self) -> None:
        """Sockets are closed; release other resources."""


__all__ = ["FetchFilter", "Node", "NodeFailed", "TowerUnreachable", "deterministic_address",
           "new_address"]
