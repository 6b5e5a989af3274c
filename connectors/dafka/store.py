"""The Dafka store: persists every partition it hears of and serves it back.

As in the C code a store is two nodes with distinct addresses and beacons, sharing one
`PartitionStore` (the storage engine, one log per partition):

* `StoreWriter` (publishes like the C PUB): subscribes ``D``+own address (a separate SUB drained first, so
  FETCH answers win), ``M`` and ``H`` (all topics). HEAD or RECORD ahead of what it has
  -> FETCH (from 0 for an unknown partition); the next record -> stored. Each drain of
  incoming records is one group commit (one fsync per touched partition), then one
  cumulative ACK per partition. Beyond the C store, a duplicate also re-ACKs the
  stored head, and a HEAD the store is not behind re-ACKs it: a producer that
  republishes (the exactly-once sink) or lost an ACK (PUB/SUB drops) is released
  within one HEAD interval. Extra cumulative ACKs are harmless to C producers.
  Its publisher binds node/bind (``--bind``).
* `StoreReader` (XPUB, verbose; binds PORT+1 when node/bind has a fixed PORT, so both
  halves can bind): subscribes ``F``, ``G`` (all) and ``W``+own address.
  FETCH(seq, count) -> DIRECT-RECORDs seq..seq+count inclusive, only if seq is
  stored; GET-HEADS(T) and CONSUMER-HELLO(subjects) -> one DIRECT-HEAD per stored
  partition whose subject starts with T / a subject; a consumer subscribing to
  ``L``+its address -> STORE-HELLO.

  A FETCH answer (up to 100000 records, seconds of Python) is queued and sent
  `READ_CHUNK` records per loop turn, so the reader keeps beaconing and answering in
  between: a reader silent for beacon/timeout is forgotten by its peers, whose SUBs
  then disconnect and drop everything queued from it (a StoreClient stalled at a
  window boundary that way). A new FETCH from the same requester for the same
  partition replaces the queued rest of its previous one (a requester re-FETCHes
  from its first missing offset, so the rest is stale): re-FETCHes of a slow reader
  cannot pile up whole windows of work that outlive the reader.

  Bulk read extension (garlicfarm only, docs/protocol.md): the reader also subscribes
  ``X``+own address. BULK-FETCH(partition, seq, count, max_bytes) -> BULK-RECORDS
  slices of up to `bulk_slice_records` records / `bulk_slice_bytes` bytes, one per loop
  turn like FETCH answers (same queue, same replacement rule: a new FETCH or BULK-FETCH
  of the requester for the partition replaces the rest of the previous one), the last
  slice flagged; a store without `seq` answers at once with an empty last slice, so a
  client moves on without waiting. `bulk=False` leaves the extensions out (a reader
  then behaves like the C one, for tests of the client's fallback).

  Heads extension (garlicfarm only, docs/protocol.md): the reader also subscribes
  ``Q``+own address. BULK-GET-HEADS(request, prefix) -> the heads of every stored
  partition whose subject starts with the prefix, in BULK-HEADS messages of at most
  `heads_slice` entries, each saying how many entries the whole answer has, so the
  client knows when it has them all (no settle wait as after GET-HEADS).

```python
with Store(config, "/var/lib/dafka") as store:   # config.store_db is the default dir
    ...
```
"""
from __future__ import annotations

import os
from array import array
from dataclasses import dataclass

import zmq

from connectors.dafka import proto
from connectors.dafka.config import DafkaConfig
from connectors.dafka.node import FetchFilter, Node
from connectors.dafka.partitions import Key, PartitionStore
from connectors.dafka.sockets import Run, Runs, drain_runs, raw_send

_SNDMORE = zmq.SNDMORE
READ_CHUNK = 1000          # records read from the log and sent per loop turn (FETCH answers)
BULK_SLICE_RECORDS = 16384     # records per BULK-RECORDS message (one per loop turn)
BULK_SLICE_BYTES = 1 << 20     # payload bytes per BULK-RECORDS message (>= 1 record)
BULK_MAX_BYTES = 64 << 20      # payload bytes one BULK-FETCH may ask for
HEADS_SLICE = 4096             # entries per BULK-HEADS message


@dataclass
class FetchAnswer:
    """The unsent rest of one FETCH answer: records [next, stop) of `key`."""
    key: Key
    prefix: bytes      # frame 0 of the DIRECT-RECORDs up to the sequence
    next: int
    stop: int


@dataclass
class BulkAnswer:
    """The unsent rest of one BULK-FETCH answer: records [next, stop) of `key`, at most
    `budget` more payload bytes."""
    key: Key
    requester: str
    partition: str
    subject: str
    next: int
    stop: int
    budget: int


