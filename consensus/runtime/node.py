"""A garlicfarm node: the pure Raft cores of its groups driven by one event-loop thread.

`FarmNode(config).run()` owns everything: the `Transport` (one port, one connection per
peer pair for every group), the tick clock, the fsync thread, and one `Group` per
partition (group.py: a `RaftNode`, its `DiskStorage`, the state machine and the client
`Service`). A farm of one partition is the farm of one group it has always been. One
loop turn:

1. wait for sockets (at most until the next tick), read everything that is there (each
   frame goes to the inbox of the group it names, docs/protocol.md "Groups");
2. count the ticks that came due by the monotonic clock (missed ones too), once;
3. each group's turn (Group.turn): step the peers' messages into its core, then the
   ticks, then the lease-sensitive work (forwarded ReadIndex requests, the clients'
   calls; the turn's writes in one `propose_many`), then its Ready driver
   (consensus.raft.driver) with `SyncedDisk` (the fsyncs of every group on one thread,
   a round per turn), `PeerNetwork` and the turn's ticks;
4. answer what the cores dropped, write everything queued (all groups' frames to a
   peer leave together).

Every `status_interval` the node appends its Garlic Farm status to group 0's log
(through its leader); the `partitions` call answers its live view of every group. Each
group takes a snapshot
of its state machine every `snapshot_interval` applied entries and compacts its log
behind it. With several partitions a `Balancer` moves leaderships so that no node leads
more than its share. It logs one line per role change, membership change, and refused
connections as rate-limited summaries (the gate's); SIGTERM (or `stop()`) ends the loop
cleanly.
"""
from __future__ import annotations

import ipaddress
import logging
import signal
import threading
import time
from typing import Callable

from consensus.raft import Message, PullEntries, Role, StateMachine
from consensus.runtime.admission import AdmissionLimits
from consensus.common.partitions import DRAINED_KEY, parse_drained, placed_leader
from consensus.runtime.balancer import Balancer
from consensus.runtime.budget import Trust
from consensus.runtime.config import NodeConfig
from consensus.runtime.disk_storage import CommitSaver
from consensus.runtime.sync_rounds import SyncThread
from consensus.runtime.group import Group, TurnTicks
from consensus.runtime.log_reads import LogReads
from consensus.runtime.machines import Decider, Ledger
from consensus.runtime.reader_process import ReaderProcess
from consensus.runtime.groups import GroupSet
from consensus.runtime.metrics import NodeObserver
from consensus.runtime.abort_relay import AbortRelay
from consensus.runtime.prepared_aborts import PreparedAborts
from consensus.runtime.quiesce import QUIET_MESSAGES, Quiescer
from consensus.runtime.status import status_json
from consensus.runtime.transport import Transport
from consensus.wire.envelope import CommandKind, encode_command, new_request_id
from consensus.wire.jraft import LogEntry, ValueType

log = logging.getLogger("garlicfarm.node")

MAX_CATCH_UP_TICKS = 1000
SLOW_TURN = 0.1             #: log loop turns slower than this (seconds)
CONSUMERS_REFRESH = 1.0     #: seconds between counts of the consumers' lag (leader)


class TickClock:
    """The Ready driver's clock: ticks due by the monotonic clock, the missed ones too
    (at most `MAX_CATCH_UP_TICKS` at once), so that a stall never shortens a timeout."""

    def __init__(self, tick: float) -> None:
        self.tick = tick
        self._next = time.monotonic() + tick
        self.late = 0.0     #: how late (s) the last `due` came, past its first tick

    def start(self) -> None:
        """The first tick is one tick from now."""
        self._next = time.monotonic() + self.tick

    def due(self) -> int:
        now = time.monotonic()
        if now < self._next:
            return 0
        self.late = now - self._next
        due = int((now - self._next) / self.tick) + 1
        self._next += due * self.tick
        return min(due, MAX_CATCH_UP_TICKS)

    def until_next(self) -> float:
        """Seconds until the next tick is due (0 when it is)."""
        return max(0.0, self._next - time.monotonic())


