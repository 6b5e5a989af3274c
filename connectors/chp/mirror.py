"""Keeping a copy of a clone server's map: snapshot first, then updates (pure).

Both the client and a passive Binary Star server keep a replica of an active server's
map the same way, so they share this state machine. It owns no sockets: the caller
feeds it what arrived on its SUB (KVPUB, HUGZ) and its snapshot DEALER (KVSYNC,
KTHXBAI) and sends the ICANHAZ it asks for.

Phases:

1. SUBSCRIBING: the SUB is connected but ZeroMQ gives no sign the subscription has
   reached the server (the slow joiner problem). Asking for the snapshot now could
   miss the updates published between the snapshot and the subscription taking hold,
   so we wait for the first message on the SUB, any message (HUGZ comes every second;
   our own server also sends one as soon as it sees a new subscription).
2. REQUESTING: the subscription is live; `wants_snapshot` tells the caller to send
   `snapshot_request()`.
3. SYNCING: KVSYNCs are collected, updates buffered; KTHXBAI's sequence S ends it, the
   buffered updates above S are applied and `on_snapshot` returns a `Synced` with what
   changed against the replica we had before.
4. LIVE: an update is applied only if its sequence is above the last one (RFC 12).
   Beyond the reference clients, a resync is asked for (back to REQUESTING) when the
   server's sequence goes backwards (a HUGZ below our sequence: it restarted without
   its data) and, for a replica of the whole map (empty subtree, whose sequences are
   consecutive), when a sequence is skipped (an update was lost on the way).

Resuming (`resume`): a replica that was synchronised with a replicated map and asks a
server announcing the same map (in its HUGZ) asks for the updates after its sequence
rather than a whole snapshot; the server sends exactly those, so the changes reported
are every update, in order, with no gap and no repeat. Such a replica leaves phase 1
on a HUGZ only (not on an update), since only a HUGZ says whether it may resume.

Times are epoch seconds, used to turn relative ttls into absolute ones.
"""
from __future__ import annotations

import enum

from . import resume
from .kvmap import CloneMap, Entry
from .proto import Hugz, Icanhaz, Kthxbai, KvBulk, Kvpub, Kvsync

MAX_BUFFERED = 1_000_000   # updates buffered while syncing before starting over


class MirrorPhase(enum.Enum):
    SUBSCRIBING = "subscribing"
    REQUESTING = "requesting"
    SYNCING = "syncing"
    LIVE = "live"


class BulkEntries:
    """A whole snapshot that came as KVBULK columns, kept as they came: the `Entry` per
    key (what `entries` returns, once) is made only when someone needs it. A consumer
    that can use the columns (`parts`: the chp capture turns them into Arrow) never
    pays a loop per key; the replica's map is built from it the first time it is read."""

    def __init__(self, parts: list[KvBulk], subtree: bytes) -> None:
        self.parts = parts
        self.subtree = subtree
        self._entries: list[Entry] | None = None

    def __len__(self) -> int:
        """The entries sent (before dropping deletes and keys outside the subtree)."""
        return sum(len(part) for part in self.parts)

    def entries(self) -> list[Entry]:
        """The stored entries under the subtree (empty bodies dropped), in order."""
        if self._entries is None:
            self._entries = _stored(self.parts, self.subtree, with_deletes=False)
        return self._entries


def _stored(parts: list[KvBulk], subtree: bytes, *, with_deletes: bool) -> list[Entry]:
    """The entries of KVBULKs whose key is under `subtree`, in order, as stored entries
    (`with_deletes`: those with an empty body too)."""
    stored = Entry.stored
    return [stored(*row) for part in parts for row in part.rows()
            if (with_deletes or row[4]) and row[0].startswith(subtree)]


