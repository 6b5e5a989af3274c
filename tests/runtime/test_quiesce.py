"""Idle partitions quiesce (issue 28, as CockroachDB's ranges do): on real node processes
over loopback, an idle farm of many partitions stops ticking and heartbeating them (its
CPU and its peer traffic drop), a write to a quiesced partition commits at once, and the
node-level liveness still elects new leaders when the node leading quiesced partitions
dies or is cut off."""
from __future__ import annotations

import os
import time
import urllib.request

import pytest

from consensus.torture import LocalCluster
from consensus.torture.faultproxy import Direction, ProxyNetwork
from tests.support import wait_until

pytestmark = [pytest.mark.timeout(60), pytest.mark.slow]

#: the farms fsync nothing: idle groups write nothing, and on a loaded machine the first
#: elections of 50 groups wait for one fsync per group and vote round (tens of seconds)
FSYNC = "never"


def quiesced(farm: LocalCluster, partitions: int) -> bool:
    """Every running node has quiesced every partition but 0 (which never quiesces)."""
    found = farm.partition_views(timeout=3)
    return len(found) == sum(farm.running(n) for n in farm.node_ids) and all(
        sum(bool(p.get("quiesced")) for p in parts) == partitions - 1
        for parts in found.values())


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process (from /proc)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def forwarded(network: ProxyNetwork) -> int:
    """Bytes the proxies carried between the nodes so far, both ways."""
    return sum(sum(network.proxy.stats(link).forwarded.values())
               for link in network.proxy.links())


def metric(farm: LocalCluster, node: int, name: str) -> float | None:
    text = urllib.request.urlopen(f"http://127.0.0.1:{farm.metrics_port(node)}/metrics",
                                  timeout=5).read().decode()
    for line in text.splitlines():
        if line.startswith(name + " "):
            return float(line.split()[1])
    return None


PARTITIONS = 50
#: measured on this 2-core machine under a load average of 8-15 (3 nodes, 50 partitions,
#: 2 s windows, fsync batch and never alike: an idle farm writes nothing): before quiescing (main's code) 0.13-0.18 CPU-s/s per node and 120 kB/s
#: between the nodes; quiesced 0.04-0.07 CPU-s/s and 5 kB/s (partition 0,
#: NodeHeartbeats, status entries). The bounds sit in between, far from both.
CPU_BOUND = 0.11
BYTES_BOUND = 30_000


def test_an_idle_farm_quiesces_its_partitions_and_a_write_wakes_one():
    with ProxyNetwork([1, 2, 3]) as network, \
            LocalCluster(3, partitions=PARTITIONS, metrics=True, fsync=FSYNC,
                         peer_address=network.link) as farm:
        wait_until(lambda: quiesced(farm, PARTITIONS), timeout=40, interval=0.2,
                   message=f"{PARTITIONS - 1} partitions quiesced on every node")
        assert [metric(farm, n, "garlicfarm_server_quiesced_groups")
                for n in farm.node_ids] == [PARTITIONS - 1] * 3
        pids = [farm.pid(n) for n in farm.node_ids]
        before, sent = [cpu_seconds(p) for p in pids], forwarded(network)
        start = time.monotonic()
        time.sleep(2.0)     # a measuring window, not a wait for a condition
        took = time.monotonic() - start
        rates = [(cpu_seconds(p) - b) / took for p, b in zip(pids, before)]
        rate = (forwarded(network) - sent) / took
        assert max(rates) < CPU_BOUND, f"CPU-s per s of the idle nodes: {rates}"
        assert rate < BYTES_BOUND, f"{rate:.0f} bytes/s between idle nodes"
        # a write to a quiesced partition wakes it and commits at once
        with farm.client(partition=PARTITIONS - 1, timeout=10) as client:
            start = time.monotonic()
            index, _ = client.append([b"wake up"])
            assert time.monotonic() - start < 2.0
            [record] = client.read_entries(index, index + 1)
            assert record.records == [b"wake up"]
        # ... and it quiesces again once idle
        wait_until(lambda: quiesced(farm, PARTITIONS), timeout=10, interval=0.2,
                   message="the written partition quiesced again")
        assert all(metric(farm, n, "garlicfarm_server_group_wakes_total") >= 1
                   for n in farm.node_ids)


