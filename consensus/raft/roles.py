"""What each role does with each message, as data (etcd's `r.step = stepLeader`, h11's
transitions): `RaftNode.step` applies Raft's term rules, then the handler its role's
table names; a message its role has no handler for is dropped (a vote answer at a
follower, an append answer after stepping down, ...)."""
from __future__ import annotations

import enum
from typing import TYPE_CHECKING, Any, Callable

from .messages import (AppendEntries, AppendEntriesResponse, InstallSnapshot,
                       InstallSnapshotResponse, JoinClusterRequest, JoinClusterResponse,
                       LeaveClusterRequest, LeaveClusterResponse, PullEntries,
                       PullEntriesResponse, PullSnapshot, PullSnapshotResponse,
                       ReadIndexRequest, ReadIndexResponse, RequestVote, RequestVoteResponse,
                       SyncLogRequest, SyncLogResponse, TimeoutNow)

if TYPE_CHECKING:
    from .node import RaftNode


class Role(enum.Enum):
    FOLLOWER = "follower"
    PRE_CANDIDATE = "pre-candidate"
    CANDIDATE = "candidate"
    LEADER = "leader"
    OBSERVER = "observer"

#: a handler: (the collaborator's attribute on RaftNode, its method's name)
Handler = tuple[str, str]

# -- any role --------------------------------------------------------------------------------
_ANY: dict[type, Handler] = {
    RequestVote: ("elections", "on_request_vote"),
    ReadIndexResponse: ("reads", "on_response"),
    JoinClusterRequest: ("membership", "on_join_cluster"),
    SyncLogRequest: ("membership", "on_sync_log"),
    LeaveClusterRequest: ("membership", "on_leave_cluster"),
    PullEntries: ("puller", "serve_entries"),
    PullSnapshot: ("puller", "serve_snapshot"),
    # a leader drops these from another leader of its term (receiver.hear_from_leader),
    # after checking that they are well-formed
    AppendEntries: ("receiver", "on_append_entries"),
    InstallSnapshot: ("receiver", "on_install_snapshot"),
}

FOLLOWER: dict[type, Handler] = {
    **_ANY,
    TimeoutNow: ("elections", "on_timeout_now"),
    ReadIndexRequest: ("reads", "on_request_elsewhere"),
    PullEntriesResponse: ("puller", "on_entries"),
    PullSnapshotResponse: ("puller", "on_snapshot"),
}

CANDIDATE: dict[type, Handler] = {
    **FOLLOWER,
    RequestVoteResponse: ("elections", "on_vote_response"),
}

LEADER: dict[type, Handler] = {
    **_ANY,
    AppendEntriesResponse: ("replication", "on_append_response"),
    # the server being added answers membership's flow; the others, replication
    InstallSnapshotResponse: ("membership", "on_install_snapshot_response"),
    ReadIndexRequest: ("reads", "on_request_at_leader"),
    JoinClusterResponse: ("membership", "on_join_cluster_response"),
    SyncLogResponse: ("membership", "on_sync_log_response"),
    LeaveClusterResponse: ("membership", "on_leave_cluster_response"),
}

HANDLERS: dict[Role, dict[type, Handler]] = {
    Role.FOLLOWER: FOLLOWER, Role.OBSERVER: FOLLOWER,
    Role.PRE_CANDIDATE: CANDIDATE, Role.CANDIDATE: CANDIDATE,
    Role.LEADER: LEADER,
}

#: every message type the core knows (anything else is a runtime bug)
KNOWN: frozenset[type] = frozenset(t for table in HANDLERS.values() for t in table)


def bind(node: "RaftNode") -> dict[Role, dict[type, Callable[[Any], None]]]:
    """Each role's table with the node's collaborators' bound methods (built once per
    node, so that a step is one dictionary lookup and one call)."""
    return {role: {t: getattr(getattr(node, part), method) for t, (part, method) in table.items()}
            for role, table in HANDLERS.items()}
