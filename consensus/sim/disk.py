"""A node's disk in the simulator: what survives a crash and what does not.

It models the runtime's storage engine (consensus.storage): appends land in the page
cache until `sync()`; truncation, snapshots and the hard-state file are durable when
written (the engine fsyncs them before returning). A crash keeps the synced entries plus
a random prefix of the unsynced ones - the rest never reached the disk or was torn
mid-record and is cut by the CRC check on recovery - and the last synced hard state.
"""
from __future__ import annotations

import bisect
import random

from consensus.raft import HardState, MemoryStorage, Ready, Snapshot
from consensus.raft.retention import catch_up_index, compaction_point, snapshots_to_keep


class SimDisk(MemoryStorage):
    def __init__(self) -> None:
        super().__init__()
        self.synced_last = 0            # entries <= this are on disk
        self._pending_hard: HardState | None = None
        self.sparse: dict[int, Snapshot] = {}   # the application's sparse snapshots

    # -- what the host does with a Ready ------------------------------------------------------
    def write(self, rd: Ready) -> None:
        """Phase one: snapshot (durable), entries (page cache), hard state (staged)."""
        hard = self.initial_state()
        self.persist(rd)
        if rd.snapshot is not None:
            self.sparse = {rd.snapshot.index: rd.snapshot}
            self.synced_last = rd.snapshot.index
        if rd.entries:      # the truncation before the append is durable at once
            self.synced_last = min(self.synced_last, rd.entries[0].index - 1)
        if rd.hard_state is not None:
            self._pending_hard = rd.hard_state
            self.set_hard_state(hard)       # not on disk before sync()

    def sync(self) -> None:
        """Phase two: fsync the entries, then save the hard state."""
        self.synced_last = self.last_index()
        if self._pending_hard is not None:
            self.set_hard_state(self._pending_hard)
            self._pending_hard = None

    def crash(self, rng: random.Random) -> str:
        """Lose what was not synced; returns a note for the trace."""
        self._pending_hard = None
        unsynced = self.last_index() - self.synced_last
        if unsynced <= 0:
            return "nothing unsynced"
        survive = rng.randint(0, unsynced)
        cut = self.synced_last + survive
        del self._entries[cut - self._base:]
        self.synced_last = cut
        torn = " (last record torn)" if survive < unsynced else ""
        return f"kept {survive}/{unsynced} unsynced entries{torn}"

    # -- snapshots --------------------------------------------------------------------------
    def save_snapshot(self, snapshot: Snapshot) -> None:
        """Store the application's snapshot (durable); `compact_to` prunes."""
        self.create_snapshot(snapshot)
        self.sparse[snapshot.index] = snapshot

    def compact_to(self, needed_from: int, keep: int) -> None:
        """As the runtime's DiskStorage.compact: drop entries below `needed_from` up to
        a kept snapshot (retention.compaction_point), then keep the newest `keep`
        snapshots and the one that catches members up."""
        point = compaction_point(self.sparse, needed_from)
        if point is not None and point > self.first_index():
            self.compact(point - 1)
        kept = snapshots_to_keep(self.sparse, self.first_index(), keep)
        for index in [i for i in self.sparse if i not in kept]:
            del self.sparse[index]

    def catch_up_snapshot(self) -> Snapshot | None:
        index = catch_up_index(self.sparse, self.first_index())
        return self.sparse[index] if index is not None else None

    def nearest_at_or_below(self, index: int) -> Snapshot | None:
        keys = sorted(self.sparse)
        pos = bisect.bisect_right(keys, index)
        return self.sparse[keys[pos - 1]] if pos else None
