"""The Raft log as the core sees it: stable entries in `Storage`, the unstable tail here.

Also tracks the commit and apply positions and the configuration history (every
CONFIGURATION entry still in the log), because a node's configuration is a function of
its log: the last configuration entry, committed or not, and truncation rolls it back.

Lookups that can miss return None rather than raise: they sit on the hot path.
"""
from __future__ import annotations

from bisect import bisect_right
from operator import attrgetter
from typing import Sequence

from .configuration import EMPTY, Configuration
from .entry import Entry, EntryType, limit_size
from .errors import RaftError
from .storage import Snapshot, Storage

_CONFIGURATION = EntryType.CONFIGURATION
_type = attrgetter("type")


class RaftLog:
    def __init__(self, storage: Storage, base_configuration: Configuration = EMPTY,
                 applied: int = 0) -> None:
        self.storage = storage
        first, last = storage.first_index(), storage.last_index()
        self.unstable: list[Entry] = []
        self.unstable_offset = last + 1     # index of unstable[0]
        self.pending_snapshot: Snapshot | None = None   # received, not yet persisted
        self.persisted = last               # entries <= this are durable and current
        self.committed = first - 1
        self.applied = max(first - 1, applied)
        snapshot = storage.snapshot()
        # (index, configuration) of each configuration entry in the log, in order; the
        # base is what holds before them (the snapshot's, or the bootstrap one).
        self.base_configuration = snapshot.configuration if snapshot else base_configuration
        self._config_indexes: list[int] = []
        self._configs: list[Configuration] = []
        self._read_configurations()

    # -- positions ------------------------------------------------------------------------
    def first_index(self) -> int:
        if self.pending_snapshot is not None:
            return self.pending_snapshot.index + 1
        return self.storage.first_index()

    def last_index(self) -> int:
        return self.unstable_offset + len(self.unstable) - 1

    def term(self, index: int) -> int | None:
        """The term at `index`, or None when compacted away or beyond the end."""
        offset = self.unstable_offset
        if index >= offset:
            pos = index - offset
            return self.unstable[pos].term if pos < len(self.unstable) else None
        if self.pending_snapshot is not None:
            return self.pending_snapshot.term if index == self.pending_snapshot.index else None
        if index == 0:
            return 0
        try:
            return self.storage.term(index)
        except RaftError:
            return None

    def last_term(self) -> int:
        return self.term(self.last_index()) or 0

    def match_term(self, index: int, term: int) -> bool:
        return self.term(index) == term

    def is_up_to_date(self, last_index: int, last_term: int) -> bool:
        """Is a log ending at (last_index, last_term) at least as up to date as ours
        (Raft §5.4.1)?"""
        mine = self.last_term()
        return last_term > mine or (last_term == mine and last_index >= self.last_index())

    # -- reading --------------------------------------------------------------------------
    def slice(self, lo: int, hi: int, max_bytes: int | None = None) -> list[Entry]:
        """Entries [lo, hi) (at least one when lo < hi), within max_bytes."""
        if lo >= hi:
            return []
        if lo < self.first_index():
            raise RaftError(f"entries from {lo} are compacted")
        if hi > self.last_index() + 1:
            raise RaftError(f"entries up to {hi - 1} asked, last index is {self.last_index()}")
        offset = self.unstable_offset
        if lo >= offset:
            return limit_size(self.unstable[lo - offset:hi - offset], max_bytes)
        stable = self.storage.entries(lo, min(hi, offset), max_bytes)
        if hi <= offset or stable[-1].index < offset - 1:
            return stable
        more = limit_size(self.unstable[:hi - offset], None)
        return limit_size(stable + more, max_bytes)

    def next_committed(self, max_bytes: int | None) -> list[Entry]:
        """Committed entries not applied yet that are also durable here."""
        hi = min(self.committed, self.persisted)
        if hi <= self.applied or self.pending_snapshot is not None:
            return []
        return self.slice(self.applied + 1, hi + 1, max_bytes)

    def has_next_committed(self) -> bool:
        return self.pending_snapshot is None and min(self.committed, self.persisted) > self.applied

    # -- configuration ----------------------------------------------------------------------
    @property
    def configuration(self) -> Configuration:
        return self._configs[-1] if self._configs else self.base_configuration

    @property
    def configuration_index(self) -> int:
        """Index of the entry holding the current configuration (0: the base one)."""
        return self._config_indexes[-1] if self._config_indexes else 0

    def configuration_at(self, index: int) -> Configuration:
        """The configuration in force once entries up to `index` are in the log."""
        pos = bisect_right(self._config_indexes, index)
        return self._configs[pos - 1] if pos else self.base_configuration

    def _read_configurations(self) -> None:
        """The configuration entries of the stable log (once, at start): the storage
        names them, so only they are read (a scan of every entry took ~2 us each: 98 s
        of a 50M-entry node's start, benchmarks/RESULTS.md "growth")."""
        for index in self.storage.configuration_indexes():
            self._note_configurations(self.storage.entries(index, index + 1))

    def _note_configurations(self, entries: Sequence[Entry]) -> None:
        if _CONFIGURATION not in map(_type, entries):       # one C-level scan
            return
        for entry in entries:
            if entry.type is _CONFIGURATION:
                self._config_indexes.append(entry.index)
                self._configs.append(Configuration.decode(entry.data))

    def _forget_configurations_from(self, index: int) -> None:
        pos = bisect_right(self._config_indexes, index - 1)
        del self._config_indexes[pos:], self._configs[pos:]

    # -- writing --------------------------------------------------------------------------
    def append(self, entries: Sequence[Entry]) -> int:
        """Append entries whose first index may overlap the log (the overlap is cut)."""
        if not entries:
            return self.last_index()
        first = entries[0].index
        if first > self.last_index() + 1:
            raise RaftError(f"gap in the log: appending {first} after {self.last_index()}")
        if first <= self.committed:
            raise RaftError(f"refusing to overwrite committed entry {first} "
                            f"(commit index {self.committed})")
        offset = self.unstable_offset
        if first == offset + len(self.unstable):
            self.unstable.extend(entries)
        elif first <= offset:
            # Replaces part of what storage holds: the runtime truncates it when it
            # persists these entries (their first index is at or below its last).
            self.unstable = list(entries)
            self.unstable_offset = first
            self.persisted = min(self.persisted, first - 1)
            self._forget_configurations_from(first)
        else:
            del self.unstable[first - offset:]
            self.unstable.extend(entries)
            self.persisted = min(self.persisted, first - 1)
            self._forget_configurations_from(first)
        self._note_configurations(entries)
        return self.last_index()

    def find_conflict(self, entries: Sequence[Entry]) -> int:
        """Index of the first entry that is missing or has another term (0 if none).
        A stale or duplicated request whose entries we already hold yields 0, so it can
        never truncate the log."""
        for entry in entries:
            if self.term(entry.index) != entry.term:
                return entry.index
        return 0

    def maybe_append(self, prev_index: int, prev_term: int, commit: int,
                     entries: Sequence[Entry]) -> int | None:
        """Raft's AppendEntries receiver rules 2-5; the last index the request vouches
        for, or None when the log does not match at prev_index."""
        if not self.match_term(prev_index, prev_term):
            return None
        last_new = prev_index + len(entries)
        conflict = self.find_conflict(entries)
        if conflict:
            if conflict <= self.committed:
                raise RaftError(f"entry {conflict} conflicts with the committed log "
                                f"(commit index {self.committed})")
            self.append(entries[conflict - prev_index - 1:])
        self.commit_to(min(commit, last_new))
        return last_new

    def rejection_hint(self, prev_index: int) -> int:
        """Where the leader should resume after our log did not match at prev_index:
        after our last entry, or at the first entry of the conflicting term."""
        last = self.last_index()
        if prev_index > last:
            return last + 1
        conflict_term = self.term(prev_index)
        index = prev_index
        floor = max(self.committed + 1, self.first_index())
        while index > floor and self.term(index - 1) == conflict_term:
            index -= 1
        return max(index, floor)

    def commit_to(self, index: int) -> bool:
        if index > self.committed:
            if index > self.last_index():
                raise RaftError(f"commit index {index} beyond the last index {self.last_index()}")
            self.committed = index
            return True
        return False

    def applied_to(self, index: int) -> None:
        if index > self.applied:
            self.applied = index

    def stable_to(self, index: int, term: int) -> None:
        """The runtime persisted the entries handed out up to (index, term)."""
        if index < self.unstable_offset or self.term(index) != term:
            return      # replaced meanwhile: the replacement comes in a later ready
        del self.unstable[:index - self.unstable_offset + 1]
        self.unstable_offset = index + 1
        self.persisted = max(self.persisted, index)

    def restore(self, snapshot: Snapshot) -> None:
        """Replace the log by a snapshot received from the leader."""
        if snapshot.index <= self.committed:
            raise RaftError(f"snapshot {snapshot.index} is not beyond commit {self.committed}")
        self.pending_snapshot = snapshot
        self.unstable = []
        self.unstable_offset = snapshot.index + 1
        self.committed = snapshot.index
        self.persisted = 0
        self.base_configuration = snapshot.configuration
        self._config_indexes, self._configs = [], []

    def snapshot_persisted(self, snapshot: Snapshot) -> None:
        if self.pending_snapshot is snapshot:
            self.pending_snapshot = None
            self.persisted = max(snapshot.index, self.unstable_offset - 1)
            self.applied = max(self.applied, snapshot.index)


class LogView:
    """Read-only access to a node's log for the runtime's services (what they may see of
    the core's log, without the power to change it)."""

    __slots__ = ("_log",)

    def __init__(self, log: RaftLog) -> None:
        self._log = log

    def first_index(self) -> int:
        return self._log.first_index()

    def last_index(self) -> int:
        return self._log.last_index()

    def term(self, index: int) -> int | None:
        """The term at `index`, or None when compacted away or beyond the end."""
        return self._log.term(index)

    def slice(self, lo: int, hi: int, max_bytes: int | None = None) -> list[Entry]:
        """Entries [lo, hi) (at least one when lo < hi), within max_bytes."""
        return self._log.slice(lo, hi, max_bytes)

    @property
    def configuration_committed(self) -> bool:
        """Has the entry holding the current configuration committed?"""
        log = self._log
        return log.configuration_index <= log.committed

