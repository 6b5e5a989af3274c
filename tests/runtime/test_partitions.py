"""A farm of several partitions (Raft groups) on real node processes over loopback
(issue 28): each partition elects, its writes land in it alone and survive a node kill,
`status --json` names each partition's leader, the balancer keeps every node within its
share (again after a node comes back), and a partition the nodes do not host is refused
with a clear error."""
from __future__ import annotations

import io
import json
import math
import os

import pytest

from consensus.admin.admin import EXIT_OK, EXIT_UNHEALTHY, command_main
from consensus.common.errors import ConfigError
from consensus.torture import LocalCluster
from tests.support import wait_until

pytestmark = [pytest.mark.timeout(120), pytest.mark.slow]

PARTITIONS = 6


def leaders(farm: LocalCluster) -> dict[int, int | None]:
    """Each partition's leader, from every running node's own view (None: no node
    says it leads it)."""
    return {**dict.fromkeys(range(PARTITIONS)), **farm.partition_leaders(timeout=3)}


def all_led(farm: LocalCluster):
    found = leaders(farm)
    return found if None not in found.values() else None


def journal(farm: LocalCluster, partition: int) -> list[bytes]:
    """Every journal record of a partition, in log order."""
    with farm.client(partition=partition, timeout=10) as client:
        first, applied, _ = client.log_bounds()
        records: list[bytes] = []
        for entry in client.read_entries(first, applied + 1):
            if entry.type == "journal":
                records.extend(entry.records)
        return records


def test_each_partition_elects_keeps_its_own_writes_and_survives_a_kill():
    with LocalCluster(nodes=3, partitions=PARTITIONS) as farm:
        wait_until(lambda: all_led(farm), timeout=15, interval=0.1,
                   message="a leader in every partition")
        for p in range(PARTITIONS):
            with farm.client(partition=p, timeout=10) as client:
                client.append([f"p{p}-a".encode(), f"p{p}-b".encode()])
                client.kv_put("owner", f"p{p}")
        for p in range(PARTITIONS):
            assert journal(farm, p) == [f"p{p}-a".encode(), f"p{p}-b".encode()]
        victim = leaders(farm)[0]
        farm.kill(victim)
        wait_until(lambda: all_led(farm), timeout=15, interval=0.1,
                   message="a leader in every partition after the kill")
        for p in range(PARTITIONS):
            with farm.client(partition=p, timeout=10) as client:
                client.append([f"p{p}-c".encode()])
                assert client.kv_get("owner", consistency="read_index") == f"p{p}"
            assert journal(farm, p) == [f"p{p}-a".encode(), f"p{p}-b".encode(),
                                        f"p{p}-c".encode()]
        assert victim not in leaders(farm).values()


def test_a_partition_the_nodes_do_not_host_is_refused_clearly():
    with LocalCluster(nodes=3, partitions=2) as farm:
        farm.wait_for_leader(timeout=15, partition=1)
        with farm.client(partition=2, timeout=10) as client:
            with pytest.raises(ConfigError) as caught:
                client.ping()
        text = str(caught.value)
        assert "partition 2 is not hosted" in text and "partitions 0..1" in text, text
        with farm.client(partition=1, timeout=10) as client:   # the node is still fine
            assert client.ping()["node"] in (1, 2, 3)


def status_json(farm: LocalCluster) -> dict:
    out, err = io.StringIO(), io.StringIO()
    code = command_main("status", ["--endpoints", farm.endpoints, "--cluster", farm.cluster,
                                   "--user", farm.username, f"--password={farm.password}",
                                   "--timeout", "10", "--json"], out=out, err=err)
    # unhealthy (3) while the restarted node has not published its status yet
    assert code in (EXIT_OK, EXIT_UNHEALTHY), (code, err.getvalue())
    return json.loads(out.getvalue())


def test_status_names_each_partitions_leader_and_the_balancer_spreads_them_again():
    share = math.ceil(PARTITIONS / 3)
    with LocalCluster(nodes=3, partitions=PARTITIONS, status_interval=0.5) as farm:
        wait_until(lambda: all_led(farm), timeout=15, interval=0.1,
                   message="a leader in every partition")
        # Kill a node: its partitions move to the two others (3 each at least once).
        victim = 3
        farm.kill(victim)
        wait_until(lambda: (found := all_led(farm)) and victim not in found.values(),
                   timeout=15, interval=0.1, message="every partition led by nodes 1, 2")
        farm.restart(victim)

        def balanced():
            doc = status_json(farm)
            rows = doc.get("partitions") or []
            if len(rows) != PARTITIONS or any(r["leader"] is None for r in rows):
                return None
            counts = doc["leaders"]
            return doc if max(counts.values()) <= share and counts.get(str(victim)) else None
        doc = wait_until(balanced, timeout=15, interval=0.3,
                         message=f"no node leading more than {share} partitions")
        rows = doc["partitions"]
        assert [r["partition"] for r in rows] == list(range(PARTITIONS))
        for row in rows:
            assert row["leader"] in (1, 2, 3) and row["term"] >= 1 and row["commit"] >= 1
            assert row["lag"] >= 0 and set(row["applied"]) <= {"1", "2", "3"}
        assert sum(doc["leaders"].values()) == PARTITIONS


def test_a_node_started_with_fewer_partitions_refuses_its_peers_frames_and_says_why():
    """Node 3 restarted with --partitions 1 among nodes of 3: it closes the connections
    that carry partitions 1 and 2, and its log names the option to fix; partition 0
    still works on every node."""
    with LocalCluster(nodes=3, partitions=3) as farm:
        for p in range(3):
            farm.wait_for_leader(timeout=15, partition=p)
        farm.stop(3)
        args = farm._args[3]
        args[args.index("--partitions") + 1] = "1"
        farm.restart(3)

        def warned():
            with open(farm.log_path(3), encoding="utf-8") as f:
                return [line for line in f if "is not hosted by node 3" in line]
        lines = wait_until(warned, timeout=15, interval=0.1, message="node 3's warning")
        assert "give every node of the farm the same --partitions" in lines[0], lines[0]
        assert "(it hosts partition 0 only)" in lines[0], lines[0]
        with farm.client(endpoints=farm.endpoint_of(3), timeout=10) as client:
            assert client.ping()["node"] == 3


def test_a_nodes_threads_do_not_grow_with_its_partitions():
    """Groups share the node's threads (loop, gate, fsync, commit saver, readers): a
    thread per group made a node of 1,000 partitions hold 1,000 threads."""
    groups = 24
    with LocalCluster(nodes=1, partitions=groups) as farm:
        for partition in range(groups):
            farm.wait_for_leader(30, partition=partition)
        threads = len(os.listdir(f"/proc/{farm.pid(farm.node_ids[0])}/task"))
    assert threads < 12, f"{threads} threads for {groups} partitions"
