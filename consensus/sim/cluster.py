"""One simulated run: hosts, network, nemesis, clients and the safety checker, all driven
by one seed. The same seed always replays the same run."""
from __future__ import annotations

import random
import traceback
from collections import deque
from dataclasses import dataclass, field, replace

from consensus.linearizability import KVModel, Verdict, check
from consensus.raft import (Configuration, Entry, Message, RaftOptions, ReadState, Ready,
                            RequestVoteResponse, Role)

from .checker import SafetyChecker, Violation
from .host import SimHost
from .nemesis import Nemesis, draw_link_faults
from .network import SimNetwork
from .workload import Workload

# Short timeouts so that a few hundred steps see many elections. The lease is as long as
# safety allows (just under the shortest election timeout), so that a lease bug has room
# to show. Small batches and chunks so that pipelining, backfills of several messages,
# chunked snapshots and log sync really happen.
SIM_OPTIONS = RaftOptions(election_timeout_min=10, election_timeout_max=16, heartbeat_interval=2,
                          lease_ticks=8, retry_ticks=5, max_inflight=4, max_entries_per_message=3,
                          max_bytes_per_message=4096, snapshot_chunk_bytes=48,
                          observer_pull_interval=2, observer_pull_max_entries=8,
                          log_sync_batch=8, log_sync_stop_gap=4, membership_retries=3)