class FarmNode:
    """One node process's runtime. Build it, then call `run()` (blocks until stopped)."""

    def __init__(self, config: NodeConfig,
                 app_factory: Callable[[], StateMachine] | None = None) -> None:
        self.config = config
        self.id = config.id
        self.security = config.security()
        self.started = time.monotonic()
        self.observer = NodeObserver()
        self.partitions = GroupSet(config.partitions, config.hosted(),
                                   config.members_of if config.replicas is not None else None)
        self.addresses: dict[int, str] = {**config.peers, **config.observers,
                                          config.id: config.endpoint}
        self.groups: list[Group] = []       # the gate asks for addresses at once
        self.by_group: dict[int, Group] = {}    #: the hosted groups by number (--replicas)
        self.transport = Transport(
            node_id=config.id, wire=config.wire, security=self.security, listen=config.listen,
            listen_fd=config.listen_fd,
            address_of=self.dial_address_of, on_core=self._inbox_append,
            on_client=self._on_client, on_closed=self._on_closed,
            accept_marker=self._accept_marker, on_client_ack=self._on_client_ack,
            endpoint_of=self.address_of, client_budget=config.client_buffer_budget,
            limits=AdmissionLimits(max_connections=config.max_connections),
            on_refused=self.observer.connection_refused, groups=self.partitions,
            on_quiesce=self._on_quiesce if len(self.partitions) > 1 else None)
        self.transport.on_bad_input = self.observer.bad_input
        self.port = self.transport.port
        self.clock = TickClock(config.tick)
        self._ticks = TurnTicks()
        self.syncer = SyncThread(self.transport.wake, self.observer,
                                 shared_from=config.shared_fsync_groups)
        self.saver = CommitSaver()
        self.reads = LogReads(wake=self.transport.wake)    # the groups' log pages
        self.reader: ReaderProcess | None = None    # --log-readers process
        try:
            if config.log_readers == "process":
                self.reader = ReaderProcess(node_id=config.id, nice=config.log_reader_nice)
                self.reads.turn_listeners.append(self.reader.turn)
            for group in self.partitions:
                self.groups.append(Group(
                    group, config, transport=self.transport, observer=self.observer,
                    syncer=self.syncer, saver=self.saver, ticks=self._ticks,
                    addresses=self.addresses,
                    address_of=self.address_of, learn_address=self.learn_address,
                    partitions=self.partitions_view, reads=self.reads, reader=self.reader,
                    app_factory=app_factory,
                    decider=Decider(group, self._decisions) if group else None))
            self.by_group.update((g.group, g) for g in self.groups)
        except BaseException:
            self._close_groups()
            self.reads.close()
            if self.reader is not None:
                self.reader.close()
            self.transport.shutdown()
            raise
        # idle groups 1.. stop ticking (quiesce.py); only a node of several partitions
        self.quiescer = Quiescer(
            self.id, self.transport, tick=config.tick, election_ticks=config.election_ticks,
            heartbeat_ticks=self.groups[0].raft.options.heartbeat_interval,
            peers=lambda: self.groups[0].raft.configuration.members) \
            if len(self.groups) > 1 else None
        self.balancer = Balancer(
            self.id, [g.raft for g in self.groups],
            lambda: parse_drained(self.groups[0].machine.kv.get(DRAINED_KEY)),
            alive=lambda peer: self.quiescer.alive(peer, time.monotonic()),
            groups=config.partitions) \
            if len(self.groups) > 1 else None
        self.aborts = PreparedAborts(config.prepared_timeout) if len(self.groups) > 1 \
            else None
        #: a placed farm's leader of q relays q's aborts to a leader of 0 not hosting q
        self.relay = AbortRelay(self.security, self._partition_zero_endpoints,
                                 config.prepared_timeout) \
            if self.aborts is not None and config.replicas is not None else None
        self._stop = threading.Event()
        self._leader_hint: int | None = None
        self._status_target = 0
        self._next_stall_log = 0.0
        self.stopped_reason: str | None = None

    def _first_leader(self, group: int) -> int:
        """Who campaigns first for `group` in a new farm: with --replicas its placed
        leader (spread over the nodes, config.members_of), else the voter at rank `group`
        (the same rule over every node)."""
        if self.config.replicas is None:
            voters = sorted(self.by_group[group].raft.configuration.voters)
            return voters[group % len(voters)] if voters else self.id
        return placed_leader(group, self.config.farm_nodes)

    def _decisions(self) -> Ledger:
        """Partition 0's ledger, where the other partitions' batches are decided."""
        return self.groups[0].machine.ledger

    # -- group 0: the farm of one group, as metrics and single-group callers see it ----------
    @property
    def raft(self):
        return self.groups[0].raft

    @property
    def machine(self):
        return self.groups[0].machine

    @property
    def service(self):
        return self.groups[0].service

    @property
    def storage(self):
        return self.groups[0].storage

    @property
    def consumers(self):
        return self.groups[0].consumers

    def status_dict(self) -> dict:
        return self.groups[0].status_dict()

    # -- addresses ------------------------------------------------------------------------
    def address_of(self, node_id: int) -> str | None:
        """Where peers and clients reach `node_id` (group 0's configuration's endpoint:
        every group's members are the farm's nodes)."""
        found = self.groups[0].raft.configuration.addresses.get(node_id) if self.groups \
            else None
        return found or self.addresses.get(node_id)

    def dial_address_of(self, node_id: int) -> str | None:
        """Where we dial `node_id`: --peer-address when given (a proxy), else its endpoint."""
        return self.config.peer_address.get(node_id) or self.address_of(node_id)

    def learn_address(self, node_id: int, address: str) -> None:
        if self.addresses.get(node_id) != address:
            self.addresses[node_id] = address
            self.transport.drop_peer(node_id)

    # -- callbacks from the transport ----------------------------------------------------------
    def _inbox_append(self, group: int, msg: Message) -> None:
        g = self.by_group[group]
        g.inbox.append(msg)
        g.notice = None                 # the leader spoke after its Quiesce
        if g.clock.quiesced_at is not None:
            if type(msg) not in QUIET_MESSAGES:
                g.wake_due = True
            elif type(msg) is PullEntries:     # maybe an observer to tell it is quiet
                g.quiet_pulls.append((msg.source, msg.index))

    def _on_quiesce(self, group: int, msg) -> None:
        if group > 0:                   # group 0 never quiesces (quiesce.py)
            self.quiescer.on_quiesce(self.by_group[group], msg)

    def _on_client(self, conn, wire, slot) -> None:
        self.by_group[conn.in_group].client_inbox.append((conn, wire, slot))

    def _on_closed(self, conn) -> None:
        for group in self.groups:
            group.service.on_closed(conn)
        if self.quiescer is not None and conn.peer_id is not None and conn.trust is Trust.PEER:
            self.quiescer.peer_closed(conn.peer_id, time.monotonic())

    def _on_client_ack(self, response) -> None:
        if not response.accepted and response.destination > 0:
            self._leader_hint = response.destination

    def _accept_marker(self, conn, peer_id: int) -> bool:
        """A marker-wire ConnectRequest: refuse our own id and ids not in the cluster."""
        if peer_id == self.id:
            log.warning("refused marker connection from %s: it claims our own id %d",
                        conn.label, peer_id)
            return False
        if peer_id not in self.raft.configuration.members and peer_id not in self.addresses:
            log.warning("refused marker connection from %s: node %d is not in the cluster",
                        conn.label, peer_id)
            return False
        return True

    # -- the loop ---------------------------------------------------------------------------
    def stop(self) -> None:
        """Ask the loop to end (any thread, or a signal handler)."""
        self._stop.set()
        self.transport.wake()

    def run(self) -> None:
        if threading.current_thread() is threading.main_thread():
            signal.signal(signal.SIGTERM, lambda *_: self.stop())
            signal.signal(signal.SIGINT, lambda *_: self.stop())
        config = self.config
        log.info("node %d listening on %s:%d (cluster %r, wire %s, fsync %s, %s%s)",
                 self.id, config.listen.rsplit(":", 1)[0], self.port, config.cluster,
                 config.wire, config.fsync, "observer" if config.observer else "voter",
                 f", {len(self.groups)} partitions" if len(self.groups) > 1 else "")
        self._warn_if_exposed()
        next_status = time.monotonic() + min(config.status_interval, 0.5)
        next_consumers = time.monotonic() + CONSUMERS_REFRESH
        next_aborts = time.monotonic()
        transport, groups, clock, ticks = self.transport, self.groups, self.clock, self._ticks
        by_group = self.by_group
        raft = groups[0].raft
        clock.start()
        for group in groups:
            group.first_campaign(self._first_leader(group.group))
        readers = self.reads     # reader threads wait while a turn runs
        readers.turn_begins()
        try:
            while not self._stop.is_set():
                busy = any(group.busy() for group in groups)
                readers.turn_ends()
                try:
                    transport.poll(0.0 if busy else clock.until_next())
                finally:
                    readers.turn_begins()
                # After a stall (no CPU, the GIL, a long turn) the ticks that came due and
                # the messages that waited meet in one turn; each group's core takes the
                # ticks as one catch-up (RaftNode.tick(count): a stall is not silence), in
                # the order Group.turn gives by role. Lease-checked reads come after the
                # ticks, so a lease is never judged by a clock that lags (docs/raft-core.md).
                ticks.now = clock.due()
                if ticks.now:
                    self._ticks_late(clock.late)
                now = time.monotonic()
                quiescer = self.quiescer
                if quiescer is None:
                    for group in groups:        # an idle group's turn waits for its ticks
                        if ticks.now or group.busy():
                            group.turn(now)
                else:
                    if ticks.now or groups[0].busy():
                        groups[0].turn(now)
                    for group in groups[1:]:    # a quiesced one waits for a message
                        if group.busy() or ticks.now and group.clock.quiesced_at is None:
                            quiescer.before_turn(group, now)
                            group.turn(now)
                            quiescer.after_turn(group, now, bool(ticks.now))
                    quiescer.tick(now)
                self.reads.pump(transport.reply)    # every group's finished pages, once
                if self.balancer is not None and ticks.now and self.balancer.tick(now) \
                        and quiescer is not None:
                    for group in list(quiescer.quiesced):   # a transfer needs the clock
                        if group.raft.transferring_to is not None:
                            quiescer.wake(group, now)
                if now >= next_status:
                    next_status = now + config.status_interval
                    self._publish_status()
                if self.aborts is not None and now >= next_aborts:
                    next_aborts = now + self.aborts.interval
                    self._abort_undecided(now)
                if now >= next_consumers:
                    next_consumers = now + CONSUMERS_REFRESH
                    for group in groups:
                        if group.raft.role is Role.LEADER:
                            group.consumers.lags()
                transport.end_turn(lambda g: by_group[g].raft.term)
                took = time.monotonic() - transport.woke
                self.observer.turn(took)
                if took > SLOW_TURN:
                    log.warning("node %d: a loop turn took %.0f ms (%.0f ms of CPU; ticks wait "
                                "meanwhile; applied %d)", self.id, took * 1000,
                                (time.thread_time() - transport.woke_cpu) * 1000,
                                self.machine.applied)
                if raft.removed:
                    self.stopped_reason = "removed from the cluster"
                    log.info("node %d: removed from the cluster; stopping", self.id)
                    break
        finally:
            readers.turn_ends()
            self._shutdown()

    def _abort_undecided(self, now: float) -> None:
        """Abort prepared commits undecided for --prepared-timeout, and roll the aborts
        forward (prepared_aborts.py): each in a partition this node leads, or relayed to
        partition 0's leader when that one does not host the partition (abort_relay.py)."""
        groups, by_group, timeout = self.groups, self.by_group, self.aborts.timeout

        def leads(partition: int) -> bool:
            return by_group[partition].raft.role is Role.LEADER

        def relays(partition: int) -> bool:
            leader = by_group[0].raft.leader_id
            return self.relay is not None and leads(partition) and not leads(0) \
                and (leader is None or leader not in self.config.members_of(partition))
        for order in self.aborts.check(
                now, groups[0].machine.ledger, [(g.group, g.machine.ledger) for g in groups[1:]],
                proposes=lambda target, q: leads(target) or target == 0 and relays(q)):
            if order.partition == 0 and not leads(0):
                self.relay.submit(order)
                continue
            group = by_group[order.partition]
            if self.quiescer is not None and order.partition:
                self.quiescer.wake(group, now)      # a quiesced group takes no turn
            group.service.propose_raw(encode_command(
                CommandKind.COMMIT, new_request_id(), order.query, order.batch, [],
                order.metadata(timeout)), command=True)
            if not order.partition:
                log.warning("node %d: aborting batch %d of query %r: its prepared commits "
                            "%s (partition: indexes) waited %g s for partition 0's "
                            "decision (--prepared-timeout); their readers go on without "
                            "them", self.id, order.batch, order.query, order.named, timeout)

    def _ticks_late(self, late: float) -> None:
        """Record how late the ticks came; log a stall past SLOW_TURN (rate-limited: at
        most one line a second). A stall between turns (no CPU, the GIL) is not in the
        turn histogram, yet it delays heartbeats the same."""
        self.observer.ticks_late(late)
        now = time.monotonic()
        if late > SLOW_TURN and now >= self._next_stall_log:
            self._next_stall_log = now + 1.0
            log.warning("node %d: the loop's ticks came %.0f ms late (the loop waited for "
                        "the CPU, the GIL or a long turn; a lag near the election timeout "
                        "risks an election)", self.id, late * 1000)

    def _warn_if_exposed(self) -> None:
        """SPECS §1: plain TCP is for loopback and private networks only."""
        if self.security.tls:
            return
        host = self.config.listen.rsplit(":", 1)[0].strip("[]")
        try:
            address = ipaddress.ip_address(host)
            private = address.is_loopback or address.is_private and not address.is_unspecified
        except ValueError:
            private = host == "localhost"
        if not private:
            log.warning("node %d listens on %s WITHOUT TLS: Garlic Farm traffic (credentials "
                        "digests, the replicated log) crosses the network in clear; give "
                        "--tls-cert/--tls-key, or listen on loopback or a private network, "
                        "or dial through --proxy", self.id, self.config.listen)

    def _partition_zero_endpoints(self) -> list[str]:
        """Where the relay reaches partition 0's members (every node but this one)."""
        return [address for n in self.config.members_of(0) if n != self.id
                for address in [self.address_of(n)] if address]

    def _shutdown(self) -> None:
        if self.relay is not None:
            self.relay.close()
        for group in self.groups:
            group.service.shutdown()
        self.reads.close()
        if self.reader is not None:
            self.reader.close()
        self.transport.shutdown()
        self._close_groups()
        log.info("node %d stopped", self.id)

    def _close_groups(self) -> None:
        """Finish the fsyncs under way, then close every group's storage."""
        self.syncer.close()
        for group in self.groups:
            group.disk.close()
        self.saver.close()

    # -- status -------------------------------------------------------------------------------
    def partitions_view(self) -> list[dict]:
        """This node's live view of every partition it hosts (the `partitions` call,
        the status entries)."""
        return [{"partition": g.group, **g.status_dict(),
                 "replicas": sorted(g.raft.configuration.voters)} for g in self.groups]

    def _publish_status(self) -> None:
        config, raft = self.config, self.raft
        configuration = raft.configuration
        data = status_json(
            cluster=config.cluster, date_ms=int(time.time() * 1000), node_id=self.id,
            config={"endpoint": config.endpoint, "wire": config.wire, "fsync": config.fsync,
                    "observer": raft.role is Role.OBSERVER,
                    "statusInterval": config.status_interval,
                    "voters": sorted(configuration.voters),
                    "observers": sorted(configuration.observers)},
            raft=self.status_dict(), uptime_ms=int((time.monotonic() - self.started) * 1000),
            publishing=self.machine.publisher() == self.id)
        log.debug("node %d status: %s", self.id, data.decode())
        if not config.publishes_status:
            return
        if raft.role is Role.LEADER:
            self.service.propose_raw(data)
            return
        target = raft.leader_id or self._leader_hint
        if target is None or target == self.id:
            voters = sorted(configuration.voters - {self.id})
            if not voters:
                return
            self._status_target = (self._status_target + 1) % len(voters)
            target = voters[self._status_target]
        self.transport.send_client_entries(target, [LogEntry(0, ValueType.APPLICATION, data)])

    def uptime(self) -> float:
        return time.monotonic() - self.started
