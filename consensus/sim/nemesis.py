"""The fault schedule: partitions (symmetric and one-way), crashes with restarts,
membership changes of every kind, leader transfers - drawn step by step from the run's
random generator. Message loss, duplication and delay rates are drawn once per run."""
from __future__ import annotations

import random
from typing import TYPE_CHECKING

from consensus.raft import MembershipChangeError, NotLeader, RaftError

from .network import LinkFaults

if TYPE_CHECKING:
    from .cluster import SimCluster


def draw_link_faults(rng: random.Random) -> LinkFaults:
    return LinkFaults(drop=rng.choice((0.0, 0.01, 0.05, 0.15)),
                      duplicate=rng.choice((0.0, 0.02, 0.08)),
                      delay=rng.choice((0.0, 0.03, 0.1)))


class Nemesis:
    P_PARTITION = 0.012
    P_CRASH = 0.010
    P_MEMBERSHIP = 0.012
    P_TRANSFER = 0.006

    def __init__(self, rng: random.Random, cluster: "SimCluster") -> None:
        self.rng = rng
        self.cluster = cluster
        self.heal_at: int | None = None
        self.restarts: dict[int, int] = {}          # node -> step to restart at
        self.reorder = rng.random() < 0.5

    def act(self, step: int) -> None:
        rng, cluster = self.rng, self.cluster
        if self.heal_at is not None and step >= self.heal_at:
            cluster.network.heal()
            self.heal_at = None
            cluster.note("network healed")
        for node, at in list(self.restarts.items()):
            if step >= at:
                del self.restarts[node]
                cluster.restart(node)
        roll = rng.random()
        if roll < self.P_PARTITION:
            if self.heal_at is None:
                self._partition(step)
        elif roll < self.P_PARTITION + self.P_CRASH:
            self._crash(step)
        elif roll < self.P_PARTITION + self.P_CRASH + self.P_MEMBERSHIP:
            self._membership()
        elif roll < self.P_PARTITION + self.P_CRASH + self.P_MEMBERSHIP + self.P_TRANSFER:
            self._transfer()

    # -- partitions ----------------------------------------------------------------------------
    def _partition(self, step: int) -> None:
        rng, cluster = self.rng, self.cluster
        ids = sorted(cluster.hosts)
        leader = cluster.leader()
        kind = rng.choice(("isolate", "isolate_leader", "split", "one_way", "one_way_leader"))
        if kind == "isolate_leader" and leader is not None:
            cluster.network.isolate(leader.id, ids)
            what = f"isolate leader {leader.id}"
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
        live = [h for h in cluster.hosts.values() if h.up]
        if not live:
            return
        leader = cluster.leader()
        host = leader if leader is not None and rng.random() < 0.3 else rng.choice(live)
        cluster.crash(host.id)
        self.restarts[host.id] = step + rng.randint(1, 60)

    # -- membership ----------------------------------------------------------------------------
    def _membership(self) -> None:
        rng, cluster = self.rng, self.cluster
        leader = cluster.leader()
        if leader is None:
            return
        node = leader.node
        config = node.configuration
        ids = sorted(cluster.hosts)
        non_voters = [i for i in ids if not config.is_voter(i)]
        kind = rng.choice(("change_voters", "change_voters", "add_server", "remove_server",
                           "add_observer", "remove_observer"))
        try:
            if kind == "change_voters":
                size = rng.randint(max(1, len(config.voters) - 1), min(len(ids), len(config.voters) + 1))
                voters = rng.sample(ids, size)
                for v in voters:
                    cluster.ensure_running(v)
                index = node.change_voters(voters)
                what = f"change voters {sorted(config.voters)} -> {sorted(voters)} at {index}"
            elif kind == "add_server" and non_voters:
                new = rng.choice(non_voters)
                cluster.ensure_running(new)
                node.add_server(new, f"sim://{new}")
                what = f"add server {new} (JRaft join)"
            elif kind == "remove_server" and len(config.voters) > 1:
                old = rng.choice(sorted(config.voters - {leader.id}) or [leader.id])
                node.remove_server(old)
                what = f"remove server {old} (JRaft leave)"
            elif kind == "add_observer" and [i for i in non_voters if i not in config.observers]:
                new = rng.choice([i for i in non_voters if i not in config.observers])
                cluster.make_observer(new)
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
        cluster.note(f"leader {leader.id}: {what}")

    def _transfer(self) -> None:
        rng, cluster = self.rng, self.cluster
        leader = cluster.leader()
        if leader is None:
            return
        targets = sorted(p for p in leader.node.progress if leader.node.configuration.is_voter(p))
        if not targets:
            return
        target = rng.choice(targets)
        try:
            leader.node.transfer_leader(target)
            cluster.note(f"leader {leader.id}: transfer leadership to {target}")
        except RaftError as exc:
            cluster.note(f"leader {leader.id}: transfer to {target} refused: {exc}")

    def calm(self) -> None:
        """End of the fault phase: heal everything, restart everyone still down."""
        self.cluster.network.heal()
        self.cluster.network.faults = LinkFaults()
        self.heal_at = None
        self.restarts.clear()
        for node in self.cluster.hosts:
            self.cluster.restart(node)

