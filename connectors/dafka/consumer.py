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

Catching up from our stores (garlicfarm only, docs/protocol.md "Bulk read extension"):
before its CONSUMER-HELLO to a store reader the consumer sends an empty BULK-FETCH, which
our stores answer at once and C stores never; once a reader answered, a FETCH becomes a
BULK-FETCH of `BULK_WINDOW` records to one such reader (by the partition's hash), and a
window that came back full is followed by the next one at once, so a consumer reads a
partition to its end without waiting for the producer's HEAD (the C consumer stalls at
the end of a 100000-record FETCH window when the producer is gone). An empty answer
(that store lacks the records) falls back to plain FETCH. `bulk=False`: plain FETCH only.
Plain FETCH windows chain too, up to the highest HEAD heard, and an answer (plain or
bulk) that goes silent is asked again with a doubling backoff.

`OffsetTracker` is the sans-I/O core; `Consumer` the node around it.
"""
from __future__ import annotations

import threading
import time
import zlib
from collections import deque
from dataclasses import dataclass, field
from itertools import repeat
from typing import Callable, Iterable, Iterator, NamedTuple

import zmq

from connectors.dafka import proto
from connectors.dafka.config import DafkaConfig
from connectors.dafka.node import FetchFilter, Node
from connectors.dafka.sockets import Run, Runs, drain_runs


BULK_WINDOW = 65536          # records one BULK-FETCH asks for
BULK_BYTES = 64 << 20        # payload bytes one BULK-FETCH asks for (the store's cap)
BULK_SILENCE = 2.0           # seconds without a slice before a gap is FETCHed anew
BULK_SILENCE_MAX = 16.0      # the silence allowed doubles per unanswered ask, up to this


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
    head: int = -1                                   # the highest HEAD heard


@dataclass(slots=True)
class PlainAsk:
    """The plain FETCH window a partition waits on (to the end of its 100000-block)."""
    end: int                     # the window's last sequence (inclusive)
    seen: int                    # the delivered position last seen while it came
    at: float                    # when that position last moved (the silence timer's start)
    SILENCE_STAT = "fetch_silences"

    def settled(self, cursor: "_Cursor | None") -> bool:
        """All that was heard of is here: a silent FETCH is not asked again."""
        return cursor is not None and cursor.last >= cursor.head

    def hand_over(self, again: "BulkAsk | None") -> None:
        """A FETCH's answer has no last slice to tell apart: nothing to hand over."""


