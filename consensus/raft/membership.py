"""Leader-side bookkeeping of JRaft's single-server membership flows.

AddServer: the leader invites the new server (JoinClusterRequest, carrying the current
configuration), then feeds it committed entries (SyncLogRequest, or InstallSnapshot when
they are compacted away) until it is within `log_sync_stop_gap` of the commit index, and
only then appends the configuration that makes it a voter - so adding a server never
stalls commits while it catches up.

RemoveServer: the leader tells the server (LeaveClusterRequest); once it accepts, or
stops answering, the leader appends the configuration without it. The leaving server
counts down two election timeouts without hearing from a leader, then reports itself
removed (tenure.py keeps that count and the rest of its own standing).
"""
from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Callable, Collection, Mapping

from .configuration import Configuration
from .entry import EntryType
from .errors import MembershipChangeError
from .log import RaftLog
from .receiver import Receiver, check_run
from .messages import (InstallSnapshotResponse, JoinClusterRequest, JoinClusterResponse,
                       LeaveClusterRequest, LeaveClusterResponse, SyncLogRequest,
                       SyncLogResponse)
from .options import RaftOptions
from .progress import Progress
from .ready import Outbox
from .replication import Replicator
from .state import NodeState
from .tenure import Tenure
from .tracker import ProgressTracker
from .transfer import Transfer


class JoinPhase(enum.Enum):
    INVITING = "inviting"       #: JoinClusterRequest sent
    SYNCING = "syncing"         #: SyncLogRequests
    SNAPSHOT = "snapshot"       #: InstallSnapshot chunks (entries are compacted)


@dataclass
class Joiner:
    node_id: int
    address: str
    progress: Progress          #: next index to sync; snapshot state in SNAPSHOT
    phase: JoinPhase = JoinPhase.INVITING
    sent_tick: int | None = None    #: when the unanswered request went out
    retries: int = 0


@dataclass
class Leaver:
    node_id: int
    sent_tick: int | None = None
    retries: int = 0


