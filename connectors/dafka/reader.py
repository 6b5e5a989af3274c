"""Ask the stores directly: list partitions and their heads, read an offset range.

For a Spark driver (plan micro-batches) and its executors (read one partition's
[start, end) range) with no long-lived consumer: a `StoreClient` is a short-lived
Dafka node that runs only inside its calls, in the caller's thread.

```python
from connectors.dafka import DafkaConfig, StoreClient
with StoreClient(DafkaConfig().with_towers(["tcp://10.0.0.5:5556"])) as client:
    heads = client.heads("orders")        # {("orders", partition): last stored offset}
    for batch in client.read_range_batches("orders", partition, 0, 1000):
        ...                               # list[ConsumerRecord], offsets in order
```

How: the client beacons like any node; a store reader then subscribes to it (we see
``W``+reader address on our XPUB) and answers our ``L`` subscription with STORE-HELLO,
which proves our SUB reaches it too: only then is the store *ready* and requests are
sent. `heads` sends GET-HEADS (stores answer one DIRECT-HEAD per partition whose
subject starts with the topic) and collects answers until none arrived for `settle`
seconds (the protocol has no end-of-answer marker). `read_range` sends FETCH to the
partition address (the producer, if alive, and every store get it), buffers
DIRECT-RECORDs, yields them in order and re-FETCHes from the first missing offset when
nothing arrived for `retry` seconds (a store replaces the rest of our previous FETCH
with the new one, so re-FETCHes do not pile up work in the stores). A store answers
only if it holds the first requested offset; a range that no store (and no producer)
holds raises TimeoutError.
"""
from __future__ import annotations

import time
from typing import Iterator

import zmq

from connectors.dafka import proto
from connectors.dafka.config import DafkaConfig
from connectors.dafka.consumer import ConsumerRecord
from connectors.dafka.node import Node
from connectors.dafka.sockets import iter_messages

MAX_WINDOW = proto.FETCH_BLOCK    # offsets asked per FETCH (and buffered at most)
DRAIN_LIMIT = 10_000              # DIRECT-RECORDs handled per loop turn


class NoStoreError(TimeoutError):
    """No store reader became reachable through the towers in time."""


