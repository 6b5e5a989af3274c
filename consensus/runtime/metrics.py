"""Prometheus metrics of a `garlicfarm node` (``--metrics HOST:PORT``).

Two sources, one registry per node:

* `NodeCollector` reads the node's public state at scrape time (term, role, leader,
  commit / applied / last index, each follower's match on the leader, log size,
  connections, the sink ledger's committed batches): nothing is kept up to date on
  the loop for it. It runs on the HTTP thread and reads plain attributes; a dict is
  copied (atomic under the GIL) before it is walked.
* `NodeObserver` holds what cannot be read afterwards: counters and latency histograms
  the node feeds at its measurement points (a call each; see docs/operations.md).

Names follow etcd's where one applies (``etcd_server_has_leader`` ->
``garlicfarm_server_has_leader``, ``etcd_disk_wal_fsync_duration_seconds`` ->
``garlicfarm_disk_wal_fsync_duration_seconds``, ...).
"""
from __future__ import annotations

from typing import TYPE_CHECKING, Iterable, Iterator, Mapping

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily, InfoMetricFamily, Metric
from prometheus_client.registry import Collector

from consensus.raft import InstallSnapshot, Message, Role, SoftState
from consensus.runtime.http_endpoint import HttpEndpoint, serve_metrics

if TYPE_CHECKING:
    import ssl

    from consensus.runtime.consumers import ConsumerLag
    from consensus.runtime.node import FarmNode

#: etcd's disk buckets: 1 ms to 8 s, doubling
DISK_BUCKETS = tuple(0.001 * 2 ** i for i in range(14))
#: loop turns: 0.25 ms to 8 s, doubling (a turn is usually well under a tick)
TURN_BUCKETS = tuple(0.00025 * 2 ** i for i in range(16))


class NodeObserver:
    """The counters and histograms a node feeds; each method is one measurement."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry(auto_describe=True)
        r = self.registry
        self.leader_changes = Counter(
            "garlicfarm_server_leader_changes_seen", "Leader changes seen by this member "
            "(a new, known leader).", registry=r)
        self.proposals_failed = Counter(
            "garlicfarm_server_proposals_failed", "Proposals the leader refused (not the "
            "leader any more, or dropped while busy).", registry=r)
        self.snapshot_sends = Counter(
            "garlicfarm_network_snapshot_sends", "InstallSnapshot messages sent, by "
            "follower.", ["to"], registry=r)
        self.refused = Counter(
            "garlicfarm_network_connections_refused", "Incoming connections refused "
            "before any Raft message, by reason (auth: wrong credentials; handshake, tls, "
            "wire, timeout, evicted, max_connections, closed: see docs/operations.md).",
            ["reason"], registry=r)
        self.fsync = Histogram(
            "garlicfarm_disk_wal_fsync_duration_seconds", "Latency of the log's fsyncs "
            "(group commit).", buckets=DISK_BUCKETS, registry=r)
        self.bad = Counter(
            "garlicfarm_network_bad_input", "Input refused after a connection opened, by "
            "kind (checksum: a marker-wire packet whose CRC failed, asked for again; "
            "corrupt_stream: a connection closed because its bytes cannot be read on; "
            "unknown_group: a GroupSelect for a partition this node does not host).",
            ["kind"], registry=r)
        self.shared_flushes = Counter(
            "garlicfarm_disk_shared_flushes", "Sync rounds whose groups' logs and votes "
            "were made durable by one syncfs of the disk instead of fsyncs per group "
            "(--shared-fsync-groups).", registry=r)
        self.turns = Histogram(
            "garlicfarm_server_loop_turn_duration_seconds", "Time the event loop spends on "
            "one turn after its wait (reading, stepping, proposing, the Ready loop, "
            "writing): heartbeats and votes wait that long at most.",
            buckets=TURN_BUCKETS, registry=r)
        self.tick_lag = Histogram(
            "garlicfarm_server_loop_tick_lag_seconds", "How late the loop delivered its "
            "ticks (past the first one due): time it waited for the CPU, the GIL or a long "
            "turn; a lag near the election timeout (default 300 ms) risks an election.",
            buckets=TURN_BUCKETS, registry=r)
        self.append = Histogram(
            "garlicfarm_disk_wal_append_duration_seconds", "Latency of appending a "
            "Ready's entries to the log (before any fsync).", buckets=DISK_BUCKETS,
            registry=r)

    def soft_state(self, old: SoftState | None, new: SoftState) -> None:
        """etcd's rule: count when a known leader differs from the one before."""
        if new.leader_id is not None and (old is None or old.leader_id != new.leader_id):
            self.leader_changes.inc()

    def proposals_dropped(self, count: int) -> None:
        self.proposals_failed.inc(count)

    def sent(self, messages: Iterable[Message]) -> None:
        for msg in messages:
            if type(msg) is InstallSnapshot:
                self.snapshot_sends.labels(str(msg.destination)).inc()

    def connection_refused(self, reason: str) -> None:
        """Called by the gate thread (prometheus_client's counters are thread-safe)."""
        self.refused.labels(reason).inc()

    def bad_input(self, kind: str) -> None:
        self.bad.labels(kind).inc()

    def turn(self, seconds: float) -> None:
        self.turns.observe(seconds)

    def ticks_late(self, seconds: float) -> None:
        self.tick_lag.observe(seconds)

    def fsynced(self, seconds: float) -> None:
        self.fsync.observe(seconds)

    def flushed_shared(self) -> None:
        self.shared_flushes.inc()

    def appended(self, seconds: float) -> None:
        self.append.observe(seconds)


