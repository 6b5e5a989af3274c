"""Bulk snapshots: garlicfarm's server and client move a snapshot as KVBULK columns.

A classic snapshot (RFC 12) is one five-frame KVSYNC per key: a snapshot of N keys costs
5N frames to send, receive and decode, one at a time, in Python. Between our own server
and our own client the same entries travel as a few KVBULK messages (`proto.KvBulk`:
lengths + concatenated bytes per column, which a reader turns into Arrow arrays without
a loop per entry), then the ordinary KTHXBAI with the snapshot's sequence.

Nothing new reaches a zguide peer (docs/protocol.md, "CHP bulk snapshot"):

* The request is the ordinary ``ICANHAZ?`` + subtree; what asks for bulk is the ZeroMQ
  routing id of the client's snapshot DEALER (`routing_id`: `BULK_ROUTING_PREFIX` and
  16 random bytes). A zguide server routes by it and answers with KVSYNCs as always; a
  new request command would make the Python zguide server exit and the C one misread
  the rest of its socket (tests/vectors/chp/LAYOUT.md §3), so there is none.
* Our server answers bulk only to such a DEALER, so a zguide client (default routing id)
  gets KVSYNCs. A server started with ``--no-bulk`` answers everyone with KVSYNCs: our
  client takes either answer, whichever comes (the fallback costs no timeout).

The server sends the slices of one reply one per loop turn (`BulkReply`), from the
entries it took when the request arrived, so updates keep flowing meanwhile and the
snapshot stays the map at KTHXBAI's sequence.
"""
from __future__ import annotations

import os
from typing import Iterator, Sequence

from .proto import (BULK_ROUTING_PREFIX, DEFAULT_LIMITS, EntryLike, Kthxbai, ChpLimits,
                    bulk_column_bytes, encode, encode_bulk)

SLICE_ENTRIES = 16384          # entries per KVBULK sent by our server
SLICE_BYTES = 4 << 20          # bytes per column frame of a KVBULK (a bigger entry goes alone)


def routing_id() -> bytes:
    """A snapshot DEALER's routing id that asks our servers for KVBULK answers."""
    return BULK_ROUTING_PREFIX + os.urandom(16)


def wants_bulk(identity: bytes) -> bool:
    """Whether the peer behind this ROUTER identity asked for KVBULK answers."""
    return identity.startswith(BULK_ROUTING_PREFIX)


def slices(entries: Sequence[EntryLike], limits: ChpLimits = DEFAULT_LIMITS, *,
           max_entries: int = SLICE_ENTRIES, max_bytes: int = SLICE_BYTES
           ) -> Iterator[Sequence[EntryLike]]:
    """`entries` cut into runs that each make a KVBULK within `limits`: at most
    `max_entries` entries and `max_bytes` per column frame (a larger entry alone). A
    run too big is halved until it fits (sizes summed by C loops, not per entry)."""
    max_entries = max(1, min(max_entries, limits.max_bulk_entries))
    max_bytes = min(max_bytes, limits.max_bulk_bytes)
    start, count = 0, len(entries)
    while start < count:
        stop = min(start + max_entries, count)
        while stop - start > 1:
            part = entries[start:stop]
            if bulk_column_bytes(part) <= max_bytes:
                break
            stop = start + (stop - start) // 2
        yield entries[start:stop]
        start = stop


class BulkReply:
    """One client's bulk answer in progress on a server: KVBULK slices, then KTHXBAI."""

    def __init__(self, identity: bytes, entries: Sequence[EntryLike], end: Kthxbai,
                 limits: ChpLimits = DEFAULT_LIMITS) -> None:
        self.identity = identity
        self.end = end
        self._slices = slices(entries, limits)
        self.done = False

    def next_message(self) -> list[bytes]:
        """The frames of the next message (routing id first); the last is KTHXBAI."""
        part = next(self._slices, None)
        if part is None:
            self.done = True
            return [self.identity, *encode(self.end)]
        return [self.identity, *encode_bulk(part)]


__all__ = ["BulkReply", "SLICE_BYTES", "SLICE_ENTRIES", "routing_id", "slices",
           "wants_bulk"]
