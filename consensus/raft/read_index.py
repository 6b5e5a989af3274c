"""Linearizable reads at the leader (reads.py has the rules): ReadIndex rounds confirmed
by heartbeats, JournalKeeper's lease, and reads forwarded by followers."""
from __future__ import annotations

from typing import TYPE_CHECKING

from .errors import NotLeader
from .messages import ReadIndexRequest, ReadIndexResponse
from .reads import STAMP_BITS, PendingRead, ReadState, ReadStatus, ReadTracker, stamp_tick
from .roles import Role

if TYPE_CHECKING:
    from .node import RaftNode

_MAX_STAMP_SEQ = (1 << STAMP_BITS) - 1


class ReadIndex:
    def __init__(self, node: "RaftNode") -> None:
        self.node = node
        self.waiting = ReadTracker(node.options.max_pending_reads)
        self.before_commit: list[tuple[bytes, bool, int | None]] = []   # a new leader's
        self.stamp_seq = 0          # the round within this tick (the ctx's low bits)
        self.stamp_used = False     # a message carries this round's stamp

    def stamp(self) -> int:
        """The ctx of a leader's AppendEntries: this tick and round."""
        self.stamp_used = True
        return (self.node.ticks << STAMP_BITS) | self.stamp_seq

    def tick(self) -> None:
        self.stamp_seq = 0
        self.stamp_used = False

    def expire(self) -> None:
        """The leader's tick: reads unconfirmed for an election timeout time out."""
        node = self.node
        for read in self.waiting.expire(node.ticks, node.options.election_timeout_max):
            self.deliver(read, ReadStatus.TIMEOUT)

    def read_index(self, ctx: bytes, lease: bool) -> None:
        node = self.node
        if node.role is Role.LEADER:
            self.leader_read(ctx, lease, None)
        elif node.leader_id is not None and node.role is not Role.OBSERVER:
            node.outbox.now.append(ReadIndexRequest(term=node.term, source=node.id, destination=node.leader_id, ctx=ctx,
                                                    lease=lease))
        else:
            raise NotLeader(node.id, node.leader_id)

    def lease_valid(self) -> bool:
        """JournalKeeper's leader validity check: a quorum's latest responses were sent
        within the lease window (and the leader committed an entry of its term)."""
        node = self.node
        if node.role is not Role.LEADER or not node.committed_in_term:
            return False
        now, window = node.ticks, node.options.lease
        return node.tracker.acknowledged(
            lambda pr: bool(pr.ack_ctx) and now - stamp_tick(pr.ack_ctx) < window)

    def leader_read(self, ctx: bytes, lease: bool, requester: int | None) -> None:
        node = self.node
        if not node.committed_in_term:
            self.before_commit.append((ctx, lease, requester))
            return
        index = node.log.committed
        read = PendingRead(ctx, index, 0, node.ticks, requester)
        if node.log.configuration.all_voters <= {node.id} or (lease and self.lease_valid()):
            self.deliver(read, ReadStatus.OK)
            return
        if self.stamp_used and self.stamp_seq < _MAX_STAMP_SEQ:
            self.stamp_seq += 1
            self.stamp_used = False
        read.stamp = (node.ticks << STAMP_BITS) | self.stamp_seq
        if not self.waiting.add(read):
            self.deliver(read, ReadStatus.TIMEOUT)
            return
        node.replication.heartbeat_now()

    def on_commit(self) -> None:
        """The leader committed: reads held until its first commit may go on."""
        if self.before_commit and self.node.committed_in_term:
            waiting, self.before_commit = self.before_commit, []
            for ctx, lease, requester in waiting:
                self.leader_read(ctx, lease, requester)

    def release(self) -> None:
        """Reads that a quorum's acknowledgements confirmed."""
        if not self.waiting:
            return
        tracker = self.node.tracker

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
        node = self.node
        if read.requester is None:
            node.outbox.read_states.append(ReadState(read.ctx, read.index, status))
        else:
            node.outbox.now.append(ReadIndexResponse(term=node.term, source=node.id, destination=read.requester,
                                                     ctx=read.ctx, index=read.index,
                                                     success=status is ReadStatus.OK))

    # -- messages ---------------------------------------------------------------------------
    def on_request_at_leader(self, msg: ReadIndexRequest) -> None:
        self.leader_read(msg.ctx, msg.lease, msg.source)

    def on_request_elsewhere(self, msg: ReadIndexRequest) -> None:
        node = self.node
        node.outbox.now.append(ReadIndexResponse(term=node.term, source=node.id, destination=msg.source, ctx=msg.ctx, index=0,
                                                 success=False))

    def on_response(self, msg: ReadIndexResponse) -> None:
        status = ReadStatus.OK if msg.success else ReadStatus.NOT_LEADER
        self.node.outbox.read_states.append(ReadState(msg.ctx, msg.index, status))
