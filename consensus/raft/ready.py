"""What the core hands the runtime after some steps and ticks (etcd's Ready).

`ReadyDriver` (driver.py) is the one place that processes a Ready, in the order its
docstring and docs/raft-core.md give: send `send_now`; write `snapshot` and `entries`;
fsync when `must_sync`; save `hard_state` and send `send_after_persist`; apply
`committed_entries` and hand out `read_states`; then `RaftNode.advance(ready)`.
"""
from __future__ import annotations

from dataclasses import dataclass, field

from .configuration import Configuration
from .entry import Entry
from .messages import Message
from .reads import ReadState
from .roles import Role
from .storage import HardState, Snapshot


@dataclass(frozen=True, slots=True)
class SoftState:
    """Volatile facts worth an event (JournalKeeper's onLeaderChanged, onVotersChanged):
    reported in a Ready whenever one of them changes."""

    leader_id: int | None
    role: Role
    term: int
    configuration: Configuration
    removed: bool       #: this node is no longer a member: the runtime should stop it


@dataclass(slots=True)
class Outbox:
    """What the core collected for the next Ready: messages that may go at once, those
    that wait for this Ready to be durable, and answers to local reads."""

    now: list[Message] = field(default_factory=list)
    later: list[Message] = field(default_factory=list)
    read_states: list[ReadState] = field(default_factory=list)


@dataclass(slots=True)
class Ready:
    soft_state: SoftState | None = None
    hard_state: HardState | None = None
    snapshot: Snapshot | None = None
    entries: list[Entry] = field(default_factory=list)
    committed_entries: list[Entry] = field(default_factory=list)
    send_now: list[Message] = field(default_factory=list)
    send_after_persist: list[Message] = field(default_factory=list)
    read_states: list[ReadState] = field(default_factory=list)

    term_or_vote_changed: bool = False

    @property
    def must_sync(self) -> bool:
        """Whether persisting this Ready needs an fsync (new entries, a new term or
        vote, or a snapshot); a change of the commit index alone does not."""
        return bool(self.entries) or self.snapshot is not None or self.term_or_vote_changed

    @property
    def messages(self) -> list[Message]:
        return self.send_now + self.send_after_persist

    def is_empty(self) -> bool:
        return not (self.soft_state or self.hard_state or self.snapshot or self.entries
                    or self.committed_entries or self.send_now or self.send_after_persist
                    or self.read_states)