class Synced:
    """A snapshot completed: the replica is at `sequence`; `changes` are the entries
    that differ from the replica before it (removed keys as entries with empty body).

    For a whole snapshot (not a resume), `snapshot` holds its entries (the map at `at`,
    KTHXBAI's sequence, under the subtree) and `updates` the buffered updates applied
    after it (the tail of `changes`): what a consumer keeping its own copy of the map
    needs to compute its own differences (`client.Resync`). A resume leaves `snapshot`
    None: its `changes` are every update, in order.

    A snapshot that came in KVBULK columns is `bulk` (`BulkEntries`); then `snapshot`
    and `changes` are computed when first read (from the map before and the snapshot,
    neither of which changes afterwards), so a consumer of the columns pays for
    neither."""
    __slots__ = ("sequence", "resyncs", "updates", "at", "bulk", "_snapshot", "_changes",
                 "_before", "_subtree")

    def __init__(self, sequence: int, changes: list[Entry] | None = None, resyncs: int = 0,
                 snapshot: list[Entry] | None = None, updates: list[Entry] | None = None,
                 at: int = 0, *, bulk: BulkEntries | None = None,
                 before: CloneMap | None = None, subtree: bytes = b"") -> None:
        self.sequence = sequence
        self.resyncs = resyncs
        self.updates = [] if updates is None else updates
        self.at = at
        self.bulk = bulk
        self._snapshot = snapshot
        self._changes = changes
        self._before = before
        self._subtree = subtree

    @property
    def snapshot(self) -> list[Entry] | None:
        if self._snapshot is None and self.bulk is not None:
            self._snapshot = self.bulk.entries()
        return self._snapshot

    @property
    def changes(self) -> list[Entry]:
        if self._changes is None:
            assert self._before is not None and self.snapshot is not None
            self._changes = _differences(self._before, self.snapshot, self.at,
                                         self._subtree) + self.updates
            self._before = None
        return self._changes