def _gauge(name: str, doc: str, value: float, labels: Mapping[str, str] | None = None
           ) -> GaugeMetricFamily:
    if labels:
        family = GaugeMetricFamily(name, doc, labels=list(labels))
        family.add_metric(list(labels.values()), value)
        return family
    return GaugeMetricFamily(name, doc, value=value)


class NodeCollector(Collector):
    """What a node's public state says at scrape time."""

    def __init__(self, node: "FarmNode") -> None:
        self.node = node

    def collect(self) -> Iterable[Metric]:
        node = self.node
        raft, machine = node.raft, node.machine
        role, leader = raft.role, raft.leader_id
        info = InfoMetricFamily("garlicfarm_server", "This member: id, cluster, wire.")
        info.add_metric([], {"id": str(node.id), "cluster": node.config.cluster,
                             "wire": node.config.wire})
        yield info
        yield _gauge("garlicfarm_server_has_leader", "1 when a leader is known.",
                     int(leader is not None))
        yield _gauge("garlicfarm_server_is_leader", "1 when this member leads.",
                     int(role is Role.LEADER))
        yield _gauge("garlicfarm_server_leader_id", "The known leader's id (0: none).",
                     leader or 0)
        roles = GaugeMetricFamily("garlicfarm_server_role", "1 for this member's role.",
                                  labels=["role"])
        for r in Role:
            roles.add_metric([r.value], int(role is r))
        yield roles
        yield _gauge("garlicfarm_server_term", "The current Raft term.", raft.term)
        commit, applied, last = raft.commit_index, machine.applied, raft.last_index
        yield _gauge("garlicfarm_server_proposals_committed_total", "The commit index "
                     "(etcd: committed consensus proposals; a gauge).", commit)
        yield _gauge("garlicfarm_server_proposals_applied_total", "The applied index "
                     "(etcd: applied consensus proposals; a gauge).", applied)
        yield _gauge("garlicfarm_server_proposals_pending", "Entries appended but not "
                     "committed.", max(0, last - commit))
        yield _gauge("garlicfarm_server_last_index", "The last index of the log.", last)
        match = GaugeMetricFamily("garlicfarm_server_follower_match_index", "The leader's "
                                  "match index of each follower.", labels=["follower"])
        lag = GaugeMetricFamily("garlicfarm_server_follower_match_lag", "Entries each "
                                "follower is behind the leader's last index.",
                                labels=["follower"])
        if role is Role.LEADER:
            for peer, progress in sorted(dict(raft.progress).items()):
                if peer != node.id:
                    match.add_metric([str(peer)], progress.match)
                    lag.add_metric([str(peer)], max(0, last - progress.match))
        yield match
        yield lag
        reachable = GaugeMetricFamily("garlicfarm_server_follower_reachable", "1 when the "
                                      "leader heard from the follower within the election "
                                      "timeout, 0 when not (dead, cut off or stalled).",
                                      labels=["follower"])
        ack_age = GaugeMetricFamily("garlicfarm_server_follower_last_ack_seconds", "Seconds "
                                    "since the leader last heard from each follower.",
                                    labels=["follower"])
        tick = node.config.tick
        for peer, contact in sorted(raft.follower_contact().items()):
            reachable.add_metric([str(peer)], int(contact.reachable))
            if contact.ack_age is not None:
                ack_age.add_metric([str(peer)], contact.ack_age * tick)
        yield reachable
        yield ack_age
        yield _gauge("garlicfarm_disk_log_size_bytes", "Bytes of the log's segments.",
                     node.storage.log_bytes)
        yield _gauge("garlicfarm_network_incoming_connections", "Open connections that "
                     "clients and peers made to this member.", len(node.transport.incoming))
        budget = node.transport.budget
        yield _gauge("garlicfarm_network_client_buffered_bytes", "Bytes clients and "
                     "unauthenticated connections hold at this member (partial messages, "
                     "unwritten answers), against --client-buffer-budget.", budget.total)
        yield _gauge("garlicfarm_network_clients_paused", "Clients not read because "
                     "their next message does not fit --client-buffer-budget.",
                     len(budget.paused))
        yield _gauge("garlicfarm_network_active_peers", "Open connections this member "
                     "made to its peers.", len(node.transport.outgoing))
        gate = node.transport.gate
        let_in = GaugeMetricFamily("garlicfarm_network_connections", "Connections the gate "
                                   "let in and still open, clients (bounded by "
                                   "max-connections) and peers apart.", labels=["kind"])
        let_in.add_metric(["client"], gate.established.clients)
        let_in.add_metric(["peer"], gate.established.peers)
        yield let_in
        pending = GaugeMetricFamily("garlicfarm_network_pending_handshakes", "Connections "
                                    "still handshaking, by pool.", labels=["pool"])
        for pool, count in dict(gate.pending.count).items():
            pending.add_metric([pool.value], count)
        yield pending
        yield _gauge("garlicfarm_network_tarpit_held", "Failed logins whose refusal the "
                     "tarpit holds back now.", gate.held)
        yield _gauge("garlicfarm_network_max_connections", "The max-connections setting "
                     "(client connections).", gate.limits.max_connections)
        batches = GaugeMetricFamily("garlicfarm_sink_committed_batches", "Batches the "
                                    "exactly-once sink committed, by streaming query.",
                                    labels=["query"])
        for query, indexes in sorted(dict(machine.ledger.effective).items()):
            batches.add_metric([query], len(indexes))
        yield batches
        yield _gauge("garlicfarm_sink_staged_entries", "Sink entries staged and not yet "
                     "committed or aborted.", len(machine.ledger.staged))
        reads = node.service.log_calls.reads
        yield _gauge("garlicfarm_log_reads_in_flight", "Log reads (read_entries, "
                     "read_journal, entry_rows, query_snapshot) being built by the reader "
                     "threads or waiting for them.", reads.in_flight)
        yield _gauge("garlicfarm_log_reads_refused_total", "Log reads refused because "
                     "too many waited (a counter).", reads.refused)
        reader = node.reader
        if reader is not None:
            yield _gauge("garlicfarm_log_reader_process_restarts_total", "Reader processes "
                         "started after the first because one died (--log-readers process; "
                         "a counter).", reader.restarts)
        yield _gauge("garlicfarm_server_uptime_seconds", "Seconds since the node "
                     "started.", node.uptime())
        quiescer = node.quiescer
        yield _gauge("garlicfarm_server_partitions", "Partitions (Raft groups) this node "
                     "hosts.", len(node.groups))
        yield _gauge("garlicfarm_server_quiesced_groups", "Partitions this node stopped "
                     "ticking because they are idle (docs/runtime.md, \"Quiescing idle "
                     "groups\").", 0 if quiescer is None else len(quiescer.quiesced))
        yield _gauge("garlicfarm_server_group_wakes_total", "Quiesced partitions woken "
                     "again (a counter).", 0 if quiescer is None else quiescer.wakes)
        yield from consumer_families(*node.consumers.current())


