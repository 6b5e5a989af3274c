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
    for first, values in client.read_range_arrays("orders", partition, 0, 1000):
        ...                               # pyarrow binary arrays, offsets first.. in order
```

How: the client beacons like any node; a store reader then subscribes to it (we see
``W``+reader address on our XPUB) and answers our ``L`` subscription with STORE-HELLO,
which proves our SUB reaches it too: only then is the store *ready* and requests are
sent. `heads` first waits until every live store is ready (`discovered`: a partial
answer would understate), then asks each store reader that subscribed to the heads
extension with BULK-GET-HEADS (its answer says its size: done as soon as it is
complete) and the others (C stores) with GET-HEADS (one DIRECT-HEAD per partition
whose subject starts with the topic), collecting those until none arrived for
`settle` seconds (GET-HEADS has no end-of-answer marker). `read_range` sends FETCH to the
partition address (the producer, if alive, and every store get it), buffers
DIRECT-RECORDs, yields them in order and re-FETCHes from the first missing offset when
nothing arrived for `retry` seconds (a store replaces the rest of our previous FETCH
with the new one, so re-FETCHes do not pile up work in the stores). A store answers
only if it holds the first requested offset; a range that no store (and no producer)
holds raises TimeoutError.

`read_range_arrays` is the fast path (garlicfarm's bulk read extension,
docs/protocol.md): it asks ONE ready store reader (chosen by the partition, so tasks
spread over the stores) with BULK-FETCH, and turns each BULK-RECORDS slice into a
pyarrow binary array with a numpy cumsum over its lengths and zero-copy buffers (no
Python object per record). A store that does not hold the next offset says so (an
empty last slice) and the next store is asked; a store that never answers within
`retry` (a C store: it does not subscribe to the extension, so it never even receives
the request) is remembered as such and the rest of the range is read by plain FETCH.
"""
from __future__ import annotations

import time
import zlib
from typing import TYPE_CHECKING, Iterator

import zmq

from connectors.dafka import proto
from connectors.dafka.config import DafkaConfig
from connectors.dafka.consumer import ConsumerRecord
from connectors.dafka.node import Node
from connectors.dafka.sockets import iter_messages

if TYPE_CHECKING:
    import pyarrow as pa

MAX_WINDOW = proto.FETCH_BLOCK    # offsets asked per FETCH (and buffered at most)
DRAIN_LIMIT = 10_000              # DIRECT-RECORDs handled per loop turn
BULK_WINDOW = 1 << 20             # offsets asked per BULK-FETCH
BULK_BYTES = 32 << 20             # payload bytes asked per BULK-FETCH (in flight at most)


class NoStoreError(TimeoutError):
    """No store reader became reachable through the towers in time."""


class StoreClient(Node):
    """Heads and offset ranges straight from the stores (see the module docstring)."""

    ROLE = "store-client"

    def __init__(self, config: DafkaConfig, *, address: str | None = None,
                 limits: proto.DafkaLimits = proto.DEFAULT_LIMITS) -> None:
        super().__init__(config, address=address, limits=limits)
        self.subscribed_readers: set[str] = set()   # their SUB reaches our XPUB
        self.hello_readers: set[str] = set()        # our SUB reaches their XPUB
        self._records: list[proto.DirectRecord] = []
        self._heads: list[proto.DirectHead] = []
        self._bulk: list[proto.BulkRecords] = []
        self.bulk_readers: set[str] = set()      # answered a BULK-FETCH: our stores
        self.plain_readers: set[str] = set()     # never did: C stores (or bulk=False)
        # peer address -> command ids it subscribed to with its own address as topic
        # (on our XPUB): who a peer is, and which extensions a store reader speaks.
        self.peer_subscriptions: dict[str, set[int]] = {}
        self._bulk_heads: list[proto.BulkHeads] = []
        self._heads_request = 0
        self.bulk_heads_readers: set[str] = set()   # answered a BULK-GET-HEADS
        self.plain_heads_readers: set[str] = set()  # asked it and stayed silent
        self._discovered = False        # the first complete discovery happened
        self._store_seen_at: dict[str, float] = {}  # store reader -> first sign of it
        self._heard_at: dict[str, float] = {}       # peer endpoint -> first beacon
        self._last_news = 0.0    # a new peer beaconed, identified itself or is a store

    @property
    def ready_stores(self) -> set[str]:
        return self.subscribed_readers & self.hello_readers

    def _setup(self) -> None:
        self.data = self._add_sub([proto.subscription_prefix(c, self.address) for c in (
            proto.Command.DIRECT_RECORD, proto.Command.DIRECT_HEAD,
            proto.Command.STORE_HELLO, proto.Command.BULK_RECORDS,
            proto.Command.BULK_HEADS)], self._drain_data)

    def _drain_subscriptions(self, now: float) -> None:
        for msg in self.subscriptions():
            if (type(msg) is not proto.Subscription or msg.command is None
                    or not proto.is_address(msg.topic)):
                continue
            if msg.subscribe:
                if msg.topic not in self.peer_subscriptions:
                    self._last_news = now
                self.peer_subscriptions.setdefault(msg.topic, set()).add(msg.command)
            else:
                commands = self.peer_subscriptions.get(msg.topic, set())
                commands.discard(msg.command)
                if not commands:
                    self.peer_subscriptions.pop(msg.topic, None)
            if msg.command == proto.Command.CONSUMER_HELLO:
                if msg.subscribe:
                    self.subscribed_readers.add(msg.topic)
                    self._store_sign(msg.topic, now)
                else:
                    self.subscribed_readers.discard(msg.topic)
                    self.hello_readers.discard(msg.topic)
                    self._store_seen_at.pop(msg.topic, None)

    def _drain_data(self, now: float) -> None:
        # A bounded drain per loop turn: draining 100000 records at once takes seconds,
        # during which we would not beacon and the stores would forget us.
        for msg in iter_messages(self.data, self.decoder, self.stats, DRAIN_LIMIT):
            kind = type(msg)
            if kind is proto.DirectRecord:
                self._records.append(msg)
            elif kind is proto.DirectHead:
                self._heads.append(msg)
            elif kind is proto.BulkRecords:
                self._bulk.append(msg)
            elif kind is proto.BulkHeads:
                self._bulk_heads.append(msg)
            elif kind is proto.StoreHello:
                self.hello_readers.add(msg.address)
                self._store_sign(msg.address, now)
            elif msg is not None:
                self.drop_unexpected()

    def _peer_connected(self, endpoint: str) -> None:
        now = time.monotonic()
        self._heard_at[endpoint] = self._last_news = now
        for gone in set(self._heard_at) - set(self.beacon.table.peers):
            del self._heard_at[gone]

    def _store_sign(self, reader: str, now: float) -> None:
        if reader not in self._store_seen_at:
            self._store_seen_at[reader] = self._last_news = now

    # ----------------------------------------------------------------- discovery
    #: Seconds without news (a peer heard, identified, or known as a store reader)
    #: after the towers echoed our beacon before the first discovery counts as
    #: complete (at most one beacon interval). The peers answer our beacon at once:
    #: measured on 127.0.0.1, the last answer comes <= 30 ms after the echo with both
    #: cores busy (a few ms otherwise).
    discovery_quiet = 0.1

    @property
    def identify_wait(self) -> float:
        """How long a peer that beaconed but did not identify itself (no subscription
        naming its address on our XPUB), or a store reader known by one half only (its
        STORE-HELLO, or its subscription to CONSUMER-HELLO), is waited for before it
        is left out (a node that died just after beaconing)."""
        return max(2 * self.config.beacon_interval, 0.5)

    def discovered(self) -> bool:
        """Whether every live store reader is ready, as far as the towers can tell.

        The first time: the towers echoed our beacon (so they relayed it to every live
        peer, and each of them beacons back at once, as a C node does for a new peer);
        every peer heard of identified itself (its SUB subscribed on our XPUB with its
        own address: ``W`` for a store reader, ``D``/``F``/... for other roles); and
        `discovery_quiet` s passed without news. Then, every time: each store reader
        with a sign of life (its STORE-HELLO or its ``W`` subscription) is ready, both
        halves. Anything stuck for `identify_wait` s is left out. The fixed wait this
        replaces (two beacon intervals: 0.2 s with LocalDafka, 2 s with 1 s beacons)
        relied on periodic beacons; this takes a few round trips and the quiet."""
        now = time.monotonic()
        if not self._discovered:
            if self.beacon is None or self.beacon.echoed_at is None:
                return False
            if now - max(self.beacon.echoed_at, self._last_news) < min(
                    self.discovery_quiet, self.config.beacon_interval):
                return False
            for endpoint, sender in list(self.beacon.table.senders.items()):
                if (sender not in self.peer_subscriptions and sender not in
                        self.hello_readers
                        and now - self._heard_at.get(endpoint, 0.0) < self.identify_wait):
                    return False
            self._discovered = True
        ready = self.ready_stores
        return all(reader in ready or now - since >= self.identify_wait
                   for reader, since in self._store_seen_at.items())

    # ----------------------------------------------------------------- public API
    def wait_for_stores(self, count: int = 1, timeout: float = 10.0, *,
                        every: bool = False) -> set[str]:
        """Run until `count` store readers are ready; their addresses. `every`: and
        until `discovered()`, i.e. every live store is ready, not just the first
        `count` (what `heads` needs: a store left out could hold more)."""
        def done() -> bool:
            return len(self.ready_stores) >= count and (not every or self.discovered())
        self.open()
        deadline = time.monotonic() + timeout
        while not done():
            left = deadline - time.monotonic()
            if left <= 0:
                raise NoStoreError(self._missing_stores(count, timeout))
            # `discovered` also turns true with time alone: short steps.
            self.step(min(left, 0.01) if every else left)
        return set(self.ready_stores)

    def _missing_stores(self, count: int, timeout: float) -> str:
        """Why `wait_for_stores` gave up: how many of the deployment's stores are ready,
        out of those that gave a sign of life (their subscription to us, or their
        STORE-HELLO), and what each of the others lacks. `count` is how many were asked
        for, not how many there are: a store that never answered our beacon cannot be
        counted, and then the message says that none answered."""
        ready, heard = self.ready_stores, self.subscribed_readers | self.hello_readers
        towers = ", ".join(self.config.tower_sub)
        if not heard:
            return (f"no Dafka store reachable via the towers {towers} after {timeout:g} s:"
                    f" none answered our beacon ({count} needed); is `garlicfarm dafka "
                    "store` running there, with the deployment's beacon interval and "
                    "timeout?")
        text = (f"{len(ready)} of the {len(heard)} Dafka store(s) that answered through the "
                f"towers {towers} reachable after {timeout:g} s")
        if len(ready) < count:
            text += f" ({count} needed)"
        else:
            silent = [sender for sender in (self.beacon.table.senders.values()
                                            if self.beacon else ())
                      if sender not in self.peer_subscriptions
                      and sender not in self.hello_readers]
            text += (f", but {len(silent)} peer(s) beaconed without saying what they are"
                     " (a store among them would be left out)" if silent else
                     ", but the discovery of every store did not settle")
        announced = ({sender: endpoint for endpoint, sender in
                      self.beacon.table.senders.items()} if self.beacon else {})
        for reader in sorted(heard - ready):
            if reader in self.subscribed_readers:
                text += (f"; store reader {reader} subscribed to us, but its publisher at "
                         f"{announced.get(reader, 'the endpoint it announced')} does not "
                         "answer: check the store's beacon/address (--beacon-address) and "
                         "node/bind (--bind)")
            else:
                text += (f"; store reader {reader} answered, but does not subscribe to "
                         f"our publisher at {self.endpoint}: can it reach this host?")
        return text

    def heads(self, topic: str = "", *, exact: bool = True, min_stores: int = 1,
              timeout: float = 10.0, settle: float = 0.25, fallback: float = 0.5
              ) -> dict[tuple[str, str], int]:
        """{(topic, partition): last stored offset} over every live store (the highest
        when stores differ). `exact=False` keeps every topic that starts with `topic`;
        "" lists every topic.

        First waits for every live store (`wait_for_stores(every=True)`). Store readers
        that subscribed to the heads extension get a BULK-GET-HEADS each and are done
        when their whole answer arrived (it says its size); the others (C stores), and
        any that did not finish within `fallback` s, are asked by GET-HEADS, whose
        DIRECT-HEADs are collected until none arrived for `settle` s (GET-HEADS has no
        end). A store silent to its first BULK-GET-HEADS is remembered as plain."""
        stores = self.wait_for_stores(min_stores, timeout, every=True)
        found: dict[tuple[str, str], int] = {}
        ask = {s for s in stores - self.plain_heads_readers
               if proto.Command.BULK_GET_HEADS in self.peer_subscriptions.get(s, ())}
        plain = stores - ask
        if ask:
            missing = self._bulk_heads_from(ask, topic, fallback, found)
            self.plain_heads_readers |= missing - self.bulk_heads_readers
            plain |= missing
        if plain:
            self.stats["heads_fallbacks"] += 1
            self._plain_heads(topic, settle, found)
        if exact and topic:
            found = {k: v for k, v in found.items() if k[0] == topic}
        return found

    def _bulk_heads_from(self, stores: set[str], prefix: str, fallback: float,
                         found: dict[tuple[str, str], int]) -> set[str]:
        """Ask each of `stores` by BULK-GET-HEADS and merge the answers into `found`;
        the stores whose answer was not complete within `fallback` s."""
        self._heads_request = request = (self._heads_request + 1) % (proto.MAX_COUNT + 1)
        self._bulk_heads.clear()
        for store in stores:
            self.send(proto.BulkGetHeads(store, self.address, request, prefix))
        self.stats["bulk_get_heads"] += len(stores)
        pending = set(stores)
        slices: dict[str, dict[int, int]] = {}     # store -> first entry -> entries
        deadline = time.monotonic() + fallback
        while pending:
            left = deadline - time.monotonic()
            if left <= 0:
                break
            self.step(left)
            for msg in self._bulk_heads:
                if msg.request != request or msg.address not in pending:
                    continue                    # an answer to an earlier request
                self.bulk_heads_readers.add(msg.address)
                got = slices.setdefault(msg.address, {})
                if msg.first in got:
                    continue
                got[msg.first] = len(msg.heads)
                for subject, partition, head in msg.heads:
                    key = (subject, partition)
                    found[key] = max(found.get(key, -1), head)
                if sum(got.values()) >= msg.total:
                    pending.discard(msg.address)
            self._bulk_heads.clear()
        return pending

    def _plain_heads(self, topic: str, settle: float,
                     found: dict[tuple[str, str], int]) -> None:
        """GET-HEADS to every store, DIRECT-HEADs merged into `found` until none came
        for `settle` s (the protocol has no end-of-answer marker)."""
        self._heads.clear()
        self.send(proto.GetHeads(topic, self.address))
        quiet_since = time.monotonic()
        seen = 0
        while time.monotonic() - quiet_since < settle:
            self.step(settle / 5)
            if len(self._heads) != seen:
                seen = len(self._heads)
                quiet_since = time.monotonic()
        for head in self._heads:
            key = (head.subject, head.address)
            found[key] = max(found.get(key, -1), head.sequence)
        self._heads.clear()

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

    def read_range_arrays(self, topic: str, partition: str, start: int, end: int, *,
                          min_stores: int = 1, timeout: float = 30.0, retry: float = 0.5,
                          window: int = BULK_WINDOW, max_bytes: int = BULK_BYTES
                          ) -> Iterator[tuple[int, "pa.BinaryArray"]]:
        """Offsets [start, end) of one partition as (first offset, pyarrow binary array)
        pieces, contiguous and in order; by the bulk extension where a ready store
        supports it, else by plain FETCH (see the module docstring). Timeouts and
        re-requests as `read_range_batches`: TimeoutError after `timeout` s without
        progress, a re-request from the first missing offset after `retry` s of
        silence; the caller's time holding a piece counts as neither."""
        if not proto.is_address(partition):
            raise ValueError(f"partition {partition!r}: a producer address (32 hex)")
        if window < 1 or max_bytes < 1:
            raise ValueError(f"window {window}, max_bytes {max_bytes}: at least 1")
        if start >= end:
            return
        self.wait_for_stores(min_stores, timeout)
        nxt = start
        lacking: set[str] = set()        # stores that do not hold `nxt` (nor later)
        while nxt < end:
            store = self._bulk_store(partition, lacking)
            if store is None:
                break
            for first, values in self._bulk_from(store, topic, partition, nxt, end,
                                                 timeout, retry, window, max_bytes):
                yield first, values
                nxt = first + len(values)
            if nxt < end:
                lacking.add(store)
        if nxt < end:
            import pyarrow as pa
            self.stats["bulk_fallbacks"] += 1
            for batch in self.read_range_batches(topic, partition, nxt, end,
                                                 min_stores=min_stores, timeout=timeout,
                                                 retry=retry):
                yield batch[0].offset, pa.array([r.value for r in batch], pa.binary())

    def _bulk_store(self, partition: str, exclude: set[str]) -> str | None:
        """The store reader to ask for `partition` by BULK-FETCH: among the ready ones
        not known to lack the extension, one picked by the partition's hash, so the
        tasks of a query spread over the stores (each answers only its requests)."""
        candidates = sorted(self.ready_stores - self.plain_readers - exclude)
        if not candidates:
            return None
        return candidates[zlib.crc32(partition.encode()) % len(candidates)]

    def _bulk_from(self, store: str, topic: str, partition: str, nxt: int, end: int,
                   timeout: float, retry: float, window: int, max_bytes: int
                   ) -> Iterator[tuple[int, "pa.BinaryArray"]]:
        """Read from `store` by BULK-FETCH from `nxt` until `end`, or until the store
        shows it cannot serve (an empty answer, silence after a re-request, or silence
        at all when it never answered a BULK-FETCH: then it joins `plain_readers`)."""
        import pyarrow as pa
        self._bulk.clear()
        ahead: dict[int, proto.BulkRecords] = {}
        silent_rounds = 0
        last_progress = time.monotonic()
        last_arrival = -float("inf")           # forces the first request
        while nxt < end:
            now = time.monotonic()
            if now - last_progress > timeout:
                raise TimeoutError(
                    f"read_range {topic}/{partition}: stuck at offset {nxt} of [.., {end})"
                    f" for {timeout:g} s; store {store} stopped answering")
            if now - last_arrival > retry:
                if silent_rounds and store not in self.bulk_readers:
                    self.plain_readers.add(store)       # a C store: it never will
                    return
                if silent_rounds >= 2 or store not in self.ready_stores:
                    return                              # gone or stuck: another store
                silent_rounds += 1
                self._bulk_request(store, topic, partition, nxt, end, window, max_bytes)
                last_arrival = now
            self.step(retry / 5)
            pieces: list[tuple[int, pa.BinaryArray]] = []
            for msg in self._bulk:
                if (msg.address != store or msg.partition != partition
                        or msg.subject != topic):
                    continue
                self.bulk_readers.add(store)
                last_arrival = time.monotonic()
                silent_rounds = 0
                if msg.count == 0:
                    if msg.sequence <= nxt:
                        self._bulk.clear()
                        yield from pieces
                        return                      # the store lacks nxt
                    continue
                ahead[msg.sequence] = msg
            self._bulk.clear()
            while ahead:
                msg = ahead.pop(nxt, None) or self._covering(ahead, nxt)
                if msg is None:
                    break
                values = _bulk_array(pa, msg)[nxt - msg.sequence:end - msg.sequence]
                pieces.append((nxt, values))
                nxt += len(values)
                if msg.last and nxt < end:          # the answer ended: ask for more
                    self._bulk_request(store, topic, partition, nxt, end, window,
                                       max_bytes)
                    last_arrival = time.monotonic()
            for piece in pieces:
                yield piece
            if pieces:
                last_progress = last_arrival = time.monotonic()   # the caller's time

    @staticmethod
    def _covering(ahead: dict[int, proto.BulkRecords], nxt: int
                  ) -> proto.BulkRecords | None:
        """A buffered slice holding `nxt` but starting before it (after a re-request
        overlapped an earlier answer); stale slices are dropped."""
        for seq in sorted(ahead):
            msg = ahead[seq]
            if seq + msg.count <= nxt:
                del ahead[seq]
            elif seq < nxt:
                return ahead.pop(seq)
            else:
                break
        return None

    def _bulk_request(self, store: str, topic: str, partition: str, nxt: int, end: int,
                      window: int, max_bytes: int) -> None:
        self.send(proto.BulkFetch(store, self.address, partition, topic, nxt,
                                  min(end - nxt, window, proto.MAX_COUNT),
                                  min(max_bytes, proto.MAX_COUNT)))
        self.stats["bulk_fetches"] += 1

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


def _bulk_array(pa, msg: proto.BulkRecords) -> "pa.BinaryArray":
    """The records of one BULK-RECORDS as a binary array: offsets from a numpy cumsum
    of the lengths, the data buffer a zero-copy slice of frame 1."""
    data = pa.py_buffer(msg.content).slice(4 * msg.count)
    return pa.Array.from_buffers(pa.binary(), msg.count,
                                 [None, pa.py_buffer(proto.bulk_offsets(msg)), data])


__all__ = ["BULK_BYTES", "BULK_WINDOW", "MAX_WINDOW", "NoStoreError", "StoreClient"]
