"""One Raft group of a simulated run: its replica on every server, its clients, its own
safety checker and linearizability check. Groups share the servers (crashes, restarts,
disks) and the network; nothing else. A violation names its group (`blame`)."""
from __future__ import annotations

import traceback
from contextlib import contextmanager
from typing import TYPE_CHECKING, Iterator

from consensus.linearizability import KVModel, Verdict, check
from consensus.raft import Entry, Message, ReadState, Ready, RequestVoteResponse, Role

from .checker import SafetyChecker, Violation
from .host import SimHost
from .workload import Workload

QUIET_SPELL = 30    #: steps of a client spell with --quiesce (two election timeouts)

if TYPE_CHECKING:
    from .cluster import SimCluster, SimSettings


class SimGroup:
    """The HostEvents of its replicas: what they send, write, apply and read."""

    def __init__(self, group_id: int, cluster: "SimCluster") -> None:
        self.id = group_id
        self.cluster = cluster
        self.hosts: dict[int, SimHost] = {}         # server id -> this group's replica
        self.checker = SafetyChecker()
        self.workload = Workload(cluster.rng, self.checker)
        self.elections = 0
        self.linearizability: Verdict | None = None
        self._to_stop: set[int] = set()

    @contextmanager
    def blame(self) -> Iterator[None]:
        """Whatever goes wrong inside names this group: a violation, or the core raising."""
        try:
            yield
        except Violation as exc:
            if exc.group is None:
                exc.group = self.id
            raise
        except Exception as exc:        # a crash of the core is a finding too
            raise Violation("Core raised", "".join(traceback.format_exception(
                type(exc), exc, exc.__traceback__)[-6:]), self.id) from exc

    def note(self, text: str) -> None:
        self.cluster.note(f"g{self.id} {text}")

    # -- HostEvents ----------------------------------------------------------------------------
    def send(self, msg: Message) -> None:
        cluster = self.cluster
        if msg.source in cluster.nemesis.silenced:
            return          # its server crashes this very moment: nothing more leaves it
        self.checker.check_sent(msg)
        if msg.destination in cluster.servers:
            cluster.post(self.id, msg)
        if isinstance(msg, RequestVoteResponse) and msg.granted and not msg.pre_vote:
            cluster.nemesis.vote_granted(msg.source, cluster.step_no)

    def written(self, host: SimHost, rd: Ready) -> None:
        nemesis = self.cluster.nemesis
        self.checker.on_write(host, rd)
        if rd.hard_state is not None and host.node.role is Role.LEADER and \
                rd.hard_state.commit > host.disk.initial_state().commit:
            # The Figure 8 moment: a leader commits entries of an earlier term.
            older = host.node.log.term(rd.hard_state.commit) != host.node.term
            nemesis.leader_committed(host.id, older)
        soft = rd.soft_state
        if soft is not None:
            if soft.role is Role.LEADER:
                self.elections += 1
                nemesis.leader_elected(host.id, self.cluster.step_no)
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

    # -- each step -------------------------------------------------------------------------------
    def issue(self, step: int, settings: "SimSettings") -> None:
        """This group's clients, each with its own chance per step; with quiescing they
        pause every other spell (the groups in turn), so that groups go idle and quiesce
        while the faults go on."""
        if settings.quiesce and (step // QUIET_SPELL + self.id) % 2:
            return
        rng = self.cluster.rng
        if rng.random() < settings.p_write:
            self.workload.write(step, self.hosts)
        if rng.random() < settings.p_read:
            self.workload.read(step, self.hosts)
        if rng.random() < settings.p_batch:
            self.workload.write_batch(self.hosts)

    def after_step(self, step: int, compact_margin: int) -> None:
        for node_id in sorted(self._to_stop):
            if self.hosts[node_id].up:
                self.hosts[node_id].stop()
                self.note(f"node {node_id} stops its replica: removed from the group")
        self._to_stop.clear()
        self.workload.progress(step, self.hosts)
        self.checker.after_step(self.hosts.values())
        self.checker.check_batches(self.hosts.values(), compact_margin)

    # -- state ---------------------------------------------------------------------------------
    def leader(self) -> SimHost | None:
        leaders = [h for h in self.hosts.values() if h.up and h.node.role is Role.LEADER]
        return max(leaders, key=lambda h: h.node.term) if leaders else None

    def converged(self) -> bool:
        leader = self.leader()
        if leader is None:
            return False
        node = leader.node
        if node.log.configuration_index > node.commit_index or node.commit_index != node.last_index:
            return False
        for member in node.configuration.members:
            host = self.hosts[member]
            # known committed too (a quiesced leader sends no heartbeat: a restarted member
            # whose snapshot is ahead of its saved commit learns it once it wakes the group)
            if not host.up or host.node.log.applied != node.commit_index \
                    or host.node.commit_index != node.commit_index:
                return False
        return not leader.node.has_ready()

    def supervise(self) -> None:
        """Like an operator would: restart a replica that some live replica's configuration
        still lists. It stopped believing it was removed while it was being added back
        (an inherent race of JournalKeeper's "a removed node stops")."""
        wanted: set[int] = set()
        for host in self.hosts.values():
            if host.up:
                wanted |= host.node.configuration.members
        for member in sorted(wanted):
            if not self.hosts[member].up:
                self.note(f"supervisor: member {member} is down")
                self.cluster.ensure_running(member, self)

    def status(self) -> str:
        parts = []
        for host in self.hosts.values():
            if host.up:
                n = host.node
                parts.append(f"{host.id}:{n.role.value}/t{n.term}/c{n.commit_index}/"
                             f"a{n.applied_index}/l{n.last_index}")
            else:
                parts.append(f"{host.id}:down")
        return " ".join(parts)

    # -- at the end ------------------------------------------------------------------------------
    def final_checks(self, check_timeout: float) -> None:
        self.workload.finish()
        self._check_acknowledged_writes()
        self._check_linearizable(check_timeout)

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

    def _check_linearizable(self, timeout: float) -> None:
        """The clients' history against a key-value model (consensus.linearizability)."""
        model = KVModel()
        result = check(self.workload.history, model, timeout=timeout)
        self.linearizability = result.verdict
        if result.verdict is Verdict.NOT_LINEARIZABLE:
            raise Violation("Linearizability", result.explain(model, limit=3))