class Membership:
    """Configuration changes at the leader (joint consensus, JRaft's AddServer and
    RemoveServer flows) and their receiving side. Configuration entries are appended,
    and the joiner's snapshot sent, by replication."""

    def __init__(self, *, state: NodeState, log: RaftLog, tracker: ProgressTracker,
                 outbox: Outbox, options: RaftOptions, tenure: Tenure,
                 replication: Replicator, receiver: Receiver, transfer: Transfer,
                 become_follower: Callable[[int, int | None], None],
                 after_log_change: Callable[[], None]) -> None:
        self.state = state
        self.log = log
        self.tracker = tracker
        self.outbox = outbox
        self.options = options
        self.tenure = tenure
        self.replication = replication
        self.receiver = receiver
        self.transfer = transfer
        self.become_follower = become_follower
        self.after_log_change = after_log_change
        self.joiner: Joiner | None = None
        self.leaver: Leaver | None = None

    def on_commit(self) -> None:
        """The leader committed: a committed C_old,new is followed by C_new (Raft
        dissertation §4.3), and a committed configuration without us ends our leadership
        (we managed our own removal); while we lead, peers that left stop being
        replicated to once they know."""
        log = self.log
        config = log.configuration
        if log.configuration_index <= log.committed:
            if config.is_joint:
                self.replication.append(EntryType.CONFIGURATION, (config.leave_joint().encode(),))
            elif not config.is_voter(self.state.id):
                self.become_follower(self.state.term, None)
                self.tenure.update_removed()
                return
        self.replication.drop_departed()

    def reset(self) -> None:
        """We stopped leading: the flows we drove end here."""
        self.joiner = self.leaver = None

    # -- leader: starting a change ----------------------------------------------------------
    def check_can_change(self) -> None:
        log = self.log
        if log.term(log.committed) != self.state.term:
            raise MembershipChangeError("the new leader has not committed an entry of its "
                                        "term yet: retry in a moment")
        if log.configuration_index > log.committed or log.configuration.is_joint:
            raise MembershipChangeError("a configuration change is still in progress: retry "
                                        "once it has committed")
        if self.joiner is not None or self.leaver is not None:
            raise MembershipChangeError("a server is being added or removed: retry after")
        if self.transfer.target is not None:
            raise MembershipChangeError("a leader transfer is in progress")

    def append_configuration(self, config: Configuration) -> int:
        return self.replication.append(EntryType.CONFIGURATION, (config.encode(),))

    def change_voters(self, voters: Collection[int],
                      addresses: Mapping[int, str] | None = None) -> int:
        self.check_can_change()
        current = self.log.configuration
        new = frozenset(voters)
        if not new or any(v <= 0 for v in new):
            raise MembershipChangeError("the new voter set must hold positive node ids")
        if new == current.voters:
            raise MembershipChangeError(f"the voters already are {sorted(new)}")
        return self.append_configuration(current.enter_joint(new, addresses))

    def update_observers(self, add: Collection[int], remove: Collection[int],
                         addresses: Mapping[int, str] | None) -> int:
        self.check_can_change()
        try:
            config = self.log.configuration.with_observers(add, remove, addresses)
        except ValueError as exc:
            raise MembershipChangeError(str(exc)) from None
        return self.append_configuration(config)

    def add_server(self, node_id: int, address: str) -> None:
        self.check_can_change()
        if node_id <= 0 or node_id in self.log.configuration.members:
            raise MembershipChangeError(f"node {node_id} is already a member (or not a valid id)")
        self.joiner = Joiner(node_id, address,
                             Progress(1, self.options.max_inflight, self.state.ticks))
        self._invite(self.joiner)

    def remove_server(self, node_id: int) -> None:
        self.check_can_change()
        if node_id == self.state.id:
            raise MembershipChangeError("the leader cannot remove itself: transfer "
                                        "leadership first, or use change_voters")
        if node_id not in self.log.configuration.voters:
            raise MembershipChangeError(f"node {node_id} is not a voter")
        self.leaver = Leaver(node_id)
        self._ask_to_leave(self.leaver)

    # -- leader: driving the flows ----------------------------------------------------------
    def _hand_over(self, joiner: Joiner) -> None:
        """The joiner is about to become a voter: replication takes its progress over."""
        if joiner.node_id in self.tracker.progress:
            return      # a departed peer of that id is still tracked: its progress stays
        self.joiner = None
        pr = joiner.progress
        pr.become_probe(pr.next)
        self.tracker.progress[joiner.node_id] = pr

    def _invite(self, joiner: Joiner) -> None:
        state, log = self.state, self.log
        config = log.configuration
        if joiner.address:
            config = config.with_observers(addresses={joiner.node_id: joiner.address})
        self.outbox.now.append(JoinClusterRequest(term=state.term, source=state.id, destination=joiner.node_id, configuration=config,
                                                  commit=log.committed, last_log_index=log.last_index()))
        joiner.sent_tick = state.ticks

    def _ask_to_leave(self, leaver: Leaver) -> None:
        state, log = self.state, self.log
        self.outbox.now.append(LeaveClusterRequest(term=state.term, source=state.id, destination=leaver.node_id,
                                                   commit=log.committed, last_log_index=log.last_index()))
        leaver.sent_tick = state.ticks

    def sync_joiner(self, joiner: Joiner) -> None:
        """Send the next SyncLogRequest, or add the joiner once it is close enough."""
        state, log, opts = self.state, self.log, self.options
        start = joiner.progress.next
        if log.committed - (start - 1) < opts.log_sync_stop_gap:
            address = {joiner.node_id: joiner.address} if joiner.address else None
            config = log.configuration
            self._hand_over(joiner)
            self.append_configuration(config.with_voters(config.voters | {joiner.node_id},
                                                         address))
            return
        if start < log.first_index():
            joiner.phase = JoinPhase.SNAPSHOT
            replication = self.replication
            joiner.progress.become_snapshot(replication.catch_up_snapshot())
            joiner.sent_tick = state.ticks
            replication.send_snapshot_chunk(joiner.node_id, joiner.progress)
            return
        hi = min(log.committed, start + opts.log_sync_batch - 1)
        entries = log.slice(start, hi + 1, opts.max_bytes_per_message)
        self.outbox.now.append(SyncLogRequest(term=state.term, source=state.id, destination=joiner.node_id, start_index=start,
                                              entries=entries, commit=log.committed))
        joiner.sent_tick = state.ticks

    def send_joiner_snapshot(self) -> None:
        """With the leader's other messages (`RaftNode.ready`): the next chunk of the
        snapshot that catches the joiner up, if it is due."""
        joiner = self.joiner
        if joiner is not None and joiner.phase is JoinPhase.SNAPSHOT:
            self.replication.send_snapshot_chunk(joiner.node_id, joiner.progress)

    def on_install_snapshot_response(self, msg: InstallSnapshotResponse) -> None:
        """The joiner's answer to a snapshot chunk moves its flow on; a member's is
        replication's."""
        joiner = self.joiner
        if joiner is None or msg.source != joiner.node_id:
            self.replication.on_install_snapshot_response(msg)
            return
        pr = joiner.progress
        joiner.sent_tick = None
        pr.heard(self.state.ticks)
        if self.replication.snapshot_answered(pr, msg):
            joiner.phase = JoinPhase.SYNCING
            self.sync_joiner(joiner)

    def tick(self) -> None:
        """The leader's tick: retry unanswered requests, give up after
        `membership_retries`."""
        opts = self.options
        retry, limit, ticks = opts.retry, opts.membership_retries, self.state.ticks
        joiner = self.joiner
        if joiner is not None:
            sent = joiner.progress.snapshot_sent_tick if joiner.phase is JoinPhase.SNAPSHOT \
                else joiner.sent_tick
            if sent is not None and ticks - sent >= retry:
                joiner.retries += 1
                if joiner.retries > limit:
                    self.joiner = None          # the new server does not answer: give up
                elif joiner.phase is JoinPhase.INVITING:
                    self._invite(joiner)
                elif joiner.phase is JoinPhase.SYNCING:
                    self.sync_joiner(joiner)
                else:
                    joiner.progress.snapshot_sent_tick = None
        leaver = self.leaver
        if leaver is not None and leaver.sent_tick is not None and \
                ticks - leaver.sent_tick >= retry:
            leaver.retries += 1
            if leaver.retries > limit:
                self._finish_leave(leaver)      # JRaft removes a silent server anyway
            else:
                self._ask_to_leave(leaver)

    def _finish_leave(self, leaver: Leaver) -> None:
        self.leaver = None
        config = self.log.configuration
        self.append_configuration(config.with_voters(config.voters - {leaver.node_id}))

    def on_join_cluster_response(self, msg: JoinClusterResponse) -> None:
        joiner = self.joiner
        if joiner is None or msg.source != joiner.node_id or joiner.phase is not JoinPhase.INVITING:
            return
        if not msg.accepted:
            self.joiner = None
            return
        joiner.phase = JoinPhase.SYNCING
        joiner.retries = 0
        self.sync_joiner(joiner)

    def on_sync_log_response(self, msg: SyncLogResponse) -> None:
        joiner = self.joiner
        if joiner is None or msg.source != joiner.node_id or joiner.phase is not JoinPhase.SYNCING:
            return
        joiner.retries = 0
        pr = joiner.progress
        pr.heard(self.state.ticks)
        pr.next = max(1, msg.next_index)
        if msg.accepted:
            pr.match = max(pr.match, msg.next_index - 1)
        self.sync_joiner(joiner)

    def on_leave_cluster_response(self, msg: LeaveClusterResponse) -> None:
        leaver = self.leaver
        if leaver is None or msg.source != leaver.node_id:
            return
        if msg.accepted:
            self._finish_leave(leaver)
        else:
            self.leaver = None

    # -- the server being added or removed --------------------------------------------------
    def on_join_cluster(self, msg: JoinClusterRequest) -> None:
        state, log, tenure = self.state, self.log, self.tenure
        committed = log.configuration_at(log.committed)    # re-invites welcome
        ok = not committed.is_voter(state.id) and \
            (not tenure.catching_up or state.leader_id in (None, msg.source))
        if ok:
            self.receiver.hear_from_leader(msg.source)
            tenure.catching_up = True
            if log.configuration_index == 0:
                log.base_configuration = msg.configuration
                self.after_log_change()
        self.outbox.later.append(JoinClusterResponse(term=state.term, source=state.id, destination=msg.source, accepted=ok,
                                                     next_index=log.last_index() + 1))

    def on_sync_log(self, msg: SyncLogRequest) -> None:
        check_run(msg.entries, msg.start_index, "entries")
        state, log = self.state, self.log
        if not self.tenure.catching_up or msg.start_index > log.last_index() + 1 or \
                msg.start_index < log.first_index():
            self.outbox.later.append(SyncLogResponse(term=state.term, source=state.id, destination=msg.source, accepted=False,
                                                     next_index=log.last_index() + 1))
            return
        self.receiver.hear_from_leader(msg.source)
        entries = msg.entries[max(0, log.committed + 1 - msg.start_index):]
        conflict = log.find_conflict(entries)
        if conflict:        # committed entries: a conflict can only be an uncommitted tail
            log.append(entries[conflict - entries[0].index:])
        end = msg.start_index + len(msg.entries) - 1
        log.commit_to(min(msg.commit, end))
        self.after_log_change()
        self.outbox.later.append(SyncLogResponse(term=state.term, source=state.id, destination=msg.source, accepted=True, next_index=end + 1))

    def on_leave_cluster(self, msg: LeaveClusterRequest) -> None:
        state, log = self.state, self.log
        changing = log.configuration_index > log.committed
        if not changing and self.receiver.hear_from_leader(msg.source):
            self.tenure.start_leaving()
        self.outbox.later.append(LeaveClusterResponse(term=state.term, source=state.id, destination=msg.source,
                                                      accepted=not changing))
