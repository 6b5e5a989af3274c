"""Who reads the farm: each consumer's committed position and its lag, at the leader.

A reader (the Spark raft source) reports its position (the next index it reads) when it
commits a micro-batch: one small call, answered from memory, no log entry (an entry per
commit would move the log's end after every commit, and a caught-up stream would then
plan an empty batch for ever). The leader keeps the reports; a member that stops leading
forgets them (a consumer shows again at its next commit, at the new leader), and a
consumer not heard from for `expiry` seconds is dropped.

Lag is counted in entries (the log's end minus the position) and in rows: a `RowTally`
keeps the running total of the rows applied entries show, from the oldest position
reported onwards, so a consumer's rows lag is one subtraction however long its backlog.
Entries are counted once each, `COUNTED_PER_REFRESH` at most per refresh (a big backlog
is counted over a few refreshes: rows lag is None meanwhile), never more than
`MAX_TALLY_ENTRIES` behind the end.
"""
from __future__ import annotations

import threading
import time
from array import array
from dataclasses import asdict, dataclass
from typing import Callable, Iterable, Iterator

from consensus.raft import Entry
from consensus.raft.log import LogView
from consensus.runtime.row_index import entry_shows

#: consumers one leader keeps at most (a new name past it is refused)
MAX_CONSUMERS = 1000
MAX_NAME_CHARS = 200
DEFAULT_EXPIRY = 86400.0
#: entries whose rows one refresh counts at most: 5-10 µs each, on the node's event loop
COUNTED_PER_REFRESH = 1 << 13
#: entries the tally spans at most (8 bytes each): farther behind, rows lag is unknown
MAX_TALLY_ENTRIES = 1 << 23

#: rows of the applied entries [start, stop), one count per entry in index order
RowCounter = Callable[[int, int], Iterable[int]]


@dataclass(frozen=True, slots=True)
class ConsumerLag:
    """One consumer as the leader sees it."""
    name: str
    position: int               #: the next index it reads (its last committed end)
    lag_entries: int            #: the log's end minus `position`
    lag_rows: int | None        #: rows shown by [position, end); None: not counted (yet)
    seen: float                 #: time.monotonic() of its last report

    def to_dict(self, now: float) -> dict:
        found = asdict(self)
        found["seen_age"] = round(max(0.0, now - found.pop("seen")), 3)
        return found


class RowTally:
    """Running row totals of applied entries [low, high): `_total[i]` is the rows of
    [low, low + i), so the rows of any range inside is one subtraction."""

    def __init__(self, count: RowCounter) -> None:
        self._count = count
        self.low = self.high = 0
        self._total = array("Q", [0])

    def rows_between(self, start: int, stop: int) -> int | None:
        if not self.low <= start <= stop <= self.high:
            return None
        return self._total[stop - self.low] - self._total[start - self.low]

    def advance(self, floor: int, end: int, budget: int = COUNTED_PER_REFRESH) -> None:
        """Span [floor, ...) and count on towards `end`, `budget` entries at most."""
        if not self.low <= floor <= self.high:
            self.low = self.high = floor
            self._total = array("Q", [0])
        elif floor > self.low:
            del self._total[:floor - self.low]
            self.low = floor
        stop = min(end, self.high + budget)
        if stop <= self.high:
            return
        total = self._total[-1]
        counted = array("Q")
        for rows in self._count(self.high, stop):
            total += rows
            counted.append(total)
        if len(counted) != stop - self.high:
            raise ValueError(f"row tally: counted {len(counted)} entries of "
                             f"[{self.high}, {stop})")
        self._total.extend(counted)
        self.high = stop


