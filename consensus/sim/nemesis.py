"""The fault schedule: partitions (symmetric, one-way, the leader in a minority), crashes
with restarts, membership changes of every kind, leader transfers, and faults aimed at
the moments where Raft bugs hide (a leader crashing the instant it is elected or commits
entries of an earlier term - Figure 8 -, a voter crashing right after granting its vote).
Each seed draws its own rates for all of these, and its link fault rates.

Partitions, crashes and restarts hit servers, so every group hosted there at once;
membership changes and transfers hit one group drawn at random. The targeted faults
fire on one group's events at 1/groups of their rate, so that a server sees as many of
them with many groups as with one."""
from __future__ import annotations

import random
from dataclasses import dataclass, fields, replace
from typing import TYPE_CHECKING

from consensus.raft import MembershipChangeError, NotLeader, RaftError

from .network import LinkFaults

if TYPE_CHECKING:
    from .cluster import SimCluster


@dataclass(frozen=True)
class FaultProfile:
    """Probabilities per step (the first four) or per event (the targeted ones)."""

    name: str
    partition: float = 0.012
    crash: float = 0.010
    membership: float = 0.012
    transfer: float = 0.006
    crash_new_leader: float = 0.15      #: within a few steps of its election
    silence_new_leader: float = 0.05    #: at once, before anything it sent leaves
    isolate_new_leader: float = 0.1     #: cut off while clients still write to it
    crash_after_vote: float = 0.1       #: right after granting a vote (is it durable?)
    silence_on_commit: float = 0.01     #: a leader, the instant its commit index moves


def draw_profile(rng: random.Random) -> FaultProfile:
    """Each rate low, medium or high, independently: some seeds churn leaders while
    partitioning, some reconfigure under crashes, some stay nearly calm."""
    def pick(*levels: float) -> float:
        return rng.choice(levels)
    profile = FaultProfile(
        name="",
        partition=pick(0.004, 0.012, 0.03), crash=pick(0.004, 0.01, 0.02),
        membership=pick(0.004, 0.012, 0.04), transfer=pick(0.002, 0.006, 0.012),
        crash_new_leader=pick(0.05, 0.15, 0.4), silence_new_leader=pick(0.02, 0.08, 0.35),
        isolate_new_leader=pick(0.0, 0.1, 0.25), crash_after_vote=pick(0.02, 0.1, 0.2),
        silence_on_commit=pick(0.0, 0.01, 0.05))
    rates = [getattr(profile, f.name) for f in fields(profile) if f.name != "name"]
    return replace(profile, name="rates " + "/".join(f"{r:g}" for r in rates))


def draw_link_faults(rng: random.Random) -> LinkFaults:
    return LinkFaults(drop=rng.choice((0.0, 0.01, 0.05, 0.15)),
                      duplicate=rng.choice((0.0, 0.02, 0.08)),
                      delay=rng.choice((0.0, 0.03, 0.1)), coalesce=rng.random() < 0.5)