def consumer_families(lags: "Iterable[ConsumerLag]", now: float) -> Iterator[Metric]:
    """The readers' positions and lag (at the leader; refreshed every second)."""
    families = {
        "position": GaugeMetricFamily("garlicfarm_consumer_position", "The next index each "
                                      "consumer reads (its last committed end).",
                                      labels=["consumer"]),
        "lag_entries": GaugeMetricFamily("garlicfarm_consumer_lag_entries", "Entries "
                                         "between each consumer's position and the end of "
                                         "the applied log.", labels=["consumer"]),
        "lag_rows": GaugeMetricFamily("garlicfarm_consumer_lag_rows", "Rows those entries "
                                      "show readers (absent while not counted yet).",
                                      labels=["consumer"]),
        "seen": GaugeMetricFamily("garlicfarm_consumer_last_seen_seconds", "Seconds since "
                                  "each consumer last reported (it expires after "
                                  "--consumer-expiry).", labels=["consumer"]),
    }
    for lag in lags:
        label = [lag.name]
        families["position"].add_metric(label, lag.position)
        families["lag_entries"].add_metric(label, lag.lag_entries)
        if lag.lag_rows is not None:
            families["lag_rows"].add_metric(label, lag.lag_rows)
        families["seen"].add_metric(label, max(0.0, now - lag.seen))
    yield from families.values()


def serve_node_metrics(node: "FarmNode", listen: str,
                       credentials: Mapping[str, str] | None = None,
                       tls: "ssl.SSLContext | None" = None) -> HttpEndpoint:
    """Serve the node's metrics on ``http(s)://LISTEN/metrics`` (``--metrics``)."""
    from prometheus_client import GC_COLLECTOR, PLATFORM_COLLECTOR, PROCESS_COLLECTOR
    registry = node.observer.registry
    registry.register(NodeCollector(node))
    for collector in (PROCESS_COLLECTOR, PLATFORM_COLLECTOR, GC_COLLECTOR):
        registry.register(collector)
    return serve_metrics(listen, "--metrics", registry, credentials=credentials,
                         name="metrics", tls=tls)
