"""The Dafka producer: one partition of one topic, named by the producer's address.

```python
from connectors.dafka import DafkaConfig, Producer, deterministic_address
config = DafkaConfig().with_towers(["tcp://10.0.0.5:5556"])
with Producer(config, "orders") as producer:              # a fresh partition
    seq = producer.publish(b"...")                         # 0, 1, 2, ...
    producer.flush(timeout=10)                             # every record ACKed by a store

# The exactly-once Spark sink: a deterministic partition and sequences from its ledger,
# so a replayed batch republishes the same records at the same offsets.
Producer(config, "orders", address=deterministic_address(query_id, str(task)),
         start_sequence=ledger_next_sequence)
```

Behaviour of the C producer (SPECS §4): RECORD on its PUB; HEAD (last published
sequence) every `head_interval` after the first record; every record is kept until a
store ACKs it (ACKs are cumulative) and FETCHes addressed to the partition are answered
from what is kept. Unlike the C producer, memory is bounded: past `max_unacked` kept
records `publish` blocks, then raises `BackpressureTimeout`.

Threads: `publish` sends from the caller's thread (no hand-off per record); the node's
own thread answers FETCH, takes ACKs, beacons and sends HEADs. Both use the PUB socket
only under one lock.
"""
from __future__ import annotations

import threading
import time
from typing import Iterable

import zmq

from connectors.dafka import proto
from connectors.dafka.config import DafkaConfig
from connectors.dafka.node import Node
from connectors.dafka.sockets import raw_send

_SNDMORE = zmq.SNDMORE
FETCH_CHUNK = 1000   # DIRECT-RECORDs sent per lock hold when answering a FETCH


class BackpressureTimeout(TimeoutError):
    """`publish` waited too long for ACKs (producer/max_unacked records unacked)."""


class UnackedWindow:
    """Published records no store has ACKed yet (sans-I/O).

    Sequences are contiguous from `first` to `next - 1`; a cumulative ACK(s) drops
    every record <= s.
    """

    def __init__(self, start_sequence: int = 0) -> None:
        self.first = start_sequence
        self.next = start_sequence
        self.records: dict[int, bytes] = {}

    def __len__(self) -> int:
        return self.next - self.first

    def ack(self, sequence: int) -> int:
        """Drop every record <= `sequence`; return how many were dropped."""
        stop = min(sequence + 1, self.next)
        records = self.records
        if stop == self.next:
            records.clear()          # all of them (a flush's last ACK): no step per record
        else:
            for seq in range(self.first, stop):
                del records[seq]
        dropped = max(0, stop - self.first)
        self.first = max(self.first, stop)
        return dropped

    def window(self, sequence: int, count: int) -> range:
        """Sequences kept for FETCH(sequence, count): `count` records from `sequence`,
        nothing if `sequence` is already ACKed or not yet published (as the C code)."""
        if not self.first <= sequence < self.next:
            return range(0)
        return range(sequence, min(sequence + count, self.next))