class StoreWriter(Node):
    """The writing half of a store (see the module docstring)."""

    ROLE = "store-writer"

    def __init__(self, config: DafkaConfig, partitions: PartitionStore, *,
                 address: str | None = None, limits: proto.DafkaLimits = proto.DEFAULT_LIMITS
                 ) -> None:
        super().__init__(config, address=address, limits=limits)
        self.partitions = partitions
        self.fetch_filter = FetchFilter()

    def _setup(self) -> None:
        self.direct = self._add_sub([proto.subscription_prefix(
            proto.Command.DIRECT_RECORD, self.address)], self._drain)
        self.records = self._add_sub([proto.subscription_prefix(proto.Command.RECORD),
                                      proto.subscription_prefix(proto.Command.HEAD)],
                                     self._drain)

    def _drain(self, now: float) -> None:
        acks: dict[Key, int] = {}
        fetches: dict[Key, int] = {}
        runs = Runs()
        stored = 0

        def stage(run: Run) -> None:
            nonlocal stored
            if run.contents:
                self.partitions.stage_many(run.key, run.first, run.contents)
                acks[run.key] = run.next - 1
                fetches.pop(run.key, None)
                stored += len(run.contents)

        def head_of(key: Key) -> int | None:
            """The partition's pending head, once its open run (if any) is staged."""
            run = runs.take(key)
            if run is not None:
                stage(run)
            return self.partitions.pending_head(key)

        def handle(msg: proto.Message, frame0: bytes) -> None:
            kind = type(msg)
            if kind is proto.Record or kind is proto.DirectRecord:
                key = (msg.subject, msg.address)
                head = head_of(key)
                seq = msg.sequence
                if head is None and seq != 0:
                    fetches[key] = 0
                elif head is not None and seq <= head:
                    self.stats["duplicates"] += 1
                    acks.setdefault(key, head)
                elif head is not None and seq != head + 1:
                    fetches[key] = head + 1
                else:
                    run = runs.open(frame0, key, seq)
                    run.contents.append(msg.content)
                    run.next += 1
            elif kind is proto.Head:
                key = (msg.subject, msg.address)
                head = head_of(key)
                if head is None:
                    fetches[key] = 0
                elif head < msg.sequence:
                    fetches[key] = head + 1
                else:
                    acks.setdefault(key, msg.sequence)   # re-ACK: see the docstring
            else:
                self.drop_unexpected()

        # DIRECT-RECORDs (FETCH answers) first, as the C writer gives them priority.
        for sock in (self.direct, self.records):
            drain_runs(sock, self.decoder, self.stats, runs, handle)
        for run in runs.by_key.values():
            stage(run)
        if stored:
            self.partitions.commit()
            self.stats["stored"] += stored
            self.stats["commits"] += 1
        for (subject, address), seq in acks.items():
            self.pub.send(proto.encode(proto.Ack(address, subject, seq))[0])
        for (subject, address), seq in fetches.items():
            if self.fetch_filter.allow(subject, address, seq, now):
                self.send(proto.Fetch(address, self.address, subject, seq,
                                      proto.fetch_count(seq)))
                self.stats["fetches"] += 1


