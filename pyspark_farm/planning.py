"""Partition planning: cutting a range of log entries into Spark tasks.

Offsets address whole entries, but tasks need not: a committed sink batch (one commit
entry naming many staged Arrow payloads) can hold millions of rows, and reading it in one
task would leave the other cores idle. So a task reads `Piece`s: the visible entries of
an index range (runs of journal entries), or a slice of one commit entry's staged
payloads. Pieces cover only the entries that show rows: the staged entries, status and
membership entries in between are never fetched (a staged payload is read once, through
the commit that names it). Rows come out in the same order whatever the cut, so a replay
of the same offsets gives the same rows.

Sans-I/O: the caller passes what it knows about the entries (`Sizes`, arrays of the
members' row counts, or `EntrySize`s from entry headers).
"""
from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Iterable, Iterator, Mapping, Sequence

import numpy as np


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


@dataclass(frozen=True)
class Sizes:
    """Row counts of the entries of [start, stop) that show rows, as arrays (a backlog of
    millions of journal entries plans without an object per entry): entry `index[k]`
    shows `rows[k]` rows; the commit entries among them are in `commits`, by index, with
    their payloads' row counts."""
    start: int
    stop: int
    index: np.ndarray                   #: int64, ascending
    rows: np.ndarray                    #: int64, each > 0
    commits: Mapping[int, EntrySize] = field(default_factory=dict)

    @classmethod
    def of(cls, start: int, stop: int, sizes: Iterable[EntrySize]) -> "Sizes":
        shown = [s for s in sizes if start <= s.index < stop and s.rows > 0]
        return cls(start, stop, np.array([s.index for s in shown], dtype=np.int64),
                   np.array([s.rows for s in shown], dtype=np.int64),
                   {s.index: s for s in shown if s.parts or s.lowest is not None})

    @classmethod
    def journal(cls, start: int, rows: np.ndarray,
                commits: Sequence[EntrySize] = ()) -> "Sizes":
        """Entries from `start` with `rows[k]` journal rows at start + k, and `commits`
        (their rows are not in `rows`)."""
        shown = np.flatnonzero(rows)
        index = np.concatenate([shown + start,
                                np.array([c.index for c in commits if c.rows], dtype=np.int64)])
        counts = np.concatenate([rows[shown].astype(np.int64),
                                 np.array([c.rows for c in commits if c.rows], dtype=np.int64)])
        order = np.argsort(index, kind="stable")
        return cls(start, start + len(rows), index[order], counts[order],
                   {c.index: c for c in commits if c.rows})

    @classmethod
    def joined(cls, start: int, stop: int, pages: Sequence["Sizes"]) -> "Sizes":
        """The pages' entries in [start, stop), as one."""
        index = np.concatenate([p.index for p in pages] or [np.zeros(0, np.int64)])
        rows = np.concatenate([p.rows for p in pages] or [np.zeros(0, np.int64)])
        keep = (index >= start) & (index < stop)
        return cls(start, stop, index[keep], rows[keep],
                   {i: c for p in pages for i, c in p.commits.items() if start <= i < stop})

    def __len__(self) -> int:
        return len(self.index)

    def without(self, dropped: Iterable[int]) -> "Sizes":
        """These sizes less the entries at `dropped`."""
        gone = set(dropped)
        if not gone:
            return self
        keep = ~np.isin(self.index, np.fromiter(gone, dtype=np.int64))
        return Sizes(self.start, self.stop, self.index[keep], self.rows[keep],
                     {i: c for i, c in self.commits.items() if i not in gone})

    def entries(self) -> Iterator[EntrySize]:
        """One EntrySize per entry, in index order."""
        for index, rows in zip(self.index.tolist(), self.rows.tolist()):
            yield self.commits.get(index) or EntrySize(index, rows)

    def first_needed(self) -> int | None:
        """The lowest log index reading these entries takes (a commit's staged entries
        included); None when there are none."""
        lows = [c.first_needed for c in self.commits.values()]
        if len(self.index):
            lows.append(int(self.index[0]))
        return min(lows, default=None)


def plan_tasks(start: int, stop: int, sizes: "Sizes | Sequence[EntrySize]", *,
               min_tasks: int = 1, rows_per_task: int = 1 << 20) -> list[list[Piece]]:
    """Tasks of about the same number of rows over the entries `sizes` of [start, stop).

    `sizes` lists the entries that show rows, in index order (a commit entry with its
    payloads' row counts in `parts`); the pieces cover exactly those. At least
    `min_tasks` tasks when there are rows enough (a commit is split between its payloads,
    never inside one), none holding much more than `rows_per_task`. Each unit (a journal
    entry, or one payload of a commit) goes to the task its middle row falls in when rows
    are dealt out `target` at a time, which balances the tasks. The work per journal
    entry is in numpy; Python's is per piece.
    """
    if not isinstance(sizes, Sizes):
        sizes = Sizes.of(start, stop, sizes)
    index, rows, part = _units(sizes, start, stop)
    total = int(rows.sum())
    if total == 0:
        return []
    target = max(1, min(rows_per_task, math.ceil(total / max(1, min_tasks))))
    before = np.cumsum(rows) - rows
    bucket = (2 * before + rows) // (2 * target)       # the bucket of each unit's middle row
    journal = part < 0
    # A piece ends where the task changes, or the run of journal entries (or the commit
    # entry) does.
    breaks = np.ones(len(index), dtype=bool)
    breaks[1:] = ((bucket[1:] != bucket[:-1]) | (journal[1:] != journal[:-1])
                  | np.where(journal[1:], index[1:] != index[:-1] + 1, index[1:] != index[:-1]))
    firsts = np.flatnonzero(breaks)
    lasts = np.append(firsts[1:] - 1, len(index) - 1)
    tasks: list[list[Piece]] = []
    task_of = None
    for unit_bucket, is_journal, lo, hi, part_lo, part_hi in zip(
            bucket[firsts].tolist(), journal[firsts].tolist(), index[firsts].tolist(),
            index[lasts].tolist(), part[firsts].tolist(), part[lasts].tolist()):
        if unit_bucket != task_of:
            tasks.append([])
            task_of = unit_bucket
        tasks[-1].append(Piece(lo, hi + 1) if is_journal      # a run of journal entries
                         else Piece(lo, lo + 1, (part_lo, part_hi + 1)))    # a commit's slice
    return tasks


def _units(sizes: Sizes, start: int, stop: int
           ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(index, rows, part) of each unit of [start, stop): a journal entry (part -1), or
    one payload of a commit entry (its position), in reading order."""
    keep = (sizes.index >= start) & (sizes.index < stop)
    index, rows = sizes.index[keep], sizes.rows[keep]
    part = np.full(len(index), -1, dtype=np.int64)
    commits = [c for i, c in sizes.commits.items() if start <= i < stop and c.parts]
    if not commits:
        return index, rows, part
    split = np.isin(index, np.array([c.index for c in commits], dtype=np.int64))
    index, rows, part = index[~split], rows[~split], part[~split]
    index = np.concatenate([index] + [np.full(len(c.parts), c.index, np.int64) for c in commits])
    rows = np.concatenate([rows] + [np.array(c.parts, np.int64) for c in commits])
    part = np.concatenate([part] + [np.arange(len(c.parts), dtype=np.int64) for c in commits])
    order = np.lexsort((part, index))
    return index[order], rows[order], part[order]
