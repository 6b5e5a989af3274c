"""What each role does with each message, as data (etcd's `r.step = stepLeader`, h11's
transitions): `RaftNode.step` applies Raft's term rules, then the handler its role's
table names; a message its role has no handler for is dropped (a vote answer at a
follower, an append answer after stepping down, ...)."""
from __future__ import annotations

from typing import TYPE_CHECKING, Any, Callable

from .messages import (AppendEntries, AppendEntriesResponse, InstallSnapshot,
                       InstallSnapshotResponse, JoinClusterRequest, JoinClusterResponse,
                       LeaveClusterRequest, LeaveClusterResponse, PullEntries,
                       PullEntriesResponse, PullSnapshot, PullSnapshotResponse,
                       ReadIndexRequest, ReadIndexResponse, RequestVote, RequestVoteResponse,
                       SyncLogRequest, SyncLogResponse, TimeoutNow)
from .ready import Role

if TYPE_CHECKING:
    from .node import RaftNode

Handler = Callable[["RaftNode", Any], None]

# -- any role --------------------------------------------------------------------------------
_ANY: dict[type, Handler] = {
    RequestVote: lambda node, msg: node.elections.on_request_vote(msg),
    ReadIndexResponse: lambda node, msg: node.reads.on_response(msg),
    JoinClusterRequest: lambda node, msg: node.membership.on_join_cluster(msg),
    SyncLogRequest: lambda node, msg: node.membership.on_sync_log(msg),
    LeaveClusterRequest: lambda node, msg: node.membership.on_leave_cluster(msg),
    PullEntries: lambda node, msg: node.puller.serve_entries(msg),
    PullSnapshot: lambda node, msg: node.puller.serve_snapshot(msg),
    # a leader drops these from another leader of its term (receiver.hear_from_leader),
    # after checking that they are well-formed
    AppendEntries: lambda node, msg: node.receiver.on_append_entries(msg),
    InstallSnapshot: lambda node, msg: node.receiver.on_install_snapshot(msg),
}

FOLLOWER: dict[type, Handler] = {
    **_ANY,
    TimeoutNow: lambda node, msg: node.elections.on_timeout_now(msg),
    ReadIndexRequest: lambda node, msg: node.reads.on_request_elsewhere(msg),
    PullEntriesResponse: lambda node, msg: node.puller.on_entries(msg),
    PullSnapshotResponse: lambda node, msg: node.puller.on_snapshot(msg),
}

CANDIDATE: dict[type, Handler] = {
    **FOLLOWER,
    RequestVoteResponse: lambda node, msg: node.elections.on_vote_response(msg),
}

LEADER: dict[type, Handler] = {
    **_ANY,
    AppendEntriesResponse: lambda node, msg: node.replication.on_append_response(msg),
    InstallSnapshotResponse:
        lambda node, msg: node.replication.on_install_snapshot_response(msg),
    ReadIndexRequest: lambda node, msg: node.reads.on_request_at_leader(msg),
    JoinClusterResponse: lambda node, msg: node.membership.on_join_cluster_response(msg),
    SyncLogResponse: lambda node, msg: node.membership.on_sync_log_response(msg),
    LeaveClusterResponse: lambda node, msg: node.membership.on_leave_cluster_response(msg),
}

HANDLERS: dict[Role, dict[type, Handler]] = {
    Role.FOLLOWER: FOLLOWER, Role.OBSERVER: FOLLOWER,
    Role.PRE_CANDIDATE: CANDIDATE, Role.CANDIDATE: CANDIDATE,
    Role.LEADER: LEADER,
}

#: every message type the core knows (anything else is a runtime bug)
KNOWN: frozenset[type] = frozenset(t for table in HANDLERS.values() for t in table)
