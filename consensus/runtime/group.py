"""One Raft group (partition) of a node: its core, storage, state machine, client service
and Ready driver - everything a group owns alone. What the groups of a node share is the
node's (node.py): the event loop, the transport (one connection per peer pair carries
every group's frames, docs/protocol.md "Groups"), the tick clock, the fsync thread and
the metrics.

`Group.turn()` is one loop turn of the group, in the order a single-group node has
always kept (node.py's docstring); the node calls it for every group, then writes what
the turn queued for all of them at once.
"""
from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Callable

from consensus.raft import (AppendEntries, Configuration, Entry, Message, PullEntries,
                            RaftError, RaftNode, RaftOptions, ReadIndexRequest, ReadState, Ready, ReadyDriver,
                            RequestVote, Role,
                            Snapshot, SoftState, StateMachine, TimeoutNow)
from consensus.runtime.consumers import ConsumerBook, counted_rows
from consensus.runtime.disk_storage import CommitSaver, DiskStorage, SnapshotView, SyncedDisk
from consensus.runtime.sync_rounds import SyncThread
from consensus.runtime.groups import group_data_dir
from consensus.runtime.machines import Decider, FarmStateMachine
from consensus.runtime.node_view import NodeView
from consensus.runtime.quiesce import GroupClock
from consensus.runtime.service import Service
from consensus.storage import FsyncPolicy

if TYPE_CHECKING:
    from consensus.runtime.config import NodeConfig
    from consensus.runtime.connection import Connection
    from consensus.runtime.log_reads import LogReads
    from consensus.runtime.reader_process import ReaderProcess
    from consensus.runtime.metrics import NodeObserver
    from consensus.runtime.transport import Transport
    from consensus.wire.extensions import Quiesce

log = logging.getLogger("garlicfarm.node")


class TurnTicks:
    """The ticks of this loop turn, counted once by the node's clock and delivered to
    every group (a `ReadyDriver` clock that each group reads without consuming)."""

    def __init__(self) -> None:
        self.now = 0

    def due(self) -> int:
        return self.now


class GroupTransport:
    """The transport as one group's service sees it: its answers go out in its group."""

    def __init__(self, transport: "Transport", group: int) -> None:
        self._t, self.group = transport, group

    def reply(self, conn: "Connection", data: bytes) -> None:
        self._t.reply(conn, data, self.group)

    def mark_dirty(self, conn: "Connection") -> None:
        self._t.mark_dirty(conn)

    def wake(self) -> None:
        self._t.wake()

    def dial_error(self, peer_id: int) -> str | None:
        return self._t.dial_error(peer_id)

    @property
    def outgoing(self):
        return self._t.outgoing

    @property
    def last_in(self):
        return self._t.last_in


class PeerNetwork:
    """The Ready driver's network: the transport, for one group. Replication leaves at
    once, before our own disk work; bare commit notices and heartbeats wait for the
    turn's other bytes (the clients' answers); acknowledgements leave before we apply."""

    def __init__(self, transport: "Transport", observer: "NodeObserver", group: int) -> None:
        self.transport, self.observer, self.group = transport, observer, group
        self.pulls = 0      #: PullEntries sent (an observer's idle cost; `partitions` call)

    def send_now(self, msgs: list[Message]) -> None:
        send, group = self.transport.send, self.group
        carries = False
        for msg in msgs:
            send(msg, group)
            kind = type(msg)
            if kind is PullEntries:
                self.pulls += 1
            carries = carries or kind is not AppendEntries or bool(msg.entries)
        if carries:
            self.transport.flush()
            self.observer.sent(msgs)

    def send_persisted(self, msgs: list[Message]) -> None:
        send, group = self.transport.send, self.group
        for msg in msgs:
            send(msg, group)
        self.transport.flush()

    def flush(self) -> None:
        self.transport.flush()


