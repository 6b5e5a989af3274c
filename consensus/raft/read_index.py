"""Linearizable reads at the leader (reads.py has the rules): ReadIndex rounds confirmed
by heartbeats, JournalKeeper's lease, and reads forwarded by followers."""
from __future__ import annotations

from .errors import NotLeader
from .log import RaftLog
from .messages import ReadIndexRequest, ReadIndexResponse
from .options import RaftOptions
from .reads import STAMP_BITS, PendingRead, ReadState, ReadStatus, ReadTracker, stamp_tick
from .ready import Outbox
from .replication import ReplicationDue
from .roles import Role
from .state import NodeState
from .tracker import ProgressTracker

_MAX_STAMP_SEQ = (1 << STAMP_BITS) - 1


class ReadIndex:
    def __init__(self, *, state: NodeState, log: RaftLog, tracker: ProgressTracker,
                 outbox: Outbox, options: RaftOptions, due: ReplicationDue) -> None:
        """A read waiting for its confirming round asks replication for a heartbeat
        through `due`."""
        self.state = state
        self.log = log
        self.tracker = tracker
        self.outbox = outbox
        self.options = options
        self.due = due
        self.waiting = ReadTracker(options.max_pending_reads)
        self.before_commit: list[tuple[bytes, bool, int | None]] = []   # a new leader's
        self.stamp_seq = 0          # the round within this tick (the ctx's low bits)
        self.stamp_used = False     # a message carries this round's stamp

    def stamp(self) -> int:
        """The ctx of a leader's AppendEntries: this tick and round."""
        self.stamp_used = True
        return (self.state.ticks << STAMP_BITS) | self.stamp_seq

    def _committed_in_term(self) -> bool:
        """Only once an entry of its term committed does a new leader know the commit
        index (Raft §8)."""
        log = self.log
        return log.term(log.committed) == self.state.term

    def tick(self) -> None:
        self.stamp_seq = 0
        self.stamp_used = False

    def expire(self) -> None:
        """The leader's tick: reads unconfirmed for an election timeout time out."""
        for read in self.waiting.expire(self.state.ticks, self.options.election_timeout_max):
            self.deliver(read, ReadStatus.TIMEOUT)

    def read_index(self, ctx: bytes, lease: bool) -> None:
        state = self.state
        if state.role is Role.LEADER:
            self.leader_read(ctx, lease, None)
        elif state.leader_id is not None and state.role is not Role.OBSERVER:
            self.outbox.now.append(ReadIndexRequest(term=state.term, source=state.id, destination=state.leader_id, ctx=ctx,
                                                    lease=lease))
        else:
            raise NotLeader(state.id, state.leader_id)

    def lease_valid(self) -> bool:
        """JournalKeeper's leader validity check: a quorum's latest responses were sent
        within the lease window (and the leader committed an entry of its term)."""
        if self.state.role is not Role.LEADER or not self._committed_in_term():
            return False
        now, window = self.state.ticks, self.options.lease
        return self.tracker.acknowledged(
            lambda pr: bool(pr.ack_ctx) and now - stamp_tick(pr.ack_ctx) < window)

    def leader_read(self, ctx: bytes, lease: bool, requester: int | None) -> None:
        if not self._committed_in_term():
            self.before_commit.append((ctx, lease, requester))
            return
        state, log = self.state, self.log
        index = log.committed
        read = PendingRead(ctx, index, 0, state.ticks, requester)
        if log.configuration.all_voters <= {state.id} or (lease and self.lease_valid()):
            self.deliver(read, ReadStatus.OK)
            return
        if self.stamp_used and self.stamp_seq < _MAX_STAMP_SEQ:
            self.stamp_seq += 1
            self.stamp_used = False
        read.stamp = (state.ticks << STAMP_BITS) | self.stamp_seq
        if not self.waiting.add(read):
            self.deliver(read, ReadStatus.TIMEOUT)
            return
        self.due.heartbeat_due = True

    def on_commit(self) -> None:
        """The leader committed: reads held until its first commit may go on."""
        if self.before_commit and self._committed_in_term():
            waiting, self.before_commit = self.before_commit, []
            for ctx, lease, requester in waiting:
                self.leader_read(ctx, lease, requester)

    def release(self) -> None:
        """Reads that a quorum's acknowledgements confirmed."""
        if not self.waiting:
            return
        tracker = self.tracker

        def confirmed(stamp: int) -> bool:
            return tracker.acknowledged(lambda pr: pr.ack_ctx >= stamp)

        for read in self.waiting.release(confirmed):
            self.deliver(read, ReadStatus.OK)

    def lost_leadership(self, was_leader: bool) -> None:
        """Every read waiting here fails with NOT_LEADER: retry at the new leader."""
        if was_leader:
            for read in self.waiting.drain():
                self.deliver(read, ReadStatus.NOT_LEADER)
        for ctx, _, requester in self.before_commit:
            self.deliver(PendingRead(ctx, 0, 0, 0, requester), ReadStatus.NOT_LEADER)
        self.before_commit = []

    def deliver(self, read: PendingRead, status: ReadStatus) -> None:
        state = self.state
        if read.requester is None:
            self.outbox.read_states.append(ReadState(read.ctx, read.index, status))
        else:
            self.outbox.now.append(ReadIndexResponse(term=state.term, source=state.id, destination=read.requester,
                                                     ctx=read.ctx, index=read.index,
                                                     success=status is ReadStatus.OK))

    # -- messages ---------------------------------------------------------------------------
    def on_request_at_leader(self, msg: ReadIndexRequest) -> None:
        self.leader_read(msg.ctx, msg.lease, msg.source)

    def on_request_elsewhere(self, msg: ReadIndexRequest) -> None:
        state = self.state
        self.outbox.now.append(ReadIndexResponse(term=state.term, source=state.id, destination=msg.source, ctx=msg.ctx, index=0,
                                                 success=False))

    def on_response(self, msg: ReadIndexResponse) -> None:
        status = ReadStatus.OK if msg.success else ReadStatus.NOT_LEADER
        self.outbox.read_states.append(ReadState(msg.ctx, msg.index, status))
