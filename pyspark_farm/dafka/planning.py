"""Planning the dafka source's micro-batches (sans-I/O): how far each partition reads
under the read limits, and how partition ranges become Spark tasks.

`maxOffsetsPerTrigger` is split across partitions by volume, as the Kafka source does:
each partition gets a share of the limit proportional to what it has available (the
remainder going to the largest fractions, ties by partition), so a busy partition does
not starve the quiet ones and the batch is exactly the limit. `minOffsetsPerTrigger`
makes a batch wait until that many offsets are available or `maxTriggerDelay` passed.
`minPartitions` (`task_counts`) splits the offsets of a batch into at least that many
Spark tasks, as the Kafka source does when there are fewer partitions than that.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping, Sequence

from ..admission import SourceLimits
from .index import Range
from .offsets import PartitionKey


def batch_ends(starts: Mapping[PartitionKey, int], latest: Mapping[PartitionKey, int],
               limits: SourceLimits, *, waited: float = 0.0, available_now: bool = False
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


def task_counts(sizes: Mapping[PartitionKey, int], min_tasks: int, per_task: int
                ) -> dict[PartitionKey, int]:
    """How many tasks `minPartitions` splits each partition's `sizes[key]` offsets into,
    for the partitions where that is more than one task per `per_task` offsets (the
    others: {} and `plan_tasks`' default cut).

    When one task per `per_task` offsets (rounded up) makes fewer than `min_tasks`
    tasks, `min_tasks` are shared out in proportion to the sizes (the remainder to the
    largest fractions, ties by partition), so a big partition gets more tasks than a
    small one, as the Kafka source's minPartitions does. Each partition with offsets
    keeps at least one task and gets at most one per offset, so there are fewer than
    `min_tasks` only when there are fewer offsets than that."""
    sizes = {k: n for k, n in sizes.items() if n > 0}
    counts = {k: -(-n // per_task) for k, n in sizes.items()}
    total = sum(sizes.values())
    if sum(counts.values()) >= min_tasks:
        return {}
    shares = {k: min_tasks * n // total for k, n in sizes.items()}
    left = min_tasks - sum(shares.values())
    for key in sorted(sizes, key=lambda k: (-(min_tasks * sizes[k] % total), k))[:left]:
        shares[key] += 1
    raised = {k: min(sizes[k], max(shares[k], 1)) for k in sizes}
    return {k: n for k, n in raised.items() if n > counts[k]}


def plan_tasks(key: PartitionKey, ranges: Sequence[Range], per_task: int,
               parts: int | None = None) -> list[ReadTask]:
    """Tasks over the ranges of one partition, each of at most `per_task` offsets; with
    `parts` (from `task_counts`), exactly that many tasks (at most one per offset) whose
    sizes differ by one at most."""
    total = sum(max(0, b - a) for a, b in ranges)
    if parts is None:
        whole, rest = divmod(total, per_task)
        sizes = [per_task] * whole + [rest] * (rest > 0)
    else:
        parts = max(1, min(parts, total))
        sizes = [total // parts + (i < total % parts) for i in range(parts)]
    return _cut(key, ranges, sizes)


def _cut(key: PartitionKey, ranges: Sequence[Range], sizes: Sequence[int]) -> list[ReadTask]:
    """Consecutive tasks of `sizes` offsets over the ranges, in order."""
    tasks: list[ReadTask] = []
    pending = list(ranges)[::-1]
    for size in sizes:
        current: list[Range] = []
        while size > 0 and pending:
            start, stop = pending.pop()
            take = min(stop - start, size)
            if take > 0:
                current.append((start, start + take))
                size -= take
            if start + take < stop:
                pending.append((start + take, stop))
        if current:
            tasks.append(ReadTask(*key, tuple(current)))
    return tasks
