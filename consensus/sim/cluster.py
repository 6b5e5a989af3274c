"""One simulated run: servers hosting replicas of every Raft group, the network between
them, the nemesis, each group's clients and safety checker, all driven by one seed. The
same seed always replays the same run."""
from __future__ import annotations

import random
import traceback
from collections import deque
from dataclasses import dataclass, field, replace

from consensus.linearizability import Verdict
from consensus.raft import Configuration, Message, RaftOptions

from .checker import Violation
from .group import SimGroup
from .host import SimHost
from .nemesis import Nemesis, draw_link_faults
from .network import Packet, SimNetwork
from .quiet import SimQuiescer
from .server import SimServer

# Short timeouts so that a few hundred steps see many elections. The lease is as long as
# safety allows (just under the shortest election timeout), so that a lease bug has room
# to show. Small batches and chunks so that pipelining, backfills of several messages,
# chunked snapshots and log sync really happen.
SIM_OPTIONS = RaftOptions(election_timeout_min=10, election_timeout_max=16, heartbeat_interval=2,
                          lease_ticks=8, retry_ticks=5, max_inflight=4, max_entries_per_message=3,
                          max_bytes_per_message=4096, snapshot_chunk_bytes=48,
                          observer_pull_interval=2, observer_pull_max_entries=8,
                          log_sync_batch=8, log_sync_stop_gap=4, membership_retries=3)
MAX_GROUPS = 64


@dataclass
class SimSettings:
    nodes: int = 5              #: initial voters of each group
    groups: int = 1             #: Raft groups, each with a replica on every server
    spares: int = 2             #: extra servers for membership changes and observers
    steps: int = 400            #: fault-injection steps
    settle_steps: int = 600     #: then at most this many calm steps to converge
    p_write: float = 0.5            #: per group and step (so are p_read and p_batch)
    p_read: float = 0.35
    p_batch: float = 0.3            #: a sink writer's move (stage, commit or abort)
    sync_probability: float = 0.7   #: a written Ready is fsynced in the same step
    snapshot_every: int = 20
    keep_snapshots: int = 3
    compact_margin: int = 5
    check_timeout: float = 20.0     #: seconds for the linearizability check of one group
    quiesce: bool = False       #: idle groups quiesce (quiet.py); the clients pause in spells
    verbose: bool = False


@dataclass
class SeedResult:
    seed: int
    steps: int
    violation: Violation | None
    trace: list[str]
    stats: dict[str, int] = field(default_factory=dict)


