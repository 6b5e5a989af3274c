"""The passive server's pending list (pure): client updates the active has not yet published.

Clients send every KVSET to both servers of a Binary Star pair. The passive server holds
each one until the active's KVPUB with the same UUID shows it was applied; if the active
dies first, the new active applies what it still holds (zguide clonesrv6). The KVPUB can
also arrive before the client's own KVSET: its UUID is then remembered so the late KVSET
is dropped.

Two fixes over the reference peers, which keep both kinds forever: an unmatched active
publication (a ttl-expiry delete, or an update a client sent only to the active) is
forgotten after `horizon` seconds instead of being re-applied at the next failover, where
it would undo newer updates; a held KVSET is dropped after `horizon` too, since an
active that stays alive that long without publishing it has lost or refused it; and
after a snapshot the server `discard`s held KVSETs the snapshot shows applied (a passive
server that (re)started missed the KVPUBs published before it subscribed). Both lists
are bounded by `max_entries` (the oldest go first). A KVSET without a UUID cannot be
matched and is not held.

Times are monotonic seconds supplied by the caller.
"""
from __future__ import annotations

from collections import OrderedDict
from typing import Callable

from .proto import Kvpub, Kvset

HORIZON = 10.0
MAX_ENTRIES = 100_000


class PendingUpdates:
    def __init__(self, horizon: float = HORIZON, max_entries: int = MAX_ENTRIES) -> None:
        self.horizon = horizon
        self.max_entries = max_entries
        self._held: OrderedDict[bytes, tuple[float, Kvset]] = OrderedDict()
        self._published: OrderedDict[bytes, float] = OrderedDict()

    def __len__(self) -> int:
        return len(self._held)

    def client_update(self, update: Kvset, now: float) -> None:
        """A KVSET on the passive server's collector."""
        uuid = update.uuid
        if not uuid:
            return
        if self._published.pop(uuid, None) is not None:
            return   # the active already published it
        self._held[uuid] = (now, update)
        self._held.move_to_end(uuid)
        self._trim(self._held, now)

    def published(self, update: Kvpub, now: float) -> None:
        """A KVPUB from the active server."""
        uuid = update.uuid
        if not uuid or self._held.pop(uuid, None) is not None:
            return
        self._published[uuid] = now
        self._published.move_to_end(uuid)
        self._trim(self._published, now)

    def discard(self, applied: Callable[[Kvset], bool]) -> int:
        """Drop the held updates `applied` says the active already applied (e.g. found
        in a snapshot just taken from it); returns how many."""
        gone = [uuid for uuid, (_, update) in self._held.items() if applied(update)]
        for uuid in gone:
            del self._held[uuid]
        return len(gone)

    def take(self, now: float) -> list[Kvset]:
        """The held updates, oldest first, to apply when taking over; empties the list."""
        self.prune(now)
        held = [update for _, update in self._held.values()]
        self._held.clear()
        self._published.clear()
        return held

    def prune(self, now: float) -> None:
        self._trim(self._held, now)
        self._trim(self._published, now)

    def _trim(self, entries: OrderedDict, now: float) -> None:
        oldest = now - self.horizon
        while entries:
            first = next(iter(entries.values()))
            received = first[0] if isinstance(first, tuple) else first
            if received >= oldest and len(entries) <= self.max_entries:
                return
            entries.popitem(last=False)


__all__ = ["HORIZON", "MAX_ENTRIES", "PendingUpdates"]