@dataclass(slots=True)
class BulkAsk:
    """The BULK-FETCH a partition waits on. A silent answer may only be slow: the
    store replaces it when our new ask arrives, but slices it sent before that, its last
    among them, still reach us, and that last must not end the new ask."""
    reader: str
    end: int                     # the window's end: an answer reaching it asks the next
    at: float                    # when its last slice came (the silence timer's start)
    superseded: int = 0          # earlier answers whose last slice may still come
    superseded_end: int = 0      # ... ending at most here
    SILENCE_STAT = "bulk_silences"

    def settled(self, cursor: "_Cursor | None") -> bool:
        """Never: the store may hold more than any HEAD we heard (we ask past it)."""
        return False

    def hand_over(self, again: "BulkAsk | None") -> None:
        """The ask that replaces this one waits for this one's last slice too."""
        if again is not None:
            again.supersede(self)

    def supersede(self, earlier: "BulkAsk") -> None:
        self.superseded = earlier.superseded + 1
        self.superseded_end = max(earlier.end, earlier.superseded_end)

    def carry_over(self, later: "BulkAsk | None") -> None:
        """This ask ended and `later` asks the next window: a superseded answer's last
        slice may still come (a starved store), and must not end that one either."""
        if later is not None and self.superseded:
            later.superseded, later.superseded_end = self.superseded, self.superseded_end

    def ends_superseded(self, stop: int) -> bool:
        """Whether a last slice ending at `stop` is a superseded answer's end (taken)."""
        if self.superseded and stop <= self.superseded_end:
            self.superseded -= 1
            return True
        return False


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

    def on_records(self, subject: str, address: str, first: int, contents: list[bytes],
                   deliver: list[ConsumerRecord]) -> int | None:
        """`on_record` for consecutive records from `first` (a run of one drain, a bulk
        slice): in order they are delivered at once, with no step per record."""
        if not contents:
            return None
        cursor = self.cursors.get((subject, address))
        if cursor is None:
            cursor = self._cursor((subject, address), first)
        expected = cursor.last + 1
        if first > expected:
            for sequence, content in enumerate(contents, first):
                self.on_record(subject, address, sequence, content, deliver)
            return expected
        if first < expected:
            skip = min(expected - first, len(contents))
            self.duplicates += skip
            contents, first = contents[skip:], expected
            if not contents:
                return None
        count = len(contents)
        deliver.extend(map(ConsumerRecord, repeat(subject, count), repeat(address, count),
                           range(first, first + count), contents))
        cursor.last = first + count - 1
        ahead = cursor.ahead
        if ahead:
            for sequence in [s for s in ahead if s <= cursor.last]:
                del ahead[sequence]
            while cursor.last + 1 in ahead:
                cursor.last += 1
                deliver.append(ConsumerRecord(subject, address, cursor.last,
                                              ahead.pop(cursor.last)))
        return None

    def on_head(self, subject: str, address: str, sequence: int) -> int | None:
        key = (subject, address)
        known = key in self.cursors
        cursor = self._cursor(key, sequence)
        cursor.head = max(cursor.head, sequence)
        if not known or sequence > cursor.last:
            return cursor.last + 1
        return None

    def positions(self) -> dict[tuple[str, str], int]:
        """(topic, partition) -> next offset to deliver."""
        return {key: cursor.last + 1 for key, cursor in self.cursors.items()}