class Mirror:
    """A replica of the keys under `subtree` (a byte prefix) of a server's map."""

    def __init__(self, subtree: bytes = b"", clone_map: CloneMap | None = None, *,
                 max_buffered: int = MAX_BUFFERED) -> None:
        self.subtree = subtree
        self.map = clone_map if clone_map is not None else CloneMap()
        self.phase = MirrorPhase.SUBSCRIBING
        self.max_buffered = max_buffered
        self.resyncs = 0            # how many times a gap or regression forced a resync
        self._snapshot: list[Entry] = []
        self._bulk: list[KvBulk] = []   # a whole snapshot's KVBULKs, as they came
        self._buffer: list[Kvpub] = []
        self._contiguous = not subtree
        self.identity: bytes | None = None   # the replicated map we are a replica of
        self._offered: bytes | None = None   # the map the server we talk to announces
        self._resume_from: int | None = None

    @property
    def live(self) -> bool:
        return self.phase is MirrorPhase.LIVE

    @property
    def wants_snapshot(self) -> bool:
        return self.phase is MirrorPhase.REQUESTING

    def restart(self) -> None:
        """Start over with a (new) server: wait for its subscription, then resync.
        The entries are kept until the new snapshot replaces them."""
        self.phase = MirrorPhase.SUBSCRIBING
        self._snapshot = []
        self._bulk = []
        self._buffer = []
        self._offered = None

    def resync(self) -> None:
        """Ask for a new snapshot from the same server (its subscription is live)."""
        self.resyncs += 1
        self.phase = MirrorPhase.REQUESTING
        self._snapshot = []
        self._bulk = []
        self._buffer = []

    def snapshot_request(self) -> Icanhaz:
        """The ICANHAZ to send now; the replica then waits for the snapshot. It asks to
        resume when the server announces the map this replica is in sync with."""
        self.phase = MirrorPhase.SYNCING
        if self.identity is not None and self._offered == self.identity:
            self._resume_from = self.map.sequence
            return Icanhaz(self.subtree,
                           properties=resume.request(self.map.sequence, self.identity))
        self._resume_from = None
        return Icanhaz(self.subtree)

    # ----------------------------------------------------------------- publisher
    def on_hugz(self, msg: Hugz) -> None:
        if msg.properties:
            self._offered = resume.identity_of(msg.properties)
        phase = self.phase
        if phase is MirrorPhase.LIVE:
            sequence = self.map.sequence
            if msg.sequence < sequence or (self._contiguous and msg.sequence > sequence):
                self.resync()
        elif phase is MirrorPhase.SUBSCRIBING:
            self.phase = MirrorPhase.REQUESTING

    def on_update(self, msg: Kvpub, now: float) -> Entry | None:
        """A KVPUB from the server; returns the entry applied, if any."""
        phase = self.phase
        if phase is MirrorPhase.LIVE:
            if not msg.key.startswith(self.subtree):
                return None   # a key that shares the HUGZ prefix, outside our subtree
            if self._contiguous and msg.sequence > self.map.sequence + 1:
                self.resync()
                return None
            return self.map.follow(msg, now)
        if phase is MirrorPhase.SYNCING:
            if len(self._buffer) >= self.max_buffered:
                self.resync()
            elif msg.key.startswith(self.subtree):
                self._buffer.append(msg)
        elif phase is MirrorPhase.SUBSCRIBING and self.identity is None:
            self.phase = MirrorPhase.REQUESTING   # the snapshot will hold this update
        # (a replica that may resume waits for a HUGZ, which says whether it can)
        return None

    # ----------------------------------------------------------------- snapshot
    def on_snapshot(self, msg: Kvsync | KvBulk | Kthxbai, now: float) -> Synced | None:
        """A message on the snapshot socket; returns `Synced` on KTHXBAI. A KVBULK
        (our servers' bulk answer) counts as the KVSYNCs it holds."""
        if self.phase is not MirrorPhase.SYNCING:
            return None   # a late reply to an abandoned request
        if isinstance(msg, Kvsync):
            self._unbulk()
            if msg.key.startswith(self.subtree):   # deletes count when resuming
                self._snapshot.append(Entry.stored(msg.key, msg.sequence, msg.uuid,
                                                   msg.properties, msg.body))
            return None
        if isinstance(msg, KvBulk):
            self._bulk.append(msg)   # a whole snapshot: kept as columns (BulkEntries)
            if self._resume_from is not None or self._snapshot:
                self._unbulk()       # part of a resume, or after KVSYNCs: as entries
            return None
        resumed = resume.resumed_from(msg.properties) if msg.properties else None
        identity = resume.identity_of(msg.properties) if msg.properties else None
        if resumed is not None:
            self._unbulk()
            if resumed != self._resume_from or resumed != self.map.sequence:
                self.identity = None     # not what we asked for: a whole snapshot, then
                self.resync()
                return None
            changes = self._snapshot
            for entry in changes:
                self.map.replay(entry)
            self.map.sequence = max(self.map.sequence, msg.sequence)
            snapshot = None
        else:
            old = self.map
            if self._bulk:
                bulk = BulkEntries(self._bulk, self.subtree)
                self.map = CloneMap.deferred(msg.sequence, bulk.entries,
                                             track_changes=old.track_changes)
            else:
                bulk = None
                snapshot = [e for e in self._snapshot if e.body]
                self.map = CloneMap(msg.sequence, snapshot, track_changes=old.track_changes)
        self.identity = identity
        self.phase = MirrorPhase.LIVE
        buffered, self._buffer, self._snapshot, self._bulk = self._buffer, [], [], []
        updates = self._apply_buffered(buffered, now)
        if resumed is not None:
            return Synced(self.map.sequence, changes + updates, self.resyncs, None, updates,
                          msg.sequence)
        return Synced(self.map.sequence, None, self.resyncs, None if bulk else snapshot,
                      updates, msg.sequence, bulk=bulk, before=old, subtree=self.subtree)

    def _unbulk(self) -> None:
        """KVBULKs then something else in one answer (never from our servers): the
        entries in the order they came, as entries."""
        if self._bulk:
            parts, self._bulk = self._bulk, []
            self._snapshot += _stored(parts, self.subtree, with_deletes=True)

    def _apply_buffered(self, buffered: list[Kvpub], now: float) -> list[Entry]:
        """The updates that came while syncing, above the new sequence."""
        changes = []
        for update in buffered:
            if not self.live:
                break   # a gap in the buffered updates: resync again
            entry = self.on_update(update, now)
            if entry is not None:
                changes.append(entry)
        return changes


def _differences(old: CloneMap, snapshot: list[Entry], sequence: int,
                 subtree: bytes) -> list[Entry]:
    """Entries of the snapshot (at `sequence`) that are not the same update in `old`
    (same sequence, UUID and body: the properties may differ by a ttl made absolute on
    another clock), then deletions of the keys the snapshot lacks."""
    new = {e.key: e for e in snapshot}
    changes = [e for e in new.values() if not _same_update(old.get(e.key), e)]
    changes += [Entry(e.key, sequence, e.uuid, b"", b"") for e in old.entries(subtree)
                if e.key not in new]
    return changes


def _same_update(a: Entry | None, b: Entry) -> bool:
    return a is not None and a.sequence == b.sequence and a.uuid == b.uuid \
        and a.body == b.body


__all__ = ["BulkEntries", "MAX_BUFFERED", "MirrorPhase", "Mirror", "Synced"]
