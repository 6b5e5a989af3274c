"""What the core hands the runtime after some steps and ticks (etcd's Ready).

Process a Ready in this order, then call `RaftNode.advance(ready)`:

1. send `send_now` (may go out while persisting: a leader's replication, observer
   pulls - nothing in them depends on this Ready being durable);
2. persist `snapshot` (then restore the application from it), then `entries`
   (dropping every stored entry at or after `entries[0].index` first), then
   `hard_state`; make them durable (fsync) when `must_sync`;
3. send `send_after_persist` (votes, acknowledgements: they promise durability);
4. apply `committed_entries` in order, and hand each `read_states` to its reader once
   the application has applied up to its index.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass, field

from .configuration import Configuration
from .entry import Entry
from .messages import Message
from .reads import ReadState
from .storage import HardState, Snapshot


class Role(enum.Enum):
    FOLLOWER = "follower"
    PRE_CANDIDATE = "pre-candidate"
    CANDIDATE = "candidate"
    LEADER = "leader"
    OBSERVER = "observer"


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

    def __bool__(self) -> bool:
        return bool(self.now or self.later or self.read_states)


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
