"""A garlicfarm node: the pure Raft core driven by one event-loop thread.

`FarmNode(config).run()` owns everything: the `RaftNode`, its `DiskStorage`, the state
machine, the `Transport` and the client `Service`. One loop turn:

1. wait for sockets (at most until the next tick), read everything that is there;
2. step the peers' messages into the core (one `step_many`), then deliver the ticks
   that came due by the monotonic clock (missed ones too);
3. then the lease-sensitive work: forwarded ReadIndex requests and the clients' calls;
   the service turns the turn's writes into one `propose_many`;
4. run the Ready driver (consensus.raft.driver, the order in docs/raft-core.md) with
   this node as its application, `SyncedDisk` (fsync on a thread: the loop goes on
   meanwhile), `PeerNetwork` (replication leaves before our own disk work; bare
   commit notices and heartbeats go with the turn's other bytes) and `TickClock`;
5. answer what the core dropped, write everything queued.

Every `status_interval` the node appends its Garlic Farm status to the log (through the
leader); it takes a snapshot of the state machine every `snapshot_interval` applied
entries and compacts the log behind it. It logs one line per role change, membership
change, and refused connections as rate-limited summaries (the gate's); SIGTERM (or `stop()`) ends the loop cleanly.
"""
from __future__ import annotations

import ipaddress
import logging
import signal
import threading
import time
from typing import Callable

from consensus.raft import (AppendEntries, Configuration, Entry, Message, RaftError, RaftNode,
                            RaftOptions, ReadIndexRequest, ReadState, Ready, ReadyDriver,
                            RequestVote, Role, Snapshot, SoftState, StateMachine, TimeoutNow)
from consensus.runtime.admission import AdmissionLimits
from consensus.runtime.config import NodeConfig
from consensus.runtime.consumers import ConsumerBook, counted_rows
from consensus.runtime.machines import FarmStateMachine
from consensus.runtime.metrics import NodeObserver
from consensus.runtime.node_view import NodeView
from consensus.runtime.service import Service
from consensus.runtime.status import status_json
from consensus.runtime.disk_storage import DiskStorage, SnapshotView, SyncedDisk
from consensus.runtime.transport import Transport
from consensus.storage import FsyncPolicy
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


class PeerNetwork:
    """The Ready driver's network: the transport. Replication leaves at once, before
    our own disk work; bare commit notices and heartbeats wait for the turn's other
    bytes (the clients' answers); acknowledgements leave before we apply."""

    def __init__(self, transport: Transport, observer: NodeObserver) -> None:
        self.transport, self.observer = transport, observer

    def send_now(self, msgs: list[Message]) -> None:
        send = self.transport.send
        carries = False
        for msg in msgs:
            send(msg)
            carries = carries or type(msg) is not AppendEntries or bool(msg.entries)
        if carries:
            self.transport.flush()
            self.observer.sent(msgs)

    def send_persisted(self, msgs: list[Message]) -> None:
        for msg in msgs:
            self.transport.send(msg)
        self.transport.flush()

    def flush(self) -> None:
        self.transport.flush()


