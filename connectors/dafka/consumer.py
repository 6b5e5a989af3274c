"""The Dafka consumer: every partition of the subscribed topics, in order, once.

```python
from connectors.dafka import Consumer, DafkaConfig
config = DafkaConfig(offset_reset="earliest").with_towers(["tcp://10.0.0.5:5556"])
with Consumer(config, ["orders"]) as consumer:
    for record in consumer:                 # ConsumerRecord(topic, partition, offset, value)
        ...
    batch = consumer.poll(timeout=1.0)      # or batches: list[ConsumerRecord]
# or a callback, run on the consumer's thread (keep it short):
Consumer(config, ["orders"], on_record=handle).start()
```

Behaviour (SPECS §4, the C consumer plus our decisions): per partition (subject,
producer address) it tracks the last delivered sequence. ``latest`` starts at the first
record or HEAD seen; ``earliest`` (``--from-beginning``) starts at 0 and asks the stores
for the heads of the subscribed topics (GET-HEADS on subscribe, again when a store
appears, and CONSUMER-HELLO on STORE-HELLO). A RECORD or HEAD ahead of the next
expected sequence triggers FETCH (the producer and every store get it); records ahead
are buffered (bounded) rather than dropped, so the repair only refetches the gap;
duplicates are dropped; records of topics that merely share a prefix with a subscribed
one are filtered out.

`OffsetTracker` is the sans-I/O core; `Consumer` the node around it.
"""
from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field
from itertools import repeat
from typing import Callable, Iterable, Iterator, NamedTuple

import zmq

from connectors.dafka import proto
from connectors.dafka.config import DafkaConfig
from connectors.dafka.node import FetchFilter, Node
from connectors.dafka.sockets import Run, Runs, drain_runs


class ConsumerRecord(NamedTuple):
    """One delivered record: `partition` is the producer's address, `offset` its
    sequence in that partition. (A NamedTuple: built once per record on the hot path,
    it costs a third of a dataclass.)"""
    topic: str
    partition: str
    offset: int
    value: bytes


@dataclass
class _Cursor:
    last: int                                        # last delivered (-1: none yet)
    ahead: dict[int, bytes] = field(default_factory=dict)   # buffered out-of-order


class OffsetTracker:
    """Ordering, gap detection and de-duplication for every partition (sans-I/O).

    `on_record` appends the records now deliverable in order to a list and returns the
    sequence to FETCH from (or None); `on_head` returns the sequence to FETCH from.
    """

    def __init__(self, earliest: bool, max_ahead: int = 100_000) -> None:
        self.earliest = earliest
        self.max_ahead = max_ahead
        self.cursors: dict[tuple[str, str], _Cursor] = {}
        self.duplicates = 0
        self.overflow = 0

    def _cursor(self, key: tuple[str, str], sequence: int) -> _Cursor:
        cursor = self.cursors.get(key)
        if cursor is None:
            cursor = _Cursor(-1 if self.earliest else sequence - 1)
            self.cursors[key] = cursor
        return cursor

    def on_record(self, subject: str, address: str, sequence: int, content: bytes,
                  deliver: list[ConsumerRecord]) -> int | None:
        """Append the records now deliverable in order to `deliver`; return the
        sequence to FETCH from, or None."""
        cursor = self.cursors.get((subject, address))
        if cursor is None:
            cursor = self._cursor((subject, address), sequence)
        expected = cursor.last + 1
        if sequence == expected:
            deliver.append(ConsumerRecord(subject, address, sequence, content))
            ahead = cursor.ahead
            if ahead:
                sequence += 1
                while sequence in ahead:
                    deliver.append(ConsumerRecord(subject, address, sequence,
                                                  ahead.pop(sequence)))
                    sequence += 1
                sequence -= 1
            cursor.last = sequence
            return None
        if sequence < expected:
            self.duplicates += 1
            return None
        if len(cursor.ahead) < self.max_ahead:
            cursor.ahead[sequence] = content
        else:
            self.overflow += 1
        return expected

    def on_head(self, subject: str, address: str, sequence: int) -> int | None:
        key = (subject, address)
        known = key in self.cursors
        cursor = self._cursor(key, sequence)
        if not known or sequence > cursor.last:
            return cursor.last + 1
        return None

    def positions(self) -> dict[tuple[str, str], int]:
        """(topic, partition) -> next offset to deliver."""
        return {key: cursor.last + 1 for key, cursor in self.cursors.items()}


