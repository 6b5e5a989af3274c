"""The beacon tower: an XSUB/XPUB relay that turns node beacons into announcements.

Nodes send ``B | uuid | host | port`` to the XSUB; the tower republishes
``B | uuid | tcp://host:port`` on the XPUB, taking the host from the connection's peer
address when the node left it empty (the default). Every new XPUB subscriber is greeted
with ``W`` (a node waits for it before it starts). Subscriptions are forwarded from the
XPUB to the XSUB except the welcome ones, as the C ``dafka_tower`` does. A deployment may
run several towers: nodes beacon to, and listen on, all of them.

Bounds (docs/operations.md): the XPUB takes subscriptions of at most
`TowerLimits.max_prefix_bytes` (ZMQ_MAXMSGSIZE: a longer one drops the connection) and
`max_per_connection` per connection (`SubscriptionGuard`); the XSUB takes frames of at
most `max_beacon_bytes`. The XPUB is verbose: the tower counts the holders of each
prefix and forwards a prefix's first subscription and last unsubscription only, as a
plain XPUB would, but never one it refused. So nothing oversized reaches the XSUB,
whose libzmq trie removes prefixes by recursion (a 128 KiB prefix crashed it).
"""
from __future__ import annotations

import logging
import socket
import threading
import time
from collections import Counter
from dataclasses import dataclass
from urllib.parse import urlsplit

import zmq

from connectors.dafka import proto
from connectors.dafka.config import DafkaConfigError
from connectors.subscriptions import (SubscriptionGuard, SubscriptionLimits,
                                      publisher_maxmsgsize)
from consensus.wire.errors import ProtocolError

log = logging.getLogger("garlicfarm.dafka.tower")


@dataclass(frozen=True)
class TowerLimits:
    """Nodes subscribe to ``B`` and ``W`` only; the prefix bound leaves room for a
    command and a whole 255-byte topic, as on the nodes' publishers."""
    max_prefix_bytes: int = proto.MAX_SUBSCRIPTION_BYTES
    max_per_connection: int = 64
    max_beacon_bytes: int = 4096    # a beacon frame (B, uuid, host <= 255, port)


def _first_interface() -> str | None:
    """The host's first non-loopback IPv4 address, from local name resolution."""
    try:
        addresses = socket.gethostbyname_ex(socket.gethostname())[2]
    except OSError:
        return None
    return next((a for a in addresses if not a.startswith("127.")), None)


