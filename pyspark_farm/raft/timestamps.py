"""Where a time falls in a farm's log: `startingTimestamp` / `endingTimestamp` of the raft
source, as Kafka's source has them.

Every farm command carries the leader's clock when it appended the entry (the
``timestamp`` column). The position of a time T is the first entry appended at or after
T; entries without a stamp (a new leader's no-op, configuration and status entries)
belong to the next stamped entry. With leaders whose clocks agree, stamps never go down
along the log, so a binary search over entry headers (`read_entries(payloads=False)`,
a few small pages, on the driver) finds it in O(log n) reads. A leader whose clock is
behind its predecessor's makes stamps step back; the search then still returns an entry
stamped at or after T whose stamped predecessor is before T, as Kafka's time index does
for out-of-order record times.
"""
from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from consensus.client import FarmClient

PROBE_ENTRIES = 64          #: headers per probe when looking for the next stamped entry
PROBE_BYTES = 64 << 10


def next_stamp(client: "FarmClient", index: int, end: int) -> tuple[int, int] | None:
    """(index, stamp) of the first stamped entry in [index, end); None when none is."""
    while index < end:
        page = client.read_entries(index, min(end, index + PROBE_ENTRIES), payloads=False,
                                   max_bytes=PROBE_BYTES)
        for record in page:
            if record.timestamp_ms > 0:
                return record.index, record.timestamp_ms
        index = page[-1].index + 1
    return None


def index_at_time(client: "FarmClient", ms: int, first: int, end: int) -> int:
    """The first index of [first, end) appended at or after `ms` (ms since the epoch);
    `end` when every entry there is older."""
    low, high = first, end              # the answer is in [low, high]
    while low < high:
        middle = (low + high) // 2
        found = next_stamp(client, middle, high)
        if found is None or found[1] >= ms:
            high = middle
        else:
            low = found[0] + 1
    return low
