"""`ProgressTracker`: what a node knows of the others' standing (etcd's
tracker.ProgressTracker). The configuration says who counts; `progress` is the leader's
view of each follower it replicates to (progress.py); `votes` the answers of the
election this node runs. The quorum questions every role asks - what is committed, is a
quorum still active, did a quorum acknowledge something, how does the vote stand - are
answered here and nowhere else (quorum.py does the arithmetic)."""
from __future__ import annotations

from typing import Callable

from .configuration import Configuration
from .progress import Progress
from .quorum import VoteResult, committed_index, has_quorum, vote_result


class ProgressTracker:
    def __init__(self, node_id: int, configuration: Callable[[], Configuration]) -> None:
        self.id = node_id
        self._configuration = configuration     # the log's latest configuration
        self.progress: dict[int, Progress] = {}
        self.votes: dict[int, bool] = {}

    @property
    def configuration(self) -> Configuration:
        return self._configuration()

    # -- progress -------------------------------------------------------------------------
    def reset_progress(self) -> None:
        """Forget every follower (a new term of leadership, or none)."""
        self.progress = {}

    def match(self, peer: int) -> int:
        pr = self.progress.get(peer)
        return pr.match if pr is not None else 0

    def committed(self, own: int) -> int:
        """The largest index a quorum holds, counting this node at `own` (what its disk
        holds)."""
        me, progress = self.id, self.progress

        def match(peer: int) -> int:
            if peer == me:
                return own
            pr = progress.get(peer)
            return pr.match if pr is not None else 0
        return committed_index(self.configuration, match)

    def acknowledged(self, fresh: Callable[[Progress], bool]) -> bool:
        """Do this node and the followers whose progress is `fresh` make a quorum?"""
        return has_quorum(self.configuration,
                          {self.id} | {p for p, pr in self.progress.items() if fresh(pr)})

    def quorum_active(self) -> bool:
        """CheckQuorum: did a quorum answer since `forget_activity`?"""
        return self.acknowledged(lambda pr: pr.recent_active)

    def forget_activity(self) -> None:
        """Start the next CheckQuorum period: every follower counts as silent again."""
        for pr in self.progress.values():
            pr.recent_active = False

    # -- votes ----------------------------------------------------------------------------
    def reset_votes(self) -> None:
        self.votes = {}

    def record_vote(self, peer: int, granted: bool) -> bool:
        """Count a vote; False when `peer` had voted already (the first answer stands)."""
        if peer in self.votes:
            return False
        self.votes[peer] = granted
        return True

    def tally_votes(self) -> VoteResult:
        return vote_result(self.configuration, self.votes)
