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
from dataclasses import dataclass, field, replace
from typing import Mapping

from ..errors import GarlicFarmSparkError

INDEX_VERSION = 1
Range = tuple[int, int]


class PartitionIndexError(GarlicFarmSparkError):
    """A partition index in the farm is not one this code wrote (corrupt or newer)."""


@dataclass(frozen=True, slots=True)
class Pending:
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
    pending: tuple[Pending, ...] = field(default=())
    last: Pending | None = None

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
        try:
            raw = json.loads(text)
            if raw.get("v") != INDEX_VERSION:
                raise ValueError(f"version {raw.get('v')!r}, expected {INDEX_VERSION}")
            pending = tuple(Pending(int(s), int(e), int(b), str(d), bool(f))
                            for s, e, b, d, f in raw["pending"])
            last = raw.get("last")
            return cls(str(raw["query"]), str(raw["topic"]), int(raw["next"]),
                       tuple((int(s), int(e)) for s, e in raw["committed"]), pending,
                       None if last is None else Pending(int(last[0]), int(last[1]),
                                                         int(last[2]), str(last[3])))
        except (ValueError, TypeError, KeyError, AttributeError) as exc:
            raise PartitionIndexError(f"the farm's key {key!r} is not a garlicfarm Dafka partition "
                              f"index ({exc}); was it written by another program?") from None

    # -- allocation (a task attempt) -----------------------------------------------------------
    def allocate(self, batch: int, digest: str, count: int) -> tuple["PartitionIndex", int]:
        """The index after allocating `count` sequences to (batch, digest), and the start:
        the range that same output had before unless it was filled, else a fresh one."""
        if count <= 0:
            raise ValueError("allocate at least one sequence")
        for p in (self.last, *self.pending):
            if p is None:
                continue
            if p.batch == batch and p.digest == digest and not p.filled:
                return self, p.start
        start = self.next
        fresh = Pending(start, start + count, batch, digest)
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
    not a Dafka sink commit of `topic`."""
    found = (metadata or {}).get("dafka")
    if not isinstance(found, dict) or found.get("topic") != topic:
        return None
    return {p: (int(r[0]), int(r[1])) for p, r in found.get("partitions", {}).items()}
