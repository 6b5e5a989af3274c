"""Bounds on what subscribers may ask of our XPUB sockets (Dafka and CHP).

Why this exists: libzmq keeps subscriptions in tries with one node per prefix *byte*
(~85 bytes of heap per byte, so a 4 MiB prefix costs ~350 MB), and in libzmq 4.3.5
(pyzmq 27) the SUB/XSUB trie removes a prefix and frees itself by recursion, one stack
frame per byte: a ~128 KiB prefix that reaches an XSUB overflows an 8 MiB stack
(SIGSEGV), as do the recursive trie destructors when a socket holding one closes. The
XPUB trie's add/remove are iterative, its destructor is not. No option of libzmq bounds
the size or the number of subscriptions, and whatever a peer sends reaches the XPUB's
trie before our code sees it. So:

* the size: ZMQ_MAXMSGSIZE on every socket that receives subscriptions, set from the
  longest prefix the protocol uses (`publisher_maxmsgsize`): libzmq's decoder then
  drops the connection at the frame header, before a byte is allocated or a trie
  touched;
* the count: `SubscriptionGuard` reads the subscriptions (XPUB_VERBOSE or VERBOSER),
  counts them per connection (the message's ZMQ_SRCFD) and cuts a connection that
  goes over the limit (shutdown of its descriptor: libzmq then drops the pipe and
  frees its subscriptions, iteratively); a socket monitor says when a descriptor
  belongs to a new connection;
* refusals are counted (`stats`) and logged as one summary per window and reason;
* memory goes back: the trie's nodes are small heap blocks that glibc keeps after
  libzmq frees them, so once a connection that held many subscriptions is gone (its
  unsubscriptions read), the guard asks glibc to return free memory (malloc_trim).
"""
from __future__ import annotations

import ctypes
import ctypes.util
import itertools
import logging
import os
import socket
import time
from collections import Counter
from dataclasses import dataclass

import zmq
from zmq.utils.monitor import parse_monitor_message

SUBSCRIBE_COMMAND_BYTES = 10   # ZMTP 3.1 sends b"\x09SUBSCRIBE" + prefix (3.0: b"\x01")
# The handshake's READY command goes through the same size check: Socket-Type and an
# Identity of up to 255 bytes take < 300 bytes.
HANDSHAKE_BYTES = 512
LOG_WINDOW = 10.0              # seconds summarised in one refusal log line
_EVENTS = zmq.EVENT_ACCEPTED | zmq.EVENT_DISCONNECTED | zmq.EVENT_CLOSED
_monitor_ids = itertools.count()
TRIM_AFTER = 64     # subscriptions a departed connection held that make a trim worth it
TRIM_WINDOW = 2.0   # seconds after such a departure during which the heap is trimmed
TRIM_EVERY = 0.1    # at most this often (libzmq frees the trie when it gets to it)


def _malloc_trim():
    """glibc's malloc_trim, or None (another libc)."""
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):
        return None


_trim = _malloc_trim()


def publisher_maxmsgsize(max_prefix_bytes: int) -> int:
    """ZMQ_MAXMSGSIZE for a socket that only receives subscriptions of at most
    `max_prefix_bytes` (in either ZMTP framing), and the peer's handshake."""
    return max(max_prefix_bytes + SUBSCRIBE_COMMAND_BYTES, HANDSHAKE_BYTES)


@dataclass(frozen=True)
class SubscriptionLimits:
    """What one connection may subscribe to on one socket."""
    max_prefix_bytes: int
    max_per_connection: int

    def __post_init__(self) -> None:
        for name in ("max_prefix_bytes", "max_per_connection"):
            value = getattr(self, name)
            if type(value) is not int or not 1 <= value <= 1 << 24:
                raise ValueError(f"SubscriptionLimits.{name}: {value!r} is not an integer "
                                 f"in 1..{1 << 24}")


class SubscriptionRefusals:
    """Refusals summed per (reason, peer) and logged once per `window` seconds (the
    first after a quiet window at once)."""

    def __init__(self, logger: logging.Logger, what: str, window: float = LOG_WINDOW
                 ) -> None:
        self.logger = logger
        self.what = what
        self.window = window
        self._counts: Counter[tuple[str, str]] = Counter()
        self._since = -window

    def add(self, reason: str, peer: str, now: float) -> None:
        self._counts[(reason, peer)] += 1
        self.flush(now)

    def flush(self, now: float, force: bool = False) -> None:
        if not self._counts or (not force and now - self._since < self.window):
            return
        for (reason, peer), count in sorted(self._counts.items()):
            self.logger.warning("%s: refused %d subscription(s) from %s in %.0f s: %s "
                                "(the connection was cut; next summary in %.0f s at most)",
                                self.what, count, peer, min(now - self._since, self.window),
                                reason, self.window)
        self._counts.clear()
        self._since = now


