"""Leader-side bookkeeping of JRaft's single-server membership flows.

AddServer: the leader invites the new server (JoinClusterRequest, carrying the current
configuration), then feeds it committed entries (SyncLogRequest, or InstallSnapshot when
they are compacted away) until it is within `log_sync_stop_gap` of the commit index, and
only then appends the configuration that makes it a voter - so adding a server never
stalls commits while it catches up.

RemoveServer: the leader tells the server (LeaveClusterRequest); once it accepts, or
stops answering, the leader appends the configuration without it. The leaving server
counts down two election timeouts without hearing from a leader, then reports itself
removed.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field

from .progress import Progress


class JoinPhase(enum.Enum):
    INVITING = "inviting"       #: JoinClusterRequest sent
    SYNCING = "syncing"         #: SyncLogRequests
    SNAPSHOT = "snapshot"       #: InstallSnapshot chunks (entries are compacted)


@dataclass
class Joiner:
    node_id: int
    address: str
    progress: Progress          #: next index to sync; snapshot state in SNAPSHOT
    phase: JoinPhase = JoinPhase.INVITING
    sent_tick: int | None = None    #: when the unanswered request went out
    retries: int = 0


@dataclass
class Leaver:
    node_id: int
    sent_tick: int | None = None
    retries: int = 0


@dataclass
class ObserverPull:
    """An observer's pull loop: one request at a time to a randomly chosen parent."""

    parent: int | None = None
    sent_tick: int | None = None
    next_pull_tick: int = 0
    snapshot_index: int = 0         #: >0 while fetching a snapshot after an underflow
    snapshot_data: bytearray = field(default_factory=bytearray)
    fetching_snapshot: bool = False


@dataclass
class IncomingSnapshot:
    """Chunks of a leader's snapshot being received."""

    leader: int
    term: int
    index: int
    snapshot_term: int
    data: bytearray = field(default_factory=bytearray)
