"""Discovery: every node beacons its publisher endpoint to the towers and connects to
the publishers the towers announce (the C code's ``dafka_beacon`` actor).

`PeerTable` is the sans-I/O part (who is alive, when they expire); `BeaconChannel` owns
the two sockets: a PUB connected to every tower XSUB (``B | uuid | host | port``) and a
SUB connected to every tower XPUB, subscribed to ``W`` (welcome) and ``B`` (beacons).
The node's own loop polls the SUB, so no extra thread is needed.
"""
from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

import zmq

from connectors.dafka import proto
from connectors.dafka.config import DafkaConfig
from connectors.dafka.sockets import iter_messages
from connectors.subscriptions import publisher_maxmsgsize

BEACON_MAX_BYTES = 4096   # a tower beacon frame: B, a uuid, an endpoint (<= 1024 bytes)


@dataclass
class PeerTable:
    """Publisher endpoints of live peers, keyed by endpoint as in the C code.

    `seen` returns True for an endpoint never seen (or forgotten) before: connect to it
    and beacon at once so the new peer discovers us quickly. `expire` returns the
    endpoints whose last beacon is older than `timeout`: disconnect from them.
    """
    own_address: str
    timeout: float
    peers: dict[str, float] = field(default_factory=dict)    # endpoint -> deadline
    senders: dict[str, str] = field(default_factory=dict)    # endpoint -> uuid

    def seen(self, sender: str, endpoint: str, now: float) -> bool:
        if sender == self.own_address:
            return False
        new = endpoint not in self.peers
        self.peers[endpoint] = now + self.timeout
        self.senders[endpoint] = sender
        return new

    def expire(self, now: float) -> list[str]:
        dead = [endpoint for endpoint, deadline in self.peers.items() if now > deadline]
        for endpoint in dead:
            del self.peers[endpoint]
            self.senders.pop(endpoint, None)
        return dead


class BeaconChannel:
    """The beacon sockets of one node; `handle` drains the tower traffic."""

    def __init__(self, ctx: zmq.Context, config: DafkaConfig, address: str, port: int,
                 decoder: proto.Decoder, stats: Counter) -> None:
        self.config = config
        self.address = address
        self.port = port
        self.decoder = decoder
        self.table = PeerTable(address, config.beacon_timeout)
        self.welcomed = False
        self.echoed_at: float | None = None   # our own beacon came back from a tower
        self.stats = stats
        self.pub = ctx.socket(zmq.PUB)
        self.pub.setsockopt(zmq.LINGER, 0)
        # the tower sends subscriptions only (``B``), and beacons of a few hundred bytes
        self.pub.setsockopt(zmq.MAXMSGSIZE, publisher_maxmsgsize(
            decoder.limits.max_subscription_bytes))
        self.sub = ctx.socket(zmq.SUB)
        self.sub.setsockopt(zmq.LINGER, 0)
        self.sub.setsockopt(zmq.MAXMSGSIZE, BEACON_MAX_BYTES)
        self.sub.setsockopt(zmq.SUBSCRIBE, b"W")
        self.sub.setsockopt(zmq.SUBSCRIBE, b"B")
        for endpoint in config.tower_pub:
            self.sub.connect(endpoint)
        for endpoint in config.tower_sub:
            self.pub.connect(endpoint)
        self._beacon = proto.encode(proto.Beacon(address, config.beacon_host, port))

    def send(self) -> None:
        self.pub.send_multipart(self._beacon)

    def handle(self, now: float) -> list[str]:
        """Drain the tower SUB; return the endpoints of new peers to connect to."""
        connect: list[str] = []
        for msg in iter_messages(self.sub, self.decoder, self.stats):
            if isinstance(msg, proto.Welcome):
                self.welcomed = True
            elif isinstance(msg, proto.TowerBeacon):
                if msg.sender == self.address and self.echoed_at is None:
                    # The tower relayed our beacon to every peer listening: each
                    # beacons back at once (a new peer), which discovery waits for.
                    self.echoed_at = now
                if self.table.seen(msg.sender, msg.endpoint, now):
                    connect.append(msg.endpoint)
            else:
                self.stats["dropped_unexpected"] += 1
        if connect:
            self.send()   # a new peer: beacon at once, as the C code does
        return connect

    def close(self) -> None:
        self.pub.close(0)
        self.sub.close(0)