class StoreReader(Node):
    """The serving half of a store (see the module docstring)."""

    ROLE = "store-reader"

    def __init__(self, config: DafkaConfig, partitions: PartitionStore, writer_address: str,
                 *, address: str | None = None, limits: proto.DafkaLimits = proto.DEFAULT_LIMITS,
                 read_chunk: int = READ_CHUNK, bulk: bool = True,
                 bulk_slice_records: int = BULK_SLICE_RECORDS,
                 bulk_slice_bytes: int = BULK_SLICE_BYTES,
                 heads_slice: int = HEADS_SLICE) -> None:
        super().__init__(config, address=address, limits=limits)
        if not 1 <= heads_slice <= limits.max_bulk_heads:
            raise ValueError(f"heads_slice {heads_slice}: 1..max_bulk_heads "
                             f"({limits.max_bulk_heads})")
        self.heads_slice = heads_slice
        if read_chunk < 1 or bulk_slice_records < 1:
            raise ValueError(f"read_chunk {read_chunk}, bulk_slice_records "
                             f"{bulk_slice_records}: at least 1 record per loop turn")
        if not 0 <= bulk_slice_bytes <= limits.max_bulk_bytes // 2:
            raise ValueError(f"bulk_slice_bytes {bulk_slice_bytes}: 0..half of "
                             f"max_bulk_bytes ({limits.max_bulk_bytes})")
        self.partitions = partitions
        self.writer_address = writer_address
        self.read_chunk = read_chunk
        self.bulk = bulk
        self.bulk_slice_records = bulk_slice_records
        self.bulk_slice_bytes = bulk_slice_bytes
        # (requester, subject, partition) -> what is left to send, oldest first
        self.answers: dict[tuple[str, str, str], FetchAnswer | BulkAnswer] = {}

    def _bind_endpoint(self) -> str:
        return self.config.reader_bind_endpoint

    def _setup(self) -> None:
        prefixes = [proto.subscription_prefix(proto.Command.FETCH),
                    proto.subscription_prefix(proto.Command.GET_HEADS)]
        if self.bulk:
            prefixes += [proto.subscription_prefix(command, self.address) for command in
                         (proto.Command.BULK_FETCH, proto.Command.BULK_GET_HEADS)]
        # CONSUMER-HELLO last: a consumer that sees this subscription (and then probes
        # for the bulk extension) has already taken the ones before it.
        prefixes.append(proto.subscription_prefix(proto.Command.CONSUMER_HELLO,
                                                  self.address))
        self.requests = self._add_sub(prefixes, self._drain_requests)

    def _drain_subscriptions(self, now: float) -> None:
        for msg in self.subscriptions():
            if (type(msg) is proto.Subscription and msg.subscribe
                    and msg.command == proto.Command.STORE_HELLO
                    and proto.is_address(msg.topic)):
                self.send(proto.StoreHello(msg.topic, self.address))
                self.stats["store_hellos"] += 1

    def _drain_requests(self, now: float) -> None:
        for msg in self.messages(self.requests):
            if getattr(msg, "address", None) == self.writer_address:
                continue   # our own writer's FETCH: it needs a producer, not us
            kind = type(msg)
            if kind is proto.Fetch:
                self._answer_fetch(msg)
            elif kind is proto.BulkFetch and self.bulk and msg.topic == self.address:
                self._answer_bulk_fetch(msg)
            elif kind is proto.GetHeads:
                self._send_heads(msg.address, [msg.topic])
            elif kind is proto.BulkGetHeads and self.bulk and msg.topic == self.address:
                self._send_bulk_heads(msg)
            elif kind is proto.ConsumerHello and msg.topic == self.address:
                self._send_heads(msg.address, msg.subjects)
            else:
                self.drop_unexpected()

    def _answer_fetch(self, fetch: proto.Fetch) -> None:
        key = (fetch.subject, fetch.topic)
        head = self.partitions.head(key)
        if head is None or fetch.sequence > head:
            return   # only answered when the first requested record is stored
        self.stats["fetches"] += 1
        prefix = proto.frame0_prefix(proto.Command.DIRECT_RECORD, fetch.address,
                                     fetch.topic, fetch.subject)
        stop = min(fetch.sequence + fetch.count, head) + 1      # inclusive, as the C store
        if self.answers.pop((fetch.address, *key), None) is not None:
            self.stats["fetches_superseded"] += 1
        self.answers[(fetch.address, *key)] = FetchAnswer(key, prefix, fetch.sequence, stop)

    def _answer_bulk_fetch(self, fetch: proto.BulkFetch) -> None:
        key = (fetch.subject, fetch.partition)
        queued = (fetch.address, *key)
        if self.answers.pop(queued, None) is not None:
            self.stats["fetches_superseded"] += 1
        head = self.partitions.head(key)
        self.stats["bulk_fetches"] += 1
        if head is None or fetch.sequence > head or fetch.count == 0:
            # Say so at once: the client tries another store instead of waiting.
            self._send_bulk(BulkAnswer(key, fetch.address, fetch.partition, fetch.subject,
                                       fetch.sequence, fetch.sequence, 0), array("I"), b"")
            return
        stop = min(fetch.sequence + fetch.count, head + 1)        # exclusive
        self.answers[queued] = BulkAnswer(key, fetch.address, fetch.partition,
                                          fetch.subject, fetch.sequence, stop,
                                          min(fetch.max_bytes, BULK_MAX_BYTES))

    def _work_bulk(self, queued: tuple[str, str, str], answer: BulkAnswer) -> None:
        """One slice of a bulk answer: read packed (checked, no object per record), one
        message, the last one flagged."""
        lengths, data = self.partitions.read_joined(
            answer.key, answer.next, min(answer.next + self.bulk_slice_records, answer.stop),
            max_bytes=max(0, min(self.bulk_slice_bytes, answer.budget)))
        answer.budget -= len(data)
        self._send_bulk(answer, lengths, data)
        answer.next += len(lengths)
        if not lengths or answer.next >= answer.stop or answer.budget <= 0:
            del self.answers[queued]
        elif len(self.answers) > 1:
            self.answers[queued] = self.answers.pop(queued)           # to the back

    def _send_bulk(self, answer: BulkAnswer, lengths: array, data: bytes) -> None:
        count = len(lengths)
        last = count == 0 or answer.next + count >= answer.stop or answer.budget <= 0
        self.pub.send_multipart([
            proto.bulk_records_frame0(answer.requester, self.address, answer.partition,
                                      answer.subject, answer.next, count, last),
            proto.pack_bulk(lengths, data)], copy=False)
        self.stats["bulk_records"] += count
        self.stats["bulk_messages"] += 1

    def _has_work(self) -> bool:
        return bool(self.answers)

    def _work(self, now: float) -> None:
        """Send the next chunk of the oldest queued answer (round robin over answers)."""
        requester, answer = next(iter(self.answers.items()))
        if type(answer) is BulkAnswer:
            self._work_bulk(requester, answer)
            return
        chunk = self.partitions.read(answer.key, answer.next,
                                     min(answer.next + self.read_chunk, answer.stop))
        send = raw_send(self.pub)
        sequences = range(answer.next, answer.next + len(chunk))
        heads = map(answer.prefix.__add__, map(proto.pack_sequence, sequences))
        for head, content in zip(heads, chunk):
            send(head, _SNDMORE)
            send(content)
        self.stats["direct_records"] += len(chunk)
        answer.next += len(chunk)
        if not chunk or answer.next >= answer.stop:
            del self.answers[requester]          # only now: `answers` empty means idle
        elif len(self.answers) > 1:
            self.answers[requester] = self.answers.pop(requester)    # to the back

    def _send_heads(self, consumer: str, subjects: list[str]) -> None:
        sent = set()
        for prefix in subjects:
            for subject, address, head in self.partitions.heads(prefix):
                if (subject, address) not in sent:
                    sent.add((subject, address))
                    self.send(proto.DirectHead(consumer, address, subject, head))
        self.stats["direct_heads"] += len(sent)


    def _send_bulk_heads(self, request: proto.BulkGetHeads) -> None:
        """Every matching head, in slices that each state the whole answer's size (an
        empty answer is one message of total 0): the requester knows when it is done.
        Heads are in memory, so the slices all go now."""
        heads = self.partitions.heads(request.prefix)
        total = len(heads)
        first = 0
        while True:
            part = heads[first:first + self.heads_slice]
            self.pub.send_multipart([
                proto.bulk_heads_frame0(request.address, self.address, request.request,
                                        first, len(part), total),
                proto.pack_heads(part)])
            self.stats["bulk_heads_messages"] += 1
            first += len(part)
            if first >= total:
                break
        self.stats["bulk_heads"] += total


