"""A node's disk in the simulator: what survives a crash and what does not.

`SimDisk` is one group's volume; `NodeDisk` is the node's one disk that all its groups'
volumes share (one write order, one fsync, one crash). A volume models the runtime's storage (consensus.runtime.disk_storage): appends land in the
page cache until `sync()`; truncation, snapshots and a new term or vote are durable when
written (the engine fsyncs them before returning); a commit index alone is saved
lazily. A crash keeps the synced entries plus a random prefix of the unsynced ones - the
rest never reached the disk or was torn mid-record and is cut by the CRC check on
recovery - and the last saved hard state.
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
        self._lazy_hard: HardState | None = None    # a commit index saved lazily
        self.sparse: dict[int, Snapshot] = {}   # the application's sparse snapshots

    # -- the driver's Disk (consensus.raft.driver), less the sync's timing ------------------
    def write(self, rd: Ready) -> bool:
        """Snapshot (durable), entries (page cache; the truncation before them is
        durable at once). True when stored entries were dropped."""
        truncated = False
        if rd.snapshot is not None:
            self.apply_snapshot(rd.snapshot)
            self.sparse = {rd.snapshot.index: rd.snapshot}
            self.synced_last = rd.snapshot.index
        if rd.entries:
            truncated = rd.entries[0].index <= self.last_index()
            self.append(rd.entries)
            self.synced_last = min(self.synced_last, rd.entries[0].index - 1)
        return truncated

    def sync(self) -> None:
        """The fsync: the entries are durable, and a commit saved lazily with them."""
        self.synced_last = self.last_index()
        if self._lazy_hard is not None:
            self._save(self._lazy_hard)

    def save_hard_state(self, state: HardState, *, urgent: bool) -> None:
        """As the runtime's DiskStorage: a new term or vote at once; a commit index
        alone lazily (here: with the next sync, lost in a crash before it)."""
        if urgent:
            self._save(state)
        else:
            self._lazy_hard = state

    def _save(self, state: HardState) -> None:
        # never a commit beyond what the log holds durably (as DiskStorage)
        self.set_hard_state(HardState(state.term, state.vote,
                                      min(state.commit, max(self.synced_last,
                                                            self.first_index() - 1))))
        self._lazy_hard = None

    def crash(self, rng: random.Random) -> str:
        """Lose what was not synced; returns a note for the trace."""
        unsynced = self.last_index() - self.synced_last
        if unsynced <= 0:
            self._lazy_hard = None
            return "nothing unsynced"
        survive = rng.randint(0, unsynced)
        self.keep_unsynced(survive)
        torn = " (last record torn)" if survive < unsynced else ""
        return f"kept {survive}/{unsynced} unsynced entries{torn}"

    def keep_unsynced(self, survive: int) -> None:
        """The crash, once its tear point is known: the first `survive` unsynced entries
        stay, the rest and a lazily saved commit index are lost."""
        self._lazy_hard = None
        cut = self.synced_last + survive
        del self._entries[cut - self._base:]
        self.synced_last = cut

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


class NodeDisk:
    """One node's disk, shared by the volumes of all the groups it hosts, as a multi-Raft
    node's one write-ahead log: appends of every group land in one write order, one
    fsync makes all of them durable (a group's fsync ends with the disk's first fsync
    that began after its write), and a crash tears that one order at one point, so that
    every group of the node loses its writes after it at once."""

    def __init__(self, groups: range) -> None:
        self.volumes = {group: SimDisk() for group in groups}
        self.syncs = 0                              # fsyncs so far
        self._order: list[tuple[int, int]] = []     # (group, index) appended since the last sync

    def write(self, group: int, rd: Ready) -> bool:
        truncated = self.volumes[group].write(rd)
        self._order.extend((group, entry.index) for entry in rd.entries)
        return truncated

    def sync(self) -> None:
        for volume in self.volumes.values():
            volume.sync()
        self._order.clear()
        self.syncs += 1

    def crash(self, rng: random.Random) -> str:
        """Lose what was not synced, cut at one random point of the shared write order."""
        latest: dict[tuple[int, int], int] = {}     # an entry's last write wins
        for position, record in enumerate(self._order):
            latest[record] = position
        live = sorted(position for (group, index), position in latest.items()
                      if self.volumes[group].synced_last < index <= self.volumes[group].last_index())
        self._order.clear()
        cut = rng.randint(0, len(live))
        survivors = set(live[:cut])
        kept: dict[int, int] = {}       # per group: a prefix of its unsynced entries
        for (group, _), position in latest.items():
            if position in survivors:
                kept[group] = kept.get(group, 0) + 1
        notes = []
        for group, volume in self.volumes.items():
            unsynced = volume.last_index() - volume.synced_last
            volume.keep_unsynced(kept.get(group, 0))
            if unsynced > 0:
                notes.append(f"g{group} {kept.get(group, 0)}/{unsynced}")
        if not live:
            return "nothing unsynced"
        torn = " (torn)" if cut < len(live) else ""
        return f"kept {cut}/{len(live)} unsynced records{torn}: " + " ".join(notes)