class Producer(Node):
    """A Dafka producer (one partition). See the module docstring."""

    ROLE = "producer"

    def __init__(self, config: DafkaConfig, topic: str, *, address: str | None = None,
                 start_sequence: int = 0, settle: float | None = None,
                 limits: proto.DafkaLimits = proto.DEFAULT_LIMITS) -> None:
        """`settle`: seconds `start` waits after the tower's welcome (default 1.5 beacon
        intervals) to be connected to every live store before the first record: a C
        store ACKs a record once, when it stores it, so an ACK sent before our SUB
        reached that store is lost for good (our stores also re-ACK on HEAD). The C
        console consumer sleeps 1 s after start for the same reason. 0: no wait."""
        super().__init__(config, address=address, limits=limits)
        self.settle = self.config.beacon_interval * 1.5 if settle is None else settle
        if not topic or "\x00" in topic or len(topic.encode()) > 255:
            raise ValueError(f"topic {topic!r}: 1..255 bytes without NUL")
        if not 0 <= start_sequence <= proto.MAX_SEQUENCE:
            raise ValueError(f"start_sequence {start_sequence}: must be a u64")
        self.topic = topic
        self.unacked = UnackedWindow(start_sequence)
        self._lock = threading.Condition(threading.Lock())
        self._record_prefix = proto.frame0_prefix(proto.Command.RECORD, topic,
                                                  self.address, topic)
        self._head_prefix = proto.frame0_prefix(proto.Command.HEAD, topic, self.address,
                                                topic)
        self._first_published: float | None = None
        self._head_timer: list | None = None
        self.acked = start_sequence - 1     # highest cumulative ACK seen (-1: none)

    @property
    def partition(self) -> str:
        return self.address

    @property
    def next_sequence(self) -> int:
        return self.unacked.next

    def _setup(self) -> None:
        self._add_sub([proto.subscription_prefix(proto.Command.ACK, self.address),
                       proto.subscription_prefix(proto.Command.FETCH, self.address)],
                      self._on_sub)

    # ----------------------------------------------------------------- publishing
    def publish(self, content: bytes, timeout: float | None = 30.0) -> int:
        """Publish one record; return its sequence. Blocks while `max_unacked` records
        wait for a store's ACK, and raises `BackpressureTimeout` after `timeout` s."""
        return self.publish_many((content,), timeout)

    def publish_many(self, contents: Iterable[bytes], timeout: float | None = 30.0) -> int:
        """Publish records in order under one lock; return the last sequence (or
        next_sequence - 1 if `contents` is empty)."""
        prefix = self._record_prefix
        pack = proto.pack_sequence
        limit = self.config.max_unacked
        unacked = self.unacked
        records = unacked.records
        send = raw_send(self.pub)
        self.check()   # with the thread gone, nothing would be acknowledged or re-sent
        with self._lock:
            seq = unacked.next
            try:
                for content in contents:
                    if seq - unacked.first >= limit:
                        unacked.next = seq
                        self._wait_for_room(1, timeout)
                    records[seq] = content
                    send(prefix + pack(seq), _SNDMORE)
                    send(content)
                    seq += 1
            finally:
                unacked.next = seq
        if self._first_published is None and seq > unacked.first:
            self._first_published = time.monotonic()
            self.wake()
        return seq - 1

    def _wait_for_room(self, needed: int, timeout: float | None) -> None:
        deadline = None if timeout is None else time.monotonic() + timeout
        while len(self.unacked) + needed > self.config.max_unacked:
            self.check()
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                raise BackpressureTimeout(
                    f"producer {self.topic}/{self.address}: {len(self.unacked)} records "
                    f"unacked (producer/max_unacked={self.config.max_unacked}) for "
                    f"{timeout:g} s; is a store running and reachable via the towers?")
            self._lock.wait(left)

    def flush(self, timeout: float | None = None) -> bool:
        """Wait until a store ACKed every published record; False on timeout,
        `NodeFailed` if the producer's thread died first."""
        with self._lock:
            self._lock.wait_for(lambda: len(self.unacked) == 0 or self._error is not None,
                                timeout)
            if len(self.unacked) == 0:
                return True
        self.check()
        return False

    def _crashed(self) -> None:
        with self._lock:
            self._lock.notify_all()

    def close(self, timeout: float | None = 0.0) -> None:
        """Stop. With a `timeout`, first wait that long for outstanding ACKs (the C
        producer waits for ever unless producer/terminate_unacked is set)."""
        if timeout and self.pub is not None:
            self.flush(timeout)
        self.stop()

    # ----------------------------------------------------------------- the node side
    def _drain_wake(self, now: float) -> None:
        super()._drain_wake(now)
        if self._first_published is not None and self._head_timer is None:
            due = self._first_published + self.config.head_interval - now
            self._head_timer = self.add_timer(self.config.head_interval, self._send_head,
                                              first=max(0.0, due))

    def _send_head(self, now: float) -> None:
        with self._lock:
            last = self.unacked.next - 1
            self.pub.send(self._head_prefix + proto.pack_sequence(last))

    def _on_sub(self, now: float) -> None:
        for msg in self.messages(self._subs[0]):
            if type(msg) is proto.Ack and msg.topic == self.address:
                self._on_ack(msg)
            elif type(msg) is proto.Fetch and msg.topic == self.address:
                self._on_fetch(msg)
            else:
                self.drop_unexpected()

    def _on_ack(self, ack: proto.Ack) -> None:
        if ack.subject != self.topic:
            self.drop_unexpected()
            return
        with self._lock:
            if ack.sequence > self.acked:
                self.acked = min(ack.sequence, self.unacked.next - 1)
            if self.unacked.ack(ack.sequence):
                self._lock.notify_all()

    def _on_fetch(self, fetch: proto.Fetch) -> None:
        if fetch.subject != self.topic:
            self.drop_unexpected()
            return
        self.stats["fetches"] += 1
        prefix = proto.frame0_prefix(proto.Command.DIRECT_RECORD, fetch.address,
                                     self.address, self.topic)
        window = self.unacked.window(fetch.sequence, fetch.count)
        send = raw_send(self.pub)
        for start in range(window.start, window.stop, FETCH_CHUNK):
            with self._lock:
                records = self.unacked.records
                for seq in range(start, min(start + FETCH_CHUNK, window.stop)):
                    content = records.get(seq)
                    if content is None:
                        return   # ACKed meanwhile: a store has it
                    send(prefix + proto.pack_sequence(seq), _SNDMORE)
                    send(content)
                    self.stats["direct_records"] += 1


__all__ = ["BackpressureTimeout", "Producer", "UnackedWindow"]