def test_killing_the_node_that_leads_quiesced_partitions_elects_new_leaders():
    partitions = 30
    with LocalCluster(3, partitions=partitions, fsync=FSYNC) as farm:
        wait_until(lambda: quiesced(farm, partitions), timeout=30, interval=0.2,
                   message="quiesced partitions")
        led = farm.partition_leaders(farm.node_ids)
        victim = max(farm.node_ids, key=lambda n: sum(v == n for v in led.values()))
        mine = sorted(p for p, n in led.items() if n == victim and p > 0)
        assert mine, led
        farm.kill(victim)
        survivors = [n for n in farm.node_ids if n != victim]
        new = wait_until(lambda: (lambda found: found if len(found) == partitions else None)(
            farm.partition_leaders(survivors)), timeout=15, interval=0.1,
            message=f"new leaders for node {victim}'s quiesced partitions {mine}")
        assert set(new.values()) <= set(survivors)
        with farm.client(partition=mine[0], timeout=10) as client:
            client.append([b"after the kill"])


def test_a_cut_off_leader_of_quiesced_partitions_is_replaced_and_steps_down():
    partitions = 20
    with ProxyNetwork([1, 2, 3]) as network, \
            LocalCluster(3, partitions=partitions, fsync=FSYNC,
                         peer_address=network.link) as farm:
        wait_until(lambda: quiesced(farm, partitions), timeout=30, interval=0.2,
                   message="quiesced partitions")
        led = farm.partition_leaders(farm.node_ids)
        lonely = max(farm.node_ids, key=lambda n: sum(v == n for v in led.values()))
        mine = sorted(p for p, n in led.items() if n == lonely and p > 0)
        assert mine, led
        network.isolate(lonely)
        wait_until(lambda: network.proxy.stats((lonely, 1 if lonely != 1 else 2))
                   .dropped[Direction.FORWARD] > 0, timeout=5,
                   message="the isolated node's bytes dropped")
        majority = [n for n in farm.node_ids if n != lonely]
        wait_until(lambda: (lambda found: found if len(found) == partitions else None)(
            farm.partition_leaders(majority)), timeout=15, interval=0.1,
            message=f"the majority electing leaders for {mine}")
        # the cut-off node noticed it lost its quorum: it claims none of them any more
        wait_until(lambda: not farm.partition_leaders([lonely]), timeout=10, interval=0.1,
                   message=f"node {lonely} stepping down in its quiesced partitions")
        network.heal()


def test_a_partition_that_removed_its_node_goes_dormant_there_until_added_back():
    """A node taken out of one partition (`remove-server --partition 1`) keeps serving the
    others; its copy of that partition has no leader to follow and may not campaign, yet
    it ticked on (and pulled from the members) for ever: it quiesces for good, and the
    leader adding it back wakes it."""
    from consensus.admin.farm_membership import add_member, remove_member
    with LocalCluster(4, partitions=2, fsync=FSYNC, status_interval=0.5, metrics=True) as farm:
        for p in (0, 1):
            farm.wait_for_leader(timeout=30, partition=p)
        connect = lambda p: farm.client(partition=p, timeout=10)   # noqa: E731
        change = remove_member(connect, 4, partitions=[1])
        assert change.failed == [], change
        wait_until(lambda: (farm.partition_views().get(4) or [{}, {}])[1].get("quiesced"), 20,
                   interval=0.1, message="node 4's copy of partition 1 to go dormant")
        assert metric(farm, 4, "garlicfarm_server_quiesced_groups") == 1.0
        with farm.client(partition=0, timeout=10) as client:    # node 4 serves partition 0
            index, _ = client.append([b"partition 0 still has node 4"])
            wait_until(lambda: client.log_bounds(farm.endpoint_of(4))[1] >= index, 15,
                       interval=0.1, message="node 4 to apply partition 0's write")

        change = add_member(connect, 4, farm.endpoint_of(4), partitions=[1])
        assert change.failed == [], change
        with farm.client(partition=1, timeout=10) as client:
            index, _ = client.append([b"node 4 is back in partition 1"])
            wait_until(lambda: client.log_bounds(farm.endpoint_of(4))[1] >= index, 20,
                       interval=0.1, message="node 4, added back, to apply partition 1's write")