class SubscriptionGuard:
    """Admits or refuses the subscription messages read from one XPUB (see the module
    docstring). `monitor` must be polled by the owner, which calls `on_monitor`."""

    def __init__(self, sock: zmq.Socket, limits: SubscriptionLimits, what: str,
                 logger: logging.Logger, stats: Counter) -> None:
        self.limits = limits
        self.stats = stats
        self.refusals = SubscriptionRefusals(logger, what)
        self._counts: dict[int, int] = {}     # descriptor -> subscriptions it holds
        self._cut: set[int] = set()           # descriptors cut, until their close
        self._trim_until = 0.0
        self._trimmed_at = 0.0
        self._sock = sock
        # pyzmq's default address is named after the socket's descriptor, which a
        # socket closed a moment ago (closing is asynchronous) may still hold
        self.monitor = sock.get_monitor_socket(
            _EVENTS, f"inproc://garlicfarm-subscriptions-{os.getpid()}-{next(_monitor_ids)}")

    def on_monitor(self) -> None:
        """Forget the counts of connections that ended or whose descriptor is reused."""
        while True:
            try:
                event = parse_monitor_message(self.monitor.recv_multipart(zmq.NOBLOCK))
            except zmq.Again:
                break
            fd = event["value"]
            if self._counts.pop(fd, 0) >= TRIM_AFTER or fd in self._cut:
                self._trim_until = time.monotonic() + TRIM_WINDOW
            if event["event"] != zmq.EVENT_ACCEPTED:
                self._cut.discard(fd)
        self.refusals.flush(time.monotonic())
        self.release_memory()

    def release_memory(self) -> None:
        """Give freed heap back to the system while a large holder's departure is
        recent (the owner calls this after its drains and on a timer: libzmq frees the
        trie when the socket next processes the pipe's end, at no fixed moment)."""
        now = time.monotonic()
        if now > self._trim_until or now - self._trimmed_at < TRIM_EVERY or _trim is None:
            return
        if not self._sock.closed:
            self._sock.getsockopt(zmq.EVENTS)   # let libzmq process the pipe's end now
        _trim(0)
        self._trimmed_at = now
        self.stats["memory_trims"] += 1

    def admit(self, frame: zmq.Frame) -> bool:
        """Whether subscription message `frame` (b"\\x01"/b"\\x00" + prefix) is within
        bounds. A refused subscription gets its connection cut; an unsubscription is
        always admitted (it frees what it names)."""
        data = frame.bytes
        try:
            fd = frame.get(zmq.SRCFD)
        except zmq.ZMQError:
            fd = -1
        if data[:1] != b"\x01":
            if fd in self._counts:
                self._counts[fd] = max(0, self._counts[fd] - 1)
            return True
        if fd in self._cut:
            return False
        if len(data) - 1 > self.limits.max_prefix_bytes:
            reason = f"prefix over {self.limits.max_prefix_bytes} bytes"
            self.stats["subscriptions_refused_long"] += 1
        elif self._counts.get(fd, 0) >= self.limits.max_per_connection:
            reason = f"over {self.limits.max_per_connection} on one connection"
            self.stats["subscriptions_refused_many"] += 1
        else:
            if fd >= 0:
                self._counts[fd] = self._counts.get(fd, 0) + 1
            return True
        self.refusals.add(reason, _peer(frame), time.monotonic())
        self._disconnect(fd)
        return False

    def _disconnect(self, fd: int) -> None:
        """Shut the connection on `fd` down; libzmq notices and drops its pipe."""
        if fd < 0:
            return
        try:
            with socket.socket(fileno=os.dup(fd)) as conn:
                conn.shutdown(socket.SHUT_RDWR)
        except OSError:
            return   # already gone
        self._cut.add(fd)
        self._counts.pop(fd, None)
        self.stats["connections_cut"] += 1

    def close(self) -> None:
        self.refusals.flush(time.monotonic(), force=True)
        if not self._sock.closed:
            self._sock.disable_monitor()
        if not self.monitor.closed:
            self.monitor.close(0)


def _peer(frame: zmq.Frame) -> str:
    try:
        return frame.get("Peer-Address") or "?"
    except zmq.ZMQError:
        return "?"


__all__ = ["HANDSHAKE_BYTES", "LOG_WINDOW", "SubscriptionRefusals", "SUBSCRIBE_COMMAND_BYTES", "SubscriptionGuard",
           "SubscriptionLimits", "publisher_maxmsgsize"]