class Group:
    """One Raft group of a node (see the module docstring)."""

    def __init__(self, group: int, config: "NodeConfig", *, transport: "Transport",
                 observer: "NodeObserver", syncer: SyncThread, saver: CommitSaver,
                 ticks: TurnTicks,
                 addresses: dict[int, str], address_of: Callable[[int], str | None],
                 learn_address: Callable[[int, str], None],
                 partitions: Callable[[], list[dict]] = lambda: [],
                 reads: "LogReads | None" = None,
                 reader: "ReaderProcess | None" = None,
                 app_factory: Callable[[], StateMachine] | None = None,
                 decider: Decider | None = None) -> None:
        self.group = group
        self.decider = decider
        self.config = config
        self.id = config.id
        self.transport = transport
        self.observer = observer
        self.app_factory = app_factory
        self.learn_address = learn_address
        self.storage = DiskStorage(group_data_dir(config.data_dir, group), fsync=config.fsync,
                                   segment_bytes=config.segment_bytes, saver=saver)
        self.machine = self.new_machine()
        snapshot = self.storage.snapshot()
        if snapshot is not None:
            self.machine.restore(snapshot.data, snapshot.index)
        self._snapshot_index = snapshot.index if snapshot is not None else 0
        ticks_ = config.election_ticks
        options = RaftOptions(election_timeout_min=ticks_, election_timeout_max=2 * ticks_,
                              heartbeat_interval=max(1, ticks_ // 3),
                              pre_vote=config.wire == "garlicfarm", observer=config.observer)
        # A joining voter starts with no configuration (the leader sends it one); a
        # joining observer starts from --peers so that it knows whom to pull from (it
        # never votes, so a stale guess cannot hurt).
        bootstrap = None if config.join and not config.observer else \
            _bootstrap(config, addresses, group)
        self.raft = RaftNode(config.id, self.storage, options, configuration=bootstrap,
                             applied=self._snapshot_index)
        self.consumers = ConsumerBook(
            counted_rows(self.raft.log_view, lambda entry: self.machine.verdict(entry)),
            # up to the stable end: what readers may read (and rows counted once judged)
            lambda: (self.raft.log_view.first_index(), self.machine.stable_applied() + 1),
            expiry=config.consumer_expiry)
        self.service = Service(NodeView(
            id=self.id, config=config, core=self.raft, log=self.raft.log_view,
            read_applied=self.storage.read_applied,
            machine=self.machine, transport=GroupTransport(transport, group),
            snapshots=SnapshotView(self.storage.snapshots),
            latest_snapshot=self.storage.snapshot, new_machine=self.new_machine,
            address_of=address_of, learn_address=learn_address,
            status=self.status_dict, proposals_dropped=observer.proposals_dropped,
            consumers=self.consumers, partitions=partitions, reads=reads, reader=reader,
            pin_applied=self.storage.pin_applied))
        self.inbox: list[Message] = []
        self.client_inbox: list = []
        self.clock = GroupClock(ticks)      #: no ticks while quiesced (quiesce.py)
        self.wake_due = False               #: quiesced, and a message asks for a turn
        self.notice: "Quiesce | None" = None    #: the leader's Quiesce, judged after a turn
        #: observers' pulls (source, index) that reached this group quiesced, and the
        #: observers told it is quiet (answered again when it wakes); for an observer,
        #: the member whose Quiesce it took (quiesce.py)
        self.quiet_pulls: list[tuple[int, int]] = []
        self.quiet_observers: set[int] = set()
        self.quiet_parent: int | None = None
        self.idle_since: float | None = None    #: led, idle and quiescable since (quiesce.py)
        self.soft: SoftState | None = None
        self.leader_since_ms: int | None = None    #: wall clock of this node's election
        self._snapshot_due = False
        self.disk = SyncedDisk(self.storage, fsyncs=FsyncPolicy.parse(config.fsync).fsyncs,
                               syncer=syncer, observer=observer)
        self.network = PeerNetwork(transport, observer, group)
        self.driver = ReadyDriver(self.raft, self.disk, self.network, self, self.clock)

    def new_machine(self) -> FarmStateMachine:
        return FarmStateMachine(self.app_factory() if self.app_factory else None, self.decider)

    # -- the loop ---------------------------------------------------------------------------
    def busy(self) -> bool:
        """Is there work for this group's turn without waiting for sockets? (Without it
        and without ticks due, the node skips the group's turn.)"""
        if self.clock.quiesced_at is not None:     # it quiesced with nothing pending
            return bool(self.inbox or self.client_inbox)
        return bool(self.inbox or self.client_inbox or self.clock.owed) \
            or self.notice is not None or self.service.has_pending or self.driver.busy()

    def first_campaign(self, leader: int) -> None:
        """A brand-new farm elects at once: the voter `leader` of the initial
        configuration campaigns as it starts (a TimeoutNow to itself) instead of waiting
        out an election timeout. The node names another leader for each group, so that
        the groups' first leaders spread over the voters. Only a
        node that has never seen a term or an entry does it; Raft's safety does not
        depend on when anyone campaigns."""
        raft = self.raft
        voters = sorted(raft.configuration.voters)
        if raft.term == 0 and raft.last_index == 0 and voters and not self.config.observer \
                and self.id == leader and leader in voters:
            raft.step(TimeoutNow(term=0, source=self.id, destination=self.id))

    def turn(self, now: float) -> None:
        """One loop turn: peers' messages and ticks, lease-sensitive reads, the clients'
        calls and writes (one `propose_many`), the Ready driver, the pages read meanwhile
        (by readers of its own; the node pumps the readers its groups share).
        A leader or candidate steps the messages first: it never misses the answers
        waiting for it. A follower takes the ticks first: the heartbeats that waited
        through a stall count as heard now (stamped late, never early: its refusal of
        votes only lengthens, leases stay safe)."""
        service = self.service
        if self.raft.role is Role.FOLLOWER:
            ticked = self.driver.tick()
            reads = self._step_inbox()
        else:
            reads = self._step_inbox()
            ticked = self.driver.tick()
        if ticked:
            service.on_tick(now)
        if reads:
            self._step(reads)
        if self.client_inbox:
            frames, self.client_inbox = self.client_inbox, []
            for conn, wire, slot in frames:
                if not conn.closed:
                    service.on_client(conn, wire, slot)
        service.propose_pending()
        self.driver.run()
        service.pump_reads()

    def _step_inbox(self) -> list[Message]:
        """Step the peers' messages, vote requests last; return the lease-sensitive
        ones (read requests). A vote request that waited through a stall beside the
        leader's heartbeats is judged once those are heard: a member starved of CPU
        then refuses it (in lease) instead of electing against a live leader. (Any
        order is one the network could have made.)"""
        if not self.inbox:
            return []
        inbox, self.inbox = self.inbox, []
        reads = [m for m in inbox if type(m) is ReadIndexRequest]
        votes = [m for m in inbox if type(m) is RequestVote]
        if reads or votes:
            inbox = [m for m in inbox if type(m) is not ReadIndexRequest
                     and type(m) is not RequestVote]
            inbox += votes
        self._step(inbox)
        return reads

    def _step(self, inbox: list[Message]) -> None:
        me = self.id
        try:
            self.raft.step_many([m for m in inbox if m.destination == me])
        except RaftError as exc:       # a peer sent something impossible: drop the batch
            log.error("node %d: group %d dropped messages the core refused: %s", self.id,
                      self.group, exc)

    def close(self) -> None:
        self.service.shutdown()
        self.disk.close()

    # -- the Ready driver's application side (consensus.raft.driver) ------------------------
    def on_ready(self, rd: Ready) -> None:
        self.transport.handed_out(rd.send_after_persist, self.group)
        self.disk.expect(rd)
        if rd.soft_state is not None:
            self._on_soft_state(rd.soft_state)

    def restore(self, snapshot: Snapshot) -> None:
        self.machine.restore(snapshot.data, snapshot.index)
        self._snapshot_index = snapshot.index
        self.service.on_restored(snapshot.index)

    def on_truncated(self, index: int) -> None:
        self.service.on_truncated(index)

    def apply(self, entries: list[Entry]) -> None:
        apply, on_applied = self.machine.apply, self.service.on_applied
        for entry in entries:
            on_applied(entry, apply(entry))
        last = entries[-1].index
        self.service.on_state_changed(last)
        if last - self._snapshot_index >= self.config.snapshot_interval:
            self._snapshot_due = True

    def on_read_states(self, states: list[ReadState]) -> None:
        self.service.on_read_states(states)

    def after_advance(self) -> None:
        if self._snapshot_due:
            self._take_snapshot()

    def _take_snapshot(self) -> None:
        self._snapshot_due = False
        index = self.machine.applied
        try:
            snapshot = self.raft.snapshot_at(index, self.machine.snapshot())
        except RaftError as exc:
            log.warning("node %d: group %d: no snapshot at %d: %s", self.id, self.group,
                        index, exc)
            return
        self.storage.save_snapshot(snapshot)
        self._snapshot_index = index
        keep_from = index + 1 - self.config.retain_entries
        self.storage.compact(self.machine.ledger.referenced_floor(keep_from))

    def _on_soft_state(self, soft: SoftState) -> None:
        old = self.soft
        self.soft = soft
        self.observer.soft_state(old, soft)
        where = f"node {self.id}" if self.group == 0 else \
            f"node {self.id} partition {self.group}"
        if old is None or old.role is not soft.role:
            log.info("%s: %s -> %s (term %d, leader %s)", where,
                     old.role.value if old else "start", soft.role.value, soft.term,
                     soft.leader_id)
        if old is None or old.configuration != soft.configuration:
            log.info("%s: membership %s", where, soft.configuration)
            for node_id, address in soft.configuration.addresses.items():
                if node_id != self.id:
                    self.learn_address(node_id, address)
            self.service.publish_event("voters-changed", {
                "voters": sorted(soft.configuration.voters),
                "observers": sorted(soft.configuration.observers),
                "outgoing": sorted(soft.configuration.outgoing)})
        if old is None or old.leader_id != soft.leader_id or old.term != soft.term:
            if old is not None and old.leader_id != soft.leader_id:
                log.info("%s: leader is now %s (term %d)", where, soft.leader_id, soft.term)
            self.service.publish_event("leader-changed", {})
        if old is not None and old.role is Role.LEADER and soft.role is not Role.LEADER:
            self.consumers.clear()
        if soft.role is Role.LEADER and (old is None or old.role is not Role.LEADER):
            self.leader_since_ms = int(time.time() * 1000)
            self.service.on_became_leader()

    # -- status -------------------------------------------------------------------------------
    def status_dict(self) -> dict:
        raft = self.raft
        return {"role": raft.role.value, "term": raft.term, "commit": raft.commit_index,
                "last": raft.last_index, "applied": self.machine.applied,
                "logSize": self.storage.log_bytes, "leader": raft.leader_id,
                "leaderSince": self.leader_since_ms if raft.role is Role.LEADER else None,
                "quiesced": self.clock.quiesced_at is not None, "pulls": self.network.pulls}


def _bootstrap(config: "NodeConfig", addresses: dict[int, str], group: int
               ) -> Configuration:
    """The initial members name this node; an observer that joins gets its parents
    (the peers) only: it is a member once the farm adds it. (Naming it made the first
    committed configuration it pulled look like its removal: it stopped itself when the
    add-server came more than two election timeouts later.) With --replicas a group's
    voters are the nodes placed for it (config.members_of)."""
    voters = set(config.peers) | ({config.id} if not config.observer else set())
    if config.replicas is not None:
        voters = set(config.members_of(group))
        addresses = {n: a for n, a in addresses.items() if n in voters}
    observers = set(config.observers) | \
        ({config.id} if config.observer and not config.join else set())
    return Configuration.of(voters, observers - voters, dict(addresses))