class ConsumerBook:
    """The consumers' positions at one member (the leader). `report` and `lags` run on
    the node's loop; `snapshot` (the lags of the last refresh) is what other threads
    (the metrics endpoint) read."""

    def __init__(self, count: RowCounter, bounds: Callable[[], tuple[int, int]], *,
                 expiry: float = DEFAULT_EXPIRY,
                 clock: Callable[[], float] = time.monotonic) -> None:
        """`bounds()`: (first index the log holds, one past the last applied)."""
        self.expiry = expiry
        self._bounds = bounds
        self._clock = clock
        self._seen: dict[str, tuple[int, float]] = {}     # name -> (position, seen)
        self._tally = RowTally(count)
        self._lock = threading.Lock()
        self.snapshot: tuple[ConsumerLag, ...] = ()

    def report(self, name: object, position: object) -> dict:
        """Record a consumer's position; its lag as `ConsumerLag.to_dict` (ValueError
        naming the argument for a bad one)."""
        name, position = checked_report(name, position)
        if name not in self._seen and len(self._seen) >= MAX_CONSUMERS:
            self._expire(self._clock())
            if len(self._seen) >= MAX_CONSUMERS:
                raise ValueError(f"name: this leader tracks {MAX_CONSUMERS} consumers "
                                 f"already; {name!r} is not recorded (others expire after "
                                 f"--consumer-expiry)")
        self._seen[name] = (position, self._clock())
        now = self._clock()
        return next(c.to_dict(now) for c in self.lags() if c.name == name)

    def lags(self) -> tuple[ConsumerLag, ...]:
        """Every consumer's lag now (expired ones dropped; the tally counted on)."""
        now = self._clock()
        self._expire(now)
        if not self._seen:
            self._set(())
            return ()
        first, end = self._bounds()
        oldest = min(position for position, _ in self._seen.values())
        self._tally.advance(max(oldest, first, end - MAX_TALLY_ENTRIES), end)
        found = tuple(ConsumerLag(name, position, max(0, end - position),
                                  self._tally.rows_between(min(position, end), end),
                                  seen)
                      for name, (position, seen) in sorted(self._seen.items()))
        self._set(found)
        return found

    def view(self) -> list[dict]:
        """`lags()` as `status` answers them."""
        found = self.lags()
        now = self._clock()
        return [c.to_dict(now) for c in found]

    def clear(self) -> None:
        """This member stopped leading: its consumers report to the next leader."""
        self._seen.clear()
        self._set(())

    def _expire(self, now: float) -> None:
        for name in [n for n, (_, seen) in self._seen.items() if now - seen > self.expiry]:
            del self._seen[name]

    def _set(self, found: tuple[ConsumerLag, ...]) -> None:
        with self._lock:
            self.snapshot = found

    def current(self) -> tuple[tuple[ConsumerLag, ...], float]:
        """The last refresh's lags and the clock now (for another thread)."""
        with self._lock:
            return self.snapshot, self._clock()


def checked_report(name: object, position: object) -> tuple[str, int]:
    if not isinstance(name, str) or not name or len(name) > MAX_NAME_CHARS \
            or not name.isprintable():
        raise ValueError(f"name: a consumer name is 1 to {MAX_NAME_CHARS} printable "
                         f"characters, got {name!r:.80}")
    if type(position) is not int or not 1 <= position < 1 << 63:
        raise ValueError(f"position: a log index (1 or more), got {position!r:.40}")
    return name, position


def counted_rows(log: LogView, verdict: Callable[[Entry], "bool | None"]) -> RowCounter:
    """The rows each applied entry shows readers (`row_index.entry_shows`): a journal
    entry its records, an effective commit its batch's rows (the sink's metadata says
    them; one a payload otherwise), anything else none."""
    def count(start: int, stop: int) -> Iterator[int]:
        while start < stop:
            page = log.slice(start, stop, 8 << 20)
            if not page:
                return              # compacted meanwhile: RowTally.advance says so
            for entry in page:
                rows, commit = entry_shows(entry, verdict)
                yield rows if commit is None else commit_rows(commit)
            start = page[-1].index + 1
    return count


def commit_rows(header: list) -> int:
    """A commit header's rows (`envelope.header_of`): the metadata's per-payload row
    counts when they fit its staged entries, else one row a payload."""
    staged, metadata = header[6][2], header[6][3]
    rows = metadata.get("rows") if isinstance(metadata, dict) else None
    if isinstance(rows, list) and len(rows) == len(staged) and all(
            type(r) is int and r >= 0 for r in rows):
        return sum(rows)
    return len(staged)
