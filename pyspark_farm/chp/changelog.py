"""The changelog of a CHP map as the capture emits it (pure: no sockets, no farm).

CHP cannot replay history: a client sees each update once, live, and after any break
(its own start, a failover, a server that restarted) only a whole snapshot. The capture
turns that into a changelog with no gap by keeping its own memory of what it has emitted
(`Changelog.known`: per key, the sequence, UUID and a digest of the value) and feeding it
the client's watch stream:

* a live update (`update`) becomes one change, unless its sequence is not above the last
  one emitted (a repeat);
* a whole snapshot at sequence S (`resync`) becomes the differences between the memory
  and the snapshot: each key whose entry is not the one emitted last (with its own
  sequence), then a delete (at S) of each emitted key the snapshot lacks. These changes
  carry the property ``garlicfarm.resync = "A:S"``: the updates after sequence A (the last
  one emitted before) through S were not seen one by one, and these changes stand for
  them. Folding the changelog gives exactly the server's map at S;
* the first snapshot of a new capture emits the whole map (``startingOffsets`` snapshot,
  with ``garlicfarm.resync = "0:S"``) or nothing (``latest``).

After a driver restart the capture rebuilds the memory from the changes it wrote to the
farm (`replay`), so the next snapshot yields only what changed while it was away.
"""
from __future__ import annotations

import hashlib
from operator import attrgetter
from dataclasses import dataclass
from typing import Callable, Iterable

from connectors.chp.kvmap import Entry

RESYNC_PROPERTY = "garlicfarm.resync"
_BY_SEQUENCE = attrgetter("sequence")


@dataclass(slots=True)
class Change:
    """One row of the changelog (`deleted`: the key was removed; `value` is then empty).
    `resync` is the ``A:S`` range a snapshot difference stands for (None: live).

    Never modified once made: treat it as immutable. Not a frozen dataclass for the
    reason `kvmap.Entry` is not one: a snapshot makes one per key, and a frozen one
    costs several times more to construct."""
    key: bytes
    sequence: int
    uuid: bytes
    properties: bytes
    value: bytes
    deleted: bool
    resync: str | None = None


def digest(value: bytes) -> bytes:
    """A short fingerprint of a value: the memory keeps it instead of the value."""
    return hashlib.blake2b(value, digest_size=8).digest()


class Changelog:
    """What the capture has emitted so far, and what to emit next."""

    def __init__(self, *, emit_snapshot: bool) -> None:
        self.emit_snapshot = emit_snapshot
        # key -> (seq, uuid, digest); while `_deferred` is set, only what changed after
        # that snapshot (None: deleted), laid over it when `known` is first read
        self._known: dict[bytes, tuple[int, bytes, bytes] | None] = {}
        self._deferred: Callable[[], Iterable[Entry]] | None = None
        self.last: int | None = None       # the last sequence emitted or synced to
        self.has_history = False           # something was emitted before (or replayed)
        self.baseline: list[Change] = []   # a `latest` capture's first snapshot

    @property
    def known(self) -> dict[bytes, tuple[int, bytes, bytes]]:
        """Per key emitted: (sequence, UUID, digest of the value). A first snapshot taken
        whole (`take_whole`) is added here only now, when something needs it: a later
        snapshot to diff, never a query that ends before one."""
        if self._deferred is not None:
            load, self._deferred = self._deferred, None
            later, self._known = self._known, {}
            known = self._known
            for entry in load():
                known[entry.key] = (entry.sequence, entry.uuid, digest(entry.body))
            for key, signature in later.items():
                if signature is None:
                    known.pop(key, None)
                else:
                    known[key] = signature
        return self._known

    # ----------------------------------------------------------------- live
    def update(self, entry: Entry) -> Change | None:
        """A live update from the client; None for one already covered."""
        if self.last is None or entry.sequence <= self.last:
            return None
        self.last = entry.sequence
        self.has_history = True
        change = Change(entry.key, entry.sequence, entry.uuid, entry.properties, entry.body,
                        entry.deleted)
        self._remember(change)
        return change

    # ----------------------------------------------------------------- snapshots
    def resync(self, sequence: int, entries: Iterable[Entry]) -> list[Change]:
        """The changes a whole snapshot at `sequence` stands for (see the module doc)."""
        first = not self.has_history
        span = f"{0 if first else self.last}:{sequence}"
        self.last = sequence
        self.has_history = True
        if first and not self.emit_snapshot:
            # `latest`: nothing to emit, but the memory must survive a restart: the caller
            # writes `baseline` aside (not as rows) and `replay`s it after a restart.
            self.baseline = [Change(e.key, e.sequence, e.uuid, e.properties, e.body, False)
                             for e in entries]
            for change in self.baseline:
                self._remember(change)
            return []
        ordered = sorted(entries, key=_BY_SEQUENCE)
        known = self.known
        if not known:   # nothing emitted yet (a new capture's first snapshot): all of it
            for entry in ordered:
                known[entry.key] = (entry.sequence, entry.uuid, digest(entry.body))
            return [Change(e.key, e.sequence, e.uuid, e.properties, e.body, False, span)
                    for e in ordered]
        changes: list[Change] = []
        present = set()
        for entry in ordered:
            present.add(entry.key)
            signature = (entry.sequence, entry.uuid, digest(entry.body))
            if known.get(entry.key) != signature:
                known[entry.key] = signature
                changes.append(Change(entry.key, entry.sequence, entry.uuid, entry.properties,
                                      entry.body, False, span))
        for key in sorted(k for k in known if k not in present):
            _, uuid, _ = known.pop(key)
            changes.append(Change(key, sequence, uuid, b"", b"", True, span))
        return changes

    def take_whole(self, sequence: int, entries: Callable[[], Iterable[Entry]]
                   ) -> str | None:
        """A new capture's first snapshot, emitted whole (``startingOffsets`` snapshot)
        by the caller from its columns: returns its ``garlicfarm.resync`` span, and
        remembers `entries` (called later, if ever: `known`). None when this snapshot is
        not that one; then `resync` is the way."""
        if self.has_history or not self.emit_snapshot or self._known or \
                self._deferred is not None:
            return None
        self.last = sequence
        self.has_history = True
        self._deferred = entries
        return f"0:{sequence}"

    # ----------------------------------------------------------------- restart
    def replay(self, change: Change) -> None:
        """A change the capture wrote before (read back from the farm, in order; the
        caller then sets `last` from what the capture recorded with them)."""
        self.has_history = True
        self._remember(change)
        self.last = change.sequence


    def _remember(self, change: Change) -> None:
        if self._deferred is not None:   # over a snapshot not yet in `known`
            self._known[change.key] = None if change.deleted else \
                (change.sequence, change.uuid, digest(change.value))
        elif change.deleted:
            self._known.pop(change.key, None)
        else:
            self._known[change.key] = (change.sequence, change.uuid, digest(change.value))
