"""Leader-side bookkeeping of JRaft's single-server membership flows.

AddServer: the leader invites the new server (JoinClusterRequest, carrying the current
configuration), then feeds it committed entries (SyncLogRequest, or InstallSnapshot when
they are compacted away) until it is within `log_sync_stop_gap` of the commit index, and
only then appends the configuration that makes it a voter - so adding a server never
stalls commits while it catches up.

RemoveServer: the leader tells the server (LeaveClusterRequest); once it accepts, or
stops answering, the leader appends the configuration without it. The leaving server
counts down two election timeouts without hearing from a leader, then reports itself
removed.
"""
from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import TYPE_CHECKING, Collection, Mapping

from .configuration import Configuration
from .entry import EntryType
from .errors import MembershipChangeError
from .receiver import check_run
from .messages import (JoinClusterRequest, JoinClusterResponse, LeaveClusterRequest,
                       LeaveClusterResponse, SyncLogRequest, SyncLogResponse)
from .progress import Progress

if TYPE_CHECKING:
    from .node import RaftNode


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
    RemoveServer flows), their receiving side, and a member's own departure."""

    def __init__(self, node: "RaftNode") -> None:
        self.node = node
        self.joiner: Joiner | None = None
        self.leaver: Leaver | None = None
        self.catching_up = False        # invited to join: taking SyncLogs
        self.leave_at: int | None = None    # leaving: report removed at this tick
        self.config_at_leave: Configuration | None = None
        self.was_member = False
        self.removed = False

    @property
    def leaving(self) -> bool:
        return self.leave_at is not None

    def on_commit(self) -> bool:
        """The leader committed: a committed C_old,new is followed by C_new (Raft
        dissertation §4.3), and a committed configuration without us ends our leadership
        (we managed our own removal). False when we stepped down."""
        node = self.node
        log = node.log
        config = log.configuration
        if log.configuration_index <= log.committed:
            if config.is_joint:
                node.replication.append(EntryType.CONFIGURATION, (config.leave_joint().encode(),))
            elif not config.is_voter(node.id):
                node.become_follower(node.term, None)
                self.update_removed()
                return False
        return True

    def note_member(self) -> None:
        """Our configuration names us: from now on, leaving it means we were removed."""
        self.was_member = True

    def caught_up(self) -> None:
        """We are a voter: no longer a joiner taking SyncLogs."""
        self.catching_up = False

    def reset(self) -> None:
        """We stopped leading: the flows we drove end here."""
        self.joiner = self.leaver = None

    # -- leader: starting a change ----------------------------------------------------------
    def check_can_change(self) -> None:
        node = self.node
        if not node.committed_in_term:
            raise MembershipChangeError("the new leader has not committed an entry of its "
                                        "term yet: retry in a moment")
        log = node.log
        if log.configuration_index > log.committed or log.configuration.is_joint:
            raise MembershipChangeError("a configuration change is still in progress: retry "
                                        "once it has committed")
        if self.joiner is not None or self.leaver is not None:
            raise MembershipChangeError("a server is being added or removed: retry after")
        if node.transfer.target is not None:
            raise MembershipChangeError("a leader transfer is in progress")

    def append_configuration(self, config: Configuration) -> int:
        return self.node.replication.append(EntryType.CONFIGURATION, (config.encode(),))

    def change_voters(self, voters: Collection[int],
                      addresses: Mapping[int, str] | None = None) -> int:
        self.check_can_change()
        current = self.node.log.configuration
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
            config = self.node.log.configuration.with_observers(add, remove, addresses)
        except ValueError as exc:
            raise MembershipChangeError(str(exc)) from None
        return self.append_configuration(config)

    def add_server(self, node_id: int, address: str) -> None:
        self.check_can_change()
        node = self.node
        if node_id <= 0 or node_id in node.log.configuration.members:
            raise MembershipChangeError(f"node {node_id} is already a member (or not a valid id)")
        self.joiner = Joiner(node_id, address, Progress(1, node.options.max_inflight, node.ticks))
        self._invite(self.joiner)

    def remove_server(self, node_id: int) -> None:
        self.check_can_change()
        node = self.node
        if node_id == node.id:
            raise MembershipChangeError("the leader cannot remove itself: transfer "
                                        "leadership first, or use change_voters")
        if node_id not in node.log.configuration.voters:
            raise MembershipChangeError(f"node {node_id} is not a voter")
        self.leaver = Leaver(node_id)
        self._ask_to_leave(self.leaver)

    # -- leader: driving the flows ----------------------------------------------------------
    def joined(self, peer: int) -> Progress | None:
        """The joiner's progress once it became a voter (replication takes it over)."""
        joiner = self.joiner
        if joiner is None or joiner.node_id != peer:
            return None
        self.joiner = None
        pr = joiner.progress
        pr.become_probe(pr.next)
        return pr

    def _invite(self, joiner: Joiner) -> None:
        node = self.node
        config = node.log.configuration
        if joiner.address:
            config = config.with_observers(addresses={joiner.node_id: joiner.address})
        node.outbox.now.append(JoinClusterRequest(term=node.term, source=node.id, destination=joiner.node_id, configuration=config,
                                                  commit=node.log.committed, last_log_index=node.log.last_index()))
        joiner.sent_tick = node.ticks

    def _ask_to_leave(self, leaver: Leaver) -> None:
        node = self.node
        node.outbox.now.append(LeaveClusterRequest(term=node.term, source=node.id, destination=leaver.node_id,
                                                   commit=node.log.committed, last_log_index=node.log.last_index()))
        leaver.sent_tick = node.ticks

    def sync_joiner(self, joiner: Joiner) -> None:
        """Send the next SyncLogRequest, or add the joiner once it is close enough."""
        node = self.node
        log, opts = node.log, node.options
        start = joiner.progress.next
        if log.committed - (start - 1) < opts.log_sync_stop_gap:
            address = {joiner.node_id: joiner.address} if joiner.address else None
            config = log.configuration
            self.append_configuration(config.with_voters(config.voters | {joiner.node_id},
                                                         address))
            return
        if start < log.first_index():
            joiner.phase = JoinPhase.SNAPSHOT
            replication = node.replication
            joiner.progress.become_snapshot(replication.catch_up_snapshot())
            joiner.sent_tick = node.ticks
            replication.send_snapshot_chunk(joiner.node_id, joiner.progress)
            return
        hi = min(log.committed, start + opts.log_sync_batch - 1)
        entries = log.slice(start, hi + 1, opts.max_bytes_per_message)
        node.outbox.now.append(SyncLogRequest(term=node.term, source=node.id, destination=joiner.node_id, start_index=start,
                                              entries=entries, commit=log.committed))
        joiner.sent_tick = node.ticks

    def tick(self) -> None:
        """The leader's tick: retry unanswered requests, give up after
        `membership_retries`."""
        node = self.node
        retry, limit, ticks = node.options.retry, node.options.membership_retries, node.ticks
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
        config = self.node.log.configuration
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
        pr.heard(self.node.ticks)
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
        node = self.node
        log = node.log
        committed = log.configuration_at(log.committed)    # re-invites welcome
        ok = not committed.is_voter(node.id) and \
            (not self.catching_up or node.leader_id in (None, msg.source))
        if ok:
            node.receiver.hear_from_leader(msg.source)
            self.catching_up = True
            if log.configuration_index == 0:
                log.base_configuration = msg.configuration
                node.after_log_change()
        node.outbox.later.append(JoinClusterResponse(term=node.term, source=node.id, destination=msg.source, accepted=ok,
                                                     next_index=log.last_index() + 1))

    def on_sync_log(self, msg: SyncLogRequest) -> None:
        check_run(msg.entries, msg.start_index, "entries")
        node = self.node
        log = node.log
        if not self.catching_up or msg.start_index > log.last_index() + 1 or \
                msg.start_index < log.first_index():
            node.outbox.later.append(SyncLogResponse(term=node.term, source=node.id, destination=msg.source, accepted=False,
                                                     next_index=log.last_index() + 1))
            return
        node.receiver.hear_from_leader(msg.source)
        entries = msg.entries[max(0, log.committed + 1 - msg.start_index):]
        conflict = log.find_conflict(entries)
        if conflict:        # committed entries: a conflict can only be an uncommitted tail
            log.append(entries[conflict - entries[0].index:])
        end = msg.start_index + len(msg.entries) - 1
        log.commit_to(min(msg.commit, end))
        node.after_log_change()
        node.outbox.later.append(SyncLogResponse(term=node.term, source=node.id, destination=msg.source, accepted=True, next_index=end + 1))

    def on_leave_cluster(self, msg: LeaveClusterRequest) -> None:
        node = self.node
        changing = node.log.configuration_index > node.log.committed
        if not changing and node.receiver.hear_from_leader(msg.source):
            self.start_leaving()
        node.outbox.later.append(LeaveClusterResponse(term=node.term, source=node.id, destination=msg.source,
                                                      accepted=not changing))

    # -- our own membership -----------------------------------------------------------------
    def update_removed(self) -> None:
        """Leaving: we were a member and a committed configuration no longer lists us.
        As in JRaft, a leaving node reports itself removed only after two election
        timeouts without a leader's message, so that a server added back meanwhile
        (or still being told its removal committed) does not stop."""
        node = self.node
        log = node.log
        config = log.configuration
        if node.id in config.members:
            if self.leave_at is not None and config is not self.config_at_leave:
                self.leave_at = None        # added back since we were asked to leave
                self.removed = False
        elif self.was_member and log.configuration_index <= log.committed \
                and not self.catching_up and self.leave_at is None:
            self.start_leaving()

    def start_leaving(self) -> None:
        node = self.node
        if self.leave_at is None:
            self.config_at_leave = node.log.configuration
        self.leave_at = node.ticks + 2 * node.options.election_timeout_max

    def count_down(self) -> None:
        """Every tick: a leaving node reports itself removed when its time is up."""
        if self.leave_at is not None and self.node.ticks >= self.leave_at:
            self.removed = True