class FarmNode:
    """One node process's runtime. Build it, then call `run()` (blocks until stopped)."""

    def __init__(self, config: NodeConfig,
                 app_factory: Callable[[], StateMachine] | None = None) -> None:
        self.config = config
        self.id = config.id
        self.security = config.security()
        self.started = time.monotonic()
        self.observer = NodeObserver()
        self.app_factory = app_factory
        self.storage = DiskStorage(config.data_dir, fsync=config.fsync,
                                   segment_bytes=config.segment_bytes)
        self.fsyncs = FsyncPolicy.parse(config.fsync).fsyncs
        self.machine = self.new_machine()
        snapshot = self.storage.snapshot()
        if snapshot is not None:
            self.machine.restore(snapshot.data, snapshot.index)
        self._snapshot_index = snapshot.index if snapshot is not None else 0
        self.addresses: dict[int, str] = {**config.peers, **config.observers,
                                          config.id: config.endpoint}
        ticks = config.election_ticks
        options = RaftOptions(election_timeout_min=ticks, election_timeout_max=2 * ticks,
                              heartbeat_interval=max(1, ticks // 3),
                              pre_vote=config.wire == "garlicfarm", observer=config.observer)
        # A joining voter starts with no configuration (the leader sends it one); a
        # joining observer starts from --peers so that it knows whom to pull from (it
        # never votes, so a stale guess cannot hurt).
        bootstrap = None if config.join and not config.observer else self._bootstrap()
        self.raft = RaftNode(config.id, self.storage, options, configuration=bootstrap,
                             applied=self._snapshot_index)
        self.transport = Transport(
            node_id=config.id, wire=config.wire, security=self.security, listen=config.listen,
            listen_fd=config.listen_fd,
            address_of=self.dial_address_of, on_core=self._inbox_append,
            on_client=self._on_client, on_closed=self._on_closed,
            accept_marker=self._accept_marker, on_client_ack=self._on_client_ack,
            endpoint_of=self.address_of, client_budget=config.client_buffer_budget,
            limits=AdmissionLimits(max_connections=config.max_connections),
            on_refused=self.observer.connection_refused)
        self.transport.on_bad_input = self.observer.bad_input
        self.port = self.transport.port
        self.consumers = ConsumerBook(
            counted_rows(self.raft.log_view, lambda entry: self.machine.verdict(entry)),
            lambda: (self.raft.log_view.first_index(), self.machine.applied + 1),
            expiry=config.consumer_expiry)
        self.service = Service(NodeView(
            id=self.id, config=config, core=self.raft, log=self.raft.log_view,
            read_applied=self.storage.read_applied,
            machine=self.machine, transport=self.transport,
            snapshots=SnapshotView(self.storage.snapshots),
            latest_snapshot=self.storage.snapshot, new_machine=self.new_machine,
            address_of=self.address_of, learn_address=self.learn_address,
            status=self.status_dict, proposals_dropped=self.observer.proposals_dropped,
            consumers=self.consumers))
        self._inbox: list[Message] = []
        self._client_inbox: list = []
        self._stop = threading.Event()
        self._soft: SoftState | None = None
        self._leader_hint: int | None = None
        self._status_target = 0
        self._leader_since_ms: int | None = None    #: wall clock of this node's election
        self._snapshot_due = False
        self._next_stall_log = 0.0
        self.disk = SyncedDisk(self.storage, fsyncs=self.fsyncs, wake=self.transport.wake,
                               observer=self.observer)
        self.clock = TickClock(config.tick)
        self.driver = ReadyDriver(self.raft, self.disk,
                                  PeerNetwork(self.transport, self.observer), self, self.clock)
        self.stopped_reason: str | None = None

    def _bootstrap(self) -> Configuration:
        config = self.config
        voters = set(config.peers) | ({config.id} if not config.observer else set())
        observers = set(config.observers) | ({config.id} if config.observer else set())
        return Configuration.of(voters, observers - voters, dict(self.addresses))

    def new_machine(self) -> FarmStateMachine:
        return FarmStateMachine(self.app_factory() if self.app_factory else None)

    # -- addresses ------------------------------------------------------------------------
    def address_of(self, node_id: int) -> str | None:
        """Where peers and clients reach `node_id` (the configuration's endpoint)."""
        return self.raft.configuration.addresses.get(node_id) or self.addresses.get(node_id)

    def dial_address_of(self, node_id: int) -> str | None:
        """Where we dial `node_id`: --peer-address when given (a proxy), else its endpoint."""
        return self.config.peer_address.get(node_id) or self.address_of(node_id)

    def learn_address(self, node_id: int, address: str) -> None:
        if self.addresses.get(node_id) != address:
            self.addresses[node_id] = address
            self.transport.drop_peer(node_id)

    # -- callbacks from the transport ----------------------------------------------------------
    def _inbox_append(self, msg: Message) -> None:
        self._inbox.append(msg)

    def _on_client(self, conn, wire, slot) -> None:
        self._client_inbox.append((conn, wire, slot))

    def _on_closed(self, conn) -> None:
        self.service.on_closed(conn)

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
        log.info("node %d listening on %s:%d (cluster %r, wire %s, fsync %s, %s)",
                 self.id, config.listen.rsplit(":", 1)[0], self.port, config.cluster,
                 config.wire, config.fsync, "observer" if config.observer else "voter")
        self._warn_if_exposed()
        next_status = time.monotonic() + min(config.status_interval, 0.5)
        next_consumers = time.monotonic() + CONSUMERS_REFRESH
        raft, transport, service, driver = self.raft, self.transport, self.service, self.driver
        clock = self.clock
        clock.start()
        self._first_campaign()
        readers = service.log_calls.reads   # reader threads wait while a turn runs
        readers.turn_begins()
        try:
            while not self._stop.is_set():
                busy = self._inbox or self._client_inbox or driver.busy()
                readers.turn_ends()
                try:
                    transport.poll(0.0 if busy else clock.until_next())
                finally:
                    readers.turn_begins()
                # After a stall (no CPU, the GIL, a long turn) the ticks that came due and
                # the messages that waited meet in one turn; the core takes the ticks as
                # one catch-up (RaftNode.tick(count): a stall is not silence). A leader
                # or candidate steps the messages first: it never misses the answers
                # waiting for it. A follower takes the ticks first: the heartbeats that
                # waited count as heard now (stamped late, never early: its refusal of
                # votes only lengthens, leases stay safe). Lease-checked reads come after
                # the ticks, so a lease is never judged by a clock that lags
                # (docs/raft-core.md).
                now = time.monotonic()
                if raft.role is Role.FOLLOWER:
                    ticked = driver.tick()
                    reads = self._step_inbox()
                else:
                    reads = self._step_inbox()
                    ticked = driver.tick()
                if ticked:
                    service.on_tick(now)
                    self._ticks_late(clock.late)
                if reads:
                    self._step(reads)
                if self._client_inbox:
                    frames, self._client_inbox = self._client_inbox, []
                    for conn, wire, slot in frames:
                        if not conn.closed:
                            service.on_client(conn, wire, slot)
                service.propose_pending()
                driver.run()
                service.pump_reads()
                if now >= next_status:
                    next_status = now + config.status_interval
                    self._publish_status()
                if now >= next_consumers:
                    next_consumers = now + CONSUMERS_REFRESH
                    if raft.role is Role.LEADER:
                        self.consumers.lags()
                transport.end_turn(raft.term)
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

    def _first_campaign(self) -> None:
        """A brand-new farm elects at once: the lowest voter of the initial configuration
        campaigns as it starts (a TimeoutNow to itself), instead of waiting out an
        election timeout. Only a node that has never seen a term or an entry does it;
        Raft's safety does not depend on when anyone campaigns."""
        raft = self.raft
        voters = raft.configuration.voters
        if raft.term == 0 and raft.last_index == 0 and voters and self.id == min(voters) \
                and not self.config.observer:
            raft.step(TimeoutNow(0, self.id, self.id))

    def _step_inbox(self) -> list[Message]:
        """Step the peers' messages, vote requests last; return the lease-sensitive
        ones (read requests). A vote request that waited through a stall beside the
        leader's heartbeats is judged once those are heard: a member starved of CPU
        then refuses it (in lease) instead of electing against a live leader. (Any
        order is one the network could have made.)"""
        if not self._inbox:
            return []
        inbox, self._inbox = self._inbox, []
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
            log.error("node %d: dropped messages the core refused: %s", self.id, exc)

    def _shutdown(self) -> None:
        self.service.shutdown()
        self.transport.shutdown()
        self.disk.close()
        log.info("node %d stopped", self.id)

    # -- the Ready driver's application side (consensus.raft.driver) ------------------------
    def on_ready(self, rd: Ready) -> None:
        self.transport.handed_out(rd.send_after_persist)
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
            log.warning("node %d: no snapshot at %d: %s", self.id, index, exc)
            return
        self.storage.save_snapshot(snapshot)
        self._snapshot_index = index
        keep_from = index + 1 - self.config.retain_entries
        self.storage.compact(self.machine.ledger.referenced_floor(keep_from))

    def _on_soft_state(self, soft: SoftState) -> None:
        old = self._soft
        self._soft = soft
        self.observer.soft_state(old, soft)
        if old is None or old.role is not soft.role:
            log.info("node %d: %s -> %s (term %d, leader %s)", self.id,
                     old.role.value if old else "start", soft.role.value, soft.term,
                     soft.leader_id)
        if old is None or old.configuration != soft.configuration:
            log.info("node %d: membership %s", self.id, soft.configuration)
            for node_id, address in soft.configuration.addresses.items():
                if node_id != self.id:
                    self.learn_address(node_id, address)
            self.service.publish_event("voters-changed", {
                "voters": sorted(soft.configuration.voters),
                "observers": sorted(soft.configuration.observers),
                "outgoing": sorted(soft.configuration.outgoing)})
        if old is None or old.leader_id != soft.leader_id or old.term != soft.term:
            if old is not None and old.leader_id != soft.leader_id:
                log.info("node %d: leader is now %s (term %d)", self.id, soft.leader_id,
                         soft.term)
            self.service.publish_event("leader-changed", {})
        if old is not None and old.role is Role.LEADER and soft.role is not Role.LEADER:
            self.consumers.clear()
        if soft.role is Role.LEADER and (old is None or old.role is not Role.LEADER):
            self._leader_since_ms = int(time.time() * 1000)
            self.service.on_became_leader()

    # -- status -------------------------------------------------------------------------------
    def status_dict(self) -> dict:
        raft = self.raft
        return {"role": raft.role.value, "term": raft.term, "commit": raft.commit_index,
                "last": raft.last_index, "applied": self.machine.applied,
                "logSize": self.storage.log_bytes, "leader": raft.leader_id,
                "leaderSince": self._leader_since_ms if raft.role is Role.LEADER else None}

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

