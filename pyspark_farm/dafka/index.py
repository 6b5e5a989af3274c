"""The index of one sink-written Dafka partition, kept in the farm (sans-I/O).

A Dafka store appends only the *next* sequence of a partition and fetches any gap from
the producer, so every sequence the sink allocates must be published by someone, and a
reader must know which published sequences belong to committed batches. Both needs meet
in one small JSON value per partition in the farm's key-value map (docs/exactly-once.md):

* ``next``: sequences [0, next) are allocated; nothing above is ever published;
* ``committed``: merged [start, stop) ranges of committed batches;
* ``pending``: ranges allocated to task attempts and not yet decided, each tagged with
  its batch, the digest of its content and whether a later attempt *filled* part of it
  with empty filler records (then it can never be committed);
* every other sequence below ``next`` is garbage (an attempt that lost or failed);
* ``last``: the most recently committed range with its batch and digest (only the last
  committed batch can be replayed: Spark re-runs the batch it had not logged as done).

Allocation is idempotent per (batch, content digest): a replayed task with the same
output (a retry, a restart from the checkpoint) gets the same range and republishes the
same records at the same offsets; output that differs gets a fresh range, so committed
sequences are never reused. Pending ranges are decided from the ledger: a range is
committed when its batch's commit names it, garbage when the batch committed without it
or a later batch committed. The first undecided sequence is the partition's *frontier*:
a read-committed reader stops there (Kafka's last stable offset).

Each change is a compare-and-set of the whole value by the I/O edge (`ledger.py`).
"""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field, replace
from typing import Any, Mapping

from ..errors import GarlicFarmSparkError

log = logging.getLogger("pyspark_farm.dafka.index")

INDEX_VERSION = 1
#: Sequences are u64 and 2^64-1 means "before 0" to Dafka: `next` stays at or below it.
MAX_NEXT = (1 << 64) - 1
Range = tuple[int, int]


def _sequence(value: Any, what: str) -> int:
    """`value` if it is a position in a partition (an int in 0..MAX_NEXT), else
    `ValueError` naming `what`."""
    if type(value) is not int or not 0 <= value <= MAX_NEXT:
        raise ValueError(f"{what} {value!r} is not a sequence in 0..{MAX_NEXT}")
    return value


def _range(start: Any, stop: Any, what: str) -> Range:
    start, stop = _sequence(start, f"{what} start"), _sequence(stop, f"{what} stop")
    if start > stop:
        raise ValueError(f"{what} [{start}, {stop}) runs backwards")
    return start, stop


class PartitionIndexError(GarlicFarmSparkError):
    """A partition index in the farm is not one this code wrote (corrupt or newer)."""


@dataclass(frozen=True, slots=True)
class PendingRange:
    """Sequences [start, stop) allocated to an attempt of `batch` with output `digest`."""
    start: int
    stop: int
    batch: int
    digest: str
    filled: bool = False        # a later attempt published fillers into it


@dataclass(frozen=True)
class Allocation:
    """What a task attempt publishes: fillers at [fill_from, start), then its records at
    [start, stop)."""
    start: int
    stop: int
    fill_from: int
    reused: bool                # the same batch and output had this range before