class StoreClient(Node):
    """Heads and offset ranges straight from the stores (see the module docstring)."""

    ROLE = "store-client"
    PUB_TYPE = zmq.XPUB

    def __init__(self, config: DafkaConfig, *, address: str | None = None,
                 limits: proto.Limits = proto.DEFAULT_LIMITS) -> None:
        super().__init__(config, address=address, limits=limits)
        self.subscribed_readers: set[str] = set()   # their SUB reaches our XPUB
        self.hello_readers: set[str] = set()        # our SUB reaches their XPUB
        self._records: list[proto.DirectRecord] = []
        self._heads: list[proto.DirectHead] = []

    @property
    def ready_stores(self) -> set[str]:
        return self.subscribed_readers & self.hello_readers

    def _setup(self) -> None:
        self.data = self._add_sub([proto.subscription_prefix(c, self.address) for c in (
            proto.Command.DIRECT_RECORD, proto.Command.DIRECT_HEAD,
            proto.Command.STORE_HELLO)], self._drain_data)
        self._watch(self.pub, self._drain_subscriptions)

    def _drain_subscriptions(self, now: float) -> None:
        for msg in self.messages(self.pub):
            if (type(msg) is proto.Subscription
                    and msg.command == proto.Command.CONSUMER_HELLO
                    and proto.is_address(msg.topic)):
                if msg.subscribe:
                    self.subscribed_readers.add(msg.topic)
                else:
                    self.subscribed_readers.discard(msg.topic)
                    self.hello_readers.discard(msg.topic)

    def _drain_data(self, now: float) -> None:
        # A bounded drain per loop turn: draining 100000 records at once takes seconds,
        # during which we would not beacon and the stores would forget us.
        for msg in iter_messages(self.data, self.decoder, self.stats, DRAIN_LIMIT):
            kind = type(msg)
            if kind is proto.DirectRecord:
                self._records.append(msg)
            elif kind is proto.DirectHead:
                self._heads.append(msg)
            elif kind is proto.StoreHello:
                self.hello_readers.add(msg.address)
            elif msg is not None:
                self.drop_unexpected()

    # ----------------------------------------------------------------- public API
    def wait_for_stores(self, count: int = 1, timeout: float = 10.0) -> set[str]:
        """Run until `count` store readers are ready; their addresses."""
        if not self.run_until(lambda: len(self.ready_stores) >= count, timeout):
            raise NoStoreError(
                f"{len(self.ready_stores)} of {count} Dafka store(s) reachable via the "
                f"towers {', '.join(self.config.tower_sub)} after {timeout:g} s; is "
                f"`garlicfarm dafka store` running there?")
        return set(self.ready_stores)

    def heads(self, topic: str = "", *, exact: bool = True, min_stores: int = 1,
              timeout: float = 10.0, settle: float = 0.25) -> dict[tuple[str, str], int]:
        """{(topic, partition): last stored offset} over every ready store (the highest
        when stores differ). `exact=False` keeps every topic that starts with `topic`;
        "" lists every topic."""
        self.wait_for_stores(min_stores, timeout)
        self._heads.clear()
        self.send(proto.GetHeads(topic, self.address))
        heads: dict[tuple[str, str], int] = {}
        quiet_since = time.monotonic()
        seen = 0
        while time.monotonic() - quiet_since < settle:
            self.step(settle / 5)
            if len(self._heads) != seen:
                seen = len(self._heads)
                quiet_since = time.monotonic()
        for head in self._heads:
            if exact and topic and head.subject != topic:
                continue
            key = (head.subject, head.address)
            heads[key] = max(heads.get(key, -1), head.sequence)
        self._heads.clear()
        return heads

    def read_range_batches(self, topic: str, partition: str, start: int, end: int, *,
                           min_stores: int = 1, timeout: float = 30.0, retry: float = 0.5,
                           window: int = MAX_WINDOW) -> Iterator[list[ConsumerRecord]]:
        """Offsets [start, end) of one partition, in order, as batches, asked `window`
        offsets per FETCH. Raises TimeoutError when no progress was made for `timeout`
        s. A re-FETCH (from the first missing offset) goes out when nothing of the
        partition arrived for `retry` s; the time the caller holds a batch counts as
        neither (the stores keep answering meanwhile)."""
        if not proto.is_address(partition):
            raise ValueError(f"partition {partition!r}: a producer address (32 hex)")
        if window < 1:
            raise ValueError(f"window {window}: at least 1 offset per FETCH")
        if start >= end:
            return
        self.wait_for_stores(min_stores, timeout)
        nxt = start
        ahead: dict[int, bytes] = {}
        last_progress = last_arrival = time.monotonic()
        asked_until = start          # the current FETCH window ends here
        self._records.clear()
        while nxt < end:
            now = time.monotonic()
            if now - last_progress > timeout:
                raise TimeoutError(
                    f"read_range {topic}/{partition}: stuck at offset {nxt} of "
                    f"[{start}, {end}) for {timeout:g} s; no store or producer has it")
            if nxt >= asked_until or now - last_arrival > retry:
                size = min(end - nxt, window)
                # A store answers seq..seq+count inclusive, a producer count records.
                self.send(proto.Fetch(partition, self.address, topic, nxt,
                                      max(size - 1, 1)))
                self.stats["fetches"] += 1
                last_arrival, asked_until = now, nxt + size
            self.step(retry / 5)
            for rec in self._records:
                if (rec.subject == topic and rec.address == partition
                        and nxt <= rec.sequence < end):
                    ahead[rec.sequence] = rec.content
                    last_arrival = time.monotonic()
            self._records.clear()
            batch: list[ConsumerRecord] = []
            while nxt in ahead:
                batch.append(ConsumerRecord(topic, partition, nxt, ahead.pop(nxt)))
                nxt += 1
            if batch:
                yield batch
                last_progress = last_arrival = time.monotonic()   # the caller's time

    def read_range(self, topic: str, partition: str, start: int, end: int, **kwargs
                   ) -> Iterator[ConsumerRecord]:
        """Like `read_range_batches`, one record at a time."""
        for batch in self.read_range_batches(topic, partition, start, end, **kwargs):
            yield from batch

    def __enter__(self) -> "StoreClient":
        self.open()
        return self

    def __exit__(self, *exc) -> None:
        self.stop()


__all__ = ["MAX_WINDOW", "NoStoreError", "StoreClient"]
