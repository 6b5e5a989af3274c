"""A farm whose partitions each have `replicas` of the nodes as members (Kafka's
replication factor), for benchmarks/scale_out.py's `--farm placed`.

The node CLI hosts every partition on every node (`--partitions N`; consensus/runtime/
groups.py), and a partition's group starts with every node as a voter. The smallest
honest way to a replication factor below the node count uses only what an operator has:
start the nodes hosting every group, then take the extra members out of each group with
the per-partition membership change (consensus/admin/farm_membership.py, as
`garlicfarm remove-server --partition P` does), and move each group's leadership to its
place with the core's leader transfer. A node taken out of a group still hosts it, empty
and silent (no campaign: it is no voter; no leader sends to it): it costs that group's
idle ticking only.

Partition 0 must list every node of the farm (its configuration is the farm's member
list, and a node taken out of it stops), so it cannot have 3 members of 6: it stays the
farm's membership group, with every node and no load. The loaded partitions are groups
1..P; `client_options(k)` addresses group k + 1 at its members only (as a Kafka
client learns a partition's replicas from metadata: a node taken out of a group keeps
the group's last view it had, and a client asking it is sent astray).

Placement (`placement`): loaded partition k has nodes k, k+1, ..., k+replicas-1 (mod N,
ids from 1) as voters and node k (mod N) + 1 as its leader, so with P = N each node is a
member of `replicas` groups and leads one.
"""
from __future__ import annotations

import time
from collections import Counter
from typing import Any

from consensus.admin.farm_membership import remove_member
from consensus.common.errors import ConfigError


def placement(nodes: int, partitions: int, replicas: int) -> list[tuple[list[int], int]]:
    """(voters, leader) of each loaded partition (module docstring)."""
    if not 1 <= replicas <= nodes:
        raise ValueError(f"replicas must be 1 to the {nodes} nodes, not {replicas}")
    return [(sorted((k + j) % nodes + 1 for j in range(replicas)), k % nodes + 1)
            for k in range(partitions)]


class PlacedFarm:
    """LocalCluster with `layout.partitions + 1` groups per node, partitions placed as
    the module docstring says (3 replicas), leaders on their places (60 s at most to set
    it all up, else RuntimeError)."""

    replicas = 3

    def __init__(self, layout: Any) -> None:
        from consensus.torture import LocalCluster
        self.layout = layout
        self.places = placement(layout.nodes, layout.partitions,
                                min(self.replicas, layout.nodes))
        self._cluster = LocalCluster(nodes=layout.nodes, fsync="batch",
                                     partitions=layout.partitions + 1)
        self._cluster.__enter__()
        try:
            self._place(time.monotonic() + 180)
        except BaseException:
            self.close()
            raise

    def _connect(self, group: int):
        return self._cluster.client(partition=group, timeout=30)

    def _place(self, deadline: float) -> None:
        farm = self._cluster
        for group in range(self.layout.partitions + 1):
            farm.wait_for_leader(timeout=60, partition=group)
        for k, (voters, leader) in enumerate(self.places):
            # the leader first (a leader cannot remove itself), then the others out
            with self._connect(k + 1) as client:
                client.transfer_leader(leader, timeout=max(1.0, deadline - time.monotonic()))
            while True:
                with self._connect(k + 1) as client:
                    view = client.get_servers()
                extra = sorted((set(view.voters) | set(view.outgoing)) - set(voters))
                if not extra and sorted(view.voters) == voters:
                    break
                if time.monotonic() > deadline:
                    raise RuntimeError(f"partition {k} (group {k + 1}) has voters "
                                       f"{sorted(view.voters)}, not {voters}")
                for node in extra:
                    try:
                        change = remove_member(self._connect, node, partitions=[k + 1],
                                               wait=30)
                    except ConfigError:     # gone meanwhile: a stale view named it
                        continue
                    if not change.ok:
                        print(f"  partition {k}: n{node} not removed yet: "
                              f"{change.to_dict()}", flush=True)
                        time.sleep(0.5)
        # an election while the members left (a slow machine) may have moved a leader:
        # back to its place (the balancers leave placed leaders be: none is above its share)
        while (now := self.leaders()) != (wanted := {k: leader for k, (_, leader)
                                                     in enumerate(self.places)}):
            if time.monotonic() > deadline:
                raise RuntimeError(f"leaders {now} left their places {wanted}")
            for k, leader in wanted.items():
                if now[k] != leader:
                    with self._connect(k + 1) as client:
                        client.transfer_leader(leader, timeout=10)
            time.sleep(0.5)

    def describe(self) -> str:
        counts = Counter(node for voters, _ in self.places for node in voters)
        return (f"partitions {[v for v, _ in self.places]} (leaders "
                f"{[leader for _, leader in self.places]}); groups per node as member "
                f"{dict(sorted(counts.items()))} + the membership group 0")

    def node_pids(self) -> dict[int, int]:
        pids = {node: self._cluster.pid(node) for node in self._cluster.node_ids}
        gone = [node for node, pid in pids.items() if pid is None]
        if gone:
            raise RuntimeError(f"nodes {gone} exited:\n{self._cluster.describe_nodes()}")
        return pids  # type: ignore[return-value]

    def leaders(self) -> dict[int, int]:
        return {k: self._cluster.wait_for_leader(timeout=30, partition=k + 1)
                for k in range(self.layout.partitions)}

    def client_options(self, partition: int) -> dict[str, Any]:
        farm = self._cluster
        members = ",".join(farm.endpoint_of(node) for node in self.places[partition][0])
        return dict(endpoints=members, cluster=farm.cluster, username=farm.username,
                    password=farm.password, partition=partition + 1)

    def close(self) -> None:
        self._cluster.__exit__(None, None, None)