@dataclass(frozen=True)
class PartitionIndex:
    """See the module docstring. Immutable: every change returns a new index."""
    query: str
    topic: str
    next: int = 0
    committed: tuple[Range, ...] = ()
    pending: tuple[PendingRange, ...] = field(default=())
    last: PendingRange | None = None

    # -- JSON (the value stored in the farm) ---------------------------------------------------
    def to_json(self) -> str:
        return json.dumps({"v": INDEX_VERSION, "query": self.query, "topic": self.topic,
                           "next": self.next, "committed": [list(r) for r in self.committed],
                           "pending": [[p.start, p.stop, p.batch, p.digest, int(p.filled)]
                                       for p in self.pending],
                           "last": None if self.last is None else [
                               self.last.start, self.last.stop, self.last.batch,
                               self.last.digest]}, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str, key: str) -> "PartitionIndex":
        """The index `to_json` wrote, checked: every number a sequence, every range
        forwards and below ``next`` (anything else was not written by this code, and
        publishing at its sequences could overwrite committed records)."""
        try:
            raw = json.loads(text)
            if raw.get("v") != INDEX_VERSION:
                raise ValueError(f"version {raw.get('v')!r}, expected {INDEX_VERSION}")
            query, topic = raw["query"], raw["topic"]
            if type(query) is not str or type(topic) is not str:
                raise ValueError("query and topic must be strings")
            nxt = _sequence(raw["next"], "next")
            pending = tuple(_pending(item, nxt, filled=True) for item in raw["pending"])
            last = raw.get("last")
            committed = []
            for item in raw["committed"]:
                if type(item) is not list or len(item) != 2:
                    raise ValueError(f"{item!r:.80} is not a committed [start, stop]")
                committed.append(_range(item[0], item[1], "a committed range"))
                if committed[-1][1] > nxt:
                    raise ValueError(f"a committed range ends after next {nxt}")
            return cls(query, topic, nxt, tuple(committed), pending,
                       None if last is None else _pending(last, nxt, filled=False))
        except (ValueError, TypeError, KeyError, AttributeError, RecursionError) as exc:
            raise PartitionIndexError(f"the farm's key {key!r} is not a garlicfarm Dafka "
                                      f"partition index ({exc}); was it written by another "
                                      "program?") from None

    # -- allocation (a task attempt) -----------------------------------------------------------
    def allocate(self, batch: int, digest: str, count: int) -> tuple["PartitionIndex", int]:
        """The index after allocating `count` sequences to (batch, digest), and the start:
        the range that same output had before unless it was filled, else a fresh one."""
        if count <= 0:
            raise ValueError("allocate at least one sequence")
        if self.next + count > MAX_NEXT:
            raise PartitionIndexError(f"partition {self.topic}: {count} more sequences after "
                                      f"{self.next} pass Dafka's last ({MAX_NEXT - 1}): "
                                      "write to another partition")
        for p in (self.last, *self.pending):
            if p is None:
                continue
            if p.batch == batch and p.digest == digest and not p.filled:
                return self, p.start
        start = self.next
        fresh = PendingRange(start, start + count, batch, digest)
        return replace(self, next=start + count, pending=self.pending + (fresh,)), start

    def fill(self, start: int, stored_head: int) -> tuple["PartitionIndex", int]:
        """Before publishing at `start` when the stores hold the partition only up to
        `stored_head` (-1: nothing): the index with the pending ranges in the gap marked
        filled, and where fillers begin. Raises `GapNotFillable` when committed sequences
        lie in the gap (a store that holds them is down: they must not be overwritten)."""
        fill_from = max(stored_head + 1, 0)
        if fill_from >= start:
            return self, start
        blocked = [r for r in self.committed if r[0] < start and r[1] > fill_from]
        if blocked:
            raise GapNotFillable(fill_from, start, blocked)
        pending = tuple(replace(p, filled=True) if p.start < start and p.stop > fill_from
                        and not p.filled else p for p in self.pending)
        return replace(self, pending=pending), fill_from

    # -- decisions (the driver's commit, a reader) ---------------------------------------------
    def decide(self, last_batch: int | None, winners: Mapping[int, Range | None]
               ) -> "PartitionIndex":
        """The index with every pending range the ledger decides moved out: `last_batch` is
        the query's last committed batch; `winners[b]` is, for committed batches b of the
        pending ranges, this partition's range in b's commit (None: b committed without
        this partition). Batches at or below `last_batch` missing from `winners` were
        never committed (garbage)."""
        committed = list(self.committed)
        pending = []
        last = self.last
        for p in self.pending:
            if p.batch in winners:
                if winners[p.batch] == (p.start, p.stop) and not p.filled:
                    committed.append((p.start, p.stop))
                    if last is None or p.batch >= last.batch:
                        last = p
            elif last_batch is None or p.batch > last_batch:
                pending.append(p)
        return replace(self, committed=merge(committed), pending=tuple(pending), last=last)

    @property
    def frontier(self) -> int:
        """The first sequence not yet decided (the last stable offset)."""
        return min((p.start for p in self.pending), default=self.next)

    @property
    def undecided_batches(self) -> list[int]:
        return sorted({p.batch for p in self.pending})

    def visible(self, start: int, stop: int) -> list[Range]:
        """The committed sub-ranges of [start, stop)."""
        return [(max(a, start), min(b, stop)) for a, b in self.committed
                if a < stop and b > start]

    def covered_below(self, start: int) -> bool:
        """Is all of [0, start) committed (then no filler is ever needed below it)?"""
        return start == 0 or bool(self.committed) and self.committed[0][0] == 0 \
            and self.committed[0][1] >= start


