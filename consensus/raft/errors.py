"""Errors the Raft core raises to its caller (the runtime), each saying what to do."""
from __future__ import annotations


class RaftError(Exception):
    """Base of every error the core raises."""


class NotLeader(RaftError):
    """The request needs the leader and this node is not it. `leader_id` is the node
    this one believes leads (None when it does not know): retry there."""

    def __init__(self, node_id: int, leader_id: int | None) -> None:
        self.node_id = node_id
        self.leader_id = leader_id
        hint = f"retry at node {leader_id}" if leader_id is not None else \
            "no leader is known yet: retry after an election"
        super().__init__(f"node {node_id} is not the leader; {hint}")


class ProposalDropped(RaftError):
    """The leader refuses new entries for now (a leader transfer is under way, or too
    many proposals are waiting to be persisted): retry shortly."""


class InvalidMessage(RaftError, ValueError):
    """A message whose fields contradict each other (e.g. entries that do not follow
    prev_log_index): the transport built it wrong, or a peer is broken. Nothing was
    changed; `field` names the part at fault."""

    def __init__(self, field: str, reason: str) -> None:
        self.field = field
        super().__init__(f"invalid message, {field}: {reason}")


class MembershipChangeError(RaftError):
    """A membership change cannot start now or is malformed (the message says why)."""


class ConfigurationError(RaftError, ValueError):
    """An encoded configuration is malformed; `field` names the part at fault."""

    def __init__(self, field: str, reason: str) -> None:
        self.field = field
        super().__init__(f"configuration {field}: {reason}")


class OptionsError(RaftError, ValueError):
    """A `RaftOptions` value is out of range; `option` names it."""

    def __init__(self, option: str, reason: str) -> None:
        self.option = option
        super().__init__(f"RaftOptions.{option}: {reason}")


class CompactedError(RaftError):
    """The requested index is below the log's first index (it is in a snapshot)."""


class UnavailableError(RaftError):
    """The requested index is above the log's last index."""


class StorageStateError(RaftError):
    """Storage handed the core a state it cannot start from (e.g. a hard state whose
    commit index lies outside the log)."""
