"""The messages Raft nodes exchange, as wire-agnostic dataclasses.

Every message carries `term`, `source` and `destination` (node ids). The runtime maps
them onto a wire: JRaft's 17 types on Garlic Farm (RequestVote, AppendEntries,
InstallSnapshot, JoinCluster, SyncLog, LeaveCluster and their responses) plus the
garlicfarm extensions (pre-votes, TimeoutNow, ReadIndex, observer pulls).

Responses carry the fields of the request they answer that the leader needs
(JournalKeeper's `logIndex`/`entryCount`, the read context `ctx`). JRaft's 26-byte
response has only nextIndex + accepted; responses come back on a connection in request
order, so the transport fills the echoed fields from the request it answers.

`TERM_RULES` marks the messages to which Raft's term rules apply (a higher term makes
the receiver a follower; a lower one is refused). Observer pulls and the replies of a
joining or leaving server do not take part in elections, so they are exempt.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import ClassVar, Sequence, Union

from .configuration import Configuration
from .entry import Entry


class PullStatus(enum.IntEnum):
    """JournalKeeper's getServerEntries / querySnapshot result codes."""

    SUCCESS = 0
    INDEX_OVERFLOW = 1      #: the index is not there yet: retry later or elsewhere
    INDEX_UNDERFLOW = 2     #: the index was compacted away: reset from a snapshot


@dataclass(frozen=True, slots=True, kw_only=True)
class Message:
    term: int
    source: int
    destination: int

    TERM_RULES: ClassVar[bool] = True


# -- elections (Raft §5.2, PreVote from the dissertation §9.6) ------------------------
@dataclass(frozen=True, slots=True, kw_only=True)
class RequestVote(Message):
    """A candidate asks for a vote. With `pre_vote`, `term` is the term it *would* use
    and nobody changes state; `leader_transfer` overrides the receiver's leader lease
    (sent after TimeoutNow)."""

    last_log_index: int
    last_log_term: int
    pre_vote: bool = False
    leader_transfer: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class RequestVoteResponse(Message):
    granted: bool
    pre_vote: bool = False


# -- replication (Raft §5.3, JournalKeeper's parallel replication) ----------------------
@dataclass(frozen=True, slots=True, kw_only=True)
class AppendEntries(Message):
    """Entries after (prev_log_index, prev_log_term), or none as a heartbeat. `ctx` is
    the leader's send stamp; the response echoes it (leases and ReadIndex rounds)."""

    prev_log_index: int
    prev_log_term: int
    entries: Sequence[Entry]
    commit: int
    ctx: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class AppendEntriesResponse(Message):
    """`log_index` (first index of the request = its prev_log_index + 1), `entry_count`
    and `ctx` echo the request. On success the follower holds the leader's entries up to
    log_index + entry_count - 1. `next_index` is JRaft's nextIndex: on success the index
    after the request's entries, on refusal where the leader should resume."""

    success: bool
    next_index: int
    log_index: int
    entry_count: int
    ctx: int = 0


@dataclass(frozen=True, slots=True, kw_only=True)
class InstallSnapshot(Message):
    """One chunk of the leader's snapshot (Raft §7; JRaft's SnapshotSyncRequest)."""

    snapshot_index: int
    snapshot_term: int
    configuration: Configuration
    offset: int
    data: bytes
    done: bool
    commit: int


@dataclass(frozen=True, slots=True, kw_only=True)
class InstallSnapshotResponse(Message):
    """`next_offset` is where the next chunk starts (JRaft's nextIndex); after the last
    chunk, `success` means the snapshot was installed (or was not needed)."""

    success: bool
    next_offset: int
    snapshot_index: int
    done: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class TimeoutNow(Message):
    """Leader transfer: start an election now, without pre-vote."""


# -- reads ----------------------------------------------------------------------------
@dataclass(frozen=True, slots=True, kw_only=True)
class ReadIndexRequest(Message):
    """A follower forwards a linearizable read to the leader."""

    ctx: bytes
    lease: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class ReadIndexResponse(Message):
    ctx: bytes
    index: int
    success: bool


# -- JRaft's single-server membership flows ----------------------------------------------
@dataclass(frozen=True, slots=True, kw_only=True)
class MembershipReply(Message):
    """A joining or leaving server's answer: it takes no part in elections, so its term
    never deposes the leader."""

    accepted: bool

    TERM_RULES: ClassVar[bool] = False


@dataclass(frozen=True, slots=True, kw_only=True)
class JoinClusterRequest(Message):
    """The leader invites a new server and hands it the current configuration."""

    configuration: Configuration
    commit: int
    last_log_index: int


@dataclass(frozen=True, slots=True, kw_only=True)
class JoinClusterResponse(MembershipReply):
    next_index: int             #: the joiner's first free index


@dataclass(frozen=True, slots=True, kw_only=True)
class SyncLogRequest(Message):
    """Committed entries for a joining server, written from `start_index` on."""

    start_index: int
    entries: Sequence[Entry]
    commit: int


@dataclass(frozen=True, slots=True, kw_only=True)
class SyncLogResponse(MembershipReply):
    next_index: int             #: where the next SyncLogRequest starts


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaveClusterRequest(Message):
    """The leader tells a server it is being removed."""

    commit: int
    last_log_index: int


@dataclass(frozen=True, slots=True, kw_only=True)
class LeaveClusterResponse(MembershipReply):
    """Accepted unless a configuration change is still uncommitted at the server."""


# -- observers (JournalKeeper getServerEntries / getServerState) ------------------------
@dataclass(frozen=True, slots=True, kw_only=True)
class ObserverMessage(Message):
    """Observer pulls and their answers: outside elections, no term rules."""

    TERM_RULES: ClassVar[bool] = False


@dataclass(frozen=True, slots=True, kw_only=True)
class PullEntries(ObserverMessage):
    """An observer asks any member for committed entries from `index` on."""

    index: int
    max_entries: int
    max_bytes: int


@dataclass(frozen=True, slots=True, kw_only=True)
class PullEntriesResponse(ObserverMessage):
    status: PullStatus
    index: int
    entries: Sequence[Entry]
    min_index: int          #: the first index the member still has
    commit: int


@dataclass(frozen=True, slots=True, kw_only=True)
class PullSnapshot(ObserverMessage):
    """An observer that fell below a member's log fetches its snapshot in chunks;
    `snapshot_index` is 0 on the first request."""

    snapshot_index: int
    offset: int


@dataclass(frozen=True, slots=True, kw_only=True)
class PullSnapshotResponse(ObserverMessage):
    """A chunk of the member's latest snapshot; a different `snapshot_index` than asked
    for means the member took a newer one, and the chunk starts again at offset 0."""

    snapshot_index: int
    snapshot_term: int
    configuration: Configuration
    offset: int
    data: bytes
    done: bool


#: The closed set of messages the core sends and steps (the runtime maps each one onto a
#: wire: consensus/wire/jraft_mapping.py registers every member).
RaftMessage = Union[
    RequestVote, RequestVoteResponse, AppendEntries, AppendEntriesResponse, InstallSnapshot,
    InstallSnapshotResponse, TimeoutNow, ReadIndexRequest, ReadIndexResponse,
    JoinClusterRequest, JoinClusterResponse, SyncLogRequest, SyncLogResponse,
    LeaveClusterRequest, LeaveClusterResponse, PullEntries, PullEntriesResponse, PullSnapshot,
    PullSnapshotResponse]