@dataclass
class SimSettings:
    nodes: int = 5              #: initial voters
    spares: int = 2             #: extra servers for membership changes and observers
    steps: int = 400            #: fault-injection steps
    settle_steps: int = 600     #: then at most this many calm steps to converge
    p_write: float = 0.5
    p_read: float = 0.35
    p_batch: float = 0.3            #: a sink writer's move (stage, commit or abort)
    sync_probability: float = 0.7   #: a written Ready is fsynced in the same step
    snapshot_every: int = 20
    keep_snapshots: int = 3
    compact_margin: int = 5
    check_timeout: float = 20.0     #: seconds for the linearizability check of one seed
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
        self.checker = SafetyChecker()
        self.network = SimNetwork(self.rng, draw_link_faults(self.rng))
        self.workload = Workload(self.rng, self.checker)
        total = settings.nodes + settings.spares
        bootstrap = Configuration.of(range(1, settings.nodes + 1),
                                     addresses={i: f"sim://{i}" for i in range(1, total + 1)})
        self.hosts: dict[int, SimHost] = {}
        for node_id in range(1, total + 1):
            host = SimHost(node_id, self._options(node_id, observer=False),
                           bootstrap if node_id <= settings.nodes else None,
                           snapshot_every=settings.snapshot_every,
                           keep_snapshots=settings.keep_snapshots,
                           compact_margin=settings.compact_margin)
            host.start()
            self.hosts[node_id] = host
        self.nemesis = Nemesis(self.rng, self)
        self._to_stop: set[int] = set()
        self.elections = 0
        self.linearizability: Verdict | None = None
        self.note(f"seed {seed}: {settings.nodes} voters + {settings.spares} spares, faults "
                  f"{self.nemesis.profile.name}, links {self.network.faults}")

    def _options(self, node_id: int, observer: bool) -> RaftOptions:
        return replace(SIM_OPTIONS, seed=self.seed * 1000 + node_id, observer=observer)

    # -- tracing -----------------------------------------------------------------------------
    def note(self, text: str) -> None:
        line = f"[{self.step_no:5d}] {text}"
        self.trace.append(line)
        if self.settings.verbose:
            print(line)

    # -- HostEvents ----------------------------------------------------------------------------
    def send(self, msg: Message) -> None:
        if msg.source in self.nemesis.silenced:
            return          # it crashes this very moment: nothing more leaves it
        self.checker.check_sent(msg)
        if msg.destination in self.hosts:
            self.network.send(msg, self.step_no)
        if isinstance(msg, RequestVoteResponse) and msg.granted and not msg.pre_vote:
            self.nemesis.vote_granted(msg.source, self.step_no)

    def written(self, host: SimHost, rd: Ready) -> None:
        self.checker.on_write(host, rd)
        if rd.hard_state is not None and host.node.role is Role.LEADER and \
                rd.hard_state.commit > host.disk.initial_state().commit:
            # The Figure 8 moment: a leader commits entries of an earlier term.
            older = host.node.log.term(rd.hard_state.commit) != host.node.term
            self.nemesis.leader_committed(host.id, older)
        soft = rd.soft_state
        if soft is not None:
            if soft.role is Role.LEADER:
                self.elections += 1
                self.nemesis.leader_elected(host.id, self.step_no)
            self.note(f"node {host.id}: {soft.role.value} term {soft.term} leader "
                      f"{soft.leader_id} config {soft.configuration}"
                      + (" REMOVED" if soft.removed else ""))
            if soft.removed:
                self._to_stop.add(host.id)
        if rd.snapshot is not None:
            self.note(f"node {host.id}: installs snapshot at {rd.snapshot.index}")

    def applied(self, host: SimHost, entries: list[Entry], restored_to: int | None) -> None:
        self.checker.on_apply(host, entries, restored_to)
        self.workload.on_apply(host, entries)

    def read_states(self, host: SimHost, states: list[ReadState]) -> None:
        self.workload.on_read_states(host, states)

    # -- what the nemesis does ---------------------------------------------------------------
    def leader(self) -> SimHost | None:
        leaders = [h for h in self.hosts.values() if h.up and h.node.role is Role.LEADER]
        return max(leaders, key=lambda h: h.node.term) if leaders else None

    def crash(self, node_id: int) -> None:
        host = self.hosts[node_id]
        if host.up:
            self.note(f"crash node {node_id}: {host.crash(self.rng)}")

    def restart(self, node_id: int) -> None:
        host = self.hosts[node_id]
        if not host.up:
            host.start()
            self.note(f"restart node {node_id} (term {host.node.term}, last index "
                      f"{host.node.last_index}, commit {host.node.commit_index})")

    def ensure_running(self, node_id: int) -> None:
        self.nemesis.restarts.pop(node_id, None)
        self.restart(node_id)

    def make_observer(self, node_id: int) -> None:
        """Restart a server as an observer (RaftOptions.observer), keeping its disk: a
        server that ever voted must never come back under the same id with a wiped log
        (Raft's safety rests on what its log acknowledged; like etcd, a server that lost
        its disk needs a new id)."""
        host = self.hosts[node_id]
        if host.up:
            host.crash(self.rng)
        leader = self.leader()
        bootstrap = host.bootstrap or (leader.node.configuration if leader else None)
        host.reconfigure(self._options(node_id, observer=True), bootstrap)
        self.nemesis.restarts.pop(node_id, None)
        host.start()
        self.note(f"node {node_id} restarts as an observer")

    # -- the loop ------------------------------------------------------------------------------
    def step(self, *, faults: bool = True) -> None:
        rng, hosts, step = self.rng, self.hosts, self.step_no
        sync_p = self.settings.sync_probability if faults else 1.0
        if faults:
            self.nemesis.act(step)
            if rng.random() < self.settings.p_write:
                self.workload.write(step, hosts)
            if rng.random() < self.settings.p_read:
                self.workload.read(step, hosts)
            if rng.random() < self.settings.p_batch:
                self.workload.write_batch(hosts)
        for host in hosts.values():
            if host.up:
                host.tick()
        for _ in range(3):
            msgs = self.network.due(step, self.nemesis.reorder and faults)
            for msg in msgs:
                host = hosts[msg.destination]
                if host.up:
                    host.node.step(msg)
            moved = False
            for host in hosts.values():
                if host.up and host.process(rng, self, sync_p):
                    moved = True
            self.nemesis.crash_now(step)
            if not msgs and not moved:
                break
        for node_id in self._to_stop:
            if hosts[node_id].up:
                hosts[node_id].crash(rng)
                self.nemesis.restarts.pop(node_id, None)
                self.note(f"node {node_id} stops: removed from the cluster")
        self._to_stop.clear()
        self.workload.progress(step, hosts)
        self.checker.after_step(hosts.values())
        self.checker.check_batches(hosts.values(), self.settings.compact_margin)
        self.step_no += 1

    def _supervise(self) -> None:
        """Like an operator would: restart a server that some live node's configuration
        still lists. It stopped believing it was removed while it was being added back
        (an inherent race of JournalKeeper's "a removed node stops")."""
        wanted: set[int] = set()
        for host in self.hosts.values():
            if host.up:
                wanted |= host.node.configuration.members
        for member in sorted(wanted):
            if not self.hosts[member].up:
                self.note(f"supervisor: member {member} is down")
                self.restart(member)

    def converged(self) -> bool:
        leader = self.leader()
        if leader is None:
            return False
        node = leader.node
        if node.log.configuration_index > node.commit_index or node.commit_index != node.last_index:
            return False
        for member in node.configuration.members:
            host = self.hosts[member]
            if not host.up or host.node.log.applied != node.commit_index:
                return False
        return not leader.node.has_ready()

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
                    self._supervise()
            else:
                raise Violation("Liveness", "no convergence in the calm phase: " + self._status())
            self.workload.finish()
            self._check_acknowledged_writes()
            self._check_linearizable()
        except Violation as exc:
            violation = exc
        except Exception as exc:        # a crash of the core is a finding too
            violation = Violation("Core raised", "".join(
                traceback.format_exception(type(exc), exc, exc.__traceback__)[-6:]))
        return SeedResult(self.seed, self.step_no, violation, list(self.trace), {
            "elections": self.elections, "messages": self.network.sent,
            "unchecked": int(self.linearizability is Verdict.UNKNOWN),
            "dropped": self.network.dropped, "acked": len(self.checker.acked),
            **{f"ops_{k}": v for k, v in self.workload.counts.items()}})

    def _check_acknowledged_writes(self) -> None:
        leader = self.leader()
        assert leader is not None
        for member in leader.node.configuration.members:
            log = self.hosts[member].node.log
            for index, (term, op) in self.checker.acked.items():
                if index >= log.first_index() and log.term(index) != term:
                    raise Violation("Acknowledged write lost", f"{op} (index {index}, term "
                                    f"{term}) is not in node {member}'s log")
                if index > log.committed:
                    raise Violation("Acknowledged write lost", f"{op} (index {index}) is not "
                                    f"committed at node {member}")

    def _check_linearizable(self) -> None:
        """The clients' history against a key-value model (consensus.linearizability)."""
        model = KVModel()
        result = check(self.workload.history, model, timeout=self.settings.check_timeout)
        self.linearizability = result.verdict
        if result.verdict is Verdict.NOT_LINEARIZABLE:
            raise Violation("Linearizability", result.explain(model, limit=3))

    def _status(self) -> str:
        parts = []
        for host in self.hosts.values():
            if host.up:
                n = host.node
                parts.append(f"{host.id}:{n.role.value}/t{n.term}/c{n.commit_index}/"
                             f"a{n.applied_index}/l{n.last_index}")
            else:
                parts.append(f"{host.id}:down")
        return " ".join(parts)


def run_seed(seed: int, settings: SimSettings) -> SeedResult:
    return SimCluster(seed, settings).run()