class Consumer(Node):
    """A Dafka consumer node (see the module docstring)."""

    ROLE = "consumer"

    def __init__(self, config: DafkaConfig, topics: Iterable[str] = (), *,
                 on_record: Callable[[ConsumerRecord], None] | None = None,
                 address: str | None = None, max_pending: int = 200_000,
                 bulk: bool = True, limits: proto.DafkaLimits = proto.DEFAULT_LIMITS) -> None:
        """`bulk`: catch up from our stores by the bulk read extension (see the module
        docstring); False: plain FETCH only, as the C consumer."""
        super().__init__(config, address=address, limits=limits)
        self.earliest = self.config.offset_reset == "earliest"
        self.tracker = OffsetTracker(self.earliest)
        self.fetch_filter = FetchFilter()
        self.topics: list[str] = []
        self._initial_topics = list(topics)
        self.on_record = on_record
        self.max_pending = max_pending
        self.store_readers: set[str] = set()
        self.bulk = bulk
        self.bulk_readers: set[str] = set()      # answered a BULK-FETCH: our stores
        self._bulk_asked: dict[tuple[str, str], BulkAsk] = {}   # (subject, partition) ->
        # (subject, partition) -> the plain FETCH window asked last
        self._plain_to: dict[tuple[str, str], PlainAsk] = {}
        # (subject, partition) -> asks in a row that went silent (the backoff's exponent)
        self._bulk_silent: dict[tuple[str, str], int] = {}
        self._ready: deque[ConsumerRecord] = deque()
        self._ready_cond = threading.Condition()
        self._paused = False

    def _setup(self) -> None:
        commands = [proto.Command.DIRECT_RECORD, proto.Command.DIRECT_HEAD,
                    proto.Command.STORE_HELLO]
        if self.bulk:
            commands.append(proto.Command.BULK_RECORDS)
        self.add_timer(BULK_SILENCE / 2, self._ask_again_after_silence)
        self.data = self._add_sub([proto.subscription_prefix(c, self.address)
                                   for c in commands], self._drain_data)
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
        """CONSUMER-HELLO, after a bulk probe: an empty BULK-FETCH that our store
        answers at once (a C store never does), before the heads it will send, so a
        catch-up FETCH for those heads already knows to go by bulk."""
        if self.bulk:
            self.send(proto.BulkFetch(reader, self.address, self.address, "", 0, 0, 0))
        self.send(proto.ConsumerHello(reader, self.address,
                                      list(self.topics) if self.earliest else []))

    def _drain_subscriptions(self, now: float) -> None:
        for msg in self.subscriptions():
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
                    self.bulk_readers.discard(msg.topic)

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
            tracker.on_records(*run.key, run.first, run.contents, delivered)

        def settle(key: tuple[str, str]) -> None:
            """Deliver the partition's open run (if any) before its next message."""
            run = runs.take(key)
            if run is not None:
                deliver(run)

        def handle(msg: proto.Message, frame0: bytes) -> None:
            kind = type(msg)
            if kind is proto.Record or kind is proto.DirectRecord:
                if msg.subject not in topics or (kind is proto.Record
                                                 and msg.topic != msg.subject):
                    self.stats["filtered"] += 1
                    return
                key = (msg.subject, msg.address)
                settle(key)
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
                settle((msg.subject, msg.address))
                fetch = tracker.on_head(msg.subject, msg.address, msg.sequence)
                if fetch is not None:
                    fetches[(msg.subject, msg.address)] = fetch
            elif kind is proto.BulkRecords and self.bulk and msg.topic == self.address:
                self.bulk_readers.add(msg.address)
                if msg.subject not in topics:
                    return                                  # our probe's answer
                settle((msg.subject, msg.partition))
                self._on_bulk(msg, delivered, fetches, now)
            elif kind is proto.StoreHello:
                self.store_readers.add(msg.address)
                self._hello(msg.address)
            else:
                self.drop_unexpected()

        drain_runs(self.data, self.decoder, self.stats, runs, handle)
        for run in runs.by_key.values():
            deliver(run)
        if self._plain_to:
            self._next_plain_windows(fetches, now)
        for key, seq in fetches.items():
            if self.tracker.cursors[key].last + 1 != seq:
                continue   # repaired within this drain
            asked = self._bulk_asked.get(key)
            if asked is not None and now - asked.at < BULK_SILENCE:
                continue   # a bulk answer is under way
            if self.fetch_filter.allow(*key, seq, now):
                self._fetch(*key, seq, now)
        if delivered:
            self.stats["delivered"] += len(delivered)
            if self.on_record is not None:
                for record in delivered:
                    self.on_record(record)
            else:
                with self._ready_cond:
                    self._ready.extend(delivered)
                    self._ready_cond.notify_all()

    def _fetch(self, subject: str, address: str, seq: int, now: float) -> None:
        """FETCH from `seq`: from one of our stores by BULK-FETCH when one is known
        (picked by the partition's hash), else published to every store and the
        producer, as the C consumer does."""
        readers = sorted(self.bulk_readers)
        if not readers:
            self._plain_fetch(subject, address, seq)
            return
        reader = readers[zlib.crc32(address.encode()) % len(readers)]
        self.send(proto.BulkFetch(reader, self.address, address, subject, seq,
                                  BULK_WINDOW, BULK_BYTES))
        self._bulk_asked[(subject, address)] = BulkAsk(reader, seq + BULK_WINDOW, now)
        self.stats["bulk_fetches"] += 1

    def _plain_fetch(self, subject: str, address: str, seq: int) -> None:
        """FETCH published to every store and the producer, as the C consumer does."""
        count = proto.fetch_count(seq)
        self.send(proto.Fetch(address, self.address, subject, seq, count))
        self._plain_to[(subject, address)] = PlainAsk(seq + count, seq - 1, time.monotonic())
        self.stats["fetches"] += 1

    def _next_plain_windows(self, fetches: dict[tuple[str, str], int], now: float) -> None:
        """A FETCH answers one window (to the end of its 100000-block, inclusive, as
        the C store does); a HEAD heard beyond it asks the next one. The C consumer
        waits for the producer's next HEAD, which never comes once the producer is gone:
        a catch-up from stores stopped at the window's end."""
        cursors = self.tracker.cursors
        for key, window in list(self._plain_to.items()):
            cursor = cursors.get(key)
            if cursor is not None and cursor.last >= cursor.head:
                del self._plain_to[key]         # all that was heard of is here
                continue
            if cursor is None or cursor.last < window.end:
                if cursor is not None and cursor.last != window.seen:
                    window.seen, window.at = cursor.last, now    # coming: not silent
                    self._bulk_silent.pop(key, None)
                continue
            del self._plain_to[key]
            if cursor.head > cursor.last and key not in self._bulk_asked:
                fetches.setdefault(key, cursor.last + 1)

    def _ask_again_after_silence(self, now: float) -> None:
        """A FETCH or bulk answer whose records stopped (the request or a slice lost to
        a reconnect or a full queue, with no producer's HEAD to reveal the gap) is asked
        again from where delivery stands, after a silence that doubles per silent ask
        in a row."""
        asks = (self._plain_to, self._bulk_asked)
        if self._paused:     # we are not reading: the answer's slices wait in our queue
            for ask in (a for waiting in asks for a in waiting.values()):
                ask.at = now
            return
        for waiting in asks:
            for key, ask in list(waiting.items()):
                silent = self._bulk_silent.get(key, 0)
                if now - ask.at < min(BULK_SILENCE * 2 ** silent, BULK_SILENCE_MAX):
                    continue
                del waiting[key]
                cursor = self.tracker.cursors.get(key)
                if ask.settled(cursor):
                    continue
                self._bulk_silent[key] = silent + 1
                self.stats[ask.SILENCE_STAT] += 1
                self._fetch(*key, cursor.last + 1 if cursor is not None else 0, now)
                ask.hand_over(self._bulk_asked.get(key))

    def _on_bulk(self, msg: proto.BulkRecords, delivered: list[ConsumerRecord],
                 fetches: dict[tuple[str, str], int], now: float) -> None:
        """One slice of a BULK-FETCH answer: its records, then what the answer's end
        asks for: an empty answer (the store lacks the records) -> plain FETCH at once;
        an answer that filled the window -> the next window (the store may hold more:
        unlike the C consumer we do not wait for a HEAD)."""
        key = (msg.subject, msg.partition)
        asked = self._bulk_asked.get(key)
        if asked is not None and asked.reader == msg.address:
            asked.at = now
            self._bulk_silent.pop(key, None)
        count = msg.count
        if count:
            data, base = msg.content, 4 * count
            offsets = proto.bulk_offsets(msg).tolist()
            contents = [data[base + start:base + stop]
                        for start, stop in zip(offsets, offsets[1:])]
            before = len(delivered)
            fetch = self.tracker.on_records(*key, msg.sequence, contents, delivered)
            if fetch is not None:
                fetches[key] = fetch
            self.stats["bulk_records"] += len(delivered) - before
            self.stats["bulk_duplicates"] += count - (len(delivered) - before)
        if not msg.last or asked is None or asked.reader != msg.address:
            return
        if count and asked.ends_superseded(msg.sequence + count):
            return                      # a slow answer's end: ours is still coming
        del self._bulk_asked[key]
        nxt = self.tracker.cursors[key].last + 1 if key in self.tracker.cursors else 0
        if count == 0:
            self._plain_fetch(msg.subject, msg.partition, nxt)
        elif msg.sequence + count >= asked.end:
            self._fetch(*key, nxt, now)
            asked.carry_over(self._bulk_asked.get(key))


__all__ = ["Consumer", "ConsumerRecord", "OffsetTracker"]