def pulls(farm: LocalCluster, node: int) -> dict[int, int]:
    """Partition -> the PullEntries `node` has sent in it (its `partitions` view)."""
    return {p["partition"]: p["pulls"] for p in farm.partition_views()[node]}


def quiet_window(farm: LocalCluster, observer: int, partitions: int,
                 seconds: float = 1.0) -> tuple[dict[int, int], dict[int, int]]:
    """The observer's pull counts before and after a counting window of `seconds` in
    which no node woke a group (a young farm's balancer still moves leaderships, and
    each move wakes a partition: such a window is counted again, at most 5 times)."""
    def woken() -> float:
        return sum(metric(farm, n, "garlicfarm_server_group_wakes_total")
                   for n in farm.node_ids)
    for _ in range(5):
        wait_until(lambda: quiesced(farm, partitions), timeout=20, interval=0.1,
                   message=f"{partitions - 1} partitions quiesced on the voters and the "
                           "observer")
        woke, before = woken(), pulls(farm, observer)
        time.sleep(seconds)     # a counting window, not a wait for a condition
        after = pulls(farm, observer)
        if woken() == woke:
            return before, after
    raise AssertionError("no window of 1 s without a partition waking in 5")


def test_an_observer_of_quiesced_partitions_stops_pulling_until_a_write_wakes_it():
    """An observer pulled every idle partition every pull interval (2 ticks) for ever:
    once the members quiesce it stops too, sends no pull at all, and a write wakes it at
    once (it catches up), after which it quiesces again."""
    partitions = 6
    with LocalCluster(3, observers=1, partitions=partitions, fsync=FSYNC,
                      metrics=True) as farm:
        [observer] = farm.observer_ids
        before, after = quiet_window(farm, observer, partitions)
        assert after[0] > before[0], "the window saw partition 0's pulls (it never quiesces)"
        assert {p: after[p] - before[p] for p in range(1, partitions)} == \
            dict.fromkeys(range(1, partitions), 0), (before, after)
        assert quiesced(farm, partitions)
        target = partitions - 1
        with farm.client(partition=target, timeout=10) as client:
            index, _ = client.append([b"wake the observer"])
            wait_until(lambda: client.log_bounds(farm.endpoint_of(observer))[1] >= index, 5,
                       interval=0.02, message="the observer to apply the write")
            [record] = client.read_entries(index, index + 1, endpoint=farm.endpoint_of(observer))
            assert record.records == [b"wake the observer"]
        wait_until(lambda: quiesced(farm, partitions), timeout=10, interval=0.1,
                   message="the written partition quiesced again, the observer too")
        assert pulls(farm, observer)[target] > after[target]


def test_an_observer_of_quiesced_partitions_wakes_when_the_members_go_silent():
    """Node-level liveness: an observer cut off from every member (its connections stay
    open, their bytes are dropped) wakes its quiesced partitions after an election
    timeout and pulls again; healed, it catches up with a write and quiesces again."""
    partitions = 4
    with ProxyNetwork([1, 2, 3, 4]) as network, \
            LocalCluster(3, observers=1, partitions=partitions, fsync=FSYNC,
                         peer_address=network.link) as farm:
        [observer] = farm.observer_ids
        wait_until(lambda: quiesced(farm, partitions), timeout=20, interval=0.1,
                   message="quiesced partitions on the voters and the observer")
        quiet = pulls(farm, observer)
        network.isolate(observer)

        def woke() -> bool:
            parts = farm.partition_views()[observer]
            return not any(p["quiesced"] for p in parts) and all(
                p["pulls"] > quiet[p["partition"]] for p in parts)
        wait_until(woke, timeout=10, interval=0.1,
                   message="the cut-off observer to wake its partitions and pull")
        network.heal()
        with farm.client(partition=1, timeout=10) as client:
            index, _ = client.append([b"after the silence"])
            wait_until(lambda: client.log_bounds(farm.endpoint_of(observer))[1] >= index, 10,
                       interval=0.05, message="the healed observer to apply the write")
        wait_until(lambda: quiesced(farm, partitions), timeout=15, interval=0.1,
                   message="everything quiesced again")
