"""Native placement of partitions on a subset of the nodes (`--replicas`, issue 28): the
placement rule, the option's checks, a node's refusal naming a partition's members, and
a 6-node farm of replication factor 3 end to end (writes and reads on every partition
through any node, a node killed, every partition keeps or elects a leader)."""
from __future__ import annotations

import math
import os
import time

import pytest

from consensus.admin.partition_status import partition_rows
from consensus.client.links import NotHosted
from consensus.common.errors import ConfigError, ErrorCode
from consensus.common.partitions import placed_leader, placed_members
from consensus.runtime.config import NodeConfig
from consensus.runtime.groups import GroupSet
from consensus.wire.extensions import GARLICFARM_REGISTRY
from consensus.wire.jraft import JRaftDecoder
from tests.runtime.test_partitions import status_json
from tests.support import wait_until

NODES, PARTITIONS, REPLICAS = 6, 6, 3


def _config(tmp_path, **kw) -> NodeConfig:
    peers = ",".join(f"{i}=127.0.0.1:{9000 + i}" for i in range(2, NODES + 1))
    return NodeConfig.from_mapping({"id": 1, "listen": "127.0.0.1:9001", "peers": peers,
                                    "data-dir": str(tmp_path), "user": "u", "password": "p",
                                    "partitions": PARTITIONS, **kw})