class Nemesis:
    def __init__(self, rng: random.Random, cluster: "SimCluster") -> None:
        self.rng = rng
        self.cluster = cluster
        self.profile = draw_profile(rng)
        self.reorder = rng.random() < 0.5
        self.heal_at: int | None = None
        self.restarts: dict[int, int] = {}          # node -> step to restart at
        self.crashes: dict[int, int] = {}           # node -> step to crash at
        self.crash_soon: set[int] = set()           # crash at the end of this round
        self.silenced: set[int] = set()             # ... and nothing more leaves them
        self.calmed = False
        self.scale = 1 / len(cluster.groups)     # targeted faults: per server, not per group

    def act(self, step: int) -> None:
        rng, cluster, p = self.rng, self.cluster, self.profile
        if self.heal_at is not None and step >= self.heal_at:
            cluster.network.heal()
            self.heal_at = None
            cluster.note("network healed")
        for node, at in list(self.restarts.items()):
            if step >= at:
                del self.restarts[node]
                cluster.restart(node)
        for node, at in list(self.crashes.items()):
            if step >= at:
                del self.crashes[node]
                self._crash_node(node, step, rng.randint(1, 30))
        roll = rng.random()
        if roll < p.partition:
            if self.heal_at is None:
                self._partition(step)
        elif (roll := roll - p.partition) < p.crash:
            self._crash(step)
        elif (roll := roll - p.crash) < p.membership:
            self._membership()
        elif roll - p.membership < p.transfer:
            self._transfer()

    # -- partitions ----------------------------------------------------------------------------
    def _partition(self, step: int) -> None:
        rng, cluster = self.rng, self.cluster
        ids = sorted(cluster.servers)
        leader = cluster.leader()
        kind = rng.choice(("isolate", "isolate_leader", "split", "split_leader", "one_way",
                           "one_way_leader", "ring"))
        if kind == "isolate_leader" and leader is not None:
            cluster.network.isolate(leader.id, ids)
            what = f"isolate leader {leader.id}"
        elif kind == "split_leader" and leader is not None:
            # The leader keeps a minority: it goes on accepting writes it cannot commit.
            others = [i for i in ids if i != leader.id]
            group = [leader.id] + rng.sample(others, rng.randint(0, len(ids) // 2 - 1))
            cluster.network.split(group, [i for i in ids if i not in group])
            what = f"split leader's minority {sorted(group)} | rest"
        elif kind == "ring" and leader is not None:
            # Jepsen's majorities ring: each voter reaches only its ring neighbours, so
            # every voter sees a majority of three - but not the same majority.
            ring = sorted(leader.node.configuration.voters)
            rng.shuffle(ring)
            near = {(ring[i], ring[(i + d) % len(ring)]) for i in range(len(ring)) for d in (-1, 0, 1)}
            for a in ring:
                for b in ring:
                    if (a, b) not in near:
                        cluster.network.cut_one_way(a, b)
            what = f"majorities ring {ring}"
        elif kind == "split":
            group = rng.sample(ids, rng.randint(1, len(ids) // 2))
            cluster.network.split(group, [i for i in ids if i not in group])
            what = f"split {sorted(group)} | rest"
        elif kind in ("one_way", "one_way_leader"):
            src = leader.id if kind == "one_way_leader" and leader else rng.choice(ids)
            dsts = rng.sample([i for i in ids if i != src], rng.randint(1, len(ids) - 1))
            inbound = rng.random() < 0.5
            for dst in dsts:
                if inbound:
                    cluster.network.cut_one_way(dst, src)
                else:
                    cluster.network.cut_one_way(src, dst)
            what = f"one-way cut {'into' if inbound else 'out of'} {src} from/to {sorted(dsts)}"
        else:
            node = rng.choice(ids)
            cluster.network.isolate(node, ids)
            what = f"isolate {node}"
        self.heal_at = step + rng.randint(10, 120)
        cluster.note(f"partition: {what} until step {self.heal_at}")

    # -- crashes -------------------------------------------------------------------------------
    def _crash(self, step: int) -> None:
        rng, cluster = self.rng, self.cluster
        live = [s for s in cluster.servers.values() if s.up]
        if not live:
            return
        leader = cluster.leader()
        host = leader if leader is not None and rng.random() < 0.3 else rng.choice(live)
        down_for = rng.randint(1, 60) if rng.random() < 0.5 else rng.randint(1, 6)
        self._crash_node(host.id, step, down_for)

    def _crash_node(self, node: int, step: int, down_for: int) -> None:
        if self.cluster.servers[node].up:
            self.cluster.crash(node)
            self.restarts[node] = step + down_for

    def leader_elected(self, node: int, step: int) -> None:
        """Called when a node reports it leads (before its first messages leave)."""
        if self.calmed:
            return
        p, roll = self.profile, self.rng.random() / self.scale
        if roll < p.silence_new_leader:
            self.silenced.add(node)
            self.crash_soon.add(node)
        elif (roll := roll - p.silence_new_leader) < p.crash_new_leader:
            self.crashes.setdefault(node, step + self.rng.randint(1, 6))
        elif roll - p.crash_new_leader < p.isolate_new_leader and self.heal_at is None:
            self.cluster.network.isolate(node, sorted(self.cluster.servers))
            self.heal_at = step + self.rng.randint(5, 60)
            self.cluster.note(f"partition: isolate new leader {node} until step {self.heal_at}")

    def leader_committed(self, node: int, earlier_term: bool) -> None:
        """Called when a leader's commit index moved (before its next messages leave);
        `earlier_term` when the new commit point is an entry of an earlier term."""
        chance = (0.8 if earlier_term else self.profile.silence_on_commit) * self.scale
        if not self.calmed and self.rng.random() < chance:
            self.silenced.add(node)
            self.crash_soon.add(node)

    def vote_granted(self, node: int, step: int) -> None:
        if not self.calmed and self.rng.random() < self.profile.crash_after_vote * self.scale:
            self.crash_soon.add(node)       # the vote is on its way; is it on disk?

    def crash_now(self, step: int) -> None:
        """Crash the nodes marked during the round that just ended (not mid-Ready)."""
        for node in sorted(self.crash_soon):
            self._crash_node(node, step, self.rng.randint(1, 6))
        self.crash_soon.clear()
        self.silenced.clear()

    # -- membership ----------------------------------------------------------------------------
    def _membership(self) -> None:
        rng, cluster = self.rng, self.cluster
        group = cluster.pick_group()
        leader = group.leader()
        if leader is None:
            return
        node = leader.awake()
        config = node.configuration
        ids = sorted(cluster.servers)
        non_voters = [i for i in ids if not config.is_voter(i)]
        kind = rng.choice(("change_voters", "change_voters", "add_server", "remove_server",
                           "add_observer", "remove_observer"))
        try:
            if kind == "change_voters":
                size = rng.randint(max(1, len(config.voters) - 1), min(len(ids), len(config.voters) + 1))
                voters = rng.sample(ids, size)
                for v in voters:
                    cluster.ensure_running(v, group)
                index = node.change_voters(voters)
                what = f"change voters {sorted(config.voters)} -> {sorted(voters)} at {index}"
            elif kind == "add_server" and non_voters:
                new = rng.choice(non_voters)
                cluster.ensure_running(new, group)
                node.add_server(new, f"sim://{new}")
                what = f"add server {new} (JRaft join)"
            elif kind == "remove_server" and len(config.voters) > 1:
                old = rng.choice(sorted(config.voters - {leader.id}) or [leader.id])
                node.remove_server(old)
                what = f"remove server {old} (JRaft leave)"
            elif kind == "add_observer" and [i for i in non_voters if i not in config.observers]:
                new = rng.choice([i for i in non_voters if i not in config.observers])
                cluster.make_observer(new, group)
                node.update_observers(add=[new])
                what = f"add observer {new}"
            elif kind == "remove_observer" and config.observers:
                old = rng.choice(sorted(config.observers))
                node.update_observers(remove=[old])
                what = f"remove observer {old}"
            else:
                return
        except (MembershipChangeError, NotLeader) as exc:
            what = f"{kind} refused: {exc}"
        group.note(f"leader {leader.id}: {what}")

    def _transfer(self) -> None:
        rng, group = self.rng, self.cluster.pick_group()
        leader = group.leader()
        if leader is None:
            return
        targets = sorted(p for p in leader.node.progress if leader.node.configuration.is_voter(p))
        if not targets:
            return
        target = rng.choice(targets)
        try:
            leader.awake().transfer_leader(target)
            group.note(f"leader {leader.id}: transfer leadership to {target}")
        except RaftError as exc:
            group.note(f"leader {leader.id}: transfer to {target} refused: {exc}")

    def calm(self) -> None:
        """End of the fault phase: heal everything, restart everyone still down."""
        self.cluster.network.heal()
        self.cluster.network.faults = LinkFaults()
        self.heal_at = None
        self.calmed = True
        self.restarts.clear()
        self.crashes.clear()
        self.crash_soon.clear()
        self.silenced.clear()
        for node in self.cluster.servers:
            self.cluster.restart(node)
