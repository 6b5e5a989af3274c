"""Each applied entry's visible rows, remembered after a reader first asks (`entry_rows`).

A reader plans a long backlog by row counts (how many rows each entry shows, to cut
tasks of equal size and to admit micro-batches). Decoding every entry's header for that
costs microseconds an entry on both sides of the wire, on every plan; committed entries
never change, so a member works each entry out once and then answers any range with a
slice of an array: 4 bytes an entry on the wire, and no decoding at all.

What an entry shows is read-committed's rule (`envelope.described`): a journal entry its
records unless it was a retry the machine ignored; an effective COMMIT its batch, whose
row counts the reader takes from the commit's header (listed beside the array); anything
else nothing. A verdict may later be forgotten (a retry's request id ages out), never
reversed, so what is remembered stays right.
"""
from __future__ import annotations

import sys
import time
from array import array
from bisect import bisect_left
from typing import Callable, Iterable

from consensus.raft import Entry
from consensus.wire.envelope import described, header_of

#: (index, rows a journal entry shows, the header of an effective commit or None)
Shown = tuple[int, int, "list | None"]
MAX_ENTRIES_PER_ANSWER = 1 << 20
#: entries worked out for one answer at most: tens of µs each on a reader thread
COMPUTED_PER_ANSWER = 1 << 15
#: seconds of working out per answer at most (a client waits ~1 s for an answer before it
#: asks another member; a loaded machine works out far fewer entries in that time)
SECONDS_PER_ANSWER = 0.25


class RowIndex:
    """A window [low, high) of applied entries' journal row counts and effective commits'
    headers. `rows_of(start, stop)` extends the window forward with `compute` (which works
    out the entries it lacks, COMPUTED_PER_ANSWER at most per answer) and answers from
    it. A request from outside the window, or one that would make it hold more than
    `max_entries` (4 bytes each), starts a new window where it starts."""

    def __init__(self, compute: Callable[[int, int], Iterable[Shown]], *,
                 max_entries: int = 1 << 24, seconds: float = SECONDS_PER_ANSWER) -> None:
        self._compute = compute
        self.max_entries = max_entries
        self.seconds = seconds
        self.low = self.high = 0
        self._rows = array("I")
        self._commit_at: list[int] = []         # the effective commits' indexes, in order
        self._commits: list[list] = []          # and their headers

    def forget_before(self, first: int) -> None:
        """Entries below `first` were compacted away: drop them."""
        if first <= self.low:
            return
        if first >= self.high:
            self._reset(first)
            return
        del self._rows[:first - self.low]
        gone = bisect_left(self._commit_at, first)
        del self._commit_at[:gone], self._commits[:gone]
        self.low = first

    def rows_of(self, start: int, stop: int) -> tuple[int, bytes, list[list]]:
        """(end, rows, commits) for applied entries [start, end), start < end <= stop:
        each entry's journal rows as little-endian uint32 and the headers of the effective
        commits among them, in index order. Fewer entries than asked past
        MAX_ENTRIES_PER_ANSWER, or past COMPUTED_PER_ANSWER (or `seconds` of work) not
        yet in the window."""
        stop = min(stop, start + MAX_ENTRIES_PER_ANSWER)
        if stop <= start:
            return start, b"", []
        if not self.low <= start <= self.high or stop - self.low > self.max_entries:
            self._reset(start)
        if stop > self.high:
            stop = self._append(min(stop, self.high + COMPUTED_PER_ANSWER))
        rows = self._rows[start - self.low:stop - self.low]
        if sys.byteorder != "little":
            rows.byteswap()
        at = self._commit_at
        commits = self._commits[bisect_left(at, start):bisect_left(at, stop)]
        return stop, rows.tobytes(), commits

    def _reset(self, at: int) -> None:
        self.low = self.high = at
        self._rows = array("I")
        self._commit_at, self._commits = [], []

    def _append(self, stop: int) -> int:
        """Work out entries [high, stop), or fewer once `seconds` have passed (at least
        256), keep them (all of those, or none) and return where they end."""
        rows, at, commits = array("I"), [], []
        expected = self.high
        deadline = time.monotonic() + self.seconds
        for index, count, commit in self._compute(self.high, stop):
            if index != expected:
                raise ValueError(f"row index: computed entry {index}, expected {expected}")
            rows.append(count)
            if commit is not None:
                at.append(index)
                commits.append(commit)
            expected += 1
            if not (expected - self.high) % 256 and time.monotonic() > deadline:
                stop = expected
                break
        if expected != stop:
            raise ValueError(f"row index: computed [{self.high}, {expected}), asked up to {stop}")
        self._rows.extend(rows)
        self._commit_at += at
        self._commits += commits
        self.high = stop
        return stop


def entry_shows(entry: Entry, verdict: Callable[[Entry], "bool | None"]
                ) -> tuple[int, "list | None"]:
    """What one applied entry shows readers, by `envelope.described`'s rule, with the
    member's `verdict` on it: (journal rows, the header of an effective commit or None)."""
    record = described(entry, verdict(entry))
    if record.type == "journal" and not record.duplicate:
        return record.count or 0, None
    if record.type == "commit" and record.commit is not None and record.commit.effective:
        return 0, header_of(record)
    return 0, None
