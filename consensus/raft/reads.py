"""Reads without writing to the log.

- ReadIndex (Raft dissertation §6.4): the leader notes its commit index, confirms with a
  heartbeat round that a quorum still follows it, and hands back a `ReadState`; the
  runtime reads once it has applied up to that index.
- Lease reads (JournalKeeper): if the responses of a quorum were sent within the lease
  window, the leader answers at once; otherwise the read waits for the next round.
  Heartbeats carry a send stamp `ctx` = tick << 20 | round, echoed by the responses, so
  the leader knows both when and in which round each follower last confirmed it.
- Two-step reads (JournalKeeper): step one is a ReadIndex at the leader; step two,
  `query_snapshot(index)` at any node, answers from the state at exactly that index,
  rebuilt from the nearest sparse snapshot at or below it plus the log after it.
"""
from __future__ import annotations

import enum
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable, Iterable, Protocol

from .entry import Entry, EntryType
from .messages import PullStatus

STAMP_BITS = 20


def stamp_tick(ctx: int) -> int:
    """The leader tick at which a message with this `ctx` was sent."""
    return ctx >> STAMP_BITS


class ReadStatus(enum.Enum):
    OK = "ok"                       #: apply up to `index`, then read
    NOT_LEADER = "not_leader"       #: leadership was lost: retry at the new leader
    TIMEOUT = "timeout"             #: no quorum confirmed the leader in time


@dataclass(frozen=True, slots=True)
class ReadState:
    """The answer to `RaftNode.read_index(ctx)`."""

    ctx: bytes
    index: int
    status: ReadStatus = ReadStatus.OK


@dataclass(slots=True)
class PendingRead:
    ctx: bytes
    index: int              # the commit index when the read arrived
    stamp: int              # heartbeats at or after this stamp confirm it
    since_tick: int
    requester: int | None   # a follower that forwarded it, or None for a local read


class ReadTracker:
    """Reads waiting for their confirming heartbeat round, oldest first."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.pending: deque[PendingRead] = deque()

    def __len__(self) -> int:
        return len(self.pending)

    def add(self, read: PendingRead) -> bool:
        if len(self.pending) >= self.limit:
            return False
        self.pending.append(read)
        return True

    def release(self, confirmed: Callable[[int], bool]) -> list[PendingRead]:
        """Pop the reads whose stamp a quorum has confirmed (stamps only grow)."""
        out: list[PendingRead] = []
        while self.pending and confirmed(self.pending[0].stamp):
            out.append(self.pending.popleft())
        return out

    def expire(self, now: int, timeout: int) -> list[PendingRead]:
        out: list[PendingRead] = []
        while self.pending and now - self.pending[0].since_tick >= timeout:
            out.append(self.pending.popleft())
        return out

    def drain(self) -> list[PendingRead]:
        out = list(self.pending)
        self.pending.clear()
        return out


# -- two-step reads -------------------------------------------------------------------------
class StateMachine(Protocol):
    """The application the runtime applies committed entries to (pluggable)."""

    def apply(self, entry: Entry) -> Any:
        """Apply one APPLICATION entry; the result goes back to the proposer."""

    def snapshot(self) -> bytes:
        """The whole state, as restore() takes it."""

    def restore(self, data: bytes) -> None:
        """Replace the state by a snapshot's."""

    def query(self, query: Any) -> Any:
        """Answer a read against the current state."""


class SparseSnapshots(Protocol):
    """The runtime's sparse snapshots (consensus.storage.SnapshotStore fits as is)."""

    def nearest_at_or_below(self, index: int) -> Any:
        """The snapshot with the largest index <= `index` (with .index and .data), or
        None."""


@dataclass(frozen=True, slots=True)
class SnapshotQueryResult:
    status: PullStatus
    index: int
    result: Any = None


def query_snapshot(index: int, query: Any, *, applied: int, first_index: int,
                   snapshots: SparseSnapshots, read_entries: Callable[[int, int], Iterable[Entry]],
                   new_machine: Callable[[], StateMachine]) -> SnapshotQueryResult:
    """JournalKeeper's querySnapshot(logIndex): the state after exactly `index` entries.

    INDEX_OVERFLOW when this node has not applied `index` yet (retry later or at
    another node); INDEX_UNDERFLOW when neither a snapshot nor the log reaches back
    far enough (compacted away). Otherwise restores the nearest snapshot at or below
    `index` into a fresh machine and replays the entries after it.
    """
    if index > applied:
        return SnapshotQueryResult(PullStatus.INDEX_OVERFLOW, index)
    base = snapshots.nearest_at_or_below(index)
    base_index = base.index if base is not None else 0
    if base_index + 1 < first_index and base_index != index:
        return SnapshotQueryResult(PullStatus.INDEX_UNDERFLOW, index)
    machine = new_machine()
    if base is not None:
        machine.restore(base.data)
    if index > base_index:
        for entry in read_entries(base_index + 1, index + 1):
            if entry.type == EntryType.APPLICATION:
                machine.apply(entry)
    return SnapshotQueryResult(PullStatus.SUCCESS, index, machine.query(query))