class GapNotFillable(GarlicFarmSparkError):
    """Committed sequences below an attempt's range are missing from the running stores."""

    def __init__(self, fill_from: int, start: int, blocked: list[Range]) -> None:
        self.fill_from, self.start, self.blocked = fill_from, start, blocked
        super().__init__(
            f"the running Dafka stores hold this partition only up to {fill_from - 1}, but "
            f"sequences {blocked} below {start} are committed data: start the store that "
            "holds them (its data directory) so the others can copy them, then retry")


def merge(ranges: list[Range]) -> tuple[Range, ...]:
    """Sorted ranges with the adjacent and overlapping ones joined."""
    out: list[Range] = []
    for a, b in sorted(r for r in ranges if r[1] > r[0]):
        if out and a <= out[-1][1]:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return tuple(out)


def index_key(topic: str, partition: str) -> str:
    """The farm key holding a partition's index."""
    return f"garlicfarm/dafka/{topic}/{partition}"


def commit_ranges(metadata: Mapping | None, topic: str) -> dict[str, Range] | None:
    """{partition: (start, stop)} of a batch commit's metadata, None when the commit is
    not a Dafka sink commit of `topic`. A partition whose range is not one the sink
    writes is left out (logged): the commit is in the ledger for good, and every reader
    must read it the same way, without failing on it at each retry."""
    found = metadata.get("dafka") if isinstance(metadata, Mapping) else None
    if not isinstance(found, dict) or found.get("topic") != topic:
        return None
    partitions = found.get("partitions", {})
    if not isinstance(partitions, dict):
        log.warning("a Dafka sink commit of %r holds partitions %.80r, not a map: no "
                    "partition counts as committed", topic, partitions)
        return {}
    ranges = {}
    for partition, item in partitions.items():
        try:
            if type(partition) is not str or type(item) is not list or len(item) < 2:
                raise ValueError(f"{item!r:.80} is not [start, stop, ...]")
            ranges[partition] = _range(item[0], item[1], "the range")
        except ValueError as exc:
            log.warning("a Dafka sink commit of %r: partition %.40r left out (%s)", topic,
                        partition, exc)
    return ranges


def _pending(item: Any, nxt: int, *, filled: bool) -> PendingRange:
    """A pending (or last committed) range of an index value, checked."""
    if type(item) is not list or len(item) != (5 if filled else 4):
        raise ValueError(f"{item!r:.80} is not [start, stop, batch, digest"
                         f"{', filled' if filled else ''}]")
    start, stop = _range(item[0], item[1], "a pending range")
    if stop > nxt:
        raise ValueError(f"a pending range ends after next {nxt}")
    batch, digest = _sequence(item[2], "batch"), item[3]
    if type(digest) is not str or filled and item[4] not in (0, 1):
        raise ValueError(f"{item!r:.80}: the digest must be a string and filled 0 or 1")
    return PendingRange(start, stop, batch, digest, bool(item[4]) if filled else False)