class Tower:
    """One tower. `start()` runs it on a thread; `sub_endpoint` / `pub_endpoint` are the
    bound endpoints (ports resolved when bound to ``*``)."""

    def __init__(self, sub_bind: str = "tcp://*:5556", pub_bind: str = "tcp://*:5557", *,
                 advertise_host: str | None = None,
                 limits: proto.DafkaLimits = proto.DEFAULT_LIMITS,
                 tower_limits: TowerLimits = TowerLimits()) -> None:
        """`advertise_host` replaces a 127.0.0.1 peer address in announcements, so that
        remote nodes can reach the nodes that share the tower's host. None: the host the
        XSUB is bound to, or for a wildcard bind the host's first non-loopback address
        (the C tower's first interface)."""
        if advertise_host is not None and not proto.is_host(advertise_host):
            raise DafkaConfigError(f"--advertise-host: {advertise_host!r} is not a host name or "
                              "address (nodes connect to tcp://HOST:PORT)")
        self.sub_bind = sub_bind
        self.pub_bind = pub_bind
        self.advertise_host = advertise_host
        self.decoder = proto.Decoder(limits)
        self.tower_limits = tower_limits
        self.stats: Counter[str] = Counter()
        self.guard: SubscriptionGuard | None = None
        self._holders: Counter[bytes] = Counter()   # prefix -> subscriptions forwarded
        self.ctx = zmq.Context.instance()
        self.xsub: zmq.Socket | None = None
        self.xpub: zmq.Socket | None = None
        self.sub_endpoint = ""
        self.pub_endpoint = ""
        self._thread: threading.Thread | None = None
        self._stop = threading.Event()

    def open(self) -> "Tower":
        self.xpub = self.ctx.socket(zmq.XPUB)
        self.xpub.setsockopt(zmq.LINGER, 0)
        self.xpub.setsockopt(zmq.XPUB_WELCOME_MSG, b"W")
        self.xpub.setsockopt(zmq.XPUB_VERBOSER, 1)
        self.xpub.setsockopt(zmq.MAXMSGSIZE,
                             publisher_maxmsgsize(self.tower_limits.max_prefix_bytes))
        self.guard = SubscriptionGuard(
            self.xpub, SubscriptionLimits(self.tower_limits.max_prefix_bytes,
                                          self.tower_limits.max_per_connection),
            "dafka tower XPUB", log, self.stats)
        self.xsub = self.ctx.socket(zmq.XSUB)
        self.xsub.setsockopt(zmq.LINGER, 0)
        self.xsub.setsockopt(zmq.MAXMSGSIZE, self.tower_limits.max_beacon_bytes)
        try:
            self.xpub.bind(self.pub_bind)
            self.xsub.bind(self.sub_bind)
        except zmq.ZMQError as exc:
            self.close()
            raise OSError(f"tower/pub_address {self.pub_bind!r} or tower/sub_address "
                          f"{self.sub_bind!r}: {exc}") from None
        self.pub_endpoint = self.xpub.getsockopt(zmq.LAST_ENDPOINT).decode()
        self.sub_endpoint = self.xsub.getsockopt(zmq.LAST_ENDPOINT).decode()
        if self.advertise_host is None:
            bound = urlsplit(self.sub_bind.replace("*", "0.0.0.0")).hostname or ""
            if ":" in bound and bound != "::":
                bound = f"[{bound}]"   # an IPv6 address, as in an endpoint
            self.advertise_host = (_first_interface() if bound in ("0.0.0.0", "::")
                                   else bound) or "127.0.0.1"
        return self

    def start(self) -> "Tower":
        if self.xsub is None:
            self.open()
        self._thread = threading.Thread(target=self.run, name="dafka-tower", daemon=True)
        self._thread.start()
        return self

    def run(self) -> None:
        """The relay loop (returns when `stop` is called)."""
        poller = zmq.Poller()
        poller.register(self.xsub, zmq.POLLIN)
        poller.register(self.xpub, zmq.POLLIN)
        poller.register(self.guard.monitor, zmq.POLLIN)
        while not self._stop.is_set():
            for sock, _ in poller.poll(100):
                if sock is self.xsub:
                    self._relay_beacons()
                elif sock is self.xpub:
                    self._forward_subscriptions()
                else:
                    self.guard.on_monitor()
            self.guard.refusals.flush(time.monotonic())
            self.guard.release_memory()

    def _relay_beacons(self) -> None:
        while True:
            try:
                frames = self.xsub.recv_multipart(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                return
            try:
                beacon = self.decoder.decode([f.bytes for f in frames])
            except ProtocolError:
                self.stats["dropped_malformed"] += 1
                continue
            if not isinstance(beacon, proto.Beacon):
                self.stats["dropped_unexpected"] += 1
                continue
            host = beacon.host or self._peer_host(frames[0])
            endpoint = f"tcp://{host}:{beacon.port}"
            self.xpub.send_multipart(proto.encode(proto.TowerBeacon(beacon.sender, endpoint)))
            self.stats["beacons"] += 1

    def _peer_host(self, frame: zmq.Frame) -> str:
        try:
            peer = frame.get("Peer-Address")
        except zmq.ZMQError:
            peer = None
        if not peer or peer == "127.0.0.1":
            return self.advertise_host
        return f"[{peer}]" if ":" in peer else peer

    def _forward_subscriptions(self) -> None:
        while True:
            try:
                frame = self.xpub.recv(zmq.NOBLOCK, copy=False)
            except zmq.Again:
                self.guard.release_memory()
                return
            data = frame.bytes
            if data[:1] not in (b"\x00", b"\x01") or not self.guard.admit(frame):
                continue
            prefix = data[1:]
            if prefix[:1] == b"W":
                continue  # welcome subscriptions stay here, as in the C tower
            if data[:1] == b"\x01":
                self._holders[prefix] += 1
                if self._holders[prefix] == 1:
                    self.xsub.send(data)
            elif self._holders.get(prefix, 0) > 0:
                self._holders[prefix] -= 1
                if not self._holders[prefix]:
                    del self._holders[prefix]
                    self.xsub.send(data)

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(5)
            self._thread = None
        self.close()

    def close(self) -> None:
        if self.guard is not None:
            self.guard.close()
        for sock in (self.xsub, self.xpub):
            if sock is not None and not sock.closed:
                sock.close(0)

    def __enter__(self) -> "Tower":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()


__all__ = ["Tower", "TowerLimits"]
