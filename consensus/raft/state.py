"""`NodeState`: who this node is and where it stands - its id, the tick count, the term,
its vote, its role and the leader it knows (the fields of etcd's raft struct that every
part reads). The role helpers are given this small object, not the node: they read and
write these facts, while the role *changes*, which involve several helpers, stay on
`RaftNode` and reach a helper only as the callables it was given."""
from __future__ import annotations

from dataclasses import dataclass

from .roles import Role


@dataclass(slots=True)
class NodeState:
    id: int
    term: int
    vote: int | None
    role: Role
    leader_id: int | None = None
    ticks: int = 0                  #: ticks since start: the core's only clock