class Consumer(Node):
    """A Dafka consumer node (see the module docstring)."""

    ROLE = "consumer"
    PUB_TYPE = zmq.XPUB

    def __init__(self, config: DafkaConfig, topics: Iterable[str] = (), *,
                 on_record: Callable[[ConsumerRecord], None] | None = None,
                 address: str | None = None, max_pending: int = 200_000,
                 limits: proto.Limits = proto.DEFAULT_LIMITS) -> None:
        super().__init__(config, address=address, limits=limits)
        self.earliest = self.config.offset_reset == "earliest"
        self.tracker = OffsetTracker(self.earliest)
        self.fetch_filter = FetchFilter()
        self.topics: list[str] = []
        self._initial_topics = list(topics)
        self.on_record = on_record
        self.max_pending = max_pending
        self.store_readers: set[str] = set()
        self._ready: deque[ConsumerRecord] = deque()
        self._ready_cond = threading.Condition()
        self._paused = False

    def _setup(self) -> None:
        self.data = self._add_sub([proto.subscription_prefix(c, self.address) for c in (
            proto.Command.DIRECT_RECORD, proto.Command.DIRECT_HEAD,
            proto.Command.STORE_HELLO)], self._drain_data)
        self._watch(self.pub, self._drain_subscriptions)
        for topic in self._initial_topics:
            self._subscribe(topic)

    # ----------------------------------------------------------------- public API
    def subscribe(self, topic: str) -> None:
        """Add a topic (effective at once when the node is running)."""
        if self.pub is None:
            self._initial_topics.append(topic)
        else:
            self.call_soon(lambda: self._subscribe(topic))

    def poll(self, timeout: float | None = 1.0, max_records: int = 100_000
             ) -> list[ConsumerRecord]:
        """Up to `max_records` delivered records; waits up to `timeout` s for the first.
        Once every delivered record is taken, raises `NodeFailed` if the consumer's
        thread died (no more would ever come)."""
        with self._ready_cond:
            if not self._ready and timeout != 0:
                self._ready_cond.wait_for(
                    lambda: self._ready or self._stopping or self._error is not None, timeout)
            ready = self._ready
            if not ready:
                self.check()
            n = min(len(ready), max_records)
            out = [ready.popleft() for _ in range(n)]
        if self._paused and len(self._ready) < self.max_pending // 2:
            self.wake()
        return out

    def __iter__(self) -> Iterator[ConsumerRecord]:
        while not self._stopping:
            yield from self.poll(timeout=0.5)

    def positions(self) -> dict[tuple[str, str], int]:
        """(topic, partition) -> next offset this consumer will deliver."""
        return self.tracker.positions()

    def stop(self) -> None:
        super().stop()
        with self._ready_cond:
            self._ready_cond.notify_all()

    def _crashed(self) -> None:
        with self._ready_cond:
            self._ready_cond.notify_all()

    # ----------------------------------------------------------------- node side
    def _subscribe(self, topic: str) -> None:
        if not topic or "\x00" in topic or topic in self.topics:
            return
        self.topics.append(topic)
        for command in (proto.Command.RECORD, proto.Command.HEAD):
            self.data.setsockopt(zmq.SUBSCRIBE, proto.subscription_prefix(command, topic))
        if self.earliest:
            self.send(proto.GetHeads(topic, self.address))

    def _hello(self, reader: str) -> None:
        self.send(proto.ConsumerHello(reader, self.address,
                                      list(self.topics) if self.earliest else []))

    def _drain_subscriptions(self, now: float) -> None:
        for msg in self.messages(self.pub):
            if type(msg) is not proto.Subscription:
                continue
            if msg.command == proto.Command.CONSUMER_HELLO and proto.is_address(msg.topic):
                if msg.subscribe:
                    # A store reader connected: hello, and (our addition) ask it for
                    # heads, since a GET-HEADS sent before it connected was lost.
                    self.store_readers.add(msg.topic)
                    self._hello(msg.topic)
                    if self.earliest:
                        for topic in self.topics:
                            self.send(proto.GetHeads(topic, self.address))
                else:
                    self.store_readers.discard(msg.topic)

    def _before_poll(self) -> None:
        paused = len(self._ready) >= self.max_pending
        if paused != self._paused:
            self._paused = paused
            self._poller.modify(self.data, 0 if paused else zmq.POLLIN)

    def _drain_data(self, now: float) -> None:
        if self._paused:
            return
        topics = self.topics
        tracker = self.tracker
        delivered: list[ConsumerRecord] = []
        fetches: dict[tuple[str, str], int] = {}
        runs = Runs()

        def deliver(run: Run) -> None:
            count = len(run.contents)
            if count:
                subject, address = run.key
                delivered.extend(map(ConsumerRecord, repeat(subject, count),
                                     repeat(address, count), range(run.first, run.next),
                                     run.contents))
                tracker.cursors[run.key].last = run.next - 1

        def handle(msg: proto.Message, frame0: bytes) -> None:
            kind = type(msg)
            if kind is proto.Record or kind is proto.DirectRecord:
                if msg.subject not in topics or (kind is proto.Record
                                                 and msg.topic != msg.subject):
                    self.stats["filtered"] += 1
                    return
                key = (msg.subject, msg.address)
                run = runs.take(key)
                if run is not None:
                    deliver(run)
                fetch = tracker.on_record(msg.subject, msg.address, msg.sequence,
                                          msg.content, delivered)
                if fetch is not None:
                    fetches[key] = fetch
                elif not tracker.cursors[key].ahead:
                    runs.open(frame0, key, tracker.cursors[key].last + 1)
            elif kind is proto.Head or kind is proto.DirectHead:
                if msg.subject not in topics or (kind is proto.Head
                                                 and msg.topic != msg.subject):
                    self.stats["filtered"] += 1
                    return
                run = runs.take((msg.subject, msg.address))
                if run is not None:
                    deliver(run)
                fetch = tracker.on_head(msg.subject, msg.address, msg.sequence)
                if fetch is not None:
                    fetches[(msg.subject, msg.address)] = fetch
            elif kind is proto.StoreHello:
                self.store_readers.add(msg.address)
                self._hello(msg.address)
            else:
                self.drop_unexpected()

        drain_runs(self.data, self.decoder, self.stats, runs, handle)
        for run in runs.by_key.values():
            deliver(run)
        for (subject, address), seq in fetches.items():
            if self.tracker.cursors[(subject, address)].last + 1 != seq:
                continue   # repaired within this drain
            if self.fetch_filter.allow(subject, address, seq, now):
                self.send(proto.Fetch(address, self.address, subject, seq,
                                      proto.fetch_count(seq)))
                self.stats["fetches"] += 1
        if delivered:
            self.stats["delivered"] += len(delivered)
            if self.on_record is not None:
                for record in delivered:
                    self.on_record(record)
            else:
                with self._ready_cond:
                    self._ready.extend(delivered)
                    self._ready_cond.notify_all()


__all__ = ["Consumer", "ConsumerRecord", "OffsetTracker"]
