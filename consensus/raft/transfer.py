"""Leader transfer (JournalKeeper; Raft dissertation §3.10): refuse proposals, bring
the target up to date, then tell it to campaign at once (TimeoutNow)."""
from __future__ import annotations

from typing import TYPE_CHECKING

from .errors import MembershipChangeError
from .messages import TimeoutNow
from .progress import Progress

if TYPE_CHECKING:
    from .node import RaftNode


class Transfer:
    def __init__(self, node: "RaftNode") -> None:
        self.node = node
        self.target: int | None = None
        self._elapsed = 0
        self._timeout_now_sent = False

    def cancel(self) -> None:
        """No transfer any more (we stopped or started leading)."""
        self.target = None

    def start(self, target: int) -> None:
        node = self.node
        if target == node.id:
            return
        if target not in node.tracker.progress or not node.log.configuration.is_voter(target):
            raise MembershipChangeError(f"node {target} is not a voter: cannot lead")
        node.replication.reconsider()
        self.target = target
        self._elapsed = 0
        self._timeout_now_sent = False
        self.maybe_send_timeout_now(target, node.tracker.progress[target])

    def tick(self) -> None:
        """Give up after election_timeout_max ticks (the caller retries if another won)."""
        if self.target is not None:
            self._elapsed += 1
            if self._elapsed >= self.node.options.election_timeout_max:
                self.target = None

    def check_target(self) -> None:
        """The configuration changed: a target that is no voter any more cannot lead."""
        if self.target is not None and not self.node.log.configuration.is_voter(self.target):
            self.target = None

    def maybe_send_timeout_now(self, peer: int, pr: Progress) -> None:
        node = self.node
        if self.target == peer and not self._timeout_now_sent and \
                pr.match == node.log.last_index():
            self._timeout_now_sent = True
            node.outbox.now.append(TimeoutNow(term=node.term, source=node.id, destination=peer))
