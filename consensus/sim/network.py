"""The simulated network between servers: latency, loss, duplication, reordering, delay
and (possibly asymmetric) partitions, all drawn from the run's one random generator.

It carries packets from one server to another; a packet holds one or more group-tagged
Raft messages (the group id is named on the wire), and every fault hits a packet whole,
so a lossy or cut link hurts every group's traffic between that pair at once."""
from __future__ import annotations

import random
from dataclasses import dataclass, field

from consensus.raft import Message


@dataclass
class LinkFaults:
    """Per-run fault rates (probabilities per message)."""

    drop: float = 0.0
    duplicate: float = 0.0
    delay: float = 0.0          #: held back 2..max_delay steps (reorders it too)
    max_delay: int = 8
    coalesce: bool = True       #: one packet per server pair and round (else per message)


@dataclass
class Packet:
    source: int                 #: server ids
    destination: int
    messages: list[tuple[int, Message]]     #: (group, message), in the order sent


@dataclass
class SimNetwork:
    rng: random.Random
    faults: LinkFaults = field(default_factory=LinkFaults)
    blocked: set[tuple[int, int]] = field(default_factory=set)   # (from, to) links cut
    _queue: list[tuple[int, int, Packet]] = field(default_factory=list)  # (due, seq, packet)
    _seq: int = 0
    sent: int = 0               #: messages
    packets: int = 0
    dropped: int = 0            #: messages

    def send(self, packet: Packet, now: int) -> None:
        self.sent += len(packet.messages)
        self.packets += 1
        rng, faults = self.rng, self.faults
        if (packet.source, packet.destination) in self.blocked or rng.random() < faults.drop:
            self.dropped += len(packet.messages)
            return
        copies = 2 if rng.random() < faults.duplicate else 1
        for _ in range(copies):
            if rng.random() < faults.delay:
                due = now + rng.randint(2, faults.max_delay)
            else:
                due = now + (0 if rng.random() < 0.5 else 1)
            self._seq += 1
            self._queue.append((due, self._seq, packet))

    def due(self, now: int, reorder: bool) -> list[Packet]:
        """Pop the packets to deliver now (in random order when `reorder`)."""
        ready = [item for item in self._queue if item[0] <= now]
        if not ready:
            return []
        self._queue = [item for item in self._queue if item[0] > now]
        ready.sort(key=lambda item: (item[0], item[1]))
        if reorder:
            self.rng.shuffle(ready)
        # A partition cut after sending still stops what is in flight on that link.
        return [p for _, _, p in ready if (p.source, p.destination) not in self.blocked]

    def pending(self) -> int:
        return len(self._queue)

    # -- partitions --------------------------------------------------------------------------
    def isolate(self, node: int, others: list[int]) -> None:
        for other in others:
            if other != node:
                self.blocked.add((node, other))
                self.blocked.add((other, node))

    def split(self, group: list[int], rest: list[int]) -> None:
        for a in group:
            for b in rest:
                self.blocked.add((a, b))
                self.blocked.add((b, a))

    def cut_one_way(self, src: int, dst: int) -> None:
        self.blocked.add((src, dst))

    def heal(self) -> None:
        self.blocked.clear()
