"""Admission control: how far one micro-batch reads.

`maxOffsetsPerTrigger` / `minOffsetsPerTrigger` (+ `maxTriggerDelay`) count **rows**, but
offsets address **entries**, and an entry (a journal entry carrying a batch of records, or
a committed sink batch) is atomic: a micro-batch takes whole entries. So a limit is met
as closely as whole entries allow: entries are admitted while the running total stays
within `max_rows`; an entry that alone holds more than `max_rows` rows is admitted by
itself (the only overshoot, by at most that one entry), so a query always advances.

Sans-I/O: the caller passes the entries' row counts (lazily, in log order), the end of
what is committed, and the time waited since the last batch.
"""
from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterable

from .compat import ReadAllAvailable, ReadLimit, ReadMaxRows, ReadMinRows


@dataclass(frozen=True)
class SourceLimits:
    """The read limits of a source, from its options."""
    max_rows: int | None = None
    min_rows: int | None = None
    max_trigger_delay: float = 900.0   # seconds; Kafka's default of 15 minutes

    def default_read_limit(self) -> ReadLimit:
        """What Spark should pass to latestOffset (Spark takes only one built-in limit; the
        other one, when both are set, is applied from these options)."""
        if self.max_rows is not None:
            return ReadMaxRows(self.max_rows)
        if self.min_rows is not None:
            return ReadMinRows(self.min_rows)
        return ReadAllAvailable()

    def under(self, limit: ReadLimit | None) -> "SourceLimits":
        """The limits to apply when Spark asks with `limit`: ReadAllAvailable means none
        (Trigger.Once and friends must read everything); None (PySpark before 4.2 passes
        no limit) means these options' own."""
        if limit is None:
            return self
        if isinstance(limit, ReadAllAvailable):
            return SourceLimits(max_trigger_delay=self.max_trigger_delay)
        if isinstance(limit, ReadMaxRows):
            return replace(self, max_rows=limit.max_rows)
        if isinstance(limit, ReadMinRows):
            return replace(self, min_rows=limit.min_rows)
        raise ValueError(f"the garlicfarm source does not support the read limit {limit!r}")

    @property
    def unlimited(self) -> bool:
        return self.max_rows is None and self.min_rows is None


def choose_end(start: int, end: int, rows: Iterable[tuple[int, int]], limits: SourceLimits, *,
               waited: float = 0.0, available_now: bool = False) -> int:
    """The end (exclusive) of the next micro-batch over entries [start, end).

    `rows` yields (index, row count) for the entries from `start` on, in order; it is
    consumed only as far as the limits need. Returns `start` when the batch should wait
    (fewer than `min_rows` rows and `max_trigger_delay` not yet passed; never under
    Trigger.AvailableNow, which must finish).
    """
    if end <= start or limits.unlimited:
        return max(start, end)
    max_rows = limits.max_rows
    need = None if available_now else limits.min_rows
    total = 0
    stop = end
    for index, count in rows:
        if index >= end:
            break
        if max_rows is not None and total > 0 and total + count > max_rows:
            stop = index
            break
        total += count
        if max_rows is not None and total >= max_rows:
            stop = index + 1
            break
        if max_rows is None and need is not None and total >= need:
            break   # enough to go; read everything available
    if need is not None and total < need and waited < limits.max_trigger_delay:
        return start
    return stop
