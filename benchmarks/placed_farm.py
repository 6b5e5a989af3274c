"""A farm whose partitions each have `replicas` of the nodes as members (Kafka's
replication factor), for benchmarks/scale_out.py's `--farm placed`.

The nodes place the partitions themselves (`garlicfarm node --replicas 3`,
docs/runtime.md "Placement"): partition 0, the farm's membership group, stays on every
node with no load; the loaded partitions are groups 1..P, group g on the 3 nodes from
position g mod N (node ids in order, wrapping), first led by the node at g mod N. A
node creates only the groups placed on it (no dormant copies). With P = N each node is
a member of 3 loaded partitions and leads one; the set-up moves a leadership back to
its place when an election on a slow machine moved it (the balancer leaves placed
leaders be: none is above its share).

`client_options(k)` gives a writer every node as a seed: a node that does not host
group k + 1 answers with its members and the client goes there.
"""
from __future__ import annotations

import time
from collections import Counter
from typing import Any

from consensus.common.partitions import placed_leader, placed_members


def placement(nodes: int, partitions: int, replicas: int) -> list[tuple[list[int], int]]:
    """(voters, leader) of each loaded partition k (group k + 1), by the nodes' rule."""
    if not 1 <= replicas <= nodes:
        raise ValueError(f"replicas must be 1 to the {nodes} nodes, not {replicas}")
    ids = range(1, nodes + 1)
    return [(placed_members(k + 1, ids, replicas), placed_leader(k + 1, ids))
            for k in range(partitions)]


class PlacedFarm:
    """LocalCluster with `layout.partitions + 1` groups, `--replicas 3`, leaders on
    their places (180 s at most to set it all up, else RuntimeError)."""

    replicas = 3

    def __init__(self, layout: Any) -> None:
        from consensus.torture import LocalCluster
        self.layout = layout
        replicas = min(self.replicas, layout.nodes)
        self.places = placement(layout.nodes, layout.partitions, replicas)
        started = time.monotonic()
        self._cluster = LocalCluster(nodes=layout.nodes, fsync="batch",
                                     partitions=layout.partitions + 1, replicas=replicas)
        self._cluster.__enter__()
        try:
            self._place(time.monotonic() + 180)
        except BaseException:
            self.close()
            raise
        self.setup_s = time.monotonic() - started     #: start to leaders on their places

    def _place(self, deadline: float) -> None:
        farm = self._cluster
        farm.wait_for_leader(timeout=60, partition=0)
        wanted = {k: leader for k, (_, leader) in enumerate(self.places)}
        while (now := self.leaders()) != wanted:
            if time.monotonic() > deadline:
                raise RuntimeError(f"leaders {now} left their places {wanted}")
            for k, leader in wanted.items():
                if now[k] != leader:
                    with farm.client(partition=k + 1, timeout=30) as client:
                        client.transfer_leader(leader, timeout=10)
            time.sleep(0.5)

    def describe(self) -> str:
        counts = Counter(node for voters, _ in self.places for node in voters)
        return (f"partitions {[v for v, _ in self.places]} (leaders "
                f"{[leader for _, leader in self.places]}); groups per node as member "
                f"{dict(sorted(counts.items()))} + the membership group 0 (native "
                f"--replicas {min(self.replicas, self.layout.nodes)})")

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
        return dict(endpoints=farm.endpoints, cluster=farm.cluster, username=farm.username,
                    password=farm.password, partition=partition + 1)

    def close(self) -> None:
        self._cluster.__exit__(None, None, None)
