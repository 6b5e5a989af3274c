"""Leader transfer (JournalKeeper; Raft dissertation §3.10): refuse proposals, bring
the target up to date, then tell it to campaign at once (TimeoutNow)."""
from __future__ import annotations

from .errors import MembershipChangeError
from .log import RaftLog
from .messages import TimeoutNow
from .options import RaftOptions
from .progress import Progress
from .ready import Outbox
from .state import NodeState
from .tracker import ProgressTracker


class Transfer:
    def __init__(self, *, state: NodeState, log: RaftLog, tracker: ProgressTracker,
                 outbox: Outbox, options: RaftOptions) -> None:
        self.state = state
        self.log = log
        self.tracker = tracker
        self.outbox = outbox
        self.options = options
        self.target: int | None = None
        self._elapsed = 0
        self._timeout_now_sent = False

    def cancel(self) -> None:
        """No transfer any more (we stopped or started leading)."""
        self.target = None

    def start(self, target: int) -> None:
        """Move leadership to `target`, another node (the caller then has replication
        look again at what to send it)."""
        progress = self.tracker.progress
        if target not in progress or not self.log.configuration.is_voter(target):
            raise MembershipChangeError(f"node {target} is not a voter: cannot lead")
        self.target = target
        self._elapsed = 0
        self._timeout_now_sent = False
        self.maybe_send_timeout_now(target, progress[target])

    def tick(self) -> None:
        """Give up after election_timeout_max ticks (the caller retries if another won)."""
        if self.target is not None:
            self._elapsed += 1
            if self._elapsed >= self.options.election_timeout_max:
                self.target = None

    def check_target(self) -> None:
        """The configuration changed: a target that is no voter any more cannot lead."""
        if self.target is not None and not self.log.configuration.is_voter(self.target):
            self.target = None

    def maybe_send_timeout_now(self, peer: int, pr: Progress) -> None:
        if self.target == peer and not self._timeout_now_sent and \
                pr.match == self.log.last_index():
            self._timeout_now_sent = True
            state = self.state
            self.outbox.now.append(TimeoutNow(term=state.term, source=state.id, destination=peer))
