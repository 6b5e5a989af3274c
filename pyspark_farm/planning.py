"""Partition planning: cutting a range of log entries into Spark tasks.

Offsets address whole entries, but tasks need not: a committed sink batch (one commit
entry naming many staged Arrow payloads) can hold millions of rows, and reading it in one
task would leave the other cores idle. So a task reads `Piece`s: either every visible
entry of an index range, or a slice of one commit entry's staged payloads. Rows come out
in the same order whatever the cut, so a replay of the same offsets gives the same rows.

Sans-I/O: the caller passes what it knows about the entries (`EntrySize`s); without that
knowledge, `split_evenly` cuts by index.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence


@dataclass(frozen=True, slots=True)
class EntrySize:
    """How many rows an entry shows readers. For a commit entry, `parts` holds the row
    count of each staged payload it names, in order; for others it is empty."""
    index: int
    rows: int
    parts: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class Piece:
    """Read the visible entries in [start, stop); with `parts`, the entry `start` is a
    commit entry and only its staged payloads [parts[0], parts[1]) are read."""
    start: int
    stop: int
    parts: tuple[int, int] | None = None


def split_evenly(start: int, stop: int, count: int) -> list[list[Piece]]:
    """`count` tasks over [start, stop) by index (fewer when there are fewer entries)."""
    entries = stop - start
    if entries <= 0:
        return []
    count = max(1, min(count, entries))
    bounds = [start + (entries * i) // count for i in range(count + 1)]
    return [[Piece(a, b)] for a, b in zip(bounds, bounds[1:]) if b > a]


def plan_tasks(start: int, stop: int, sizes: Sequence[EntrySize], *, min_tasks: int = 1,
               rows_per_task: int = 1 << 20) -> list[list[Piece]]:
    """Tasks of about the same number of rows over [start, stop).

    At least `min_tasks` when there are enough rows (a commit entry is split between its
    staged payloads, never inside one), and none holding much more than `rows_per_task`.
    `sizes` lists the entries of [start, stop) that show rows, in index order; entries not
    listed show none (they are still covered, so offsets stay contiguous). Each row-bearing
    unit (an entry, or one payload of a split commit) goes to the task its middle row falls
    in when rows are dealt out `target` at a time, which balances the tasks.
    """
    if stop <= start:
        return []
    total = sum(s.rows for s in sizes)
    if total == 0:
        return [[Piece(start, stop)]]
    target = max(1, min(rows_per_task, math.ceil(total / max(1, min_tasks))))
    tasks: list[list[Piece]] = []
    bucket = -1
    dealt = 0                 # rows before the current unit
    cursor = start            # first index not yet covered by a piece

    def place(unit_bucket: int, piece: Piece) -> None:
        nonlocal bucket
        if unit_bucket != bucket or not tasks:
            tasks.append([])
            bucket = unit_bucket
        tasks[-1].append(piece)

    for size in sizes:
        if size.rows == 0:
            continue
        parts = size.parts if len(size.parts) > 1 else (size.rows,)
        buckets = []
        for rows in parts:
            buckets.append(int((dealt + rows / 2) // target))
            dealt += rows
        if buckets[0] == buckets[-1]:
            place(buckets[0], Piece(cursor, size.index + 1))
        else:
            if size.index > cursor:
                place(buckets[0], Piece(cursor, size.index))
            lo = 0
            for hi in range(1, len(parts) + 1):
                if hi == len(parts) or buckets[hi] != buckets[lo]:
                    place(buckets[lo], Piece(size.index, size.index + 1, (lo, hi)))
                    lo = hi
        cursor = size.index + 1
    if cursor < stop:
        # Entries after the last rows show none: they ride with the last task.
        tasks[-1].append(Piece(cursor, stop))
    return tasks