class SimCluster:
    def __init__(self, seed: int, settings: SimSettings) -> None:
        self.seed = seed
        self.settings = settings
        self.rng = random.Random(seed)
        self.step_no = 0
        self.trace: deque[str] = deque(maxlen=60)
        self.network = SimNetwork(self.rng, draw_link_faults(self.rng))
        total = settings.nodes + settings.spares
        self.servers = {i: SimServer(i, settings.groups) for i in range(1, total + 1)}
        self.groups = [SimGroup(g, self) for g in range(settings.groups)]
        addresses = {i: f"sim://{i}" for i in range(1, total + 1)}
        for group in self.groups:
            # Each group's voters start on a different run of servers (leaders spread).
            voters = [(group.id + i) % total + 1 for i in range(settings.nodes)]
            bootstrap = Configuration.of(voters, addresses=addresses)
            for node_id, server in self.servers.items():
                host = SimHost(node_id, group.id, server.disk,
                               self._options(node_id, group.id, observer=False),
                               bootstrap if node_id in voters else None,
                               snapshot_every=settings.snapshot_every,
                               keep_snapshots=settings.keep_snapshots,
                               compact_margin=settings.compact_margin)
                server.replicas[group.id] = host
                group.hosts[node_id] = host
        for server in self.servers.values():
            server.start()
        self.nemesis = Nemesis(self.rng, self)
        self.quiet = SimQuiescer(self, SIM_OPTIONS) if settings.quiesce else None
        self.crashes = 0
        self._outbox: dict[tuple[int, int], list[tuple[int, Message]]] = {}
        self.note(f"seed {seed}: {settings.groups} groups of {settings.nodes} voters on "
                  f"{total} servers, faults {self.nemesis.profile.name}, links "
                  f"{self.network.faults}")

    def _options(self, node_id: int, group: int, observer: bool) -> RaftOptions:
        return replace(SIM_OPTIONS, seed=(self.seed * 1000 + node_id) * MAX_GROUPS + group,
                       observer=observer)

    # -- tracing -----------------------------------------------------------------------------
    def note(self, text: str) -> None:
        line = f"[{self.step_no:5d}] {text}"
        self.trace.append(line)
        if self.settings.verbose:
            print(line)

    # -- the wire ----------------------------------------------------------------------------
    def post(self, group: int, msg: Message) -> None:
        """A group's message, tagged with the group, onto the link of its server pair."""
        if self.network.faults.coalesce:
            self._outbox.setdefault((msg.source, msg.destination), []).append((group, msg))
        else:
            self.network.send(Packet(msg.source, msg.destination, [(group, msg)]), self.step_no)

    def _flush(self) -> None:
        """Coalescing: everything a server sent another this round, every group's
        heartbeats and appends, leaves as one packet (the runtime's one connection per
        pair, one write per loop turn)."""
        for (source, destination), messages in self._outbox.items():
            self.network.send(Packet(source, destination, messages), self.step_no)
        self._outbox.clear()

    # -- what the nemesis does ---------------------------------------------------------------
    def pick_group(self) -> SimGroup:
        return self.rng.choice(self.groups)

    def leader(self) -> SimHost | None:
        """The leader of a group drawn at random (what a targeted fault aims at)."""
        return self.pick_group().leader()

    def crash(self, node_id: int) -> None:
        server = self.servers[node_id]
        if server.up:
            self.crashes += 1
            self.note(f"crash node {node_id}: {server.crash(self.rng)}")

    def restart(self, node_id: int) -> None:
        server = self.servers[node_id]
        if not server.up:
            server.start()
            self.note(f"restart node {node_id}: " + " ".join(
                f"g{g} t{h.node.term}/l{h.node.last_index}/c{h.node.commit_index}"
                for g, h in server.replicas.items()))

    def ensure_running(self, node_id: int, group: SimGroup) -> None:
        """The server runs, and so does its replica of `group`."""
        self.nemesis.restarts.pop(node_id, None)
        self.restart(node_id)
        replica = group.hosts[node_id]
        if not replica.up:
            replica.start()
            group.note(f"node {node_id} starts its replica again")

    def make_observer(self, node_id: int, group: SimGroup) -> None:
        """Restart a server with its replica of `group` as an observer
        (RaftOptions.observer), keeping its disk: a server that ever voted must never
        come back under the same id with a wiped log (Raft's safety rests on what its
        log acknowledged; like etcd, a server that lost its disk needs a new id)."""
        server = self.servers[node_id]
        if server.up:
            server.crash(self.rng)
        host = group.hosts[node_id]
        leader = group.leader()
        bootstrap = host.bootstrap or (leader.node.configuration if leader else None)
        host.reconfigure(self._options(node_id, group.id, observer=True), bootstrap)
        self.nemesis.restarts.pop(node_id, None)
        server.start()
        group.note(f"node {node_id} restarts as an observer")

    # -- the loop ------------------------------------------------------------------------------
    def step(self, *, faults: bool = True) -> None:
        rng, servers, step = self.rng, self.servers, self.step_no
        sync_p = self.settings.sync_probability if faults else 1.0
        if faults:
            self.nemesis.act(step)
            for group in self.groups:
                with group.blame():
                    group.issue(step, self.settings)
        for server in servers.values():
            for host in server.running():
                host.tick()
        for _ in range(3):
            packets = self.network.due(step, self.nemesis.reorder and faults)
            quiet = self.quiet
            for packet in packets:
                server = servers[packet.destination]
                if quiet is not None and server.up:
                    quiet.delivered(packet, step)
                for group_id, msg in packet.messages:
                    host = server.replicas[group_id]
                    if server.up and host.up:
                        with self.groups[group_id].blame():
                            if quiet is None or not quiet.intercept(host, msg):
                                host.node.step(msg)
            moved = False
            for server in servers.values():
                for host in server.running():
                    group = self.groups[host.group]
                    with group.blame():
                        if host.process(rng, group, sync_p):
                            moved = True
            self._flush()
            self.nemesis.crash_now(step)
            if not packets and not moved:
                break
        if self.quiet is not None:
            self.quiet.after_step(step)
            self._flush()
        for group in self.groups:
            with group.blame():
                group.after_step(step, self.settings.compact_margin)
        self.step_no += 1

    def converged(self) -> bool:
        return all(group.converged() for group in self.groups)

    def run(self) -> SeedResult:
        settings = self.settings
        violation: Violation | None = None
        try:
            for _ in range(settings.steps):
                self.step()
            self.note("calm: network healed, everyone restarted")
            self.nemesis.calm()
            for n in range(settings.settle_steps):
                self.step(faults=False)
                if self.converged():
                    break
                if n % 50 == 49:
                    for group in self.groups:
                        group.supervise()
            else:
                stuck = [g for g in self.groups if not g.converged()]
                raise Violation("Liveness", "no convergence in the calm phase: "
                                + stuck[0].status(), stuck[0].id)
            for group in self.groups:
                with group.blame():
                    group.final_checks(settings.check_timeout)
        except Violation as exc:
            violation = exc
        except Exception as exc:        # the nemesis's calls into the core, say
            violation = Violation("Core raised", "".join(traceback.format_exception(
                type(exc), exc, exc.__traceback__)[-6:]))
        acked = [len(g.checker.acked) for g in self.groups]
        return SeedResult(self.seed, self.step_no, violation, list(self.trace), {
            "elections": sum(g.elections for g in self.groups), "crashes": self.crashes,
            "messages": self.network.sent, "packets": self.network.packets,
            "dropped": self.network.dropped, "acked": sum(acked),
            "groups_without_acks": acked.count(0),
            **({"quiesces": self.quiet.quiesces, "wakes": self.quiet.wakes}
               if self.quiet is not None else {}),
            "unchecked": sum(g.linearizability is Verdict.UNKNOWN for g in self.groups),
            **{f"ops_{k}": sum(g.workload.counts[k] for g in self.groups)
               for k in ("ok", "fail", "info")}})


def run_seed(seed: int, settings: SimSettings) -> SeedResult:
    return SimCluster(seed, settings).run()