def test_placement_puts_each_partition_on_r_nodes_and_spreads_members_and_leaders():
    nodes = range(1, NODES + 1)
    assert placed_members(0, nodes, REPLICAS) == list(nodes)     # the membership group
    hosted = {n: 0 for n in nodes}
    led = {n: 0 for n in nodes}
    for k in range(1, 13):
        members = placed_members(k, nodes, REPLICAS)
        assert len(members) == REPLICAS == len(set(members))
        assert placed_leader(k, nodes) in members
        led[placed_leader(k, nodes)] += 1
        for n in members:
            hosted[n] += 1
    assert set(hosted.values()) == {12 * REPLICAS // NODES}      # 6 groups a node
    assert max(led.values()) <= math.ceil(12 / NODES)
    assert placed_members(3, nodes, None) == list(nodes) == placed_members(3, nodes, NODES)


@pytest.mark.parametrize("replicas", [0, NODES + 1, "3", True])
def test_a_replication_factor_outside_1_to_the_nodes_is_refused_naming_the_option(
        tmp_path, replicas):
    with pytest.raises(ConfigError, match="--replicas.*from 1 to the farm's 6 nodes"):
        _config(tmp_path, replicas=replicas)


def test_placement_with_a_joining_node_is_refused(tmp_path):
    with pytest.raises(ConfigError, match="--replicas.*joining node"):
        _config(tmp_path, replicas=2, join=True)


def test_a_node_hosts_only_its_placed_partitions(tmp_path):
    config = _config(tmp_path, replicas=REPLICAS)
    assert config.hosted() == [0, 4, 5]     # 4: [1, 5, 6], 5: [1, 2, 6]
    assert _config(tmp_path).hosted() == list(range(PARTITIONS))


def test_a_partition_placed_elsewhere_is_refused_with_not_leader_naming_its_members():
    groups = GroupSet(PARTITIONS, [0, 4, 5], lambda p: placed_members(p, range(1, 7), 3))
    assert 2 not in groups and 4 in groups and list(groups) == [0, 4, 5]
    frame, = JRaftDecoder(registry=GARLICFARM_REGISTRY).feed(
        groups.refusal(2, 1, lambda n: f"127.0.0.1:{9000 + n}"))
    assert frame.code == int(ErrorCode.NOT_LEADER)
    assert frame.detail["members"] == {3: "127.0.0.1:9003", 4: "127.0.0.1:9004",
                                       5: "127.0.0.1:9005"}
    beyond, = JRaftDecoder(registry=GARLICFARM_REGISTRY).feed(groups.refusal(9, 1))
    assert beyond.code == int(ErrorCode.FAILED)        # no such partition: no redirect


def test_status_rows_show_each_partitions_replicas():
    views = {1: [{"partition": 4, "role": "leader", "term": 2, "commit": 5, "applied": 5,
                  "replicas": [1, 5, 6]}],
             5: [{"partition": 4, "role": "follower", "term": 2, "commit": 5, "applied": 4,
                  "replicas": [1, 5, 6]}]}
    row, = partition_rows(views)
    assert row["replicas"] == [1, 5, 6] and row["leader"] == 1 and row["lag"] == 1


def _views(farm) -> dict[int, list[dict]]:
    views = {}
    with farm.client(timeout=3, answer_timeout=1) as client:
        for node in farm.node_ids:
            if farm.cluster.running(node):
                try:
                    views[node] = client.partitions(farm.cluster.endpoint_of(node))
                except Exception:   # noqa: BLE001 - a node that does not answer yet
                    continue
    return views


def _leaders(farm) -> dict[int, int]:
    return {p["partition"]: node for node, view in _views(farm).items()
            for p in view["partitions"] if p["role"] == "leader"}


def _source_rows(farm, seed: int) -> dict[int, list[bytes]]:
    """partition -> the journal records the raft source reads, seeded with one node."""
    from pyspark_farm.jvm.planner import struct_of
    from pyspark_farm.raft import kind as raft_kind
    options = {**farm.options, "endpoints": farm.cluster.endpoint_of(seed),
               "partitions": "all"}
    reader = raft_kind.batch_reader(options, struct_of(raft_kind.schema(options)))
    found: dict[int, list[bytes]] = {}
    for task in reader.partitions():
        for batch in reader.read(task):
            rows = batch.to_pydict()
            for value, kind, partition in zip(rows["value"], rows["type"],
                                              rows["partition"]):
                if kind == "journal":
                    found.setdefault(partition, []).append(value)
    return found


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_a_farm_of_rf_3_on_6_nodes_serves_every_partition_and_survives_a_kill():
    from pyspark_farm.local_farm import LocalFarm
    nodes = list(range(1, NODES + 1))
    with LocalFarm(nodes=NODES, partitions=PARTITIONS, replicas=REPLICAS, metrics=False,
                   leader_timeout=60) as farm:
        views = _views(farm)
        for node, view in views.items():
            placed = [p for p in range(PARTITIONS) if node in placed_members(p, nodes, 3)]
            assert view["count"] == PARTITIONS
            assert [p["partition"] for p in view["partitions"]] == placed
            for part in view["partitions"]:
                assert part["replicas"] == placed_members(part["partition"], nodes, 3)
            for p in range(1, PARTITIONS):      # no dormant copy on disk either
                present = os.path.isdir(os.path.join(farm.cluster.node_dir(node), "groups",
                                                     str(p)))
                assert present == (p in placed), (node, p)
        doc = status_json(farm.cluster)         # `garlicfarm status --json`
        assert {row["partition"]: row["replicas"] for row in doc["partitions"]} == \
            {p: placed_members(p, nodes, 3) for p in range(PARTITIONS)}
        # every partition, written and read through a client that knows only a node
        # that does not host it: the node's answer names the members, the client goes
        for p in range(1, PARTITIONS):
            outsider = next(n for n in nodes if n not in placed_members(p, nodes, 3))
            with farm.client(endpoints=farm.cluster.endpoint_of(outsider), partition=p,
                             timeout=15) as client:
                index, _ = client.append([b"p%d" % p])
                records = [r for e in client.read_entries(index, index + 1) for r in e.records]
                assert records == [b"p%d" % p]
            with farm.client(partition=p, timeout=15) as client:
                started = time.monotonic()
                with pytest.raises(NotHosted, match=f"partition {p}"):
                    client.partitions(farm.cluster.endpoint_of(outsider))   # asked of it: refused
                assert time.monotonic() - started < 5
        # the Spark source (its Python reader: plan and read, no JVM) seeded with node 3
        # only, which hosts partitions 0, 1, 2: it counts 6 and reads all of them
        assert _source_rows(farm, seed=3) == {p: [b"p%d" % p] for p in range(1, PARTITIONS)}
        victim = 2                  # in partition 0 and partitions 1, 5 (2 of 3 stay)
        farm.kill(victim)
        alive = [n for n in nodes if n != victim]
        wait_until(lambda: set(_leaders(farm)) == set(range(PARTITIONS))
                   and set(_leaders(farm).values()) <= set(alive), timeout=20,
                   message="a live leader for every partition after the kill")
        written = {}
        for p in range(PARTITIONS):
            with farm.client(partition=p, timeout=15) as client:
                written[p] = client.append([b"after-%d" % p])[0]
        farm.restart(victim)        # it comes back with its placed groups and catches up
        placed = [p for p in range(PARTITIONS) if victim in placed_members(p, nodes, 3)]
        assert placed == [0, 1, 5]

        def caught_up() -> bool:
            view = _views(farm).get(victim)
            return view is not None and \
                [p["partition"] for p in view["partitions"]] == placed and \
                all(p["applied"] >= written[p["partition"]] for p in view["partitions"])
        wait_until(caught_up, timeout=20, message=f"n{victim} back with partitions {placed}")


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_an_undecided_batch_of_a_partition_the_leader_of_0_does_not_host_is_aborted():
    """Partition 1 lives on node 2 alone (3 nodes, --replicas 1) and partition 0 is led
    by node 1: the batch a driver prepared in 1 and never decided is aborted after
    --prepared-timeout all the same, relayed by partition 1's leader to partition 0's."""
    from consensus.common.partitions import PREPARED_KEY
    from consensus.torture import LocalCluster

    with LocalCluster(3, partitions=3, extra_args=["--replicas", "1",
                                                   "--prepared-timeout", "1"]) as farm:
        assert placed_members(1, range(1, 4), 1) == [2]
        for p in range(3):
            farm.wait_for_leader(timeout=30, partition=p)
        with farm.client(partition=0, timeout=10) as zero:
            if zero.get_servers().leader_id != 1:
                zero.transfer_leader(1)
            assert wait_until(lambda: zero.get_servers().leader_id == 1, timeout=20)
            with farm.client(partition=1, timeout=10) as one:
                staged = one.stage("q-relay", 0, 1, 0, b"rows")
                one.commit_batch("q-relay", 0, [staged], metadata={PREPARED_KEY: 0})

            def aborted() -> bool:
                status = zero.batch_status("q-relay", 0)
                return status is not None and status.aborted
            assert wait_until(aborted, timeout=30)
            assert zero.get_servers().leader_id == 1    # node 1 never hosted partition 1
