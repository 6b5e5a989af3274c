"""Elections (Raft §5.2, the dissertation's PreVote and CheckQuorum): the randomized
timer, campaigning, voting and the lease that makes a node refuse votes while it hears
from a live leader."""
from __future__ import annotations

import random
from typing import Callable

from .log import RaftLog
from .messages import RequestVote, RequestVoteResponse, TimeoutNow
from .options import RaftOptions
from .quorum import VoteResult
from .ready import Outbox
from .roles import Role
from .state import NodeState
from .tenure import Tenure
from .tracker import ProgressTracker


class Elections:
    def __init__(self, *, state: NodeState, log: RaftLog, tracker: ProgressTracker,
                 outbox: Outbox, options: RaftOptions, rng: random.Random, tenure: Tenure,
                 set_role: Callable[[Role], None], become_leader: Callable[[], None],
                 become_follower: Callable[[int, int | None], None]) -> None:
        """The role changes are the node's (they touch every part): a won election calls
        `become_leader`, a lost one `become_follower`."""
        self.state = state
        self.log = log
        self.tracker = tracker
        self.outbox = outbox
        self.options = options
        self.rng = rng
        self.tenure = tenure
        self.set_role = set_role
        self.become_leader = become_leader
        self.become_follower = become_follower
        self.elapsed = 0                #: ticks since the timer was reset
        self.timeout = self.random_timeout()
        self.boot_lease = True          #: we may have confirmed a leader just before a restart
        self.heard_leader_tick = 0      #: when a leader of our term last spoke
        self.deferred_in: int | None = None     #: the stall that deferred CheckQuorum

    # -- the timer --------------------------------------------------------------------------
    def random_timeout(self) -> int:
        opts = self.options
        return self.rng.randrange(opts.election_timeout_min, opts.election_timeout_max)

    def reset_timer(self) -> None:
        self.elapsed = 0
        self.timeout = self.random_timeout()

    def end_boot_lease(self) -> None:
        self.boot_lease = False

    def heard_leader(self) -> None:
        """A leader of our term spoke: its lease starts over."""
        self.elapsed = 0
        self.heard_leader_tick = self.state.ticks

    def observer_tick(self) -> None:
        """An observer campaigns never, but counts the time: a leader's lease lapses here
        too (observers vote nowhere, yet in_lease must age as at a voter)."""
        self.elapsed += 1

    def start_leading(self) -> None:
        """We lead: the timer now counts CheckQuorum periods."""
        self.elapsed = 0
        self.deferred_in = None

    def check_quorum_due(self) -> bool:
        """A leader's tick: is a CheckQuorum period over (then the next one starts)?"""
        self.elapsed += 1
        opts = self.options
        if opts.check_quorum and self.elapsed >= opts.election_timeout_min:
            self.elapsed = 0
            return True
        return False

    def tick(self) -> None:
        """A follower's or candidate's tick: campaign when the timer runs out."""
        self.elapsed += 1
        if self.elapsed < self.timeout:
            return
        self.reset_timer()
        self.boot_lease = False
        self.state.leader_id = None     # silent for a whole timeout: its lease is over here
        if self.promotable():
            self.campaign(pre_vote=self.options.pre_vote)

    def defer_check_quorum(self, stall: int | None, grace: int) -> bool:
        """A CheckQuorum period ended during `stall` (None: not in a stall): judge it
        `grace` ticks later instead, unless an earlier stall deferred it already (a
        leader stalled turn after turn still steps down, one deferral late)."""
        if stall is not None and self.deferred_in in (None, stall):
            self.deferred_in = stall
            self.elapsed = max(0, self.options.election_timeout_min - grace)
            return True
        self.deferred_in = None
        return False

    def in_lease(self) -> bool:
        """Have we heard from a live leader within the shortest election timeout? Then
        (with CheckQuorum) we refuse to vote, so the leader's lease stays valid."""
        opts = self.options
        if not opts.check_quorum:
            return False
        known = self.state.leader_id is not None or self.boot_lease
        return known and self.elapsed < opts.election_timeout_min

    # -- who may campaign -------------------------------------------------------------------
    def still_voter(self) -> bool:
        """A voter of our latest configuration; or (Raft dissertation §4.2.2) of the one
        before while the latest is not committed: a leader that removed itself may still
        be needed to elect the leader that commits C_new. (Our own vote counts only
        where we are a voter.)"""
        log, me = self.log, self.state.id
        return log.configuration.is_voter(me) or (
            log.configuration_index > log.committed
            and log.configuration_at(log.configuration_index - 1).is_voter(me))

    def promotable(self) -> bool:
        """May we campaign?"""
        tenure = self.tenure
        return self.still_voter() and not tenure.leaving \
            and not tenure.removed and self.log.pending_snapshot is None

    # -- campaigning ------------------------------------------------------------------------
    def campaign(self, *, pre_vote: bool, transfer: bool = False) -> None:
        state, log = self.state, self.log
        if pre_vote:
            self.set_role(Role.PRE_CANDIDATE)
            term = state.term + 1
        else:
            state.term += 1
            state.vote = state.id
            self.set_role(Role.CANDIDATE)
            term = state.term
        state.leader_id = None
        self.tracker.reset_votes()
        self.tracker.record_vote(state.id, True)
        self.reset_timer()
        if self.tally() is not VoteResult.PENDING:
            return
        last_index, last_term = log.last_index(), log.last_term()
        outbox = self.outbox.now if pre_vote else self.outbox.later
        for peer in sorted(log.configuration.all_voters - {state.id}):
            outbox.append(RequestVote(term=term, source=state.id, destination=peer, last_log_index=last_index, last_log_term=last_term,
                                      pre_vote=pre_vote, leader_transfer=transfer))

    def tally(self) -> VoteResult:
        """Act on the vote as it stands: campaign for real after a won pre-vote, lead
        after a won vote, follow after a lost one."""
        result = self.tracker.tally_votes()
        if result is VoteResult.WON:
            if self.state.role is Role.PRE_CANDIDATE:
                self.campaign(pre_vote=False)
            else:
                self.become_leader()
        elif result is VoteResult.LOST:
            self.become_follower(self.state.term, None)
        return result

    # -- messages ---------------------------------------------------------------------------
    def on_request_vote(self, msg: RequestVote) -> None:
        state = self.state
        can_vote = (state.vote == msg.source
                    or (state.vote is None and state.leader_id is None)
                    or (msg.pre_vote and msg.term > state.term))
        grant = can_vote and self.log.is_up_to_date(msg.last_log_index, msg.last_log_term)
        if grant and not msg.pre_vote:
            state.vote = msg.source
            self.reset_timer()
        term = msg.term if (grant and msg.pre_vote) else state.term
        self.outbox.later.append(RequestVoteResponse(term=term, source=state.id, destination=msg.source, granted=grant,
                                                     pre_vote=msg.pre_vote))

    def on_vote_response(self, msg: RequestVoteResponse) -> None:
        """A candidate's or pre-candidate's answer (other roles ignore them)."""
        state = self.state
        expected = Role.PRE_CANDIDATE if msg.pre_vote else Role.CANDIDATE
        if state.role is not expected or (not msg.pre_vote and msg.term != state.term):
            return
        if self.tracker.record_vote(msg.source, msg.granted):
            self.tally()

    def on_timeout_now(self, msg: TimeoutNow) -> None:
        """Leader transfer: campaign now, past any lease (not at a leader)."""
        if self.promotable():
            self.campaign(pre_vote=False, transfer=True)
