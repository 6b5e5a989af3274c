"""Partition planning: cutting a range of log entries into Spark tasks.

Offsets address whole entries, but tasks need not: a committed sink batch (one commit
entry naming many staged Arrow payloads) can hold millions of rows, and reading it in one
task would leave the other cores idle. So a task reads `Piece`s: the visible entries of
an index range (runs of journal entries), or a slice of one commit entry's staged
payloads. Pieces cover only the entries that show rows: the staged entries, status and
membership entries in between are never fetched (a staged payload is read once, through
the commit that names it). Rows come out in the same order whatever the cut, so a replay
of the same offsets gives the same rows.

Sans-I/O: the caller passes what it knows about the entries (`EntrySize`s, from entry
headers).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Sequence


@dataclass(frozen=True, slots=True)
class EntrySize:
    """How many rows an entry shows readers. For a commit entry, `parts` holds the row
    count of each staged payload it names, in order, and `lowest` the lowest index among
    them; for others they are empty."""
    index: int
    rows: int
    parts: tuple[int, ...] = ()
    lowest: int | None = None   #: a commit's lowest staged entry (read through it)

    @property
    def first_needed(self) -> int:
        """The lowest log index that reading this entry takes."""
        return self.index if self.lowest is None else min(self.index, self.lowest)


@dataclass(frozen=True, slots=True)
class Piece:
    """Read the visible entries in [start, stop); with `parts`, the entry `start` is a
    commit entry and only its staged payloads [parts[0], parts[1]) are read."""
    start: int
    stop: int
    parts: tuple[int, int] | None = None


def plan_tasks(start: int, stop: int, sizes: Sequence[EntrySize], *, min_tasks: int = 1,
               rows_per_task: int = 1 << 20) -> list[list[Piece]]:
    """Tasks of about the same number of rows over the entries `sizes` of [start, stop).

    `sizes` lists the entries that show rows, in index order (a commit entry with its
    payloads' row counts in `parts`); the pieces cover exactly those. At least
    `min_tasks` tasks when there are rows enough (a commit is split between its payloads,
    never inside one), none holding much more than `rows_per_task`. Each unit (a journal
    entry, or one payload of a commit) goes to the task its middle row falls in when rows
    are dealt out `target` at a time, which balances the tasks.
    """
    units = [s for s in sizes if start <= s.index < stop and s.rows > 0]
    total = sum(s.rows for s in units)
    if total == 0:
        return []
    target = max(1, min(rows_per_task, math.ceil(total / max(1, min_tasks))))
    tasks: list[list[Piece]] = []
    bucket = -1
    dealt = 0                 # rows before the current unit

    def place(unit_bucket: int, piece: Piece) -> None:
        nonlocal bucket
        if unit_bucket != bucket:
            tasks.append([])
            bucket = unit_bucket
        pieces = tasks[-1]
        last = pieces[-1] if pieces else None
        if piece.parts is None and last is not None and last.parts is None \
                and last.stop == piece.start:
            pieces[-1] = Piece(last.start, piece.stop)    # a run of journal entries
        else:
            pieces.append(piece)

    for size in units:
        if not size.parts:                                # a journal entry
            place(int((dealt + size.rows / 2) // target), Piece(size.index, size.index + 1))
            dealt += size.rows
            continue
        lo, lo_bucket = 0, None
        for position, rows in enumerate(size.parts):
            unit_bucket = int((dealt + rows / 2) // target)
            dealt += rows
            if lo_bucket is not None and unit_bucket != lo_bucket:
                place(lo_bucket, Piece(size.index, size.index + 1, (lo, position)))
                lo = position
            lo_bucket = unit_bucket
        place(lo_bucket, Piece(size.index, size.index + 1, (lo, len(size.parts))))
    return tasks
