"""Planning the dafka source's micro-batches (sans-I/O): how far each partition reads
under the read limits, and how partition ranges become Spark tasks.

`maxOffsetsPerTrigger` is split across partitions by volume, as the Kafka source does:
each partition gets a share of the limit proportional to what it has available (the
remainder going to the largest fractions, ties by partition), so a busy partition does
not starve the quiet ones and the batch is exactly the limit. `minOffsetsPerTrigger`
makes a batch wait until that many offsets are available or `maxTriggerDelay` passed.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from ..admission import Limits
from .index import Range
from .offsets import PartitionKey


def batch_ends(starts: Mapping[PartitionKey, int], latest: Mapping[PartitionKey, int],
               limits: Limits, *, waited: float = 0.0, available_now: bool = False
               ) -> dict[PartitionKey, int]:
    """The end offset of every partition for the next micro-batch. `starts` holds each
    partition's start (new partitions start at 0), `latest` what is available."""
    ends = {k: max(starts.get(k, 0), latest.get(k, 0)) for k in set(starts) | set(latest)}
    available = {k: ends[k] - starts.get(k, 0) for k in ends}
    total = sum(available.values())
    if total == 0:
        return ends
    need = None if available_now else limits.min_rows
    if need is not None and total < need and waited < limits.max_trigger_delay:
        return {k: starts.get(k, 0) for k in ends}
    cap = limits.max_rows
    if cap is None or total <= cap:
        return ends
    shares = {k: cap * a // total for k, a in available.items()}
    left = cap - sum(shares.values())
    by_fraction = sorted(available, key=lambda k: (-(cap * available[k] % total), k))
    for key in by_fraction[:left]:
        shares[key] += 1
    return {k: starts.get(k, 0) + shares[k] for k in ends}


@dataclass(frozen=True)
class ReadTask:
    """One Spark task: offset ranges of one partition, in order."""
    topic: str
    partition: str
    ranges: tuple[Range, ...]

    @property
    def offsets(self) -> int:
        return sum(b - a for a, b in self.ranges)


def plan_tasks(key: PartitionKey, ranges: Sequence[Range], per_task: int) -> list[ReadTask]:
    """Tasks over the ranges of one partition, each of at most `per_task` offsets."""
    tasks: list[ReadTask] = []
    current: list[Range] = []
    size = 0
    for start, stop in ranges:
        while start < stop:
            take = min(stop - start, per_task - size)
            current.append((start, start + take))
            size += take
            start += take
            if size == per_task:
                tasks.append(ReadTask(*key, tuple(current)))
                current, size = [], 0
    if current:
        tasks.append(ReadTask(*key, tuple(current)))
    return tasks
