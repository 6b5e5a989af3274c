"""What the core reads from stable storage, and an in-memory implementation.

Like etcd-io/raft, the core keeps only the unstable tail of its log in memory and reads
everything the runtime has persisted through `Storage`. The runtime implements it over
`consensus.storage.SegmentedLog` (entries), `HardStateFile` and `SnapshotStore`;
`MemoryStorage` serves the tests, the simulator and the benchmark.

Index 1 is the first entry of a log; 0 means "no entry". `term(first_index() - 1)` must
answer (with the term of the last compacted entry, 0 for an empty log), and the latest
snapshot must cover everything compacted: its index is at least first_index() - 1.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol, Sequence

# One record for the core and the file it is saved in (consensus/storage/hardstate.py).
from consensus.storage.hardstate import HardState

from .configuration import EMPTY, Configuration
from .entry import Entry, EntryType, limit_size
from .errors import CompactedError, RaftError, UnavailableError

if TYPE_CHECKING:
    from .ready import Ready


@dataclass(frozen=True)
class Snapshot:
    """The application's state after applying entries up to `index` (of `term`), and
    the configuration in force at that index."""

    index: int
    term: int
    configuration: Configuration = EMPTY
    data: bytes = b""


class Storage(Protocol):
    """Read access to the persisted part of a node's log (implemented by the runtime)."""

    def initial_state(self) -> HardState:
        """The hard state saved last (HardState() when none)."""

    def first_index(self) -> int:
        """The first index with an entry (snapshot index + 1)."""

    def last_index(self) -> int:
        """The last index with an entry (first_index() - 1 when empty)."""

    def term(self, index: int) -> int:
        """The term at `index`, for first_index() - 1 <= index <= last_index().
        Raises CompactedError below, UnavailableError above."""

    def entries(self, lo: int, hi: int, max_bytes: int | None = None) -> list[Entry]:
        """Entries [lo, hi), at least one when lo < hi, then no more than max_bytes."""

    def configuration_indexes(self) -> list[int]:
        """The indexes of the CONFIGURATION entries in [first_index(), last_index()], in
        order (RaftLog reads them at start: the configuration is a function of the log).
        A storage on disk answers from what it keeps per entry, without reading the log."""

    def snapshot(self) -> Snapshot | None:
        """The latest snapshot (index >= first_index() - 1); None if there is none."""

    def catch_up_snapshot(self) -> Snapshot | None:
        """The snapshot a member that lags behind first_index() installs: the oldest kept
        one at or above first_index() - 1 (retention.catch_up_index), so that every
        entry the log holds after it can follow; None if there is none."""


class MemoryStorage:
    """`Storage` in memory, with the write side the runtime (here: the tests and the
    simulator) uses to persist what `Ready` hands out."""

    def __init__(self, snapshot: Snapshot | None = None) -> None:
        self._hard_state = HardState()
        self._snapshot = snapshot
        self._base = snapshot.index if snapshot else 0          # index of the entry before
        self._base_term = snapshot.term if snapshot else 0      # entries[0]
        self._entries: list[Entry] = []

    # -- Storage ------------------------------------------------------------------------
    def initial_state(self) -> HardState:
        return self._hard_state

    def first_index(self) -> int:
        return self._base + 1

    def last_index(self) -> int:
        return self._base + len(self._entries)

    def term(self, index: int) -> int:
        if index == self._base:
            return self._base_term
        if index < self._base:
            raise CompactedError(f"index {index} is compacted (first index {self._base + 1})")
        if index > self._base + len(self._entries):
            raise UnavailableError(f"index {index} is beyond the last index "
                                   f"{self._base + len(self._entries)}")
        return self._entries[index - self._base - 1].term

    def entries(self, lo: int, hi: int, max_bytes: int | None = None) -> list[Entry]:
        if lo <= self._base:
            raise CompactedError(f"index {lo} is compacted (first index {self._base + 1})")
        if hi > self._base + len(self._entries) + 1:
            raise UnavailableError(f"entries up to {hi - 1} asked, last index is "
                                   f"{self._base + len(self._entries)}")
        return limit_size(self._entries[lo - self._base - 1:hi - self._base - 1], max_bytes)

    def configuration_indexes(self) -> list[int]:
        return [e.index for e in self._entries if e.type is EntryType.CONFIGURATION]

    def snapshot(self) -> Snapshot | None:
        return self._snapshot

    def catch_up_snapshot(self) -> Snapshot | None:
        return self._snapshot       # the only one kept: compact() never passes it

    # -- the write side: the Ready driver's Disk (driver.py), in memory -------------------
    def persist(self, rd: "Ready") -> None:
        """Store all of a Ready at once (tests that drive a node by hand)."""
        self.write(rd)
        if rd.hard_state is not None:
            self._hard_state = rd.hard_state

    def write(self, rd: "Ready") -> bool:
        """Store the snapshot, then the entries; True when stored entries were dropped."""
        if rd.snapshot is not None:
            self.apply_snapshot(rd.snapshot)
        truncated = bool(rd.entries) and rd.entries[0].index <= self.last_index()
        self.append(rd.entries)
        return truncated

    def start_sync(self) -> bool:
        return False            # memory: durable on write

    def sync_done(self) -> bool:
        return True

    def save_hard_state(self, state: HardState, *, urgent: bool) -> None:
        self._hard_state = state

    def set_hard_state(self, state: HardState) -> None:
        self._hard_state = state

    def append(self, entries: Sequence[Entry]) -> None:
        """Append, first dropping every stored entry at or after entries[0].index."""
        if not entries:
            return
        first = entries[0].index
        if first <= self._base:
            raise CompactedError(f"cannot overwrite compacted index {first}")
        if first > self.last_index() + 1:
            raise RaftError(f"gap in the log: appending {first} after {self.last_index()}")
        del self._entries[first - self._base - 1:]
        self._entries.extend(entries)

    def apply_snapshot(self, snapshot: Snapshot) -> None:
        """Replace everything by a snapshot received from the leader."""
        self._snapshot = snapshot
        self._base, self._base_term = snapshot.index, snapshot.term
        self._entries = []

    def create_snapshot(self, snapshot: Snapshot) -> None:
        """Record a snapshot the application took at an index still in the log."""
        if snapshot.index < self._base:
            raise CompactedError(f"snapshot {snapshot.index} is older than the log start")
        if snapshot.index > self.last_index():
            raise UnavailableError(f"snapshot {snapshot.index} is beyond the last index")
        self._snapshot = snapshot

    def compact(self, index: int) -> None:
        """Drop the entries up to `index`, which the latest snapshot must cover."""
        if index <= self._base:
            return
        if self._snapshot is None or self._snapshot.index < index:
            raise RaftError(f"compacting to {index} needs a snapshot at or after it first")
        if index > self.last_index():
            raise UnavailableError(f"cannot compact beyond the last index {self.last_index()}")
        self._base_term = self.term(index)
        del self._entries[:index - self._base]
        self._base = index