class Store:
    """A writer and a reader node over one data directory."""

    def __init__(self, config: DafkaConfig, data_dir: str | os.PathLike | None = None, *,
                 writer_address: str | None = None, reader_address: str | None = None,
                 limits: proto.DafkaLimits = proto.DEFAULT_LIMITS, bulk: bool = True,
                 bulk_slice_records: int = BULK_SLICE_RECORDS,
                 heads_slice: int = HEADS_SLICE) -> None:
        self.data_dir = os.fspath(data_dir or config.store_db)
        self.partitions = PartitionStore(self.data_dir, fsync=config.store_fsync)
        self.writer = StoreWriter(config, self.partitions, address=writer_address,
                                  limits=limits)
        self.reader = StoreReader(config, self.partitions, self.writer.address,
                                  address=reader_address, limits=limits, bulk=bulk,
                                  bulk_slice_records=bulk_slice_records,
                                  heads_slice=heads_slice)

    def start(self) -> "Store":
        try:
            self.writer.start()
            self.reader.start()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        self.writer.stop()
        self.reader.stop()
        self.partitions.close()

    def __enter__(self) -> "Store":
        return self.start()

    def __exit__(self, *exc) -> None:
        self.stop()

    @property
    def stats(self) -> dict[str, int]:
        merged: dict[str, int] = {}
        for node in (self.writer, self.reader):
            for name, value in node.stats.items():
                merged[f"{node.ROLE}.{name}"] = value
        return merged


__all__ = ["BULK_MAX_BYTES", "BULK_SLICE_BYTES", "BULK_SLICE_RECORDS", "BulkAnswer",
           "FetchAnswer", "HEADS_SLICE", "READ_CHUNK", "Store", "StoreReader", "StoreWriter"]
